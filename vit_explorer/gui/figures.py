"""The one drawing module: the app's views and the headless `inspect` report draw the same pictures.

Every `draw_*` function adds its items to a `pg.GraphicsLayout` it is given (it clears nothing) and
returns what it created, so a view can own a `pg.GraphicsLayoutWidget`, call `widget.ci.clear()`
and then `draw_x(widget.ci, ...)` on each update, and attach hover/click handlers to the result:

- add_title(layout, text, colspan) -> LabelItem   a title over a whole figure of several plots
- draw_heatmap(layout, array2d, *, title, cmap, levels, colorbar_label, grid, xlabel, ylabel, colorbar)
      -> (PlotItem, ImageItem)             a 2D array, row 0 at the top, with a labelled colour bar
- draw_image(layout, rgb, *, title, grid, overlay, overlay_alpha, overlay_cmap, overlay_levels,
      overlay_label, masked, colorbar, axes) -> (PlotItem, ImageItem, ImageItem | None)
                                           the image as the model sees it, patch grid, heatmap
                                           overlay stretched so its cells align with patches,
                                           masked patches hatched grey
- draw_colorbar(layout, image, *, levels, cmap, label, row, col, rowspan) -> ColorBarItem  in its own cell
- draw_similarity_grid(layout, sim, *, title, cmap, levels, colorbar_label) -> (PlotItem, ImageItem)
                                           the ViT paper's figure: a gh x gw mosaic of per-patch
                                           similarity maps with thin separators, one colour bar
- similarity_mosaic(sim, separator) -> 2D array   the mosaic draw_similarity_grid shows (for setImage)
- draw_bars(layout, labels, values, *, title, horizontal, value_format, highlight, xlabel, markers)
      -> (PlotItem, BarGraphItem)          markers: named per-bar values drawn as symbols (DeiT's heads)
- set_bar_values(plot, bars, values, value_format, horizontal, markers)   new numbers for those bars
- draw_lines(layout, x, series, *, title, xlabel, ylabel, markers, integer_x) -> PlotItem   (with a legend)
- draw_scatter(layout, x, y, *, groups, title, xlabel, ylabel, jitter) -> PlotItem  (legend beside it)
- draw_rgb_tiles(layout, tiles, *, title, columns) -> (PlotItem, ImageItem)
- render_png(draw, path, size) -> Path    offscreen export of whatever `draw(layout)` adds

- draw_masked_cells(plot_or_viewbox, masked, height, width)   the hatched [MASK] cells of `draw_image`
                                           on any plot or view box (masks look the same everywhere)

Image coordinates: x = column, y = row, one unit per pixel (or per cell of a heatmap); the y axis
points down. `image.mapFromScene(pos)` turns a mouse position into (col, row).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from pyqtgraph.Qt import QtCore, QtGui, QtWidgets

pg.setConfigOptions(imageAxisOrder="row-major")

TITLE_SIZE = "14pt"
LABEL_SIZE = "12pt"
TICK_POINT_SIZE = 11
SIMILARITY_CMAP = "CET-D1"  # diverging, for cosine similarity in -1..1
# A qualitative palette (Tableau 10) that stays distinguishable on white and on dark backgrounds.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")
GRID_PEN = pg.mkPen(255, 255, 255, 110, width=1)
SYMBOLS = ("o", "s", "t", "d", "+", "x", "star", "p", "h", "t1")
MARKER_SYMBOLS = (("t", "▼"), ("d", "◆"), ("s", "■"), ("o", "●"))  # pyqtgraph symbol, the glyph that names it


# ---------------------------------------------------------------------------- helpers
def _tick_font() -> QtGui.QFont:
    font = QtGui.QFont()
    font.setPointSize(TICK_POINT_SIZE)
    return font


class IntegerAxis(pg.AxisItem):
    """An axis with ticks on whole numbers only, for axes that count (layers, heads, steps)."""

    def tickSpacing(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, float]]:
        levels = [(spacing, offset) for spacing, offset in super().tickSpacing(minVal, maxVal, size)
                  if spacing >= 1 and float(spacing).is_integer()]
        return levels or [(1.0, 0.0)]


def _is_integer(values: np.ndarray) -> bool:
    finite = values[np.isfinite(values)]
    return finite.size > 0 and bool(np.all(finite == np.round(finite)))


def _new_plot(layout: pg.GraphicsLayout, title: str, xlabel: str = "", ylabel: str = "",
              integer_x: bool = False) -> pg.PlotItem:
    axes = {"bottom": IntegerAxis("bottom")} if integer_x else None
    plot = layout.addPlot(title=None, axisItems=axes)
    if title:
        plot.setTitle(title, size=TITLE_SIZE)
    for side, text in (("bottom", xlabel), ("left", ylabel)):
        axis = plot.getAxis(side)
        axis.setTickFont(_tick_font())
        axis.enableAutoSIPrefix(False)
        if text:
            plot.setLabel(side, text, **{"font-size": LABEL_SIZE})
    plot.setMenuEnabled(False)
    return plot


def _image_plot(layout: pg.GraphicsLayout, title: str, xlabel: str = "", ylabel: str = "") -> pg.PlotItem:
    plot = _new_plot(layout, title, xlabel, ylabel)
    plot.invertY(True)  # row 0 at the top, as images are read
    plot.setAspectLocked(True)
    plot.setMouseEnabled(x=False, y=False)
    plot.hideButtons()
    return plot


def _colormap(name: str) -> pg.ColorMap:
    return pg.colormap.get(name)


def _finite_levels(array: np.ndarray, levels: tuple[float, float] | None) -> tuple[float, float]:
    if levels is not None:
        return float(levels[0]), float(levels[1])
    finite = array[np.isfinite(array)]
    if finite.size == 0:
        return 0.0, 1.0
    lo, hi = float(finite.min()), float(finite.max())
    return (lo, hi) if hi > lo else (lo - 0.5, hi + 0.5)


def _add_colorbar(plot: pg.PlotItem, image: pg.ImageItem, cmap: pg.ColorMap, levels: tuple[float, float],
                  label: str) -> pg.ColorBarItem:
    bar = pg.ColorBarItem(values=levels, colorMap=cmap, interactive=False, width=18, colorMapMenu=False)
    bar.setImageItem(image, insert_in=plot)
    bar.axis.setTickFont(_tick_font())
    bar.axis.enableAutoSIPrefix(False)  # "attention (x0.001)" confuses more than it helps
    bar.axis.setWidth(None)  # the bar's fixed 45 px hides labels such as 0.0051; size to the labels
    if label:
        bar.axis.setLabel(label, **{"font-size": LABEL_SIZE})
    return bar


def _grid_lines(plot: pg.PlotItem, height: float, width: float, grid: tuple[int, int],
                pen: QtGui.QPen = GRID_PEN) -> None:
    """Thin lines on the patch boundaries of an image of height x width units (one item, drawn fast)."""
    gh, gw = grid
    xs, ys = [], []
    for r in range(1, gh):
        y = r * height / gh
        xs += [0.0, width]
        ys += [y, y]
    for c in range(1, gw):
        x = c * width / gw
        xs += [x, x]
        ys += [0.0, height]
    if xs:
        plot.addItem(pg.PlotCurveItem(np.array(xs), np.array(ys), connect="pairs", pen=pen))


def _patch_ticks(plot: pg.PlotItem, height: float, width: float, grid: tuple[int, int]) -> None:
    """Axis ticks at patch centres labelled with the patch's row/column (at most ~8 labels per axis)."""
    for axis_name, n, extent in (("bottom", grid[1], width), ("left", grid[0], height)):
        step = max(1, int(np.ceil(n / 8)))
        ticks = [((i + 0.5) * extent / n, str(i)) for i in range(0, n, step)]
        plot.getAxis(axis_name).setTicks([ticks, []])


