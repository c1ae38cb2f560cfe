"""`train`'s output folder under pressure: a second run on the same --out while one runs, a full disk
reported by torch's zip writer, and a progress bar switched off by TQDM_DISABLE."""

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import vit_explorer
from vit_explorer.training.checkpoint import LOCK_NAME
from vit_explorer.training.state import STATE_NAME

from .conftest import TINY, assert_refused, run_train, snapshot

ROOT = Path(__file__).resolve().parents[2]


def _error_lines(err: str) -> list[str]:
    return [line for line in err.replace("\r", "\n").splitlines() if "error:" in line]


def test_tqdm_disabled_by_the_environment_trains(tmp_path: Path) -> None:
    # tqdm reads TQDM_DISABLE when it is imported, so the run is a child with it in its environment
    env = {**os.environ, "TQDM_DISABLE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    script = ("import sys; from vit_explorer.cli import main; "
              "sys.exit(main(['train', *sys.argv[1:]]) or main(['train', *sys.argv[1:-4], '--time-budget', '0.5', "
              "'--out', sys.argv[-1] + '-timed']))")  # a bar counting steps, then one counting seconds
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-c", script, *TINY, "--steps", "2", "--out", str(out)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("finished") == 2 and "Traceback" not in done.stderr
    for folder in (out, tmp_path / "run-timed"):
        assert vit_explorer.load(str(folder)).config.image_size == (16, 16)


def test_a_second_run_on_a_folder_in_use_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    out.mkdir()
    holder = subprocess.Popen(  # another run holding the folder: a process with the lock taken
        [sys.executable, "-c", "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
         "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()", str(out / LOCK_NAME)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        outcome = run_train([*TINY, "--steps", "1", "--out", str(out)], capsys)
        assert_refused(outcome, str(out), "another `vit-explorer train` is writing to this folder")
        assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]  # nothing written beside the holder's lock
    finally:
        holder.kill()
        holder.wait()
    # the holder died without releasing anything: its lock file is left, but the OS freed the lock
    outcome = run_train([*TINY, "--steps", "1", "--out", str(out)], capsys)
    assert outcome.code == 0, outcome.err[-2000:]
    assert not (out / LOCK_NAME).exists() and vit_explorer.load(str(out)).config.image_size == (16, 16)


def test_a_run_holds_its_folder_while_it_trains(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    real_save = torch.save
    seen = []

    def save_and_try_the_lock(*args: object, **kwargs: object) -> None:  # in the middle of the run
        fd = os.open(out / LOCK_NAME, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            seen.append(True)
        finally:
            os.close(fd)
        real_save(*args, **kwargs)

    monkeypatch.setattr("torch.save", save_and_try_the_lock)
    assert run_train([*TINY, "--steps", "1", "--out", str(out)], capsys).code == 0
    assert seen and not (out / LOCK_NAME).exists()


def test_a_refused_run_leaves_no_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    outcome = run_train([*TINY, "--steps", "1", "--batch-size", "1000", "--out", str(out)], capsys)
    assert_refused(outcome, "fewer than one batch")
    assert not out.exists()


def test_full_disk_under_torch_save_stops_with_a_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """What torch's zip writer raises when the disk fills under it (a plain ENOSPC, and resuming after it:
    test_hostile_files.py) names the cause and the free space, not inline_container."""
    out = tmp_path / "run"
    real_save = torch.save
    calls = []

    def fills_up(*args: object, **kwargs: object) -> None:
        calls.append(1)
        if len(calls) > 1:
            # what torch.save raises when the disk fills up under it
            raise RuntimeError("[enforce fail at inline_container.cc:603] . unexpected pos 5120 vs 5010")
        real_save(*args, **kwargs)

    monkeypatch.setattr("torch.save", fills_up)
    outcome = run_train([*TINY, "--steps", "12", "--checkpoint-every", "0", "--out", str(out)], capsys)
    monkeypatch.undo()
    errors = _error_lines(outcome.err)
    assert outcome.code == 1 and len(errors) == 1 and "Traceback" not in outcome.err, outcome.err[-2000:]
    assert errors[0].startswith(f"vit-explorer train: error: cannot write the checkpoint of step 12 to {out} (")
    assert "unexpected pos 5120 vs 5010;" in errors[0] and "its checkpoint of step 10 is kept" in errors[0], errors[0]
    assert "inline_container" not in errors[0] and "free on its disk" in errors[0]
    kept = snapshot(out)
    assert sorted(kept) == sorted(["model.safetensors", "vit_explorer.json", STATE_NAME])  # no temporaries, no lock
    assert torch.load(out / STATE_NAME, weights_only=True)["step"] == 10
    assert vit_explorer.load(str(out)).config.image_size == (16, 16)


def test_other_runtime_errors_of_the_writer_are_not_taken_for_a_full_disk(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from vit_explorer.training.checkpoint import write_checkpoint

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug, not a disk")

    monkeypatch.setattr("torch.save", broken)
    model = vit_explorer.models.VisionTransformer(vit_explorer.models.preset("classroom-tiny"))
    from vit_explorer.checkpoints.preprocess import Preprocess

    with pytest.raises(RuntimeError, match="a bug, not a disk"):
        write_checkpoint(tmp_path, model, ["a"], Preprocess((32, 32)), {}, {"x": 1}, replaces_run=True)
    assert list(tmp_path.iterdir()) == []
