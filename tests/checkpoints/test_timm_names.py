"""Real timm architectures, at full size on the meta device (nothing allocated): our reader turns
their state dicts into a config whose model has exactly the same keys, shapes and heads, and the
reference presets are what the matching timm names read as."""

from __future__ import annotations

import pytest
import torch

from vit_explorer.checkpoints import CheckpointError
from vit_explorer.checkpoints.build import check_state_dict
from vit_explorer.checkpoints.timm_format import config_from_timm, parse_name, timm_to_native
from vit_explorer.models import VisionTransformer
from vit_explorer.models.presets import TIMM_NAMES, preset

EXTRA_NAMES = ["vit_small_patch16_384", "vit_base_patch32_224", "vit_huge_patch14_224",
               "deit_base_distilled_patch16_384", "cait_xxs36_384", "cait_xs24_384",
               "vit_base_patch14_dinov2", "vit_giant_patch14_reg4_dinov2", "vit_large_patch14_clip_quickgelu_336",
               "vit_huge_patch14_clip_224", "vit_base_patch32_clip_224.openai", "vit_so400m_patch14_siglip_378",
               "vit_large_patch16_siglip_gap_512", "vit_base_patch16_siglip_512", "deit3_medium_patch16_224",
               "deit3_huge_patch14_224", "beit_large_patch16_512", "beitv2_base_patch16_224",
               "eva02_base_patch14_448", "eva02_large_patch14_224", "eva02_small_patch14_336"]


def timm_meta_state(name: str) -> tuple[dict[str, torch.Tensor], int]:
    """(state dict on meta, heads) of the real timm model."""
    import timm

    with torch.device("meta"):
        model = timm.create_model(name, pretrained=False)
    return model.state_dict(), model.blocks[0].attn.num_heads


@pytest.mark.parametrize("name", sorted(TIMM_NAMES) + EXTRA_NAMES)
def test_real_timm_architectures_read_exactly(name: str) -> None:
    state, heads = timm_meta_state(name)
    config = config_from_timm(name, state, {}, name)
    state = timm_to_native(state, config)
    assert config.num_heads == heads
    with torch.device("meta"):
        ours = VisionTransformer(config)
    check_state_dict(ours, state, name)  # raises, naming every difference
    if name in TIMM_NAMES:
        expected = preset(TIMM_NAMES[name])
        assert config.replace(layer_scale_init=expected.layer_scale_init) == expected


@pytest.mark.parametrize("name", ["timm/vit_base_patch16_224.augreg2_in21k_ft_in1k", "cait_s24_224.fb_dist_in1k",
                                  "deit_small_distilled_patch16_224"])
def test_names_with_hub_prefix_and_tag_parse(name: str) -> None:
    assert parse_name(name).num_heads in (6, 8, 12)


@pytest.mark.parametrize("name", ["swin_tiny_patch4_window7_224", "vit_giant_patch14_clip_224",
                                  "eva02_base_patch16_clip_224", "beit3_base_patch16_224"])
def test_unsupported_names_are_refused_with_the_list(name: str) -> None:
    with pytest.raises(CheckpointError, match="supported names: vit_"):
        parse_name(name)
