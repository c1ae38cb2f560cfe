"""Named presets: small dicts of `ViTConfig` fields. Reference presets match timm exactly."""

from __future__ import annotations

from typing import Any

from .config import ConfigError, ViTConfig

_CAIT = dict(prefix_tokens="cls", pos_embed_prefix=False, layer_scale_init=1e-5, talking_heads=True,
             class_attn_depth=2)
_DINOV2 = dict(embed_dim=384, depth=12, num_heads=6, layer_scale_init=1e-5)

PRESETS: dict[str, dict[str, Any]] = {
    # reference models (parameter counts equal timm's; see tests/models/test_presets.py)
    "vit-ti16": dict(embed_dim=192, depth=12, num_heads=3),
    "vit-s16": dict(embed_dim=384, depth=12, num_heads=6),
    "vit-b16": dict(embed_dim=768, depth=12, num_heads=12),
    "vit-b32-384": dict(image_size=384, patch_size=32, embed_dim=768, depth=12, num_heads=12),
    "vit-l16": dict(embed_dim=1024, depth=24, num_heads=16),
    "deit-s-distilled": dict(embed_dim=384, depth=12, num_heads=6, prefix_tokens="cls+dist"),
    "deit-b-distilled": dict(embed_dim=768, depth=12, num_heads=12, prefix_tokens="cls+dist"),
    # the ViT paper's hybrid R50+ViT-B/16: a ResNet-50's first three stages, their feature map the patch grid
    # (timm's default weights for 224 are the in21k features, without a classifier)
    "vit-b16-r50": dict(embed_dim=768, depth=12, num_heads=12, num_classes=0, stem="hybrid"),
    "vit-b16-r50-384": dict(image_size=384, embed_dim=768, depth=12, num_heads=12, stem="hybrid"),
    "cait-xxs24": dict(embed_dim=192, depth=24, num_heads=4, **_CAIT),
    "cait-s24": dict(embed_dim=384, depth=24, num_heads=8, **_CAIT),
    # modern families (features-only where the reference checkpoints have no classifier)
    "dinov2-s14": dict(image_size=518, patch_size=14, num_classes=0, **_DINOV2),
    "dinov2-s14-reg4": dict(image_size=518, patch_size=14, num_classes=0, reg_tokens=4, pos_embed_prefix=False,
                            **_DINOV2),
    "dinov2-g14": dict(image_size=518, patch_size=14, num_classes=0, embed_dim=1536, depth=40, num_heads=24,
                       mlp="swiglu", mlp_ratio=4096 / 1536, layer_scale_init=1e-5),
    # transformers' Dinov2ForImageClassification (facebook/dinov2-small-imagenet1k-1-layer): [CLS] + mean of patches
    "dinov2-s14-in1k": dict(image_size=224, patch_size=14, num_classes=1000, pool="cls+mean", **_DINOV2),
    # I-JEPA (transformers ijepa, facebook/ijepa_vith14_1k): no [CLS], features the mean of the normed patches
    "ijepa-h14": dict(patch_size=14, embed_dim=1280, depth=32, num_heads=16, num_classes=0, prefix_tokens="none",
                      pool="gap", layer_norm_eps=1e-6),
    # timm's CLIP tower: the projection to the 512-d joint space is its head (with a zero bias)
    "clip-b16": dict(embed_dim=768, depth=12, num_heads=12, num_classes=512, pre_norm=True, mlp="quick_gelu",
                     layer_norm_eps=1e-5),
    "siglip-b16": dict(embed_dim=768, depth=12, num_heads=12, num_classes=0, prefix_tokens="none", pool="map"),
    "mae-b16": dict(embed_dim=768, depth=12, num_heads=12, num_classes=0),
    "deit3-s16": dict(embed_dim=384, depth=12, num_heads=6, pos_embed_prefix=False, layer_scale_init=1e-6),
    "beit-b16": dict(embed_dim=768, depth=12, num_heads=12, pos_embed="rel_bias", k_bias=False, layer_scale_init=0.1,
                     pool="gap", fc_norm=True),
    "eva02-ti14": dict(patch_size=14, embed_dim=192, depth=12, num_heads=3, num_classes=0, mlp="swiglu",
                       mlp_ratio=4 * 2 / 3, k_bias=False, pos_embed="learned+rope", rope_theta=10000.0,
                       rope_ref_grid=(16, 16), pool="gap", fc_norm=True),
    # issue 18: DINOv3 (features-only, pooled as timm does: the mean of the patches), AIMv2, the Perception
    # Encoder (timm keeps its projection to the joint space as `head`, with a zero bias, as CLIP's)
    "dinov3-b16": dict(embed_dim=768, depth=12, num_heads=12, num_classes=0, qkv_bias=False, reg_tokens=4,
                       layer_scale_init=1e-5, pos_embed="rope_dinov3", pool="gap", layer_norm_eps=1e-5),
    "aimv2-l14": dict(patch_size=14, embed_dim=1024, depth=24, num_heads=8, num_classes=0, prefix_tokens="none",
                      pool="gap", mlp="swiglu", mlp_ratio=2.75, qkv_bias=False, proj_bias=False, norm="rmsnorm",
                      embed_norm=True, layer_norm_eps=1e-5),
    "pe-core-b16": dict(embed_dim=768, depth=12, num_heads=12, num_classes=1024, pre_norm=True,
                        pos_embed="learned+rope_xy", rope_theta=10000.0, rope_ref_grid=(14, 14), rope_offset=1.0,
                        pool="map", pool_heads=8, pool_mlp_ratio=4.0, pool_prefix=True, layer_norm_eps=1e-5),
    # SigLIP 2 with NaFlex (timm's NaFlexVit): a 16x16 table resampled bilinearly to each image's grid
    "siglip2-b16-naflex": dict(image_size=256, embed_dim=768, depth=12, num_heads=12, num_classes=0,
                               prefix_tokens="none", pool="map", mlp="gelu_tanh", pe_resample="bilinear"),
    # classroom models: 32x32 images, 4x4 patches (an 8x8 grid), train on a laptop CPU in minutes
    # pre_norm: a LayerNorm on the embedded patches; with mimetic attention init (training/init.py) it takes
    # the patchify stem from about 25 % to about 75 % on `shapes` in a two-minute run
    "classroom": dict(image_size=32, patch_size=4, num_classes=10, embed_dim=96, depth=4, num_heads=4,
                      mlp_ratio=2.0, pre_norm=True),
    # the same with the convolutional stem of Xiao et al. (the bundled model's): it learns fastest, so the
    # Training view starts with it (82 % on `shapes` in 60 s on one thread of a 2-core laptop, training/expect.py)
    "classroom-conv": dict(image_size=32, patch_size=4, num_classes=10, embed_dim=96, depth=4, num_heads=4,
                           mlp_ratio=2.0, pre_norm=True, stem="conv"),
    "classroom-tiny": dict(image_size=32, patch_size=4, num_classes=10, embed_dim=64, depth=2, num_heads=2,
                           mlp_ratio=2.0),
    "vit-ti4-32": dict(image_size=32, patch_size=4, num_classes=10, embed_dim=192, depth=12, num_heads=3),
}

