"""Typed schemas of the config files checkpoints bring, read before anything is built or allocated:
Hugging Face config.json and preprocessor_config.json, timm config.json (model_args and
pretrained_cfg), and our vit_explorer.json.

Each reader takes a file's parsed JSON and returns a frozen dataclass (or a Preprocess), reading
every field it uses with `Fields` (strict types, finite ranges, bounded sizes; see fields.py), so
each error names the file, the field and what is allowed. Fields a reader does not use are
ignored, except timm's model_args: an unknown one there may change the architecture in a way the
weights do not show, so it is refused. In preprocessing configs a null means "the default".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..models import ConfigError, ViTConfig
from ..text import shown
from .errors import CheckpointError
from .fields import Fields, describe
from .preprocess import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    INTERPOLATIONS,
    MAX_RESIZE,
    MAX_SIDE,
    MEAN_RANGE,
    STD_RANGE,
    Preprocess,
)

MAX_CLASSES = 100_000
MAX_WIDTH, MAX_DEPTH, MAX_HEADS = 65_536, 4096, 4096
FORMAT_VERSION = 1  # of vit_explorer.json


def index_labels(f: Fields, key: str) -> dict[int, str]:
    """{"0": "cat", ...} (HF id2label, a timm label_names dict) or ["cat", ...] as index -> name."""
    value = f.data.get(key)
    if isinstance(value, list):
        return dict(enumerate(f.strings(key, max_items=MAX_CLASSES)))
    section = f.section(key)
    if len(section.data) > MAX_CLASSES:
        f.fail(key, f"at most {MAX_CLASSES:,} labels")
    names = {}
    for index in section.data:
        if not (index.isascii() and index.isdigit() and len(index) <= 6):
            section.fail(shown(index, 20), "a class index (a string of digits) mapped to a name")
        names[int(index)] = section.text(index)
    return names


# ------------------------------------------------------------------------------ Hugging Face config.json
HF_ARCHITECTURES = {"vit": ("ViTForImageClassification", "ViTModel"),
                    "deit": ("DeiTForImageClassificationWithTeacher", "DeiTForImageClassification", "DeiTModel"),
                    "vit_mae": ("ViTMAEModel", "ViTMAEForPreTraining"),
                    "dinov2": ("Dinov2Model", "Dinov2ForImageClassification"),
                    "dinov2_with_registers": ("Dinov2WithRegistersModel", "Dinov2WithRegistersForImageClassification"),
                    "clip_vision_model": ("CLIPVisionModel", "CLIPVisionModelWithProjection"),
                    "clip": ("CLIPModel",),
                    "siglip_vision_model": ("SiglipVisionModel",),
                    "siglip": ("SiglipModel",),
                    "beit": ("BeitForImageClassification", "BeitModel"),
                    # issue 18
                    "dinov3_vit": ("DINOv3ViTModel",),
                    "aimv2_vision_model": ("Aimv2VisionModel",),
                    "aimv2": ("Aimv2Model",),
                    "siglip2_vision_model": ("Siglip2VisionModel",),
                    "siglip2": ("Siglip2Model",),
                    "ijepa": ("IJepaModel", "IJepaForImageClassification")}
# two-tower models: their image tower
TOWERS = {"clip": "clip_vision_model", "siglip": "siglip_vision_model", "siglip2": "siglip2_vision_model",
          "aimv2": "aimv2_vision_model"}
# transformers' activation names -> ours (ViTConfig.mlp), per tower type; "gelu" is the exact one
HF_ACTIVATIONS = {"gelu": "gelu", "quick_gelu": "quick_gelu", "gelu_pytorch_tanh": "gelu_tanh"}
HF_DEFAULT_ACT = {"clip_vision_model": "quick_gelu", "siglip_vision_model": "gelu_pytorch_tanh",
                  "siglip2_vision_model": "gelu_pytorch_tanh"}
HF_DEFAULT_EPS = {"dinov2": 1e-6, "dinov2_with_registers": 1e-6, "clip_vision_model": 1e-5,
                  "siglip_vision_model": 1e-6, "dinov3_vit": 1e-5, "aimv2_vision_model": 1e-5,
                  "siglip2_vision_model": 1e-6}  # the others: 1e-12
HF_SILU = ("dinov3_vit", "aimv2_vision_model")  # types whose gated MLP (SwiGLU) takes "silu"


@dataclass(frozen=True)
class HFConfig:
    model_type: str  # the image tower's: a CLIPModel's is "clip_vision_model"
    architecture: str  # the first of `architectures`; "" when none is named (the weights decide the heads)
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int  # the MLP's hidden width (SwiGLU: of each branch)
    image_size: tuple[int, int]
    patch_size: int
    num_channels: int
    qkv_bias: bool
    layer_norm_eps: float
    id2label: dict[int, str]
    mlp: str = "gelu"  # ViTConfig.mlp
    register_tokens: int = 0  # DINOv2 with registers
    layer_scale: float | None = None  # DINOv2's layerscale_value, BEiT's layer_scale_init_value
    projection_dim: int = 0  # CLIP's joint space (used when the weights have the projection)
    pool: str = "cls"  # ViTConfig.pool: BEiT's mean pooling, SigLIP's attention-pool head
    position: str = "learned"  # ViTConfig.pos_embed: BEiT's relative position bias, or none
    # DINOv3, AIMv2 (issue 18)
    k_bias: bool = True  # with qkv_bias: the keys have a bias too (DINOv3's key_bias)
    proj_bias: bool = True  # attention's output layer and the MLP have biases (AIMv2: none)
    norm: str = "layernorm"  # ViTConfig.norm
    embed_norm: bool = False  # AIMv2's norm of the patch embeddings
    rope_theta: float = 100.0  # DINOv3's RoPE base period
    pe_resample: str = "bicubic"  # ViTConfig.pe_resample (SigLIP 2: bilinear)


def parse_hf_config(data: Any, where: str) -> HFConfig:
    f = Fields(data, where)
    model_type = f.text("model_type")
    if model_type not in HF_ARCHITECTURES:
        raise CheckpointError(f"{where}: model_type {model_type!r} is not supported; vit-explorer reads "
                              f"Hugging Face {', '.join(HF_ARCHITECTURES)} checkpoints")
    architectures = f.strings("architectures", [], max_items=8)
    architecture = architectures[0] if architectures else ""
    if architecture and architecture not in HF_ARCHITECTURES[model_type]:
        f.fail("architectures", f"one of {', '.join(HF_ARCHITECTURES[model_type])} for model_type {model_type!r}",
               architectures)
    kind = TOWERS.get(model_type, model_type)
    tower = f.section("vision_config", required=True) if model_type in TOWERS else f
    act = tower.text("hidden_act", HF_DEFAULT_ACT.get(kind, "gelu"),
                     choices=tuple(HF_ACTIVATIONS) + (("silu",) if kind in HF_SILU else ()))
    width = tower.integer("hidden_size", high=MAX_WIDTH)
    family = _hf_family_fields(tower, kind, width)
    if model_type == "aimv2" and family["pool"] == "gap":  # transformers' visual_projection would read None
        tower.fail("use_head", "true in an Aimv2Model (its projection reads the pooled output of the head; load the "
                   "image tower, Aimv2VisionModel, for the patch features)", False)
    return HFConfig(
        model_type=kind,
        architecture=architecture,
        hidden_size=width,
        num_hidden_layers=tower.integer("num_hidden_layers", high=MAX_DEPTH),
        num_attention_heads=tower.integer("num_attention_heads", high=MAX_HEADS),
        image_size=family.pop("image_size") if "image_size" in family else  # SigLIP 2 gives num_patches
        tower.size2("image_size", (224, 224), high=16 * MAX_SIDE),
        patch_size=tower.integer("patch_size", 16, high=MAX_SIDE),
        num_channels=tower.integer("num_channels", 3, high=64),
        qkv_bias=family.pop("qkv_bias") if "qkv_bias" in family else  # DINOv3's and AIMv2's are their own
        tower.flag("qkv_bias", True) if kind in ("vit", "deit", "vit_mae", "dinov2", "dinov2_with_registers",
                                                "ijepa") else True,
        layer_norm_eps=tower.number("rms_norm_eps" if kind == "aimv2_vision_model" else "layer_norm_eps",
                                    HF_DEFAULT_EPS.get(kind, 1e-12), low=0.0, high=1.0, low_open=True),
        id2label=index_labels(f, "id2label"),
        projection_dim=f.integer("projection_dim", 0, low=0, high=MAX_WIDTH) if model_type in ("clip", "aimv2") else
        tower.integer("projection_dim", 0, low=0, high=MAX_WIDTH),
        **{**family, "mlp": family.get("mlp") or HF_ACTIVATIONS[act]},
    )


def _hf_family_fields(f: Fields, kind: str, width: int) -> dict[str, Any]:
    """The fields that only some model types have, as HFConfig's."""
    if kind in ("dinov2", "dinov2_with_registers"):
        hidden = int(width * f.number("mlp_ratio", 4.0, low=0.0, high=64.0, low_open=True))
        swiglu = f.flag("use_swiglu_ffn", False)
        if swiglu:  # transformers' Dinov2SwiGLUFFN: two thirds of the width, rounded up to a multiple of 8
            hidden = (int(hidden * 2 / 3) + 7) // 8 * 8
        return dict(intermediate_size=hidden, mlp="swiglu" if swiglu else "gelu",
                    layer_scale=f.number("layerscale_value", 1.0, low=0.0, high=1e3, low_open=True),
                    register_tokens=f.integer("num_register_tokens", 4, low=0, high=256)
                    if kind == "dinov2_with_registers" else 0)
    fields: dict[str, Any] = dict(intermediate_size=f.integer("intermediate_size", high=64 * MAX_WIDTH))
    if kind in HF_SILU:
        fields.update(_hf_recent_fields(f, kind))
    if kind in ("siglip_vision_model", "siglip2_vision_model"):
        fields["pool"] = "map" if f.flag("vision_use_head", True) else "gap"
    if kind == "siglip2_vision_model":  # a square table of num_patches rows, resampled to each image's grid
        count = f.integer("num_patches", 256, high=65536)
        side = math.isqrt(count)
        if side * side != count:
            f.fail("num_patches", "a square number (the position table is a square grid)", count)
        patch = f.integer("patch_size", 16, high=MAX_SIDE)
        fields.update(image_size=(side * patch, side * patch), pe_resample="bilinear")
    if kind == "ijepa":  # no [CLS]: the classifier (and so the features) read the mean of the normed patches
        fields["pool"] = "gap"
    if kind == "beit":
        if f.flag("use_shared_relative_position_bias", False):
            f.fail("use_shared_relative_position_bias", "false (one relative position bias per block; a table shared "
                   "by all blocks is not supported)", True)
        absolute = f.flag("use_absolute_position_embeddings", False)
        relative = f.flag("use_relative_position_bias", False)
        if absolute and relative:
            f.fail("use_relative_position_bias", "false when use_absolute_position_embeddings is true (vit-explorer "
                   "has an absolute table or a relative bias, not both)", True)
        scale = f.number("layer_scale_init_value", 0.1, low=0.0, high=1e3)
        fields.update(position="rel_bias" if relative else "learned" if absolute else "none",
                      layer_scale=scale if scale > 0 else None,
                      pool="gap" if f.flag("use_mean_pooling", True) else "cls")
    return fields


