"""Hugging Face checkpoints (`save_pretrained` folders) <-> the native model: ViT, DeiT, ViTMAE (the
encoder), DINOv2 (with registers), CLIP and SigLIP image towers (alone or in the two-tower model),
BEiT. Parameter names are mapped in hf_names.py.

DeiTForImageClassificationWithTeacher has a class and a distillation head (averaged, like ours);
DeiTForImageClassification keeps the distillation token but classifies from [CLS] only (dist_head=False).
Features-only models (ViTModel, Dinov2Model, CLIPVisionModel, ViTMAEModel, ...) give their pooled
output: the normed [CLS] (ViT's pooler layer aside), CLIP's projected embedding, SigLIP's pooling head.

Dinov2(WithRegisters)ForImageClassification: a linear head over [CLS] beside the mean of the patches.
I-JEPA (IJepaModel, IJepaForImageClassification) has no [CLS]: its features are the mean of the normed patches,
as are those of SigLIP's and AIMv2's towers without their pooling head (use_head=False: no pooled output in
transformers); `details["features"]` says so. AIMv2's native-resolution towers (is_native) add a fixed sine-cosine
table for each input's grid, the column's half first (position scheme sincos_2d_xy).

Reads config.json, preprocessor_config.json and the weights with safetensors/torch only; never
imports transformers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..models import ConfigError, ViTConfig
from ..models.config import mlp_ratio_for
from .errors import CheckpointError
from .files import read_json
from .hf_names import hf_to_native, native_to_hf, patch_linear_to_conv
from .labels import generic_labels
from .preprocess import IMAGENET_MEAN, IMAGENET_STD, Preprocess
from .schemas import HFConfig, hf_preprocess, parse_hf_config
from .source import Checkpoint, Declared, Source
from .weights import find_weights

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


def processor_defaults(model_type: str, size: tuple[int, int], patch: int = 16) -> dict[str, Any]:
    """transformers' image-processor defaults for a folder without preprocessor_config.json, scaled
    from their 224 to the model's own input size: ViT, ViTMAE and SigLIP resize; DeiT and BEiT resize
    to 256/224 of it, then crop; DINOv2 and CLIP resize the shortest edge (DINOv2: to 256/224), then crop."""
    h, w = size
    half = dict(image_mean=[0.5] * 3, image_std=[0.5] * 3)
    max_patches = (h // patch) * (w // patch)
    if model_type in ("vit", "vit_mae", "ijepa"):  # I-JEPA's processor is ViT's
        return dict(size={"height": h, "width": w}, resample=2, **half)
    if model_type == "siglip_vision_model":
        return dict(size={"height": h, "width": w}, resample=3, **half)
    if model_type == "siglip2_vision_model":  # Siglip2ImageProcessor: NaFlex, up to the table's patches (bilinear)
        return dict(size={"height": h, "width": w}, resample=2, max_num_patches=max_patches, patch_size=patch,
                    **half)
    if model_type == "dinov3_vit":  # DINOv3ViTImageProcessor: resize (bilinear), ImageNet statistics
        return dict(size={"height": h, "width": w}, resample=2, image_mean=list(IMAGENET_MEAN),
                    image_std=list(IMAGENET_STD))
    crop = dict(do_center_crop=True, crop_size={"height": h, "width": w}, resample=3)
    if model_type in ("dinov2", "dinov2_with_registers"):
        return dict(size={"shortest_edge": h * 256 // 224}, image_mean=list(IMAGENET_MEAN),
                    image_std=list(IMAGENET_STD), **crop)
    if model_type in ("clip_vision_model", "aimv2_vision_model"):  # AIMv2's hub folders name CLIPImageProcessor
        return dict(size={"shortest_edge": h}, image_mean=CLIP_MEAN, image_std=CLIP_STD, **crop)
    return dict(size={"height": h * 256 // 224, "width": w * 256 // 224}, **half, **crop)


def hf_architecture(config: ViTConfig) -> str:
    """The transformers class whose tokens and heads this model's are (`hf_files` says what else differs)."""
    if config.pool == "cls+mean":  # a linear head over [CLS] beside the mean of the patches
        return "Dinov2WithRegistersForImageClassification" if config.reg_tokens else "Dinov2ForImageClassification"
    if config.pre_norm:
        return "CLIPVisionModelWithProjection" if config.proj_dim else "CLIPVisionModel"
    if config.pool == "map":
        return "SiglipVisionModel"
    if config.reg_tokens:
        return "Dinov2WithRegistersModel"
    if config.layer_scale_init is not None:
        return "Dinov2Model"
    if not config.distilled:
        return "ViTForImageClassification"
    return "DeiTForImageClassificationWithTeacher" if config.dist_head else "DeiTForImageClassification"


