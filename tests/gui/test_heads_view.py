"""The Heads view's grid as a figure a room reads: its cells share the pane's height."""

from __future__ import annotations

from pathlib import Path

import pytest

from .screens import run_on_screen

GRID_CHILD = r"""
from PySide6.QtWidgets import QScrollArea

present() if sys.argv[2] == "presenting" else maximise()
window.show_view("Heads")
settle()
view = window.views["Heads"]
area = view.findChild(QScrollArea)
cells = [button.geometry() for row in view.buttons for button in row]
print(json.dumps({"top": min(c.top() for c in cells), "bottom": max(c.bottom() for c in cells),
                  "cell": [cells[0].width(), cells[0].height()], "room": area.viewport().height(),
                  "layers": len(view.buttons), "scrolls": area.verticalScrollBar().maximum()}), flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["normal", "presenting"])
def test_the_head_grid_fills_the_pane(tmp_path: Path, mode: str) -> None:
    """At 1280x800 the classroom model's 4 x 4 heads drew as a strip of 28 px buttons at the top of the pane, two
    thirds of it blank (lesson step 10 too). The cells now share the pane's height, up to three times a button's
    own: the grid takes most of the pane, and a small model's never scrolls."""
    (row,) = run_on_screen(tmp_path, (1280, 800), GRID_CHILD, "", mode)
    assert row["layers"] == 4 and row["scrolls"] == 0, row
    assert row["cell"][1] >= 60, row
    assert row["bottom"] - row["top"] >= 0.55 * row["room"], row


FONT_CHILD = r"""
window.show_view("Heads")
view = window.views["Heads"]
settle(lambda: view.importance is not None)
present()
print(json.dumps({"cell": view.buttons[0][0].fontInfo().pixelSize(), "text": view.legend.fontInfo().pixelSize()}),
      flush=True)
"""


@pytest.mark.slow
def test_presenting_grows_the_cells_numbers_with_the_text(tmp_path: Path) -> None:
    """A cell's colour is a style sheet, and a button with one kept the font it had: presented after the view was
    shown, every other text grew to 24 px and the cells' numbers stayed at 16 (seen in a real 1920x1080 window)."""
    (row,) = run_on_screen(tmp_path, (1920, 1080), FONT_CHILD, "")
    assert row["cell"] == row["text"] > 16, row
