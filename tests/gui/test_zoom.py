"""Ctrl+plus zooms: text and figures grow together (gui/zoom.py). Issue 15: pressed twice at 1280x800 it made the
text larger and the PE grid smaller, and pushed the image controls into a scroll area of their own."""

from __future__ import annotations

from pathlib import Path

import pytest

from .screens import run_on_screen

FIGURE_VIEWS = ("Position embeddings", "Embeddings", "Attention", "Features", "Prediction")

ZOOM_CHILD = r"""
from PySide6.QtWidgets import QApplication

present() if sys.argv[2] == "presenting" else maximise()
for title in sys.argv[3].split(","):
    window.show_view(title)
    settle()
    view = window.views[title]
    for press in range(3):
        if press:
            window.menu_actions["Larger text"].trigger()
            settle()
        print(json.dumps({
            "view": title, "press": press, "font": QApplication.font().pointSizeF(),
            # the data areas as laid out on the view's (zoomed) page, then the input image's
            "areas": [a.short_side for a in data_areas(view, view)],
            "image": max(a.short_side for a in data_areas(window.image_panel, window.image_panel)),
            "controls_scroll": window.image_panel.controls_area.verticalScrollBar().maximum(),
            "window": [window.width(), window.height()]}), flush=True)
    window.menu_actions["Reset text size"].trigger()
    settle()
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["normal", "presenting"])
@pytest.mark.parametrize("screen", [(1280, 800), (1024, 768)], ids=["1280x800", "1024x768"])
def test_ctrl_plus_never_makes_a_figure_smaller_nor_scrolls_the_image_controls(tmp_path: Path, screen, mode) -> None:
    """On a projector's screen (an offscreen screen of that size, in a child), each Ctrl+plus grows the text, and
    every data area of each view and the input image stay at least as large (1 px for rounding); the image
    panel's controls never scroll on their own and the window keeps its size."""
    rows = run_on_screen(tmp_path, screen, ZOOM_CHILD, "", mode, ",".join(FIGURE_VIEWS))
    assert len(rows) == 3 * len(FIGURE_VIEWS)
    problems = []
    for before, after in zip(rows, rows[1:], strict=False):
        if after["press"] == 0:
            continue
        where = f"{after['view']}, press {after['press']}"
        if after["font"] <= before["font"]:
            problems.append(f"{where}: the text did not grow")
        sides = [*before["areas"], before["image"]], [*after["areas"], after["image"]]
        if len(sides[0]) != len(sides[1]) or any(a < b - 1 for b, a in zip(*sides, strict=True)):
            problems.append(f"{where}: {sides[0]} -> {sides[1]}")
        if after["controls_scroll"]:
            problems.append(f"{where}: the image controls scroll on their own")
        if after["window"] != before["window"]:
            problems.append(f"{where}: the window went from {before['window']} to {after['window']}")
    assert all(min(r["areas"] or [1]) > 0 for r in rows), rows
    assert not problems, problems
