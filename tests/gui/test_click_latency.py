"""A quick click repaints the figures without laying the views out again: the Prediction view's "computing…" note
appeared and vanished on every pass, resizing its plot twice per click (most of a click's time on the classroom
model went into those re-layouts and repaints)."""

from __future__ import annotations

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
