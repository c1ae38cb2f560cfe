"""The one drawing module: the app's views and the headless `inspect` report draw the same pictures.

Compositions (one per kind of `vit_explorer.explore.figures` description; `draw(layout, figure)` picks):
- MapsPlot(layout, MapsFigure)          one map or small multiples over the image (or alone), one colour
                                        bar for maps on a shared scale, the heading over them; `update`
                                        feeds new numbers of the same structure in place (fast)
- SimilarityPlot(layout, SimilarityFigure)  the PE similarity mosaic(s) in a full-width row, single maps
                                        below on the same -1..1 scale; `show_map` replaces the first map
- BarsPlot(layout, BarsFigure)          bars with values (and markers); `update` in place
- draw_lines / draw_scatter / draw_rgb_tiles for LinesFigure, ScatterFigure, TilesFigure
- render_png(figure, path, size)        offscreen export of a figure (the report)

Primitives the compositions are made of (each adds its items to a `pg.GraphicsLayout` it is given,
clears nothing and returns what it created): add_title, draw_heatmap, draw_image, draw_colorbar,
draw_similarity_grid (+ similarity_mosaic), draw_bars (+ set_bar_values), draw_lines, draw_scatter,
draw_rgb_tiles, draw_masked_cells (the hatched [MASK] cells, on any plot or view box).

Image coordinates: x = column, y = row, one unit per pixel (or per cell of a heatmap); the y axis
points down. `image.mapFromScene(pos)` turns a mouse position into (col, row).
"""

from __future__ import annotations

import html as _html
import os
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyqtgraph as pg
from pyqtgraph.Qt import QtCore, QtGui, QtWidgets

from ..checkpoints.files import write_atomic
from ..explore.figures import (
    SIMILARITY_CMAP,
    BarsFigure,
    Figure,
    ImagesFigure,
    LinesFigure,
    MapsFigure,
    ScatterFigure,
    SimilarityFigure,
    TilesFigure,
    finite_levels,
)
from ..text import elide, shown
from .text import Legend
from .text import html as html_text

pg.setConfigOptions(imageAxisOrder="row-major")
COLORBARS: weakref.WeakKeyDictionary[pg.PlotItem, pg.ColorBarItem] = weakref.WeakKeyDictionary()  # plot -> its bar

TITLE_POINTS, LABEL_POINTS, TICK_POINTS = 14, 12, 11  # at text scale 1
LEAST_TITLE_CHARS = 12  # a title's lines wrap at no fewer characters, however large its text
TITLE_MARGIN_PX = 10  # a plot's title label beside its text (pyqtgraph's LabelItem and the plot's own margins)
_text_scale = 1.0  # presentation mode and Ctrl+plus / Ctrl+minus scale every text of every figure


def set_text_scale(scale: float) -> None:
    """Scale the text of figures drawn from now on (views redraw to apply it); titles wrap at fewer characters, as
    the page keeps its pane's width (gui/zoom.py)."""
    global _text_scale
    _text_scale = scale


def text_scale() -> float:
    """The scale of the figures' text now (see set_text_scale)."""
    return _text_scale


def title_size() -> str:
    return f"{TITLE_POINTS * _text_scale:.4g}pt"  # not rounded: text grows exactly with the zoom (gui/zoom.py)


def label_size() -> str:
    return f"{LABEL_POINTS * _text_scale:.4g}pt"
# A qualitative palette (Tableau 10) that stays distinguishable on white and on dark backgrounds.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")
GRID_PEN = pg.mkPen(255, 255, 255, 110, width=1)
SYMBOLS = ("o", "s", "t", "d", "+", "x", "star", "p", "h", "t1")
MARKER_SYMBOLS = (("t", "▼"), ("d", "◆"), ("s", "■"), ("o", "●"))  # pyqtgraph symbol, the glyph that names it
MAPS_COLUMN_SHARE = 0.3  # the width a similarity figure's single maps take in a column beside its mosaic


# ---------------------------------------------------------------------------- helpers
def tick_font() -> QtGui.QFont:
    font = QtGui.QFont()
    font.setPointSizeF(TICK_POINTS * _text_scale)
    return font


def spread(values: Sequence[float], gap: float) -> list[float]:
    """Heights for labels at `values` (in their order) at least `gap` apart: labels that would overlap form a group,
    evenly spaced and centred on their values' mean, so close lines' end labels stay apart and each stays by its
    line."""
    def centre(group: list[int]) -> float:
        return sum(values[i] for i in group) / len(group)

    groups: list[list[int]] = []  # runs of labels, lowest first; each centred on the mean of its values
    for i in sorted(range(len(values)), key=lambda i: values[i]):
        groups.append([i])
        while len(groups) > 1:
            low, high = groups[-2], groups[-1]
            if centre(low) + (len(low) - 1) * gap / 2 + gap <= centre(high) - (len(high) - 1) * gap / 2:
                break
            groups[-2:] = [low + high]
    heights = [0.0] * len(values)
    for group in groups:
        bottom = centre(group) - (len(group) - 1) * gap / 2
        for k, i in enumerate(group):
            heights[i] = bottom + k * gap
    return heights


class IntegerAxis(pg.AxisItem):
    """An axis with ticks on whole numbers only, for axes that count (layers, heads, steps)."""

    def tickSpacing(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, float]]:
        levels = [(spacing, offset) for spacing, offset in super().tickSpacing(minVal, maxVal, size)
                  if spacing >= 1 and float(spacing).is_integer()]
        return levels or [(1.0, 0.0)]


def _is_integer(values: np.ndarray) -> bool:
    finite = values[np.isfinite(values)]
    return finite.size > 0 and bool(np.all(finite == np.round(finite)))


MAX_TITLE = 400  # characters of a title or an axis label drawn (a longer one, quoting a file's text, is cut)
_title_chars = 44  # titles wrap at about this many characters at text scale 1 (headings a few more)