def _hf_recent_fields(f: Fields, kind: str) -> dict[str, Any]:
    """DINOv3's and AIMv2's fields: their biases, norms, MLP, pooling and position scheme, as HFConfig's."""
    gated = kind == "aimv2_vision_model" or f.flag("use_gated_mlp", False)
    act = f.text("hidden_act", "silu" if kind == "aimv2_vision_model" else "gelu")
    if gated != (act == "silu"):
        f.fail("hidden_act", "'silu' with the gated MLP (SwiGLU), a GELU without it", act)
    if kind == "aimv2_vision_model":
        bias = f.flag("qkv_bias", False)  # q, k, v and the attention output layer
        if f.flag("mlp_bias", False) != bias:
            f.fail("mlp_bias", f"{bias} like qkv_bias (vit-explorer has one switch for the dense layers' biases)",
                   not bias)
        # is_native: no learned table, a fixed sine-cosine one for each input's grid, the column's half first;
        # without the head (use_head=False) there is no pooled output: the features are the mean of the normed patches
        return dict(mlp="swiglu", qkv_bias=bias, proj_bias=bias, norm="rmsnorm", embed_norm=True,
                    pool="query" if f.flag("use_head", True) else "gap",
                    position="sincos_2d_xy" if f.flag("is_native", False) else "learned")
    q, k, v = (f.flag(name, default) for name, default in (("query_bias", True), ("key_bias", False),
                                                           ("value_bias", True)))
    if q != v or (k and not q):
        f.fail("key_bias", "a bias on the queries and values with or without one on the keys, or no bias at all "
               f"(query_bias={q}, key_bias={k}, value_bias={v} is not supported)", k)
    proj = f.flag("proj_bias", True)
    if f.flag("mlp_bias", True) != proj:
        f.fail("mlp_bias", f"{proj} like proj_bias (vit-explorer has one switch for the dense layers' biases)",
               not proj)
    return dict(mlp="swiglu" if gated else "", qkv_bias=q, k_bias=k or not q, proj_bias=proj, position="rope_dinov3",
                layer_scale=f.number("layerscale_value", 1.0, low=0.0, high=1e3, low_open=True),
                register_tokens=f.integer("num_register_tokens", 0, low=0, high=256),
                rope_theta=f.number("rope_theta", 100.0, low=1.0, high=1e9))


