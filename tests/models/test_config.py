"""ViTConfig: invalid configurations are refused with messages that say what to change; the
closed-form parameter count is exact; configs survive a JSON round trip."""

from __future__ import annotations

import itertools
import json

import pytest
import torch

from vit_explorer.models import ConfigError, VisionTransformer, ViTConfig, count_parameters, preset
from vit_explorer.models.config import POS_EMBEDS, STEMS, TOKEN_LAYOUTS

TINY = dict(image_size=16, patch_size=4, num_classes=3, embed_dim=16, depth=1, num_heads=2)

# (overrides of TINY, a fragment the message must contain: the option to change or the fix)
INVALID = [
    (dict(patch_size=0), "patch_size must be at least 1"),
    (dict(image_size=(18, 16)), "use e.g. 16x16"),
    (dict(image_size=(2, 16)), "not a positive multiple of patch_size 4"),
    (dict(image_size=(16, 16, 3)), "image_size must be (H, W)"),
    (dict(stem="resnet"), "stem must be one of ('patchify', 'conv'"),
    (dict(stem="hybrid", patch_size=2), "set patch_size to one of (4, 8, 16, 32)"),
    (dict(stem="hybrid", hybrid_layers=(3, 4)), "give a ResNet of 2 stages, stride 8, not patch_size 4"),
    (dict(hybrid_layers=(3,)), "are the hybrid stem's: set stem='hybrid'"),
    (dict(pool="cls+mean", prefix_tokens="none"), "pool='cls+mean' needs a [CLS] token"),
    (dict(prefix_tokens="dist"), "prefix_tokens must be one of"),
    (dict(pool="max"), "pool must be one of ('cls', 'gap', 'map', 'query'"),
    (dict(mlp="relu"), "mlp must be one of"),
    (dict(fc_norm=True), "it needs pool='gap'"),
    (dict(pool="map", mlp="swiglu"), "choose mlp='gelu'"),
    (dict(proj_dim=8), "set num_classes=0 or proj_dim=0"),
    (dict(reg_tokens=-1), "reg_tokens and proj_dim must be >= 0"),
    (dict(reg_tokens=2, class_attn_depth=1, pos_embed_prefix=False), "set reg_tokens=0 or class_attn_depth=0"),
    (dict(qkv_bias=False, k_bias=False), "it needs qkv_bias=True"),
    (dict(rope_ref_grid=(4, 4)), "has no RoPE: set it to ()"),
    (dict(pos_embed="rope", rope_ref_grid=(4,)), "rope_ref_grid must be () or (rows, cols)"),
    (dict(pos_embed="alibi"), "pos_embed must be one of"),
    (dict(embed_dim=18, num_heads=4), "embed_dim 18 must be divisible by num_heads 4"),
    (dict(prefix_tokens="none", pool="cls"), "set prefix_tokens='cls' or pool='gap'"),
    (dict(prefix_tokens="cls+dist", pool="gap"), "set pool='cls'"),
    (dict(class_attn_depth=1, prefix_tokens="none", pool="gap"), "use prefix_tokens='cls', pool='cls'"),
    (dict(class_attn_depth=1, pos_embed="learned", pos_embed_prefix=True), "set pos_embed_prefix=False"),
    (dict(embed_dim=18, num_heads=1, pos_embed="sincos_2d"), "must be divisible by 4"),
    (dict(embed_dim=15, num_heads=1, pos_embed="learned_2d"), "embed_dim 15 must be even"),
    (dict(embed_dim=15, num_heads=1, pos_embed="sincos_1d"), "need an even embed_dim"),
    (dict(embed_dim=12, num_heads=2, pos_embed="rope"), "head_dim 6 must be divisible by 4"),
    (dict(pos_embed="rope", rope_theta=1e-300), "rope_theta (timm: rope_temperature) must be from 1 to 1e9"),
    (dict(pos_embed="learned+rope", rope_theta=0.5), "real models use 10, 100 or 10000"),
    (dict(drop_rate=1.0), "drop_rate must be in [0, 1)"),
    (dict(drop_path_rate=-0.1), "drop_path_rate must be in [0, 1)"),
    (dict(mlp_ratio=0.0), "mlp_ratio must be > 0"),
    (dict(depth=0), "needs at least one block"),
    (dict(depth=-1), "must be >= 0"),
    (dict(num_classes=-1), "num_classes must be >= 0"),
    (dict(stem="conv", patch_size=8, image_size=32, conv_stem_strides=(2, 2)), "multiply to 4, not patch_size 8"),
    (dict(stem="conv", conv_stem_channels=(8, 8, 8)), "needs one width per stride"),
    (dict(stem="conv", patch_size=6, image_size=24), "set conv_stem_strides explicitly"),
    (dict(image_size=2048, patch_size=4), "use a larger patch"),
    (dict(embed_dim=32768, num_heads=16, depth=48), "reduce embed_dim or depth"),
]


