"""The modern families from timm (DeiT III, DINOv2 with and without registers and its SwiGLU giant,
MAE, CLIP, SigLIP, BEiT, EVA-02), tiny and random, saved in timm's hub layout and loaded through our
loaders: the embedded tokens, every hidden state, every attention map and the logits or features
equal timm's (float32, max |diff| <= 1e-4) at the built size and at a rectangular one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from vit_explorer.checkpoints import load

from .conftest import assert_close, assert_same_model, randomize, save_timm_hub

# case -> (timm name, create_model kwargs); patch 8 at 32x32 gives a 4x4 grid
TINY = dict(embed_dim=48, depth=2, num_heads=2, img_size=32, patch_size=8)
FAMILIES: dict[str, tuple[str, dict[str, Any]]] = {
    "deit3": ("deit3_small_patch16_224", dict(num_classes=7, dynamic_img_size=True)),
    "dinov2": ("vit_small_patch14_dinov2", dict(dynamic_img_size=True)),
    "dinov2_reg": ("vit_small_patch14_reg4_dinov2", dict(dynamic_img_size=True)),
    "dinov2_swiglu": ("vit_giant_patch14_dinov2", dict(dynamic_img_size=True)),  # packed SwiGLU, as the giant
    "mae": ("vit_base_patch16_224.mae", dict(dynamic_img_size=True)),
    "clip": ("vit_base_patch16_clip_quickgelu_224.openai", dict(num_classes=16, dynamic_img_size=True)),
    "siglip": ("vit_base_patch16_siglip_224", dict(dynamic_img_size=True)),
    "siglip_gap": ("vit_base_patch16_siglip_gap_224", dict(dynamic_img_size=True)),
    "beit": ("beit_base_patch16_224", dict(num_classes=7)),  # timm's BEiT has no dynamic size: built at each
    "eva02": ("eva02_tiny_patch14_224", dict(dynamic_img_size=True)),  # RoPE on a reference grid, packed SwiGLU
    "eva02_base": ("eva02_base_patch14_224", dict(dynamic_img_size=True)),  # unfused q/k/v, SwiGLU with sub-LN
}
# issue 18 (part B): DINOv3 (RoPE on normalised centres, registers, LayerScale; SwiGLU in the "plus" sizes),
# AIMv2 (RMSNorm, SwiGLU, no dense biases, a norm on the patch embeddings), the Perception Encoder (a learned
# table and RoPE with x first, pre-norm, an 8-head attention pool over every token, a projection)
FAMILIES.update({
    "dinov3": ("vit_small_patch16_dinov3_qkvb", {}),
    "dinov3_swiglu": ("vit_small_plus_patch16_dinov3", {}),
    "dinov3_token": ("vit_base_patch16_dinov3", dict(global_pool="token")),  # upstream's [CLS] pooling
    "aimv2": ("aimv2_large_patch14_224", dict(dynamic_img_size=True)),
    "pe": ("vit_pe_core_base_patch16_224", dict(dynamic_img_size=True)),
})
SIZES = [(32, 32), (24, 48)]


def build(case: str, img_size: tuple[int, int] = (32, 32)) -> torch.nn.Module:
    import timm

    name, kwargs = FAMILIES[case]
    model = timm.create_model(name, pretrained=False, **{**TINY, "img_size": img_size, **kwargs})
    return randomize(model)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory):
    cache: dict[tuple[str, tuple[int, int]], tuple[torch.nn.Module, Path]] = {}

    def get(case: str, img_size: tuple[int, int] = (32, 32)) -> tuple[torch.nn.Module, Path]:
        if (case, img_size) not in cache:
            model = build(case, img_size)
            cache[case, img_size] = model, save_timm_hub(model, tmp_path_factory.mktemp(case))
        return cache[case, img_size]

    return get


def timm_run(model: torch.nn.Module, x: torch.Tensor) -> dict[str, Any]:
    """timm's output, the blocks' input, each block's output and each softmax (explicit attention)."""
    captured: dict[str, list[torch.Tensor]] = {"embedded": [], "hidden": [], "attn": []}
    for module in model.modules():
        if hasattr(module, "fused_attn"):
            module.fused_attn = False  # timm's fused path never forms the probabilities
    hooks = [model.blocks[0].register_forward_pre_hook(lambda m, args: captured["embedded"].append(args[0]))]
    for block in model.blocks:
        hooks.append(block.register_forward_hook(lambda m, i, o: captured["hidden"].append(o)))
        hooks.append(block.attn.attn_drop.register_forward_hook(lambda m, i, o: captured["attn"].append(o)))
    try:
        with torch.no_grad():
            out = model(x)
    finally:
        for hook in hooks:
            hook.remove()
    return dict(out=out, embedded=captured["embedded"][0], hidden=captured["hidden"], attn=captured["attn"])


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("case", list(FAMILIES))
def test_timm_family_parity(hub, case: str, size: tuple[int, int]) -> None:
    # BEiT's relative tables are sized for the grid, and timm cannot change it at run time: build it there
    model, folder = hub(case, size if case == "beit" else (32, 32))
    loaded = load(folder)
    x = torch.randn(2, 3, *size)
    ref = timm_run(model, x)
    with torch.no_grad():
        ours = loaded.model.forward_intermediates(x, capture="all")
    assert_close(ours["logits"], ref["out"], "logits or features")
    assert_close(ours["embedded"], ref["embedded"], "embedded tokens")
    assert len(ours["hidden_states"]) == len(ref["hidden"]) == 2
    for i in range(2):
        assert_close(ours["hidden_states"][i], ref["hidden"][i], f"hidden state {i}")
        assert_close(ours["attentions"][i], ref["attn"][i], f"attention {i}")
    assert ours["layout"].num_prefix_tokens == model.num_prefix_tokens


