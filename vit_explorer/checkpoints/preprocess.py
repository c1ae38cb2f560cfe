"""Image preprocessing that reproduces each source's own (timm `pretrained_cfg`, HF image processor;
their config files are read in schemas.py)."""

from __future__ import annotations

import math
import numbers
import platform
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

INTERPOLATIONS = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
}
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
BACKENDS = ("pil", "tensor")
MAX_SIDE = 8192  # the model's input side (at patch 32, the config's limit of 65,536 patches)
MAX_RESIZE = 16384  # a resize target before the centre crop
MAX_RESIZED_PIXELS = 2**26  # an image resized for the model; a 1x20000 strip to shortest edge 224 is 4.5e9
MEAN_RANGE, STD_RANGE = (-10.0, 10.0), (1e-3, 10.0)  # normalisation of pixels in 0..1


@dataclass(frozen=True)
class Preprocess:
    """PIL image -> normalised tensor (1, 3, H, W).

    Steps: convert to RGB; resize; centre-crop to `size` if `crop`; scale to [0, 1]; normalise.
    Resizing: `resize_shortest` scales the shortest edge to that length (torchvision `Resize(int)`);
    else `resize_to` (H, W) with `keep_ratio` scales by one factor so the image just covers that box
    (timm `ResizeKeepRatio`); else the image is resized exactly to `resize_to` (default: `size`).
    With `max_patches` (SigLIP 2's NaFlex) each image keeps its aspect ratio instead: it is resized to
    the sides, multiples of `patch_size`, with the most patches up to `max_patches` (`naflex_size`);
    `size` is then the square input the app starts with, and `with_size` fixes another.
    `backend` picks the resampler: "pil" (PIL, as timm and PIL-based processors do) or "tensor"
    (torch on uint8 tensors, as transformers' torchvision image processors do; results differ by
    up to a few grey levels, so each source gets its own).
    """

    size: tuple[int, int]  # (H, W) fed to the model
    resize_shortest: int | None = None  # shortest edge after resizing (timm: floor(size / crop_pct))
    resize_to: tuple[int, int] | None = None  # (H, W) box to resize to; None with no shortest = size
    keep_ratio: bool = False  # with resize_to: keep the aspect ratio, covering the box
    crop: bool = False  # centre-crop to `size` after resizing
    crop_offset: str = "round"  # "round" (torchvision CenterCrop) or "floor" (HF center_crop)
    interpolation: str = "bicubic"
    backend: str = "pil"  # "pil" or "tensor"
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    max_patches: int = 0  # NaFlex (SigLIP 2): at most this many patches, the image's aspect ratio kept; 0 = off
    patch_size: int = 16  # with max_patches: the sides are multiples of it

    def __post_init__(self) -> None:
        _check_pair("size", self.size, MAX_SIDE)
        if self.resize_shortest is not None:
            _check_int("resize_shortest", self.resize_shortest, MAX_RESIZE)
        if self.resize_to is not None:
            _check_pair("resize_to", self.resize_to, MAX_RESIZE)
        for name in ("keep_ratio", "crop"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        _check_int("patch_size", self.patch_size, MAX_SIDE)
        if self.max_patches:
            _check_int("max_patches", self.max_patches, 65536)
            if self.crop:
                raise ValueError("max_patches resizes each image to its own size, so there is nothing to crop: "
                                 "set crop=False")
        _check_three("mean", self.mean, *MEAN_RANGE)
        _check_three("std", self.std, *STD_RANGE)
        for name in ("interpolation", "backend", "crop_offset"):
            if not isinstance(getattr(self, name), str):  # before the membership tests: a list is unhashable
                raise ValueError(f"{name} must be a string, got {getattr(self, name)!r}")
        if self.interpolation not in INTERPOLATIONS:
            raise ValueError(f"interpolation must be one of {sorted(INTERPOLATIONS)}, got {self.interpolation!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.backend == "tensor" and self.interpolation == "lanczos":
            raise ValueError("the tensor backend resamples with nearest, bilinear or bicubic, not lanczos")
        if self.crop_offset not in ("round", "floor"):
            raise ValueError(f"crop_offset must be 'round' or 'floor', got {self.crop_offset!r}")

    def __call__(self, image: Image.Image) -> torch.Tensor:
        image = image.convert("RGB")
        new_h, new_w = self.resized_size(image.height, image.width)
        if new_h * new_w > MAX_RESIZED_PIXELS:  # before allocating: a thin strip resized by its short side
            raise ValueError(f"a {image.width}x{image.height} image would be resized to {new_w}x{new_h} pixels "
                             f"(at most {MAX_RESIZED_PIXELS:,}); crop it to a less extreme aspect ratio")
        if self.backend == "pil":
            if (new_h, new_w) != (image.height, image.width):
                image = image.resize((new_w, new_h), INTERPOLATIONS[self.interpolation])
            pixels = torch.from_numpy(np.asarray(image, dtype=np.uint8).copy()).permute(2, 0, 1)  # (3, H, W)
        else:
            pixels = torch.from_numpy(np.asarray(image, dtype=np.uint8).copy()).permute(2, 0, 1).contiguous()
            if (new_h, new_w) != (image.height, image.width):
                pixels = _resize_uint8(pixels, (new_h, new_w), self.interpolation)
        if self.crop:
            pixels = self._centre_crop(pixels)
        x = pixels.to(torch.float32) / 255.0  # (3, H, W)
        mean = torch.tensor(self.mean, dtype=torch.float32)[:, None, None]
        std = torch.tensor(self.std, dtype=torch.float32)[:, None, None]
        return ((x - mean) / std).unsqueeze(0).contiguous()  # (1, 3, H, W)

    def resized_size(self, h: int, w: int) -> tuple[int, int]:
        """(H, W) of an h x w image after the resize step."""
        if self.max_patches:
            return naflex_size(h, w, self.patch_size, self.max_patches)
        if self.resize_shortest is not None:
            short, long = (w, h) if w <= h else (h, w)
            new_short, new_long = self.resize_shortest, int(self.resize_shortest * long / short)
            return (new_long, new_short) if w <= h else (new_short, new_long)
        th, tw = self.resize_to or self.size
        if self.keep_ratio:
            ratio = min(h / th, w / tw)
            return round(h / ratio), round(w / ratio)
        return th, tw

    def native_size(self, h: int, w: int) -> tuple[int, int]:
        """The model input (H, W) the source gives an h x w image: its own NaFlex size (SigLIP 2), else `size`."""
        return self.resized_size(h, w) if self.max_patches else self.size

    def to_image(self, pixels: torch.Tensor) -> np.ndarray:
        """Undo the normalisation of (1, 3, H, W): the image exactly as the model sees it, (H, W, 3) uint8."""
        x = pixels[0].detach().float().cpu()  # (3, H, W)
        x = x * torch.tensor(self.std)[:, None, None] + torch.tensor(self.mean)[:, None, None]  # in 0..1
        return (x.clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()

    def source_point(self, y: float, x: float, h: int, w: int) -> tuple[float, float]:
        """Where the point (y, x) of the model's input lies in the h x w image it was made from (the resize
        and the centre crop undone), e.g. to draw on the photo under the cursor."""
        rh, rw = self.resized_size(h, w)
        if self.crop:
            top, left = self._crop_origin(rh, rw)
            y, x = y + top, x + left
        return y * h / rh, x * w / rw

    def _crop_origin(self, h: int, w: int) -> tuple[int, int]:
        """(top, left) of the centre crop of `size` from an h x w image."""
        ch, cw = self.size
        if self.crop_offset == "floor":
            return (h - ch) // 2, (w - cw) // 2
        return int(round((h - ch) / 2.0)), int(round((w - cw) / 2.0))

    def _centre_crop(self, pixels: torch.Tensor) -> torch.Tensor:
        ch, cw = self.size
        h, w = pixels.shape[-2:]
        if ch > h or cw > w:
            raise ValueError(f"cannot centre-crop {ch}x{cw} from a {h}x{w} image")
        top, left = self._crop_origin(h, w)
        return pixels[:, top:top + ch, left:left + cw]

    def with_size(self, size: tuple[int, int]) -> Preprocess:
        """The same recipe for another model input size (keeps the resize/crop ratio)."""
        size = (int(size[0]), int(size[1]))
        if self.max_patches:  # a fixed input: NaFlex's resize of an image of that shape
            return replace(self, size=size, max_patches=0)
        if size == self.size:
            return self
        ratio = size[0] / self.size[0]
        shortest = None if self.resize_shortest is None else math.floor(self.resize_shortest * ratio)
        resize_to = None
        if self.resize_to is not None:
            resize_to = (round(self.resize_to[0] * size[0] / self.size[0]),
                         round(self.resize_to[1] * size[1] / self.size[1]))
        keep_ratio = self.keep_ratio
        if self.crop and self.resize_shortest is not None and size[0] != size[1]:
            # a rectangular target: timm scales to cover a proportionally larger box (ResizeKeepRatio)
            shortest = None
            resize_to = (math.floor(size[0] * self.resize_shortest / self.size[0]),
                         math.floor(size[1] * self.resize_shortest / self.size[1]))
            keep_ratio = True
        return replace(self, size=size, resize_shortest=shortest, resize_to=resize_to, keep_ratio=keep_ratio)

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Preprocess:
        """The inverse of to_dict; ValueError naming an unknown, missing or invalid field."""
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ValueError(f"unknown preprocessing keys {unknown}; known keys are {known}")
        if "size" not in data:
            raise ValueError("size is missing")
        values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        return cls(**values)


def naflex_size(h: int, w: int, patch_size: int, max_patches: int, eps: float = 1e-5) -> tuple[int, int]:
    """SigLIP 2's NaFlex resize of an h x w image (HF's get_image_size_for_max_num_patches): the largest scale,
    found by bisection, whose sides rounded up to multiples of the patch (at least one) give at most
    `max_patches` patches."""
    def side(scale: float, size: int) -> int:
        return max(patch_size, math.ceil(size * scale / patch_size) * patch_size)

    low, high = eps / 10, 100.0
    while high - low >= eps:
        scale = (low + high) / 2
        if (side(scale, h) / patch_size) * (side(scale, w) / patch_size) <= max_patches:
            low = scale
        else:
            high = scale
    return side(low, h), side(low, w)


def _resize_uint8(pixels: torch.Tensor, size: tuple[int, int], interpolation: str) -> torch.Tensor:
    """torchvision's `resize` on a uint8 (3, H, W) tensor, antialiased, reproduced with torch alone.

    torchvision resizes uint8 natively for bicubic, and for bilinear on AVX2/AVX512/ARM CPUs;
    otherwise it resizes in float32 and rounds back. Both are mirrored so the grey levels agree.
    """
    x = pixels[None]  # (1, 3, H, W)
    if interpolation == "nearest":
        return F.interpolate(x, size=size, mode="nearest")[0]
    native = interpolation == "bicubic" or (
        torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512") or platform.machine() in ("aarch64", "arm64"))
    if native:
        return F.interpolate(x, size=size, mode=interpolation, align_corners=False, antialias=True)[0]
    y = F.interpolate(x.float(), size=size, mode=interpolation, align_corners=False, antialias=True)
    return y.clamp_(0, 255).round_().to(torch.uint8)[0]


def _check_int(name: str, value: Any, high: int) -> None:
    if not (isinstance(value, numbers.Integral) and not isinstance(value, bool) and 1 <= int(value) <= high):
        raise ValueError(f"{name} must be an integer from 1 to {high}, got {value!r}")


def _check_pair(name: str, value: Any, high: int) -> None:
    if not (isinstance(value, tuple) and len(value) == 2):
        raise ValueError(f"{name} must be (height, width), got {value!r}")
    for side in value:
        _check_int(name, side, high)


def _check_three(name: str, value: Any, low: float, high: float) -> None:
    """Three finite numbers (R, G, B) in [low, high]."""
    if not (isinstance(value, tuple) and len(value) == 3 and all(
            isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) and low <= float(v) <= high
            for v in value)):
        raise ValueError(f"{name} must be three finite numbers in [{low}, {high}], got {value!r}")
