"""A quick click repaints the figures without laying the views out again: the Prediction view's "computing…" note
appeared and vanished on every pass, resizing its plot twice per click (most of a click's time on the classroom
model went into those re-layouts and repaints)."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QEvent, QObject

from vit_explorer.gui import figures

from .conftest import wait_result


class Resizes(QObject):
    """Counts the resize events of the widgets it watches."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        if event.type() == QEvent.Type.Resize:
            self.count += 1
        return False


def test_a_mask_click_resizes_no_figure(qtbot, window) -> None:
    window.docks["Prediction"].raise_()
    plots = window.views["Prediction"].plots
    qtbot.waitUntil(lambda: plots.isVisible() and plots.height() > 0)
    resizes = Resizes()
    plots.installEventFilter(resizes)
    for row, col in ((0, 0), (1, 2), (0, 0)):
        window.session.toggle_patch(row, col)
        wait_result(qtbot, window.session)
        qtbot.wait(50)  # the views' slots and the layout's posted events
    assert resizes.count == 0
    assert not window.views["Prediction"].note.isVisible()


def test_a_slow_pass_still_says_computing(qtbot, window) -> None:
    note = window.views["Prediction"].note
    note.show_busy(True)
    qtbot.waitUntil(lambda: note.full_text == "computing…", timeout=2000)
    note.show_busy(False)
    assert note.full_text == "" and not note.isVisible()


def test_a_mask_click_draws_the_picture_once_and_the_mask_once(qtbot, window, monkeypatch) -> None:
    panel = window.image_panel
    calls = {"picture": 0, "mask": 0}
    set_image, draw_cells = panel.canvas.setImage, figures.draw_masked_cells

    def counted_image(*args, **kwargs):
        calls["picture"] += 1
        return set_image(*args, **kwargs)

    def counted_cells(view, *args, **kwargs):
        calls["mask"] += view is panel.view  # the other views draw the hatches over their maps too
        return draw_cells(view, *args, **kwargs)

    monkeypatch.setattr(panel.canvas, "setImage", counted_image)
    monkeypatch.setattr(figures, "draw_masked_cells", counted_cells)
    window.session.toggle_patch(1, 1)
    wait_result(qtbot, window.session)
    qtbot.wait(50)
    assert calls == {"picture": 0, "mask": 1}  # the hatches at the click; its pass changes neither
    assert panel._hatches  # the masked patch is drawn
    window.session.toggle_patch(1, 1)
    wait_result(qtbot, window.session)
    assert calls == {"picture": 0, "mask": 2}


def test_the_photo_under_a_map_is_painted_from_its_cache(qtbot, window) -> None:
    """A click changes the map, not the photo under it: the photo is not rescaled at every repaint."""
    from PySide6.QtWidgets import QGraphicsItem

    window.docks["Attention"].raise_()
    view = window.views["Attention"]
    qtbot.waitUntil(lambda: view._drawn is not None and bool(view._drawn.photos), timeout=20000)
    assert all(photo.cacheMode() == QGraphicsItem.CacheMode.DeviceCoordinateCache for photo in view._drawn.photos)


def _rendered(overlay_type: type, opacity: float) -> np.ndarray:
    """A 16x16 photo under an 8x8 map scaled 8 times, the map at `opacity`, painted to a 128x128 image."""
    import pyqtgraph as pg
    from PySide6.QtCore import QRectF
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtWidgets import QGraphicsScene

    rng = np.random.default_rng(0)
    scene = QGraphicsScene()
    photo = pg.ImageItem((rng.random((16, 16, 3)) * 255).astype(np.uint8), levels=(0, 255))
    photo.setRect(QRectF(0, 0, 128, 128))
    heat = overlay_type(rng.random((8, 8)).astype(np.float32), levels=(0.0, 1.0))
    heat.setColorMap(pg.colormap.get("inferno"))
    heat.setRect(QRectF(0, 0, 128, 128))
    heat.setOpacity(opacity)
    scene.addItem(photo)
    scene.addItem(heat)
    image = QImage(128, 128, QImage.Format.Format_RGB32)
    painter = QPainter(image)
    scene.render(painter, QRectF(0, 0, 128, 128), QRectF(0, 0, 128, 128))
    painter.end()
    return np.frombuffer(image.constBits(), np.uint8).reshape(128, 128, 4)[..., :3].astype(int)


def test_a_map_over_the_photo_paints_as_a_translucent_image_item_does(qapp) -> None:
    """The overlay paints its opacity from the map's alpha channel (Qt's fast path), pixel for pixel the picture a
    plain ImageItem at that opacity paints (within rounding), and keeps the opacity it was given."""
    import pyqtgraph as pg

    for opacity in (0.6, 0.25, 1.0):
        ours, plain = _rendered(figures.Overlay, opacity), _rendered(pg.ImageItem, opacity)
        assert np.abs(ours - plain).max() <= 2, opacity
    assert not np.array_equal(_rendered(figures.Overlay, 0.6), _rendered(figures.Overlay, 0.25))


def test_the_image_panel_paints_its_photo_from_a_cache_and_no_empty_highlight(qtbot, window) -> None:
    """During a click's forward pass the image panel repaints (the hatches): its photo and patch grid come from their
    caches, and the query highlight, transparent with no query, is not painted at all."""
    from PySide6.QtWidgets import QGraphicsItem

    panel = window.image_panel
    cached = QGraphicsItem.CacheMode.DeviceCoordinateCache
    assert panel.canvas.cacheMode() == cached and panel.grid_item.cacheMode() == cached
    window.session.select(query=None)
    assert not panel.mask_item.isVisible()
    window.session.select(query=(1, 2))
    assert panel.mask_item.isVisible() and panel.mask_item.image[1, 2, 3] > 0
    window.session.select(query=None)
    assert not panel.mask_item.isVisible()


def test_a_map_with_the_same_numbers_is_not_rendered_again(qtbot) -> None:
    """A head toggled in a later block leaves the shown map as it was: its image and its colour bar (whose new ticks
    cost 1-2 ms of Python) are not set again; new numbers set both, and a new title alone changes only the title."""
    from dataclasses import replace

    import pyqtgraph as pg

    from vit_explorer.explore.figures import MapsFigure

    widget = pg.GraphicsLayoutWidget()
    qtbot.addWidget(widget)
    maps = np.random.default_rng(0).random((1, 4, 4))
    figure = MapsFigure("", maps, ("layer 0 · head 0",), np.zeros((32, 32, 3), np.uint8), (4, 4))
    drawn = figures.MapsPlot(widget.ci, figure)
    calls = {"image": 0, "bar": 0}
    heat, bar = drawn.heats[0], drawn.bar
    set_image, set_levels = heat.setImage, bar.setLevels
    heat.setImage = lambda *a, **k: (calls.__setitem__("image", calls["image"] + 1), set_image(*a, **k))
    bar.setLevels = lambda *a, **k: (calls.__setitem__("bar", calls["bar"] + 1), set_levels(*a, **k))
    drawn.update(replace(figure, titles=("layer 0 · head 0 (off)",)))
    assert calls == {"image": 0, "bar": 0}
    assert "(off)" in drawn.plots[0].titleLabel.text
    drawn.update(replace(figure, maps=maps * 0.5))
    assert calls["image"] >= 1 and calls["bar"] == 1  # (the bar sets its images' levels too)
    np.testing.assert_allclose(heat.image, maps[0] * 0.5)
    assert tuple(bar.levels()) == pytest.approx((maps.min() * 0.5, maps.max() * 0.5))
