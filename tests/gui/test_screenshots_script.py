"""scripts/screenshots.py measures what a person who has just installed the app sees (issue 27 item 8): a text size
that Ctrl+plus left in the user's settings made one stop's lesson measurements those of a zoomed lesson."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_screenshots_open_with_a_fresh_installations_settings_not_the_users(tmp_path: Path) -> None:
    settings = tmp_path / "config" / "vit-explorer" / "vit-explorer.conf"
    settings.parent.mkdir(parents=True)
    settings.write_text("[General]\ntext_scale=2.0\n")  # two Ctrl+plus and more, remembered
    env = {**os.environ, "PYTHONPATH": str(ROOT), "QT_QPA_PLATFORM": "offscreen", "HF_HUB_OFFLINE": "1",
           "XDG_CONFIG_HOME": str(tmp_path / "config")}
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "screenshots.py"), "--out", str(tmp_path / "shots"),
                           "--size", "1024x768", "--views", "Heads", "--train-steps", "0", "--mask", "0"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (shot,) = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert shot["shot"] == "heads.png" and shot["text_scale"] == 1.0, shot
    assert (tmp_path / "shots" / "heads.png").stat().st_size > 10_000
    assert settings.read_text() == "[General]\ntext_scale=2.0\n"  # theirs, untouched