# timm model names of the reference presets (the timm loader parses names itself; tests check both agree)
TIMM_NAMES: dict[str, str] = {
    "vit_tiny_patch16_224": "vit-ti16",
    "vit_small_patch16_224": "vit-s16",
    "vit_base_patch16_224": "vit-b16",
    "vit_base_patch32_384": "vit-b32-384",
    "vit_large_patch16_224": "vit-l16",
    "deit_tiny_patch16_224": "vit-ti16",
    "deit_small_patch16_224": "vit-s16",
    "deit_base_patch16_224": "vit-b16",
    "deit_small_distilled_patch16_224": "deit-s-distilled",
    "deit_base_distilled_patch16_224": "deit-b-distilled",
    "vit_base_r50_s16_224": "vit-b16-r50",
    "vit_base_r50_s16_384": "vit-b16-r50-384",
    "cait_xxs24_224": "cait-xxs24",
    "cait_s24_224": "cait-s24",
    "vit_small_patch14_dinov2": "dinov2-s14",
    "vit_small_patch14_reg4_dinov2": "dinov2-s14-reg4",
    "vit_giant_patch14_dinov2": "dinov2-g14",
    "vit_base_patch16_clip_quickgelu_224": "clip-b16",
    "vit_base_patch16_siglip_224": "siglip-b16",
    "vit_base_patch16_224.mae": "mae-b16",
    "deit3_small_patch16_224": "deit3-s16",
    "beit_base_patch16_224": "beit-b16",
    "eva02_tiny_patch14_224": "eva02-ti14",
    # issue 18
    "vit_base_patch16_dinov3": "dinov3-b16",
    "aimv2_large_patch14_224": "aimv2-l14",
    "vit_pe_core_base_patch16_224": "pe-core-b16",
    "naflexvit_base_patch16_siglip": "siglip2-b16-naflex",
}


def preset(name: str, **overrides: Any) -> ViTConfig:
    """The config of a named preset, with any field overridden."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    return ViTConfig(**{**PRESETS[name], **overrides})
