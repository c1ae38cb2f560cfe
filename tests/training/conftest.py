"""Tiny models and datasets so that every training test runs in seconds on two CPU cores."""

import time
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import torch

from vit_explorer.cli import main
from vit_explorer.data.datasets import TensorImages, TrainingData, load_data
from vit_explorer.models import ViTConfig
from vit_explorer.models.presets import preset


def tiny_config(**overrides: object) -> ViTConfig:
    return preset("classroom-tiny", **{"image_size": 16, "embed_dim": 32, "depth": 1, "num_heads": 2, **overrides})


@pytest.fixture(scope="session")
def colour_data() -> TrainingData:
    """An easy 4-class set (each class a colour plus noise): the loss must fall within a few steps."""
    g = torch.Generator().manual_seed(0)
    labels = torch.arange(256) % 4
    palette = torch.tensor([[230, 30, 30], [30, 230, 30], [30, 30, 230], [230, 230, 30]], dtype=torch.float32)
    images = palette[labels].view(-1, 3, 1, 1) + 40 * torch.randn(256, 3, 16, 16, generator=g)
    images = images.clamp(0, 255).to(torch.uint8)
    base = load_data("shapes", image_size=(16, 16), train_size=1, val_size=1)
    return replace(base, train=TensorImages(images[:192], labels[:192]), val=TensorImages(images[192:], labels[192:]),
                   labels=["red", "green", "blue", "yellow"])


@pytest.fixture(scope="session")
def tiny_data() -> TrainingData:
    return load_data("shapes", image_size=(16, 16), seed=0, train_size=256, val_size=64)


TINY = ["--preset", "classroom-tiny", "--image-size", "16", "--train-size", "64", "--val-size", "16",
        "--batch-size", "32"]


@dataclass
class Outcome:
    code: int | str | None
    out: str
    err: str
    seconds: float


def run_train(args: list[str], capsys: pytest.CaptureFixture[str]) -> Outcome:
    """`vit-explorer train ARGS` in this process: exit code, printed text and time taken."""
    capsys.readouterr()
    start = time.perf_counter()
    try:
        code: int | str | None = main(["train", *args])
    except SystemExit as exit:  # argparse exits with 2 on a flag it cannot parse
        code = exit.code
    printed = capsys.readouterr()
    return Outcome(code, printed.out, printed.err, time.perf_counter() - start)


def assert_refused(outcome: Outcome, *fragments: str, within: float = 60.0) -> None:
    """Exit code 2, one line on stderr that starts as the CLI's errors do and holds every fragment, no
    traceback, and no hang (`within` is a guard generous enough for a loaded machine, not a speed target)."""
    lines = outcome.err.strip().splitlines()
    assert outcome.code == 2, (outcome.code, outcome.err[-2000:])
    assert len(lines) == 1 and lines[0].startswith("vit-explorer train: error: "), outcome.err[-2000:]
    assert "Traceback" not in outcome.err + outcome.out
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert outcome.seconds < within, outcome.seconds


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` by relative path, to show that nothing was written or lost."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
