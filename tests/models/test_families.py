"""The modern families' options (registers, pre-norm, quick-GELU/GELU-tanh/SwiGLU MLPs with sub-LN,
q/v-only biases, attention pooling, fc_norm, projection, relative position bias, learned PE + RoPE)
keep every capture honest, on tiny versions of each family's preset: the fused and capture paths
agree, the attention hook sees what 'attentions' holds, head masks equal zeroing that head by hand,
[MASK] replaces patch embeddings, every parameter trains, the parameter and FLOP counts are exact."""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from vit_explorer.analysis.params import flops_per_stage, parameter_table
from vit_explorer.models import VisionTransformer, count_parameters, preset
from vit_explorer.models.config import TOKEN_LAYOUTS

FAMILY_PRESETS = ["dinov2-s14", "dinov2-s14-reg4", "dinov2-g14", "clip-b16", "siglip-b16", "mae-b16", "deit3-s16",
                  "beit-b16", "eva02-ti14"]
FAMILY_PRESETS += ["dinov3-b16", "aimv2-l14", "pe-core-b16", "siglip2-b16-naflex"]  # issue 18 (part B)
FAMILY_PRESETS += ["dinov2-s14-in1k"]
FAMILY_PRESETS += ["vit-b16-r50", "ijepa-h14"]  # the hybrid stem; at patch 4 its ResNet keeps one stage
IMAGE = (16, 24)  # a 4x6 grid at patch 4


def tiny(name: str, **overrides) -> VisionTransformer:
    """The family's preset at toy sizes (everything but the sizes as in the preset), random weights."""
    sizes = dict(image_size=IMAGE, patch_size=4, embed_dim=32, depth=2, num_heads=4, mask_token=True)
    if preset(name).num_classes:
        sizes["num_classes"] = 5
    if preset(name).rope_ref_grid:
        sizes["rope_ref_grid"] = (3, 3)  # positions rescaled onto another grid than the input's
    model = VisionTransformer(preset(name, **{**sizes, **overrides}))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    return model.eval()


@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_fused_and_capture_paths_agree_and_the_hook_sees_the_same(name: str) -> None:
    model = tiny(name)
    cfg = model.config
    x = torch.randn(2, 3, *IMAGE)
    mask = (torch.arange(cfg.num_patches) % 3 == 0).expand(2, -1)
    head_mask = torch.ones(cfg.depth, cfg.num_heads)
    head_mask[1, 2] = 0
    seen: dict[int, torch.Tensor] = {}
    with torch.no_grad():
        fast = model(x, mask=mask, head_mask=head_mask)
        out = model.forward_intermediates(x, mask=mask, head_mask=head_mask, capture="all")
        with model.hooks([("blocks.1.attn.hook_pattern", lambda p, hook: seen.__setitem__(1, p))]):
            hooked = model.forward_intermediates(x, mask=mask, head_mask=head_mask)
    torch.testing.assert_close(out["logits"], fast, atol=1e-5, rtol=0)
    torch.testing.assert_close(hooked["logits"], fast, atol=1e-5, rtol=0)
    t = out["layout"].num_tokens
    assert t == cfg.num_prefix_tokens + cfg.num_patches
    for probs in out["attentions"]:
        assert probs.shape == (2, cfg.num_heads, t, t)
        torch.testing.assert_close(probs.sum(-1), torch.ones(2, cfg.num_heads, t), atol=1e-5, rtol=0)
    assert list(seen) == [1]
    torch.testing.assert_close(seen[1], out["attentions"][1])  # the other blocks fused here: within rounding


def _zero_head(head: int, head_dim: int):
    def hook(module: torch.nn.Module, args: tuple[torch.Tensor]) -> tuple[torch.Tensor]:
        x = args[0].clone()
        x[..., head * head_dim:(head + 1) * head_dim] = 0
        return (x,)
    return hook


@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_head_mask_equals_zeroing_that_heads_slice(name: str) -> None:
    model = tiny(name)
    cfg = model.config
    x = torch.randn(2, 3, *IMAGE)
    head_mask = torch.ones(cfg.depth, cfg.num_heads)
    head_mask[1, 3] = 0
    with torch.no_grad():
        masked = model.forward_intermediates(x, head_mask=head_mask, capture="all")["logits"]
        handle = model.blocks[1].attn.proj.register_forward_pre_hook(_zero_head(3, cfg.head_dim))
        by_hand = model(x)
        handle.remove()
        plain = model(x)
    torch.testing.assert_close(masked, by_hand)  # explicit attention against the fused kernel: within rounding
    assert not torch.allclose(masked, plain)


@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_mask_token_replaces_patches_before_the_prefix_tokens(name: str) -> None:
    model = tiny(name)
    cfg = model.config
    mask = torch.rand(2, cfg.num_patches) < 0.5
    with torch.no_grad():
        out = model.forward_intermediates(torch.randn(2, 3, *IMAGE), mask=mask,
                                          capture=["patches", "masked", "with_prefix"])
    k = cfg.num_prefix_tokens
    assert torch.equal(out["masked"][mask], model.mask_token[0, 0].expand(int(mask.sum()), -1))
    assert torch.equal(out["masked"][~mask], out["patches"][~mask])
    assert torch.equal(out["with_prefix"][:, k:], out["masked"])


@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_every_parameter_trains_and_the_counts_are_exact(name: str) -> None:
    model = tiny(name).train()
    out = model.forward_intermediates(torch.randn(2, 3, *IMAGE), mask=torch.rand(2, 24) < 0.5)
    out["logits"].square().sum().backward()
    for param_name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), param_name
    assert count_parameters(model) == model.config.estimate_parameters() == parameter_table(model).total


