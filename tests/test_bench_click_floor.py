"""bench/bench_click_floor.py runs unchanged in a short form (two clicks on the bundled model) and prints its
figures: the reference, the forward pass's ratio and the floor's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_floor_bench_prints_its_ratios() -> None:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_click_floor.py"), "--clicks", "2"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    line = done.stdout.strip().splitlines()[-1]
    found = re.search(r"timm's forward ([\d.]+) ms .* \(([\d.]+)x\); .* floor ([\d.]+)x", line)
    assert found is not None, line
    reference, forward, floor = map(float, found.groups())
    assert reference > 0 and forward > 0 and floor > 0
