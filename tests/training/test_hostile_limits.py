"""Inputs that once exhausted memory or never ended, run in a child process that may allocate at most
2 GiB beyond what importing torch maps: each is refused in seconds, with one line, exit code 2, and
a peak resident size under 2 GB."""

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from vit_explorer.training.state import STATE_NAME

from .conftest import TINY

ROOT = Path(__file__).resolve().parents[2]
CHILD = """
import os, resource, sys
import torch  # what importing torch maps is not counted: the limit is on what the command allocates
from vit_explorer.cli import main
with open("/proc/self/statm") as f:
    mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
resource.setrlimit(resource.RLIMIT_AS, (mapped + 2 * 2**30, resource.RLIM_INFINITY))
try:
    code = main(["train", *sys.argv[1:]])
except SystemExit as exit:
    code = exit.code
finally:  # this process's own peak (the rusage of a child also counts its parent's size when it forked)
    with open("/proc/self/status") as f:
        print(next(line for line in f if line.startswith("VmHWM:")).split()[1], flush=True)  # kB
sys.exit(code)
"""


def _run_limited(args: list[str], timeout: float = 240.0) -> tuple[int, str, float, int]:
    """(exit code, stderr, seconds, peak resident bytes) of `vit-explorer train ARGS` in a limited child."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", CHILD, *args], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    timer = threading.Timer(timeout, child.kill)  # a hang fails the test instead of stalling the run
    timer.start()
    out, err = child.communicate()
    timer.cancel()
    peak_kb = int(out.strip().splitlines()[-1]) if out.strip() else 0  # nothing printed: killed
    return child.returncode, err, time.perf_counter() - start, peak_kb * 1024


def _saved_run_asking_for(tmp_path: Path, **data: object) -> Path:
    from vit_explorer.cli import main

    out = tmp_path / "run"
    assert main(["train", *TINY, "--steps", "1", "--out", str(out)]) == 0
    (out / "vit_explorer.json").unlink()
    state = torch.load(out / STATE_NAME, weights_only=True)
    state["data"].update(data)
    state["config"]["image_size"] = state["data"]["image_size"]
    torch.save(state, out / STATE_NAME)
    return out


LIMITS: list[tuple[str, list[str], tuple[str, ...]]] = [
    ("attention at 1024 pixels", [*TINY, "--steps", "1", "--image-size", "1024"], ("--image-size", "attention map")),
    ("a million built-in images at 256 pixels",
     ["--preset", "vit-ti16", "--image-size", "256", "--train-size", "1000000", "--val-size", "16", "--steps", "1"],
     ("drawing 1,000,016 built-in images", "--train-size")),
    ("a time budget of forever", [*TINY, "--time-budget", "inf"], ("--time-budget", "got inf")),
    ("epochs without end", [*TINY, "--epochs", "1e300"], ("--epochs",)),
    ("a train size of a billion", [*TINY, "--steps", "1", "--train-size", "1000000000"], ("--train-size",)),
]


@pytest.mark.slow
@pytest.mark.parametrize("case,args,fragments", LIMITS, ids=[c for c, _, _ in LIMITS])
def test_refused_in_bounded_memory_and_time(case: str, args: list[str], fragments: tuple[str, ...],
                                            tmp_path: Path) -> None:
    code, err, seconds, peak = _run_limited([*args, "--out", str(tmp_path / "run")])
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("vit-explorer train: error: "), err[-2000:]
    assert all(fragment in lines[0] for fragment in fragments), lines[0]
    assert seconds < 200 and peak < 2e9, (seconds, peak)  # no hang (killed at 240 s), bounded memory
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_resumed_state_asking_for_huge_data_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    out = _saved_run_asking_for(tmp_path, image_size=[64, 64], train_size=1_000_000)
    before = sorted(p.name for p in out.iterdir())
    code, err, seconds, peak = _run_limited(["--resume", "--out", str(out)])
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and str(out / STATE_NAME) in lines[0] and "drawing" in lines[0], err[-2000:]
    assert seconds < 200 and peak < 2e9, (seconds, peak)  # no hang (killed at 240 s), bounded memory
    assert sorted(p.name for p in out.iterdir()) == before
    shutil.rmtree(out)
