"""What the position-embedding pictures show: the similarity grid of this model's PEs at the input's
grid, the prefix tokens' PEs against the patches, and the same for a freshly initialised scheme."""

from __future__ import annotations

import numpy as np
import torch

from ..analysis.pe import PESimilarity, pe_similarity
from ..models import VisionTransformer
from ..models.position import SCHEMES
from .figures import SimilarityFigure


def similarity(model: VisionTransformer, grid: tuple[int, int] | None = None) -> PESimilarity:
    """This model's PE similarity at a grid (default: the one it was built for)."""
    with torch.inference_mode():
        return pe_similarity(model, grid)


def scheme_similarity(model: VisionTransformer, scheme: str, grid: tuple[int, int]) -> PESimilarity:
    """PE similarity of the same width and grid with another scheme, freshly initialised.

    The position embedding does not depend on the blocks, so a one-block model is enough.
    """
    cfg = model.config.replace(pos_embed=scheme, pos_embed_prefix=scheme == "learned" and model.config.pos_embed_prefix,
                               depth=1, class_attn_depth=0, num_classes=0)
    return similarity(VisionTransformer(cfg), grid)


def describe(model: VisionTransformer, grid: tuple[int, int]) -> str:
    """The scheme and the grid in words, saying when a learned table was resampled for this grid."""
    cfg = model.config
    label = SCHEMES[cfg.pos_embed].label
    trained = cfg.grid_size
    if tuple(grid) != tuple(trained) and cfg.pos_embed in ("learned", "learned_2d"):
        return f"{label}, trained for {trained[0]}×{trained[1]}, resampled to {grid[0]}×{grid[1]}"
    return f"{label}, {grid[0]}×{grid[1]} patches"


def title(model: VisionTransformer, grid: tuple[int, int]) -> str:
    return f"Position-embedding similarity ({describe(model, grid)})"


def clamp_patch(sim: PESimilarity, patch: tuple[int, int]) -> tuple[int, int]:
    """The patch (row, col), moved onto the grid if the grid shrank."""
    return min(patch[0], sim.grid[0] - 1), min(patch[1], sim.grid[1] - 1)


def patch_map(sim: PESimilarity, patch: tuple[int, int]) -> tuple[str, np.ndarray]:
    """(title, (gh, gw)): one patch's PE against every patch's."""
    if sim.patches is None:
        raise ValueError(sim.note)
    r, c = clamp_patch(sim, patch)
    return f"patch ({r}, {c}) vs every patch", sim.patches[r, c]


def pe_figure(sim: PESimilarity, title: str, patch: tuple[int, int] = (0, 0),
              others: tuple[tuple[str, PESimilarity], ...] = ()) -> SimilarityFigure:
    """The similarity grid with one patch's map and each prefix token's PE against the patches below."""
    if sim.patches is None:
        raise ValueError(sim.note)
    maps = [patch_map(sim, patch)]
    maps += [(f"[{name.upper()}] PE vs patches", values) for name, values in sim.prefix.items()]
    drawn_others = tuple((name, other.patches) for name, other in others if other.patches is not None)
    return SimilarityFigure(title, sim.patches, tuple(maps), drawn_others)
