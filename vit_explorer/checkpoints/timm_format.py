"""timm ViT, DeiT (distilled too) and CaiT checkpoints -> the native model, without importing timm.

The state dict gives embed dim, depth, patch size, grid, MLP width, biases and classes; the number
of heads cannot be read from shapes, so it comes from the model name (or `model_args` in a timm
hub config.json). Parameter names are already timm's, except CaiT's `blocks_token_only` (ours:
`class_blocks`) and `gamma_1`/`gamma_2` (ours: `ls1.gamma`/`ls2.gamma`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import torch

from ..models import ConfigError, ViTConfig
from .errors import CheckpointError
from .labels import generic_labels, imagenet_labels
from .preprocess import IMAGENET_MEAN, IMAGENET_STD, Preprocess, timm_preprocess

VIT_SIZES = {"tiny": (192, 3), "small": (384, 6), "base": (768, 12), "large": (1024, 16), "huge": (1280, 16)}
CAIT_SIZES = {"xxs": (192, 4), "xs": (288, 6), "s": (384, 8), "m": (768, 16)}
_VIT_NAME = re.compile(r"(?P<family>vit|deit)_(?P<size>tiny|small|base|large|huge)_(?P<distilled>distilled_)?"
                       r"patch(?P<patch>\d+)_(?P<res>\d+)(_in21k)?")
_CAIT_NAME = re.compile(r"cait_(?P<size>xxs|xs|s|m)(?P<depth>\d+)_(?P<res>\d+)")
SUPPORTED = ("vit_{tiny,small,base,large,huge}_patch{P}_{res}, deit_{tiny,small,base}[_distilled]_patch{P}_{res}, "
             "cait_{xxs,xs,s,m}{depth}_{res} (an optional .tag after the name)")
# model_args that change the architecture away from what this reader builds
_UNSUPPORTED_ARGS = {"class_token": False, "no_embed_class": True, "fc_norm": True, "qk_norm": True,
                     "pre_norm": True, "dynamic_img_pad": True}


@dataclass(frozen=True)
class TimmName:
    family: str  # "vit", "deit" or "cait": decides the architecture; the weights decide the sizes
    num_heads: int
    image_size: int  # the resolution in the name
    distilled: bool = False


def parse_name(name: str) -> TimmName:
    """'vit_small_patch16_384.augreg_in21k' -> family, heads, resolution; a clear error otherwise."""
    base = name.split(".", 1)[0].removeprefix("timm/")
    match = _VIT_NAME.fullmatch(base)
    if match:
        _, heads = VIT_SIZES[match["size"]]
        return TimmName(match["family"], heads, int(match["res"]), bool(match["distilled"]))
    match = _CAIT_NAME.fullmatch(base)
    if match:
        return TimmName("cait", CAIT_SIZES[match["size"]][1], int(match["res"]))
    raise CheckpointError(f"timm model {name!r} is not supported; supported names: {SUPPORTED}")


def timm_to_native(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename timm keys to ours (CaiT: class blocks and LayerScale gammas); everything else is kept."""
    out = {}
    for key, value in state.items():
        key = re.sub(r"^blocks_token_only\.", "class_blocks.", key)
        key = re.sub(r"\.gamma_1$", ".ls1.gamma", key)
        key = re.sub(r"\.gamma_2$", ".ls2.gamma", key)
        out[key] = value
    return out


def _count(state: dict[str, torch.Tensor], prefix: str) -> int:
    indices = {int(m.group(1)) for k in state if (m := re.match(rf"{re.escape(prefix)}\.(\d+)\.", k))}
    return max(indices) + 1 if indices else 0


