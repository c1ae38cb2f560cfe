"""The seed article's dropout demonstration on real embeddings: train mode zeroes about p of the
values and scales the rest by 1/(1-p); eval mode changes nothing."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class DropoutDemo:
    p: float
    zeros_before: float  # share of exact zeros in the input
    zeros_train: float  # after train-mode dropout (about p more)
    zeros_eval: float  # after eval-mode dropout (the same as before)
    scale_error: float  # max |kept value - input / (1 - p)| over values train mode kept
    eval_unchanged: bool  # eval mode returned the input exactly


def dropout_demo(embeddings: torch.Tensor, p: float = 0.1, seed: int = 0) -> DropoutDemo:
    """Apply dropout with probability p to embeddings (e.g. (B, T, D) 'with_pos') in both modes."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must be in [0, 1), got {p}")
    x = embeddings.detach().float().cpu()  # on the CPU so the seeded generator is the one used
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        train = F.dropout(x, p, training=True)
    evaluated = F.dropout(x, p, training=False)
    kept = train != 0
    scale_error = float((train[kept] - x[kept] / (1 - p)).abs().max()) if kept.any() else 0.0
    return DropoutDemo(p, float((x == 0).float().mean()), float((~kept).float().mean()),
                       float((evaluated == 0).float().mean()), scale_error, bool(torch.equal(evaluated, x)))
