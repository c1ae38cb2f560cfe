"""`torchrun --nproc_per_node=2 -m vit_explorer train` on CPU (gloo) follows the same loss curve
as one process with the same global batch.

torchrun runs with --standalone: its rendezvous store binds port 0 and the workers share it. A port
picked beforehand (bind to 0, read the number, close, hand it to --master_port) could be taken by
another process in between, which made this test fail now and then."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ARGS = ["train", "--preset", "classroom-tiny", "--image-size", "16", "--train-size", "256", "--val-size", "64",
        "--steps", "6", "--batch-size", "32", "--lr", "3e-3", "--warmup", "0.2"]


def _history(out: Path) -> list[list[float]]:
    return json.loads((out / "vit_explorer.json").read_text())["training"]["history"]


@pytest.mark.slow
def test_two_processes_follow_the_one_process_loss_curve(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    one = subprocess.run([sys.executable, "-m", "vit_explorer", *ARGS, "--out", str(tmp_path / "one")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                          "-m", "vit_explorer", *ARGS, "--out", str(tmp_path / "two")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert two.returncode == 0, two.stderr
    assert "x2" in two.stdout and two.stdout.count("training classroom-tiny") == 1  # only rank 0 logs
    a, b = _history(tmp_path / "one"), _history(tmp_path / "two")
    assert len(a) == len(b) > 0
    for (step_a, loss_a, _), (step_b, loss_b, _) in zip(a, b, strict=True):
        assert step_a == step_b and loss_a == pytest.approx(loss_b, rel=1e-4)
