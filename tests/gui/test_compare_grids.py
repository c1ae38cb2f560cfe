"""Compare's two position-embedding grids on one scale are drawn the same size (lesson step 11 at 1024x768 drew
them 272 and 254 px): the shared colour bar sat inside the right-hand column, taking that side's width."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt

from vit_explorer.gui import figures

from .conftest import wait_result


def test_the_two_grids_on_one_scale_are_equal(qtbot, window, tiny_checkpoint: Path, monkeypatch) -> None:
    grids: list[figures.SimilarityPlot] = []
    plot = figures.SimilarityPlot

    def kept(*args, **kwargs) -> figures.SimilarityPlot:
        grids.append(plot(*args, **kwargs))
        return grids[-1]

    monkeypatch.setattr(figures, "SimilarityPlot", kept)
    window.setWindowState(Qt.WindowState.WindowNoState)
    window.resize(1024, 768)
    wait_result(qtbot, window.session)
    window.docks["Compare"].raise_()
    view = window.views["Compare"]
    view.set_panels(("position",))
    view.compare_with(str(tiny_checkpoint))
    qtbot.waitUntil(lambda: view.sides is not None and len(view.sides) == 2 and len(grids) >= 2, timeout=30000)
    qtbot.wait(100)  # laid out
    left, right = grids[-2:]
    assert left.levels == right.levels  # one scale: one colour bar for both
    widths = [view.plots.mapFromScene(g.mosaic.sceneBoundingRect()).boundingRect().width() for g in (left, right)]
    heights = [view.plots.mapFromScene(g.mosaic.sceneBoundingRect()).boundingRect().height() for g in (left, right)]
    assert min(widths) > 20
    assert abs(widths[0] - widths[1]) <= 1 and abs(heights[0] - heights[1]) <= 1, (widths, heights)