def test_registers_are_named_and_carry_no_position(hub) -> None:
    model, folder = hub("dinov2_reg")
    loaded = load(folder)
    layout = loaded.model.layout()
    assert layout.prefix_names == ("cls", "reg0", "reg1", "reg2", "reg3") and layout.registers == (1, 2, 3, 4)
    assert loaded.config.reg_tokens == 4 and not loaded.config.pos_embed_prefix
    pe = loaded.model.position_embedding(layout.grid)
    assert torch.equal(pe[:5], torch.zeros(5, 48))  # timm's no_embed_class: neither [CLS] nor registers
    with torch.no_grad():
        out = loaded.model.forward_intermediates(torch.randn(1, 3, 32, 32), capture="with_prefix")
    torch.testing.assert_close(out["with_prefix"][0, 1:5], model.reg_token[0], atol=0, rtol=0)


@pytest.mark.parametrize("case,mean", [("dinov2", (0.485, 0.456, 0.406)), ("clip", (0.48145466, 0.4578275, 0.40821073)),
                                       ("siglip", (0.5, 0.5, 0.5)), ("mae", (0.485, 0.456, 0.406))])
def test_preprocessing_of_each_family(hub, case: str, mean: tuple) -> None:
    """From the hub config's pretrained_cfg; with none (a bare state dict), the family's and tag's defaults."""
    from vit_explorer.checkpoints.timm_format import preprocess_from_timm

    _, folder = hub(case)
    loaded = load(folder)
    assert loaded.preprocessing.mean == pytest.approx(mean)
    defaults = preprocess_from_timm({}, loaded.config, FAMILIES[case][0], "test")
    assert defaults.mean == pytest.approx(mean) and defaults.size == (32, 32)


@pytest.mark.parametrize("name", ["deit3_small_patch16_224", "vit_small_patch14_reg4_dinov2",
                                  "vit_base_patch16_siglip_224", "beit_base_patch16_224", "eva02_tiny_patch14_224"])
def test_bare_state_dict_with_arch_at_full_size(tmp_path: Path, name: str) -> None:
    """A bare .pth with only the model name: every size comes from the name (here at full size)."""
    import timm

    model = randomize(timm.create_model(name, pretrained=False))
    torch.save(model.state_dict(), tmp_path / "weights.pth")
    loaded = load(tmp_path / "weights.pth", arch=name)
    size = model.pretrained_cfg["input_size"][1:]
    x = torch.randn(1, 3, *size)
    with torch.no_grad():
        assert_close(loaded.model(x), model(x), "logits or features")


def test_a_family_the_loader_does_not_know_is_named(tmp_path: Path) -> None:
    import json

    from vit_explorer.checkpoints import CheckpointError

    (tmp_path / "config.json").write_text(json.dumps({"architecture": "vit_base_patch16_rope_reg1_gap_256"}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"'vit_base_patch16_rope_reg1_gap_256' is not supported; supported "
                                              r"names: .*dinov2.*siglip.*eva02"):
        load(tmp_path)


@pytest.mark.parametrize("case", ["dinov2_reg", "dinov2_swiglu", "clip", "siglip", "beit", "eva02_base"])
def test_each_family_round_trips_through_the_native_format(hub, tmp_path: Path, case: str) -> None:
    from vit_explorer.checkpoints import convert

    _, folder = hub(case)
    loaded = load(folder)
    again = load(convert(loaded, "native", tmp_path / "native"))
    assert again.kind == "native" and again.config == loaded.config
    x = torch.randn(2, 3, 24, 48)
    assert_same_model(again, loaded, x)


def test_a_clip_tower_head_is_the_projection_to_the_joint_space(tmp_path: Path) -> None:
    """timm keeps CLIP's visual projection as `head` with a zero bias: we load it as the projection (an
    embedding, as from Hugging Face), not as 16 classes; a bias or a fine-tuned tag keeps a classifier."""
    model = build("clip")
    with torch.no_grad():
        model.head.bias.zero_()
    loaded = load(save_timm_hub(model, tmp_path / "tower"))
    assert loaded.config.num_classes == 0 and loaded.config.proj_dim == 16 and loaded.labels == []
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert_close(loaded.model(x), model(x), "projected embedding")
    model.pretrained_cfg = {**model.pretrained_cfg, "tag": "openai_ft_in1k"}
    assert load(save_timm_hub(model, tmp_path / "fine-tuned")).config.num_classes == 16
