"""Every view of the app, on a model whose labels, class folders and paths hold `<img width=30000 ...>`, `<b>` and
the longest names a checkpoint may hold (and a dataset entry of 200,000 characters), shows them as written and
bounded: a walk over every widget and figure item of every view of the main window (a new view is walked with no
new code), in a child under a memory limit (an <img> rendered took 4.3 GB and a SIGSEGV)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image

from vit_explorer.checkpoints import Preprocess, save_native
from vit_explorer.checkpoints.fields import MAX_STR
from vit_explorer.models import VisionTransformer, preset
from vit_explorer.text import MAX_TEXT

from .screen_text import MARK
from .test_untrusted_text import run_limited

IMG = f"{MARK}<img src=x width=30000 height=30000>"
HOSTILE = [IMG, f"{MARK}<b>bold</b>", "y" * MAX_STR, "two\\nlines", f"{MARK}<i>cat"]  # a label has at most MAX_STR
FOLDERS = [IMG, f"{MARK}<b>bold", f"{MARK}<i>cat", "z" * 200]  # a folder name has no "/"


def hostile_checkpoint(folder: Path) -> Path:
    """A tiny model whose classes rank in label order (the <img> label is the top class) and whose folder is named
    like HTML."""
    torch.manual_seed(0)
    model = VisionTransformer(preset("classroom-tiny", num_classes=len(HOSTILE))).eval()
    with torch.no_grad():
        model.head.weight.mul_(1e-3)
        model.head.bias.copy_(torch.linspace(4.0, 0.0, len(HOSTILE)))
    labels = [name.replace("\\n", "\n") for name in HOSTILE]
    pre = Preprocess(model.config.image_size, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
    return save_native(folder / f"{MARK}<b>bold</b> model", model, labels, pre)


def hostile_classes(folder: Path) -> None:
    rng = np.random.default_rng(0)
    for name in FOLDERS:
        (folder / name).mkdir(parents=True)
        for i in range(5):
            Image.fromarray(rng.integers(0, 256, (24, 24, 3), dtype=np.uint8)).save(folder / name / f"{i}.png")


def test_every_view_shows_a_files_text_as_written_and_bounded(tmp_path: Path) -> None:
    source = hostile_checkpoint(tmp_path / "models")
    hostile_classes(tmp_path / "classes")
    seen = run_limited("every-view", source, tmp_path, timeout=600)
    assert {"Prediction", "Explain", "Dataset", "Components"} <= set(seen["views"]), seen["views"]
    assert seen["problems"] == {}, seen["problems"]
    assert seen["heading"].startswith(f"class 0 '{IMG}'"), seen["heading"]  # the Explain view's, as written
    escaped = [name.replace("<", "&lt;").replace(">", "&gt;") for name in sorted(FOLDERS)]
    assert seen["legend"] == escaped, seen["legend"]  # the projector's legend: HTML to pyqtgraph, escaped
    assert seen["hover"].split("/")[0] in FOLDERS, seen["hover"]
    assert seen["note"].startswith("the analysis failed: ") and len(seen["note"]) <= MAX_TEXT, seen["note"][:200]
