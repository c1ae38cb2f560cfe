"""`vit-explorer train` end to end, in process."""

from pathlib import Path

import pytest
import torch

import vit_explorer
from vit_explorer.cli import main
from vit_explorer.training.trainer import STATE_NAME

TINY = ["--preset", "classroom-tiny", "--image-size", "16", "--train-size", "128", "--val-size", "32",
        "--batch-size", "32"]


def test_train_then_resume_then_open(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["train", *TINY, "--steps", "3", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "finished (completed) after 3 steps" in printed and "validation accuracy" in printed
    loaded = vit_explorer.load(str(out))
    assert loaded.labels[0] == "circle" and loaded.config.image_size == (16, 16)
    # a finished run resumed does no more steps and keeps the same weights
    assert main(["train", "--resume", "--out", str(out)]) == 0
    assert "after 3 steps" in capsys.readouterr().out
    resumed = vit_explorer.load(str(out)).model.state_dict()
    assert all(torch.equal(v, resumed[k]) for k, v in loaded.model.state_dict().items())


def test_a_saved_run_is_never_overwritten_by_accident(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["train", *TINY, "--steps", "1", "--out", str(out)]) == 0
    weights = (out / "model.safetensors").read_bytes()
    capsys.readouterr()
    assert main(["train", *TINY, "--steps", "2", "--out", str(out)]) == 2
    assert "already holds a trained model" in capsys.readouterr().err
    assert (out / "model.safetensors").read_bytes() == weights
    # --resume continues with the saved settings: other flags are refused, not silently dropped
    assert main(["train", "--resume", "--steps", "5", "--out", str(out)]) == 2
    assert "drop --steps" in capsys.readouterr().err
    assert main(["train", *TINY, "--steps", "2", "--overwrite", "--out", str(out)]) == 0
    assert "after 2 steps" in capsys.readouterr().out


def test_no_state_and_pe_override(tmp_path: Path) -> None:
    assert main(["train", *TINY, "--steps", "1", "--pos-embed", "none", "--no-state", "--out", str(tmp_path)]) == 0
    assert not (tmp_path / STATE_NAME).exists()
    assert vit_explorer.load(str(tmp_path)).config.pos_embed == "none"


def test_bad_inputs_exit_with_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", *TINY, "--steps", "1", "--dataset", str(tmp_path / "missing"), "--out", str(tmp_path)]) == 2
    assert "no such folder" in capsys.readouterr().err
    assert main(["train", "--resume", "--out", str(tmp_path / "nothing")]) == 2
    assert "no training state" in capsys.readouterr().err