def title_char_px() -> float:
    """The width (px) of an average character of a title at text scale 1, in the font the titles are drawn in:
    how many characters fit a column of a view (`View.titles_fitting`)."""
    font = QtGui.QFont()
    font.setPointSizeF(TITLE_POINTS)
    return QtGui.QFontMetricsF(font).averageCharWidth()


def titles_px(titles: Sequence[str], chars: int) -> float:
    """The width (px) of the widest line of `titles` wrapped at `chars` characters (`title_width`), in the title
    font at the text scale in force: the least width of a column of figures with these titles."""
    font = QtGui.QFont()
    font.setPointSizeF(TITLE_POINTS * _text_scale)
    metrics = QtGui.QFontMetricsF(font)
    with title_width(chars):
        lines = [_html.unescape(line) for title in titles for line in wrap_title(title).split("<br>")]
    return max((metrics.horizontalAdvance(line) for line in lines), default=0.0)


def fitting_chars(titles: Sequence[str], px: float, most: int) -> int | None:
    """The most characters (at text scale 1, up to `most`) `titles` can wrap at and still be `px` wide or less at
    the text scale in force; None when even their narrowest wrap is wider."""
    for chars in range(most, LEAST_TITLE_CHARS - 1, -1):
        if titles_px(titles, chars) <= px:
            return chars
    return None


def label_char_px() -> float:
    """The width (px) of an average character of a figure's label (a key, an axis title) at the text scale in
    force: how many characters a line of a key holds."""
    font = QtGui.QFont()
    font.setPointSizeF(LABEL_POINTS * _text_scale)
    return QtGui.QFontMetricsF(font).averageCharWidth()


@contextmanager
def title_width(chars: int) -> Iterator[None]:
    """Titles drawn inside wrap at about `chars` characters: for figures in narrow columns (the Compare view's
    two sides), whose titles would otherwise set a minimum width wider than the column."""
    global _title_chars
    saved = _title_chars
    _title_chars = chars
    try:
        yield
    finally:
        _title_chars = saved


def wrap_title(text: str, heading: bool = False) -> str:
    """A long title broken at spaces into lines of about `title_width` characters at text scale 1 (fewer when
    the text is larger; HTML line breaks), so a narrow figure keeps it whole instead of clipping or widening."""
    width = max(LEAST_TITLE_CHARS, round((_title_chars + (4 if heading else 0)) / _text_scale))
    lines: list[str] = []
    for word in elide(text, MAX_TITLE).split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    # pyqtgraph renders titles as HTML: a model's name (its folder's) is shown as written
    return "<br>".join(_html.escape(line, quote=False) for line in lines)


def set_title(plot: pg.PlotItem, text: str, html: str | None = None, size: str | None = None) -> None:
    """Set a plot's title (wrapped; `html` as given) unless it already shows it (a new title re-lays the plot
    out), in a title row as tall as its lines (pyqtgraph fixes it at one line)."""
    wrapped = html if html is not None else wrap_title(text)
    if plot.titleLabel.text == wrapped:
        return
    plot.setTitle(wrapped, size=size or title_size())
    _title_row(plot, _title_height(plot))


def _title_height(plot: pg.PlotItem) -> float:
    return plot.titleLabel.item.boundingRect().height() + 4


def _title_row(plot: pg.PlotItem, height: float) -> None:
    plot.titleLabel.setMaximumHeight(height)
    plot.layout.setRowFixedHeight(0, height)


def even_title_rows(plots: Sequence[pg.PlotItem]) -> None:
    """Give the title row of every plot of small multiples the height of the tallest: a title wrapped onto more
    lines than the others' would take that height from its plot's image alone, drawing that map smaller."""
    titled = [plot for plot in plots if plot.titleLabel.isVisible()]
    height = max((_title_height(plot) for plot in titled), default=0.0)
    for plot in titled:
        _title_row(plot, height)


def _new_plot(layout: pg.GraphicsLayout, title: str, xlabel: str = "", ylabel: str = "",
              integer_x: bool = False, note: str = "") -> pg.PlotItem:
    axes = {"bottom": IntegerAxis("bottom")} if integer_x else None
    plot = layout.addPlot(title=None, axisItems=axes)
    if title:  # a note goes on a line of its own under the title, in italics
        set_title(plot, title, f"{wrap_title(title)}<br><i>{wrap_title(note)}</i>" if note else None)
    for side, text in (("bottom", xlabel), ("left", ylabel)):
        axis = plot.getAxis(side)
        axis.setTickFont(tick_font())
        axis.enableAutoSIPrefix(False)
        if text:
            plot.setLabel(side, html_text(text, MAX_TITLE), **{"font-size": label_size()})
    plot.setMenuEnabled(False)
    return plot


def _image_plot(layout: pg.GraphicsLayout, title: str, xlabel: str = "", ylabel: str = "", note: str = ""
                ) -> pg.PlotItem:
    plot = _new_plot(layout, title, xlabel, ylabel, note=note)
    plot.invertY(True)  # row 0 at the top, as images are read
    plot.setAspectLocked(True)
    plot.setMouseEnabled(x=False, y=False)
    plot.hideButtons()
    return plot


def _colormap(name: str) -> pg.ColorMap:
    return pg.colormap.get(name)


def _add_colorbar(plot: pg.PlotItem, image: pg.ImageItem, cmap: pg.ColorMap, levels: tuple[float, float],
                  label: str) -> pg.ColorBarItem:
    bar = pg.ColorBarItem(values=levels, colorMap=cmap, interactive=False, width=18, colorMapMenu=False)
    bar.setImageItem(image, insert_in=plot)
    COLORBARS[plot] = bar
    _bar_axis(bar, levels)
    if label:
        bar.axis.setLabel(html_text(label, MAX_TITLE), **{"font-size": label_size()})
    return bar


