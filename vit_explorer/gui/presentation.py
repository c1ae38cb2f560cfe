"""Text size and presentation mode, for the back of a classroom.

Ctrl+plus / Ctrl+minus / Ctrl+0 scale every text: the widgets' font and every figure's titles, labels
and ticks. Presentation mode (F11) is full screen, without the model toolbar and the status bar, with
its own, larger text scale; each scale is remembered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QSettings
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QApplication

from .settings import read_number
from .theme import FONT_POINTS

if TYPE_CHECKING:
    from .main_window import MainWindow

SCALES = (0.8, 0.9, 1.0, 1.15, 1.3, 1.5, 1.75, 2.0, 2.5)
NORMAL_KEY, PRESENTING_KEY = "text_scale", "presentation_text_scale"
DEFAULTS = {NORMAL_KEY: 1.0, PRESENTING_KEY: 1.5}


class Presentation:
    def __init__(self, window: MainWindow) -> None:
        self.window = window
        self.presenting = False
        self._was_maximized = False

    @property
    def key(self) -> str:
        return PRESENTING_KEY if self.presenting else NORMAL_KEY

    @property
    def scale(self) -> float:
        """The text scale of the current mode (remembered)."""
        value = read_number(self.key, DEFAULTS[self.key], SCALES[0], SCALES[-1])
        return min(SCALES, key=lambda s: abs(s - value))

    def step(self, direction: int) -> None:
        """One step larger (+1) or smaller (-1); 0 resets to the mode's default."""
        if direction == 0:
            new = DEFAULTS[self.key]
        else:
            i = SCALES.index(self.scale) + direction
            new = SCALES[max(0, min(i, len(SCALES) - 1))]
        QSettings().setValue(self.key, new)
        self.apply()

    def toggle(self) -> None:
        """Presentation mode on or off: full screen, without the model toolbar and the status bar."""
        window = self.window
        self.presenting = not self.presenting
        if self.presenting:
            self._was_maximized = window.isMaximized()
            window.showFullScreen()
        elif self._was_maximized:
            window.showMaximized()
        else:
            window.showNormal()
        window.source_bar.setVisible(not self.presenting)
        window.statusBar().setVisible(not self.presenting)
        window.image_panel.set_compact(self.presenting)  # the room goes to the image, prediction and the view
        window.presentation_action.setChecked(self.presenting)
        self.apply()
        window.share_width()

    def apply(self) -> None:
        """Set the scale of the current mode on the app's font and the figures, and redraw the views."""
        scale = self.scale
        app = QApplication.instance()
        if isinstance(app, QApplication):
            font = QFont(app.font())
            font.setPointSizeF(FONT_POINTS * scale)
            app.setFont(font)
        from . import figures  # pyqtgraph: not before the window first paints

        figures.set_text_scale(scale)
        for view in self.window.views.values():
            view.restyle()
