"""Parameter names: Hugging Face transformers' vision transformers <-> ours (timm's).

Reading: one table of renames serves every family HF writes (ViT, DeiT, ViTMAE, DINOv2 with and
without registers, CLIP and SigLIP vision towers, BEiT). Writing (`convert --to hf`): the ViT/DeiT,
DINOv2, CLIP and SigLIP names, per family. What is not a rename:
- HF keeps query, key and value as three Linear layers; ours fuse them into `qkv` (BEiT's key has
  no bias: its query and value biases become our `q_bias` and `v_bias`);
- DINOv2's packed SwiGLU `weights_in` holds the gate and value halves (our `fc1_g`, `fc1_x`);
- SigLIP's pooling head packs the latent's query and the patches' keys and values in one
  `in_proj` (ours: `attn_pool.q`, `attn_pool.kv`);
- a few tensors differ only in shape (CLIP's class embedding (D,), DINOv2's [MASK] (1, D),
  CLIP's and SigLIP's position table (T, D); ours are (1, 1, D) and (1, T, D)).
"""

from __future__ import annotations

import re

import torch

from .errors import CheckpointError
from .weights import release

# where a model's backbone keys start (a task model wraps the backbone: vit., deit., beit., dinov2.);
# CLIP's and SigLIP's towers, alone or inside the two-tower model, sit under vision_model.
# (DINOv2 with registers' and I-JEPA's classifiers wrap theirs as dinov2_with_registers. and ijepa.)
BACKBONES = ("vit.", "deit.", "beit.", "dinov2.", "vision_model.", "dinov2_with_registers.", "ijepa.")
# keys of a two-tower CLIP / SigLIP model or an MAE pre-training model that are not the image encoder
NOT_THE_ENCODER = re.compile(r"(text_model\.|text_projection\.|logit_scale$|logit_bias$|decoder\.)")

def _compile(table: list[tuple[str, str]]) -> list[tuple[re.Pattern[str], str]]:
    """(template, replacement) with {p} standing for weight or bias -> (pattern, replacement)."""
    return [(re.compile(re.escape(a).replace(r"\{p\}", r"(?P<p>weight|bias)")), b) for a, b in table]


