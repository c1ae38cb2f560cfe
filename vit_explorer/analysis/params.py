"""Parameter counts as a tree (stage -> layer -> tensor) and FLOPs per stage for one image."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from ..models.config import ViTConfig
from ..models.stems import HYBRID_WIDTHS, hybrid_multiply_adds

STAGES = ("embeddings", "encoder", "class attention", "head")
_EMBED_LAYERS = {  # first name component -> layer name in the embedding stage (the seed article's breakdown)
    "patch_embed": "patch embedding",
    "cls_token": "[CLS] token",
    "dist_token": "distillation token",
    "reg_token": "register tokens",
    "mask_token": "[MASK] token",
    "pos_embed": "position embedding",  # every scheme's parameters are named pos_embed* (models/position.py)
    "norm_pre": "pre-norm",
    "embed_norm": "patch-embedding norm",  # AIMv2
}
_HEAD_LAYERS = {"norm": "final norm", "fc_norm": "final norm", "attn_pool": "attention-pool head",
                "proj": "projection", "head": "classifier", "head_dist": "distillation classifier"}


@dataclass(frozen=True)
class ParamRow:
    stage: str  # one of STAGES
    layer: str  # e.g. "patch embedding", "block 3", "final norm"
    name: str  # the parameter's name in the state dict
    shape: tuple[int, ...]
    count: int


@dataclass(frozen=True)
class ParameterTable:
    rows: list[ParamRow]  # in the model's parameter order

    @property
    def total(self) -> int:
        return sum(r.count for r in self.rows)

    def by_stage(self) -> dict[str, int]:
        """Stage -> parameter count, in forward order; stages without parameters are left out."""
        out: dict[str, int] = {}
        for r in self.rows:
            out[r.stage] = out.get(r.stage, 0) + r.count
        return {s: out[s] for s in STAGES if s in out}

    def by_layer(self) -> list[tuple[str, str, int]]:
        """(stage, layer, count) in forward order."""
        out: dict[tuple[str, str], int] = {}
        for r in self.rows:
            out[(r.stage, r.layer)] = out.get((r.stage, r.layer), 0) + r.count
        return [(s, layer, n) for (s, layer), n in out.items()]

    def share(self, count: int) -> float:
        return count / self.total if self.total else 0.0


def _place(name: str) -> tuple[str, str]:
    parts = name.split(".")
    if parts[0].startswith("pos_embed"):
        return "embeddings", _EMBED_LAYERS["pos_embed"]
    if parts[0] in _EMBED_LAYERS:
        return "embeddings", _EMBED_LAYERS[parts[0]]
    if parts[0] == "blocks":
        return "encoder", f"block {parts[1]}"
    if parts[0] == "class_blocks":
        return "class attention", f"class-attention block {parts[1]}"
    if parts[0] in _HEAD_LAYERS:
        return "head", _HEAD_LAYERS[parts[0]]
    raise ValueError(f"parameter {name!r} does not belong to a known stage of the model")


def parameter_table(model: nn.Module) -> ParameterTable:
    """Every parameter of a VisionTransformer with its stage and layer; the counts add up to the total."""
    rows = []
    for name, p in model.named_parameters():
        stage, layer = _place(name)
        rows.append(ParamRow(stage, layer, name, tuple(p.shape), p.numel()))
    # forward order: stages, then the embedding stage's parts as the seed article lists them
    embed_order = list(dict.fromkeys(_EMBED_LAYERS.values()))
    rows.sort(key=lambda r: (STAGES.index(r.stage), embed_order.index(r.layer) if r.stage == "embeddings" else 0))
    return ParameterTable(rows)


def flops_per_stage(config: ViTConfig, image_size: tuple[int, int] | None = None) -> dict[str, int]:
    """FLOPs (2 per multiply-add) of the matrix products and convolutions for one image, per stage.

    Element-wise work (softmax, LayerNorm, GELU, additions) is left out, as torch's FlopCounterMode
    and most papers do. CaiT's self-attention blocks see only the patches; its class-attention
    blocks run one query ([CLS]) against [CLS] + patches; an attention-pool head one latent query
    against the patches.
    """
    h, w = image_size or config.image_size
    p = config.patch_size
    gh, gw = h // p, w // p
    n = gh * gw
    d = config.embed_dim
    macs: dict[str, int] = {}

    if config.stem == "patchify":
        macs["embeddings"] = n * d * config.in_chans * p * p
    elif config.stem == "hybrid":  # the ResNet, then the 1x1 projection of its last stage
        layers = config.hybrid_plan()
        macs["embeddings"] = hybrid_multiply_adds(config.in_chans, layers, (h, w))
        macs["embeddings"] += n * HYBRID_WIDTHS[len(layers) - 1] * d
    else:
        stem, c_in, size = 0, config.in_chans, (h, w)
        for c_out, stride in config.conv_stem_plan():
            size = (-(-size[0] // stride), -(-size[1] // stride))  # 3x3, padding 1
            stem += size[0] * size[1] * c_out * c_in * 9
            c_in = c_out
        macs["embeddings"] = stem + n * c_in * d  # the final 1x1 projection

    t = n + config.num_prefix_tokens
    hidden = config.mlp_hidden
    mlp_layers = 3 if config.mlp == "swiglu" else 2  # SwiGLU: gate, value and output layers
    block = t * d * 3 * d + 2 * t * t * d + t * d * d + mlp_layers * t * d * hidden  # qkv, QK^T and AV, proj, MLP
    if config.talking_heads:
        block += 2 * t * t * config.num_heads**2  # head mixing before and after the softmax
    macs["encoder"] = config.depth * block

    if config.class_attn_depth:
        u = n + 1
        hidden_ca = int(d * config.class_attn_mlp_ratio)
        ca = d * d + 2 * u * d * d + 2 * u * d + d * d + mlp_layers * d * hidden_ca  # q, k and v, attention, proj, MLP
        macs["class attention"] = config.class_attn_depth * ca

    heads = 2 if config.distilled and config.dist_head else 1
    macs["head"] = heads * config.pooled_dim * config.num_classes + config.pooled_dim * config.proj_dim
    if config.pool == "map":  # the latent's query, keys and values of the patches (PE: all tokens), attention, MLP
        m = t if config.pool_prefix else n
        macs["head"] += d * d + 2 * m * d * d + 2 * m * d + d * d + 2 * d * config.pool_mlp_hidden
    elif config.pool == "query":  # AIMv2: keys and values of the patches, attention, the output layer
        m = t if config.pool_prefix else n
        macs["head"] += 2 * m * d * d + 2 * m * d + d * d
    return {stage: 2 * m for stage, m in macs.items()}
