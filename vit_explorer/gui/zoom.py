"""Ctrl+plus as a zoom: text and figures grow together, and what no longer fits scrolls.

On a fixed screen a larger text can only take room from the figures; so beyond a mode's default text
scale each dock's contents are laid out in `zoom` times its room, in both directions, and scroll, as a
browser's zoom does. Text and data areas then grow by the same factor, and the image panel's controls
get the room they need under the image: no figure gets smaller, no control is squeezed into a scroll
area of its own. At the default scale a ZoomArea is its contents exactly (the same hints, no scroll bars).
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QSize, Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QFrame, QScrollArea, QWidget


class ZoomArea(QScrollArea):
    def __init__(self, widget: QWidget) -> None:
        super().__init__()
        self.zoom = 1.0
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setWidget(widget)  # sized here (_fit), not to its height for the width as widgetResizable would
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)

    def set_zoom(self, zoom: float) -> None:
        self.zoom = max(1.0, zoom)
        self.updateGeometry()
        zoomed, off = Qt.ScrollBarPolicy.ScrollBarAlwaysOn, Qt.ScrollBarPolicy.ScrollBarAlwaysOff
        self.setVerticalScrollBarPolicy(zoomed if self.zoom > 1 else off)
        self.setHorizontalScrollBarPolicy(zoomed if self.zoom > 1 else off)
        self._fit(self.size())

    def fit(self) -> None:
        """Lay the page out in the room the dock gives now: a hidden dock's area gets no resize event until it is
        shown, so a view exported from a hidden tab asks for this first (View.bring_up_to_date)."""
        self._fit(self.size())

    def _fit(self, size: QSize) -> None:
        widget = self.widget()
        if widget is None:
            return
        least = widget.minimumSizeHint()
        widget.resize(max(least.width(), round(size.width() * self.zoom)),
                      max(least.height(), round(size.height() * self.zoom)))

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        """The contents' own at the default scale (their larger text scrolls): zooming never grows the window."""
        widget = self.widget()
        if widget is None:
            return super().minimumSizeHint()
        least = widget.minimumSizeHint()
        return QSize(round(least.width() / self.zoom), round(least.height() / self.zoom))

    def sizeHint(self) -> QSize:  # noqa: N802
        widget = self.widget()
        return widget.sizeHint() if widget is not None else super().sizeHint()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._fit(event.size())

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802
        """The page's own hints changed (a taller chart, a wrapped note): the dock hears of it, as it would if
        the page were its widget, and the page is fitted again."""
        handled = super().eventFilter(watched, event)
        if watched is self.widget() and event.type() == QEvent.Type.LayoutRequest:
            self.updateGeometry()
            self._fit(self.size())
        return handled
