"""The families of issue 18 from Hugging Face transformers (DINOv3 with registers, its qkv and SwiGLU
variants, and AIMv2's image tower with its attention-pooling head, without it, and native-resolution), tiny and
random, saved with `save_pretrained` and loaded through our loaders: the embedded tokens, every hidden state, every
attention map, the final normed tokens and the pooled features equal transformers' (eager attention, float32,
max |diff| <= 1e-4). DINOv3's RoPE and AIMv2-native's sine-cosine table follow any input, so they run at the built
size and at a rectangular one; AIMv2's other transformers models have a fixed square table, so they are built,
and compared, at two square sizes. Without its head AIMv2 has no pooled output: our features are the mean of the
normed patch tokens, compared with transformers' last_hidden_state.mean(1)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from vit_explorer.checkpoints import CheckpointError, convert, load

from .conftest import assert_close, randomize

TINY = dict(hidden_size=48, num_hidden_layers=2, num_attention_heads=2, intermediate_size=96, patch_size=8)


def _dinov3(**extra: Any) -> Callable[[int], torch.nn.Module]:
    def make(size: int) -> torch.nn.Module:
        from transformers import DINOv3ViTConfig, DINOv3ViTModel

        return DINOv3ViTModel(DINOv3ViTConfig(**TINY, image_size=size, num_register_tokens=4, layerscale_value=0.5,
                                              **extra))
    return make


def _aimv2(**extra: Any) -> Callable[[int], torch.nn.Module]:
    def make(size: int) -> torch.nn.Module:
        from transformers import Aimv2VisionConfig, Aimv2VisionModel

        return Aimv2VisionModel(Aimv2VisionConfig(**TINY, image_size=size, **extra))
    return make


def _aimv2_model(**extra: Any) -> Callable[[int], torch.nn.Module]:
    """The two-tower model: we read its image tower and the projection to the joint space."""
    def make(size: int) -> torch.nn.Module:
        from transformers import Aimv2Config, Aimv2Model

        text = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=99)
        return Aimv2Model(Aimv2Config(text_config=text, vision_config=dict(**TINY, image_size=size, **extra),
                                      projection_dim=16))
    return make


# case -> (model at a square size, the input sizes it is compared at, the square sizes it is built at)
CASES: dict[str, tuple[Callable[[int], torch.nn.Module], list[tuple[int, int]]]] = {
    "dinov3": (_dinov3(), [(32, 32), (24, 48)]),
    "dinov3_qkv_bias": (_dinov3(key_bias=True), [(32, 32), (24, 48)]),
    "dinov3_swiglu": (_dinov3(use_gated_mlp=True, hidden_act="silu", query_bias=False, value_bias=False),
                      [(32, 32), (24, 48)]),
    "aimv2": (_aimv2(), [(32, 32), (48, 48)]),
    "aimv2_model": (_aimv2_model(), [(32, 32)]),
    "aimv2_native": (_aimv2(is_native=True), [(32, 32), (24, 48)]),
    "aimv2_headless": (_aimv2(use_head=False), [(32, 32), (48, 48)]),
    "aimv2_native_headless": (_aimv2(is_native=True, use_head=False), [(32, 32), (40, 16)]),
    "aimv2_model_native": (_aimv2_model(is_native=True), [(32, 32), (24, 48)]),
}
PARAMS = [(case, size) for case, (_, sizes) in CASES.items() for size in sizes]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory):
    cache: dict[tuple[str, int], tuple[torch.nn.Module, Path]] = {}

    def get(case: str, side: int) -> tuple[torch.nn.Module, Path]:
        if (case, side) not in cache:
            torch.manual_seed(0)
            model = randomize(CASES[case][0](side))
            model.set_attn_implementation("eager")
            folder = tmp_path_factory.mktemp(f"{case}_{side}")
            model.save_pretrained(folder)
            cache[case, side] = model, folder
        return cache[case, side]

    return get


@pytest.mark.parametrize("case,size", PARAMS, ids=[f"{c}-{h}x{w}" for c, (h, w) in PARAMS])
def test_recent_hf_family_parity(saved, case: str, size: tuple[int, int]) -> None:
    # a learned table (AIMv2) is built at the size it runs at; RoPE (DINOv3) and a sine-cosine table (AIMv2
    # native) run at any size from the 32x32 model
    model, folder = saved(case, size[0] if size[0] == size[1] else 32)
    loaded = load(folder)
    assert loaded.kind == "hf"
    x = torch.randn(2, 3, *size)
    tower = getattr(model, "vision_model", model)
    with torch.no_grad():
        ref = tower(x, output_hidden_states=True, output_attentions=True)
        ours = loaded.model.forward_intermediates(x, capture="all")
    # without its head (use_head=False) HF has no pooled output: ours is the mean of the normed patch tokens
    pooled = ref.last_hidden_state.mean(1) if ref.pooler_output is None else ref.pooler_output
    features = model.visual_projection(pooled) if tower is not model else pooled
    assert_close(ours["logits"], features, "pooled (projected) features")
    assert len(ref.hidden_states) == 3 and len(ref.attentions) == 2
    assert_close(ours["embedded"], ref.hidden_states[0], "embedded tokens")
    for i in range(2):
        assert_close(ours["hidden_states"][i], ref.hidden_states[i + 1], f"hidden state {i}")
        assert_close(ours["attentions"][i], ref.attentions[i], f"attention {i}")
    with torch.no_grad():
        assert_close(loaded.model.norm(ours["hidden_states"][-1]), ref.last_hidden_state, "last hidden state")


def test_dinov3_layout_registers_and_mask_token(saved) -> None:
    """[CLS], four registers, then the patches; HF's [MASK] replaces patch embeddings as ours does."""
    model, folder = saved("dinov3", 32)
    loaded = load(folder)
    layout = loaded.model.layout()
    assert layout.prefix_names == ("cls", "reg0", "reg1", "reg2", "reg3")
    assert loaded.config.pos_embed == "rope_dinov3" and loaded.config.mask_token
    x, mask = torch.randn(2, 3, 32, 32), torch.rand(2, 16) < 0.5
    with torch.no_grad():
        ref = model(x, bool_masked_pos=mask).pooler_output
        ours = loaded.model(x, mask=mask)
    assert_close(ours, ref, "features with [MASK]")


