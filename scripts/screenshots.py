"""Offscreen screenshots of the app, one per view, at 1600x1000.

    QT_QPA_PLATFORM=offscreen python scripts/screenshots.py --out shots [--source SOURCE] [--image IMAGE]

Without --source the bundled classroom model is used (or, if it is missing, a freshly built one).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the PNG files")
    parser.add_argument("--source", default=None, help="checkpoint to open (default: the bundled model)")
    parser.add_argument("--image", default=None, help="image to show (default: the first bundled sample)")
    parser.add_argument("--mask", type=int, default=20, help="percentage of patches to mask (default 20)")
    args = parser.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


    from vit_explorer.gui.app import make_app
    from vit_explorer.gui.main_window import MainWindow
    from vit_explorer.paths import BUNDLED_MODEL

    app = make_app()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    source = args.source
    if source is None and not (BUNDLED_MODEL / "vit_explorer.json").exists():
        source = ""  # build one below
    window = MainWindow(source or None)
    window.resize(1600, 1000)
    window.show()

    def wait(condition, timeout: float = 120.0) -> None:
        end = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > end:
                raise TimeoutError("the app did not get ready in time")
            app.processEvents()
            time.sleep(0.01)

    wait(lambda: window.session is not None)
    session = window.session
    if source == "":
        window.views["Model builder"].build()
    wait(lambda: session.result is not None)
    if args.image:
        window.image_panel.open_path(args.image)
    if args.mask:
        window.image_panel.percent.setValue(args.mask)
        window.image_panel.random_mask()
    settle(app, window)
    for title, dock in window.docks.items():
        if title in ("Image", "Prediction"):
            continue
        dock.raise_()
        settle(app, window)
        path = out / f"{title.lower().replace(' ', '_')}.png"
        window.grab().save(str(path), "PNG")
        print(path)
    window.close()
    return 0


def settle(app, window, seconds: float = 1.5) -> None:
    """Let workers finish and views redraw."""
    end = time.monotonic() + seconds
    while time.monotonic() < end or window.session.runner.busy():
        app.processEvents()
        time.sleep(0.02)
        if time.monotonic() > end + 60:
            break
    app.processEvents()


if __name__ == "__main__":
    sys.exit(main())