def config_from_timm(name: str, state: dict[str, torch.Tensor], model_args: dict[str, Any], where: str) -> ViTConfig:
    """Our config for a timm model name and its (already renamed) state dict."""
    parsed = parse_name(name)
    for key, bad in _UNSUPPORTED_ARGS.items():
        if key in model_args and model_args[key] == bad:
            raise CheckpointError(f"{where}: timm model_args {key}={bad!r} is not supported")
    pool, registers = model_args.get("global_pool", "token"), model_args.get("reg_tokens", 0)
    if pool != "token" or registers:
        raise CheckpointError(f"{where}: only [CLS]-token pooling without register tokens is supported "
                              f"(global_pool={pool!r}, reg_tokens={registers})")
    needed = ["patch_embed.proj.weight", "pos_embed", "cls_token", "blocks.0.mlp.fc1.weight"]
    absent = [k for k in needed if k not in state]
    if absent:
        raise CheckpointError(f"{where}: not a timm {name} checkpoint; missing keys: {', '.join(absent)}")
    proj = state["patch_embed.proj.weight"]  # (D, C, P, P)
    if proj.ndim != 4 or proj.shape[-1] != proj.shape[-2]:
        raise CheckpointError(f"{where}: patch_embed.proj.weight has shape {tuple(proj.shape)}; expected (D, C, P, P)")
    d, in_chans, patch = int(proj.shape[0]), int(proj.shape[1]), int(proj.shape[-1])
    distilled = parsed.distilled
    cait = parsed.family == "cait"
    n_prefix = 0 if cait else (2 if distilled else 1)
    n_patches = int(state["pos_embed"].shape[1]) - n_prefix
    image_size = _image_size(model_args.get("img_size"), parsed.image_size, patch, n_patches)
    head = state.get("head.weight")
    num_heads = int(model_args.get("num_heads", parsed.num_heads))
    layer_scale = cait or "blocks.0.ls1.gamma" in state
    try:
        config = ViTConfig(
            image_size=image_size,
            patch_size=patch,
            in_chans=in_chans,
            num_classes=0 if head is None else int(head.shape[0]),
            embed_dim=d,
            depth=_count(state, "blocks"),
            num_heads=num_heads,
            mlp_ratio=state["blocks.0.mlp.fc1.weight"].shape[0] / d,
            qkv_bias="blocks.0.attn.qkv.bias" in state,
            prefix_tokens="cls+dist" if distilled else "cls",
            pos_embed_prefix=not cait,
            layer_scale_init=1.0 if layer_scale else None,  # the value is only an init; weights replace it
            talking_heads=cait,
            class_attn_depth=(_count(state, "class_blocks") or 2) if cait else 0,
            class_attn_mlp_ratio=(state["class_blocks.0.mlp.fc1.weight"].shape[0] / d
                                  if "class_blocks.0.mlp.fc1.weight" in state else 4.0),
            layer_norm_eps=1e-6,
        )
    except ConfigError as error:
        raise CheckpointError(f"{where}: the weights and the name {name!r} give an invalid model: {error}") from None
    return config


def _image_size(img_size: Any, name_res: int, patch: int, n_patches: int) -> tuple[int, int]:
    """The (H, W) the position table was trained for: model_args img_size, else the name's
    resolution, else a square grid. When none fits the PE rows, the first guess is returned and the
    architecture check reports pos_embed as mis-shaped, with whatever else differs."""
    candidates = []
    if img_size is not None:
        candidates.append(tuple(img_size) if isinstance(img_size, (list, tuple)) else (int(img_size),) * 2)
    candidates.append((name_res, name_res))
    side = math.isqrt(max(n_patches, 0))
    candidates.append((side * patch, side * patch))
    for h, w in candidates:
        if (h // patch) * (w // patch) == n_patches and h % patch == 0 and w % patch == 0:
            return (int(h), int(w))
    h, w = candidates[0]
    return (max(1, h // patch) * patch, max(1, w // patch) * patch)


def labels_from_timm(pretrained_cfg: dict[str, Any], num_classes: int) -> list[str]:
    names = pretrained_cfg.get("label_names")
    if isinstance(names, list) and len(names) == num_classes:
        return [str(n) for n in names]
    return imagenet_labels(num_classes) or generic_labels(num_classes)


def preprocess_from_timm(pretrained_cfg: dict[str, Any], config: ViTConfig, family: str, where: str) -> Preprocess:
    """timm's eval transform; without a pretrained_cfg, timm's defaults for the family at the model's size."""
    if not pretrained_cfg:
        # ViT checkpoints in timm mostly use mean = std = 0.5; DeiT and CaiT use ImageNet statistics
        half = family == "vit"
        pretrained_cfg = {"input_size": (3, *config.image_size), "crop_pct": 0.9, "interpolation": "bicubic",
                          "mean": (0.5,) * 3 if half else IMAGENET_MEAN, "std": (0.5,) * 3 if half else IMAGENET_STD}
    try:
        return timm_preprocess(pretrained_cfg)
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"{where}: pretrained_cfg: {error}") from None
