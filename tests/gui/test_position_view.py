"""The Position view on schemes that act inside attention: their own picture, computed off the GUI thread."""

from __future__ import annotations

from pathlib import Path

import pytest

from vit_explorer.explore.figures import SimilarityFigure

from .conftest import save_tiny, wait_result
from .screens import run_on_screen


@pytest.mark.parametrize(("scheme", "colorbar"), [("rope", "mean cos of angle differences"),
                                                  ("rel_bias", "attention logit bias")])
def test_a_scheme_inside_attention_shows_its_own_picture(qtbot, window, tmp_path: Path, scheme: str,
                                                         colorbar: str) -> None:
    source = save_tiny(tmp_path / scheme, pos_embed=scheme)
    with qtbot.waitSignal(window.session.model_changed, timeout=30000):
        window.load(str(source))
    wait_result(qtbot, window.session)
    window.docks["Position embeddings"].raise_()
    view = window.views["Position embeddings"]
    qtbot.waitUntil(lambda: view.sim is not None and view.sim.scheme == scheme and view.figure is not None,
                    timeout=10000)
    assert isinstance(view.figure, SimilarityFigure) and view.figure.colorbar_label == colorbar
    assert view.figure.similarity.shape == (8, 8, 8, 8) and view.sim.patches is None


COMPARISON_CHILD = r"""
maximise()
window.show_view("Position embeddings")
settle()
view = window.views["Position embeddings"]
for i in range(view.compare.count()):
    view.compare.setCurrentIndex(i)
    settle()
    seen = [a.rect for a in data_areas(view, window)]  # as on screen
    whole = [a.rect for a in data_areas(view, view)]  # as laid out in the view
    print(json.dumps({"compare": view.compare.itemText(i), "seen": [[r.width(), r.height()] for r in seen],
                      "whole": [[r.width(), r.height()] for r in whole],
                      "fits": view.plots.ci.minimumWidth() <= view.plots.width()}), flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("screen", [(1280, 800), (1024, 768)], ids=["1280x800", "1024x768"])
def test_a_comparison_never_runs_off_the_view(tmp_path: Path, screen: tuple[int, int]) -> None:
    """Issue 15: EVA-02 (a learned table + RoPE, two mosaics already) against an untrained scheme clipped the
    right-hand grid at 1280, and any comparison at 1024. Every mosaic and map is now whole on screen: the
    mosaics wrap onto a second row, titles narrow, and the single maps give way in a narrow view."""
    folder = save_tiny(tmp_path / "eva", pos_embed="learned+rope")
    rows = run_on_screen(tmp_path, screen, COMPARISON_CHILD, str(folder))
    assert len(rows) > 2
    for row in rows:
        assert row["fits"], row
        assert row["seen"] == row["whole"] and all(min(side) > 0 for side in row["seen"]), row


LARGE_CHILD = r"""
maximise()
window.show_view("Position embeddings")
settle()
view = window.views["Position embeddings"]
print(json.dumps({"areas": sorted((a.short_side for a in data_areas(view, window)), reverse=True),
                  "maps": len(view.figure.maps), "height": window.height()}), flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("screen", [(1280, 800), (1920, 1080)], ids=["1280x800", "1920x1080"])
def test_the_mosaic_is_as_large_as_a_lesson_figure_in_normal_mode(tmp_path: Path, screen: tuple[int, int]) -> None:
    """Issue 27 item 7's rule, on the view a lesson's position-embedding steps use: at 1280x800 in normal mode the
    mosaic drew 265 px (33 % of the screen's height) over its two single maps, which took the rest of the height
    half empty. A wide pane now puts the maps in a column beside the mosaic: the mosaic at least 35 % of the
    screen's height, each map still readable (120 px)."""
    (row,) = run_on_screen(tmp_path, screen, LARGE_CHILD, "")
    assert row["maps"] == 2 and len(row["areas"]) == 3, row
    assert row["areas"][0] >= 0.35 * screen[1], row
    assert row["areas"][-1] >= 120, row
