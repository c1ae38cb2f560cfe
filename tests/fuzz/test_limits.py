"""The heavy cases (FIFOs, /dev/zero, decompression bombs, huge headers and allocations) in a separate
process limited to 2 GiB more address space than torch's own, with a per-case alarm: each is refused
clearly, none hangs, and the process's peak resident memory stays under 2 GiB."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from corpus import CASES

HEAVY = [case.name for case in CASES if case.heavy]
PEAK = 2 * 2**30


def test_heavy_cases_in_a_memory_limited_process(valid_sources: Path, tmp_path: Path) -> None:
    script = Path(__file__).with_name("limited.py")
    result = subprocess.run([sys.executable, str(script), str(valid_sources), str(tmp_path), *HEAVY],
                            capture_output=True, text=True, timeout=60 + 25 * len(HEAVY))
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    done = {line["case"]: line for line in lines if "case" in line}
    started = [line["start"] for line in lines if "start" in line]
    assert result.returncode == 0 and set(done) == set(HEAVY), (
        f"exit {result.returncode}; last case started: {started[-1:]}; stderr: {result.stderr[-3000:]}")
    failures = {name: line["problems"] for name, line in done.items() if line["problems"]}
    assert not failures, failures
    peak = max(line["peak_rss"] for line in done.values())
    assert peak < PEAK, f"peak resident memory {peak / 2**30:.2f} GiB"