def test_preprocessing_defaults(saved) -> None:
    """Without preprocessor_config.json: DINOv3ViTImageProcessor's and CLIP's (AIMv2's hub folders) defaults."""
    dinov3 = load(saved("dinov3", 32)[1]).preprocessing
    assert dinov3.mean == pytest.approx((0.485, 0.456, 0.406)) and dinov3.interpolation == "bilinear"
    aimv2 = load(saved("aimv2", 32)[1]).preprocessing
    assert aimv2.mean == pytest.approx((0.48145466, 0.4578275, 0.40821073)) and aimv2.crop


def test_what_hf_cannot_hold_is_refused(saved, tmp_path: Path) -> None:
    loaded = load(saved("aimv2", 32)[1])
    with pytest.raises(CheckpointError, match=r"norm='rmsnorm'.*embed_norm=True.*proj_bias=False"):
        convert(loaded, "hf", tmp_path / "out")


def test_aimv2_native_and_headless_say_what_they_are(saved, tmp_path: Path) -> None:
    """is_native: no learned table (none in the weights, none in ours), the columns-first sine-cosine scheme;
    use_head=False: the mean of the normed patches, which the details say; neither is written as HF."""
    native = load(saved("aimv2_native_headless", 32)[1])
    assert (native.config.pos_embed, native.config.pool) == ("sincos_2d_xy", "gap")
    assert not any(name.startswith("pos_embed") for name, _ in native.model.named_parameters())
    assert "mean of the normed patch tokens" in native.details["features"]
    assert "features" not in load(saved("aimv2_native", 32)[1]).details  # its head pools
    with pytest.raises(CheckpointError, match="position embedding 'sincos_2d_xy'"):
        convert(native, "hf", tmp_path / "out")


def _edited(folder: Path, tmp_path: Path, **fields: Any) -> Path:
    """A copy of a saved folder whose config.json (or its vision_config, for the keys given there) is changed."""
    import json
    import shutil

    copy = shutil.copytree(folder, tmp_path / "copy")
    config = json.loads((copy / "config.json").read_text())
    vision = fields.pop("vision_config", None)
    config.update(fields)
    if vision:
        config["vision_config"].update(vision)
    (copy / "config.json").write_text(json.dumps(config))
    return copy


def test_aimv2_variants_we_do_not_have_are_named(saved, tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="mlp_bias"):
        load(_edited(saved("aimv2", 32)[1], tmp_path, mlp_bias=True))


def test_a_two_tower_aimv2_without_its_head_is_refused(saved, tmp_path: Path) -> None:
    """Aimv2Model's projection reads the head's pooled output: without the head transformers has no image features."""
    with pytest.raises(CheckpointError, match=r"vision_config\.use_head must be true in an Aimv2Model"):
        load(_edited(saved("aimv2_model", 32)[1], tmp_path, vision_config={"use_head": False}))


# ------------------------------------------------------------------------------ SigLIP 2 (NaFlex)
def _siglip2(two_towers: bool) -> torch.nn.Module:
    from transformers import Siglip2Config, Siglip2Model, Siglip2VisionConfig, Siglip2VisionModel

    vision = dict(hidden_size=48, num_hidden_layers=2, num_attention_heads=2, intermediate_size=96, patch_size=8,
                  num_patches=16)  # a 4x4 table: 32x32 is its native size
    if not two_towers:
        return Siglip2VisionModel(Siglip2VisionConfig(**vision))
    text = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=99)
    return Siglip2Model(Siglip2Config(text_config=text, vision_config=vision))