# ---------------------------------------------------------------------------- heatmaps and images
def add_title(layout: pg.GraphicsLayout, text: str, colspan: int = 1) -> pg.LabelItem:
    """A title row over a figure of several plots (call first, then `layout.nextRow()`)."""
    return layout.addLabel(text, colspan=colspan, size=TITLE_SIZE, bold=True)


def draw_heatmap(layout: pg.GraphicsLayout, array2d: np.ndarray, *, title: str, cmap: str = "viridis",
                 levels: tuple[float, float] | None = None, colorbar_label: str = "",
                 grid: tuple[int, int] | None = None, xlabel: str = "", ylabel: str = "", colorbar: bool = True
                 ) -> tuple[pg.PlotItem, pg.ImageItem]:
    """A 2D array (rows, cols) with row 0 at the top and a labelled colour bar; NaN cells are blank.

    grid=(gh, gw) draws patch boundaries over the array (e.g. a per-pixel map of a gh x gw grid).
    colorbar=False leaves the bar out, for all but the last of several maps sharing `levels`.
    """
    data = np.asarray(array2d, dtype=np.float32)
    if data.ndim != 2:
        raise ValueError(f"draw_heatmap needs a 2D array, got shape {data.shape}")
    plot = _image_plot(layout, title, xlabel, ylabel)
    colormap = _colormap(cmap)
    lv = _finite_levels(data, levels)
    image = pg.ImageItem(data, levels=lv)
    image.setColorMap(colormap)
    plot.addItem(image)
    if colorbar:
        _add_colorbar(plot, image, colormap, lv, colorbar_label)
    h, w = data.shape
    if grid is not None:
        _grid_lines(plot, h, w, grid)
    _patch_ticks(plot, h, w, grid or (h, w))  # ticks name cells (or patches), not their edges
    plot.setRange(xRange=(0, w), yRange=(0, h), padding=0.02)
    return plot, image


