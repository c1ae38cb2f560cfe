"""Named presets: small dicts of `ViTConfig` fields. Reference presets match timm exactly."""

from __future__ import annotations

from typing import Any

from .config import ConfigError, ViTConfig

_CAIT = dict(prefix_tokens="cls", pos_embed_prefix=False, layer_scale_init=1e-5, talking_heads=True,
             class_attn_depth=2)

PRESETS: dict[str, dict[str, Any]] = {
    # reference models (parameter counts equal timm's; see tests/models/test_presets.py)
    "vit-ti16": dict(embed_dim=192, depth=12, num_heads=3),
    "vit-s16": dict(embed_dim=384, depth=12, num_heads=6),
    "vit-b16": dict(embed_dim=768, depth=12, num_heads=12),
    "vit-b32-384": dict(image_size=384, patch_size=32, embed_dim=768, depth=12, num_heads=12),
    "vit-l16": dict(embed_dim=1024, depth=24, num_heads=16),
    "deit-s-distilled": dict(embed_dim=384, depth=12, num_heads=6, prefix_tokens="cls+dist"),
    "deit-b-distilled": dict(embed_dim=768, depth=12, num_heads=12, prefix_tokens="cls+dist"),
    "cait-xxs24": dict(embed_dim=192, depth=24, num_heads=4, **_CAIT),
    "cait-s24": dict(embed_dim=384, depth=24, num_heads=8, **_CAIT),
    # classroom models: 32x32 images, 4x4 patches (an 8x8 grid), train on a laptop CPU in minutes
    "classroom": dict(image_size=32, patch_size=4, num_classes=10, embed_dim=96, depth=4, num_heads=4,
                      mlp_ratio=2.0),
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
    "cait_xxs24_224": "cait-xxs24",
    "cait_s24_224": "cait-s24",
}


def preset(name: str, **overrides: Any) -> ViTConfig:
    """The config of a named preset, with any field overridden."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    return ViTConfig(**{**PRESETS[name], **overrides})
