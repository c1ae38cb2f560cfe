"""The Dataset view on hostile input, in a child under a memory limit and an alarm (tests/gui/limited_app.py): a
million images (the spin box allows it), a folder of three images, identical images projected by t-SNE and UMAP.
Each ends with a note that says why, and the window lives on. The Explain and Components views' hostile text is
walked for every view by tests/gui/test_plain_text.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from vit_explorer.checkpoints import Preprocess, save_native
from vit_explorer.models import VisionTransformer, preset

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "tests" / "gui" / "limited_app.py"


def _images(folder: Path, classes: int, each: int, same: bool) -> None:
    for c in range(classes):
        (folder / f"c{c}").mkdir(parents=True)
        for i in range(each):
            colour = (200, 10, 10) if same else (40 * i % 256, 80 * c % 256, 7 * i % 256)
            Image.new("RGB", (32, 32), colour).save(folder / f"c{c}" / f"{i}.png")


def test_the_dataset_view_says_why_on_hostile_data(tmp_path: Path) -> None:
    model = VisionTransformer(preset("classroom-tiny")).eval()
    source = save_native(tmp_path / "model", model, [f"class {i}" for i in range(10)], Preprocess((32, 32)))
    _images(tmp_path / "three", 3, 1, same=False)
    _images(tmp_path / "same", 2, 6, same=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VIT_EXPLORER_CACHE": str(tmp_path / "cache")}
    try:
        done = subprocess.run([sys.executable, str(APP), "dataset-inputs", str(source), str(tmp_path)],
                              capture_output=True, text=True, timeout=400, env=env, cwd=tmp_path)
    except subprocess.TimeoutExpired:
        pytest.fail("the Dataset view did not come back within 400 s")
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-3000:]}"
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    said = seen["said"]
    assert "the pixels of 1,000,000 images need about" in said["million"] and "at most" in said["million"], said
    assert "CKA of 3 image(s) says nothing" in said["three"], said
    assert "all the same" in said["tsne"] and "all the same" in said["umap"], said
    assert seen["grown"] < 2**30, seen
