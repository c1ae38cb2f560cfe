"""The built-in procedural datasets: shapes on textured backgrounds, drawn with signed distance
functions on whole batches at once (thousands of 32x32 images per second on a CPU).

Two variants, both deterministic from a seed:
- "shapes": the label is the shape (10 classes); size, colour, rotation, position and the
  background vary.
- "where": the label is the cell of a 3x3 grid that holds the shape's centre (9 classes); the
  shape type is a distractor and the background is stationary (no gradient), so the patches
  carry no hint of their absolute position: a model without position embedding cannot tell the
  classes apart, one with position embedding can.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

SHAPES = ("circle", "ring", "square", "frame", "triangle", "plus", "star", "crescent", "bar", "half-disc")
WHERE = ("top left", "top", "top right", "left", "centre", "right", "bottom left", "bottom", "bottom right")
VARIANTS = {"shapes": SHAPES, "where": WHERE}
CHUNK = 256  # images are drawn in chunks seeded by (seed, chunk): any slice is reproducible alone
SPLIT_OFFSET = 500_000  # validation chunks are numbered from here, so they never repeat training ones


def _box(u: torch.Tensor, v: torch.Tensor, a: float, b: float) -> torch.Tensor:
    return torch.maximum(u.abs() - a, v.abs() - b)


def _triangle(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    # equilateral triangle: the largest of three half-plane distances (exact inside)
    d = [u * math.cos(a) + v * math.sin(a) for a in (math.pi / 2, math.pi / 2 + 2 * math.pi / 3,
                                                      math.pi / 2 + 4 * math.pi / 3)]
    return torch.maximum(torch.maximum(d[0], d[1]), d[2]) - 0.5


def _star(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    r, a = torch.hypot(u, v), torch.atan2(v, u)
    return (r - (0.62 + 0.38 * torch.cos(5 * a))) * 0.6  # roughly a distance near the edge


# signed distance (negative inside) of each shape in its own frame, radius about 1
SDF: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "circle": lambda u, v: torch.hypot(u, v) - 1.0,
    "ring": lambda u, v: (torch.hypot(u, v) - 0.7).abs() - 0.3,
    "square": lambda u, v: _box(u, v, 0.8, 0.8),
    "frame": lambda u, v: (_box(u, v, 0.68, 0.68)).abs() - 0.22,
    "triangle": lambda u, v: _triangle(u, v + 0.15),
    "plus": lambda u, v: torch.minimum(_box(u, v, 1.0, 0.3), _box(u, v, 0.3, 1.0)),
    "star": _star,
    "crescent": lambda u, v: torch.maximum(torch.hypot(u, v) - 1.0, 0.75 - torch.hypot(u - 0.55, v)),
    "bar": lambda u, v: _box(u, v, 1.0, 0.28),
    "half-disc": lambda u, v: torch.maximum(torch.hypot(u, v + 0.4) - 1.0, -(v + 0.4)),
}


def _uniform(g: torch.Generator, n: int, lo: float, hi: float) -> torch.Tensor:
    return lo + (hi - lo) * torch.rand(n, generator=g)


def _background(g: torch.Generator, n: int, size: int, gradient: bool) -> torch.Tensor:
    """Textured backgrounds (n, 3, S, S) in [0, 1]: a base colour, stripes, noise, maybe a gradient."""
    ys, xs = torch.meshgrid(torch.arange(size, dtype=torch.float32), torch.arange(size, dtype=torch.float32),
                            indexing="ij")
    base = _uniform(g, 3 * n, 0.1, 0.9).view(n, 3, 1, 1)
    # stripes of random frequency and direction with a random strength (0 = plain background)
    angle = _uniform(g, n, 0, math.pi).view(n, 1, 1)
    freq = _uniform(g, n, 0.3, 1.6).view(n, 1, 1)
    phase = _uniform(g, n, 0, 2 * math.pi).view(n, 1, 1)
    strength = (_uniform(g, n, -0.05, 0.15).clamp(min=0)).view(n, 1, 1, 1)
    stripes = torch.sin(freq * (xs * torch.cos(angle) + ys * torch.sin(angle)) + phase)  # (n, S, S)
    tint = _uniform(g, 3 * n, -1, 1).view(n, 3, 1, 1)
    bg = base + strength * tint * stripes[:, None]
    bg = bg + _uniform(g, n, 0, 0.04).view(n, 1, 1, 1) * torch.randn(n, 3, size, size, generator=g)
    if gradient:
        gx, gy = (_uniform(g, 3 * n, -0.25, 0.25).view(n, 3, 1, 1) for _ in range(2))
        bg = bg + (gx * (xs - size / 2) + gy * (ys - size / 2)) / size
    return bg.clamp(0, 1)


def _shape_colour(g: torch.Generator, bg_mean: torch.Tensor) -> torch.Tensor:
    """A colour (n, 3) whose brightness is far from the background's, so every shape is visible."""
    n = bg_mean.shape[0]
    colour = torch.rand(n, 3, generator=g)
    bg_luma = bg_mean.mean(1, keepdim=True)
    luma = colour.mean(1, keepdim=True)
    target = torch.where(bg_luma > 0.5, _uniform(g, n, 0.0, 0.3)[:, None], _uniform(g, n, 0.7, 1.0)[:, None])
    return (colour + (target - luma)).clamp(0, 1)


