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


# ---------------------------------------------------------------------- the hybrid stem (ViT paper, R50 + ViT)
HYBRID_STEM_WIDTH = 64  # the ResNet's 7x7 stem convolution
HYBRID_WIDTHS = (256, 512, 1024, 2048)  # output channels of the ResNet's stages (a bottleneck is a quarter)
# the ResNet-50 stages of each total stride (the stem's 4, then 2 per stage after the first): the ViT paper's
# R50+ViT-B/16 takes the first three, with 9 blocks in the third (timm vit_base_r50_s16_*)
HYBRID_LAYERS = {4: (3,), 8: (3, 4), 16: (3, 4, 9), 32: (3, 4, 6, 3)}
WS_EPS = 1e-8  # weight standardisation (timm StdConv2dSame in the hybrid's ResNet)
GN_GROUPS, GN_EPS = 32, 1e-5


def _pad_same(x: torch.Tensor, kernel: int, stride: int, value: float = 0.0) -> torch.Tensor:
    """TensorFlow's 'SAME' padding (the BiT/ViT ResNets were trained in JAX): out = ceil(in / stride), any
    excess on the bottom/right."""
    pads = []
    for size in (x.shape[-1], x.shape[-2]):
        total = max((-(-size // stride) - 1) * stride + kernel - size, 0)
        pads += [total // 2, total - total // 2]
    return F.pad(x, pads, value=value)


class StdConv2dSame(nn.Conv2d):
    """A bias-free convolution with weight standardisation (each filter to zero mean, unit variance) and SAME
    padding, as BiT's ResNets (Kolesnikov et al. 2020) that the ViT paper's hybrid uses."""

    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int = 1) -> None:
        super().__init__(c_in, c_out, kernel, stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = F.batch_norm(self.weight.reshape(1, self.out_channels, -1), None, None, training=True, momentum=0.0,
                         eps=WS_EPS).reshape_as(self.weight)  # per filter (w - mean) / std, as timm computes it
        k, s = self.kernel_size[0], self.stride[0]
        return F.conv2d(_pad_same(x, k, s), w, None, s)


class GroupNormAct(nn.GroupNorm):
    """GroupNorm (32 groups), optionally followed by a ReLU."""

    def __init__(self, channels: int, act: bool = True) -> None:
        super().__init__(GN_GROUPS, channels, eps=GN_EPS)
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)
        return F.relu(x) if self.act else x


class Downsample(nn.Module):
    """The shortcut of a stage's first block: a strided 1x1 convolution to the stage's width, normed."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv = StdConv2dSame(c_in, c_out, 1, stride)
        self.norm = GroupNormAct(c_out, act=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.conv(x))


class Bottleneck(nn.Module):
    """ResNet's bottleneck (not pre-activation): 1x1 to a quarter of the width, 3x3 (strided), 1x1 back, each
    normed; the residual added before the last ReLU."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        mid = c_out // 4
        self.downsample = Downsample(c_in, c_out, stride) if stride != 1 or c_in != c_out else None
        self.conv1, self.norm1 = StdConv2dSame(c_in, mid, 1), GroupNormAct(mid)
        self.conv2, self.norm2 = StdConv2dSame(mid, mid, 3, stride), GroupNormAct(mid)
        self.conv3, self.norm3 = StdConv2dSame(mid, c_out, 1), GroupNormAct(c_out, act=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        x = self.norm1(self.conv1(x))
        x = self.norm2(self.conv2(x))
        x = self.norm3(self.conv3(x))
        return F.relu(x + shortcut)


class ResNetStage(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int, depth: int) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*(Bottleneck(c_in if i == 0 else c_out, c_out, stride if i == 0 else 1)
                                      for i in range(depth)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


class MaxPoolSame(nn.Module):
    """3x3 max-pooling with stride 2 and SAME padding (padded with -inf, so a border never wins)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.max_pool2d(_pad_same(x, 3, 2, float("-inf")), 3, 2)


class ResNetBackbone(nn.Module):
    """The ResNet (v2 code, v1 blocks: BiT) whose feature map the hybrid ViT reads: a 7x7 stride-2 stem
    convolution, normed, a stride-2 max-pool, then bottleneck stages (the first at stride 1, the others 2)."""

    def __init__(self, in_chans: int, layers: tuple[int, ...]) -> None:
        super().__init__()
        self.stem = nn.Sequential()
        self.stem.add_module("conv", StdConv2dSame(in_chans, HYBRID_STEM_WIDTH, 7, 2))
        self.stem.add_module("norm", GroupNormAct(HYBRID_STEM_WIDTH))
        self.stem.add_module("pool", MaxPoolSame())
        self.stages = nn.Sequential()
        c_in = HYBRID_STEM_WIDTH
        for i, depth in enumerate(layers):
            self.stages.add_module(str(i), ResNetStage(c_in, HYBRID_WIDTHS[i], 1 if i == 0 else 2, depth))
            c_in = HYBRID_WIDTHS[i]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.stages(self.stem(x))  # (B, C, H/P, W/P)


class HybridStem(nn.Module):
    """The ViT paper's hybrid (R50+ViT): a ResNet's feature map is the patch grid, each position a token
    through a 1x1 projection to D (timm HybridEmbed with a ResNetV2 backbone)."""

    label = "hybrid (ResNet feature map)"

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        layers = config.hybrid_plan()
        self.backbone = ResNetBackbone(config.in_chans, layers)
        self.proj = nn.Conv2d(HYBRID_WIDTHS[len(layers) - 1], config.embed_dim, 1, bias=not config.pre_norm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.backbone(x))  # (B, D, H/P, W/P)


def hybrid_parameters(in_chans: int, layers: tuple[int, ...]) -> int:
    """Parameters of the hybrid's ResNet (convolutions without bias; each GroupNorm a scale and a shift)."""
    n, c_in = in_chans * HYBRID_STEM_WIDTH * 49 + 2 * HYBRID_STEM_WIDTH, HYBRID_STEM_WIDTH
    for i, depth in enumerate(layers):
        c_out = HYBRID_WIDTHS[i]
        mid = c_out // 4
        n += c_in * c_out + 2 * c_out  # the first block's shortcut
        for j in range(depth):
            n += (c_out if j else c_in) * mid + mid * mid * 9 + mid * c_out + 2 * (2 * mid + c_out)
        c_in = c_out
    return n


def hybrid_multiply_adds(in_chans: int, layers: tuple[int, ...], size: tuple[int, int]) -> int:
    """Multiply-adds of the hybrid's ResNet convolutions on one image of `size`."""
    def down(hw: tuple[int, int], stride: int) -> tuple[int, int]:
        return (-(-hw[0] // stride), -(-hw[1] // stride))  # SAME padding

    hw = down(size, 2)
    macs = hw[0] * hw[1] * HYBRID_STEM_WIDTH * in_chans * 49
    hw, c_in = down(hw, 2), HYBRID_STEM_WIDTH  # the max-pool
    for i, depth in enumerate(layers):
        c_out, stride = HYBRID_WIDTHS[i], 1 if i == 0 else 2
        mid = c_out // 4
        for j in range(depth):
            inner = hw
            out = down(hw, stride) if j == 0 else hw
            macs += inner[0] * inner[1] * (c_out if j else c_in) * mid + out[0] * out[1] * (mid * mid * 9 + mid * c_out)
            if j == 0:
                macs += out[0] * out[1] * c_in * c_out  # the shortcut
            hw = out
        c_in = c_out
    return macs


STEMS: dict[str, type[PatchifyStem] | type[ConvStem] | type[HybridStem]] = {"patchify": PatchifyStem, "conv": ConvStem,
                                                                              "hybrid": HybridStem}


def make_stem(config: ViTConfig) -> nn.Module:
    return STEMS[config.stem](config)