def draw_masked_cells(plot: pg.PlotItem | pg.ViewBox, masked: np.ndarray, height: float, width: float) -> None:
    """Grey, hatched rectangles over the masked patches (visible on any image and any overlay).

    masked: (gh, gw) bool; the image spans height x width units, so cell (r, c) covers
    [c * width / gw, (c + 1) * width / gw) x [r * height / gh, (r + 1) * height / gh).
    """
    gh, gw = masked.shape
    ch, cw = height / gh, width / gw
    path = QtGui.QPainterPath()
    for r, c in zip(*np.nonzero(masked), strict=True):
        path.addRect(QtCore.QRectF(c * cw, r * ch, cw, ch))
    fill = QtWidgets.QGraphicsPathItem(path)
    fill.setBrush(QtGui.QBrush(QtGui.QColor(128, 128, 128, 215)))
    fill.setPen(QtGui.QPen(QtCore.Qt.PenStyle.NoPen))
    hatch = QtWidgets.QGraphicsPathItem(path)
    hatch_brush = QtGui.QBrush(QtGui.QColor(30, 30, 30), QtCore.Qt.BrushStyle.BDiagPattern)
    hatch.setBrush(hatch_brush)
    hatch.setPen(pg.mkPen(40, 40, 40, width=1))
    plot.addItem(fill)
    plot.addItem(hatch)


