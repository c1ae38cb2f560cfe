"""Text size and presentation mode, for the back of a classroom.

Ctrl+plus / Ctrl+minus / Ctrl+0 scale every text: the widgets' font and every figure's titles, labels
and ticks. Presentation mode (F11) is full screen, without the model toolbar and the status bar, with
its own, larger text scale; each scale is remembered.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from PySide6.QtCore import QSettings, QSize, Qt, QTimer
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QApplication, QDockWidget, QWidget

from .settings import read_number
from .theme import FONT_POINTS
from .zoom import ZoomArea

if TYPE_CHECKING:
    from .main_window import MainWindow

IMAGE_SHARE = 0.26  # of the screen height, the least the input image gets while presenting (it is drawn on)
SCALES = (0.8, 0.9, 1.0, 1.15, 1.3, 1.5, 1.75, 2.0, 2.5)
NORMAL_KEY, PRESENTING_KEY = "text_scale", "presentation_text_scale"
DEFAULTS = {NORMAL_KEY: 1.0, PRESENTING_KEY: 1.5}
SMALL_SCREEN_SCALE = 1.3  # presenting on a screen of under 900 lines (see Presentation.default)


class Presentation:
    def __init__(self, window: MainWindow) -> None:
        self.window = window
        self.presenting = False
        self._was_maximized = False
        self._default_layout: dict[QDockWidget, QSize] | None = None  # the panes' sizes at the mode's default text

    @property
    def key(self) -> str:
        return PRESENTING_KEY if self.presenting else NORMAL_KEY

    @property
    def default(self) -> float:
        """The current mode's default text scale. Presenting on a projector of under 900 lines, one step smaller:
        what reads from the back of a room is the text's share of the screen's height, and 1.3x on 768 lines is a
        larger share (2.2 %) than 1.5x on 1080 (1.9 %), with the room the figures need."""
        screen = self.window.screen()
        small = screen is not None and screen.geometry().height() < 900
        return SMALL_SCREEN_SCALE if self.presenting and small else DEFAULTS[self.key]

    @property
    def scale(self) -> float:
        """The text scale of the current mode (remembered)."""
        value = read_number(self.key, self.default, SCALES[0], SCALES[-1])
        return min(SCALES, key=lambda s: abs(s - value))

    def step(self, direction: int) -> None:
        """One step larger (+1) or smaller (-1); 0 resets to the mode's default."""
        if direction == 0:
            new = self.default
        else:
            i = SCALES.index(self.scale) + direction
            new = SCALES[max(0, min(i, len(SCALES) - 1))]
        if self.scale == self.default and new != self.default:  # leaving the default: its panes' sizes
            self._default_layout = {dock: dock.size() for dock in self.window.docks_on_screen()}
        QSettings().setValue(self.key, new)
        self.apply()
        if new == self.default and self._default_layout is not None:
            # back to the default, the panes as they were: dock title bars and tabs change height with the text, and
            # Qt shares the difference out anew each time (the image lost 1 px per Ctrl+plus / Ctrl+0 presenting)
            layout, self._default_layout = self._default_layout, None
            QTimer.singleShot(0, lambda: self._restore(layout))

    def _restore(self, layout: dict[QDockWidget, QSize]) -> None:
        """The panes at these sizes (the separators only: restoring the window's whole state re-laid out the tab
        bars, which then elided every view's name to its first letter)."""
        QApplication.sendPostedEvents()  # the sizes at the new text first, then the panes'
        shown = self.window.docks_on_screen()
        for dock, size in layout.items():  # one at a time: Qt reads several sizes as proportions of their sum
            if dock in shown:
                self.window.resizeDocks([dock], [size.width()], Qt.Orientation.Horizontal)
                self.window.resizeDocks([dock], [size.height()], Qt.Orientation.Vertical)

    def toggle(self) -> None:
        """Presentation mode on or off: full screen, without the model toolbar and the status bar."""
        window = self.window
        self.presenting = not self.presenting
        self._default_layout = None  # the other mode's
        if self.presenting:
            self._was_maximized = window.isMaximized()
            window.showFullScreen()
        elif self._was_maximized:
            window.showMaximized()
        else:
            window.showNormal()
        window.source_bar.setVisible(not self.presenting)
        window.statusBar().setVisible(not self.presenting)
        window.presentation_action.setChecked(self.presenting)
        self.arrange()
        self.apply()
        if not self.presenting:
            window.prediction_alone(False)
            window.docks["Prediction"].setVisible(True)
        window.share_width()

    def arrange(self) -> None:
        """The room goes to the figures while presenting: no dock title bars (the tabs name the views), notes on
        one line (the whole text in their tooltip), no view controls during a lesson (its steps set them), the
        image at least IMAGE_SHARE of the screen's height, the hover readout only when the lesson step on screen
        asks for it (`Session.hover`)."""
        from .views.base import Note  # the views (and torch) come after the window first paints

        window = self.window
        for title, dock in window.docks.items():
            if title != "Lesson":
                dock.setTitleBarWidget(QWidget() if self.presenting else None)
        window.lesson.panel.set_compact(self.presenting)
        lesson = self.presenting and window.lesson is not None and window.lesson.running
        for view in window.views.values():
            for note in view.findChildren(Note):
                note.set_compact(self.presenting)
            view.toolbar.setVisible(not lesson)  # the step set what the figure shows; Leave brings them back
        screen = window.screen().geometry().height() if window.screen() is not None else window.height()
        window.fit_prediction()
        window.image_panel.set_compact(self.presenting, window.session.hover, math.ceil(IMAGE_SHARE * screen))
        if self.presenting:  # the image panel's height depends on what it shows (the hover readout)
            QTimer.singleShot(0, window.share_width)

    def apply(self) -> None:
        """Set the scale of the current mode on the app's font and the figures, and redraw the views."""
        scale = self.scale
        app = QApplication.instance()
        if isinstance(app, QApplication):
            font = QFont(app.font())
            font.setPointSizeF(FONT_POINTS * scale)
            app.setFont(font)
        from . import figures  # pyqtgraph: not before the window first paints

        zoom = max(1.0, scale / self.default)  # beyond the mode's default, text and figures grow together
        figures.set_text_scale(scale)
        for view in self.window.views.values():
            view.restyle()
        for dock in self.window.docks.values():
            if isinstance(dock.widget(), ZoomArea):
                dock.widget().set_zoom(zoom)