# (HF name, ours): inside the backbone, then outside it; {p} is weight or bias. The first match wins.
_MODEL = _compile([
    ("embeddings.cls_token", "cls_token"),
    ("embeddings.class_embedding", "cls_token"),
    ("embeddings.distillation_token", "dist_token"),
    ("embeddings.mask_token", "mask_token"),
    ("embeddings.register_tokens", "reg_token"),
    ("embeddings.position_embeddings", "pos_embed"),
    ("embeddings.position_embedding.weight", "pos_embed"),
    ("embeddings.patch_embeddings.projection.{p}", "patch_embed.proj.{p}"),
    ("embeddings.patch_embedding.{p}", "patch_embed.proj.{p}"),
    ("pre_layrnorm.{p}", "norm_pre.{p}"),
    ("layernorm.{p}", "norm.{p}"),
    ("post_layernorm.{p}", "norm.{p}"),
    ("pooler.layernorm.{p}", "fc_norm.{p}"),
    # DINOv3, AIMv2 (issue 18)
    ("embeddings.patch_embeddings.{p}", "patch_embed.proj.{p}"),
    ("embeddings.patch_embed.{p}", "patch_embed.proj.{p}"),
    ("embeddings.rms_norm.weight", "embed_norm.weight"),
    ("norm.{p}", "norm.{p}"),
    ("rms_norm.weight", "norm.weight"),
    ("head.cls_token", "attn_pool.latent"),
    ("head.k_proj.{p}", "attn_pool.k.{p}"),
    ("head.v_proj.{p}", "attn_pool.v.{p}"),
    ("head.output_proj.{p}", "attn_pool.proj.{p}"),
    ("head.probe", "attn_pool.latent"),
    ("head.attention.out_proj.{p}", "attn_pool.proj.{p}"),
    ("head.layernorm.{p}", "attn_pool.norm.{p}"),
    ("head.mlp.fc1.{p}", "attn_pool.mlp.fc1.{p}"),
    ("head.mlp.fc2.{p}", "attn_pool.mlp.fc2.{p}"),
    # outside the backbone

    ("visual_projection.weight", "proj.weight"),
    ("classifier.{p}", "head.{p}"),
    ("cls_classifier.{p}", "head.{p}"),
    ("distillation_classifier.{p}", "head_dist.{p}"),
])
_BLOCK = _compile([  # inside encoder.layer.{i}. (ViT, DeiT, MAE, DINOv2, BEiT) or encoder.layers.{i}. (CLIP, SigLIP)
    ("attention.attention.relative_position_bias.relative_position_bias_table", "attn.relative_position_bias_table"),
    ("attention.output.dense.{p}", "attn.proj.{p}"),
    ("attention.o_proj.{p}", "attn.proj.{p}"),  # transformers 5's in-memory ViT
    ("self_attn.out_proj.{p}", "attn.proj.{p}"),
    ("intermediate.dense.{p}", "mlp.fc1.{p}"),
    ("output.dense.{p}", "mlp.fc2.{p}"),
    ("mlp.fc1.{p}", "mlp.fc1.{p}"),
    ("mlp.fc2.{p}", "mlp.fc2.{p}"),
    ("mlp.weights_out.{p}", "mlp.fc2.{p}"),
    ("layernorm_before.{p}", "norm1.{p}"),
    ("norm1.{p}", "norm1.{p}"),
    ("layer_norm1.{p}", "norm1.{p}"),
    ("layernorm_after.{p}", "norm2.{p}"),
    ("norm2.{p}", "norm2.{p}"),
    ("layer_norm2.{p}", "norm2.{p}"),
    ("layer_scale1.lambda1", "ls1.gamma"),
    ("layer_scale2.lambda1", "ls2.gamma"),
    ("lambda_1", "ls1.gamma"),
    ("lambda_2", "ls2.gamma"),
    # DINOv3 (mlp.*; a gated MLP's up_proj is its value half, fixed in hf_to_native) and AIMv2 (ffn.*)
    ("attention.out_proj.{p}", "attn.proj.{p}"),
    ("mlp.up_proj.{p}", "mlp.fc1.{p}"),
    ("mlp.gate_proj.{p}", "mlp.fc1_g.{p}"),
    ("mlp.down_proj.{p}", "mlp.fc2.{p}"),
    ("ffn.gate_proj.{p}", "mlp.fc1_g.{p}"),
    ("ffn.up_proj.{p}", "mlp.fc1_x.{p}"),
    ("ffn.down_proj.{p}", "mlp.fc2.{p}"),
    ("rms_norm1.weight", "norm1.weight"),
    ("rms_norm2.weight", "norm2.weight"),
])
_QKV = {"attention.attention.query": "q", "attention.attention.key": "k", "attention.attention.value": "v",
        "attention.q_proj": "q", "attention.k_proj": "k", "attention.v_proj": "v",
        "self_attn.q_proj": "q", "self_attn.k_proj": "k", "self_attn.v_proj": "v"}
_BLOCK_PREFIX = re.compile(r"(?:encoder\.layers?|layers?|model\.layer)\.(\d+)\.(.+)")  # DINOv3: (model.)layer
_DERIVED = ("relative_position_index",)  # buffers older checkpoints saved; recomputed, so dropped


def _rename(name: str, table: list[tuple[re.Pattern[str], str]]) -> str | None:
    for pattern, ours in table:
        match = pattern.fullmatch(name)
        if match:
            return ours.replace("{p}", match.groupdict().get("p") or "")
    return None


def backbone_prefix(state: dict[str, torch.Tensor]) -> str:
    """Where the backbone's keys start: one of BACKBONES, or '' (a bare ViTModel, Dinov2Model, ...)."""
    for prefix in BACKBONES:
        if any(k.startswith(prefix + "embeddings.") for k in state):
            return prefix
    return ""


