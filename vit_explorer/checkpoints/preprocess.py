"""Image preprocessing that reproduces each source's own (timm `pretrained_cfg`, HF image processor)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import torch
from PIL import Image

INTERPOLATIONS = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
}
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class Preprocess:
    """PIL image -> normalised tensor (1, 3, H, W).

    Steps: convert to RGB; resize (`resize_shortest` keeps the aspect ratio, torchvision-style;
    otherwise `resize_to` is an exact (H, W)); centre-crop to `size` if `crop`; scale to [0, 1];
    normalise with mean/std.
    """

    size: tuple[int, int]  # (H, W) fed to the model
    resize_shortest: int | None = None  # shortest edge after resizing (timm: floor(size / crop_pct))
    resize_to: tuple[int, int] | None = None  # exact (H, W) resize (HF); None with no shortest = size
    crop: bool = False  # centre-crop to `size` after resizing
    crop_offset: str = "round"  # "round" (torchvision CenterCrop) or "floor" (HF center_crop)
    interpolation: str = "bicubic"
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD

    def __call__(self, image: Image.Image) -> torch.Tensor:
        image = image.convert("RGB")
        resample = INTERPOLATIONS[self.interpolation]
        if self.resize_shortest is not None:
            w, h = image.size
            short, long = (w, h) if w <= h else (h, w)
            new_short, new_long = self.resize_shortest, int(self.resize_shortest * long / short)
            new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
            image = image.resize((new_w, new_h), resample)
        else:
            th, tw = self.resize_to or self.size
            image = image.resize((tw, th), resample)
        if self.crop:
            image = self._centre_crop(image)
        array = np.asarray(image, dtype=np.float32) / 255.0  # (H, W, 3)
        array = (array - np.asarray(self.mean, np.float32)) / np.asarray(self.std, np.float32)
        return torch.from_numpy(array).permute(2, 0, 1).unsqueeze(0).contiguous()  # (1, 3, H, W)

    def _centre_crop(self, image: Image.Image) -> Image.Image:
        ch, cw = self.size
        w, h = image.size
        if self.crop_offset == "floor":
            top, left = (h - ch) // 2, (w - cw) // 2
        else:
            top, left = int(round((h - ch) / 2.0)), int(round((w - cw) / 2.0))
        return image.crop((left, top, left + cw, top + ch))

    def with_size(self, size: tuple[int, int]) -> Preprocess:
        """The same recipe for another model input size (keeps the resize/crop ratio)."""
        size = (int(size[0]), int(size[1]))
        if size == self.size:
            return self
        ratio = size[0] / self.size[0]
        shortest = None if self.resize_shortest is None else math.floor(self.resize_shortest * ratio)
        resize_to = None
        if self.resize_to is not None:
            resize_to = (round(self.resize_to[0] * size[0] / self.size[0]),
                         round(self.resize_to[1] * size[1] / self.size[1]))
        if self.crop and shortest is not None and size[0] != size[1]:
            shortest = None  # a rectangular target: resize exactly to a proportionally larger box
            resize_to = (math.floor(size[0] * self.resize_shortest / self.size[0]),
                         math.floor(size[1] * self.resize_shortest / self.size[1]))
        return replace(self, size=size, resize_shortest=shortest, resize_to=resize_to)

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Preprocess:
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        return cls(**values)


def timm_preprocess(pretrained_cfg: dict[str, Any]) -> Preprocess:
    """timm's eval transform from a `pretrained_cfg`: resize shortest edge to size/crop_pct, centre crop."""
    _, h, w = pretrained_cfg.get("input_size", (3, 224, 224))
    crop_pct = float(pretrained_cfg.get("crop_pct", 0.875))
    interpolation = pretrained_cfg.get("interpolation", "bicubic")
    mean = tuple(pretrained_cfg.get("mean", IMAGENET_MEAN))
    std = tuple(pretrained_cfg.get("std", IMAGENET_STD))
    if h == w:
        return Preprocess((h, w), resize_shortest=math.floor(h / crop_pct), crop=True,
                          interpolation=interpolation, mean=mean, std=std)
    return Preprocess((h, w), resize_to=(math.floor(h / crop_pct), math.floor(w / crop_pct)), crop=True,
                      interpolation=interpolation, mean=mean, std=std)
