"""Attention health per logged step (issue 29): what a class watches form as the model learns, from one fixed image
through the named hook sites, with no gradient: attention entropy per block (Zhai et al. 2023: a collapsing head
goes to 0; an untrained model's is near the uniform maximum log T), the largest token norm over the blocks' outputs
(Darcet et al. 2024: high-norm outliers; an untrained model has none) and where [CLS] looks in the last block."""

from __future__ import annotations

import torch

from ..analysis import registers as R
from ..models import VisionTransformer
from .events import AttentionHealth


def _wanted(name: str) -> bool:
    return name.startswith("blocks.") and name.endswith(("attn.hook_pattern", "hook_resid_post"))


def attention_health(model: VisionTransformer, step: int, pixels: torch.Tensor) -> AttentionHealth:
    """The health of `model` on `pixels` (1, 3, H, W), normalised as training feeds it; the model's mode is kept."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            _, cache = model.run_with_cache(pixels, names_filter=_wanted)
    finally:
        model.train(was_training)
    layout = model.layout()
    blocks = model.config.depth
    patterns = [cache[f"blocks.{b}.attn.hook_pattern"] for b in range(blocks)]  # each (1, heads, T, T)
    entropy = torch.stack([R.attention_entropy(p)[0].mean() for p in patterns])  # (blocks,) mean over heads
    norms = torch.stack([R.token_norms(cache[f"blocks.{b}.hook_resid_post"])[0].max() for b in range(blocks)])
    last = patterns[-1][0].float()  # (heads, T, T)
    n = layout.num_patches
    if "cls" in layout.prefix_names and not layout.class_attn:
        row = last[:, layout.prefix_names.index("cls"), -n:]  # (heads, N) what [CLS] attends to
    else:
        row = last[:, -n:, -n:].mean(dim=1)  # no [CLS] here: the attention each patch receives, mean over queries
    cls = row.mean(dim=0).reshape(layout.grid)  # (gh, gw)
    return AttentionHealth(step, entropy.cpu().numpy(), R.max_entropy(last.shape[-1]), norms.cpu().numpy(),
                           cls.cpu().numpy())


def health_series(history: list[AttentionHealth], blocks: int = 12) -> tuple[list[int], dict[str, list[float]],
                                                                           list[float]]:
    """The Training view's curves from a run's health events: the steps, the entropy of each block (at most
    `blocks` of them, evenly spread; the deepest always shown) with "uniform (log T)" beside them, and the largest
    token norm over all blocks."""
    steps = [h.step for h in history]
    if not history:
        return steps, {}, []
    depth = len(history[0].entropy)
    shown = sorted({round(i * (depth - 1) / max(1, min(blocks, depth) - 1)) for i in range(min(blocks, depth))})
    series = {f"block {b}": [float(h.entropy[b]) for h in history] for b in shown}
    series["uniform (log T)"] = [h.max_entropy for h in history]
    return steps, series, [float(h.max_norm.max()) for h in history]
