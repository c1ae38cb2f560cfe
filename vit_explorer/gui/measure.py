"""What a person sees of a figure: the on-screen rectangles of its data areas (pyqtgraph ViewBoxes).

A layout can fit every widget on screen while a figure's plotting area has collapsed to a few pixels;
these functions measure the pixels of each data area, clipped by every widget around it, so that the
presentation layout is judged by what reaches the back of a room (tests/gui/test_projector.py,
scripts/screenshots.py --lesson).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyqtgraph as pg
from PySide6.QtCore import QPoint, QRect
from PySide6.QtWidgets import QWidget


@dataclass(frozen=True)
class Area:
    """A data area in window coordinates."""

    rect: QRect

    @property
    def short_side(self) -> int:
        return min(self.rect.width(), self.rect.height()) if not self.rect.isEmpty() else 0


def _visible_rect(widget: QWidget, window: QWidget) -> QRect:
    """The part of `widget` inside every ancestor up to `window`, in window coordinates (empty if hidden)."""
    if not widget.isVisibleTo(window) or not widget.isVisible():
        return QRect()
    rect = QRect(widget.mapTo(window, QPoint(0, 0)), widget.size())
    parent = widget.parentWidget()
    while parent is not None and parent is not window:
        rect = rect.intersected(QRect(parent.mapTo(window, QPoint(0, 0)), parent.size()))
        parent = parent.parentWidget()
    return rect.intersected(window.rect())


def data_areas(widget: QWidget, window: QWidget) -> list[Area]:
    """The data areas of every plot inside `widget` (colour bars aside), clipped as they are on screen."""
    views = [widget] if isinstance(widget, pg.GraphicsView) else []
    views += widget.findChildren(pg.GraphicsView)
    areas = []
    for view in views:
        shown = _visible_rect(view.viewport(), window)
        if shown.isEmpty():
            continue
        origin = view.viewport().mapTo(window, QPoint(0, 0))
        for item in view.scene().items():
            if not isinstance(item, pg.ViewBox) or not item.isVisible() or _in_colorbar(item):
                continue
            rect = view.mapFromScene(item.sceneBoundingRect()).boundingRect().translated(origin)
            areas.append(Area(rect.intersected(shown)))
    return areas


def _in_colorbar(box: pg.ViewBox) -> bool:
    parent = box.parentItem()
    while parent is not None:
        if isinstance(parent, pg.ColorBarItem):
            return True
        parent = parent.parentItem()
    return False
