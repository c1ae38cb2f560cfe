"""timm ViT, DeiT (distilled too) and CaiT checkpoints -> the native model, without importing timm.

The model name pins the architecture and its sizes (width, depth, heads, patch, resolution), and a
timm hub config.json's `model_args` override them, as in timm's create_model; the weights must
then agree with every size they show. Parameter names are already timm's, except CaiT's
`blocks_token_only` (ours: `class_blocks`) and `gamma_1`/`gamma_2` (ours: `ls1.gamma`/`ls2.gamma`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch

from ..models import ConfigError, ViTConfig
from .errors import CheckpointError
from .labels import generic_labels, imagenet_labels
from .preprocess import IMAGENET_MEAN, IMAGENET_STD, Preprocess
from .schemas import TimmConfig, parse_timm_config, timm_preprocess
from .source import Checkpoint, Declared, Source
from .weights import check_weights_file, find_weights

# size -> (width, heads, depth); CaiT's depth is in the name
VIT_SIZES = {"tiny": (192, 3, 12), "small": (384, 6, 12), "base": (768, 12, 12), "large": (1024, 16, 24),
             "huge": (1280, 16, 32)}
CAIT_SIZES = {"xxs": (192, 4), "xs": (288, 6), "s": (384, 8), "m": (768, 16)}
_VIT_NAME = re.compile(r"(?P<family>vit|deit)_(?P<size>tiny|small|base|large|huge)_(?P<distilled>distilled_)?"
                       r"patch(?P<patch>\d{1,5})_(?P<res>\d{1,6})(_in21k)?")
_CAIT_NAME = re.compile(r"cait_(?P<size>xxs|xs|s|m)(?P<depth>\d{1,4})_(?P<res>\d{1,6})")
SUPPORTED = ("vit_{tiny,small,base,large,huge}_patch{P}_{res}, deit_{tiny,small,base}[_distilled]_patch{P}_{res}, "
             "cait_{xxs,xs,s,m}{depth}_{res} (an optional .tag after the name)")
# names of our dimensions in timm's model_args, for messages
TIMM_NAMES = {"width": "embed_dim", "depth": "depth", "mlp_width": "MLP width (embed_dim x mlp_ratio)",
              "patch_size": "patch_size", "in_chans": "in_chans",
              "pos_rows": "position-table rows ((img_size / patch_size)^2, plus [CLS] and distillation tokens)",
              "num_classes": "num_classes", "heads": "num_heads", "class_attn_depth": "depth_token_only",
              "class_mlp_width": "class-attention MLP width (embed_dim x mlp_ratio_token_only)"}


@dataclass(frozen=True)
class TimmName:
    """What a timm model name pins: the architecture and every size but the classifier's."""

    family: str  # "vit", "deit" or "cait"
    embed_dim: int
    depth: int
    num_heads: int
    patch_size: int
    image_size: int  # the resolution in the name
    distilled: bool = False


def parse_name(name: str, where: str = "") -> TimmName:
    """'vit_small_patch16_384.augreg_in21k' -> family, sizes, resolution; a clear error (prefixed with
    `where`, e.g. the config file's field) otherwise."""
    base = name.split(".", 1)[0].removeprefix("timm/")
    match = _VIT_NAME.fullmatch(base)
    if match:
        width, heads, depth = VIT_SIZES[match["size"]]
        return TimmName(match["family"], width, depth, heads, int(match["patch"]), int(match["res"]),
                        bool(match["distilled"]))
    match = _CAIT_NAME.fullmatch(base)
    if match:
        width, heads = CAIT_SIZES[match["size"]]
        return TimmName("cait", width, int(match["depth"]), heads, 16, int(match["res"]))
    raise CheckpointError(f"{where}timm model {name[:100]!r} is not supported; supported names: {SUPPORTED}")


