"""timm checkpoints -> the native model, without importing timm: ViT and DeiT (distilled too), CaiT,
DINOv2 (with registers), CLIP and SigLIP image towers, MAE encoders, DeiT III, BEiT and EVA-02.

A model name stands for timm's keyword arguments of its model definition (`TimmName.args`, sizes
included), and a timm hub config.json's `model_args` override them, as in timm's
create_model(name, **model_args); the weights must then agree with every size they show.
Parameter names are already timm's, except CaiT's `blocks_token_only` (ours: `class_blocks`),
`gamma_1`/`gamma_2` (ours: `ls1.gamma`/`ls2.gamma`), EVA-02's separate `q_proj`/`k_proj`/`v_proj`
(ours: one `qkv` with q and v biases) and a packed SwiGLU's `fc1` (ours: `fc1_g` and `fc1_x`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..models import ConfigError, ViTConfig
from ..models.config import mlp_ratio_for
from .errors import CheckpointError
from .hf_names import patch_linear_to_conv
from .labels import generic_labels, imagenet_labels
from .preprocess import IMAGENET_MEAN, IMAGENET_STD, Preprocess
from .schemas import TIMM_FIXED_ARGS, TimmConfig, parse_timm_config, timm_preprocess
from .source import Checkpoint, Declared, Source
from .weights import check_weights_file, find_weights, release

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)  # OpenAI CLIP's, also EVA-02's
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
HALF = (0.5, 0.5, 0.5)


def _sizes(**table: tuple[float, ...]) -> dict[str, dict[str, Any]]:
    """size word -> (width, heads, depth[, mlp_ratio]) as timm keyword arguments"""
    keys = ("embed_dim", "num_heads", "depth", "mlp_ratio")
    return {word: dict(zip(keys, values, strict=False)) for word, values in table.items()}


VIT_SIZES = _sizes(tiny=(192, 3, 12), small=(384, 6, 12), base=(768, 12, 12), large=(1024, 16, 24),
                   huge=(1280, 16, 32))
DEIT3_SIZES = _sizes(small=(384, 6, 12), medium=(512, 8, 12), base=(768, 12, 12), large=(1024, 16, 24),
                     huge=(1280, 16, 32))
# DINOv2-giant: timm's SwiGLUPacked has one fc1 of 2 x 4096 (mlp_ratio = 2.66667 * 2)
DINOV2_SIZES = {**_sizes(small=(384, 6, 12), base=(768, 12, 12), large=(1024, 16, 24)),
                "giant": dict(embed_dim=1536, num_heads=24, depth=40, mlp_ratio=2.66667 * 2, mlp_layer="swiglu_packed")}
SIGLIP_SIZES = _sizes(base=(768, 12, 12), large=(1024, 16, 24), so400m=(1152, 16, 27, 3.7362))
EVA02_SIZES = _sizes(tiny=(192, 3, 12), small=(384, 6, 12), base=(768, 12, 12), large=(1024, 16, 24))
CAIT_SIZES = _sizes(xxs=(192, 4), xs=(288, 6), s=(384, 8), m=(768, 16))
# DINOv3 (timm's Eva): the "plus" sizes and 7B have SwiGLU, its width rounded up to a multiple of 8 (7B: 64)
DINOV3_SIZES = {**_sizes(tiny=(192, 3, 12), small=(384, 6, 12), base=(768, 12, 12), large=(1024, 16, 24)),
                "small_plus": dict(embed_dim=384, num_heads=6, depth=12, swiglu_mlp=True, swiglu_align_to=8),
                "huge_plus": dict(embed_dim=1280, num_heads=20, depth=32, swiglu_mlp=True, swiglu_align_to=8),
                "7b": dict(embed_dim=4096, num_heads=32, depth=40, mlp_ratio=2, swiglu_mlp=True, swiglu_align_to=64)}
AIMV2_SIZES = _sizes(large=(1024, 8, 24, 2.75), huge=(1536, 12, 24, 2.6667), **{"1b": (2048, 16, 24, 2.75),
                                                                             "3b": (3072, 24, 24, 2.6667)})
NAFLEX_SIZES = {word: SIGLIP_SIZES[word] for word in ("base", "so400m")}
PE_SIZES = _sizes(tiny=(192, 3, 12), small=(384, 6, 12), base=(768, 12, 12), large=(1024, 16, 24),
                  gigantic=(1536, 16, 50, 8960 / 1536))
# SigLIP (2) towers whose definitions use GELU's tanh approximation (the others use exact GELU)
SIGLIP_GELU_TANH = frozenset(
    f"vit_{name}" for name in ("base_patch32_siglip_256", "large_patch16_siglip_512", "so400m_patch16_siglip_256",
                               "so400m_patch16_siglip_384", "so400m_patch16_siglip_512", "base_patch32_siglip_gap_256",
                               "large_patch16_siglip_gap_512", "so400m_patch16_siglip_gap_256",
                               "so400m_patch16_siglip_gap_384", "so400m_patch16_siglip_gap_512"))

# the timm classes and the keyword arguments of theirs that vit-explorer reads (see schemas.TIMM_ARGS)
_COMMON = {"img_size", "patch_size", "in_chans", "num_classes", "embed_dim", "depth", "num_heads", "mlp_ratio",
           "qkv_bias", "init_values", "global_pool"}
CLASS_ARGS = {
    "VisionTransformer": _COMMON | {"class_token", "no_embed_class", "reg_tokens", "pre_norm", "fc_norm", "act_layer"},
    "Cait": _COMMON | {"depth_token_only", "mlp_ratio_token_only"},
    "Beit": _COMMON | {"use_abs_pos_emb", "use_rel_pos_bias", "use_fc_norm"},
    "Eva": _COMMON | {"class_token", "num_reg_tokens", "no_embed_class", "use_abs_pos_emb", "use_rot_pos_emb",
                      "ref_feat_shape", "rope_temperature", "swiglu_mlp", "scale_mlp", "qkv_fused", "use_fc_norm",
                      "use_pre_transformer_norm"},
    # issue 18: DINOv3, AIMv2, the Perception Encoder
    "EvaDinoV3": _COMMON | {"class_token", "num_reg_tokens", "use_fc_norm", "rope_temperature"},
    "EvaPE": _COMMON | {"class_token", "ref_feat_shape", "rope_temperature", "use_fc_norm"},
    "VisionTransformerAimV2": _COMMON | {"fc_norm"},
    "NaFlexVit": _COMMON | {"pos_embed_grid_size", "class_token", "reg_tokens"},
}
# what timm's classes do when an argument is not given
CLASS_DEFAULTS = {"Beit": dict(global_pool="avg"), "Eva": dict(global_pool="avg"), "EvaDinoV3": dict(global_pool="avg")}
# the timm class each of our model classes stands for (one class, with other arguments)
TIMM_CLASS = {"EvaDinoV3": "Eva", "EvaPE": "Eva", "VisionTransformerAimV2": "VisionTransformer"}


@dataclass(frozen=True)
class TimmName:
    """What a timm model name stands for: its family, timm class, and the keyword arguments of its
    model definition (sizes included; 'eps' is the LayerNorm epsilon, which timm passes as a layer)."""

    family: str  # vit, deit, deit3, cait, dinov2, clip, siglip, beit, eva02, dinov3, aimv2, pe
    model_class: str  # a key of CLASS_ARGS (timm's class, TIMM_CLASS, with the arguments that class reads)
    args: dict[str, Any] = field(default_factory=dict)
    distilled: bool = False
    eps: float = 1e-6
    stem: str = "patchify"  # ViTConfig.stem: timm builds a hybrid's ResNet from the name, not from an argument

    @property
    def embed_dim(self) -> int:
        return int(self.args["embed_dim"])

    @property
    def num_heads(self) -> int:
        return int(self.args["num_heads"])


def _vit(m: re.Match[str]) -> TimmName:
    args = dict(VIT_SIZES[m["size"]], patch_size=int(m["patch"]), img_size=int(m["res"]))
    return TimmName(m["family"], "VisionTransformer", args, distilled=bool(m["distilled"]))


def _deit3(m: re.Match[str]) -> TimmName:
    args = dict(DEIT3_SIZES[m["size"]], patch_size=int(m["patch"]), img_size=int(m["res"]), no_embed_class=True,
                init_values=1e-6)
    return TimmName("deit3", "VisionTransformer", args)


def _dinov2(m: re.Match[str]) -> TimmName:
    args = dict(DINOV2_SIZES[m["size"]], patch_size=int(m["patch"]), img_size=518, init_values=1e-5)
    if m["reg"]:
        args.update(reg_tokens=int(m["reg"]), no_embed_class=True)
    return TimmName("dinov2", "VisionTransformer", args)


def _clip(m: re.Match[str]) -> TimmName:
    args = dict(VIT_SIZES[m["size"]], patch_size=int(m["patch"]), img_size=int(m["res"]), pre_norm=True)
    if m["quickgelu"]:
        args["act_layer"] = "quick_gelu"
    return TimmName("clip", "VisionTransformer", args, eps=1e-5)


def _siglip(m: re.Match[str]) -> TimmName:
    args = dict(SIGLIP_SIZES[m["size"]], patch_size=int(m["patch"]), img_size=int(m["res"]), class_token=False,
                global_pool="avg" if m["gap"] else "map")
    if m["gap"]:
        args["fc_norm"] = False
    if m[0] in SIGLIP_GELU_TANH:
        args["act_layer"] = "gelu_tanh"
    return TimmName("siglip", "VisionTransformer", args)


def _beit(m: re.Match[str]) -> TimmName:
    base_v1 = m["size"] == "base" and not m["v2"]
    args = dict(VIT_SIZES[m["size"]], patch_size=16, img_size=int(m["res"]), use_abs_pos_emb=False,
                use_rel_pos_bias=True, init_values=0.1 if base_v1 else 1e-5)
    return TimmName("beit", "Beit", args)


def _eva02(m: re.Match[str]) -> TimmName:
    args = dict(EVA02_SIZES[m["size"]], patch_size=int(m["patch"]), img_size=int(m["res"]), mlp_ratio=4 * 2 / 3,
                swiglu_mlp=True, use_rot_pos_emb=True, ref_feat_shape=(16, 16))
    if m["size"] in ("base", "large"):
        args.update(qkv_fused=False, scale_mlp=True)
    return TimmName("eva02", "Eva", args)


def _dinov3(m: re.Match[str]) -> TimmName:
    args = dict(DINOV3_SIZES[m["size"]], patch_size=16, img_size=224, qkv_bias=bool(m["qkvb"]), init_values=1e-5,
                rope_type="dinov3", rope_temperature=100, use_rot_pos_emb=True, use_abs_pos_emb=False,
                num_reg_tokens=4, use_fc_norm=False)
    return TimmName("dinov3", "EvaDinoV3", args, eps=1e-5)


def _aimv2(m: re.Match[str]) -> TimmName:
    args = dict(AIMV2_SIZES[m["size"]], patch_size=14, img_size=int(m["res"]), class_token=False, fc_norm=False,
                global_pool="avg", qkv_bias=False, proj_bias=False, norm_layer="rmsnorm", embed_norm=True,
                mlp_layer="swiglu")
    return TimmName("aimv2", "VisionTransformerAimV2", args, eps=1e-5)


def _pe(m: re.Match[str]) -> TimmName:
    patch, res = int(m["patch"]), int(m["res"])
    args = dict(PE_SIZES[m["size"]], patch_size=patch, img_size=res, global_pool="map", attn_type="rope",
                use_pre_transformer_norm=True, use_rot_pos_emb=True, ref_feat_shape=(res // patch, res // patch),
                rope_grid_offset=0.0 if m["size"] == "gigantic" else 1.0, rope_grid_indexing="xy",
                attn_pool_num_heads=8, attn_pool_mlp_ratio=4.0, class_token=m["size"] != "gigantic")
    return TimmName("pe", "EvaPE", args, eps=1e-5)


def _naflex(m: re.Match[str]) -> TimmName:
    """SigLIP 2 as timm's NaFlexVit: a learned 16x16 table, resampled bilinearly to each image's grid."""
    args = dict(NAFLEX_SIZES[m["size"]], patch_size=16, class_token=False, global_pool="map", act_layer="gelu_tanh",
                pos_embed_grid_size=(16, 16))
    return TimmName("siglip2", "NaFlexVit", args)


def _hybrid(m: re.Match[str]) -> TimmName:
    """The ViT paper's R50+ViT: the ResNet's stride is the patch size (timm's own patch_size, the kernel of the
    1x1 projection after it, stays 1)."""
    args = dict(VIT_SIZES[m["size"]], patch_size=int(m["stride"]), img_size=int(m["res"]))
    return TimmName("vit_hybrid", "VisionTransformer", args, stem="hybrid")


def _cait(m: re.Match[str]) -> TimmName:
    args = dict(CAIT_SIZES[m["size"]], depth=int(m["depth"]), patch_size=16, img_size=int(m["res"]), init_values=1e-5)
    return TimmName("cait", "Cait", args)


_P, _R = r"patch(?P<patch>\d{1,5})", r"(?P<res>\d{1,6})"
FAMILIES: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], TimmName]], ...] = (
    (re.compile(rf"(?P<family>vit|deit)_(?P<size>tiny|small|base|large|huge)_(?P<distilled>distilled_)?{_P}_{_R}"
                r"(_in21k)?"), _vit),
    (re.compile(rf"deit3_(?P<size>small|medium|base|large|huge)_{_P}_{_R}(_in21ft1k)?"), _deit3),
    (re.compile(rf"vit_(?P<size>small|base|large|giant)_{_P}_(reg(?P<reg>\d{{1,3}})_)?dinov2"), _dinov2),
    (re.compile(rf"vit_(?P<size>base|large|huge)_{_P}_clip_(?P<quickgelu>quickgelu_)?{_R}"), _clip),
    (re.compile(rf"vit_(?P<size>base|large|so400m)_{_P}_siglip_(?P<gap>gap_)?{_R}"), _siglip),
    (re.compile(rf"beit(?P<v2>v2)?_(?P<size>base|large)_patch16_{_R}"), _beit),
    (re.compile(rf"eva02_(?P<size>tiny|small|base|large)_{_P}_{_R}"), _eva02),
    (re.compile(rf"cait_(?P<size>xxs|xs|s|m)(?P<depth>\d{{1,4}})_{_R}"), _cait),
    (re.compile(r"vit_(?P<size>tiny|small|small_plus|base|large|huge_plus|7b)_patch16_dinov3(?P<qkvb>_qkvb)?"),
     _dinov3),
    (re.compile(rf"aimv2_(?P<size>large|huge|1b|3b)_patch14_{_R}"), _aimv2),
    (re.compile(rf"vit_pe_core_(?P<size>tiny|small|base|large|gigantic)_{_P}_{_R}"), _pe),
    (re.compile(r"naflexvit_(?P<size>base|so400m)_patch16_siglip"), _naflex),
    (re.compile(rf"vit_(?P<size>base|large)_r50_s(?P<stride>16|32)_{_R}"), _hybrid),
)
SUPPORTED = ("vit_{tiny,small,base,large,huge}_patch{P}_{res}, deit_{tiny,small,base}[_distilled]_patch{P}_{res}, "
             "deit3_{small,medium,base,large,huge}_patch{P}_{res}, vit_{small,base,large,giant}_patch14[_reg4]_dinov2, "
             "vit_{base,large,huge}_patch{P}_clip[_quickgelu]_{res}, "
             "vit_{base,large,so400m}_patch{P}_siglip[_gap]_{res}, beit[v2]_{base,large}_patch16_{res}, "
             "eva02_{tiny,small,base,large}_patch14_{res}, cait_{xxs,xs,s,m}{depth}_{res}, "
             "vit_{tiny,small,small_plus,base,large,huge_plus,7b}_patch16_dinov3[_qkvb], "
             "aimv2_{large,huge,1b,3b}_patch14_{res}, vit_pe_core_{tiny,small,base,large,gigantic}_patch{P}_{res}, "
             "naflexvit_{base,so400m}_patch16_siglip, vit_{base,large}_r50_s{16,32}_{res} "
             "(an optional .tag after the name)")
# eval preprocessing when no pretrained_cfg says it: (mean, std, crop_pct) per family, timm's defaults
FAMILY_PREPROCESS = {"vit": (HALF, HALF, 0.9), "deit": (IMAGENET_MEAN, IMAGENET_STD, 0.875),
                     "deit3": (IMAGENET_MEAN, IMAGENET_STD, 1.0), "cait": (IMAGENET_MEAN, IMAGENET_STD, 1.0),
                     "dinov2": (IMAGENET_MEAN, IMAGENET_STD, 1.0), "clip": (CLIP_MEAN, CLIP_STD, 1.0),
                     "siglip": (HALF, HALF, 1.0), "beit": (HALF, HALF, 0.9), "eva02": (CLIP_MEAN, CLIP_STD, 0.9),
                     "dinov3": (IMAGENET_MEAN, IMAGENET_STD, 1.0), "aimv2": (CLIP_MEAN, CLIP_STD, 1.0),
                     "pe": (HALF, HALF, 1.0), "siglip2": (HALF, HALF, 1.0),
                     "vit_hybrid": (HALF, HALF, 0.9)}
TAG_STATISTICS = {"mae": (IMAGENET_MEAN, IMAGENET_STD)}  # tags whose weights were trained on other statistics
# names of our dimensions in timm's model_args, for messages
TIMM_NAMES = {"width": "embed_dim", "depth": "depth", "mlp_width": "MLP width (embed_dim x mlp_ratio)",
              "patch_size": "patch_size", "in_chans": "in_chans",
              "pos_rows": "position-table rows ((img_size / patch_size)^2, plus [CLS] and distillation tokens)",
              "num_classes": "num_classes", "heads": "num_heads", "class_attn_depth": "depth_token_only",
              "class_mlp_width": "class-attention MLP width (embed_dim x mlp_ratio_token_only)"}


def parse_name(name: str, where: str = "") -> TimmName:
    """'vit_small_patch16_384.augreg_in21k' -> family, timm class and the arguments its definition
    gives; a clear error (prefixed with `where`, e.g. the config file's field) otherwise."""
    base = name.split(".", 1)[0].removeprefix("timm/")
    for pattern, make in FAMILIES:
        match = pattern.fullmatch(base)
        if match:
            return make(match)
    raise CheckpointError(f"{where}timm model {name[:100]!r} is not supported; supported names: {SUPPORTED}")


def timm_to_native(state: dict[str, torch.Tensor], config: ViTConfig) -> dict[str, torch.Tensor]:
    """Rename timm keys to ours; everything else is kept (unknown keys are reported when the model is built).

    Derived buffers some checkpoints carry (BEiT's relative_position_index, a zero k_bias) are dropped;
    EVA-02's separate q/k/v projections are fused into qkv; a packed SwiGLU fc1 (the gate half first)
    is split into fc1_g and fc1_x.
    """
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if key.endswith((".relative_position_index", ".attn.k_bias")):
            continue
        key = re.sub(r"^blocks_token_only\.", "class_blocks.", key)
        key = re.sub(r"\.gamma_([12])$", r".ls\1.gamma", key)
        key = re.sub(r"^patch_embed\.norm\.", "embed_norm.", key)  # AIMv2's norm of the patch embeddings
        if key == "embeds.proj.weight" and (conv := patch_linear_to_conv(value, config.patch_size)) is not None:
            key, value = "patch_embed.proj.weight", conv  # NaFlexVit: a Linear over each patch's pixels
        elif key == "embeds.proj.bias":
            key = "patch_embed.proj.bias"
        elif key == "embeds.pos_embed" and value.dim() == 4:  # NaFlexVit's table is (1, gh, gw, D)
            key, value = "pos_embed", value.flatten(1, 2)
        if config.mlp == "swiglu" and re.fullmatch(r"(class_)?blocks\.\d+\.mlp\.fc1\.(weight|bias)", key):
            gate, value_half = value.chunk(2, dim=0)
            stem, param = key.rsplit(".fc1.", 1)
            out[f"{stem}.fc1_g.{param}"], out[f"{stem}.fc1_x.{param}"] = gate, value_half
            continue
        out[key] = value
    return _fuse_qkv(out)


def _fuse_qkv(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """EVA's unfused attention (q_proj and v_proj with biases, k_proj without) -> qkv, q_bias, v_bias."""
    blocks = {m.group(1) for k in state if (m := re.fullmatch(r"(blocks\.\d+\.attn)\.q_proj\.weight", k))}
    for block in blocks:
        parts = [f"{block}.{p}_proj.weight" for p in "qkv"]
        if not all(p in state for p in parts):
            continue  # incomplete: left for the architecture check to name
        separate = [state.pop(p) for p in parts]
        state[f"{block}.qkv.weight"] = torch.cat(separate)
        release(*separate)  # their mapped pages: the fused copy replaces them
        for p in "qv":
            if f"{block}.{p}_proj.bias" in state:
                state[f"{block}.{p}_bias"] = state.pop(f"{block}.{p}_proj.bias")
    return state


def _mlp(args: dict[str, Any], d: int) -> dict[str, Any]:
    """Our MLP fields from timm's: activation, SwiGLU (packed in VisionTransformer, in halves in Eva), sub-LN."""
    ratio = args.get("mlp_ratio", 4.0)
    if args.get("mlp_layer") == "swiglu_packed":  # one fc1 holds both branches
        return dict(mlp="swiglu", mlp_ratio=mlp_ratio_for(d, int(d * ratio) // 2))
    if args.get("swiglu_mlp") and args.get("swiglu_align_to"):  # DINOv3: the width rounded up to a multiple
        hidden = int(d * ratio)
        return dict(mlp="swiglu", mlp_ratio=mlp_ratio_for(d, hidden + -hidden % args["swiglu_align_to"]),
                    mlp_norm=args.get("scale_mlp", False))
    if args.get("swiglu_mlp") or args.get("mlp_layer") == "swiglu":  # AIMv2's is timm's SwiGLU, in halves
        return dict(mlp="swiglu", mlp_ratio=ratio, mlp_norm=args.get("scale_mlp", False))
    return dict(mlp=args.get("act_layer", "gelu"), mlp_ratio=ratio, mlp_norm=args.get("scale_mlp", False))


def _position(name: TimmName, args: dict[str, Any]) -> dict[str, Any]:
    """Our position-embedding fields from timm's."""
    cls = name.model_class
    absolute = args.get("use_abs_pos_emb", True)
    if cls == "Beit" and args.get("use_rel_pos_bias"):
        if absolute:
            raise CheckpointError("model_args use_abs_pos_emb and use_rel_pos_bias together (an absolute table and "
                                  "a relative bias) are not supported; vit-explorer has one or the other")
        return dict(pos_embed="rel_bias")
    if cls == "EvaDinoV3":  # RoPE on normalised patch centres, no absolute table
        return dict(pos_embed="rope_dinov3", rope_theta=args["rope_temperature"])
    if cls == "EvaPE":  # a learned table ([CLS] row included), RoPE from rope_grid_offset with x first
        return dict(pos_embed="learned+rope_xy", rope_theta=args.get("rope_temperature", 1e4),
                    rope_ref_grid=tuple(args.get("ref_feat_shape") or ()), rope_offset=args["rope_grid_offset"])
    if cls == "Eva" and args.get("use_rot_pos_emb"):
        return dict(pos_embed="learned+rope" if absolute else "rope", rope_theta=args.get("rope_temperature", 1e4),
                    rope_ref_grid=tuple(args.get("ref_feat_shape") or ()))
    return dict(pos_embed="learned" if absolute else "none", pos_embed_prefix=not args.get("no_embed_class"))


def _without_fixed(model_args: dict[str, Any], parsed: TimmName, name: str, where: str) -> dict[str, Any]:
    """model_args without those that must keep the value the name builds with (TIMM_FIXED_ARGS), each checked."""
    for key in sorted(set(model_args) & set(TIMM_FIXED_ARGS)):
        own = parsed.args.get(key, TIMM_FIXED_ARGS[key])
        if model_args[key] != own:
            raise CheckpointError(f"{where}: model_args.{key} = {model_args[key]!r} is not supported; vit-explorer "
                                  f"builds {name!r} with {key} = {own!r}")
    return {k: v for k, v in model_args.items() if k not in TIMM_FIXED_ARGS}


def config_from_timm(name: str, state: dict[str, torch.Tensor], model_args: dict[str, Any], where: str,
                     num_classes: dict[str, int] | None = None) -> ViTConfig:
    """Our config for a timm model name and its (validated, see schemas.parse_model_args) model_args.

    Like timm's create_model(name, **model_args): the name's arguments, overridden by model_args.
    The weights decide only the classes when nothing declares them; every other size is checked
    against them when the model is built. Heads are the one size shapes do not show (except with
    talking heads), so model_args may change them only together with the width: a model with the
    name's width and other heads is a tampered or mislabelled config, not the named model.
    """
    parsed = parse_name(name)
    model_args = _without_fixed(model_args, parsed, name, where)
    foreign = sorted(set(model_args) - CLASS_ARGS[parsed.model_class])
    if foreign:
        timm_class = TIMM_CLASS.get(parsed.model_class, parsed.model_class)
        raise CheckpointError(f"{where}: model_args {', '.join(foreign)} are not arguments of timm's "
                              f"{timm_class} ({name!r}); vit-explorer reads "
                              f"{', '.join(sorted(CLASS_ARGS[parsed.model_class]))}")
    if parsed.stem == "hybrid" and model_args.get("patch_size", 1) != 1:
        raise CheckpointError(f"{where}: model_args patch_size={model_args['patch_size']} for the hybrid {name!r}: "
                              "its patches are the ResNet's feature map (stride from the name), and vit-explorer "
                              "reads only timm's default 1x1 projection after it (patch_size 1)")
    model_args = {k: v for k, v in model_args.items() if not (parsed.stem == "hybrid" and k == "patch_size")}
    args = {**CLASS_DEFAULTS.get(parsed.model_class, {}), **parsed.args, **model_args}
    if parsed.model_class == "NaFlexVit":  # no img_size: the learned table's grid is the native one
        args["img_size"] = tuple(side * args["patch_size"] for side in args["pos_embed_grid_size"])
    d, heads = args["embed_dim"], args["num_heads"]
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
    cait = parsed.model_class == "Cait"
    pool = {"token": "cls", "avg": "gap", "map": "map"}[args.get("global_pool", "token")]
    fc_norm = args.get("fc_norm", args.get("use_fc_norm"))
    class_token = args.get("class_token", True)
    if pool == "cls" and not class_token:
        raise CheckpointError(f"{where}: model_args class_token=False with global_pool 'token': token pooling "
                              "needs the class token (timm refuses this model too)")
    try:
        return ViTConfig(
            image_size=args["img_size"],
            patch_size=args["patch_size"],
            stem=parsed.stem,
            in_chans=args.get("in_chans", 3),
            num_classes=classes,
            embed_dim=d,
            depth=args["depth"],
            num_heads=heads,
            **_mlp(args, d),
            qkv_bias=args.get("qkv_bias", True),
            # Beit's and Eva's qkv have q and v biases only (PE's AttentionRope has all three)
            k_bias=parsed.model_class not in ("Beit", "Eva", "EvaDinoV3") or not args.get("qkv_bias", True),
            pre_norm=args.get("pre_norm", args.get("use_pre_transformer_norm", False)),
            prefix_tokens="cls+dist" if parsed.distilled else "cls" if class_token else "none",
            reg_tokens=args.get("reg_tokens", args.get("num_reg_tokens", 0)),
            pool=pool,
            fc_norm=pool == "gap" if fc_norm is None else fc_norm,
            **(dict(pos_embed_prefix=False) if cait else _position(parsed, args)),
            # the value is only an init; the weights replace it
            layer_scale_init=1.0 if args.get("init_values") is not None else None,
            talking_heads=cait,
            class_attn_depth=args.get("depth_token_only", 2) if cait else 0,
            class_attn_mlp_ratio=args.get("mlp_ratio_token_only", 4.0),
            layer_norm_eps=parsed.eps,
            norm=args.get("norm_layer", "layernorm"),
            embed_norm=args.get("embed_norm", False),
            proj_bias=args.get("proj_bias", True),
            pe_resample="bilinear" if parsed.model_class == "NaFlexVit" else "bicubic",
            **(dict(pool_heads=args.get("attn_pool_num_heads", 0), pool_mlp_ratio=args.get("attn_pool_mlp_ratio", 0.0),
                    pool_prefix=parsed.model_class == "EvaPE") if pool == "map" else {}),
        )
    except (ConfigError, CheckpointError) as error:
        raise CheckpointError(f"{where}: the name {name!r} and model_args give an invalid model: {error}") from None


def labels_from_timm(label_names: dict[int, str], num_classes: int) -> list[str]:
    if num_classes and sorted(label_names) == list(range(num_classes)):
        return [label_names[i] for i in range(num_classes)]
    return imagenet_labels(num_classes) or generic_labels(num_classes)


def preprocess_from_timm(pretrained_cfg: dict[str, Any], config: ViTConfig, name: str, where: str) -> Preprocess:
    """timm's eval transform; without a pretrained_cfg, timm's defaults for the family (and tag) at the
    model's size."""
    defaults: dict[str, Any] = {}
    if not pretrained_cfg:
        mean, std, crop_pct = FAMILY_PREPROCESS[parse_name(name).family]
        mean, std = TAG_STATISTICS.get(name.partition(".")[2], (mean, std))
        defaults = {"input_size": [3, *config.image_size], "crop_pct": crop_pct, "interpolation": "bicubic",
                    "mean": list(mean), "std": list(std)}
    return timm_preprocess(pretrained_cfg, where, "pretrained_cfg.", defaults)


# ----------------------------------------------------------------------------------- the format entries
def detect(source: Source) -> bool:
    """A timm hub folder (config.json with `architecture`), or a weights file beside one."""
    config = source.config_json
    return config is not None and "architecture" in config


def read_config(source: Source) -> Declared[TimmConfig]:
    path = source.folder / "config.json"
    spec = parse_timm_config(source.config_json, str(path), source.arch)
    named = parse_name(spec.architecture, "--arch: " if source.arch else f"{path}: architecture: ")
    # the arguments that depart from the name's definition, so a mismatch with the weights names them
    changed = ", ".join(f"{k}={v!r}" for k, v in spec.model_args.items() if named.args.get(k) != v)
    return Declared(spec, source.file or find_weights(source.folder),
                    f"{path} (timm model {spec.architecture!r}{' with model_args ' + changed if changed else ''})")


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


def clip_projection(spec: TimmConfig, state: dict[str, torch.Tensor]) -> int:
    """The width of a CLIP (or Perception Encoder) tower's projection to the joint image-text space, which timm
    keeps as `head` with a zero bias (the "openai", "laion2b", "fb"... weights); 0 for a classifier (a fine-tuned
    tag, labels, a bias)."""
    if parse_name(spec.architecture).family not in ("clip", "pe") or spec.label_names:
        return 0
    tag = str(spec.pretrained_cfg.get("tag") or spec.architecture.partition(".")[2])
    head, bias = state.get("head.weight"), state.get("head.bias")
    if head is None or head.dim() != 2 or "_ft_" in f"_{tag}_" or (bias is not None and torch.count_nonzero(bias)):
        return 0
    return int(head.shape[0])


def convert(declared: Declared[TimmConfig], raw: dict[str, torch.Tensor]) -> Checkpoint:
    spec, where = declared.spec, declared.described_by
    projection = clip_projection(spec, raw)
    if projection:  # our CLIP tower names it `proj` and shows it as the embedding, as from Hugging Face
        raw = {("proj.weight" if k == "head.weight" else k): v for k, v in raw.items() if k != "head.bias"}
    config = config_from_timm(spec.architecture, raw, spec.model_args, where, {} if projection else spec.num_classes)
    if projection:
        config = config.replace(proj_dim=projection)
    if spec.num_features is not None and spec.num_features != config.embed_dim:
        raise CheckpointError(f"{where}: num_features {spec.num_features} contradicts the width {config.embed_dim} "
                              "of the name and model_args")
    pool = {"cls": "token", "gap": "avg", "map": "map"}[config.pool]
    if spec.global_pool is not None and spec.global_pool != pool:
        raise CheckpointError(f"{where}: global_pool {spec.global_pool!r} contradicts the name and model_args, "
                              f"which pool with {pool!r}")
    labels = labels_from_timm(spec.label_names, config.num_classes)
    preprocessing = preprocess_from_timm(spec.pretrained_cfg, config, spec.architecture, where)
    details = {"architecture": spec.architecture.removeprefix("timm/"), "weights": str(declared.weights)}
    return Checkpoint(config, timm_to_native(raw, config), labels, preprocessing, details, TIMM_NAMES, where)
