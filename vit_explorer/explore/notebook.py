"""Figures inline in a notebook: the figure compositions of explore/figures.py drawn with matplotlib's Agg canvas
into PNG bytes, with no Qt and no display (the app draws the same data with pyqtgraph, gui/figures.py). The figures'
and the library's results' `_repr_png_` call `png`, so Jupyter shows them where they are returned."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import numpy as np

from .figures import (
    BarsFigure,
    Figure,
    ImagesFigure,
    LinesFigure,
    MapsFigure,
    ScatterFigure,
    SimilarityFigure,
    TilesFigure,
)

WIDTH = 7.0  # inches at 100 dpi: a notebook column
CMAPS = {"CET-D1": "RdBu_r"}  # pyqtgraph's colorcet names matplotlib does not have; the others it shares
GAP = 0.08  # of a tile, between the tiles of a mosaic


def png(*figures: Figure, width: float = WIDTH) -> bytes:
    """The figures one under the other, as one PNG image."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as Canvas

    heights = [_height(f, width) for f in figures]
    canvas = Canvas(figsize=(width, sum(heights)), dpi=100, layout="constrained")
    parts: Any = canvas.subfigures(len(figures), 1, height_ratios=heights) if len(figures) > 1 else [canvas]
    for part, figure in zip(np.atleast_1d(parts), figures, strict=True):
        DRAW[type(figure)](part, figure)
    FigureCanvasAgg(canvas)  # draws to a buffer in memory: no display, no GUI toolkit
    buffer = io.BytesIO()
    canvas.savefig(buffer, format="png")
    return buffer.getvalue()


def _height(figure: Figure, width: float) -> float:
    """Inches of height a figure needs at `width`."""
    if isinstance(figure, MapsFigure):
        rows, columns = figure.shape()
        return 0.6 + rows * min(width / columns, 3.2) * figure.maps.shape[1] / figure.maps.shape[2]
    if isinstance(figure, BarsFigure) and figure.horizontal:
        return max(2.0, 0.9 + 0.3 * len(figure.labels))
    if isinstance(figure, SimilarityFigure):
        return 0.9 + min(width / (1 + len(figure.others)), 4.5) + (1.8 if figure.maps else 0)
    if isinstance(figure, TilesFigure):
        return 0.6 + -(-len(figure.tiles) // figure.columns) * width / figure.columns
    if isinstance(figure, ImagesFigure):
        return 0.7 + min(width / max(len(figure.images), 1), 3.2)
    return 3.4


def _cmap(name: str) -> str:
    return CMAPS.get(name, name)


def _image_axes(ax: Any, title: str) -> None:
    ax.set_title(title, fontsize=9)
    ax.set_xticks([])
    ax.set_yticks([])


def _patch_grid(ax: Any, grid: tuple[int, int], shape: tuple[int, int]) -> None:
    """Patch boundaries over an image or map of `shape` (H, W) pixels."""
    h, w = shape
    for r in range(1, grid[0]):
        ax.axhline(r * h / grid[0] - 0.5, color="white", alpha=0.25, linewidth=0.5)
    for c in range(1, grid[1]):
        ax.axvline(c * w / grid[1] - 0.5, color="white", alpha=0.25, linewidth=0.5)


def draw_maps(part: Any, figure: MapsFigure) -> None:
    rows, columns = figure.shape()
    axes = np.atleast_1d(part.subplots(rows, columns, squeeze=False)).reshape(-1)
    lo, hi = figure.shown_levels()
    shown = figure.shown()
    drawn = None
    for ax, values, title in zip(axes, shown, figure.titles, strict=False):
        if figure.image is not None:
            h, w = figure.image.shape[:2]
            ax.imshow(figure.image, extent=(-0.5, w - 0.5, h - 0.5, -0.5))
            drawn = ax.imshow(values, cmap=_cmap(figure.cmap), vmin=lo, vmax=hi, alpha=figure.opacity,
                              extent=(-0.5, w - 0.5, h - 0.5, -0.5), interpolation="nearest")
        else:
            h, w = values.shape
            drawn = ax.imshow(values, cmap=_cmap(figure.cmap), vmin=lo, vmax=hi, interpolation="nearest")
        if figure.masked is not None:
            gh, gw = figure.masked.shape
            for r, c in np.argwhere(figure.masked):
                ax.add_patch(_hatch(c * w / gw - 0.5, r * h / gh - 0.5, w / gw, h / gh))
        _patch_grid(ax, figure.grid, (h, w))
        _image_axes(ax, title)
    for ax in axes[len(shown):]:
        ax.set_axis_off()
    if figure.heading:
        part.suptitle(figure.heading, fontsize=10)
    if drawn is not None:
        part.colorbar(drawn, ax=axes[: len(shown)].tolist(), label=figure.colorbar_label, shrink=0.8)


def _hatch(x: float, y: float, w: float, h: float) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), w, h, fill=False, hatch="///", edgecolor="white", linewidth=0)


def mosaic(similarity: np.ndarray) -> np.ndarray:
    """(gh, gw, gh, gw) -> one image of gh x gw tiles, tile (i, j) = similarity[i, j], NaN between the tiles."""
    gh, gw = similarity.shape[:2]
    gap = max(1, round(GAP * max(gh, gw)))
    out = np.full((gh * (gh + gap) - gap, gw * (gw + gap) - gap), np.nan)
    for i in range(gh):
        for j in range(gw):
            out[i * (gh + gap): i * (gh + gap) + gh, j * (gw + gap): j * (gw + gap) + gw] = similarity[i, j]
    return out