def hf_family(architecture: str) -> str:
    """'vit' (ViT and DeiT), 'dinov2', 'clip' or 'siglip': whose parameter names hf_names writes."""
    return next((f for f in ("dinov2", "clip", "siglip") if architecture.lower().startswith(f)), "vit")


# names of our dimensions in an HF config.json, for messages
HF_NAMES = {"width": "hidden_size", "depth": "num_hidden_layers", "mlp_width": "intermediate_size",
            "patch_size": "patch_size", "in_chans": "num_channels",
            "pos_rows": "position-table rows ((image_size / patch_size)^2 plus [CLS] and distillation tokens)",
            "num_classes": "classes (architectures and id2label)"}
CLASSIFIERS = ("ViTForImageClassification", "DeiTForImageClassification", "DeiTForImageClassificationWithTeacher",
               "BeitForImageClassification")
DINOV2_CLASSIFIERS = ("Dinov2ForImageClassification", "Dinov2WithRegistersForImageClassification")
IJEPA_CLASSIFIER = "IJepaForImageClassification"  # a linear head on the mean of the normed patch tokens
WITH_PROJECTION = ("CLIPVisionModelWithProjection", "CLIPModel", "Aimv2Model")
# HF's position-table resampling for other input sizes: bicubic, antialiased only in DINOv2 with registers
ANTIALIASED = ("dinov2_with_registers", "siglip2_vision_model")
NO_CLS = ("siglip_vision_model", "aimv2_vision_model", "siglip2_vision_model", "ijepa")  # tokens: the patches alone


def config_from_hf(hf: HFConfig, state: dict[str, torch.Tensor], where: str) -> ViTConfig:
    """Our config from an HF config.json: its fields decide every size. The weights decide only what
    the config does not say (a classifier's classes, a [MASK] token; heads and CLIP's projection when
    `architectures` is absent)."""
    d, kind = hf.hidden_size, hf.model_type
    # DeiTForImageClassification: a distillation token, one classifier on [CLS]. The architecture
    # decides (so a teacher checkpoint missing its distillation head is reported, not loaded as
    # another model); without one, the weights do.
    if hf.architecture:
        one_head = hf.architecture == "DeiTForImageClassification"
        head = hf.architecture in CLASSIFIERS + DINOV2_CLASSIFIERS + (IJEPA_CLASSIFIER,)
        if head and "head.weight" not in state:
            raise CheckpointError(f"{where} declares {hf.architecture}, a classifier, but the weights have none "
                                  f"(no {'cls_' if 'WithTeacher' in hf.architecture else ''}classifier.weight)")
        projection = hf.architecture in WITH_PROJECTION
    else:
        one_head = "head.weight" in state and "head_dist.weight" not in state
        head = "head.weight" in state
        projection = "proj.weight" in state
    if projection and not hf.projection_dim:
        raise CheckpointError(f"{where}: projection_dim must be given for {hf.architecture or 'a model with a '}"
                              "projection (visual_projection)")
    classes = int(state["head.weight"].shape[0]) if head and state["head.weight"].dim() == 2 else 0
    # DINOv2's classifiers read [CLS] beside the mean of the patches: a head 2 x hidden_size wide
    cls_mean = hf.architecture in DINOV2_CLASSIFIERS or (
        not hf.architecture and kind.startswith("dinov2") and head and state["head.weight"].shape[-1] == 2 * d)
    try:
        return ViTConfig(
            image_size=hf.image_size,
            patch_size=hf.patch_size,
            in_chans=hf.num_channels,
            num_classes=classes,
            embed_dim=d,
            depth=hf.num_hidden_layers,
            num_heads=hf.num_attention_heads,
            mlp_ratio=mlp_ratio_for(d, hf.intermediate_size),
            mlp=hf.mlp,
            qkv_bias=hf.qkv_bias,
            k_bias=kind != "beit" and hf.k_bias,  # BEiT's keys have no bias, DINOv3's by default none
            pre_norm=kind == "clip_vision_model",
            prefix_tokens="cls+dist" if kind == "deit" else "none" if kind in NO_CLS else "cls",
            dist_head=not (kind == "deit" and one_head),  # DeiTModel always has both tokens
            reg_tokens=hf.register_tokens,
            pool="cls+mean" if cls_mean else hf.pool,
            fc_norm=hf.pool == "gap" and kind == "beit",  # BEiT's pooler norms the mean; SigLIP's norm comes first
            proj_dim=hf.projection_dim if projection else 0,
            pos_embed=hf.position,
            mask_token="mask_token" in state,
            pe_resample_antialias=kind in ANTIALIASED,
            layer_scale_init=hf.layer_scale,
            layer_norm_eps=hf.layer_norm_eps,
            norm=hf.norm,
            embed_norm=hf.embed_norm,
            proj_bias=hf.proj_bias,
            rope_theta=hf.rope_theta,
            pe_resample=hf.pe_resample,
        )
    except ConfigError as error:
        raise CheckpointError(f"{where}: invalid model config: {error}") from None


