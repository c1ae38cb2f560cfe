"""What the position-embedding pictures show: the similarity grid of this model's PEs at the input's
grid, the prefix tokens' PEs against the patches, and the same for a freshly initialised scheme."""

from __future__ import annotations

import numpy as np
import torch

from ..analysis.pe import PESimilarity, pe_similarity
from ..models import VisionTransformer
from ..models.position import SCHEMES
from .figures import ZERO_NOTE, SimilarityFigure


def similarity(model: VisionTransformer, grid: tuple[int, int] | None = None) -> PESimilarity:
    """This model's PE similarity at a grid (default: the one it was built for)."""
    with torch.inference_mode():
        return pe_similarity(model, grid)


def scheme_similarity(model: VisionTransformer, scheme: str, grid: tuple[int, int]) -> PESimilarity:
    """PE similarity of the same width and grid with another scheme, freshly initialised.

    The position embedding does not depend on the blocks, so a one-block model is enough. Scheme-only settings
    (EVA-02's RoPE reference grid) stay behind; CaiT's patch-only PE stays patch-only (its [CLS] joins later).
    """
    own = model.config
    prefix = SCHEMES[scheme].prefix_table and own.pos_embed_prefix
    tokens = dict(prefix_tokens="none", pool="gap", reg_tokens=0) if own.class_attn_depth else {}
    cfg = own.replace(pos_embed=scheme, pos_embed_prefix=prefix, depth=1, class_attn_depth=0, num_classes=0,
                      rope_ref_grid=own.rope_ref_grid if scheme == own.pos_embed else (), **tokens)
    return similarity(VisionTransformer(cfg), grid)


def describe(model: VisionTransformer, grid: tuple[int, int]) -> str:
    """The scheme and the grid in words, saying when a learned table was resampled for this grid."""
    cfg = model.config
    label = SCHEMES[cfg.pos_embed].label
    trained = cfg.grid_size
    if tuple(grid) != tuple(trained) and SCHEMES[cfg.pos_embed].resampled:
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


ROTATION_TITLE = "RoPE inside attention: mean cos of the angle differences of two patches' rotations"


def pe_figure(sim: PESimilarity, title: str, patch: tuple[int, int] = (0, 0),
              others: tuple[tuple[str, PESimilarity], ...] = (), rotation: np.ndarray | None = None
              ) -> SimilarityFigure:
    """The similarity grid with one patch's map and each prefix token's PE against the patches below; beside it
    the other mosaics and, for a scheme with RoPE too (EVA-02), `rotation` (`rotary_similarity`, also -1..1)."""
    if sim.patches is None:
        raise ValueError(sim.note)
    maps = [patch_map(sim, patch)]
    maps += [(f"[{name.upper()}] PE vs patches", values) for name, values in sim.prefix.items()]
    drawn_others = tuple((name, other.patches) for name, other in others if other.patches is not None)
    drawn_others += ((ROTATION_TITLE, rotation),) if rotation is not None else ()
    return SimilarityFigure(title, sim.patches, tuple(maps), drawn_others, note=ZERO_NOTE if zero_table(sim) else "")


def zero_table(sim: PESimilarity) -> bool:
    """Every patch's PE is zero (an untrained table): its cosines are all zero, a blank grid."""
    return sim.patches is not None and not np.any(sim.patches)


# ---------------------------------------------------------------------------- schemes that act inside attention
def relative_bias(model: VisionTransformer, grid: tuple[int, int], block: int) -> np.ndarray:
    """BEiT: the bias block `block` adds to the attention logit of each (query patch, key patch) pair, averaged
    over heads: (gh, gw, gh, gw), laid out like the PE similarity grid (tile (i, j) = patch (i, j)'s row)."""
    cfg = model.config
    blocks = list(model.blocks)
    if not 0 <= block < len(blocks):
        raise ValueError(f"block {block} does not exist: the model has {len(blocks)} blocks")
    prefix = model.layout((grid[0] * cfg.patch_size, grid[1] * cfg.patch_size)).num_prefix_tokens
    with torch.inference_mode():
        bias = SCHEMES[cfg.pos_embed].attention_bias(blocks[block], cfg, grid, prefix)
    if bias is None:
        raise ValueError(f"the {SCHEMES[cfg.pos_embed].label} scheme adds no bias to attention")
    patches = bias[:, prefix:, prefix:].float().mean(dim=0)  # (N, N)
    return patches.reshape(*grid, *grid).cpu().numpy()


def rotary_similarity(model: VisionTransformer, grid: tuple[int, int]) -> np.ndarray:
    """RoPE: how alike the rotations of two patches are, the mean cosine of their angle differences over the
    rotated pairs: (gh, gw, gh, gw) in -1..1. A rotated query and key meet at the cosine of the difference of
    their angles, so this is the structure rotary embedding gives attention (1 on the diagonal, falling off
    along rows and columns)."""
    angles = model.rope_angles(grid)
    if angles is None:
        raise ValueError(f"the {SCHEMES[model.config.pos_embed].label} scheme does not rotate queries and keys")
    angles = angles.float()  # (N, K)
    cos, sin = angles.cos(), angles.sin()  # mean_k cos(a_k - b_k) without the (N, N, K) differences
    similarity = (cos @ cos.T + sin @ sin.T) / angles.shape[1]
    return similarity.reshape(*grid, *grid).cpu().numpy()


def attention_scheme_figure(model: VisionTransformer, grid: tuple[int, int], block: int = 0
                            ) -> SimilarityFigure | None:
    """The picture of a scheme that acts inside attention: BEiT's relative position bias of one block, or
    RoPE's rotation similarity; None for a scheme that does neither."""
    scheme = SCHEMES[model.config.pos_embed]
    if model.config.pos_embed == "rel_bias":
        bias = relative_bias(model, grid, block)
        return SimilarityFigure(f"Relative position bias of block {block}, mean over heads ({grid[0]}×{grid[1]} "
                                "patches): tile (i, j) is what patch (i, j) adds to its attention to each patch",
                                bias, levels=None, colorbar_label="attention logit bias",
                                note="" if np.any(bias) else ZERO_NOTE)  # BEiT initialises its tables to zero
    if model.rope_angles(grid) is not None:
        return SimilarityFigure(f"{scheme.label}: how alike the rotations of two patches are ({grid[0]}×{grid[1]})",
                                rotary_similarity(model, grid), colorbar_label="mean cos of angle differences")
    return None
