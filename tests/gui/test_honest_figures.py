"""Figures that do not mislead (issue 15): fixed axes, ticks that match the layers, a reference to read distances
against, notes on all-zero tables, neutral zero importance, EVA-02's RoPE drawn, and readable themes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyqtgraph as pg
import torch
from PIL import Image
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication, QLabel

from vit_explorer.analysis.attention import patch_distances
from vit_explorer.checkpoints import Preprocess, save_native
from vit_explorer.explore.figures import ZERO_NOTE
from vit_explorer.explore.heads import HeadImportance
from vit_explorer.explore.position import ROTATION_TITLE
from vit_explorer.gui import theme
from vit_explorer.gui.views import heads as heads_view
from vit_explorer.models import VisionTransformer, preset

from .conftest import save_tiny, wait_result


def show(window, title: str):
    window.docks[title].raise_()
    return window.views[title]


def tick_labels(axis: pg.AxisItem) -> list[str]:
    return [label for level in (axis._tickLevels or []) for _, label in level]


def luminance(colour: QColor) -> float:
    def channel(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    return 0.2126 * channel(colour.redF()) + 0.7152 * channel(colour.greenF()) + 0.0722 * channel(colour.blueF())


def contrast(a: QColor, b: QColor) -> float:
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_prediction_axis_is_0_to_100_percent(qtbot, window) -> None:
    drawn = window.views["Prediction"]._drawn
    low, high = drawn.plot.vb.viewRange()[0]
    assert low <= 0 and high <= 1.05  # was 1.22: room for value texts past the end of the axis
    # labelled at the ends and the middle, the quarters marked (five labels collide in a narrow column)
    assert tick_labels(drawn.plot.getAxis("bottom")) == ["0%", "50%", "100%", "", ""]
    probs = np.sort(window.session.result.probs)[::-1][:5]
    assert tick_labels(drawn.plot.getAxis("right")) == [f"{p:.1%}" for p in probs]  # each bar's value beside it


def test_token_similarity_ticks_stay_on_the_layers(qtbot, window, tmp_path: Path) -> None:
    view = show(window, "Embeddings")
    qtbot.waitUntil(lambda: view.facts is not None and bool(view._curves), timeout=10000)
    depth = window.session.loaded.config.depth
    expected = np.arange(depth + 1) - 1.0  # -1: the embedded input
    np.testing.assert_array_equal(view._curves[0].xData, expected)
    other = tmp_path / "other.png"
    Image.new("RGB", (40, 40), (200, 30, 30)).save(other)
    first = view.facts
    window.image_panel.open_path(str(other))
    wait_result(qtbot, window.session)
    qtbot.waitUntil(lambda: view.facts is not first, timeout=10000)
    np.testing.assert_array_equal(view._curves[0].xData, expected)  # was 0..depth after a new image
    plot = view._curves[0].getViewBox().parentItem()
    assert tick_labels(plot.getAxis("bottom"))[:2] == ["input", "0"]
    assert "input" in plot.getAxis("bottom").labelText


def test_mean_distance_from_zero_with_the_uniform_reference(qtbot, window) -> None:
    view = show(window, "Attention")
    view.mode.setCurrentText("mean attention distance")
    qtbot.waitUntil(lambda: view.distance is not None, timeout=10000)
    items = view.plots.scene().items()  # the plot and its legend below it, in a cell of their own
    (plot,) = [item for item in items if isinstance(item, pg.PlotItem)]
    assert plot.vb.viewRange()[1][0] <= 0  # the axis starts at 0, not at the smallest distance
    uniform = float(patch_distances(window.session.result.layout).mean())
    (line,) = [item for item in plot.listDataItems() if item.opts["pen"] is not None]
    np.testing.assert_allclose(line.yData, uniform)
    legend = next(item for item in items if isinstance(item, pg.LegendItem))
    assert not legend.sceneBoundingRect().intersects(plot.vb.sceneBoundingRect())  # below the data, not over it
    assert any("uniform attention" in label.text for _, label in legend.items)


def test_zero_importance_cells_are_neutral(qtbot, window, monkeypatch) -> None:
    shape = window.session.head_mask.shape
    values = np.zeros(shape)
    values.flat[:3] = [0.0004, 0.0001, -0.0002]  # all read +0.000 / -0.000

    def measured(inputs, name, cancel=None, progress=None) -> HeadImportance:
        return HeadImportance(values, 0, "shape 0", name, 0)

    monkeypatch.setattr(heads_view, "measure", measured)
    view = show(window, "Heads")
    view.measure_importance()
    qtbot.waitUntil(lambda: view.result is not None, timeout=10000)
    cells = [button for row in view.buttons for button in row]
    assert {cell.text() for cell in cells} <= {"+0.000", "-0.000"}
    assert {cell.styleSheet() for cell in cells} == {cells[-1].styleSheet()}  # one neutral colour, no reds
    assert "255, 255, 255" in cells[0].styleSheet()


def test_eva02_draws_its_rope_beside_its_table(qtbot, window, tmp_path: Path) -> None:
    folder = save_tiny(tmp_path / "eva", pos_embed="learned+rope")
    with qtbot.waitSignal(window.session.model_changed, timeout=20000):
        window.load(str(folder))
    view = show(window, "Position embeddings")
    qtbot.waitUntil(lambda: view.figure is not None and window.session.loaded.config.pos_embed == "learned+rope",
                    timeout=20000)
    titles = [name for name, _ in view.figure.others]
    assert ROTATION_TITLE in titles  # the title says "+ RoPE": the rotation similarity is drawn too
    mosaics = [item for item in view.plots.scene().items() if isinstance(item, pg.ImageItem)
               and item.image is not None and item.image.shape[0] > 8 and item.image.shape[1] > 8]
    assert len(mosaics) >= 2


def zero_bias_checkpoint(folder: Path) -> Path:
    model = VisionTransformer(preset("classroom-tiny", pos_embed="rel_bias")).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "relative_position_bias_table" in name:
                parameter.zero_()  # as BEiT initialises them
    pre = Preprocess(model.config.image_size, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
    return save_native(folder, model, [f"shape {i}" for i in range(model.config.num_classes)], pre)


def test_all_zero_relative_bias_says_so(qtbot, window, tmp_path: Path) -> None:
    folder = zero_bias_checkpoint(tmp_path / "beit")
    with qtbot.waitSignal(window.session.model_changed, timeout=20000):
        window.load(str(folder))
    view = show(window, "Position embeddings")
    qtbot.waitUntil(lambda: view.figure is not None and view._drawn is not None
                    and window.session.loaded.config.pos_embed == "rel_bias", timeout=20000)
    assert view.figure.note == ZERO_NOTE
    assert ZERO_NOTE.split(":")[0] in view._drawn.mosaic_plot.titleLabel.text  # drawn with the figure


def test_styled_text_follows_a_theme_switch(qtbot, window) -> None:
    """A label with a style sheet (the lesson panel's 'See:' line) kept the previous theme's colours."""
    app = QApplication.instance()
    label = QLabel("See: the ViT paper", window)
    label.setStyleSheet("font-style: italic;")
    label.show()
    try:
        for name in ("dark", "light", "dark", "light"):
            theme.choose(app, name)
            qtbot.wait(20)
            palette = label.palette()
            text, background = palette.color(label.foregroundRole()), palette.color(label.backgroundRole())
            assert contrast(text, background) >= 4.5, (name, text.name(), background.name())
            assert text == app.palette().color(QPalette.ColorRole.WindowText)
    finally:
        theme.apply(app, "system")


def test_legends_readable_and_beside_the_data(qtbot, window) -> None:
    app = QApplication.instance()
    view = show(window, "Embeddings")
    qtbot.waitUntil(lambda: view.facts is not None and bool(view._curves), timeout=10000)
    try:
        for name in ("dark", "light"):
            theme.choose(app, name)
            qtbot.waitUntil(lambda: bool(view._curves) and view._curves[0].scene() is not None, timeout=10000)
            qtbot.wait(50)
            plot = view._curves[0].getViewBox().parentItem()
            legend = plot.legend
            assert legend.items and legend.isVisible()
            assert not legend.sceneBoundingRect().intersects(plot.vb.sceneBoundingRect())  # never over the curves
            background = view.plots.backgroundBrush().color()
            assert legend.brush().style() == pg.QtCore.Qt.BrushStyle.NoBrush  # no light box in the dark theme
            for _, label in legend.items:
                colour = pg.mkColor(label.opts.get("color") or pg.getConfigOption("foreground"))  # the HTML's colour
                assert contrast(colour, background) >= 4.5, (name, colour.name(), background.name())
    finally:
        theme.apply(app, "system")