def hf_to_native(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename HF keys to ours (fusing q/k/v, splitting packed layers, reshaping the few tensors that
    differ). Keys it does not know are kept under their HF names, so the architecture check reports
    them as unexpected; a bare model's pooler (ViT's dense layer, which our backbone does not have),
    the text tower of a two-tower model and an MAE decoder are dropped."""
    prefix = backbone_prefix(state)
    out: dict[str, torch.Tensor] = {}
    qkv: dict[tuple[str, str], dict[str, torch.Tensor]] = {}
    for key, value in state.items():
        inside = key.startswith(prefix)
        name = key[len(prefix):] if inside else key
        if NOT_THE_ENCODER.match(name) or name.startswith("pooler.dense.") or name.endswith(_DERIVED):
            continue
        block = _BLOCK_PREFIX.fullmatch(name) if inside else None
        if block:
            index, rest = block.groups()
            module, _, param = rest.rpartition(".")
            if module in _QKV:
                qkv.setdefault((index, param), {})[_QKV[module]] = value
            elif module == "mlp.weights_in":  # DINOv2's SwiGLU: the gate half, then the value half
                gate, half = value.chunk(2, dim=0)
                out[f"blocks.{index}.mlp.fc1_g.{param}"], out[f"blocks.{index}.mlp.fc1_x.{param}"] = gate, half
            else:
                mapped = _rename(rest, _BLOCK)
                out[f"blocks.{index}.{mapped}" if mapped else key] = value
        elif inside and name.startswith("head.attention.in_proj_"):  # SigLIP: [q | k | v] of the pooling head
            param = name.rsplit("_", 1)[1]
            width = value.shape[0] // 3
            out[f"attn_pool.q.{param}"], out[f"attn_pool.kv.{param}"] = value[:width], value[width:]
        else:
            mapped = _rename(name, _MODEL)
            out[mapped or key] = _as_tokens(value) if mapped in ("cls_token", "mask_token", "pos_embed") else value
    for (index, param), parts in qkv.items():
        out.update(_fuse(prefix, index, param, parts))
    for key in [k for k in out if re.fullmatch(r"blocks\.\d+\.mlp\.fc1\.(weight|bias)", k)]:
        if key.replace(".fc1.", ".fc1_g.") in out:  # DINOv3's gated MLP: up_proj is the value half
            out[key.replace(".fc1.", ".fc1_x.")] = out.pop(key)
    return out


def patch_linear_to_conv(weight: torch.Tensor, patch_size: int) -> torch.Tensor | None:
    """SigLIP 2's (HF, timm's NaFlexVit) patch embedding, a Linear (D, P*P*C) over each patch's pixels in (row,
    column, channel) order, as our stem's Conv2d weight (D, C, P, P); None if the shape has no such reading."""
    if weight.dim() != 2 or weight.shape[1] % (patch_size * patch_size):
        return None
    return weight.reshape(weight.shape[0], patch_size, patch_size, -1).permute(0, 3, 1, 2).contiguous()


def _as_tokens(t: torch.Tensor) -> torch.Tensor:
    """(D,) or (N, D) -> (1, N, D), as our tokens and tables are."""
    return t.reshape(1, -1, t.shape[-1]) if t.dim() in (1, 2) else t



