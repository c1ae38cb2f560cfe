"""Head importance: how much the prediction suffers when one attention head is masked, and a
per-layer pruning curve that removes a layer's heads from least to most important."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..jobs import Job
from ..models.vit import VisionTransformer

METRICS = ("prob", "loss")


def _score(logits: torch.Tensor, targets: torch.Tensor, metric: str) -> torch.Tensor:
    """Mean over the images: the targets' probability ('prob') or cross-entropy ('loss')."""
    if metric == "prob":
        return logits.float().softmax(-1).gather(1, targets[:, None]).mean()
    if metric == "loss":
        return F.cross_entropy(logits.float(), targets)
    raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")


def _n_layers(model: VisionTransformer) -> int:
    return model.config.num_blocks


@torch.no_grad()
def head_importance(model: VisionTransformer, pixel_values: torch.Tensor, targets: torch.Tensor | None = None,
                    metric: str = "prob", mask: torch.Tensor | None = None, job: Job | None = None) -> torch.Tensor:
    """(layers, heads): the change when each head alone is masked, over a small image set (B, C, H, W).

    'prob': drop in the targets' mean probability; 'loss': rise in cross-entropy. Either way a
    larger value means a more important head. targets (B,) default to the unmasked predictions.
    Layers are the self-attention blocks, then CaiT's class-attention blocks. mask: (B, N) or (N,)
    patches replaced by [MASK] in every run. The job hears of each head and is checked between
    heads (Cancelled).
    """
    heads = model.config.num_heads
    layers = _n_layers(model)
    logits = model(pixel_values, mask=mask)
    targets = logits.argmax(-1) if targets is None else targets.to(logits.device)
    base = _score(logits, targets, metric)
    sign = 1.0 if metric == "prob" else -1.0
    out = torch.empty(layers, heads)
    cells = [(i, h) for i in range(layers) for h in range(heads)]
    job = job or Job()
    for done, (i, h) in enumerate(cells, start=1):
        job.check()
        head_mask = torch.ones(layers, heads, device=pixel_values.device)
        head_mask[i, h] = 0.0
        score = _score(model(pixel_values, mask=mask, head_mask=head_mask), targets, metric)
        out[i, h] = sign * (base - score)
        job.progress(done / len(cells), f"head {done} of {len(cells)}")
    return out


@torch.no_grad()
def pruning_curve(model: VisionTransformer, pixel_values: torch.Tensor, importance: torch.Tensor,
                  targets: torch.Tensor | None = None, metric: str = "prob") -> torch.Tensor:
    """(layers, heads + 1): the metric with 0, 1, ... all heads of one layer masked, removing that
    layer's heads in order of rising importance (the other layers intact)."""
    heads = model.config.num_heads
    layers = _n_layers(model)
    logits = model(pixel_values)
    targets = logits.argmax(-1) if targets is None else targets.to(logits.device)
    out = torch.empty(layers, heads + 1)
    for i in range(layers):
        out[i, 0] = _score(logits, targets, metric)
        head_mask = torch.ones(layers, heads, device=pixel_values.device)
        for k, h in enumerate(torch.argsort(importance[i]).tolist(), start=1):
            head_mask[i, h] = 0.0
            out[i, k] = _score(model(pixel_values, head_mask=head_mask), targets, metric)
    return out
