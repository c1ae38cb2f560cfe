"""Work is never lost or mixed up by the run folder's files: a kill at any moment of a checkpoint
write, leftovers of interrupted writes, a full disk, and unreadable images (decompression bombs
among them) inside an image folder."""

import errno
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import torch
from PIL import Image

import vit_explorer
from vit_explorer.checkpoints.errors import CheckpointError
from vit_explorer.checkpoints.native import CONFIG_NAME, WEIGHTS_NAME
from vit_explorer.data import folder
from vit_explorer.data.images import ImageError, open_image
from vit_explorer.training.state import STATE_NAME

from .conftest import TINY, Outcome, run_train, snapshot

ROOT = Path(__file__).resolve().parents[2]
OTHER = ["--preset", "classroom", *TINY[2:]]  # another architecture than TINY's classroom-tiny


def _error_lines(outcome: Outcome) -> list[str]:
    """The error lines among stderr's (tqdm's bar shares stderr, its updates separated by carriage returns)."""
    return [line for line in outcome.err.replace("\r", "\n").splitlines() if "error:" in line]


def _leftovers(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if p.name.startswith("."))


def test_leftovers_of_interrupted_writes_are_removed_by_the_next_run(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert run_train([*TINY, "--steps", "1", "--out", str(out)], capsys).code == 0
    for name in (f".{WEIGHTS_NAME}.k2j3h4.tmp", f".{CONFIG_NAME}.x8s7d6.tmp", f".{STATE_NAME}.q1w2e3.tmp"):
        (out / name).write_bytes(b"half a file")
    (out / ".checkpoint-a1b2c3.tmp").mkdir()
    (out / ".checkpoint-a1b2c3.tmp" / WEIGHTS_NAME).write_bytes(b"half")
    (out / "notes.txt").write_text("mine")  # not ours: kept
    outcome = run_train(["--resume", "--out", str(out)], capsys)
    assert outcome.code == 0 and "removed what an interrupted checkpoint write left" in outcome.out
    assert _leftovers(out) == [] and (out / "notes.txt").read_text() == "mine"
    (out / f".{WEIGHTS_NAME}.zz.tmp").write_bytes(b"again")
    assert run_train([*TINY, "--steps", "1", "--overwrite", "--out", str(out)], capsys).code == 0
    assert _leftovers(out) == []


def test_an_overwrite_without_state_removes_the_old_runs_state(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert run_train([*TINY, "--steps", "1", "--out", str(out)], capsys).code == 0
    assert run_train([*OTHER, "--steps", "1", "--no-state", "--overwrite", "--out", str(out)], capsys).code == 0
    # the old state beside the new weights would let --resume continue the old run over them
    assert not (out / STATE_NAME).exists() and vit_explorer.load(str(out)).config.embed_dim == 96
    assert "no training state" in run_train(["--resume", "--out", str(out)], capsys).err


def _full_disk(*args: object, **kwargs: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


WRITERS = {  # where a full disk can strike during a checkpoint
    "training state": "torch.save",
    "weights": "vit_explorer.checkpoints.native.save_file",
    "description": "pathlib.Path.write_text",
}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_full_disk_on_the_first_checkpoint_keeps_the_old_run(writer: str, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert run_train([*TINY, "--steps", "1", "--out", str(out)], capsys).code == 0
    before = snapshot(out)
    monkeypatch.setattr(WRITERS[writer], _full_disk)
    outcome = run_train([*OTHER, "--steps", "2", "--overwrite", "--out", str(out)], capsys)
    monkeypatch.undo()
    errors = _error_lines(outcome)
    assert outcome.code == 1 and len(errors) == 1 and "Traceback" not in outcome.err
    assert errors[0].startswith("vit-explorer train: error: cannot write the checkpoint of step 2 to " + str(out))
    assert "No space left on device" in errors[0] and "nothing was written and the folder is as it was" in errors[0]
    assert snapshot(out) == before and _leftovers(out) == []  # the old run is whole, no temporaries
    assert vit_explorer.load(str(out)).config.embed_dim == 64  # and still loads as the old run


def test_full_disk_on_a_later_checkpoint_keeps_the_previous_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    real_save = torch.save
    calls = []

    def fills_up(*args: object, **kwargs: object) -> None:
        calls.append(1)
        if len(calls) > 1:
            _full_disk()
        real_save(*args, **kwargs)

    monkeypatch.setattr("torch.save", fills_up)
    # a Step event (and a checkpoint, at --checkpoint-every 0) every 10 steps, and one at the end
    outcome = run_train([*TINY, "--steps", "12", "--checkpoint-every", "0", "--out", str(out)], capsys)
    monkeypatch.undo()
    errors = _error_lines(outcome)
    assert outcome.code == 1 and len(errors) == 1
    assert "step 12" in errors[0] and "its checkpoint of step 10 is kept" in errors[0]
    assert "continue with --resume" in errors[0]
    assert _leftovers(out) == [] and torch.load(out / STATE_NAME, weights_only=True)["step"] == 10
    assert run_train(["--resume", "--out", str(out)], capsys).code == 0  # space freed: the run goes on
    assert torch.load(out / STATE_NAME, weights_only=True)["step"] == 12


KILLER = """
import os, pathlib, sys
import torch
import vit_explorer.checkpoints.native as native
K, count = int(sys.argv[1]), 0
def counted(fn):
    def wrapper(*args, **kwargs):
        global count
        count += 1
        if count == K:
            os._exit(137)  # as SIGKILL: no finally blocks, no cleanup
        return fn(*args, **kwargs)
    return wrapper
os.replace, os.unlink, torch.save = counted(os.replace), counted(os.unlink), counted(torch.save)
native.save_file, pathlib.Path.write_text = counted(native.save_file), counted(pathlib.Path.write_text)
from vit_explorer.cli import main
code = main(["train", *sys.argv[2:]])
print("file operations:", count)
sys.exit(code)
"""


def _killed_at(k: int, args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", KILLER, str(k), *args], env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.slow
def test_a_kill_at_any_file_operation_of_an_overwrite_never_mixes_two_runs(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    template = tmp_path / "old"
    assert run_train([*TINY, "--steps", "1", "--out", str(template)], capsys).code == 0
    old = vit_explorer.load(str(template))
    killed = []
    for k in range(1, 30):
        out = tmp_path / f"k{k}"
        out.mkdir()
        for path in template.iterdir():
            (out / path.name).write_bytes(path.read_bytes())
        done = _killed_at(k, [*OTHER, "--steps", "1", "--overwrite", "--out", str(out)])
        try:
            loaded = vit_explorer.load(str(out))
        except CheckpointError as error:  # between removing the old description and writing the new one
            assert CONFIG_NAME in str(error) and "do not match" not in str(error), (k, str(error))
        else:  # the old run (classroom-tiny, D=64), whole, or the new one (classroom, D=96): never a mix
            assert loaded.config.embed_dim in (64, 96), k
            if loaded.config.embed_dim == 64:
                assert all(torch.equal(v, old.model.state_dict()[n]) for n, v in loaded.model.state_dict().items())
        if done.returncode == 0:
            assert "file operations:" in done.stdout
            break
        assert done.returncode == 137, done.stderr[-2000:]
        killed.append(out)
    assert len(killed) > 5
    for out in killed:  # whatever a kill left, --resume continues a whole run and clears the leftovers
        assert run_train(["--resume", "--out", str(out)], capsys).code == 0, out
        assert _leftovers(out) == [] and vit_explorer.load(str(out)).config.num_classes == 10


def _bomb_png(path: Path, side: int = 100_000) -> None:
    """A small PNG whose header declares side x side pixels: Pillow refuses it as a decompression bomb."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\x00" * 64))
                     + chunk(b"IEND", b""))


def _folder_with(tmp_path: Path, bad: str) -> Path:
    root = tmp_path / "images"
    for c, name in enumerate(("a", "b")):
        (root / name).mkdir(parents=True)
        for i in range(8):
            Image.new("RGB", (16, 16), (200 * c, 40, 90)).save(root / name / f"{i}.png")
    _bomb_png(root / "b" / bad)
    return root


def _train_then_resume_skips(root: Path, out: Path, capsys: pytest.CaptureFixture[str], bad: str) -> None:
    args = [*TINY[:4], "--batch-size", "4", "--dataset", str(root), "--out", str(out)]
    first = run_train([*args, "--steps", "4"], capsys)
    assert first.code == 0 and f"skipped an unreadable image: {root / 'b' / bad}" in first.out
    tampered = torch.load(out / STATE_NAME, weights_only=True)
    tampered["recipe"]["steps"] = 8  # the resumed run goes round the epoch again, past the bomb
    torch.save(tampered, out / STATE_NAME)
    again = run_train(["--resume", "--out", str(out)], capsys)
    assert again.code == 0 and "finished (completed) after 8 steps" in again.out and bad in again.out


def test_an_image_that_fails_to_decode_is_skipped_on_train_and_resume(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    # the contract with data/images.py: a bomb, like any unreadable image, raises ImageError
    def opens(path: str | os.PathLike[str]) -> Image.Image:
        if Path(path).name == "z_bomb.png":
            raise ImageError(f"{path}: decompression bomb (declares 10,000,000,000 pixels)")
        return open_image(path)

    monkeypatch.setattr(folder, "open_image", opens)
    _train_then_resume_skips(_folder_with(tmp_path, "z_bomb.png"), tmp_path / "run", capsys, "z_bomb.png")


def test_a_real_decompression_bomb_in_a_folder_is_skipped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _folder_with(tmp_path, "z_bomb.png")
    try:
        open_image(root / "b" / "z_bomb.png")
    except ImageError:
        pass
    except Image.DecompressionBombError:
        pytest.skip("needs data.images.open_image to raise ImageError for decompression bombs (hardening branch)")
    _train_then_resume_skips(root, tmp_path / "run", capsys, "z_bomb.png")
