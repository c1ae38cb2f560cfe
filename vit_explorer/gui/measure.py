"""What a person sees of a figure: the on-screen rectangles of its data areas (pyqtgraph ViewBoxes; of a map whose
aspect is locked, the part of its box it draws on).

A layout can fit every widget on screen while a figure's plotting area has collapsed to a few pixels;
these functions measure the pixels of each data area, clipped by every widget around it, so that the
presentation layout is judged by what reaches the back of a room (tests/gui/test_projector.py,
scripts/screenshots.py --lesson).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyqtgraph as pg
from PySide6.QtCore import QPoint, QRect
from PySide6.QtWidgets import QGraphicsLayout, QWidget


@dataclass(frozen=True)
class Area:
    """A data area in window coordinates: `rect` what it draws on (a map whose aspect is locked: the map, not the rows
    or columns of its box it leaves blank), `box` the whole plotting box (whether the width binds it: taller than
    wide), both clipped as they are on screen."""

    rect: QRect
    box: QRect

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
    areas = []
    for view in _plot_views(widget):
        shown = _visible_rect(view.viewport(), window)
        if shown.isEmpty():
            continue
        origin = view.viewport().mapTo(window, QPoint(0, 0))
        for box in _data_boxes(view):
            whole = box.sceneBoundingRect()
            drawn = whole.intersected(box.mapViewToScene(box.targetRect()).boundingRect()) if box.state[
                "aspectLocked"] else whole  # a map keeps its aspect: the part of its box it draws on

            drawn_rect, whole_rect = (view.mapFromScene(scene).boundingRect().translated(origin).intersected(shown)
                                      for scene in (drawn, whole))
            areas.append(Area(drawn_rect, whole_rect))
    return areas


def blank_height(widget: QWidget) -> int:
    """The rows of pixels (on screen) that every figure inside `widget` leaves blank: a map whose aspect is locked
    and whose width binds sits in the middle of a taller data area, with blank rows above and below it. 0 when a
    figure uses its whole height (a curve, or a map the height binds) or there is no figure."""
    blank = None
    for view in _plot_views(widget):
        if not view.isVisible():
            continue
        layout = getattr(view.centralWidget, "layout", None)  # a figure drawn since the last resize: laid out now
        if isinstance(layout, QGraphicsLayout):
            layout.activate()
        for box in _data_boxes(view):
            (t0, t1), (v0, v1) = box.targetRange()[1], box.viewRange()[1]
            height = view.mapFromScene(box.sceneBoundingRect()).boundingRect().height()
            spare = height * (1 - (t1 - t0) / (v1 - v0)) if box.state["aspectLocked"] and v1 - v0 > t1 - t0 else 0
            blank = spare if blank is None else min(blank, spare)
    return max(0, int(blank or 0))


def _plot_views(widget: QWidget) -> list[pg.GraphicsView]:
    """`widget` itself if it is a plot view, and every plot view inside it."""
    return ([widget] if isinstance(widget, pg.GraphicsView) else []) + widget.findChildren(pg.GraphicsView)


def _data_boxes(view: pg.GraphicsView) -> list[pg.ViewBox]:
    """The data areas shown in a plot view, colour bars aside."""
    return [item for item in view.scene().items()
            if isinstance(item, pg.ViewBox) and item.isVisible() and not _in_colorbar(item)]


def _in_colorbar(box: pg.ViewBox) -> bool:
    parent = box.parentItem()
    while parent is not None:
        if isinstance(parent, pg.ColorBarItem):
            return True
        parent = parent.parentItem()
    return False


# the projector targets (issue 15), as shares of the screen's height: the largest data area of the view a step
# is about, the least any of its data areas may have (px, short side), and the input image
LARGEST_SHARE, SMALLEST_PX, IMAGE_SHARE = 0.35, 120, 0.25


def step_measure(window: QWidget, view_title: str | None) -> dict[str, object]:
    """The short sides (px) of the data areas of a lesson step's view and of the input image, as a person sees
    them, with what falls short of the targets ([] when none does)."""
    view = window.views.get(view_title) if view_title else window.current_view()
    areas = sorted((a.short_side for a in data_areas(view, window)), reverse=True) if view is not None else []
    image = max((a.short_side for a in data_areas(window.image_panel.plot, window)), default=0)
    height = window.height()
    short = []
    if areas and areas[0] < LARGEST_SHARE * height:
        short.append(f"largest data area {areas[0]} px < {LARGEST_SHARE:.0%} of {height}")
    if areas and areas[-1] < SMALLEST_PX:
        short.append(f"a data area of {areas[-1]} px < {SMALLEST_PX}")
    if image < IMAGE_SHARE * height:
        short.append(f"input image {image} px < {IMAGE_SHARE:.0%} of {height}")
    return {"view": view_title, "areas": areas, "image": image, "screen_height": height, "short": short}