def timm_to_native(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename timm keys to ours (CaiT: class blocks and LayerScale gammas); everything else is kept."""
    out = {}
    for key, value in state.items():
        key = re.sub(r"^blocks_token_only\.", "class_blocks.", key)
        key = re.sub(r"\.gamma_1$", ".ls1.gamma", key)
        key = re.sub(r"\.gamma_2$", ".ls2.gamma", key)
        out[key] = value
    return out


def config_from_timm(name: str, state: dict[str, torch.Tensor], model_args: dict[str, Any], where: str,
                     num_classes: dict[str, int] | None = None) -> ViTConfig:
    """Our config for a timm model name and its (validated, see schemas.parse_model_args) model_args.

    Like timm's create_model(name, **model_args): the name pins every size, model_args override.
    The weights decide only the classes when nothing declares them; every other size is checked
    against them when the model is built. Heads are the one size shapes do not show (except with
    talking heads), so model_args may change them only together with the width: a model with the
    name's width and other heads is a tampered or mislabelled config, not the named model.
    """
    parsed = parse_name(name)
    d = model_args.get("embed_dim", parsed.embed_dim)
    heads = model_args.get("num_heads", parsed.num_heads)
    if heads != parsed.num_heads and d == parsed.embed_dim:
        raise CheckpointError(f"{where}: model_args num_heads={heads} contradicts the model name {name!r}, whose "
                              f"width {d} has {parsed.num_heads} heads; heads cannot be read from the weights, "
                              "so fix num_heads or the name")
    declared = sorted(set((num_classes or {}).values()))
    if len(declared) > 1:
        listed = ", ".join(f"{k}={v}" for k, v in (num_classes or {}).items())
        raise CheckpointError(f"{where}: the number of classes is declared differently: {listed}")
    head = state.get("head.weight")
    classes = declared[0] if declared else (int(head.shape[0]) if head is not None and head.dim() == 2 else 0)
    cait = parsed.family == "cait"
    img = model_args.get("img_size", (parsed.image_size, parsed.image_size))
    try:
        return ViTConfig(
            image_size=img,
            patch_size=model_args.get("patch_size", parsed.patch_size),
            in_chans=model_args.get("in_chans", 3),
            num_classes=classes,
            embed_dim=d,
            depth=model_args.get("depth", parsed.depth),
            num_heads=heads,
            mlp_ratio=model_args.get("mlp_ratio", 4.0),
            qkv_bias=model_args.get("qkv_bias", True),
            prefix_tokens="cls+dist" if parsed.distilled else "cls",
            pos_embed_prefix=not cait,
            # the value is only an init; the weights replace it
            layer_scale_init=1.0 if cait or "init_values" in model_args else None,
            talking_heads=cait,
            class_attn_depth=model_args.get("depth_token_only", 2) if cait else 0,
            class_attn_mlp_ratio=model_args.get("mlp_ratio_token_only", 4.0),
            layer_norm_eps=1e-6,
        )
    except ConfigError as error:
        raise CheckpointError(f"{where}: the name {name!r} and model_args give an invalid model: {error}") from None


def labels_from_timm(label_names: dict[int, str], num_classes: int) -> list[str]:
    if num_classes and sorted(label_names) == list(range(num_classes)):
        return [label_names[i] for i in range(num_classes)]
    return imagenet_labels(num_classes) or generic_labels(num_classes)


def preprocess_from_timm(pretrained_cfg: dict[str, Any], config: ViTConfig, family: str, where: str) -> Preprocess:
    """timm's eval transform; without a pretrained_cfg, timm's defaults for the family at the model's size."""
    defaults: dict[str, Any] = {}
    if not pretrained_cfg:
        # ViT checkpoints in timm mostly use mean = std = 0.5; DeiT and CaiT use ImageNet statistics
        half = family == "vit"
        defaults = {"input_size": [3, *config.image_size], "crop_pct": 0.9, "interpolation": "bicubic",
                    "mean": [0.5] * 3 if half else list(IMAGENET_MEAN),
                    "std": [0.5] * 3 if half else list(IMAGENET_STD)}
    return timm_preprocess(pretrained_cfg, where, "pretrained_cfg.", defaults)


# ----------------------------------------------------------------------------------- the format entries
def detect(source: Source) -> bool:
    """A timm hub folder (config.json with `architecture`), or a weights file beside one."""
    config = source.config_json
    return config is not None and "architecture" in config


def read_config(source: Source) -> Declared[TimmConfig]:
    path = source.folder / "config.json"
    spec = parse_timm_config(source.config_json, str(path), source.arch)
    parse_name(spec.architecture, "--arch: " if source.arch else f"{path}: architecture: ")
    return Declared(spec, source.file or find_weights(source.folder),
                    f"{path} (timm model {spec.architecture!r} and its model_args)")


def detect_bare(source: Source) -> bool:
    """A weights file with no config beside it: a bare timm state dict, named by the user."""
    return source.file is not None and source.config_json is None


def read_bare(source: Source) -> Declared[TimmConfig]:
    assert source.file is not None
    if source.arch is None:
        check_weights_file(source.file)  # a file that is not weights at all says so first
        raise CheckpointError(
            f"{source.file}: these weights do not say which model they are (no config.json beside them). Give the "
            "timm model name (--arch vit_small_patch16_224 on the command line, arch=... in Python), or put a "
            'config.json beside the file: {"architecture": "vit_small_patch16_224"}')
    parse_name(source.arch, "--arch: ")
    spec = TimmConfig(architecture=source.arch, model_args={}, num_classes={}, num_features=None, label_names={},
                      pretrained_cfg={})
    return Declared(spec, source.file, f"the model name {source.arch!r}")


def convert(declared: Declared[TimmConfig], raw: dict[str, torch.Tensor]) -> Checkpoint:
    spec, where = declared.spec, declared.described_by
    state = timm_to_native(raw)
    config = config_from_timm(spec.architecture, state, spec.model_args, where, spec.num_classes)
    if spec.num_features is not None and spec.num_features != config.embed_dim:
        raise CheckpointError(f"{where}: num_features {spec.num_features} contradicts the width {config.embed_dim} "
                              "of the name and model_args")
    labels = labels_from_timm(spec.label_names, config.num_classes)
    preprocessing = preprocess_from_timm(spec.pretrained_cfg, config, parse_name(spec.architecture).family, where)
    details = {"architecture": spec.architecture.removeprefix("timm/"), "weights": str(declared.weights)}
    return Checkpoint(config, state, labels, preprocessing, details, TIMM_NAMES, where)
