"""The normalisation layers a model can use (`ViTConfig.norm`): every norm of the model is of one kind.

`NORMS` is the table the config validates against and the blocks build from.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

# name -> (constructor of a norm over `dim` features with epsilon `eps`, parameters per feature)
NORMS: dict[str, tuple[Callable[[int, float], nn.Module], int]] = {
    "layernorm": (lambda dim, eps: nn.LayerNorm(dim, eps=eps), 2),  # centre, scale, shift (ViT)
    "rmsnorm": (lambda dim, eps: nn.RMSNorm(dim, eps=eps), 1),  # divide by the root mean square, scale (AIMv2)
}


def make_norm(kind: str, dim: int, eps: float) -> nn.Module:
    """A norm of `kind` (a key of NORMS) over the last `dim` features."""
    return NORMS[kind][0](dim, eps)
