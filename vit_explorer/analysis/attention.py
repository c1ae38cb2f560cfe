"""Attention maps, attention rollout, mean attention distance and CaiT's class attention.

Inputs are what `forward_intermediates(capture=('attentions', 'class_attentions'))` returns:
`attentions` is a list (one per self-attention block) of (B, heads, R, T) probabilities and the
TokenLayout says which of the T tokens are prefix tokens and how the patches form the grid.
Nothing here assumes one [CLS] token or a square grid.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..models.config import TokenLayout

HEAD_FUSIONS = ("mean", "max", "min")


def _check_full(attentions: Sequence[torch.Tensor], layout: TokenLayout) -> None:
    if not attentions:
        raise ValueError("no attention maps: capture 'attentions' (every block's hook_pattern)")
    t = layout.num_tokens
    for i, a in enumerate(attentions):
        if a.ndim != 4 or a.shape[-1] != t or a.shape[-2] != t:
            raise ValueError(f"attention of block {i} has shape {tuple(a.shape)}; this analysis needs all rows "
                             f"(B, heads, {t}, {t}) for the layout {layout.prefix_names} + {layout.grid} grid")


def fuse_heads(attention: torch.Tensor, head_fusion: str = "mean") -> torch.Tensor:
    """(B, H, R, T) -> (B, R, T) by the mean, max or min over heads."""
    if head_fusion == "mean":
        return attention.mean(dim=1)
    if head_fusion == "max":
        return attention.amax(dim=1)
    if head_fusion == "min":
        return attention.amin(dim=1)
    raise ValueError(f"head fusion must be one of {HEAD_FUSIONS}, got {head_fusion!r}")


def to_grid(values: torch.Tensor, layout: TokenLayout) -> torch.Tensor:
    """(..., T) per token -> (..., gh, gw) for the patch tokens (prefix tokens dropped)."""
    return values[..., layout.num_prefix_tokens:].reshape(*values.shape[:-1], *layout.grid)


def attention_map(attention: torch.Tensor, layout: TokenLayout, query: int, head: int | None = None,
                  rows: Sequence[int] | None = None) -> torch.Tensor:
    """How much token `query` attends to each patch in one block: (B, gh, gw).

    attention: (B, H, R, T); head=None averages over heads. rows: the query indices kept when R < T (a
    hook on hook_pattern that keeps only some rows); None means all rows were kept.
    """
    r = list(rows).index(query) if rows is not None else query
    a = attention[:, :, r] if head is None else attention[:, head:head + 1, r]  # (B, H or 1, T)
    return to_grid(a.mean(dim=1), layout)


def rollout(attentions: Sequence[torch.Tensor], layout: TokenLayout, *, head_fusion: str = "mean",
            discard_ratio: float = 0.0, query: int | Sequence[int] | None = None) -> torch.Tensor:
    """Attention rollout (Abnar & Zuidema 2020) as a (B, gh, gw) map for a query token.

    Per block: fuse heads, optionally zero the lowest `discard_ratio` of the whole (T, T) matrix
    (never a query's own entry), add the identity for the residual, renormalise each row; then
    multiply in layer order (later blocks on the left). `query` is a token index, or several whose
    rows are averaged (e.g. every patch token, for a head on the mean of the patches). The default is
    the first prefix token ([CLS]); a model without prefix tokens needs a query. Every image of the
    batch is treated alike. `rollout_fused` does the same from matrices fused as the blocks ran.
    """
    _check_full(attentions, layout)
    return rollout_fused([fuse_heads(a.float(), head_fusion) for a in attentions], layout,
                         discard_ratio=discard_ratio, query=query)


def rollout_fused(fused: Sequence[torch.Tensor], layout: TokenLayout, *, discard_ratio: float = 0.0,
                  query: int | Sequence[int] | None = None) -> torch.Tensor:
    """`rollout` from each block's attention already fused over heads, (B, T, T) per block."""
    if not 0.0 <= discard_ratio < 1.0:
        raise ValueError(f"discard_ratio must be in [0, 1), got {discard_ratio}")
    if query is None:
        if layout.num_prefix_tokens == 0:
            raise ValueError("this model has no [CLS] token in its self-attention blocks: choose a query")
        query = 0
    rows = [query] if isinstance(query, int) else list(query)
    steps = [_rollout_step(a, discard_ratio, rows) for a in fused]
    return to_grid(_rows_of_product(steps, rows), layout)  # (B, gh, gw)


def _rollout_step(fused: torch.Tensor, discard_ratio: float, keep: Sequence[int]) -> torch.Tensor:
    """One block of rollout: a head-fused (B, T, T) matrix with the weakest `discard_ratio` of its entries
    zeroed (except the diagonal entries of the rows in `keep`), the residual added, rows summing to 1."""
    fused = fused.float()
    t = fused.shape[-1]
    if discard_ratio > 0:
        flat = fused.reshape(fused.shape[0], -1)  # (B, T*T)
        lowest = flat.topk(int(flat.shape[-1] * discard_ratio), dim=-1, largest=False).indices
        drop = torch.zeros_like(flat, dtype=torch.bool).scatter_(1, lowest, True)
        kept = torch.as_tensor(list(keep), dtype=torch.long, device=flat.device)
        drop[:, kept * t + kept] = False  # keep each query's attention to itself, in every image
        fused = flat.masked_fill(drop, 0.0).reshape(fused.shape)
    a = (fused + torch.eye(t, dtype=fused.dtype, device=fused.device)) / 2
    return a / a.sum(dim=-1, keepdim=True)  # (B, T, T), rows sum to 1


def _rows_of_product(steps: Sequence[torch.Tensor], rows: Sequence[int]) -> torch.Tensor:
    """The mean of `rows` of steps[-1] @ ... @ steps[0] as (B, T): vector-matrix products from the
    left, O(layers * T^2) instead of the O(layers * T^3) of forming the whole product."""
    vector = steps[-1][:, list(rows)].mean(dim=1)  # (B, T)
    for a in reversed(steps[:-1]):
        vector = (vector[:, None, :] @ a)[:, 0]  # (B, T)
    return vector


def class_rollout(class_attentions: Sequence[torch.Tensor], attentions: Sequence[torch.Tensor],
                  layout: TokenLayout, *, head_fusion: str = "mean", discard_ratio: float = 0.0) -> torch.Tensor:
    """CaiT: rollout from [CLS] through the class-attention blocks, then through the patch-only
    self-attention blocks; (B, gh, gw).

    In a class-attention block only [CLS] changes: its row over [CLS; patches] (the weakest
    `discard_ratio` of it zeroed, never [CLS]'s own entry) gets the identity added and is
    renormalised; patch rows stay the identity. The patch part then flows through the rollout of the
    self-attention blocks (discarding as `rollout` does, keeping every patch's own entry).
    """
    _check_full(attentions, layout)
    return class_rollout_fused([fuse_heads(a.float(), head_fusion) for a in class_attentions],
                               [fuse_heads(a.float(), head_fusion) for a in attentions], layout,
                               discard_ratio=discard_ratio)


def class_rollout_fused(class_fused: Sequence[torch.Tensor], fused: Sequence[torch.Tensor], layout: TokenLayout, *,
                        discard_ratio: float = 0.0) -> torch.Tensor:
    """`class_rollout` from attention fused over heads: (B, 1, 1+N) per class-attention block, (B, N, N) per
    self-attention block."""
    if not class_fused:
        raise ValueError("no class attention: the model has no class-attention blocks or it was not captured")
    if not 0.0 <= discard_ratio < 1.0:
        raise ValueError(f"discard_ratio must be in [0, 1), got {discard_ratio}")
    cls_row = None  # (B, 1+N): how [CLS] is made of the initial [CLS] and the patch tokens
    for attention in class_fused:
        row = attention[:, 0].float().clone()  # (B, 1+N)
        if discard_ratio > 0:
            lowest = row[:, 1:].topk(int(row.shape[-1] * discard_ratio), dim=-1, largest=False).indices + 1
            row = row.scatter(1, lowest, 0.0)
        row[:, 0] += 1.0  # the residual of [CLS]
        row = row / row.sum(dim=-1, keepdim=True)
        # compose with what came before: [CLS]' = row[0] * [CLS] + row[1:] * patches (patches unchanged)
        cls_row = row if cls_row is None else torch.cat(
            [row[:, :1] * cls_row[:, :1], row[:, :1] * cls_row[:, 1:] + row[:, 1:]], dim=1)
    assert cls_row is not None
    weights = cls_row[:, 1:]  # (B, N) over the final patch tokens
    every_patch = range(layout.num_patches)
    for attention in reversed(fused):  # back through the self-attention rollout, last block first
        weights = (weights[:, None, :] @ _rollout_step(attention, discard_ratio, every_patch))[:, 0]
    return weights.reshape(-1, *layout.grid)


def class_attention_maps(class_attentions: Sequence[torch.Tensor], layout: TokenLayout) -> torch.Tensor:
    """CaiT: [CLS]'s attention to each patch, (B, blocks, heads, gh, gw) (its weight on itself dropped)."""
    if not class_attentions:
        raise ValueError("no class attention: the model has no class-attention blocks or it was not captured")
    rows = torch.stack([a[:, :, 0, 1:] for a in class_attentions], dim=1)  # (B, blocks, H, N)
    return rows.reshape(*rows.shape[:3], *layout.grid)


def patch_distances(layout: TokenLayout) -> torch.Tensor:
    """(N, N) Euclidean distance in pixels between patch centres."""
    gh, gw = layout.grid
    rows = torch.arange(gh, dtype=torch.float32).repeat_interleave(gw)
    cols = torch.arange(gw, dtype=torch.float32).repeat(gh)
    centres = torch.stack([rows, cols], dim=1) * layout.patch_size  # (N, 2)
    return torch.cdist(centres, centres)


def attention_distance(attention: torch.Tensor, layout: TokenLayout) -> torch.Tensor:
    """One block's mean attention distance per head in pixels, averaged over query patches and images:
    (heads,). attention: (B, H, T, T). Prefix tokens have no place in the image, so each patch's weights
    over the patches are renormalised to sum to 1."""
    k = layout.num_prefix_tokens
    dist = patch_distances(layout).to(attention.device)  # (N, N)
    a = attention[:, :, k:, k:].float()  # (B, H, N, N) patch -> patch
    a = a / a.sum(dim=-1, keepdim=True).clamp_min(1e-12)
    return (a * dist).sum(dim=-1).mean(dim=(0, 2))  # (H,)


def mean_attention_distance(attentions: Sequence[torch.Tensor], layout: TokenLayout) -> torch.Tensor:
    """ViT paper Fig. 7 (right): for each block and head, the attention-weighted distance in pixels
    between a patch and the patches it attends to, averaged over query patches and images; (blocks, heads)."""
    _check_full(attentions, layout)
    return torch.stack([attention_distance(a, layout) for a in attentions])
