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


@pytest.mark.parametrize("heading", ["six maps, one scale", ""])
def test_small_multiples_are_all_the_same_size_whatever_their_titles_wrap_to(qtbot, heading: str) -> None:
    """A title wrapped onto three lines took its height from its own map alone (the Explain view's second row
    drawn smaller); every map of the grid gets the same data area, and an empty heading takes no row."""
    from vit_explorer.explore.figures import MapsFigure
    from vit_explorer.gui.measure import data_areas

    widget = pg.GraphicsLayoutWidget()
    qtbot.addWidget(widget)
    widget.resize(900, 600)
    titles = ("1. rollout", "2. a long title that wraps onto three lines", "3. grad", "4. occlusion",
              "5. another title long enough to wrap", "6. cam")
    rgb = np.zeros((32, 32, 3), np.uint8)
    figure = MapsFigure(heading, np.random.default_rng(0).random((6, 4, 4)), titles, rgb, (4, 4))
    with figures.title_width(14):
        drawn = figures.MapsPlot(widget.ci, figure)
    widget.show()
    qtbot.waitExposed(widget)
    qtbot.wait(50)
    lines = [p.titleLabel.text.count("<br>") + 1 for p in drawn.plots]
    assert max(lines) >= 3 and min(lines) == 1  # the titles do wrap differently
    sides = [a.short_side for a in data_areas(widget, widget)]
    assert len(sides) == 6 and min(sides) > 40 and max(sides) - min(sides) <= 2, sides
    assert (drawn.heading is None) == (heading == "")
    drawn.update(replace(figure, titles=("1. short",) * 6))  # new titles in place: the rows follow them
    qtbot.wait(50)
    shorter = [a.short_side for a in data_areas(widget, widget)]
    assert max(shorter) - min(shorter) <= 2 and min(shorter) > max(sides), (shorter, sides)


def test_small_multiples_side_by_side_are_equally_wide_whatever_their_titles(qtbot) -> None:
    """Two maps in a row, width-bound: the column under the longer title was laid out wider, so its map was
    drawn larger (a lesson step's two Explain maps, 303 and 281 px); the columns are equally wide."""
    from vit_explorer.explore.figures import MapsFigure
    from vit_explorer.gui.measure import data_areas

    widget = pg.GraphicsLayoutWidget()
    qtbot.addWidget(widget)
    widget.resize(700, 700)
    titles = ("1. attention × grad · +0.364", "4. rollout · +0.167")  # each on one line, one longer
    figure = MapsFigure("", np.random.default_rng(0).random((2, 4, 4)), titles, np.zeros((32, 32, 3), np.uint8),
                        (4, 4))
    with figures.title_width(30):
        figures.MapsPlot(widget.ci, figure)
    widget.show()
    qtbot.waitExposed(widget)
    qtbot.wait(50)
    sides = [a.short_side for a in data_areas(widget, widget)]
    assert len(sides) == 2 and min(sides) > 100 and max(sides) - min(sides) <= 2, sides


def test_a_share_with_no_outliers_is_drawn_on_0_to_1(layout) -> None:
    """The outlier-share plot of a model with no outliers: all zero, drawn on the share's 0..1 axis (pyqtgraph alone
    centres a flat line, -0.4..0.4), and its title says an untrained model has none."""
    from vit_explorer.explore import registers as X

    n, states, patches, width = 2, 5, 4, 3
    ones = np.ones
    d = X.Diagnosis(images=n, grid=(2, 2), prefix_names=("cls",), ratio=3.0, threshold=None,
                    norms=ones((n, states, patches), np.float32), prefix_norms=ones((n, states, 1), np.float32),
                    outliers=np.zeros((n, states, patches), bool), massive_max=ones(states),
                    massive_median=ones(states), massive_dim=np.zeros(states, int),
                    massive_per_dim=ones((states, width)), scores=np.zeros((states, states - 1, 6)),
                    images_with_outliers=np.zeros(states))
    share = X.figures(d)["outlier_share.png"][0]
    assert "untrained model has none" in share.title and not share.series["outlier share"].any()
    plot = figures.draw(layout, share)
    low, high = plot.getViewBox().viewRange()[1]
    assert low == pytest.approx(0.0, abs=0.03) and high == pytest.approx(1.0, abs=0.03)


