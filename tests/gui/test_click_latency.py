"""A quick click repaints the figures without laying the views out again: the Prediction view's "computing…" note
appeared and vanished on every pass, resizing its plot twice per click (most of a click's time on the classroom
model went into those re-layouts and repaints)."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject

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
