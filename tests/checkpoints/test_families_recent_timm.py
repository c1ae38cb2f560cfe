"""What the families of issue 18 bring from timm beyond the parity of test_families_timm.py: SigLIP 2 as
timm's NaFlexVit (its own module layout, so its own parity test: a Linear patch embedding and a 4x4 table
resampled bilinearly to each grid, at three aspect ratios), the Perception Encoder's head is its
projection to the joint space, a bare DINOv3 state dict loads by its name alone at full size, each
family gets its own preprocessing, and a timm argument we do not model is refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from vit_explorer.checkpoints import CheckpointError, load

from .conftest import assert_close, assert_same_model, randomize, save_timm_hub
from .test_families_timm import build, timm_run


@pytest.fixture(scope="module")
def naflex(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Path]:
    import timm
    from timm.models._hub import save_for_hf

    model = randomize(timm.create_model("naflexvit_base_patch16_siglip", pretrained=False, embed_dim=48, depth=2,
                                        num_heads=2, patch_size=8, pos_embed_grid_size=(4, 4)))
    folder = tmp_path_factory.mktemp("naflex")
    save_for_hf(model, str(folder), safe_serialization=True,
                data_config={"input_size": (3, 32, 32), "crop_pct": 1.0, "interpolation": "bilinear"})
    return model, folder


@pytest.mark.parametrize("size", [(32, 32), (24, 48), (40, 16)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_naflexvit_siglip2_parity(naflex, size: tuple[int, int]) -> None:
    model, folder = naflex
    loaded = load(folder)
    assert (loaded.config.pe_resample, loaded.config.image_size, loaded.config.pool) == ("bilinear", (32, 32), "map")
    x = torch.randn(2, 3, *size)
    ref = timm_run(model, x)
    with torch.no_grad():
        ours = loaded.model.forward_intermediates(x, capture="all")
    assert_close(ours["logits"], ref["out"], "features")
    assert_close(ours["embedded"], ref["embedded"], "embedded tokens")
    for i in range(2):
        assert_close(ours["hidden_states"][i], ref["hidden"][i], f"hidden state {i}")
        assert_close(ours["attentions"][i], ref["attn"][i], f"attention {i}")


def test_a_pe_tower_head_is_the_projection_to_the_joint_space(tmp_path: Path) -> None:
    """timm keeps PE's projection as `head` with a zero bias (as CLIP's): we load it as the embedding."""
    model = build("pe")
    with torch.no_grad():
        model.head.bias.zero_()
    loaded = load(save_timm_hub(model, tmp_path / "pe"))
    cfg = loaded.config
    assert cfg.num_classes == 0 and cfg.proj_dim == model.head.out_features and loaded.labels == []
    assert (cfg.pool, cfg.pool_heads, cfg.pool_prefix, cfg.pos_embed) == ("map", 8, True, "learned+rope_xy")
    x = torch.randn(2, 3, 24, 48)
    with torch.no_grad():
        out = loaded.model.forward_intermediates(x, capture="pool_attention")
        assert_close(out["logits"], model(x), "projected embedding")
    assert out["pool_attention"].shape == (2, 8, 1, 1 + 3 * 6)  # the latent reads [CLS] and every patch


def test_bare_dinov3_state_dict_with_arch_at_full_size(tmp_path: Path) -> None:
    import timm

    model = randomize(timm.create_model("vit_small_patch16_dinov3", pretrained=False))
    torch.save(model.state_dict(), tmp_path / "weights.pth")
    loaded = load(tmp_path / "weights.pth", arch="vit_small_patch16_dinov3")
    x = torch.randn(1, 3, 224, 160)
    with torch.no_grad():
        assert_close(loaded.model(x), model(x), "features")


@pytest.mark.parametrize("case,mean,size", [("dinov3", (0.485, 0.456, 0.406), 224),
                                            ("aimv2", (0.48145466, 0.4578275, 0.40821073), 224),
                                            ("pe", (0.5, 0.5, 0.5), 224)])
def test_family_preprocessing_without_a_pretrained_cfg(case: str, mean: tuple, size: int) -> None:
    from vit_explorer.checkpoints.timm_format import parse_name, preprocess_from_timm
    from vit_explorer.models import ViTConfig

    from .test_families_timm import FAMILIES

    name = FAMILIES[case][0]
    pre = preprocess_from_timm({}, ViTConfig(image_size=size, num_classes=0), name, "test")
    assert pre.mean == pytest.approx(mean) and pre.size == (size, size)
    assert parse_name(name).family == case


@pytest.mark.parametrize("rope_type", ["dinov3", "mixed", "cat"])
def test_a_rope_argument_is_checked_against_the_one_the_name_builds_with(tmp_path: Path, rope_type: str) -> None:
    """model_args rope_type='dinov3' is DINOv3's own (it loads); another value is refused, naming the name's."""
    folder = save_timm_hub(build("dinov3"), tmp_path / "dinov3")
    config = json.loads((folder / "config.json").read_text())
    config["model_args"]["rope_type"] = rope_type
    (folder / "config.json").write_text(json.dumps(config))
    if rope_type == "dinov3":
        assert load(folder).config.pos_embed == "rope_dinov3"
        return
    with pytest.raises(CheckpointError, match=f"model_args.rope_type = '{rope_type}' is not supported; vit-explorer "
                                              "builds 'vit_.*_dinov3.*' with rope_type = 'dinov3'"):
        load(folder)


# every size of the new families (beside the preset ones in test_timm_names.py), at full size on the meta device
REAL_NAMES = ["vit_small_plus_patch16_dinov3", "vit_large_patch16_dinov3_qkvb", "vit_huge_plus_patch16_dinov3",
              "vit_tiny_patch16_dinov3_qkvb", "aimv2_huge_patch14_448", "aimv2_3b_patch14_224",
              "vit_pe_core_tiny_patch16_384", "vit_pe_core_large_patch14_336", "vit_pe_core_gigantic_patch14_448",
              "naflexvit_so400m_patch16_siglip", "vit_7b_patch16_dinov3"]


@pytest.mark.parametrize("name", REAL_NAMES)
def test_real_sizes_read_exactly(name: str) -> None:
    from vit_explorer.checkpoints.build import check_state_dict
    from vit_explorer.checkpoints.timm_format import config_from_timm, timm_to_native
    from vit_explorer.models import VisionTransformer, count_parameters

    from .test_timm_names import timm_meta_state

    state, heads = timm_meta_state(name)
    config = config_from_timm(name, state, {}, name)
    native = timm_to_native(state, config)
    with torch.device("meta"):
        ours = VisionTransformer(config)
    check_state_dict(ours, native, name)  # raises, naming every difference
    assert config.num_heads == heads and count_parameters(ours) == sum(t.numel() for t in state.values()
                                                                         if not t.dtype == torch.long)


@pytest.mark.parametrize("free_gib, fits", [(16, True), (10, False)])
def test_whether_dinov3_7b_opens_is_the_memory_checks_to_say(monkeypatch: pytest.MonkeyPatch, free_gib: int,
                                                            fits: bool) -> None:
    """DINOv3 7B (6.7e9 parameters, 12.5 GiB in bf16) is within the configuration's limits; in its stored bf16
    it fits in 16 GiB free and not in 10, and the refusal says what it needs in which dtype."""
    from vit_explorer.checkpoints import memory
    from vit_explorer.checkpoints.timm_format import config_from_timm

    from .test_timm_names import timm_meta_state

    state, _ = timm_meta_state("vit_7b_patch16_dinov3")
    config = config_from_timm("vit_7b_patch16_dinov3", state, {}, "vit_7b_patch16_dinov3")
    assert config.estimate_parameters() == sum(t.numel() for t in state.values() if t.dtype != torch.long)
    monkeypatch.setattr(memory, "available_bytes", lambda device: free_gib * 2**30)
    check = lambda: memory.check_model_fits(config, torch.device("cpu"), "7b", dtype=torch.bfloat16)  # noqa: E731
    if fits:
        check()
    else:
        with pytest.raises(memory.BudgetError, match=r"in bfloat16\) on .* needs about 12\.\d GiB"):
            check()


def test_fixed_resolution_siglip2_is_timm_siglip_with_the_v2_tag() -> None:
    """timm's fixed-resolution SigLIP 2 towers are its SigLIP architecture with the v2_webli weights."""
    from vit_explorer.checkpoints.timm_format import parse_name

    assert parse_name("timm/vit_so400m_patch16_siglip_384.v2_webli").family == "siglip"


@pytest.mark.parametrize("case", ["dinov3_swiglu", "aimv2", "pe"])
def test_each_recent_family_round_trips_through_the_native_format(tmp_path: Path, case: str) -> None:
    from vit_explorer.checkpoints import convert

    loaded = load(save_timm_hub(build(case), tmp_path / "timm"))
    again = load(convert(loaded, "native", tmp_path / "native"))
    assert again.kind == "native" and again.config == loaded.config
    x = torch.randn(2, 3, 24, 48)
    assert_same_model(again, loaded, x)


def test_naflex_round_trips_through_the_native_format(naflex, tmp_path: Path) -> None:
    from vit_explorer.checkpoints import convert

    loaded = load(naflex[1])
    again = load(convert(loaded, "native", tmp_path / "native"))
    assert again.config == loaded.config and again.config.pe_resample == "bilinear"
    x = torch.randn(1, 3, 40, 16)
    assert_same_model(again, loaded, x)