def labels_from_hf(hf: HFConfig, num_classes: int, where: str) -> list[str]:
    """Class names from id2label (transformers writes two placeholder labels even for a model without a head)."""
    names = hf.id2label
    if num_classes and sorted(names) != list(range(num_classes)):
        if names:
            raise CheckpointError(f"{where}: id2label has {len(names)} entries (indices {_span(names)}) "
                                  f"for a {num_classes}-class head")
        return generic_labels(num_classes)
    return [names[i] for i in range(num_classes)]


def _span(indices: dict[int, str]) -> str:
    return f"{min(indices)}..{max(indices)}" if indices else "none"


def preprocess_from_hf(folder: Path, model_type: str, size: tuple[int, int], patch: int = 16) -> Preprocess:
    path = folder / "preprocessor_config.json"
    processor = read_json(path) if path.exists() else {}
    pre = hf_preprocess(processor, processor_defaults(model_type, size, patch), str(path))
    if pre.max_patches and pre.patch_size != patch:
        raise CheckpointError(f"{path}: patch_size {pre.patch_size} differs from the model's {patch} (config.json): "
                              "NaFlex would cut the image into patches the model does not take")
    return pre


# ------------------------------------------------------------------------------------ the format entry
def detect(source: Source) -> bool:
    config = source.config_json
    return config is not None and "model_type" in config and "architecture" not in config


def read_config(source: Source) -> Declared[tuple[HFConfig, Preprocess]]:
    path = source.folder / "config.json"
    hf = parse_hf_config(source.config_json, str(path))
    preprocessing = preprocess_from_hf(source.folder, hf.model_type, hf.image_size, hf.patch_size)
    return Declared((hf, preprocessing), source.file or find_weights(source.folder), str(path))


def convert(declared: Declared[tuple[HFConfig, Preprocess]], raw: dict[str, torch.Tensor]) -> Checkpoint:
    hf, preprocessing = declared.spec
    state = hf_to_native(raw)
    weight = state.get("patch_embed.proj.weight")
    if hf.model_type == "siglip2_vision_model" and weight is not None:  # a Linear over each patch's pixels
        conv = patch_linear_to_conv(weight, hf.patch_size)
        state["patch_embed.proj.weight"] = weight if conv is None else conv  # None: the shape check names it
    config = config_from_hf(hf, state, declared.described_by)
    labels = labels_from_hf(hf, config.num_classes, declared.described_by)
    details = {"architecture": hf.architecture or hf.model_type, "weights": str(declared.weights)}
    if config.pool == "gap" and not (config.fc_norm or config.num_classes):  # I-JEPA; SigLIP, AIMv2 without a head
        details["features"] = "the mean of the normed patch tokens (transformers' last_hidden_state.mean(1))"
    names = HF_NAMES if hf.model_type not in ("dinov2", "dinov2_with_registers") else \
        {**HF_NAMES, "mlp_width": "MLP width (hidden_size x mlp_ratio)"}
    return Checkpoint(config, state, labels, preprocessing, details, names,
                      str(Path(declared.described_by).parent / "preprocessor_config.json"))


