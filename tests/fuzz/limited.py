"""Run corpus cases in this process under a memory limit and a per-case alarm; print one JSON line per
case. Used by test_limits.py as `python limited.py VALID SCRATCH NAME...`.

The address-space limit is what this process already maps (torch alone maps about 3 GiB of
libraries) plus LIMIT_BYTES, so a case that tries to allocate more fails instead of swapping.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
os.environ["HF_HUB_OFFLINE"] = "1"

import torch  # noqa: E402
from corpus import CASES  # noqa: E402
from runner import judge  # noqa: E402

import vit_explorer.cli  # noqa: E402, F401  (imported before the limit, like torch)

LIMIT_BYTES = 2 * 2**30
ALARM_SECONDS = 120  # a hang guard, generous for a loaded machine (cases take well under a second)


def _status(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


class Hang(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise Hang(f"still running after {ALARM_SECONDS} s")


def main() -> None:
    valid, scratch, names = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
    torch.set_num_threads(1)
    resource.setrlimit(resource.RLIMIT_AS, (_status("VmSize:") + LIMIT_BYTES, resource.RLIM_INFINITY))
    signal.signal(signal.SIGALRM, _alarm)
    baseline = _status("VmRSS:")
    for case in (c for c in CASES if c.name in names):
        root = scratch / case.name.replace("/", "_")
        root.mkdir(parents=True)
        print(json.dumps({"start": case.name}), flush=True)
        signal.alarm(ALARM_SECONDS)
        try:
            problems = judge(case, valid, root, seconds_allowed=ALARM_SECONDS)
        except BaseException as error:  # a hang, or anything that escaped the CLI
            problems = [f"{type(error).__name__}: {error}", traceback.format_exc()[-1500:]]
        finally:
            signal.alarm(0)
        print(json.dumps({"case": case.name, "problems": problems, "peak_rss": _status("VmHWM:"),
                          "baseline_rss": baseline}), flush=True)


if __name__ == "__main__":
    main()