def _bar_axis(bar: pg.ColorBarItem, levels: tuple[float, float]) -> None:
    """A colour bar's labels: in the figures' tick font, no "(x0.001)"; a vertical bar as wide as its labels (the
    fixed 45 px hides 0.0051), a horizontal one with its end values shown (drawn half past its ends)."""
    bar.axis.setTickFont(tick_font())
    bar.axis.enableAutoSIPrefix(False)
    if not bar.horizontal:  # on a horizontal bar this would fix its length instead
        bar.axis.setWidth(None)
        return
    low, high = levels
    ends = bar.axis.tickStrings([low, high], 1.0, abs(high - low) / 4 or 1.0)
    metrics = QtGui.QFontMetrics(tick_font())
    half = max(metrics.horizontalAdvance(text) for text in ends) // 2 + 4
    bar.axis.setStyle(hideOverlappingLabels=half)
    bar.layout.setContentsMargins(half, 1, half, 1)  # the end labels inside the bar's cell: a bar as wide as its
    # view had them cut in half at the view's edges (step 11's "-1.0" read ".0")


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
    return layout.addLabel(wrap_title(text, heading=True), colspan=colspan, size=title_size(), bold=True)


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
    lv = finite_levels(data, levels)
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


class Overlay(pg.ImageItem):
    """A translucent map over the photo. Qt scales an image painted at an opacity below 1 on a slow path (2.5 ms
    for an 8x8 map over 720 px, the whole of a tiny model's forward), the same image with that opacity in its
    alpha channel on a fast one (0.5 ms): the item keeps its opacity (the setting; the colour bar and `set_opacity`
    read it), its paint moves it into the pixels of a copy made once per map and opacity."""

    _baked: tuple[int, float, QtGui.QImage] | None = None  # (the map's QImage's cache key, opacity, the copy)

    def paint(self, painter: QtGui.QPainter, *args: Any) -> None:
        if self.image is None:
            return
        if self._renderRequired:
            self.render()
        if self._unrenderable or self.qimage is None:
            return
        key = (self.qimage.cacheKey(), painter.opacity())
        if self._baked is None or self._baked[:2] != key:
            baked = QtGui.QImage(self.qimage.size(), QtGui.QImage.Format.Format_ARGB32_Premultiplied)
            baked.fill(QtCore.Qt.GlobalColor.transparent)
            bake = QtGui.QPainter(baked)
            bake.setOpacity(key[1])
            bake.drawImage(0, 0, self.qimage)
            bake.end()
            self._baked = (*key, baked)
        h, w = self.image.shape[:2]  # row-major (set once for the app)
        painter.save()
        painter.setOpacity(1.0)
        painter.drawImage(QtCore.QRectF(0, 0, w, h), self._baked[2])
        painter.restore()


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
    # painted once at screen resolution and reused: a click that changes only the map over it costs no rescale of it
    photo.setCacheMode(QtWidgets.QGraphicsItem.CacheMode.DeviceCoordinateCache)
    plot.addItem(photo)
    heat = None
    if overlay is not None:
        data = np.asarray(overlay, dtype=np.float32)
        colormap = _colormap(overlay_cmap)
        lv = finite_levels(data, overlay_levels)
        heat = Overlay(data, levels=lv)
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


def draw_colorbar(layout: pg.GraphicsLayout, images: pg.ImageItem | Sequence[pg.ImageItem], *,
                  levels: tuple[float, float], cmap: str, label: str = "", row: int | None = None,
                  col: int | None = None, rowspan: int = 1, colspan: int = 1,
                  orientation: str = "vertical") -> pg.ColorBarItem:
    """A colour bar in its own layout cell for one image or several sharing `levels` (small multiples):
    setting the bar's levels sets every image's. "horizontal": a thin row under figures side by side, which then
    keep equal widths."""
    colormap = _colormap(cmap)
    bar = pg.ColorBarItem(values=levels, colorMap=colormap, interactive=False, width=18, colorMapMenu=False,
                          orientation=orientation)
    bar.setImageItem(list(images) if isinstance(images, Sequence) else images)
    _bar_axis(bar, levels)
    if label:
        bar.axis.setLabel(html_text(label, MAX_TITLE), **{"font-size": label_size()})
    layout.addItem(bar, row=row, col=col, rowspan=rowspan, colspan=colspan)
    return bar


def mosaic_separator(grid: tuple[int, ...]) -> int:
    """The NaN gap between the tiles of a similarity mosaic: wider on a large grid, where tiles are small."""
    return 1 if max(grid[0], grid[1]) < 24 else 2


def similarity_mosaic(sim: np.ndarray) -> np.ndarray:
    """(gh, gw, gh, gw) -> one 2D array: tile (i, j) is patch (i, j)'s map, NaN separators between."""
    gh, gw = sim.shape[:2]
    separator = mosaic_separator((gh, gw))
    tiles = np.full((gh, gh + separator, gw, gw + separator), np.nan, dtype=np.float32)
    tiles[:, :gh, :, :gw] = np.asarray(sim, dtype=np.float32).transpose(0, 2, 1, 3)  # (i, r, j, c)
    mosaic = tiles.reshape(gh * (gh + separator), gw * (gw + separator))
    return mosaic[: mosaic.shape[0] - separator, : mosaic.shape[1] - separator]


