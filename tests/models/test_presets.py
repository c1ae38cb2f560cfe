"""Reference presets equal timm's models (parameter counts, state-dict keys and shapes); DeiT's and
CaiT's special token handling."""

from __future__ import annotations

import pytest
import timm
import torch

from vit_explorer.models import PRESETS, VisionTransformer, ViTConfig, count_parameters, preset
from vit_explorer.models.presets import TIMM_NAMES

# the numbers in DESIGN.md and issue 2 (timm's counts)
EXPECTED = {
    "vit-ti16": 5_717_416,
    "vit-s16": 22_050_664,
    "vit-b16": 86_567_656,
    "vit-b32-384": 88_297_192,
    "vit-l16": 304_326_632,
    "deit-s-distilled": 22_436_432,
    "deit-b-distilled": 87_338_192,
    "vit-b16-r50": 97_890_112,
    "vit-b16-r50-384": 98_950_952,
    "cait-xxs24": 11_956_264,
    "cait-s24": 46_916_200,
    "dinov2-s14": 22_056_192,
    "dinov2-s14-reg4": 22_057_344,
    "dinov2-g14": 1_136_479_232,
    "clip-b16": 86_193_152,
    "siglip-b16": 92_884_224,
    "mae-b16": 85_798_656,
    "deit3-s16": 22_059_496,
    "beit-b16": 86_530_984,
    "eva02-ti14": 5_502_144,
}
# issue 18 (part B): timm's counts of vit_base_patch16_dinov3, aimv2_large_patch14_224, vit_pe_core_base_patch16_224,
# naflexvit_base_patch16_siglip
EXPECTED.update({"dinov3-b16": 85_641_216, "aimv2-l14": 309_197_824, "pe-core-b16": 93_673_984,
                 "siglip2-b16-naflex": 92_930_304})


def meta_models(timm_name: str) -> tuple[torch.nn.Module, VisionTransformer]:
    """timm's model and ours, built on the meta device (shapes only, no memory, no init cost)."""
    with torch.device("meta"):
        return timm.create_model(timm_name), VisionTransformer(preset(TIMM_NAMES[timm_name]))


@pytest.mark.parametrize("timm_name", sorted(TIMM_NAMES))
def test_parameter_count_equals_timm(timm_name: str) -> None:
    reference, ours = meta_models(timm_name)
    name = TIMM_NAMES[timm_name]
    assert count_parameters(ours) == count_parameters(reference) == EXPECTED[name]
    assert preset(name).estimate_parameters() == EXPECTED[name]


def test_every_reference_preset_has_a_timm_name() -> None:
    assert set(EXPECTED) == set(TIMM_NAMES.values())


def timm_to_ours(key: str) -> str:
    """CaiT's names in timm -> ours (ViT and DeiT keys are the same in both)."""
    key = key.replace("blocks_token_only.", "class_blocks.")
    return key.replace("gamma_1", "ls1.gamma").replace("gamma_2", "ls2.gamma")


@pytest.mark.parametrize("timm_name", ["vit_tiny_patch16_224", "deit_small_distilled_patch16_224", "cait_xxs24_224"])
def test_state_dict_keys_and_shapes_equal_timm(timm_name: str) -> None:
    reference, ours = meta_models(timm_name)
    theirs = {timm_to_ours(k): tuple(v.shape) for k, v in reference.state_dict().items()}
    mine = {k: tuple(v.shape) for k, v in ours.state_dict().items()}
    assert sorted(set(theirs) - set(mine)) == [], "keys timm has and we lack"
    assert sorted(set(mine) - set(theirs)) == [], "keys we have and timm lacks"
    assert {k for k in mine if mine[k] != theirs[k]} == set(), "shapes differ"


@pytest.mark.parametrize("name", ["classroom", "classroom-tiny", "vit-ti4-32"])
def test_classroom_presets_run_at_32px(name: str) -> None:
    model = VisionTransformer(preset(name)).eval()
    with torch.no_grad():
        logits = model(torch.randn(2, 3, 32, 32))
    assert logits.shape == (2, 10) and torch.isfinite(logits).all()
    assert count_parameters(model) == preset(name).estimate_parameters()
    assert model.layout().grid == (8, 8)


def test_classroom_presets_are_small_enough_for_a_laptop() -> None:
    assert preset("classroom-tiny").estimate_parameters() < preset("classroom").estimate_parameters() < 500_000
    assert set(PRESETS) >= set(EXPECTED) | {"classroom", "classroom-tiny", "vit-ti4-32"}


def test_deit_logits_are_the_mean_of_both_heads() -> None:
    cfg = ViTConfig(image_size=16, patch_size=4, num_classes=7, embed_dim=16, depth=2, num_heads=2,
                    prefix_tokens="cls+dist")
    model = VisionTransformer(cfg).eval()
    x = torch.randn(3, 3, 16, 16)
    with torch.no_grad():
        out = model.forward_intermediates(x, capture=["hidden_states", "with_prefix"])
        final = model.norm(out["hidden_states"][-1])  # (B, 2+N, D): [CLS], [DIST], patches
        cls_logits, dist_logits = model.head(final[:, 0]), model.head_dist(final[:, 1])
        logits = model(x)
    assert out["layout"].prefix_names == ("cls", "dist")
    assert torch.equal(out["with_prefix"][:, 0], model.cls_token[0].expand(3, -1))
    assert torch.equal(out["with_prefix"][:, 1], model.dist_token[0].expand(3, -1))
    torch.testing.assert_close(out["head_logits"]["cls"], cls_logits, atol=0, rtol=0)
    torch.testing.assert_close(out["head_logits"]["dist"], dist_logits, atol=0, rtol=0)
    assert not torch.allclose(cls_logits, dist_logits)  # the heads differ, so the mean is a real test
    torch.testing.assert_close(logits, (cls_logits + dist_logits) / 2, atol=1e-7, rtol=0)
    assert model.config.estimate_parameters() == count_parameters(model)


def test_cait_cls_is_absent_from_self_attention() -> None:
    cfg = ViTConfig(image_size=(16, 20), patch_size=4, num_classes=5, embed_dim=16, depth=2, num_heads=2,
                    class_attn_depth=2, pos_embed_prefix=False, layer_scale_init=0.5, talking_heads=True)
    model = VisionTransformer(cfg).eval()
    x = torch.randn(2, 3, 16, 20)
    n = 4 * 5
    with torch.no_grad():
        out = model.forward_intermediates(x, capture="all")
        model.cls_token.add_(1.0)  # a different [CLS] must not touch the self-attention stage
        moved = model.forward_intermediates(x, capture="all")
    layout = out["layout"]
    assert layout.prefix_names == () and layout.class_attn and layout.num_tokens == n
    assert model.pos_embed.shape == (1, n, 16)  # PE covers patches only
    assert all(h.shape == (2, n, 16) for h in out["hidden_states"])
    assert all(a.shape == (2, 2, n, n) for a in out["attentions"])
    assert all(c.shape == (2, 1, 16) for c in out["class_tokens"])
    assert all(a.shape == (2, 2, 1, 1 + n) for a in out["class_attentions"])
    for before, after in zip(out["hidden_states"], moved["hidden_states"], strict=True):
        assert torch.equal(before, after)
    assert not torch.allclose(out["logits"], moved["logits"])
    # the final [CLS] is the last class-attention block's output, read by the head after the norm
    expected = model.head(model.norm(out["class_tokens"][-1][:, 0]))
    torch.testing.assert_close(out["logits"], expected, atol=0, rtol=0)