@pytest.mark.parametrize("overrides,message", INVALID, ids=[m for _, m in INVALID])
def test_invalid_configs_say_what_to_change(overrides: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        ViTConfig(**{**TINY, **overrides})
    assert message in str(info.value)


def test_absurd_config_is_refused_before_allocating() -> None:
    # ~600 billion parameters would take minutes and terabytes to allocate; refusing is instant
    with pytest.raises(ConfigError, match="parameters"):
        ViTConfig(embed_dim=65536, depth=1000, num_heads=64)


def test_unknown_keys_and_presets_are_named() -> None:
    with pytest.raises(ConfigError, match=r"unknown config keys \['emb_dim'\]"):
        ViTConfig.from_dict({**TINY, "emb_dim": 4})
    with pytest.raises(ConfigError, match="unknown preset 'vit-xl'; choose one of"):
        preset("vit-xl")


def test_bad_inputs_to_the_model_are_named() -> None:
    model = VisionTransformer(ViTConfig(**TINY)).eval()
    with pytest.raises(ConfigError, match="input 18x16 is not a positive multiple of the patch size 4"):
        model(torch.randn(1, 3, 18, 16))
    with pytest.raises(ValueError, match=r"expected images \(B, 3, H, W\)"):
        model(torch.randn(1, 1, 16, 16))
    with pytest.raises(ValueError, match=r"head_mask must have shape \(1, 2\)"):
        model(torch.randn(1, 3, 16, 16), head_mask=torch.ones(2))
    with pytest.raises(ValueError, match=r"expected \(1, 16\)"):
        model(torch.randn(1, 3, 16, 16), mask=torch.ones(15, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask mode must be one of"):
        model.forward_intermediates(torch.randn(1, 3, 16, 16), mask=torch.ones(16, dtype=torch.bool),
                                    mask_mode="zero")


OPTION_GRID = list(itertools.product(
    STEMS, POS_EMBEDS,
    [(v["prefix_tokens"], v["pool"], 2 * v["class_attn_depth"], v.get("reg_tokens", 0))
     for v in TOKEN_LAYOUTS.values()],
))


@pytest.mark.parametrize("stem,pe,layout", OPTION_GRID)
def test_estimate_parameters_is_exact(stem: str, pe: str, layout: tuple[str, str, int, int]) -> None:
    prefix, pool, class_attn, reg_tokens = layout
    modern = dict(mlp="quick_gelu" if pool == "map" else "swiglu", mlp_norm=True, k_bias=False, pre_norm=True,
                  fc_norm=pool == "gap", num_classes=0, proj_dim=8, layer_scale_init=0.1)
    for extra in (dict(), dict(mask_token=True, layer_scale_init=1e-5, talking_heads=True, qkv_bias=False,
                               num_classes=0, mlp_ratio=3.0, class_attn_mlp_ratio=2.0), modern):
        cfg = ViTConfig(**{**TINY, "image_size": (16, 24), "depth": 2, **extra}, stem=stem, pos_embed=pe,
                        prefix_tokens=prefix, pool=pool, class_attn_depth=class_attn,
                        pos_embed_prefix=not class_attn, reg_tokens=reg_tokens)
        assert cfg.estimate_parameters() == count_parameters(VisionTransformer(cfg)), extra


def test_conv_stem_with_explicit_plan() -> None:
    cfg = ViTConfig(**{**TINY, "image_size": 24, "patch_size": 6}, stem="conv", conv_stem_strides=(3, 2, 1),
                    conv_stem_channels=(8, 12, 16))
    model = VisionTransformer(cfg)
    assert cfg.conv_stem_plan() == [(8, 3), (12, 2), (16, 1)]
    assert model.patch_embed(torch.randn(1, 3, 24, 24)).shape == (1, 16, 4, 4)
    assert cfg.estimate_parameters() == count_parameters(model)


def test_json_round_trip_and_replace() -> None:
    cfg = ViTConfig(**TINY, stem="conv", conv_stem_strides=(2, 2), conv_stem_channels=(8, 8),
                    layer_scale_init=0.1, prefix_tokens="cls+dist")
    again = ViTConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg
    changed = cfg.replace(depth=3)
    assert changed.depth == 3 and changed.replace(depth=1) == cfg
    with pytest.raises(ConfigError):
        cfg.replace(pool="gap")  # validated like any other config
