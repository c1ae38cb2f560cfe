"""What masking patches does to the prediction: top-k before/after a [MASK] pattern, and per-patch
occlusion sensitivity (each patch masked alone), computed in batches."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..jobs import Job
from ..models.vit import VisionTransformer


@dataclass
class TopK:
    indices: list[int]
    probs: list[float]


@dataclass
class MaskEffect:
    before: TopK
    after: TopK
    target: int  # the class predicted without the mask
    target_drop: float  # its probability before minus after


def top_k(probs: torch.Tensor, k: int) -> TopK:
    """probs (classes,) -> the k most likely classes."""
    values, indices = torch.topk(probs, min(k, probs.numel()))
    return TopK([int(i) for i in indices], [float(v) for v in values])


@torch.no_grad()
def mask_effect(model: VisionTransformer, pixel_values: torch.Tensor, mask: torch.Tensor, k: int = 5) -> MaskEffect:
    """Top-k for one image (1, C, H, W) without and with mask ((N,) or (gh, gw) bool, True = [MASK])."""
    before = model(pixel_values)[0].float().softmax(-1)
    after = model(pixel_values, mask=mask.reshape(1, -1))[0].float().softmax(-1)
    target = int(before.argmax())
    return MaskEffect(top_k(before, k), top_k(after, k), target, float(before[target] - after[target]))


@torch.no_grad()
def occlusion_sensitivity(model: VisionTransformer, pixel_values: torch.Tensor, target: int | None = None,
                          batch_size: int = 32, job: Job | None = None) -> torch.Tensor:
    """Drop in the target class's probability when each patch alone is masked: (gh, gw).

    pixel_values: one image (1, C, H, W); target defaults to the predicted class. Masked images run
    `batch_size` at a time (one masked patch per image of the batch); the job hears of each batch.
    """
    layout = model.layout((int(pixel_values.shape[-2]), int(pixel_values.shape[-1])))
    n = layout.num_patches
    base = model(pixel_values)[0].float().softmax(-1)
    target = int(base.argmax()) if target is None else target
    drops = torch.empty(n)
    starts = range(0, n, batch_size)
    job = job or Job()
    for start in starts:
        job.check()
        stop = min(start + batch_size, n)
        mask = torch.zeros(stop - start, n, dtype=torch.bool, device=pixel_values.device)
        mask[torch.arange(stop - start), torch.arange(start, stop)] = True  # image i masks patch start + i
        probs = model(pixel_values.expand(stop - start, -1, -1, -1), mask=mask).float().softmax(-1)
        drops[start:stop] = base[target].cpu() - probs[:, target].cpu()
        job.progress(stop / n, "occlusion")
    return drops.reshape(layout.grid)
