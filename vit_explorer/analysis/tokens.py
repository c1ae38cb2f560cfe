"""Token similarity: [CLS] vs distillation token through the layers (DeiT), and patches vs [CLS]."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from ..models.config import TokenLayout


def _index(layout: TokenLayout, name: str) -> int:
    if name not in layout.prefix_names:
        raise ValueError(f"this model has no [{name.upper()}] token among its tokens {layout.prefix_names or '(none)'}")
    return layout.prefix_names.index(name)


def cls_dist_similarity(states: Sequence[torch.Tensor], layout: TokenLayout) -> torch.Tensor:
    """Cosine of the [CLS] and distillation tokens in each given state (B, T, D): (B, len(states)).

    DeiT reports it rising from about 0.06 at the input to 0.93 at the last layer; pass the
    embedded tokens first and then the hidden states of each block to draw that curve.
    """
    c, d = _index(layout, "cls"), _index(layout, "dist")
    return torch.stack([F.cosine_similarity(s[:, c].float(), s[:, d].float(), dim=-1) for s in states], dim=1)


def patch_cls_similarity(state: torch.Tensor, layout: TokenLayout, cls: torch.Tensor | None = None) -> torch.Tensor:
    """Cosine of each patch's hidden state with [CLS]: (B, gh, gw).

    state: (B, T, D). cls: (B, D) when [CLS] is not among the tokens (CaiT: a class token from
    'class_tokens'); by default the [CLS] token of `state`.
    """
    if cls is None:
        cls = state[:, _index(layout, "cls")]
    patches = state[:, layout.num_prefix_tokens:].float()  # (B, N, D)
    sim = F.cosine_similarity(patches, cls.float()[:, None, :], dim=-1)  # (B, N)
    return sim.reshape(-1, *layout.grid)