def test_a_horizontal_colour_bar_labels_both_its_ends(qtbot) -> None:
    """Lesson step 11's shared colour bar under the two PE grids (-1 to +1) showed no end labels: pyqtgraph drops a
    label that stands half past the axis's end. Both ends are drawn, inside the view."""
    from PySide6.QtGui import QImage, QPainter

    widget = pg.GraphicsLayoutWidget()
    qtbot.addWidget(widget)
    widget.resize(600, 400)
    _, image = figures.draw_heatmap(widget.ci, np.linspace(-1, 1, 16).reshape(4, 4), title="grid", colorbar=False,
                                    levels=(-1.0, 1.0))
    bar = figures.draw_colorbar(widget.ci, image, levels=(-1.0, 1.0), cmap=figures.SIMILARITY_CMAP, row=1, col=0,
                                orientation="horizontal")
    widget.show()
    qtbot.waitExposed(widget)
    qtbot.wait(50)
    canvas = QImage(600, 400, QImage.Format.Format_ARGB32)
    painter = QPainter(canvas)
    try:
        *_, texts = bar.axis.generateDrawSpecs(painter)
    finally:
        painter.end()
    values = [float(text.replace("−", "-")) for _, _, text in texts]
    assert min(values) == -1.0 and max(values) == 1.0, values
    # and whole: a bar as wide as its view had them cut in half at its edges ("-1.0" read ".0")
    shown = [widget.mapFromScene(bar.axis.mapRectToScene(rect)).boundingRect() for rect, _, _ in texts]
    assert all(widget.viewport().rect().contains(rect) for rect in shown), [r.getRect() for r in shown]


def test_spread_keeps_labels_a_gap_apart_and_by_their_values() -> None:
    from vit_explorer.gui.figures import spread

    values = [2.52, 1.0, 2.5, 2.51, 4.0]
    heights = spread(values, 0.1)
    ordered = sorted(heights)
    assert all(b - a >= 0.1 - 1e-12 for a, b in zip(ordered, ordered[1:], strict=False))
    assert heights[1] == 1.0 and heights[4] == 4.0  # alone: at their values
    assert heights[2] < heights[3] < heights[0]  # the group keeps its order
    assert np.isclose(np.mean([heights[0], heights[2], heights[3]]), np.mean([2.52, 2.5, 2.51]))  # and its centre
    assert spread([], 1.0) == []
    assert spread([1.0, 1.0], 0.5) == [0.75, 1.25]


def _four_pictures(qtbot, names: tuple[str, ...], width: int) -> tuple[pg.GraphicsLayoutWidget, figures.ImagesPlot]:
    """Four pictures titled `names`, two pairs a row, in a shown view `width` px wide (400 tall): (the view, what
    it draws; the view is kept while the test reads the plots)."""
    from vit_explorer.explore.figures import ImagesFigure

    widget = pg.GraphicsLayoutWidget()
    qtbot.addWidget(widget)
    picture = np.zeros((32, 32, 3), np.uint8)
    drawn = figures.ImagesPlot(widget.ci, ImagesFigure("PCA", (picture,) * 4, names), pairs=2, column_px=width / 4)
    widget.resize(width, 400)
    widget.show()
    qtbot.waitExposed(widget)
    return widget, drawn


def test_images_plot_keeps_its_columns_one_width_under_a_long_file_name(qtbot) -> None:
    """Two pairs a row: an image named by a long file name (no spaces to wrap at) neither widens its column nor the
    others' to its length; every column is as wide as the others."""
    names = ("holiday_photo_from_the_camera_2024_06_01_at_noon.png", "its PCA colours", "crescent", "its PCA colours")
    _widget, drawn = _four_pictures(qtbot, names, 800)
    widths = {round(plot.geometry().width()) for plot in drawn.plots}
    assert len(widths) == 1 and max(widths) <= 800 / 4, widths
    assert "…" in drawn.plots[0].titleLabel.text


def test_images_plot_puts_a_rows_pictures_on_one_line_when_one_title_wraps(qtbot) -> None:
    """A pair's title that wraps onto two lines ("its PCA colours" in a narrow column) does not push its picture
    below its neighbour's, whose title is one line: the pictures of a row start at one height."""
    names = ("cat", "its PCA colours over the image", "dog", "its PCA colours over the image")
    _widget, drawn = _four_pictures(qtbot, names, 600)
    assert drawn.plots[1].titleLabel.text.count("<br>") > drawn.plots[0].titleLabel.text.count("<br>")
    tops = {round(plot.vb.sceneBoundingRect().top()) for plot in drawn.plots}
    assert len(tops) == 1, tops
