"""The plots follow the window's palette (light or dark): pyqtgraph draws with its own colours."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QWidget


def follow_palette(root: QWidget, palette: QPalette) -> None:
    """Give every plot under `root`, and every plot drawn from now on, the palette's background (Base)
    and text colour (Text): backgrounds, axes with their labels and grids, titles, value labels, and
    legends without a box of their own (the figures draw none: legends stand outside the data)."""
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
                    item.setLabelTextColor(foreground)  # for entries added later
                    for _, label in item.items:
                        label.setText(label.text, color=foreground)  # each label keeps a colour of its own
            elif isinstance(item, pg.LabelItem) and not isinstance(item.parentItem(), pg.LegendItem):
                item.setText(item.text)  # titles have no colour of their own: re-rendered with the new foreground
            elif isinstance(item, pg.TextItem):
                item.setColor(foreground)