# --------------------------------------------------------------------- Hugging Face preprocessor_config.json
PIL_RESAMPLE = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic"}  # the PIL codes HF configs use


def hf_preprocess(processor: Any, defaults: dict[str, Any], where: str) -> Preprocess:
    """transformers' ViT/DeiT image processor from `preprocessor_config.json` (`defaults` fill gaps).

    `AutoImageProcessor` in transformers 5 gives the torchvision processors, which resize uint8
    tensors (backend 'tensor'; the PIL variants are opt-in and not recorded in the config); their
    centre crops use floor offsets.
    """
    given = Fields(processor, where).data
    f = Fields({**defaults, **{k: v for k, v in given.items() if v is not None}}, where)
    resample = f.integer("resample", low=0, high=5)
    if resample not in PIL_RESAMPLE:
        f.fail("resample", ", ".join(f"{code} ({name})" for code, name in PIL_RESAMPLE.items()), resample)
    if not f.flag("do_rescale", True):
        f.fail("do_rescale", "true (pixels scaled to 0..1; vit-explorer does not feed 0..255)", False)
    factor = f.number("rescale_factor", 1 / 255, low=0.0, low_open=True)
    if abs(factor - 1 / 255) > 1e-12:
        f.fail("rescale_factor", "1/255", factor)
    mean, std = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
    if f.flag("do_normalize", True):
        mean = f.numbers("image_mean", (0.5,) * 3, 3, low=MEAN_RANGE[0], high=MEAN_RANGE[1])
        std = f.numbers("image_std", (0.5,) * 3, 3, low=STD_RANGE[0], high=STD_RANGE[1])
    box, shortest = _hf_size(f, "size") if f.flag("do_resize", True) else (None, None)
    common: dict[str, Any] = dict(interpolation=PIL_RESAMPLE[resample], backend="tensor", mean=mean, std=std)
    if f.flag("do_center_crop", False):
        crop, _ = _hf_size(f, "crop_size", fixed=True)
        assert crop is not None
        return _preprocess(where, crop, resize_shortest=shortest, resize_to=box, crop=True, crop_offset="floor",
                           **common)
    if box is None:
        raise CheckpointError(f"{where}: do_resize, size and do_center_crop give no fixed output size (a "
                              "shortest_edge resize needs a centre crop, no resize needs a crop); not supported")
    if "max_num_patches" in f.data:  # SigLIP 2's NaFlex: each image keeps its aspect ratio
        common.update(max_patches=f.integer("max_num_patches", high=65536),
                      patch_size=f.integer("patch_size", 16, high=MAX_SIDE))
    return _preprocess(where, box, **common)


