"""The ViT paper's hybrid (R50+ViT-B/16, timm `vit_base_r50_s16_224`): the real ResNet stem (three stages of
3, 4 and 9 bottlenecks, weight-standardised SAME convolutions, GroupNorm) with a small transformer, random and
seeded, saved in timm's hub layout and as a bare state dict: the stem's feature map is the patch grid, and the
embedded tokens, every hidden state, every attention map and the logits equal timm's (float32, max |diff| <=
1e-4) at the built size and at a rectangular one. transformers 5 has no hybrid ViT (`vit_hybrid` was removed
with its other deprecated models), so timm is the only reference."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from vit_explorer.checkpoints import CheckpointError, load

from .conftest import assert_close, randomize, save_timm_hub
from .test_families_timm import timm_run

SIZES = [(64, 64), (48, 80)]  # multiples of the ResNet's stride 16: 4x4 and 3x5 grids


def build(name: str = "vit_base_r50_s16_224", **kwargs: object) -> torch.nn.Module:
    import timm

    model = timm.create_model(name, pretrained=False, embed_dim=48, depth=2, num_heads=2, img_size=64, num_classes=7,
                              dynamic_img_size=True, **kwargs)
    return randomize(model)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Path]:
    model = build()
    return model, save_timm_hub(model, tmp_path_factory.mktemp("hybrid"))


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_hybrid_parity_with_timm(hub, size: tuple[int, int]) -> None:
    model, folder = hub
    loaded = load(folder)
    assert loaded.config.stem == "hybrid" and loaded.config.hybrid_plan() == (3, 4, 9)
    x = torch.randn(2, 3, *size)
    ref = timm_run(model, x)
    with torch.no_grad():
        ours = loaded.model.forward_intermediates(x, capture="all")
        grid = model.patch_embed.backbone(x)  # (B, 1024, H/16, W/16): the ResNet's feature map
    assert ours["layout"].grid == tuple(grid.shape[-2:]) == (size[0] // 16, size[1] // 16)
    assert_close(ours["logits"], ref["out"], "logits")
    assert_close(ours["embedded"], ref["embedded"], "embedded tokens")
    for i in range(2):
        assert_close(ours["hidden_states"][i], ref["hidden"][i], f"hidden state {i}")
        assert_close(ours["attentions"][i], ref["attn"][i], f"attention {i}")
    with torch.no_grad():
        assert_close(ours["stem"], model.patch_embed.proj(grid), "the projected feature map")


def test_a_bare_hybrid_state_dict_of_other_sizes_is_refused_with_arch(tmp_path: Path) -> None:
    """A bare .pth named with --arch: every size comes from the name, so a narrower model says what differs."""
    model = build("vit_base_r50_s16_384")
    torch.save(model.state_dict(), tmp_path / "weights.pth")
    with pytest.raises(CheckpointError, match="embed_dim 768 but the weights have 48"):
        load(tmp_path / "weights.pth", arch="vit_base_r50_s16_384")  # the name says ViT-B's width
    loaded = load(save_timm_hub(model, tmp_path / "hub"))
    assert loaded.preprocessing.mean == pytest.approx((0.5, 0.5, 0.5))
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        assert_close(loaded.model(x), model(x), "logits")


@pytest.mark.slow
def test_a_bare_full_size_hybrid_state_dict_with_arch(tmp_path: Path) -> None:
    """timm's vit_base_r50_s16_224 at full size (98M parameters) as a bare state dict with --arch."""
    import timm

    model = randomize(timm.create_model("vit_base_r50_s16_224", pretrained=False))
    torch.save(model.state_dict(), tmp_path / "weights.pth")
    loaded = load(tmp_path / "weights.pth", arch="vit_base_r50_s16_224")
    assert loaded.config.estimate_parameters() == 97_890_112 and loaded.preprocessing.size == (224, 224)
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        assert_close(loaded.model(x), model(x), "features")


def test_a_hybrid_projection_wider_than_one_position_is_refused(tmp_path: Path) -> None:
    import json

    model, folder = build(), tmp_path / "hub"
    save_timm_hub(model, folder)
    config = json.loads((folder / "config.json").read_text())
    config["model_args"]["patch_size"] = 2
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="model_args patch_size=2 for the hybrid .*feature map"):
        load(folder)


@pytest.mark.parametrize("name", ["vit_base_r50_s16_224", "vit_base_r50_s16_384", "vit_large_r50_s32_224",
                                  "vit_large_r50_s32_384"])
def test_each_hybrid_name_has_timms_keys_and_shapes(name: str) -> None:
    """Full size, on the meta device: the config the name gives has timm's every key, shape and count."""
    import timm

    from vit_explorer.checkpoints.timm_format import config_from_timm
    from vit_explorer.models import VisionTransformer

    with torch.device("meta"):
        reference = timm.create_model(name)
        theirs = {k: tuple(v.shape) for k, v in reference.state_dict().items()}
        ours = VisionTransformer(config_from_timm(name, reference.state_dict(), {}, "test"))
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == theirs
    assert ours.config.estimate_parameters() == sum(p.numel() for p in reference.parameters())