def draw_similarity(part: Any, figure: SimilarityFigure) -> None:
    mosaics = [("", figure.similarity), *figure.others]
    top, bottom = part.subfigures(2, 1, height_ratios=(3, 1)) if figure.maps else (part, None)
    axes = np.atleast_1d(top.subplots(1, len(mosaics), squeeze=False)).reshape(-1)
    lo, hi = figure.levels if figure.levels is not None else (None, None)
    drawn = None
    for ax, (title, values) in zip(axes, mosaics, strict=True):
        drawn = ax.imshow(mosaic(values), cmap="RdBu_r", vmin=lo, vmax=hi, interpolation="nearest")
        _image_axes(ax, title)
    top.suptitle(figure.title + (f"\n{figure.note}" if figure.note else ""), fontsize=10)
    if drawn is not None:
        top.colorbar(drawn, ax=axes.tolist(), label=figure.colorbar_label, shrink=0.8)
    if bottom is not None:
        small = np.atleast_1d(bottom.subplots(1, len(figure.maps), squeeze=False)).reshape(-1)
        for ax, (title, values) in zip(small, figure.maps, strict=True):
            ax.imshow(values, cmap="RdBu_r", vmin=lo, vmax=hi, interpolation="nearest")
            _image_axes(ax, title)


def draw_bars(part: Any, figure: BarsFigure) -> None:
    ax = part.subplots()
    values = np.asarray(figure.values, dtype=np.float64)
    colours = ["#c2410c" if i == figure.highlight else "#3b6fb6" for i in range(len(values))]
    positions = np.arange(len(values))
    if figure.horizontal:
        ax.barh(positions, np.nan_to_num(values), color=colours)
        ax.set_yticks(positions, [str(label) for label in figure.labels])
        ax.invert_yaxis()
        for name, marks in figure.markers.items():
            ax.scatter(marks, positions, marker="|", s=200, linewidths=2, label=name, zorder=3)
        if figure.value_range is not None:
            ax.set_xlim(*figure.value_range)
        ax.set_xlabel(figure.xlabel)
        right = ax.secondary_yaxis("right")
        right.set_yticks(positions, [figure.value_format.format(v) for v in values])
    else:
        ax.bar(positions, np.nan_to_num(values), color=colours)
        ax.set_xticks(positions, [str(label) for label in figure.labels], rotation=60, ha="right", fontsize=8)
        if figure.value_range is not None:
            ax.set_ylim(*figure.value_range)
        ax.set_ylabel(figure.xlabel)
    if figure.markers:
        ax.legend(fontsize=8, loc="lower right")
    ax.set_title(figure.title, fontsize=10)


def draw_lines(part: Any, figure: LinesFigure) -> None:
    ax = part.subplots()
    for name, values in figure.series.items():
        ax.plot(figure.x, values, marker="o", markersize=3, label=name)
    if figure.x_ticks:
        ax.set_xticks([x for x, _ in figure.x_ticks], [label for _, label in figure.x_ticks])
    ax.set_xlabel(figure.xlabel)
    ax.set_ylabel(figure.ylabel)
    ax.set_title(figure.title, fontsize=10)
    ax.grid(alpha=0.3)
    if figure.y_range is not None:
        ax.set_ylim(*figure.y_range)
    if len(figure.series) > 1:
        ax.legend(fontsize=8)


def draw_scatter(part: Any, figure: ScatterFigure) -> None:
    ax = part.subplots()
    x = np.asarray(figure.x, dtype=np.float64)
    if figure.jitter:
        x = x + np.random.default_rng(0).uniform(-figure.jitter / 2, figure.jitter / 2, x.shape)
    if figure.groups is None:
        ax.scatter(x, figure.y, s=12)
    else:
        groups = np.asarray(figure.groups)
        for name in dict.fromkeys(figure.groups):
            chosen = groups == name
            ax.scatter(x[chosen], np.asarray(figure.y)[chosen], s=12, label=name)
        if len(set(figure.groups)) <= 20:
            ax.legend(fontsize=7, ncols=2)
    if figure.reference is not None:
        ax.axhline(figure.reference[0], linestyle="--", color="grey", label=figure.reference[1])
    if figure.y_from_zero:
        ax.set_ylim(bottom=0)
    ax.set_xlabel(figure.xlabel)
    ax.set_ylabel(figure.ylabel)
    ax.set_title(figure.title, fontsize=10)


def draw_tiles(part: Any, figure: TilesFigure) -> None:
    rows = -(-len(figure.tiles) // figure.columns)
    axes = np.atleast_1d(part.subplots(rows, figure.columns, squeeze=False)).reshape(-1)
    for ax, tile in zip(axes, figure.tiles, strict=False):
        lo, hi = float(tile.min()), float(tile.max())
        ax.imshow((tile - lo) / (hi - lo) if hi > lo else np.zeros_like(tile), interpolation="nearest")
        _image_axes(ax, "")
    for ax in axes[len(figure.tiles):]:
        ax.set_axis_off()
    part.suptitle(figure.title + (f"\n{figure.note}" if figure.note else ""), fontsize=10)


def draw_images(part: Any, figure: ImagesFigure) -> None:
    axes = np.atleast_1d(part.subplots(1, len(figure.images), squeeze=False)).reshape(-1)
    for ax, image, title in zip(axes, figure.images, figure.titles, strict=True):
        ax.imshow(image, interpolation="nearest")
        if figure.grid is not None:
            _patch_grid(ax, figure.grid, image.shape[:2])
        _image_axes(ax, title)
    part.suptitle(figure.title, fontsize=10)


DRAW: dict[type, Callable[[Any, Any], None]] = {
    MapsFigure: draw_maps, SimilarityFigure: draw_similarity, BarsFigure: draw_bars, LinesFigure: draw_lines,
    ScatterFigure: draw_scatter, TilesFigure: draw_tiles, ImagesFigure: draw_images,
}
