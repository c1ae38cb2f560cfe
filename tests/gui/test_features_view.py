"""The Features view on a projector's screen: its PCA pictures (each image and its colours) as large as the pane
lets them be, the rule lesson figures meet (no picture under 120 px)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .screens import run_on_screen

PCA_CHILD = r"""
maximise()
window.show_view("Features")
view = window.views["Features"]
view.mode.setCurrentText("PCA of patch features")
settle(lambda: view.figure is not None and view.figure.title.startswith("First three principal components"))
print(json.dumps({"pictures": len(view.figure.images),
                  "areas": [a.short_side for a in data_areas(view, window)]}), flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("screen", [(1280, 800), (1024, 768)], ids=["1280x800", "1024x768"])
def test_the_pca_pictures_are_readable_in_normal_mode(tmp_path: Path, screen: tuple[int, int]) -> None:
    """Four images and their PCA colours, one pair a row, drew 85-91 px pictures at 1280x800 in a pane 780 px wide;
    the view now puts as many pairs in a row as draw them largest (two there: about 170 px each)."""
    (row,) = run_on_screen(tmp_path, screen, PCA_CHILD, "")
    assert row["pictures"] == 8 and len(row["areas"]) == 8, row
    assert min(row["areas"]) >= 120, row
