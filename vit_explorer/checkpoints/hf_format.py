"""Hugging Face ViT / DeiT checkpoints (`save_pretrained` folders) <-> the native model.

DeiTForImageClassificationWithTeacher has a class and a distillation head (averaged, like ours);
DeiTForImageClassification keeps the distillation token but classifies from [CLS] only (dist_head=False).

Reads config.json, preprocessor_config.json and the weights with safetensors/torch only; never
imports transformers. HF keeps q, k, v as separate Linear layers; ours (timm's) fuse them into qkv.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..models import ConfigError, ViTConfig
from .errors import CheckpointError
from .files import read_json
from .labels import generic_labels
from .preprocess import Preprocess
from .schemas import HFConfig, hf_preprocess, parse_hf_config
from .source import Checkpoint, Declared, Source
from .weights import find_weights


def processor_defaults(model_type: str, size: tuple[int, int]) -> dict[str, Any]:
    """transformers' processor defaults for a folder without preprocessor_config.json, scaled from
    their 224 to the model's own input size (ViT: resize; DeiT: resize to 256/224 of it, then crop)."""
    h, w = size
    if model_type == "vit":
        return dict(size={"height": h, "width": w}, resample=2, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    return dict(size={"height": h * 256 // 224, "width": w * 256 // 224}, resample=3, do_center_crop=True,
                crop_size={"height": h, "width": w}, image_mean=[0.5] * 3, image_std=[0.5] * 3)


_LAYER = {  # HF name inside encoder.layer.{i}. -> ours inside blocks.{i}.
    "attention.output.dense": "attn.proj",
    "intermediate.dense": "mlp.fc1",
    "output.dense": "mlp.fc2",
    "layernorm_before": "norm1",
    "layernorm_after": "norm2",
}
# transformers 5 names the same modules differently in memory (`layers.{i}.`) than in saved files
_LAYER_V5 = {
    "attention.o_proj": "attn.proj",
    "mlp.fc1": "mlp.fc1",
    "mlp.fc2": "mlp.fc2",
    "layernorm_before": "norm1",
    "layernorm_after": "norm2",
}
_QKV = {"attention.attention.query": "query", "attention.attention.key": "key", "attention.attention.value": "value",
        "attention.q_proj": "query", "attention.k_proj": "key", "attention.v_proj": "value"}
_HEADS = {"classifier": "head", "cls_classifier": "head", "distillation_classifier": "head_dist"}
_LAYER_TO_HF = {ours: theirs for theirs, ours in _LAYER.items()}
_TOKENS_TO_HF = {"cls_token": "cls_token", "dist_token": "distillation_token", "pos_embed": "position_embeddings"}


def base_prefix(state: dict[str, torch.Tensor]) -> str:
    """'vit.', 'deit.' or '' (a bare ViTModel/DeiTModel) - where the backbone's keys start."""
    for prefix in ("vit.", "deit."):
        if any(k.startswith(prefix + "embeddings.") for k in state):
            return prefix
    return ""


def hf_to_native(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename HF keys to ours and fuse query/key/value into qkv. Keys it does not know are kept
    under their HF names (so the architecture check reports them as unexpected); the pooler of a
    bare ViTModel is dropped (our backbone returns the normed [CLS] without it)."""
    prefix = base_prefix(state)
    out: dict[str, torch.Tensor] = {}
    qkv: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    for key, value in state.items():
        name = key[len(prefix):] if key.startswith(prefix) else key
        if name.startswith("pooler."):
            continue
        if name.startswith("embeddings."):
            rest = name[len("embeddings."):]
            mapped = {"cls_token": "cls_token", "distillation_token": "dist_token", "mask_token": "mask_token",
                      "position_embeddings": "pos_embed"}.get(rest)
            if rest.startswith("patch_embeddings.projection."):
                mapped = "patch_embed.proj." + rest.rsplit(".", 1)[1]
            out[mapped or key] = value
        elif name.startswith(("encoder.layer.", "layers.")):
            table = _LAYER if name.startswith("encoder.") else _LAYER_V5
            index, rest = name.removeprefix("encoder.layer.").removeprefix("layers.").split(".", 1)
            module, _, param = rest.rpartition(".")
            if module in _QKV:
                qkv.setdefault((int(index), param), {})[_QKV[module]] = value
            elif module in table:
                out[f"blocks.{index}.{table[module]}.{param}"] = value
            else:
                out[key] = value
        elif name.startswith("layernorm."):
            out["norm." + name.split(".", 1)[1]] = value
        elif name.split(".", 1)[0] in _HEADS and "." in name:
            head, param = name.split(".", 1)
            out[f"{_HEADS[head]}.{param}"] = value
        else:
            out[key] = value
    for (block, param), parts in qkv.items():
        if set(parts) == {"query", "key", "value"}:
            out[f"blocks.{block}.attn.qkv.{param}"] = torch.cat([parts["query"], parts["key"], parts["value"]], 0)
        else:  # incomplete: leave the pieces for the check to name
            for part, value in parts.items():
                out[f"{prefix}encoder.layer.{block}.attention.attention.{part}.{param}"] = value
    return out


def hf_architecture(config: ViTConfig) -> str:
    """The transformers class that has exactly this model's tokens and heads."""
    if not config.distilled:
        return "ViTForImageClassification"
    return "DeiTForImageClassificationWithTeacher" if config.dist_head else "DeiTForImageClassification"


def native_to_hf(state: dict[str, torch.Tensor], architecture: str) -> dict[str, torch.Tensor]:
    """Our keys -> the keys of `architecture` (one of `hf_architecture`'s answers)."""
    prefix = "deit." if architecture.startswith("DeiT") else "vit."
    with_teacher = architecture == "DeiTForImageClassificationWithTeacher"
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if key.startswith("blocks."):
            _, index, rest = key.split(".", 2)
            module, _, param = rest.rpartition(".")
            layer = f"{prefix}encoder.layer.{index}."
            if module == "attn.qkv":
                for part, chunk in zip(("query", "key", "value"), value.chunk(3, dim=0), strict=True):
                    out[f"{layer}attention.attention.{part}.{param}"] = chunk.contiguous()
            else:
                out[f"{layer}{_LAYER_TO_HF[module]}.{param}"] = value
        elif key.startswith("patch_embed.proj."):
            out[f"{prefix}embeddings.patch_embeddings.projection.{key.rsplit('.', 1)[1]}"] = value
        elif key in _TOKENS_TO_HF:
            out[f"{prefix}embeddings.{_TOKENS_TO_HF[key]}"] = value
        elif key.startswith("norm."):
            out[f"{prefix}layernorm.{key.split('.', 1)[1]}"] = value
        elif key.startswith("head."):
            out[("cls_classifier." if with_teacher else "classifier.") + key.split(".", 1)[1]] = value
        elif key.startswith("head_dist."):
            out["distillation_classifier." + key.split(".", 1)[1]] = value
        else:
            raise CheckpointError(f"parameter {key} has no Hugging Face ViT/DeiT counterpart")
    return out


# names of our dimensions in an HF config.json, for messages
HF_NAMES = {"width": "hidden_size", "depth": "num_hidden_layers", "mlp_width": "intermediate_size",
            "patch_size": "patch_size", "in_chans": "num_channels",
            "pos_rows": "position-table rows ((image_size / patch_size)^2 plus [CLS] and distillation tokens)",
            "num_classes": "classes (architectures and id2label)"}
CLASSIFIERS = ("ViTForImageClassification", "DeiTForImageClassification", "DeiTForImageClassificationWithTeacher")


def config_from_hf(hf: HFConfig, state: dict[str, torch.Tensor], where: str) -> ViTConfig:
    """Our config from an HF config.json: its fields decide every size. The weights decide only what
    the config does not say (a classifier's classes; heads and [MASK] when `architectures` is absent)."""
    d, intermediate = hf.hidden_size, hf.intermediate_size
    # DeiTForImageClassification: a distillation token, one classifier on [CLS]. The architecture
    # decides (so a teacher checkpoint missing its distillation head is reported, not loaded as
    # another model); without one, the weights do.
    if hf.architecture:
        one_head = hf.architecture == "DeiTForImageClassification"
        head = hf.architecture in CLASSIFIERS
        if head and "head.weight" not in state:
            raise CheckpointError(f"{where} declares {hf.architecture}, a classifier, but the weights have none "
                                  f"(no {'cls_' if 'WithTeacher' in hf.architecture else ''}classifier.weight)")
    else:
        one_head = "head.weight" in state and "head_dist.weight" not in state
        head = "head.weight" in state
    classes = int(state["head.weight"].shape[0]) if head and state["head.weight"].dim() == 2 else 0
    try:
        config = ViTConfig(
            image_size=hf.image_size,
            patch_size=hf.patch_size,
            in_chans=hf.num_channels,
            num_classes=classes,
            embed_dim=d,
            depth=hf.num_hidden_layers,
            num_heads=hf.num_attention_heads,
            mlp_ratio=intermediate / d,
            qkv_bias=hf.qkv_bias,
            prefix_tokens="cls+dist" if hf.model_type == "deit" else "cls",  # DeiTModel always has both tokens
            dist_head=not (hf.model_type == "deit" and one_head),
            mask_token="mask_token" in state,
            pe_resample_antialias=False,  # HF's interpolate_pos_encoding: bicubic, no antialias
            layer_norm_eps=hf.layer_norm_eps,
        )
    except ConfigError as error:
        raise CheckpointError(f"{where}: invalid model config: {error}") from None
    if int(config.embed_dim * config.mlp_ratio) != intermediate:
        raise CheckpointError(f"{where}: intermediate_size {intermediate} is not a whole multiple of hidden_size {d}")
    return config


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


def preprocess_from_hf(folder: Path, model_type: str, size: tuple[int, int]) -> Preprocess:
    path = folder / "preprocessor_config.json"
    processor = read_json(path) if path.exists() else {}
    return hf_preprocess(processor, processor_defaults(model_type, size), str(path))


# ------------------------------------------------------------------------------------ the format entry
def detect(source: Source) -> bool:
    config = source.config_json
    return config is not None and "model_type" in config and "architecture" not in config


def read_config(source: Source) -> Declared[tuple[HFConfig, Preprocess]]:
    path = source.folder / "config.json"
    hf = parse_hf_config(source.config_json, str(path))
    preprocessing = preprocess_from_hf(source.folder, hf.model_type, hf.image_size)
    return Declared((hf, preprocessing), source.file or find_weights(source.folder), str(path))


def convert(declared: Declared[tuple[HFConfig, Preprocess]], raw: dict[str, torch.Tensor]) -> Checkpoint:
    hf, preprocessing = declared.spec
    state = hf_to_native(raw)
    config = config_from_hf(hf, state, declared.described_by)
    labels = labels_from_hf(hf, config.num_classes, declared.described_by)
    details = {"architecture": hf.architecture or hf.model_type, "weights": str(declared.weights)}
    return Checkpoint(config, state, labels, preprocessing, details, HF_NAMES,
                      str(Path(declared.described_by).parent / "preprocessor_config.json"))


def hf_files(config: ViTConfig, labels: list[str], preprocessing: Preprocess
             ) -> tuple[dict[str, Any], dict[str, Any]]:
    """(config.json, preprocessor_config.json) for a ViTForImageClassification or, distilled,
    DeiTForImageClassification[WithTeacher] folder; CheckpointError for what HF cannot express."""
    reasons = []
    if config.stem != "patchify":
        reasons.append("a convolutional stem")
    if config.pos_embed != "learned" or not config.pos_embed_prefix:
        reasons.append(f"position embedding {config.pos_embed!r} (HF has learned 1D with prefix rows only)")
    if config.pool != "cls" or config.prefix_tokens == "none":
        reasons.append("global average pooling")
    if config.class_attn_depth or config.talking_heads:
        reasons.append("CaiT class attention / talking heads")
    if config.layer_scale_init is not None:
        reasons.append("LayerScale")
    if int(config.embed_dim * config.mlp_ratio) != config.embed_dim * config.mlp_ratio:
        reasons.append(f"mlp_ratio {config.mlp_ratio} (not a whole hidden width)")
    if config.image_size[0] != config.image_size[1]:
        reasons.append(f"a non-square image size {config.image_size} (HF assumes a square PE grid)")
    if config.distilled and not config.num_classes:
        reasons.append("a distilled model without classifier heads")
    if reasons:
        raise CheckpointError("this model cannot be written in the Hugging Face ViT/DeiT format: it has "
                              + "; ".join(reasons))
    distilled = config.distilled
    hf = {
        "architectures": [hf_architecture(config)],
        "model_type": "deit" if distilled else "vit",
        "hidden_size": config.embed_dim,
        "num_hidden_layers": config.depth,
        "num_attention_heads": config.num_heads,
        "intermediate_size": int(config.embed_dim * config.mlp_ratio),
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
        "initializer_range": 0.02,
        "layer_norm_eps": config.layer_norm_eps,
        "image_size": config.image_size[0],
        "patch_size": config.patch_size,
        "num_channels": config.in_chans,
        "qkv_bias": config.qkv_bias,
        "encoder_stride": config.patch_size,
        "id2label": {str(i): name for i, name in enumerate(labels)},
        "label2id": {name: i for i, name in enumerate(labels)},
    }
    processor = hf_processor_config(preprocessing, "DeiTImageProcessor" if distilled else "ViTImageProcessor")
    return hf, processor


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