def draw_similarity_grid(layout: pg.GraphicsLayout, sim: np.ndarray, *, title: str,
                         cmap: str = SIMILARITY_CMAP, levels: tuple[float, float] | None = (-1.0, 1.0),
                         colorbar_label: str = "cosine similarity", colorbar: bool = True, note: str = ""
                         ) -> tuple[pg.PlotItem, pg.ImageItem]:
    """The ViT paper's position-embedding figure: tile (row i, col j) shows the similarity of patch
    (i, j)'s embedding to every patch. sim: (gh, gw, gh, gw). note: a line under the title."""
    sim = np.asarray(sim, dtype=np.float32)
    if sim.ndim != 4 or sim.shape[:2] != sim.shape[2:]:
        raise ValueError(f"draw_similarity_grid needs (gh, gw, gh, gw), got shape {sim.shape}")
    gh, gw = sim.shape[:2]
    separator = mosaic_separator((gh, gw))
    mosaic = similarity_mosaic(sim)
    plot = _image_plot(layout, title, "input patch column", "input patch row", note=note)
    colormap = _colormap(cmap)
    lv = finite_levels(mosaic, levels)
    image = pg.ImageItem(mosaic, levels=lv)
    image.setColorMap(colormap)
    plot.addItem(image)
    if colorbar:
        _add_colorbar(plot, image, colormap, lv, colorbar_label)
    for axis_name, n, size in (("bottom", gw, gw), ("left", gh, gh)):
        step = max(1, int(np.ceil(n / 10)))
        ticks = [(i * (size + separator) + size / 2, str(i)) for i in range(0, n, step)]  # 0-based like (row, col)
        plot.getAxis(axis_name).setTicks([ticks, []])
    plot.setRange(xRange=(0, mosaic.shape[1]), yRange=(0, mosaic.shape[0]), padding=0.01)
    return plot, image


def draw_attention_thumbnail(layout: pg.GraphicsLayout, grid: np.ndarray, *, title: str,
                             cmap: str = "viridis") -> tuple[pg.PlotItem, pg.ImageItem]:
    """A small attention map over the patch grid (gh, gw), scaled to its own range (the Training view's [CLS]
    thumbnail; a flat map is uniform attention, an untrained model's)."""
    plot = _image_plot(layout, title)
    image = pg.ImageItem(np.asarray(grid, dtype=np.float32))
    image.setColorMap(_colormap(cmap))
    plot.addItem(image)
    for axis in ("bottom", "left"):
        plot.getAxis(axis).setTicks([[], []])
    return plot, image


def draw_rgb_tiles(layout: pg.GraphicsLayout, tiles: np.ndarray, *, title: str, columns: int = 7, note: str = ""
                   ) -> tuple[pg.PlotItem, pg.ImageItem]:
    """K small RGB images (K, h, w, 3) in a mosaic; each tile is min-max scaled on its own, as in
    the ViT paper's figure of patch-embedding components. note: a line under the title."""
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
    plot = _image_plot(layout, title, note=note)
    plot.hideAxis("bottom")
    plot.hideAxis("left")
    image = pg.ImageItem(mosaic, levels=(0, 255))
    plot.addItem(image)
    plot.setRange(xRange=(0, mosaic.shape[1]), yRange=(0, mosaic.shape[0]), padding=0.02)
    return plot, image