def draw_image(layout: pg.GraphicsLayout, rgb: np.ndarray, *, title: str = "",
               grid: tuple[int, int] | None = None, overlay: np.ndarray | None = None,
               overlay_alpha: float = 0.5, overlay_cmap: str = "inferno",
               overlay_levels: tuple[float, float] | None = None, overlay_label: str = "",
               masked: np.ndarray | None = None, colorbar: bool = True, axes: bool = True
               ) -> tuple[pg.PlotItem, pg.ImageItem, pg.ImageItem | None]:
    """The image as the model sees it (rgb: (H, W, 3) uint8), with the patch grid, an optional heatmap
    overlay ((gh, gw) or (H, W) floats, stretched over the whole image so its cells align with the
    patches; it gets a colour bar unless colorbar=False, e.g. for all but one of small multiples
    sharing overlay_levels, then `draw_colorbar`) and masked patches ((gh, gw) bool) drawn grey and
    hatched. axes=False hides the pixel axes (small multiples)."""
    rgb = np.asarray(rgb)
    if rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ValueError(f"draw_image needs an (H, W, 3) image, got shape {rgb.shape}")
    h, w = rgb.shape[:2]
    plot = _image_plot(layout, title)
    photo = pg.ImageItem(rgb.astype(np.uint8), levels=(0, 255))
    plot.addItem(photo)
    heat = None
    if overlay is not None:
        data = np.asarray(overlay, dtype=np.float32)
        colormap = _colormap(overlay_cmap)
        lv = _finite_levels(data, overlay_levels)
        heat = pg.ImageItem(data, levels=lv)
        heat.setColorMap(colormap)
        heat.setRect(QtCore.QRectF(0, 0, w, h))  # one overlay cell = one patch (or one pixel)
        heat.setOpacity(overlay_alpha)
        plot.addItem(heat)
        if colorbar:
            _add_colorbar(plot, heat, colormap, lv, overlay_label)
    if masked is not None:
        draw_masked_cells(plot, np.asarray(masked, dtype=bool), h, w)
    if grid is not None:
        _grid_lines(plot, h, w, grid)
        _patch_ticks(plot, h, w, grid)
    if not axes:
        plot.hideAxis("bottom")
        plot.hideAxis("left")
    plot.setRange(xRange=(0, w), yRange=(0, h), padding=0.02)
    return plot, photo, heat


def draw_colorbar(layout: pg.GraphicsLayout, image: pg.ImageItem, *, levels: tuple[float, float], cmap: str,
                  label: str = "", row: int | None = None, col: int | None = None, rowspan: int = 1
                  ) -> pg.ColorBarItem:
    """A colour bar in its own layout cell (next to small multiples that share `levels`)."""
    colormap = _colormap(cmap)
    bar = pg.ColorBarItem(values=levels, colorMap=colormap, interactive=False, width=18, colorMapMenu=False)
    bar.setImageItem(image)
    bar.axis.setTickFont(_tick_font())
    bar.axis.enableAutoSIPrefix(False)
    bar.axis.setWidth(None)
    if label:
        bar.axis.setLabel(label, **{"font-size": LABEL_SIZE})
    layout.addItem(bar, row=row, col=col, rowspan=rowspan)
    return bar


def similarity_mosaic(sim: np.ndarray, separator: int = 1) -> np.ndarray:
    """(gh, gw, gh, gw) -> one 2D array: tile (i, j) is patch (i, j)'s map, NaN separators between."""
    gh, gw = sim.shape[:2]
    tiles = np.full((gh, gh + separator, gw, gw + separator), np.nan, dtype=np.float32)
    tiles[:, :gh, :, :gw] = np.asarray(sim, dtype=np.float32).transpose(0, 2, 1, 3)  # (i, r, j, c)
    mosaic = tiles.reshape(gh * (gh + separator), gw * (gw + separator))
    return mosaic[: mosaic.shape[0] - separator, : mosaic.shape[1] - separator]


