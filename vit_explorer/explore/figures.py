"""What each picture shows, as plain data: the app's views and the headless report build these
and `gui/figures.py` draws them, one composition per kind. Nothing here knows how to draw.

Arrays are NumPy, images are (H, W, 3) uint8 as the model sees them, maps are (gh, gw) patch grids.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

ATTENTION_CMAP = "inferno"
SIMILARITY_CMAP = "CET-D1"  # diverging, for cosine similarity in -1..1
ZERO_NOTE = "all zero: this table is untrained"  # on a figure of parameters that are all zero
SCALES = ("shared", "each")  # several maps on one colour scale, or each scaled to its own maximum
NEAR_UNIFORM = 0.25  # attention maps whose every value is within this share of the uniform one are "close to uniform"


def uniform_levels(maps: np.ndarray, uniform: float) -> tuple[float, float] | None:
    """A colour range centred on `uniform` (1 / the keys attended to) for maps that all lie close to it, so noise
    around it is not stretched into structure; None for maps that do not."""
    spread = float(np.abs(maps - uniform).max()) if maps.size else 0.0
    if not np.isfinite(spread) or spread > NEAR_UNIFORM * uniform:
        return None
    half = max(spread, 0.05 * uniform)  # a perfectly flat map still gets a bar with some range
    return (uniform - half, uniform + half)


class Inline:
    """Shown inline in Jupyter as a PNG (explore/notebook.py draws it with matplotlib: no Qt, no display)."""

    def _repr_png_(self) -> bytes:
        from .notebook import png

        return png(self)  # type: ignore[arg-type]  # every subclass is a Figure


@dataclass(frozen=True)
class MapsFigure(Inline):
    """One map or small multiples of maps, over the image or alone ('map only').

    scale='shared': every map on `levels` (None: the maps' own range) with one colour bar, so they can
    be compared; scale='each': each map divided by its own maximum (named in its title, so a flat map
    is not mistaken for a peaked one) on 0..1.
    """

    heading: str  # the title over all maps ("" for a single map, whose title says it all)
    maps: np.ndarray  # (k, gh, gw) or (k, H, W)
    titles: tuple[str, ...]  # one per map
    image: np.ndarray | None  # (H, W, 3) uint8 under the maps; None draws the maps alone
    grid: tuple[int, int]  # the patch grid drawn over them
    colorbar_label: str = "attention"
    cmap: str = ATTENTION_CMAP
    scale: str = "shared"
    levels: tuple[float, float] | None = None
    masked: np.ndarray | None = None  # (gh, gw) bool: [MASK]ed patches, hatched
    opacity: float = 0.6  # of the maps over the image
    columns: int | None = None  # the small multiples' columns (None: as square as possible; len(maps): one strip)

    def __post_init__(self) -> None:
        if self.maps.ndim != 3 or len(self.titles) != len(self.maps):
            raise ValueError(f"MapsFigure needs (k, h, w) maps and k titles, got {self.maps.shape} and "
                             f"{len(self.titles)} titles")
        if self.scale not in SCALES:
            raise ValueError(f"scale must be one of {SCALES}, got {self.scale!r}")

    def shape(self) -> tuple[int, int]:
        """(rows, columns) of the small multiples."""
        k = len(self.maps)
        if self.columns is None:
            return small_multiples_shape(k)
        return -(-k // self.columns), self.columns

    def shown(self) -> np.ndarray:
        """The values as drawn: scaled to each map's maximum for scale='each'."""
        if self.scale == "shared":
            return self.maps
        peaks = self.maps.reshape(len(self.maps), -1).max(axis=1)
        return self.maps / np.where(peaks > 0, peaks, 1.0)[:, None, None]

    def shown_levels(self) -> tuple[float, float]:
        if self.scale == "each":
            return (0.0, 1.0)
        return finite_levels(self.maps, self.levels)


@dataclass(frozen=True)
class SimilarityFigure(Inline):
    """The ViT paper's position-embedding figure: a gh x gw mosaic whose tile (i, j) is patch (i, j)'s
    similarity to every patch, and below it single maps (one chosen patch, the prefix tokens' PEs)."""

    title: str
    similarity: np.ndarray  # (gh, gw, gh, gw) cosine similarity
    maps: tuple[tuple[str, np.ndarray], ...] = ()  # (title, (gh, gw)) drawn on the same -1..1 scale
    others: tuple[tuple[str, np.ndarray], ...] = ()  # more mosaics beside the first, e.g. another model's
    levels: tuple[float, float] | None = (-1.0, 1.0)  # None: the values' own range (e.g. attention biases)
    colorbar_label: str = "cosine similarity"
    note: str = ""  # said under the title, e.g. ZERO_NOTE: a blank grid must say why it is blank


@dataclass(frozen=True)
class BarsFigure(Inline):
    """One bar per label with its value written after it; markers are named series of one value per
    bar drawn as symbols (DeiT's two heads on the bars of their average). value_range fixes the axis
    (probabilities: 0..1, so an 11 % prediction does not fill the chart like a confident one); horizontal
    bars on a fixed axis have their values on the right-hand axis, as the axis ends at the range's end."""

    title: str
    labels: tuple[str, ...]
    values: np.ndarray
    xlabel: str = ""
    value_format: str = "{:.1%}"
    horizontal: bool = True
    highlight: int | None = None
    markers: Mapping[str, np.ndarray] = field(default_factory=dict)
    value_range: tuple[float, float] | None = None


@dataclass(frozen=True)
class LinesFigure(Inline):
    title: str
    x: np.ndarray
    series: Mapping[str, np.ndarray]
    xlabel: str
    ylabel: str
    x_ticks: tuple[tuple[float, str], ...] = ()  # fixed (x, label) ticks, e.g. `state_ticks`; () lets the axis choose
    y_range: tuple[float, float] | None = None  # a fixed y axis, e.g. (0, 1) for a share; None fits the data


def state_ticks(states: int) -> tuple[tuple[float, str], ...]:
    """Ticks for curves over the token states (x = -1 for the embedded input, then block 0, 1, ...): "input",
    then the blocks, every one or, for deep models, every few (at most about 12 labels)."""
    blocks = states - 1
    step = max(1, math.ceil(blocks / 12))
    return ((-1.0, "input"), *((float(b), str(b)) for b in range(0, blocks, step)))


@dataclass(frozen=True)
class ScatterFigure(Inline):
    """Points coloured by group with a legend, e.g. one point per head (group) against depth (x)."""

    title: str
    x: np.ndarray
    y: np.ndarray
    groups: tuple[str, ...] | None
    xlabel: str
    ylabel: str
    jitter: float = 0.0
    reference: tuple[float, str] | None = None  # (y, name): a dashed line to read the points against
    y_from_zero: bool = False  # the y axis starts at 0 (a distance: differences are not exaggerated)


@dataclass(frozen=True)
class TilesFigure(Inline):
    """K small RGB images (K, h, w, 3), each min-max scaled on its own (patch-embedding filters)."""

    title: str
    tiles: np.ndarray
    columns: int = 7
    note: str = ""  # said under the title, e.g. ZERO_NOTE


@dataclass(frozen=True)
class ImagesFigure(Inline):
    """RGB pictures side by side with a title each, e.g. each image and its patch features' principal
    components as colours (the DINOv2 paper's first figure)."""

    title: str
    images: tuple[np.ndarray, ...]  # (H, W, 3) uint8 each
    titles: tuple[str, ...]
    grid: tuple[int, int] | None = None  # patch boundaries drawn over them


Figure = MapsFigure | SimilarityFigure | BarsFigure | LinesFigure | ScatterFigure | TilesFigure | ImagesFigure


DIMMED = 0.4  # the brightness an image keeps under a map that must read over it (a diverging sweep)


def dimmed(image: np.ndarray | None, keep: float = DIMMED) -> np.ndarray | None:
    """(H, W, 3) uint8 -> the same image in grey at `keep` of its brightness: a map drawn over it stays readable
    (a diverging map's pale middle over a full-colour photo washes out)."""
    if image is None:
        return None
    grey = np.asarray(image, np.float32)[..., :3] @ np.asarray([0.299, 0.587, 0.114], np.float32)  # (H, W)
    return np.repeat((grey * keep).round().clip(0, 255).astype(np.uint8)[..., None], 3, axis=2)


def finite_levels(values: np.ndarray, levels: tuple[float, float] | None = None) -> tuple[float, float]:
    """`levels` if given, else the finite range of the values (a flat or empty map gets a unit range)."""
    if levels is not None:
        return float(levels[0]), float(levels[1])
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return 0.0, 1.0
    lo, hi = float(finite.min()), float(finite.max())
    return (lo, hi) if hi > lo else (lo - 0.5, hi + 0.5)


def arrays(figure: Figure) -> dict[str, np.ndarray]:
    """The numbers a figure shows, by name (tests compare the app's and the report's)."""
    if isinstance(figure, MapsFigure):
        return {"maps": figure.maps}
    if isinstance(figure, SimilarityFigure):
        out = {"similarity": figure.similarity}
        out.update({f"map:{title}": values for title, values in figure.maps})
        return out
    if isinstance(figure, BarsFigure):
        return {"values": figure.values, **{f"marker:{k}": v for k, v in figure.markers.items()}}
    if isinstance(figure, LinesFigure):
        return {"x": figure.x, **{f"series:{k}": v for k, v in figure.series.items()}}
    if isinstance(figure, ScatterFigure):
        return {"x": figure.x, "y": figure.y}
    if isinstance(figure, ImagesFigure):
        return {f"image:{title}": image for title, image in zip(figure.titles, figure.images, strict=True)}
    return {"tiles": figure.tiles}



def json_number(value: float) -> float | None:
    """A number as strict JSON holds it (a Python float; NaN and infinities, which JSON has not, as null)."""
    number = float(value)
    return number if math.isfinite(number) else None

def small_multiples_shape(k: int) -> tuple[int, int]:
    """(rows, columns) of k small multiples: as square as possible, wider than tall."""
    columns = max(1, math.ceil(math.sqrt(k)))
    return -(-k // columns), columns
