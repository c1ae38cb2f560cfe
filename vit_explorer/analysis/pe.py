"""Position-embedding similarity: the ViT paper's grid of per-patch cosine maps, and prefix PEs vs patches."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from ..models.vit import VisionTransformer


@dataclass
class PESimilarity:
    grid: tuple[int, int]  # (gh, gw) the PEs were taken (or resampled) for
    scheme: str  # the config's pos_embed
    patches: np.ndarray | None  # (gh, gw, gh, gw) cosine of patch (i, j)'s PE with patch (r, c)'s; None: no additive PE
    prefix: dict[str, np.ndarray] = field(default_factory=dict)  # "cls"/"dist" -> (gh, gw) cosine with every patch PE
    note: str = ""  # why something is missing, in words for a figure or a status bar


def cosine_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(M, D), (N, D) -> (M, N) cosine similarities, in float32."""
    return F.normalize(a.float(), dim=-1) @ F.normalize(b.float(), dim=-1).T


@torch.no_grad()
def pe_similarity(model: VisionTransformer, grid: tuple[int, int] | None = None) -> PESimilarity:
    """Cosine similarity of every patch PE with every other, for the model's grid or another one
    (learned tables resampled as the model does at that resolution).

    Prefix rows are recognised by count (rows - gh*gw) and dropped before the patch grid is formed;
    prefix tokens whose scheme gives them no position, and an all-zero table, are reported in `note`.
    """
    cfg = model.config
    grid = (int((grid or cfg.grid_size)[0]), int((grid or cfg.grid_size)[1]))
    n = grid[0] * grid[1]
    pe = model.position_embedding(grid)
    if pe is None:
        return PESimilarity(grid, cfg.pos_embed, None, note=f"no additive PE: {model.pos_scheme.note}")
    k = pe.shape[0] - n  # prefix rows in front of the patch rows
    learned = model.pos_scheme.prefix_rows(cfg)  # of those, the ones the scheme learns (the rest are zero)
    patch_pe = pe[k:]  # (N, D)
    sim = cosine_matrix(patch_pe, patch_pe).reshape(grid[0], grid[1], grid[0], grid[1])  # (gh, gw, gh, gw)
    prefix, notes = {}, []
    names = model.prefix_names[:k]
    for name, row in zip(names[:learned], pe[:learned], strict=True):
        prefix[name] = cosine_matrix(row[None], patch_pe)[0].reshape(grid).cpu().numpy()  # (gh, gw)
    for name in names[learned:]:
        if not name.startswith("reg"):
            notes.append(f"[{name.upper()}] has no position embedding in the {cfg.pos_embed} scheme")
    if cfg.reg_tokens:
        notes.append(f"register tokens ({cfg.reg_tokens}) never have a position embedding")
    if k == 0 and cfg.prefix_tokens != "none":
        notes.append("the position embedding covers the patches only"
                     + (" ([CLS] joins after it, as in CaiT)" if cfg.class_attn_depth else ""))
    if not torch.count_nonzero(patch_pe):
        notes.insert(0, "every patch's position embedding is zero (an untrained table?), so there is no "
                        "similarity to show")
    return PESimilarity(grid, cfg.pos_embed, sim.cpu().numpy(), prefix, "; ".join(notes))