def hf_files(config: ViTConfig, labels: list[str], preprocessing: Preprocess
             ) -> tuple[dict[str, Any], dict[str, Any]]:
    """(config.json, preprocessor_config.json) for the transformers class `hf_architecture` names (ViT,
    DeiT with one or two heads, DINOv2 with or without registers, CLIP's and SigLIP's image towers);
    CheckpointError naming everything that class cannot express."""
    architecture = hf_architecture(config)
    family = hf_family(architecture)
    reasons = _hf_cannot(config, family)
    if reasons:
        raise CheckpointError(f"this model cannot be written in the Hugging Face format as {architecture} "
                              "(vit-explorer writes ViT, DeiT, DINOv2, CLIP and SigLIP image towers): it has "
                              + "; ".join(reasons))
    hf: dict[str, Any] = {
        "architectures": [architecture],
        "hidden_size": config.embed_dim,
        "num_hidden_layers": config.depth,
        "num_attention_heads": config.num_heads,
        "hidden_act": {"gelu_tanh": "gelu_pytorch_tanh"}.get(config.mlp, config.mlp),
        "layer_norm_eps": config.layer_norm_eps,
        "image_size": config.image_size[0],
        "patch_size": config.patch_size,
        "num_channels": config.in_chans,
    }
    if family == "dinov2":
        hf.update(model_type="dinov2_with_registers" if config.reg_tokens else "dinov2",
                  mlp_ratio=_dinov2_mlp_ratio(config), use_swiglu_ffn=config.mlp == "swiglu", hidden_act="gelu",
                  layerscale_value=config.layer_scale_init or 1.0, qkv_bias=config.qkv_bias, drop_path_rate=0.0)
        hf.update(num_register_tokens=config.reg_tokens) if config.reg_tokens else hf.update(use_mask_token=True)
        if config.num_classes:  # the DINOv2 classifiers
            hf.update(id2label={str(i): name for i, name in enumerate(labels)},
                      label2id={name: i for i, name in enumerate(labels)})
        return hf, hf_processor_config(preprocessing, "BitImageProcessor")
    if family in ("clip", "siglip"):
        hf.update(model_type=f"{family}_vision_model", intermediate_size=config.mlp_hidden)
        hf.update(projection_dim=config.proj_dim) if family == "clip" else hf.update(vision_use_head=True)
        return hf, hf_processor_config(preprocessing, {"clip": "CLIPImageProcessor", "siglip": "SiglipImageProcessor"}
                                       [family])
    hf.update(model_type="deit" if config.distilled else "vit", intermediate_size=config.mlp_hidden,
              qkv_bias=config.qkv_bias, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
              encoder_stride=config.patch_size, id2label={str(i): name for i, name in enumerate(labels)},
              label2id={name: i for i, name in enumerate(labels)})
    return hf, hf_processor_config(preprocessing, "DeiTImageProcessor" if config.distilled else "ViTImageProcessor")


# what each written family has, as (ours, its value there); everything else must be absent
_HF_HAS = {
    "vit": dict(prefix_tokens=("cls", "cls+dist"), pool=("cls",), mlp=("gelu",), pre_norm=(False,)),
    "dinov2": dict(prefix_tokens=("cls",), pool=("cls", "cls+mean"), mlp=("gelu", "swiglu"), pre_norm=(False,)),
    "clip": dict(prefix_tokens=("cls",), pool=("cls",), mlp=("gelu", "quick_gelu"), pre_norm=(True,)),
    "siglip": dict(prefix_tokens=("none",), pool=("map",), mlp=("gelu", "gelu_tanh", "quick_gelu"),
                   pre_norm=(False,)),
}


def _hf_cannot(config: ViTConfig, family: str) -> list[str]:
    reasons = [f"{name}={getattr(config, name)!r}" for name, allowed in _HF_HAS[family].items()
               if getattr(config, name) not in allowed]
    if config.stem != "patchify":
        reasons.append("a convolutional stem")
    if config.pos_embed != "learned" or not (config.pos_embed_prefix or family in ("dinov2", "siglip")):
        reasons.append(f"position embedding {config.pos_embed!r} (these have learned 1D with prefix rows only)")
    if config.class_attn_depth or config.talking_heads:
        reasons.append("CaiT class attention / talking heads")
    if config.layer_scale_init is not None and family != "dinov2":
        reasons.append("LayerScale")
    if family == "dinov2" and _dinov2_mlp_ratio(config) is None:
        reasons.append(f"an MLP width {config.mlp_hidden} that no whole mlp_ratio gives")
    for name, why in (("mlp_norm", "a norm inside the MLP"), ("fc_norm", "fc_norm"),
                      ("reg_tokens", "register tokens"), ("proj_dim", "a projection")):
        if getattr(config, name) and (name, family) not in (("reg_tokens", "dinov2"), ("proj_dim", "clip")):
            reasons.append(why)
    if not (config.k_bias and (config.qkv_bias or family in ("vit", "dinov2"))):
        reasons.append("query, key or value without a bias")
    if family == "vit" and config.embed_dim * config.mlp_ratio != config.mlp_hidden:
        reasons.append(f"mlp_ratio {config.mlp_ratio} (not a whole hidden width)")
    if config.image_size[0] != config.image_size[1]:
        reasons.append(f"a non-square image size {config.image_size} (HF assumes a square PE grid)")
    if config.distilled and not config.num_classes:
        reasons.append("a distillation token without classifier heads")
    if family != "vit" and config.num_classes and config.pool != "cls+mean":
        reasons.append(f"a classifier (HF's {family} image models have none)")
    # issue 18's options, which the written classes lack
    plain = dict(norm="layernorm", embed_norm=False, proj_bias=True, pool_heads=0, pool_mlp_ratio=0.0,
                 pool_prefix=False, rope_offset=0.0, pe_resample="bicubic")
    reasons += [f"{name}={getattr(config, name)!r}" for name, value in plain.items() if getattr(config, name) != value]
    if config.pool == "cls+mean" and not config.num_classes:
        reasons.append("[CLS] beside the mean of the patches without a classifier")
    return reasons