# ---------------------------------------------------------------------------- charts
class BarsPlot:
    """A BarsFigure: one bar per label with its value written after it (bar `highlight` in a second colour),
    horizontal bars top to bottom in the given order (a top-k list reads naturally), and markers (named series
    of one value per bar, drawn as symbols on the bars' rows, keyed in the title, e.g. DeiT's two heads)."""

    def __init__(self, layout: pg.GraphicsLayout, figure: BarsFigure) -> None:
        n = len(figure.values)
        if len(figure.labels) != n:
            raise ValueError(f"BarsFigure has {len(figure.labels)} labels for {n} values")
        if figure.markers and not figure.horizontal:
            raise ValueError("bars carry markers only when horizontal")
        self.figure = figure
        brushes = [pg.mkBrush(PALETTE[3] if i == figure.highlight else PALETTE[0]) for i in range(n)]
        pos = np.arange(n, dtype=np.float64)
        if figure.horizontal:
            self.plot = _new_plot(layout, figure.title, figure.xlabel, "")
            self.bars = pg.BarGraphItem(x0=0, y=pos, height=0.7, width=figure.values, brushes=brushes, pen=None)
            self.plot.invertY(True)
            # a row per bar at least as tall as its label, so no two labels overlap
            self.plot.vb.setMinimumHeight(n * (QtGui.QFontMetrics(tick_font()).height() + 2))
        else:
            self.plot = _new_plot(layout, figure.title, "", figure.xlabel)
            self.bars = pg.BarGraphItem(x=pos, y0=0, width=0.7, height=figure.values, brushes=brushes, pen=None)
        self._set_labels(figure.labels)
        self.plot.addItem(self.bars)
        keys = []
        self.scatters = []
        for i, name in enumerate(figure.markers):
            colour = PALETTE[1 + i % (len(PALETTE) - 1)]
            symbol, glyph = MARKER_SYMBOLS[i % len(MARKER_SYMBOLS)]
            scatter = pg.ScatterPlotItem(symbol=symbol, size=12, brush=pg.mkBrush(colour), pen=pg.mkPen("k", width=1))
            self.plot.addItem(scatter)
            self.scatters.append(scatter)
            keys.append(f'<span style="color:{colour}">{glyph}</span> {html_text(name)}')  # a model name
        if keys:  # the key goes in the title, where it never hides a bar or a value; one entry a line if narrow
            one_line = sum(len(name) + 4 for name in figure.markers) <= _title_chars / _text_scale
            key = ("&nbsp;&nbsp;" if one_line else "<br>").join(keys)
            set_title(self.plot, figure.title, f"{wrap_title(figure.title)}<br>{key}", label_size())
        # a fixed axis ends where its range does (probabilities at 100 %): the values go on a right-hand axis,
        # beside their bars' rows, never past the axis nor over a bar
        self.value_axis = figure.value_range is not None and figure.horizontal
        anchor = (0, 0.5) if figure.horizontal else (0.5, 1)
        self.texts = [] if self.value_axis else [pg.TextItem("", color=pg.getConfigOption("foreground"),
                                                               anchor=anchor) for _ in range(n)]
        for text in self.texts:
            text.setFont(tick_font())
            self.plot.addItem(text)
        if self.value_axis:
            assert figure.value_range is not None
            self._fix_value_axis(figure.value_range, figure.value_format)
        self._set_values(figure)
        self.plot.setMouseEnabled(x=False, y=False)

    def matches(self, figure: BarsFigure) -> bool:
        old = self.figure
        return (len(figure.values), figure.title, tuple(figure.markers), figure.horizontal, figure.value_range) == (
            len(old.values), old.title, tuple(old.markers), old.horizontal, old.value_range)

    def update(self, figure: BarsFigure) -> None:
        """New values (and labels, only if they changed: new ticks re-lay out the axis, which takes time)."""
        if figure.labels != self.figure.labels:
            self._set_labels(figure.labels)
        self.figure = figure
        self._set_values(figure)

    def _set_labels(self, labels: Sequence[str]) -> None:
        axis = self.plot.getAxis("left" if self.figure.horizontal else "bottom")
        axis.setTicks([[(i, shown(label)) for i, label in enumerate(labels)], []])  # class names: one bounded line

    def _fix_value_axis(self, value_range: tuple[float, float], value_format: str) -> None:
        """The value axis exactly over `value_range`, ticks in the values' own format (percentages for
        probabilities); the right-hand axis, which carries the values, as wide as the widest of them."""
        low, high = value_range
        percent = "%" in value_format
        # the ends and the middle labelled, the quarters marked: five labels collide in a narrow column
        label = (lambda t: f"{t:.0%}") if percent else (lambda t: f"{t:g}")
        major = [(float(t), label(t)) for t in np.linspace(low, high, 3)]
        minor = [(float(t), "") for t in np.linspace(low, high, 5)[1::2]]
        bottom = self.plot.getAxis("bottom")
        bottom.setTicks([major, minor])
        # "0%" and "100%" stand half outside the axis: room for them (False gives 15 px, too few for large text)
        metrics = QtGui.QFontMetrics(tick_font())
        bottom.setStyle(hideOverlappingLabels=max(metrics.horizontalAdvance(major[0][1]),
                                                  metrics.horizontalAdvance(major[-1][1])) // 2 + 4)
        self.plot.showAxis("right")
        right = self.plot.getAxis("right")
        right.setTickFont(tick_font())
        right.setStyle(tickLength=0)
        widest = max((value_format.format(v) for v in (low, high, -abs(high))), key=len)
        right.setWidth(QtGui.QFontMetrics(tick_font()).horizontalAdvance(widest + "0") + 8)

    def _set_values(self, figure: BarsFigure) -> None:
        values = np.asarray(figure.values, dtype=np.float64)
        n = len(values)
        self.bars.setOpts(**({"width": values} if figure.horizontal else {"height": values}))
        ends = values.copy()
        for scatter, marks in zip(self.scatters, figure.markers.values(), strict=True):
            marks = np.asarray(marks, dtype=np.float64)
            scatter.setData(x=marks, y=np.arange(n, dtype=np.float64))
            ends = np.maximum(ends, marks)
        if self.value_axis:
            self.plot.getAxis("right").setTicks([[(i, figure.value_format.format(v)) for i, v in enumerate(values)],
                                                 []])
        else:
            for i, (text, v, end) in enumerate(zip(self.texts, values, ends, strict=True)):
                text.setText(figure.value_format.format(v))
                # a negative bar's value right of zero, not over the bar
                text.setPos(*((max(end, 0.0), i) if figure.horizontal else (i, max(v, 0.0))))
        if figure.value_range is not None:
            low, high = figure.value_range
            # a little beyond the end, so its tick label ("100%") has room; vertical: room above for the texts
            span = high + (0.04 if self.value_axis else 0.22) * (high - low)
        else:
            top = float(np.nanmax(np.abs(ends))) if n else 1.0
            span = top * 1.35 if top > 0 else 1.0
            low = min(0.0, float(np.nanmin(values)) * 1.3) if n else 0.0
        if figure.horizontal:
            self.plot.setRange(xRange=(low, span), yRange=(-0.6, n - 0.4), padding=0)
        else:
            self.plot.setRange(yRange=(low, span), xRange=(-0.6, n - 0.4), padding=0)


def _legend(columns: int = 1) -> pg.LegendItem:
    """A legend for a layout cell of its own, outside every data area: no box, text in the foreground colour
    (palette.follow_palette recolours it with the theme), only as tall as its rows."""
    legend = Legend(labelTextSize=label_size(), labelTextColor=pg.getConfigOption("foreground"), colCount=columns)
    legend.setSizePolicy(QtWidgets.QSizePolicy.Policy.Preferred, QtWidgets.QSizePolicy.Policy.Fixed)
    return legend


def draw_lines(layout: pg.GraphicsLayout, x: Sequence[float], series: Mapping[str, Sequence[float]], *,
               title: str, xlabel: str, ylabel: str, markers: bool = True, integer_x: bool | None = None,
               x_ticks: Sequence[tuple[float, str]] = (), legend: bool = True,
               y_range: tuple[float, float] | None = None) -> pg.PlotItem:
    """One line per named series over the same x, with a legend in a row below the plot (curves added later
    with a name join it: it is the plot's `legend`). integer_x: ticks on whole numbers only (x counts layers
    or steps); None decides from x (say True for curves that start empty). x_ticks: fixed (value, label) ticks.
    legend=False: none (a figure of several plots with one legend for all, the Training view's). y_range: a fixed
    y axis (a share: (0, 1)); None fits the data."""
    xs = np.asarray(x, dtype=np.float64)
    # the plot, and under it its legend: a legend over the data area hides curves
    cell = layout.addLayout() if legend else layout
    plot = _new_plot(cell, title, xlabel, ylabel, integer_x=_is_integer(xs) if integer_x is None else integer_x)
    if x_ticks:
        plot.getAxis("bottom").setTicks([[(float(v), label) for v, label in x_ticks], []])
    if legend:
        cell.nextRow()
        plot.legend = _legend(columns=3)
        cell.addItem(plot.legend)
        cell.layout.setAlignment(plot.legend, QtCore.Qt.AlignmentFlag.AlignHCenter)
    for i, (name, y) in enumerate(series.items()):
        colour = PALETTE[i % len(PALETTE)]
        plot.plot(xs, np.asarray(y, dtype=np.float64), pen=pg.mkPen(colour, width=2.5), name=name,
                  symbol=SYMBOLS[i % len(SYMBOLS)] if markers else None, symbolSize=8,
                  symbolBrush=colour, symbolPen=None)
    plot.showGrid(x=True, y=True, alpha=0.25)
    if y_range is not None:
        plot.setYRange(*y_range, padding=0.02)
        plot.getViewBox().enableAutoRange(axis="y", enable=False)
    return plot


def draw_scatter(layout: pg.GraphicsLayout, x: Sequence[float], y: Sequence[float], *,
                 groups: Sequence[str] | None = None, title: str, xlabel: str, ylabel: str,
                 jitter: float = 0.0, reference: tuple[float, str] | None = None, y_from_zero: bool = False
                 ) -> pg.PlotItem:
    """Points coloured by group, with a legend below the plot, e.g. mean attention distance: one
    point per head (group = head) against depth (x = layer). jitter spreads the groups side by side
    over that width of x so points at the same x stay visible. Whole-number x gets whole-number ticks.
    reference: (y, name) of a dashed horizontal line, named in the legend; y_from_zero: the y axis starts at 0."""
    xs, ys = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    cell = layout.addLayout()  # the plot, and under it its legend, as draw_lines: beside it, a narrow view cut it
    plot = _new_plot(cell, title, xlabel, ylabel, integer_x=_is_integer(xs))
    names = list(dict.fromkeys(groups)) if groups is not None else [""]
    group_of = np.asarray(groups) if groups is not None else np.array([""] * len(xs))
    legend = None
    if len(names) > 1 or reference is not None:
        cell.nextRow()
        legend = _legend(columns=3 if len(names) <= 16 else 6)
        cell.addItem(legend)
        cell.layout.setAlignment(legend, QtCore.Qt.AlignmentFlag.AlignHCenter)
    for i, name in enumerate(names):
        keep = group_of == name
        colour = PALETTE[i % len(PALETTE)]
        offset = (i - (len(names) - 1) / 2) * jitter / max(len(names), 1)
        item = plot.plot(xs[keep] + offset, ys[keep], pen=None, symbol=SYMBOLS[i // len(PALETTE) % len(SYMBOLS)],
                         symbolSize=9, symbolBrush=colour, symbolPen=pg.mkPen("k", width=0.5))
        if legend is not None and len(names) > 1:
            legend.addItem(item, name)
    if reference is not None and legend is not None:
        value, name = reference
        ends = [float(xs.min()) - 0.5, float(xs.max()) + 0.5] if xs.size else [0.0, 1.0]
        line = plot.plot(ends, [value, value], pen=pg.mkPen(pg.getConfigOption("foreground"), width=1.5,
                                                           style=QtCore.Qt.PenStyle.DashLine))
        legend.addItem(line, name)
    if y_from_zero:
        finite = ys[np.isfinite(ys)]
        tops = ([float(finite.max())] if finite.size else []) + ([reference[0]] if reference is not None else [])
        top = max(tops, default=1.0)
        top = top if top > 0 else 1.0
        plot.setYRange(-0.001 * top, top * 1.08, padding=0)  # a hair below 0, where rounding would drop its tick
        plot.getAxis("left").setStyle(hideOverlappingLabels=False)  # the "0" at the corner stands half outside
    if legend is not None:  # only as tall as its rows: stretched, it parts its rows from their symbols
        legend.setMaximumHeight(legend.layout.preferredHeight())
    plot.showGrid(x=True, y=True, alpha=0.25)
    return plot


# ---------------------------------------------------------------------------- compositions
class MapsPlot:
    """A MapsFigure: one map with its own colour bar, or small multiples under a heading with one colour bar
    for all of them (on a shared scale every map is set through it); over the image with its patch grid and
    hatched [MASK] cells, or the maps alone."""

    def __init__(self, layout: pg.GraphicsLayout, figure: MapsFigure) -> None:
        self.figure = figure
        k = len(figure.maps)
        rows, columns = figure.shape()
        single = k == 1
        values, levels = figure.shown(), figure.shown_levels()
        self.heading = None
        if not single and figure.heading:  # an empty heading (said elsewhere, e.g. the Explain view) takes no row
            self.heading = add_title(layout, figure.heading, colspan=columns + 1)
            layout.nextRow()
        first_row = layout.currentRow
        self.plots: list[pg.PlotItem] = []
        self.photos: list[pg.ImageItem] = []
        self.heats: list[pg.ImageItem] = []
        for i, title in enumerate(figure.titles):
            if i and i % columns == 0:
                layout.nextRow()
            if figure.image is None:
                plot, heat = draw_heatmap(layout, values[i], title=title, cmap=figure.cmap, levels=levels,
                                          colorbar_label=figure.colorbar_label, grid=figure.grid, colorbar=single)
            else:
                plot, photo, overlay = draw_image(
                    layout, figure.image, title=title, grid=figure.grid, overlay=values[i],
                    overlay_alpha=figure.opacity, overlay_cmap=figure.cmap, overlay_levels=levels,
                    overlay_label=figure.colorbar_label, masked=figure.masked, colorbar=single, axes=single)
                assert overlay is not None
                self.photos.append(photo)
                heat = overlay
            self.plots.append(plot)
            self.heats.append(heat)
        even_title_rows(self.plots)  # every map the same size, whatever lines its title takes
        if not single:  # and whatever its column's title asks: columns equally wide
            widest = max(plot.effectiveSizeHint(QtCore.Qt.SizeHint.PreferredSize).width() for plot in self.plots)
            for column in range(columns):
                layout.layout.setColumnPreferredWidth(column, widest)
                layout.layout.setColumnStretchFactor(column, 1)
        if single:
            self.bar = _colorbar_of(self.plots[0])
        else:
            self.bar = draw_colorbar(layout, self.heats, levels=levels, cmap=figure.cmap, label=figure.colorbar_label,
                                     row=first_row, col=columns, rowspan=rows)

    def matches(self, figure: MapsFigure) -> bool:
        """Whether `update` can show this figure (the same plots and colour bar, only other numbers and titles)."""
        def look(f: MapsFigure) -> tuple[object, ...]:
            return (len(f.maps), f.grid, None if f.image is None else f.image.shape, f.scale, f.cmap, f.colorbar_label,
                    f.levels, bool(f.heading))

        return look(figure) == look(self.figure)

    def update(self, figure: MapsFigure) -> None:
        """New numbers, titles, photo and masked cells, in place (rebuilding plots costs the GUI thread)."""
        old, self.figure = self.figure, figure
        values, levels = figure.shown(), figure.shown_levels()
        if self.heading is not None and self.heading.text != wrap_title(figure.heading, heading=True):
            self.heading.setText(wrap_title(figure.heading, heading=True), size=title_size(), bold=True)
        new_photo = figure.image is not None and (old.image is None or not np.array_equal(old.image, figure.image))
        new_mask = not _same_mask(old.masked, figure.masked)
        # the same numbers (a head toggled in a later block, a click on the same patch): no map rendered again
        new_values = (figure.scale != old.scale or tuple(old.shown_levels()) != tuple(levels)
                      or not np.array_equal(old.maps, figure.maps))
        for i, (plot, heat) in enumerate(zip(self.plots, self.heats, strict=True)):
            set_title(plot, figure.titles[i])
            if new_values:
                heat.setImage(np.asarray(values[i], np.float32), levels=levels, autoLevels=False)
            if new_photo:
                self.photos[i].setImage(figure.image, levels=(0, 255), autoLevels=False)
            if new_mask and figure.image is not None:
                for item in [item for item in plot.items if isinstance(item, QtWidgets.QGraphicsPathItem)]:
                    plot.removeItem(item)
                if figure.masked is not None and figure.masked.any():
                    draw_masked_cells(plot, figure.masked, *figure.image.shape[:2])
        even_title_rows(self.plots)
        if self.bar is not None and tuple(self.bar.levels()) != tuple(levels):  # new ticks cost 1-2 ms of Python
            self.bar.setLevels(values=levels)
        if figure.opacity != old.opacity:
            self.set_opacity(figure.opacity)

    def set_opacity(self, opacity: float) -> None:
        if self.figure.image is not None:
            for heat in self.heats:
                heat.setOpacity(opacity)


def _same_mask(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and bool(np.array_equal(a, b))


def _colorbar_of(plot: pg.PlotItem) -> pg.ColorBarItem | None:
    """The colour bar `_add_colorbar` put next to a plot, if any."""
    return COLORBARS.get(plot)


class SimilarityPlot:
    """A SimilarityFigure: the similarity mosaic (and any others beside it) in a full-width row, and the
    single maps in the row below (or in a column beside) on the same scale, with one colour bar after the last."""

    def __init__(self, layout: pg.GraphicsLayout, figure: SimilarityFigure, colorbar: bool = True,
                 columns: int = 0, maps_beside: bool = False) -> None:
        """`colorbar=False` leaves the colour bar to a figure beside it on the same scale (Compare's other side);
        `columns`: mosaics a row (0: all in one), the others wrap onto the rows below; `maps_beside`: the single
        maps in a column right of the mosaics, a MAPS_COLUMN_SHARE of the width (a wide pane: the mosaic gets
        the whole height)."""
        self.figure = figure
        self.levels = finite_levels(figure.similarity, figure.levels)  # one scale for every mosaic and map
        top = layout.addLayout()
        top.setContentsMargins(0, 0, 0, 0)  # the layout around it has margins of its own: the pixels go to the grid
        self.mosaic_plot, self.mosaic = draw_similarity_grid(top, figure.similarity, title=figure.title,
                                                             levels=self.levels, colorbar_label=figure.colorbar_label,
                                                             colorbar=colorbar and not figure.others, note=figure.note)
        for i, (name, other) in enumerate(figure.others, start=1):  # one colour bar, after the last: the same scale
            if columns and i % columns == 0:
                top.nextRow()
            draw_similarity_grid(top, other, title=name, levels=self.levels, colorbar_label=figure.colorbar_label,
                                 colorbar=i == len(figure.others))
        for column in range(columns or 1 + len(figure.others)):  # wrapped or not, the mosaics share the width
            top.layout.setColumnStretchFactor(column, 1)
        self.maps: list[tuple[pg.PlotItem, pg.ImageItem]] = []
        if figure.maps:
            if maps_beside:
                column = layout.addLayout()
                layout.layout.setColumnStretchFactor(0, round(10 * (1 - MAPS_COLUMN_SHARE)))
                layout.layout.setColumnStretchFactor(1, round(10 * MAPS_COLUMN_SHARE))
            else:
                layout.nextRow()
                column = layout.addLayout()
                layout.layout.setRowStretchFactor(0, 3)
                layout.layout.setRowStretchFactor(1, 2)
            chars = round(_title_chars * MAPS_COLUMN_SHARE) if maps_beside else _title_chars // len(figure.maps)
            with title_width(max(12, chars)):  # beside: the column's share; below: side by side, a share each
                for i, (title, values) in enumerate(figure.maps):  # on the mosaic's scale: its colour bar serves
                    if maps_beside and i:  # them too
                        column.nextRow()
                    self.maps.append(draw_heatmap(column, values, title=title, cmap=SIMILARITY_CMAP,
                                                  levels=self.levels, grid=values.shape, colorbar=False))

    def show_map(self, title: str, values: np.ndarray) -> None:
        """Replace the first single map (a clicked patch's), in place."""
        if not self.maps:
            return
        plot, image = self.maps[0]
        image.setImage(np.asarray(values, np.float32), levels=self.levels, autoLevels=False)
        set_title(plot, title)

    def tile_at(self, pos: QtCore.QPointF) -> tuple[int, int] | None:
        """Which tile (patch row, col) of the mosaic a scene position falls on."""
        point = self.mosaic.mapFromScene(pos)
        h, w = self.mosaic.image.shape[:2]
        gh, gw = self.figure.similarity.shape[:2]
        sep_y = (h - gh * gh) / (gh - 1) if gh > 1 else 0
        sep_x = (w - gw * gw) / (gw - 1) if gw > 1 else 0
        row, col = int(point.y() // (gh + sep_y)), int(point.x() // (gw + sep_x))
        if 0 <= row < gh and 0 <= col < gw and 0 <= point.x() < w and 0 <= point.y() < h:
            return row, col
        return None


class ImagesPlot:
    """An ImagesFigure: RGB pictures side by side (`pairs` pairs of photo and colours a row), titled."""

    def __init__(self, layout: pg.GraphicsLayout, figure: ImagesFigure, pairs: int = 1,
                 column_px: float | None = None) -> None:
        """column_px: the width a column has in the view; the pictures' titles wrap (and a word longer than that, a
        file's name, is cut) to fit it: a wider title made its column wider and the pictures beside it smaller."""
        self.figure = figure
        paired = len(figure.images) % 2 == 0  # an image beside its colours
        columns = 2 * pairs if paired else min(len(figure.images), 3)
        add_title(layout, figure.title, colspan=columns)
        self.plots: list[pg.PlotItem] = []
        self.photos: list[pg.ImageItem] = []
        titles, chars = figure.titles, _title_chars
        if column_px is not None:
            font = QtGui.QFont()
            font.setPointSizeF(TITLE_POINTS * _text_scale)
            metrics, room = QtGui.QFontMetricsF(font), column_px - TITLE_MARGIN_PX
            titles = tuple(" ".join(metrics.elidedText(word, QtCore.Qt.TextElideMode.ElideRight, room)
                                    for word in title.split(" ")) for title in titles)
            chars = fitting_chars(titles, room, _title_chars) or LEAST_TITLE_CHARS
        with title_width(chars):
            for i, (image, title) in enumerate(zip(figure.images, titles, strict=True)):
                if i % columns == 0:
                    layout.nextRow()
                plot, photo, _ = draw_image(layout, image, title=title, grid=figure.grid, axes=False)
                self.plots.append(plot)
                self.photos.append(photo)
        widest = max(plot.titleLabel.minimumWidth() for plot in self.plots)
        for plot in self.plots:  # columns of one width: a longer title made its column wider, the others' pictures
            plot.setMinimumWidth(widest)  # smaller
            plot.setPreferredWidth(widest)
        even_title_rows(self.plots)  # and pictures on one line: a title that wraps once more pushed its picture down

    def pixel_at(self, pos: QtCore.QPointF) -> tuple[int, int, int] | None:
        """(image index, row, col) of the pixel under a scene position, or None."""
        for i, photo in enumerate(self.photos):
            if photo.sceneBoundingRect().contains(pos):
                point = photo.mapFromScene(pos)
                return i, int(point.y()), int(point.x())
        return None


def draw(layout: pg.GraphicsLayout, figure: Figure) -> Any:
    """Draw any figure description with its composition; returns what was drawn (a composition object, or the
    plot or (plot, image) of the simpler figures)."""
    if isinstance(figure, MapsFigure):
        return MapsPlot(layout, figure)
    if isinstance(figure, SimilarityFigure):
        return SimilarityPlot(layout, figure)
    if isinstance(figure, BarsFigure):
        return BarsPlot(layout, figure)
    if isinstance(figure, LinesFigure):
        return draw_lines(layout, figure.x, figure.series, title=figure.title, xlabel=figure.xlabel,
                          ylabel=figure.ylabel, x_ticks=figure.x_ticks, y_range=figure.y_range)
    if isinstance(figure, ScatterFigure):
        return draw_scatter(layout, figure.x, figure.y, groups=figure.groups, title=figure.title,
                            xlabel=figure.xlabel, ylabel=figure.ylabel, jitter=figure.jitter,
                            reference=figure.reference, y_from_zero=figure.y_from_zero)
    if isinstance(figure, ImagesFigure):
        return ImagesPlot(layout, figure)
    if isinstance(figure, TilesFigure):
        return draw_rgb_tiles(layout, figure.tiles, title=figure.title, columns=figure.columns, note=figure.note)
    raise TypeError(f"no composition draws {type(figure).__name__}")


# ---------------------------------------------------------------------------- export
def render_png(figure: Figure, path: str | Path, size: tuple[int, int] = (900, 700)) -> Path:
    """Draw a figure offscreen into a (width, height) GraphicsLayoutWidget and save a PNG (white background).

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
        draw(widget.ci, figure)
        widget.show()
        QtWidgets.QApplication.processEvents()
        pixmap = widget.grab()
        widget.close()
        widget.deleteLater()
    finally:
        pg.setConfigOptions(**saved)

    def save(tmp: str) -> None:
        if not pixmap.save(tmp, "PNG"):
            raise OSError(f"{path}: could not write the PNG")

    write_atomic(path, save)  # a regular file, whole or not at all (the report's and the analyses' figures)
    return path
