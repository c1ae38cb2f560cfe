"""Exports of every view (PNG and CSV) onto what is not a regular file: a named pipe froze the window for good.
Each is refused with a message naming the path, within seconds, and nothing is left behind (no temporary file,
the pipe and the folder as they were). The window runs in a child (tests/gui/limited_app.py) under a time limit:
a blocked write would hang this process too."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from vit_explorer.checkpoints import Preprocess, save_native
from vit_explorer.models import VisionTransformer, preset

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "tests" / "gui" / "limited_app.py"


def test_every_views_export_writes_only_regular_files(tmp_path: Path) -> None:
    model = VisionTransformer(preset("classroom-tiny")).eval()
    source = save_native(tmp_path / "model", model, [f"class {i}" for i in range(10)], Preprocess((32, 32)))
    Image.new("RGB", (8, 8)).save(tmp_path / "x.png")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        done = subprocess.run([sys.executable, str(APP), "exports", str(source), str(tmp_path)], capture_output=True,
                              text=True, timeout=600, env=env, cwd=tmp_path)
    except subprocess.TimeoutExpired:
        pytest.fail("an export blocked: the window did not come back within 600 s")
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(seen["outcomes"]) >= 8 * 10, sorted(seen["outcomes"])  # every view, 2 kinds x 4 targets
    slow = {what: said for what, said in seen["outcomes"].items() if float(said.split("s ", 1)[0]) > 30}
    assert not slow, slow
    written = {what: said for what, said in seen["outcomes"].items() if said.endswith(" written")}
    assert not written, written
    for what, said in seen["outcomes"].items():
        target = what.rsplit(" ", 1)[1]
        expected = {"pipe": "is a named pipe", "link": "is a named pipe", "folder": "is a folder",
                    "file/x": "Not a directory"}[target]
        if what.split(" ")[1] == "csv" and said.endswith("has no numbers to export yet"):
            continue  # a view without a table refuses every CSV first
        assert expected in said and "targets/" in said, (what, said)
    assert seen["kinds"] == {"pipe": stat.S_IFIFO, "link": stat.S_IFLNK, "folder": stat.S_IFDIR, "file": stat.S_IFREG}
    assert seen["left"] == ["file", "folder", "link", "pipe"] and seen["in_folder"] == []  # no temporary file left