def _dinov2_mlp_ratio(config: ViTConfig) -> int | None:
    """The whole mlp_ratio (transformers' Dinov2Config takes an int) that gives this model's MLP width:
    width x mlp_ratio, or for SwiGLU two thirds of it rounded up to a multiple of 8; None if none does."""
    d, hidden = config.embed_dim, config.mlp_hidden
    for ratio in range(1, 65):
        width = d * ratio
        if (width if config.mlp != "swiglu" else (int(width * 2 / 3) + 7) // 8 * 8) == hidden:
            return ratio
    return None


def hf_weights(config: ViTConfig, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our state dict as `hf_architecture(config)` names it. DINOv2 always has a [MASK] token, LayerScale
    and a position row for [CLS]: a model without them gets zeros and ones (what ours uses in their place)."""
    architecture = hf_architecture(config)
    family = hf_family(architecture)
    state = dict(state)
    if family != "dinov2":  # a learned [MASK] is for masked-image modelling; these models have no slot for it
        state.pop("mask_token", None)
    if family == "vit":
        prefix = "deit." if architecture.startswith("DeiT") else "vit."
        return native_to_hf(state, "vit", prefix, teacher=architecture.endswith("WithTeacher"))
    if family == "clip":  # CLIP's class embedding is (D,), its position table an nn.Embedding's (T, D)
        state["cls_token"], state["pos_embed"] = state["cls_token"].reshape(-1), state["pos_embed"][0]
        return native_to_hf(state, "clip", "vision_model.")
    if family == "siglip":  # the pooling head packs [q | k | v] in one in_proj
        state["pos_embed"] = state["pos_embed"][0]
        for param in ("weight", "bias"):
            state[f"attn_pool.in_proj.{param}"] = torch.cat([state.pop(f"attn_pool.q.{param}"),
                                                             state.pop(f"attn_pool.kv.{param}")])
        return native_to_hf(state, "siglip", "")
    d = config.embed_dim
    state["mask_token"] = state.get("mask_token", torch.zeros(1, 1, d)).reshape(1, d)
    for i in range(config.depth):
        for gamma in ("ls1.gamma", "ls2.gamma"):
            state.setdefault(f"blocks.{i}.{gamma}", torch.ones(d))
    if not config.pos_embed_prefix:  # timm's DINOv2 with registers: no [CLS] row
        pe = state["pos_embed"]
        state["pos_embed"] = torch.cat([pe.new_zeros(1, 1, d), pe], dim=1)
    if config.mlp == "swiglu":  # HF packs the gate and value halves into weights_in; fc2 is weights_out
        for key in [k for k in state if ".mlp.fc1_g." in k]:
            half = key.replace(".fc1_g.", ".fc1_x.")
            state[key.replace(".fc1_g.", ".weights_in.")] = torch.cat([state.pop(key), state.pop(half)])
            out = key.replace(".fc1_g.", ".fc2.")
            state[out.replace(".fc2.", ".weights_out.")] = state.pop(out)
    backbone = "dinov2_with_registers." if config.reg_tokens else "dinov2."  # a classifier wraps the backbone
    return native_to_hf(state, "dinov2", backbone if config.pool == "cls+mean" else "")


def hf_processor_config(pre: Preprocess, processor_type: str) -> dict[str, Any]:
    """A preprocessor_config.json as close to `pre` as HF's processor can say it."""
    resample = {"nearest": 0, "lanczos": 1, "bilinear": 2, "bicubic": 3}[pre.interpolation]
    if pre.resize_shortest is not None:
        size: dict[str, int] = {"shortest_edge": pre.resize_shortest}
    else:
        h, w = pre.resize_to or pre.size
        size = {"height": h, "width": w}
    return {
        "image_processor_type": processor_type,
        "do_resize": True,
        "size": size,
        "resample": resample,
        "do_center_crop": pre.crop,
        "crop_size": {"height": pre.size[0], "width": pre.size[1]},
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": list(pre.mean),
        "image_std": list(pre.std),
    }
