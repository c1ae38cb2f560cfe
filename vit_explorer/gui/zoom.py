"""Ctrl+plus as a zoom: text and figures grow together, within the pane's width, and what no longer fits scrolls
down.

On a fixed screen a larger text can only take room from the figures. Beyond a mode's default text scale each dock's
page keeps its pane's width and scrolls down only, as a web page does: laid out wider, it put its colour bars and
control rows past the pane's right edge, where a scroll across hid them. A browser's zoom by `zoom` makes everything
zoom^2 times larger in area; at the same width all of that goes down, so the page is laid out zoom^2 times the
pane's height: its text wraps into more lines as it grows, and its figures still get more height. A figure the
width bounds keeps its width less what its labels gain; the rows it cannot use (a map whose aspect is locked sits in
the middle of them) go, so the page ends under its last figure instead of a blank band above and below a map. A
page that follows the zoom itself (`set_zoom`: the image panel, whose image keeps zoom times its side and whose
controls keep their whole height) is laid out in the height it needs. At the default scale a ZoomArea is its
contents exactly (the same hints, no scroll bars).
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QSize, Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QFrame, QScrollArea, QWidget

from .measure import blank_height

MAX_TRIMS = 4  # a zoomed page loses the blank rows of its maps at most this many times a fit (rows of a grid)


class ZoomArea(QScrollArea):
    """A dock's page. A page with a `set_zoom(zoom)` of its own (the image panel) follows the zoom itself and is
    laid out in the room it needs; any other is laid out zoom^2 times the dock's height."""

    def __init__(self, widget: QWidget) -> None:
        super().__init__()
        self.zoom = 1.0
        self.follows = callable(getattr(widget, "set_zoom", None))  # the page follows the zoom itself
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setWidget(widget)  # sized here (_fit), not to its height for the width as widgetResizable would
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)

    def set_zoom(self, zoom: float) -> None:
        widget = self.widget()
        self.zoom = max(1.0, zoom)
        if self.follows:
            widget.set_zoom(self.zoom)
        self.updateGeometry()
        # down only (AsNeeded across is a last resort: what has a minimum width is scrolled to, never cut)
        down = Qt.ScrollBarPolicy.ScrollBarAsNeeded if self.follows else Qt.ScrollBarPolicy.ScrollBarAlwaysOn
        self.setVerticalScrollBarPolicy(down if self.zoom > 1 else Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded if self.zoom > 1 else
                                          Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self._fit()

    def fit(self) -> None:
        """Lay the page out in the room the dock gives now: a hidden dock's area gets no resize event until it is
        shown, so a view exported from a hidden tab asks for this first (View.bring_up_to_date)."""
        self._fit()

    def page_height(self) -> int:
        """The height the page is laid out in before its blank rows go: the pane's, zoom^2 times it for a page that
        does not follow the zoom itself. A view choosing its arrangement reads this, not its trimmed height, which
        depends on the arrangement."""
        widget, height = self.widget(), self.maximumViewportSize().height()
        least = widget.minimumSizeHint().height() if widget is not None else 0
        return max(least, height if self.follows else round(height * self.zoom ** 2))

    def _fit(self) -> None:
        widget = self.widget()
        if widget is None:
            return
        least, room = widget.minimumSizeHint(), self.maximumViewportSize()  # less the scroll bars always on
        height = self.page_height()
        if self.follows and least.height() > room.height():  # it scrolls down: the bar, shown as needed, takes width
            room.setWidth(room.width() - self.verticalScrollBar().sizeHint().width())
        width = max(least.width(), room.width())
        widget.resize(width, height)
        if self.follows or self.zoom == 1:
            return
        for _ in range(MAX_TRIMS):  # the height no figure draws on goes (a map the width binds drew in the middle
            # of it, under a blank band as tall as the screen); each trim is one row's blank of a grid of maps
            trimmed = max(least.height(), room.height(), widget.height() - blank_height(widget))
            if trimmed >= widget.height():
                return
            widget.resize(width, trimmed)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        """The contents' own at the default scale: zooming never grows the window, nor moves the line between two
        docks."""
        widget = self.widget()
        if widget is None:
            return super().minimumSizeHint()
        least = widget.minimumSizeHint()
        if self.zoom == 1:
            return least
        # zoomed, the contents' own at the default scale (their larger text scrolls); a page that follows the zoom
        # grows down with it (the image keeps zoom times its side), so its least height is none: it scrolls
        least = QSize(round(least.width() / self.zoom), 0 if self.follows else round(least.height() / self.zoom))
        return least + QSize(self.verticalScrollBar().sizeHint().width(), 0)  # and the scroll bar beside the page

    def sizeHint(self) -> QSize:  # noqa: N802
        widget = self.widget()
        return widget.sizeHint() if widget is not None else super().sizeHint()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._fit()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802
        """The page's own hints changed (a taller chart, a wrapped note): the dock hears of it, as it would if
        the page were its widget, and the page is fitted again."""
        handled = super().eventFilter(watched, event)
        if watched is self.widget() and event.type() == QEvent.Type.LayoutRequest:
            self.updateGeometry()
            self._fit()
        return handled