def draw_similarity_grid(layout: pg.GraphicsLayout, sim: np.ndarray, *, title: str,
                         cmap: str = SIMILARITY_CMAP, levels: tuple[float, float] | None = (-1.0, 1.0),
                         colorbar_label: str = "cosine similarity") -> tuple[pg.PlotItem, pg.ImageItem]:
    """The ViT paper's position-embedding figure: tile (row i, col j) shows the similarity of patch
    (i, j)'s embedding to every patch. sim: (gh, gw, gh, gw)."""
    sim = np.asarray(sim, dtype=np.float32)
    if sim.ndim != 4 or sim.shape[:2] != sim.shape[2:]:
        raise ValueError(f"draw_similarity_grid needs (gh, gw, gh, gw), got shape {sim.shape}")
    gh, gw = sim.shape[:2]
    separator = 1 if max(gh, gw) < 24 else 2
    mosaic = similarity_mosaic(sim, separator)
    plot = _image_plot(layout, title, "input patch column", "input patch row")
    colormap = _colormap(cmap)
    lv = _finite_levels(mosaic, levels)
    image = pg.ImageItem(mosaic, levels=lv)
    image.setColorMap(colormap)
    plot.addItem(image)
    _add_colorbar(plot, image, colormap, lv, colorbar_label)
    for axis_name, n, size in (("bottom", gw, gw), ("left", gh, gh)):
        step = max(1, int(np.ceil(n / 10)))
        ticks = [(i * (size + separator) + size / 2, str(i)) for i in range(0, n, step)]  # 0-based like (row, col)
        plot.getAxis(axis_name).setTicks([ticks, []])
    plot.setRange(xRange=(0, mosaic.shape[1]), yRange=(0, mosaic.shape[0]), padding=0.01)
    return plot, image