def _hf_size(f: Fields, key: str, fixed: bool = False) -> tuple[tuple[int, int] | None, int | None]:
    """An HF size spec -> ((H, W), None) or, unless `fixed`, (None, shortest_edge)."""
    value = f.data.get(key)
    high = MAX_SIDE if fixed else MAX_RESIZE
    if type(value) is int:
        side = f.integer(key, high=high)
        return (side, side), None
    allowed = "an integer or {height, width}" + ("" if fixed else " or {shortest_edge}")
    if isinstance(value, dict) and set(value) == {"height", "width"}:
        section = f.section(key)
        return (section.integer("height", high=high), section.integer("width", high=high)), None
    if isinstance(value, dict) and set(value) == {"shortest_edge"} and not fixed:
        return None, f.section(key).integer("shortest_edge", high=high)
    f.fail(key, allowed, value)


def _preprocess(where: str, size: tuple[int, int], **kwargs: Any) -> Preprocess:
    try:
        return Preprocess(size, **kwargs)
    except ValueError as error:
        raise CheckpointError(f"{where}: {error}") from None


# ------------------------------------------------------------------------------ timm pretrained_cfg
def timm_preprocess(pretrained_cfg: Any, where: str = "timm pretrained_cfg", prefix: str = "",
                    defaults: dict[str, Any] | None = None) -> Preprocess:
    """timm's eval transform (`transforms_imagenet_eval`) from a `pretrained_cfg`.

    crop_mode 'center': scale to floor(size / crop_pct) (shortest edge for square inputs, covering
    the box for rectangular ones), centre crop; 'squash': resize exactly to that box, centre crop.
    """
    given = Fields(pretrained_cfg, where, prefix).data
    f = Fields({**(defaults or {}), **{k: v for k, v in given.items() if v is not None}}, where, prefix)
    size = f.data.get("input_size", [3, 224, 224])
    if not (isinstance(size, (list, tuple)) and len(size) == 3):
        f.fail("input_size", f"[channels, height, width] with sides from 1 to {MAX_SIDE}", size)
    sizes = Fields(dict(zip(("channels", "height", "width"), size, strict=True)), where, f"{f.name('input_size')}.")
    sizes.integer("channels", high=64)
    h, w = sizes.integer("height", high=MAX_SIDE), sizes.integer("width", high=MAX_SIDE)
    crop_pct = f.number("crop_pct", 0.875, low=0.0, high=1.0, low_open=True)
    box = (int(h // crop_pct), int(w // crop_pct))  # timm: math.floor(size / crop_pct)
    if max(box) > MAX_RESIZE:
        f.fail("crop_pct", f"large enough that input_size / crop_pct stays within {MAX_RESIZE} pixels", crop_pct)
    crop_mode = f.text("crop_mode", "center", choices=("center", "squash"))
    common = dict(crop=True, interpolation=f.text("interpolation", "bicubic", choices=tuple(INTERPOLATIONS)),
                  mean=f.numbers("mean", IMAGENET_MEAN, 3, low=MEAN_RANGE[0], high=MEAN_RANGE[1]),
                  std=f.numbers("std", IMAGENET_STD, 3, low=STD_RANGE[0], high=STD_RANGE[1]))
    if crop_mode == "squash":
        return _preprocess(where, (h, w), resize_to=box, **common)
    if h == w:
        return _preprocess(where, (h, w), resize_shortest=box[0], **common)
    return _preprocess(where, (h, w), resize_to=box, keep_ratio=True, **common)


# ------------------------------------------------------------------------------------ timm config.json
# timm's keyword arguments (model_args) that vit-explorer reads, by kind; timm_format decides which of
# them each model class takes. Any other argument is refused: it may change the architecture in a way
# the weights do not show.
TIMM_SIZE_ARGS = {"patch_size": (1, MAX_SIDE), "in_chans": (1, 64), "num_classes": (0, MAX_CLASSES),
                  "embed_dim": (1, MAX_WIDTH), "depth": (1, MAX_DEPTH), "num_heads": (1, MAX_HEADS),
                  "depth_token_only": (1, MAX_DEPTH), "reg_tokens": (0, 256), "num_reg_tokens": (0, 256)}
TIMM_RATIO_ARGS = ("mlp_ratio", "mlp_ratio_token_only")
TIMM_FLAG_ARGS = ("qkv_bias", "class_token", "no_embed_class", "pre_norm", "use_abs_pos_emb", "use_rel_pos_bias",
                  "use_rot_pos_emb", "swiglu_mlp", "scale_mlp", "qkv_fused", "use_pre_transformer_norm")
TIMM_AUTO_FLAG_ARGS = ("fc_norm", "use_fc_norm")  # null: timm decides from global_pool
TIMM_CHOICE_ARGS = {"global_pool": ("token", "avg", "map"), "act_layer": ("gelu", "gelu_tanh", "quick_gelu")}
TIMM_PAIR_ARGS = ("img_size", "ref_feat_shape", "pos_embed_grid_size")
# model_args that must keep the value the model's name builds with (timm's default, unless the name sets
# another, e.g. DINOv3's rope_type 'dinov3'): other values build architectures vit-explorer does not have
TIMM_FIXED_ARGS: dict[str, Any] = {"qk_norm": False, "dynamic_img_pad": False, "final_norm": True, "proj_bias": True,
                                   "pos_embed": "learn", "use_shared_rel_pos_bias": False, "scale_attn_inner": False,
                                   "use_post_norm": False, "attn_type": "eva", "rope_type": "cat",
                                   "rope_grid_indexing": "ij", "rope_rotate_half": False,
                                   "attn_only_layer_scale": False, "pool_include_prefix": False,
                                   "scale_attn_norm": False, "scale_mlp_norm": False, "swiglu_align_to": 0}
TIMM_IGNORED_ARGS = ("dynamic_img_size", "strict_img_size", "fix_init", "weight_init", "drop_rate", "pos_drop_rate",
                     "patch_drop_rate", "proj_drop_rate", "attn_drop_rate", "drop_path_rate",
                     "head_init_scale")  # no effect at eval
TIMM_ARGS = (*TIMM_SIZE_ARGS, *TIMM_RATIO_ARGS, *TIMM_FLAG_ARGS, *TIMM_AUTO_FLAG_ARGS, *TIMM_CHOICE_ARGS,
             *TIMM_PAIR_ARGS, "init_values", "rope_temperature")


@dataclass(frozen=True)
class TimmConfig:
    architecture: str  # the timm model name, e.g. "vit_small_patch16_384.augreg_in21k"
    model_args: dict[str, Any]  # validated, only architecture arguments (TIMM_ARGS) remain
    num_classes: dict[str, int]  # every field that declares the number of classes -> its value
    num_features: int | None
    label_names: dict[int, str]
    pretrained_cfg: dict[str, Any]  # read by timm_preprocess once the model's size is known
    global_pool: str | None = None  # the top-level field, checked against the architecture's pooling


def parse_timm_config(data: Any, where: str, arch: str | None) -> TimmConfig:
    """A timm hub config.json; `arch` (a model name given by the user) replaces its `architecture`.

    A legacy config is one flat object: its pretrained_cfg fields sit beside `architecture`."""
    f = Fields(data, where)
    legacy = "pretrained_cfg" not in f.data
    pretrained = Fields(f.data, where) if legacy else f.section("pretrained_cfg")
    name = arch if arch is not None else f.text("architecture", None)
    if not name:
        raise CheckpointError(f"{where}: no 'architecture' (timm model name); give arch=... (--arch)")
    global_pool = f.text("global_pool", None, choices=TIMM_CHOICE_ARGS["global_pool"])
    num_classes = {}
    for fields in (f, f.section("model_args"), pretrained):
        if fields.has("num_classes") and not (legacy and fields is pretrained):
            num_classes[fields.name("num_classes")] = fields.integer("num_classes", low=0, high=MAX_CLASSES)
    labels = {}
    for fields in (pretrained, f):  # timm moves a top-level label_names into pretrained_cfg; the top wins
        if isinstance(fields.data.get("label_names"), (list, dict)):
            labels = index_labels(fields, "label_names")
    return TimmConfig(architecture=name, model_args=parse_model_args(f.section("model_args")),
                      num_classes=num_classes, num_features=f.integer("num_features", None, high=MAX_WIDTH),
                      label_names=labels, pretrained_cfg=pretrained.data, global_pool=global_pool)


def parse_model_args(f: Fields) -> dict[str, Any]:
    args: dict[str, Any] = {}
    for key, default in TIMM_FIXED_ARGS.items():  # the value each name builds with is checked with the name
        if f.has(key):
            value = f.data[key]
            if type(value) is not type(default):
                raise CheckpointError(f"{f.where}: {f.name(key)} = {describe(value)} is not supported; vit-explorer "
                                      f"builds timm's models with {key} as a {type(default).__name__}")
            args[key] = value
    for key, (low, high) in TIMM_SIZE_ARGS.items():
        if f.has(key):
            args[key] = f.integer(key, low=low, high=high)
    for key in TIMM_RATIO_ARGS:
        if f.has(key):
            args[key] = f.number(key, low=0.0, high=64.0, low_open=True)
    for key in TIMM_FLAG_ARGS:
        if f.has(key):
            args[key] = f.flag(key)
    for key in TIMM_AUTO_FLAG_ARGS:
        if f.data.get(key) is not None:
            args[key] = f.flag(key)
    for key, choices in TIMM_CHOICE_ARGS.items():
        if f.has(key):
            args[key] = f.text(key, choices=choices)
    for key in TIMM_PAIR_ARGS:
        if f.has(key):
            args[key] = f.size2(key, high=16 * MAX_SIDE)
    if f.data.get("init_values") is not None:
        args["init_values"] = f.number("init_values", low=0.0, high=1e3, low_open=True)
    if f.has("rope_temperature"):
        args["rope_temperature"] = f.number("rope_temperature", low=0.0, high=1e9, low_open=True)
    for key in TIMM_IGNORED_ARGS:  # checked all the same: a string for a flag means an edited file
        if key == "weight_init":
            f.text(key, "")
        elif key.endswith(("rate", "scale")):
            f.number(key, 0.0, low=0.0, high=1.0)
        else:
            f.flag(key, False)
    f.refuse_unknown([*TIMM_FIXED_ARGS, *TIMM_ARGS, *TIMM_IGNORED_ARGS])
    return args


# ------------------------------------------------------------------------------------- vit_explorer.json
@dataclass(frozen=True)
class NativeMeta:
    config: ViTConfig
    labels: list[str]  # [] = generic names
    preprocessing: Preprocess | None  # None = the plain default at the model's size
    training: dict[str, Any]  # what `train` recorded (shown, never executed or trusted for sizes)


def parse_native(data: Any, where: str) -> NativeMeta:
    f = Fields(data, where)
    if f.data.get("format") != "vit-explorer" or "config" not in f.data:
        raise CheckpointError(f"{where}: not a vit-explorer checkpoint description (no 'format'/'config')")
    version = f.integer("version", low=0)
    if version != FORMAT_VERSION:
        raise CheckpointError(f"{where}: format version {version} is not one this vit-explorer reads "
                              f"(version {FORMAT_VERSION}); a newer vit-explorer may read it")
    try:
        config = ViTConfig.from_dict(Fields(f.data["config"], where, "config.").data)
    except ConfigError as error:
        raise CheckpointError(f"{where}: invalid model config: {error}") from None
    labels = f.strings("labels", [], max_items=MAX_CLASSES)
    if labels and config.num_classes and len(labels) != config.num_classes:  # a headless model may keep its names
        raise CheckpointError(f"{where}: {len(labels)} labels for {config.num_classes} classes; "
                              "give one name per class, or none")
    preprocessing = None
    if f.data.get("preprocessing"):
        try:
            preprocessing = Preprocess.from_dict(f.section("preprocessing").data)
        except ValueError as error:
            raise CheckpointError(f"{where}: invalid preprocessing: {error}") from None
    return NativeMeta(config, labels, preprocessing, f.section("training").data)
