"""Drawing details a projector shows: whole-number ticks on counting axes, DeiT's heads as markers."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyqtgraph as pg
import pytest

from vit_explorer.explore.figures import BarsFigure
from vit_explorer.gui import figures


@pytest.fixture
def layout(qtbot):
    widget = pg.GraphicsLayoutWidget()
    qtbot.addWidget(widget)
    yield widget.ci  # the widget stays alive (and owns the layout) until the test ends


def tick_values(axis: pg.AxisItem, lo: float, hi: float, pixels: float) -> list[float]:
    """Every tick of every level (pyqtgraph labels minor ticks too when there is room)."""
    return [value for _, values in axis.tickValues(lo, hi, pixels) for value in values]


def test_layers_get_whole_number_ticks(layout) -> None:
    plot = figures.draw_lines(layout, np.arange(5), {"cos": np.linspace(0, 1, 5)}, title="t", xlabel="layer",
                              ylabel="cos")
    ticks = tick_values(plot.getAxis("bottom"), -0.2, 4.2, 800)  # wide: pyqtgraph alone would tick every 0.5
    assert ticks and all(float(t).is_integer() for t in ticks)
    steps = figures.draw_lines(layout, np.linspace(0, 1, 5), {"a": np.zeros(5)}, title="t", xlabel="x", ylabel="y")
    assert not isinstance(steps.getAxis("bottom"), figures.IntegerAxis)  # fractions keep fractional ticks


def test_bar_markers_follow_new_values(layout) -> None:
    first = BarsFigure("t", ("a", "b"), np.array([0.6, 0.3]), markers={"class head": np.array([0.5, 0.4])})
    drawn = figures.BarsPlot(layout, first)
    drawn.update(replace(first, values=np.array([0.2, 0.1]), markers={"class head": np.array([0.9, 0.05])}))
    plot = drawn.plot
    (marks,) = [item for item in plot.items if isinstance(item, pg.ScatterPlotItem)]
    np.testing.assert_allclose(marks.data["x"], [0.9, 0.05])
    texts = [item for item in plot.items if isinstance(item, pg.TextItem)]
    assert [t.toPlainText() for t in texts] == ["20.0%", "10.0%"]
    assert texts[0].pos().x() == pytest.approx(0.9)  # written after the furthest of bar and marker