def draw_rgb_tiles(layout: pg.GraphicsLayout, tiles: np.ndarray, *, title: str, columns: int = 7
                   ) -> tuple[pg.PlotItem, pg.ImageItem]:
    """K small RGB images (K, h, w, 3) in a mosaic; each tile is min-max scaled on its own, as in
    the ViT paper's figure of patch-embedding components."""
    tiles = np.asarray(tiles, dtype=np.float32)
    if tiles.ndim != 4 or tiles.shape[3] != 3:
        raise ValueError(f"draw_rgb_tiles needs (K, h, w, 3), got shape {tiles.shape}")
    k, th, tw = tiles.shape[:3]
    columns = max(1, min(columns, k))
    rows = -(-k // columns)
    sep = max(1, th // 8)
    lo = tiles.min(axis=(1, 2, 3), keepdims=True)
    hi = tiles.max(axis=(1, 2, 3), keepdims=True)
    scaled = (tiles - lo) / np.maximum(hi - lo, 1e-12)
    mosaic = np.zeros((rows * (th + sep) - sep, columns * (tw + sep) - sep, 4), dtype=np.uint8)  # RGBA
    for i in range(k):
        r, c = divmod(i, columns)
        y, x = r * (th + sep), c * (tw + sep)
        mosaic[y:y + th, x:x + tw, :3] = np.round(scaled[i] * 255).astype(np.uint8)
        mosaic[y:y + th, x:x + tw, 3] = 255
    plot = _image_plot(layout, title)
    plot.hideAxis("bottom")
    plot.hideAxis("left")
    image = pg.ImageItem(mosaic, levels=(0, 255))
    plot.addItem(image)
    plot.setRange(xRange=(0, mosaic.shape[1]), yRange=(0, mosaic.shape[0]), padding=0.02)
    return plot, image


# ---------------------------------------------------------------------------- charts
def draw_bars(layout: pg.GraphicsLayout, labels: Sequence[str], values: Sequence[float], *, title: str,
              horizontal: bool = True, value_format: str = "{:.1%}", highlight: int | None = None,
              xlabel: str = "", markers: Mapping[str, Sequence[float]] | None = None
              ) -> tuple[pg.PlotItem, pg.BarGraphItem]:
    """One bar per label with its value written next to it; bar `highlight` in a second colour.
    Horizontal bars run top to bottom in the given order (a top-k list reads naturally).

    markers (horizontal only): named series of one value per bar, drawn as symbols on the bars'
    rows with a legend, e.g. DeiT's class and distillation heads on the bars of their average.
    """
    values = np.asarray(values, dtype=np.float64)
    n = len(values)
    if len(labels) != n:
        raise ValueError(f"draw_bars got {len(labels)} labels for {n} values")
    if markers and not horizontal:
        raise ValueError("draw_bars draws markers on horizontal bars only")
    brushes = [pg.mkBrush(PALETTE[3] if i == highlight else PALETTE[0]) for i in range(n)]
    pos = np.arange(n, dtype=np.float64)
    if horizontal:
        plot = _new_plot(layout, title, xlabel, "")
        bars = pg.BarGraphItem(x0=0, y=pos, height=0.7, width=values, brushes=brushes, pen=None)
        plot.invertY(True)
        plot.getAxis("left").setTicks([[(i, str(label)) for i, label in enumerate(labels)], []])
    else:
        plot = _new_plot(layout, title, "", xlabel)
        bars = pg.BarGraphItem(x=pos, y0=0, width=0.7, height=values, brushes=brushes, pen=None)
        plot.getAxis("bottom").setTicks([[(i, str(label)) for i, label in enumerate(labels)], []])
    plot.addItem(bars)
    keys = []
    for i, (name, marks) in enumerate((markers or {}).items()):
        colour = PALETTE[1 + i % (len(PALETTE) - 1)]
        symbol, glyph = MARKER_SYMBOLS[i % len(MARKER_SYMBOLS)]
        plot.addItem(pg.ScatterPlotItem(x=np.asarray(marks, dtype=np.float64), y=pos, symbol=symbol, size=12,
                                        brush=pg.mkBrush(colour), pen=pg.mkPen("k", width=1)))
        keys.append(f'<span style="color:{colour}">{glyph}</span> {name}')
    if keys:  # the key goes in the title, where it never hides a bar or a value
        plot.setTitle(f"{title}<br>{'&nbsp;&nbsp;'.join(keys)}", size=LABEL_SIZE)
    for _ in range(n):
        text = pg.TextItem("", color=pg.getConfigOption("foreground"), anchor=(0, 0.5) if horizontal else (0.5, 1))
        text.setFont(_tick_font())
        plot.addItem(text)
    set_bar_values(plot, bars, values, value_format, horizontal, markers)
    plot.setMouseEnabled(x=False, y=False)
    return plot, bars


def set_bar_values(plot: pg.PlotItem, bars: pg.BarGraphItem, values: np.ndarray, value_format: str = "{:.1%}",
                   horizontal: bool = True, markers: Mapping[str, Sequence[float]] | None = None) -> None:
    """Bar lengths, marker positions, value texts (after the bar or its furthest marker) and the range of
    a `draw_bars` figure, updated in place (same number of bars, same marker series)."""
    n = len(values)
    bars.setOpts(**({"width": values} if horizontal else {"height": values}))
    ends = values.copy()
    scatters = [item for item in plot.items if isinstance(item, pg.ScatterPlotItem)]
    for item, marks in zip(scatters, (markers or {}).values(), strict=True):
        marks = np.asarray(marks, dtype=np.float64)
        item.setData(x=marks, y=np.arange(n, dtype=np.float64))
        ends = np.maximum(ends, marks)
    texts = [item for item in plot.items if isinstance(item, pg.TextItem)]
    for i, (text, v, end) in enumerate(zip(texts, values, ends, strict=True)):
        text.setText(value_format.format(v))
        text.setPos(*((end, i) if horizontal else (i, v)))
    top = float(np.nanmax(np.abs(ends))) if n else 1.0
    span = top * 1.35 if top > 0 else 1.0
    low = min(0.0, float(np.nanmin(values)) * 1.3) if n else 0.0
    if horizontal:
        plot.setRange(xRange=(low, span), yRange=(-0.6, n - 0.4), padding=0)
    else:
        plot.setRange(yRange=(low, span), xRange=(-0.6, n - 0.4), padding=0)


def draw_lines(layout: pg.GraphicsLayout, x: Sequence[float], series: Mapping[str, Sequence[float]], *,
               title: str, xlabel: str, ylabel: str, markers: bool = True, integer_x: bool | None = None
               ) -> pg.PlotItem:
    """One line per named series over the same x, with a legend. integer_x: ticks on whole numbers
    only (x counts layers or steps); None decides from x (say True for curves that start empty)."""
    xs = np.asarray(x, dtype=np.float64)
    plot = _new_plot(layout, title, xlabel, ylabel, integer_x=_is_integer(xs) if integer_x is None else integer_x)
    legend = plot.addLegend(offset=(10, 10), labelTextSize=LABEL_SIZE)
    legend.setBrush(pg.mkBrush(255, 255, 255, 170))
    legend.setLabelTextColor("k")
    for i, (name, y) in enumerate(series.items()):
        colour = PALETTE[i % len(PALETTE)]
        plot.plot(xs, np.asarray(y, dtype=np.float64), pen=pg.mkPen(colour, width=2.5), name=name,
                  symbol=SYMBOLS[i % len(SYMBOLS)] if markers else None, symbolSize=8,
                  symbolBrush=colour, symbolPen=None)
    plot.showGrid(x=True, y=True, alpha=0.25)
    return plot


def draw_scatter(layout: pg.GraphicsLayout, x: Sequence[float], y: Sequence[float], *,
                 groups: Sequence[str] | None = None, title: str, xlabel: str, ylabel: str,
                 jitter: float = 0.0) -> pg.PlotItem:
    """Points coloured by group, with a legend beside the plot, e.g. mean attention distance: one
    point per head (group = head) against depth (x = layer). jitter spreads the groups side by side
    over that width of x so points at the same x stay visible. Whole-number x gets whole-number ticks."""
    xs, ys = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    plot = _new_plot(layout, title, xlabel, ylabel, integer_x=_is_integer(xs))
    names = list(dict.fromkeys(groups)) if groups is not None else [""]
    group_of = np.asarray(groups) if groups is not None else np.array([""] * len(xs))
    legend = None
    if len(names) > 1:
        legend = pg.LegendItem(labelTextSize=LABEL_SIZE, labelTextColor=pg.getConfigOption("foreground"),
                               colCount=1 if len(names) <= 16 else 2)
        layout.addItem(legend)
    for i, name in enumerate(names):
        keep = group_of == name
        colour = PALETTE[i % len(PALETTE)]
        offset = (i - (len(names) - 1) / 2) * jitter / max(len(names), 1)
        item = plot.plot(xs[keep] + offset, ys[keep], pen=None, symbol=SYMBOLS[i // len(PALETTE) % len(SYMBOLS)],
                         symbolSize=9, symbolBrush=colour, symbolPen=pg.mkPen("k", width=0.5))
        if legend is not None:
            legend.addItem(item, name)
    if legend is not None:  # a legend stretched to the plot's height spreads its rows and parts them from their symbols
        legend.setMaximumHeight(legend.layout.preferredHeight())
        layout.layout.setAlignment(legend, QtCore.Qt.AlignmentFlag.AlignTop)
    plot.showGrid(x=True, y=True, alpha=0.25)
    return plot


# ---------------------------------------------------------------------------- export
def render_png(draw: Callable[[pg.GraphicsLayout], object], path: str | Path, size: tuple[int, int] = (900, 700),
               ) -> Path:
    """Draw offscreen into a (width, height) GraphicsLayoutWidget and save a PNG (white background).

    Needs a QApplication. When none exists (a headless command) one is created on the offscreen
    platform unless QT_QPA_PLATFORM says otherwise, so a server without a display works too.
    """
    path = Path(path)
    if QtWidgets.QApplication.instance() is None:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        pg.mkQApp("vit-explorer")
    saved = {key: pg.getConfigOption(key) for key in ("background", "foreground")}
    pg.setConfigOptions(background="w", foreground="k")
    try:
        widget = pg.GraphicsLayoutWidget(show=False)
        widget.setAttribute(QtCore.Qt.WidgetAttribute.WA_DontShowOnScreen)
        widget.resize(*size)
        draw(widget.ci)
        widget.show()
        QtWidgets.QApplication.processEvents()
        pixmap = widget.grab()
        widget.close()
        widget.deleteLater()
    finally:
        pg.setConfigOptions(**saved)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not pixmap.save(str(path), "PNG"):
        raise OSError(f"{path}: could not write the PNG")
    return path