def _draw(seed: int, split: str, start: int, count: int, size: int, variant: str
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Images (count, 3, S, S) uint8, labels (count,) and the shapes' masks (count, S, S) bool (pixels at least
    half covered by the shape) for dataset indices [start, start + count)."""
    chunk = start // CHUNK + (SPLIT_OFFSET if split == "val" else 0)
    g = torch.Generator().manual_seed(seed * 1_000_003 + chunk)
    n = CHUNK
    classes = len(VARIANTS[variant])
    # balanced labels: every chunk holds each class equally often (up to the remainder), shuffled
    labels = torch.arange(n) % classes
    labels = labels[torch.randperm(n, generator=g)]
    shape_ids = labels if variant == "shapes" else torch.randint(0, len(SHAPES), (n,), generator=g)

    radius = _uniform(g, n, 0.24, 0.4) * size  # pixels
    theta = _uniform(g, n, 0, 2 * math.pi)
    if variant == "shapes":
        margin = radius * 0.8
        cx = margin + torch.rand(n, generator=g) * (size - 2 * margin)
        cy = margin + torch.rand(n, generator=g) * (size - 2 * margin)
    else:  # the centre lies inside the labelled cell, away from the cell borders
        radius = radius * 0.6
        cell = size / 3
        row, col = labels // 3, labels % 3
        cx = (col + _uniform(g, n, 0.2, 0.8)) * cell
        cy = (row + _uniform(g, n, 0.2, 0.8)) * cell

    bg = _background(g, n, size, gradient=variant == "shapes")
    colour = _shape_colour(g, bg.mean((2, 3)))
    ys, xs = torch.meshgrid(torch.arange(size, dtype=torch.float32) + 0.5,
                            torch.arange(size, dtype=torch.float32) + 0.5, indexing="ij")
    dx = (xs[None] - cx.view(n, 1, 1)) / radius.view(n, 1, 1)  # (n, S, S) in shape units
    dy = (ys[None] - cy.view(n, 1, 1)) / radius.view(n, 1, 1)
    c, s = torch.cos(theta).view(n, 1, 1), torch.sin(theta).view(n, 1, 1)
    u, v = c * dx + s * dy, -s * dx + c * dy
    sdf = torch.empty(n, size, size)
    for k, name in enumerate(SHAPES):
        idx = (shape_ids == k).nonzero().squeeze(1)
        if idx.numel():
            sdf[idx] = SDF[name](u[idx], v[idx])
    alpha = (0.5 - sdf * radius.view(n, 1, 1)).clamp(0, 1)[:, None]  # antialiased edge, one pixel wide
    image = bg * (1 - alpha) + colour.view(n, 3, 1, 1) * alpha
    image = (image * 255).round().to(torch.uint8)
    offset = start % CHUNK
    masks = alpha[:, 0] >= 0.5
    return image[offset:offset + count], labels[offset:offset + count], masks[offset:offset + count]


def _check(n: int, size: int, variant: str, split: str) -> None:
    if split not in ("train", "val"):
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    if variant not in VARIANTS:
        raise ValueError(f"unknown built-in dataset variant {variant!r}; choose one of {sorted(VARIANTS)}")
    if size < 8:
        raise ValueError(f"built-in dataset images must be at least 8 pixels wide, got {size}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"the number of images must be a whole number >= 0, got {n!r}")


def generate(n: int, *, seed: int = 0, size: int = 32, variant: str = "shapes", split: str = "train"
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """The first n images (n, 3, S, S) uint8 and labels (n,) int64 of a procedural dataset split."""
    _check(n, size, variant, split)
    images, labels = [], []
    for start in range(0, n, CHUNK):
        x, y, _ = _draw(seed, split, start, min(CHUNK, n - start), size, variant)
        images.append(x)
        labels.append(y)
    if not images:
        return torch.empty(0, 3, size, size, dtype=torch.uint8), torch.empty(0, dtype=torch.int64)
    return torch.cat(images), torch.cat(labels)


def object_masks(n: int, *, seed: int = 0, size: int = 32, variant: str = "shapes", split: str = "train"
                 ) -> torch.Tensor:
    """The shapes' masks (n, S, S) bool of the first n images of a split, exactly as `generate` draws them
    (a pixel is on the shape when it is at least half covered): what the pointing game and a relevance map's
    IoU are measured against."""
    _check(n, size, variant, split)
    masks = [_draw(seed, split, start, min(CHUNK, n - start), size, variant)[2] for start in range(0, n, CHUNK)]
    return torch.cat(masks) if masks else torch.zeros(0, size, size, dtype=torch.bool)