def naflex_inputs(x: torch.Tensor, patch: int) -> dict[str, torch.Tensor]:
    """Images (B, 3, H, W) as Siglip2ImageProcessor hands them to the model: each image's patches in raster
    order, each patch's pixels as (row, column, channel), its grid as spatial_shapes, every patch real."""
    from transformers.models.siglip2.image_processing_siglip2 import convert_image_to_patches

    b, _, h, w = x.shape
    patches = torch.stack([convert_image_to_patches(image, patch) for image in x])  # (B, N, P*P*3)
    return dict(pixel_values=patches, spatial_shapes=torch.tensor([[h // patch, w // patch]] * b),
                pixel_attention_mask=torch.ones(b, patches.shape[1], dtype=torch.int32))


@pytest.fixture(scope="module")
def siglip2(tmp_path_factory: pytest.TempPathFactory):
    cache: dict[bool, tuple[torch.nn.Module, Path]] = {}

    def get(two_towers: bool) -> tuple[torch.nn.Module, Path]:
        if two_towers not in cache:
            torch.manual_seed(0)
            model = randomize(_siglip2(two_towers))
            model.set_attn_implementation("eager")
            folder = tmp_path_factory.mktemp("siglip2")
            model.save_pretrained(folder)
            cache[two_towers] = model, folder
        return cache[two_towers]

    return get


@pytest.mark.parametrize("two_towers", [False, True], ids=["tower", "two_towers"])
@pytest.mark.parametrize("size", [(32, 32), (24, 48), (40, 16)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_siglip2_naflex_parity_at_each_aspect_ratio(siglip2, size: tuple[int, int], two_towers: bool) -> None:
    """The same image as HF's patches with its spatial shape and as our (B, 3, H, W): HF resamples the table
    to each image's grid, we to the input's; every stage agrees."""
    model, folder = siglip2(two_towers)
    loaded = load(folder)
    assert (loaded.config.pe_resample, loaded.config.image_size, loaded.config.prefix_tokens) == \
        ("bilinear", (32, 32), "none")
    x = torch.randn(2, 3, *size)
    tower = model.vision_model if two_towers else model
    with torch.no_grad():
        ref = tower(**naflex_inputs(x, 8), output_hidden_states=True, output_attentions=True)
        ours = loaded.model.forward_intermediates(x, capture="all")
    assert_close(ours["logits"], ref.pooler_output, "pooled features")
    assert_close(ours["embedded"], ref.hidden_states[0], "embedded tokens")
    for i in range(2):
        assert_close(ours["hidden_states"][i], ref.hidden_states[i + 1], f"hidden state {i}")
        assert_close(ours["attentions"][i], ref.attentions[i], f"attention {i}")


def test_siglip2_is_not_written_as_siglip(siglip2, tmp_path: Path) -> None:
    """HF's SigLIP (1) resamples its table bicubically: a SigLIP 2 model written as one would change off its grid."""
    with pytest.raises(CheckpointError, match="pe_resample='bilinear'"):
        convert(load(siglip2(False)[1]), "hf", tmp_path / "out")


@pytest.mark.parametrize("width,height", [(300, 200), (90, 250), (64, 64)])
def test_siglip2_naflex_preprocessing_equals_the_image_processor(siglip2, width: int, height: int) -> None:
    """Each image keeps its aspect ratio, resized to at most the table's 16 patches: the same pixels, the same
    grid as Siglip2ImageProcessor (with its patch size and patch budget, as the folder's model has them)."""
    import numpy as np
    from PIL import Image
    from transformers import Siglip2ImageProcessor
    from transformers.models.siglip2.image_processing_siglip2 import convert_image_to_patches

    loaded = load(siglip2(False)[1])
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8))
    ref = Siglip2ImageProcessor(patch_size=8, max_num_patches=16)(image, return_tensors="pt")
    ours = loaded.preprocess(image)  # (1, 3, H, W)
    gh, gw = (int(v) for v in ref["spatial_shapes"][0])
    assert ours.shape[-2:] == (gh * 8, gw * 8) and gh * gw <= 16
    patches = convert_image_to_patches(ours[0], 8)
    assert_close(patches, ref["pixel_values"][0, :gh * gw], "pixels")
    assert loaded.preprocessing.with_size((24, 48))(image).shape[-2:] == (24, 48)  # the app's chosen size


def test_siglip2_round_trips_through_the_native_format_with_its_naflex_preprocessing(siglip2, tmp_path: Path) -> None:
    loaded = load(siglip2(False)[1])
    again = load(convert(loaded, "native", tmp_path / "native"))
    assert again.config == loaded.config and again.preprocessing == loaded.preprocessing
    assert again.preprocessing.max_patches == 16
