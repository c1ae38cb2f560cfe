"""The app in a child process on an offscreen screen of a projector's size, as a person would see it there: the
code a child runs starts with APP (the window on the bundled model, `settle()` to wait until it is idle), and
`run_on_screen` runs it and returns the JSON lines it printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

APP = r"""
import json, sys, time
from vit_explorer.gui.app import make_app
from vit_explorer.gui.main_window import MainWindow
from vit_explorer.gui.measure import data_areas, step_measure

app = make_app(["vit-explorer"])
window = MainWindow(sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] else None)
window.show()

def settle(condition=lambda: True, seconds=120.0, quiet=0.5):
    end, calm = time.monotonic() + seconds, None
    while time.monotonic() < end:
        app.processEvents()
        time.sleep(0.01)
        busy = window.session is None or window.session.working() or not condition()
        calm = None if busy else (calm or time.monotonic())
        if calm is not None and time.monotonic() - calm > quiet:
            return
    raise TimeoutError("the app did not settle")

def present():
    window.presentation.toggle()
    settle(window.isFullScreen)
    window.setFixedSize(app.primaryScreen().geometry().size())  # as a window manager holds a full-screen window

def maximise():
    window.showMaximized()
    settle(window.isMaximized)

settle(lambda: window.session is not None and window.session.result is not None)
"""


def run_on_screen(tmp_path: Path, screen: tuple[int, int], code: str, *args: str) -> list[dict]:
    """Run APP + `code` (with `args` in sys.argv; the first: a source to open, "" for the bundled model) on an
    offscreen screen of `screen` (W, H) with a fresh installation's settings; the JSON objects it printed."""
    config = tmp_path / "screen.json"
    config.write_text(json.dumps({"screens": [{"name": "projector", "x": 0, "y": 0, "width": screen[0],
                                               "height": screen[1], "logicalDpi": 96, "logicalBaseDpi": 96,
                                               "dpr": 1}]}))
    env = {**os.environ, "QT_QPA_PLATFORM": f"offscreen:configfile={config}", "HF_HUB_OFFLINE": "1",
           "XDG_CONFIG_HOME": str(tmp_path / "config")}
    done = subprocess.run([sys.executable, "-c", APP + code, *args], capture_output=True, text=True, timeout=600,
                          env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