def _fuse(prefix: str, index: str, param: str, parts: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """One block's q, k, v as our qkv; the parts' memory-mapped pages are given back at once, so a model's
    fused copy never sits beside a second copy of its parts."""
    block = f"blocks.{index}.attn"
    if param in ("weight", "bias") and set(parts) == {"q", "k", "v"}:
        fused = torch.cat([parts["q"], parts["k"], parts["v"]])
        release(*parts.values())
        return {f"{block}.qkv.{param}": fused}
    if param == "bias" and set(parts) == {"q", "v"}:  # BEiT: keys have no bias
        return {f"{block}.q_bias": parts["q"], f"{block}.v_bias": parts["v"]}
    # incomplete: left under HF-like names for the architecture check to name
    return {f"{prefix}encoder.layer.{index}.attention.{part}.{param}": value for part, value in parts.items()}


# ------------------------------------------------------------------------------------------ ours -> HF
# the HF names of each family, by our names; the few tensors whose shape or packing differs are
# brought to HF's form by hf_format.hf_weights first (e.g. SigLIP's attn_pool.in_proj)
_EMBEDDINGS = {"cls_token": "embeddings.cls_token", "mask_token": "embeddings.mask_token",
               "pos_embed": "embeddings.position_embeddings",
               "patch_embed.proj.{p}": "embeddings.patch_embeddings.projection.{p}", "norm.{p}": "layernorm.{p}"}
_TOWER = {"pos_embed": "embeddings.position_embedding.weight", "patch_embed.proj.{p}": "embeddings.patch_embedding.{p}",
          "norm.{p}": "post_layernorm.{p}"}
_TOWER_BLOCK = {"attn.proj.{p}": "self_attn.out_proj.{p}", "mlp.fc1.{p}": "mlp.fc1.{p}", "mlp.fc2.{p}": "mlp.fc2.{p}",
                "norm1.{p}": "layer_norm1.{p}", "norm2.{p}": "layer_norm2.{p}"}
_TO_HF_MODEL = {
    "vit": {**_EMBEDDINGS, "dist_token": "embeddings.distillation_token"},
    "dinov2": {**_EMBEDDINGS, "reg_token": "embeddings.register_tokens"},
    "clip": {**_TOWER, "cls_token": "embeddings.class_embedding", "norm_pre.{p}": "pre_layrnorm.{p}"},
    "siglip": {**_TOWER, "attn_pool.latent": "head.probe", "attn_pool.in_proj.{p}": "head.attention.in_proj_{p}",
               "attn_pool.proj.{p}": "head.attention.out_proj.{p}", "attn_pool.norm.{p}": "head.layernorm.{p}",
               "attn_pool.mlp.fc1.{p}": "head.mlp.fc1.{p}", "attn_pool.mlp.fc2.{p}": "head.mlp.fc2.{p}"},
}
_TO_HF_BLOCK = {
    "vit": {"attn.proj.{p}": "attention.output.dense.{p}", "mlp.fc1.{p}": "intermediate.dense.{p}",
            "mlp.fc2.{p}": "output.dense.{p}", "norm1.{p}": "layernorm_before.{p}",
            "norm2.{p}": "layernorm_after.{p}"},
    "dinov2": {"attn.proj.{p}": "attention.output.dense.{p}", "mlp.fc1.{p}": "mlp.fc1.{p}",
               "mlp.fc2.{p}": "mlp.fc2.{p}", "mlp.weights_in.{p}": "mlp.weights_in.{p}",
               "mlp.weights_out.{p}": "mlp.weights_out.{p}",
               "norm1.{p}": "norm1.{p}", "norm2.{p}": "norm2.{p}",
               "ls1.gamma": "layer_scale1.lambda1", "ls2.gamma": "layer_scale2.lambda1"},
    "clip": _TOWER_BLOCK,
    "siglip": _TOWER_BLOCK,
}
_TO_HF_OUTSIDE = {"head.{p}": "classifier.{p}", "head_dist.{p}": "distillation_classifier.{p}",
                  "proj.weight": "visual_projection.weight"}
_LAYERS = {"vit": "encoder.layer", "dinov2": "encoder.layer", "clip": "encoder.layers", "siglip": "encoder.layers"}
_QKV_TO_HF = {"vit": ("attention.attention.query", "attention.attention.key", "attention.attention.value"),
              "clip": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")}


def native_to_hf(state: dict[str, torch.Tensor], family: str, prefix: str, teacher: bool = False
                 ) -> dict[str, torch.Tensor]:
    """Our keys -> the keys of an HF `family` ('vit' for ViT/DeiT, 'dinov2' for DINOv2 with or without
    registers, 'clip', 'siglip') under the backbone `prefix` ('vit.', 'deit.', 'vision_model.' or '');
    `teacher`: DeiT's two classifiers are named cls_classifier and distillation_classifier."""
    model = _compile(list(_TO_HF_MODEL[family].items()))
    outside = _compile(list(_TO_HF_OUTSIDE.items()))
    block = _compile(list(_TO_HF_BLOCK[family].items()))
    qkv_names = _QKV_TO_HF["clip" if family in ("clip", "siglip") else "vit"]
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if key.startswith("blocks."):
            _, index, rest = key.split(".", 2)
            layer = f"{prefix}{_LAYERS[family]}.{index}."
            module, _, param = rest.rpartition(".")
            if module == "attn.qkv":
                for part, chunk in zip(qkv_names, value.chunk(3, dim=0), strict=True):
                    out[f"{layer}{part}.{param}"] = chunk.contiguous()
                continue
            mapped = _rename(rest, block)
            if mapped is None:
                raise CheckpointError(f"parameter {key} has no Hugging Face {family} counterpart")
            out[layer + mapped] = value
        elif (mapped := _rename(key, model)) is not None:
            out[prefix + mapped] = value
        elif (mapped := _rename(key, outside)) is not None:
            out[("cls_" if teacher and mapped.startswith("classifier") else "") + mapped] = value
        else:
            raise CheckpointError(f"parameter {key} has no Hugging Face {family} counterpart")
    return out