@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_flops_match_torch_flop_counter(name: str) -> None:
    model = tiny(name)
    with FlopCounterMode(display=False) as counter, sdpa_kernel(SDPBackend.MATH), torch.no_grad():
        model(torch.zeros(1, 3, *IMAGE))  # the math kernel's matmuls are what the counter sees
    counts = {k: sum(v.values()) for k, v in counter.get_flop_counts().items()}
    ours = flops_per_stage(model.config)
    assert ours["encoder"] == sum(n for k, n in counts.items() if re.fullmatch(r"VisionTransformer\.blocks\.\d+", k))
    assert sum(ours.values()) == counts["Global"]


def test_attention_pool_map_is_the_latent_querys_softmax_over_the_patches() -> None:
    model = tiny("siglip-b16")
    pool, cfg = model.attn_pool, model.config
    x = torch.randn(2, 3, *IMAGE)
    with torch.no_grad():
        out = model.forward_intermediates(x, capture=["hidden_states", "pool_attention", "pre_logits"])
        tokens = model.norm(out["hidden_states"][-1])  # (B, N, D): no prefix tokens in SigLIP
        q = pool.q(pool.latent).reshape(1, cfg.num_heads, cfg.head_dim)  # (1, H, hd)
        k = pool.kv(tokens)[..., :cfg.embed_dim].reshape(2, -1, cfg.num_heads, cfg.head_dim)  # (B, N, H, hd)
        expected = torch.einsum("qhc,bnhc->bhn", q, k).div(math.sqrt(cfg.head_dim)).softmax(-1)[:, :, None]
    assert out["pool_attention"].shape == (2, cfg.num_heads, 1, cfg.num_patches)
    torch.testing.assert_close(out["pool_attention"], expected, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(out["logits"], out["pre_logits"], atol=0, rtol=0)  # features only


def test_clip_projection_and_pre_norm() -> None:
    model = tiny("clip-b16", num_classes=0, proj_dim=12)
    with torch.no_grad():
        out = model.forward_intermediates(torch.randn(2, 3, *IMAGE), capture=["with_pos", "embedded", "pre_logits"])
    assert model.patch_embed.proj.bias is None  # the pre-norm follows a bias-free stem, as in CLIP
    torch.testing.assert_close(out["embedded"], model.norm_pre(out["with_pos"]), atol=0, rtol=0)
    torch.testing.assert_close(out["logits"], out["pre_logits"] @ model.proj.weight.T, atol=1e-6, rtol=0)
    assert out["head_logits"].keys() == {"cls"}


@pytest.mark.parametrize("mlp", ["gelu_tanh", "quick_gelu"])
def test_mlp_activations(mlp: str) -> None:
    model = tiny("mae-b16", mlp=mlp)
    x = torch.randn(5, 32)
    fc1, fc2 = model.blocks[0].mlp.fc1, model.blocks[0].mlp.fc2
    h = fc1(x)
    act = F.gelu(h, approximate="tanh") if mlp == "gelu_tanh" else h * torch.sigmoid(1.702 * h)
    torch.testing.assert_close(model.blocks[0].mlp(x), fc2(act), atol=1e-6, rtol=0)


def test_swiglu_with_sub_ln() -> None:
    mlp = tiny("eva02-ti14", mlp_norm=True).blocks[0].mlp
    x = torch.randn(5, 32)
    h = F.silu(mlp.fc1_g(x)) * mlp.fc1_x(x)
    torch.testing.assert_close(mlp(x), mlp.fc2(mlp.norm(h)), atol=1e-6, rtol=0)


def test_q_and_v_biases_without_a_key_bias() -> None:
    attn = tiny("beit-b16").blocks[0].attn
    assert attn.qkv.bias is None and attn.q_bias.shape == attn.v_bias.shape == (32,)
    x = torch.randn(3, 32)
    q, k, v = (x @ attn.qkv.weight.T).chunk(3, dim=-1)
    torch.testing.assert_close(attn.project_qkv(x), torch.cat([q + attn.q_bias, k, v + attn.v_bias], -1))


def test_registers_in_the_layout_and_the_pe() -> None:
    model = tiny("dinov2-s14-reg4", pos_embed_prefix=True)  # HF's layout: a [CLS] row, none for registers
    layout = model.layout()
    assert layout.prefix_names == ("cls", "reg0", "reg1", "reg2", "reg3") and layout.registers == (1, 2, 3, 4)
    assert model.pos_embed.shape == (1, 1 + 24, 32)
    pe = model.position_embedding(layout.grid)
    assert torch.equal(pe[0], model.pos_embed[0, 0]) and torch.equal(pe[1:5], torch.zeros(4, 32))
    assert torch.equal(pe[5:], model.pos_embed[0, 1:])
    assert "register tokens" in next(r.layer for r in parameter_table(model).rows if r.name == "reg_token")


def test_token_layouts_table_builds_each_layout() -> None:
    for name, fields in TOKEN_LAYOUTS.items():
        model = VisionTransformer(preset("classroom-tiny", **fields))
        assert model.layout().num_prefix_tokens == model.config.num_prefix_tokens, name


def test_a_relative_bias_made_in_inference_mode_still_trains() -> None:
    """The index of the relative-position bias is cached: made first under inference mode (the app's views),
    it must not turn into an inference tensor that training then cannot use."""
    from vit_explorer.models import VisionTransformer, preset

    model = VisionTransformer(preset("classroom-tiny", pos_embed="rel_bias", image_size=(20, 28)))
    x = torch.randn(2, 3, 20, 28)
    with torch.inference_mode():
        model(x)
    model.train()(x).sum().backward()
    assert model.blocks[0].attn.relative_position_bias_table.grad is not None
