"""Updating figures drawn by `figures` in place.

Building a pyqtgraph PlotItem (and a colour bar, itself a PlotItem) costs tens of milliseconds of
GUI-thread time, too much to repeat on every mask click or training step. Views draw a figure once
with `figures.draw_*` and, while its structure stays the same, feed new numbers to its items here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QGraphicsPathItem, QWidget

from . import figures


def colorbar_of(plot: pg.PlotItem) -> pg.ColorBarItem | None:
    """The colour bar `figures` put next to a plot (right of its axis), if any."""
    item = plot.layout.itemAt(2, 5)
    return item if isinstance(item, pg.ColorBarItem) else None


def levels_of(values: np.ndarray, levels: tuple[float, float] | None = None) -> tuple[float, float]:
    if levels is not None:
        return levels
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return 0.0, 1.0
    lo, hi = float(finite.min()), float(finite.max())
    return (lo, hi) if hi > lo else (lo - 0.5, hi + 0.5)


def update_heat(plot: pg.PlotItem, image: pg.ImageItem, values: np.ndarray,
                levels: tuple[float, float] | None = None) -> None:
    """New values (of the same shape) for a heat map; its colour bar follows."""
    values = np.asarray(values, np.float32)
    lv = levels_of(values, levels)
    image.setImage(values, levels=lv, autoLevels=False)  # same shape: an overlay stays stretched over the photo
    bar = colorbar_of(plot)
    if bar is not None:
        bar.setLevels(values=lv)


def update_masked(plot: pg.PlotItem, masked: np.ndarray | None, height: float, width: float) -> None:
    """Replace the hatched masked-patch cells of an image figure."""
    for item in list(plot.items):
        if isinstance(item, QGraphicsPathItem):
            plot.removeItem(item)
    if masked is not None and masked.any():
        figures.draw_masked_cells(plot, masked, height, width)


def update_bars(plot: pg.PlotItem, bars: pg.BarGraphItem, labels: Sequence[str] | None, values: Sequence[float],
                value_format: str = "{:.1%}", markers: Mapping[str, Sequence[float]] | None = None) -> None:
    """New labels, values and markers for horizontal bars drawn by `figures.draw_bars` (same number of
    bars, same marker series)."""
    if labels is not None:  # None: the same classes (new ticks re-lay out the axis, which takes time)
        plot.getAxis("left").setTicks([[(i, str(label)) for i, label in enumerate(labels)], []])
    figures.set_bar_values(plot, bars, np.asarray(values, np.float64), value_format, True, markers)


def follow_palette(root: QWidget, palette: QPalette) -> None:
    """Give every plot under `root`, and every plot drawn from now on, the palette's background (Base)
    and text colour (Text): backgrounds, axes with their labels and grids, titles, value labels, and
    legends without a box of their own (boxed legends keep dark text on their light box)."""
    background = palette.color(QPalette.ColorRole.Base)
    foreground = palette.color(QPalette.ColorRole.Text)
    pg.setConfigOptions(background=background, foreground=foreground)
    for view in root.findChildren(pg.GraphicsView):
        view.setBackground(background)
        for item in view.scene().items():
            if isinstance(item, pg.AxisItem):
                item.setPen(foreground)
                item.setTextPen(foreground)
            elif isinstance(item, pg.LegendItem):
                if item.brush().style() == Qt.BrushStyle.NoBrush:
                    item.setLabelTextColor(foreground)
                    for _, label in item.items:
                        label.setText(label.text)  # setLabelTextColor only records the colour
            elif isinstance(item, pg.LabelItem) and not isinstance(item.parentItem(), pg.LegendItem):
                item.setText(item.text)  # titles have no colour of their own: re-rendered with the new foreground
            elif isinstance(item, pg.TextItem):
                item.setColor(foreground)
