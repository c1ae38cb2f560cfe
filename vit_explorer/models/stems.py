"""Stems turn an image (B, C, H, W) into a grid of patch embeddings (B, D, H/P, W/P).

`STEMS` is the table of stems that the config, the model and the builder read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from .config import ViTConfig


class PatchifyStem(nn.Module):
    """ViT's stem: a Conv2d with kernel = stride = P, i.e. a linear map of each flattened patch."""

    label = "patchify (Conv2d k=P s=P)"

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.patch_size = config.patch_size
        # CLIP's pre-norm follows the stem, which then has no bias (a bias there would be normalised away)
        self.proj = nn.Conv2d(config.in_chans, config.embed_dim, config.patch_size, config.patch_size,
                              bias=not config.pre_norm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)  # (B, D, H/P, W/P)

    def forward_unfold(self, x: torch.Tensor) -> torch.Tensor:
        """The same map written as Unfold + Linear on the same weights (the paper's formulation)."""
        b, _, h, w = x.shape
        p = self.patch_size
        patches = F.unfold(x, kernel_size=p, stride=p)  # (B, C*P*P, N), channel-major like the conv
        weight = self.proj.weight.flatten(1)  # (D, C*P*P)
        out = F.linear(patches.transpose(1, 2), weight, self.proj.bias)  # (B, N, D)
        return out.transpose(1, 2).reshape(b, -1, h // p, w // p)  # (B, D, H/P, W/P)


class ConvBNReLU(nn.Sequential):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__(
            nn.Conv2d(c_in, c_out, 3, stride, padding=1, bias=False),
            nn.BatchNorm2d(c_out),
            nn.ReLU(inplace=True),
        )


class ConvStem(nn.Module):
    """Xiao et al. 2021: 3x3 convs (BN, ReLU) whose strides multiply to P, then a 1x1 conv to D."""

    label = "convolutional (3x3 convs)"

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        layers, c_in = [], config.in_chans
        for c_out, stride in config.conv_stem_plan():
            layers.append(ConvBNReLU(c_in, c_out, stride))
            c_in = c_out
        self.convs = nn.Sequential(*layers)
        self.proj = nn.Conv2d(c_in, config.embed_dim, 1, bias=not config.pre_norm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.convs(x))  # (B, D, H/P, W/P)


STEMS: dict[str, type[PatchifyStem] | type[ConvStem]] = {"patchify": PatchifyStem, "conv": ConvStem}


def make_stem(config: ViTConfig) -> nn.Module:
    return STEMS[config.stem](config)
