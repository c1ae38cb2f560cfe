"""The patch embedding: principal components of its filters as RGB tiles (ViT paper Fig. 7 left),
and the check that the Conv2d patchify stem is Unfold + Linear on the same weights."""

from __future__ import annotations

import torch

from ..models.stems import PatchifyStem
from ..models.vit import VisionTransformer


def _patchify(model: VisionTransformer) -> PatchifyStem:
    if not isinstance(model.patch_embed, PatchifyStem):
        raise ValueError("this model has a convolutional stem: its patch embedding is not one linear map of a patch")
    return model.patch_embed


@torch.no_grad()
def embedding_components(model: VisionTransformer, k: int = 28) -> tuple[torch.Tensor, torch.Tensor]:
    """The top-k principal components of the D patch-embedding filters, as (k, P, P, C) images,
    and the share of the filters' variance each explains (k,).

    Each filter (C*P*P weights) is one sample; components are the right singular vectors of the
    centred (D, C*P*P) matrix, largest first. Signs are arbitrary, as for any PCA.
    """
    stem = _patchify(model)
    weight = stem.proj.weight.float()  # (D, C, P, P)
    d, c, p, _ = weight.shape
    flat = weight.reshape(d, -1)
    flat = flat - flat.mean(dim=0, keepdim=True)  # (D, C*P*P)
    _, s, vh = torch.linalg.svd(flat, full_matrices=False)
    k = min(k, vh.shape[0])
    variance = s**2
    share = variance[:k] / variance.sum().clamp_min(1e-30)
    return vh[:k].reshape(k, c, p, p).permute(0, 2, 3, 1), share  # (k, P, P, C), (k,)


@torch.no_grad()
def unfold_difference(model: VisionTransformer, pixel_values: torch.Tensor) -> float:
    """max |Conv2d(x) - Linear(Unfold(x))| over the stem's output for these images."""
    stem = _patchify(model)
    x = pixel_values.to(stem.proj.weight.dtype)  # in the model's own dtype (bf16 weights: bf16 arithmetic)
    return float((stem(x).float() - stem.forward_unfold(x).float()).abs().max())
