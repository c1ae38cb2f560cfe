"""Property tests over the whole option space of the model family, on tiny random models (CPU).

Structural options (stem x PE scheme x token layout) are the parametrisation; inside each case the
remaining options (mask token, masking mode, head mask, LayerScale, talking heads) are looped over in
full, so every valid combination builds and runs forward and backward.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from vit_explorer.models import VisionTransformer, ViTConfig
from vit_explorer.models.config import POS_EMBEDS, STEMS, TOKEN_LAYOUTS
from vit_explorer.models.position import rope_angles

PES = POS_EMBEDS
# (prefix_tokens, pool, class_attn_depth, reg_tokens): every valid way to arrange the tokens, from the config's table
LAYOUTS = tuple((v["prefix_tokens"], v["pool"], v["class_attn_depth"], v.get("reg_tokens", 0))
                for v in TOKEN_LAYOUTS.values())
MASKINGS = ("none", "replace", "bert")
IMAGE = (16, 24)  # rectangular on purpose: a 4x6 grid at patch 4
STRUCTURE = list(itertools.product(STEMS, PES, LAYOUTS))


def _ids(case: tuple) -> str:
    stem, pe, (prefix, pool, ca, reg) = case
    return f"{stem}-{pe}-{prefix}-{pool}" + ("-cait" if ca else "") + (f"-reg{reg}" if reg else "")


def make_config(stem: str, pe: str, layout: tuple, depth: int = 1, **extra) -> ViTConfig:
    """layout: (prefix_tokens, pool, class_attn_depth[, reg_tokens])"""
    prefix, pool, class_attn, *reg = layout
    return ViTConfig(image_size=IMAGE, patch_size=4, num_classes=5, embed_dim=16, depth=depth, num_heads=2,
                     mlp_ratio=2.0, stem=stem, pos_embed=pe, prefix_tokens=prefix, pool=pool,
                     class_attn_depth=class_attn, pos_embed_prefix=not class_attn, reg_tokens=sum(reg), **extra)


def patch_mask(batch: int, n: int) -> torch.Tensor:
    """Every other patch masked, so masked and unmasked patches both exist in every image."""
    return (torch.arange(n) % 2 == 0).expand(batch, n)


@pytest.mark.parametrize("case", STRUCTURE, ids=[_ids(c) for c in STRUCTURE])
def test_every_combination_trains(case: tuple) -> None:
    """Forward and backward are finite and every trainable parameter gets a finite gradient."""
    stem, pe, layout = case
    minor = itertools.product((False, True), MASKINGS, (False, True), (None, 0.1), (False, True))
    for mask_token, masking, use_head_mask, layer_scale, talking in minor:
        label = f"{_ids(case)} mask_token={mask_token} masking={masking} head_mask={use_head_mask} " \
                f"layer_scale={layer_scale} talking_heads={talking}"
        cfg = make_config(stem, pe, layout, mask_token=mask_token, layer_scale_init=layer_scale,
                          talking_heads=talking)
        model = VisionTransformer(cfg).train()
        x = torch.randn(2, 3, *IMAGE)
        head_mask = None
        if use_head_mask:  # drop head 0 everywhere; its parameters still get (zero) gradients
            head_mask = torch.ones(cfg.depth + cfg.class_attn_depth, cfg.num_heads)
            head_mask[:, 0] = 0
        mask = None if masking == "none" else patch_mask(2, cfg.num_patches)
        out = model.forward_intermediates(x, mask=mask, mask_mode="bert" if masking == "bert" else "replace",
                                          head_mask=head_mask, generator=torch.Generator().manual_seed(0))
        logits = out["logits"]
        assert logits.shape == (2, 5), label
        assert torch.isfinite(logits).all(), label
        logits.square().sum().backward()
        for name, p in model.named_parameters():
            if name == "mask_token" and masking == "none":
                assert p.grad is None, f"{label}: an unused [MASK] token got a gradient"
                continue
            assert p.grad is not None, f"{label}: no gradient for {name}"
            assert torch.isfinite(p.grad).all(), f"{label}: non-finite gradient for {name}"


def brute_attention(model: VisionTransformer, i: int, x: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """Block i's attention probabilities (B, H, T, T) recomputed by hand from its input x (B, T, D)."""
    block, cfg = model.blocks[i], model.config
    b, t, d = x.shape
    h, hd = cfg.num_heads, cfg.head_dim
    y = F.layer_norm(x, (d,), block.norm1.weight, block.norm1.bias, cfg.layer_norm_eps)
    qkv = y @ block.attn.qkv.weight.T + block.attn.qkv.bias  # (B, T, 3D): [q | k | v], heads inside each
    q, k = (qkv[..., j * d:(j + 1) * d].reshape(b, t, h, hd).transpose(1, 2) for j in (0, 1))  # (B, H, T, hd)
    if cfg.pos_embed in ("rope", "learned+rope", "learned+rope_xy"):  # rotate each (even, odd) pair of patch tokens
        angles = rope_angles(grid, hd, cfg.rope_theta, cols_first=cfg.pos_embed == "learned+rope_xy")  # (N, hd/2)
        turn = torch.polar(torch.ones(()), angles)  # as a complex number
        p = t - grid[0] * grid[1]

        def rotate(z: torch.Tensor) -> torch.Tensor:
            pairs = torch.view_as_complex(z[:, :, p:].reshape(b, h, t - p, hd // 2, 2).contiguous())
            return torch.cat([z[:, :, :p], torch.view_as_real(pairs * turn).reshape(b, h, t - p, hd)], dim=2)

        q, k = rotate(q), rotate(k)
    if cfg.pos_embed == "rope_dinov3":  # DINOv3: dimension i turns with i + hd/2, by the patch centre in [-1, 1]
        gh, gw = grid
        rows = torch.tensor([(2 * r + 1) / gh - 1 for r in range(gh) for _ in range(gw)])
        cols = torch.tensor([(2 * c + 1) / gw - 1 for _ in range(gh) for c in range(gw)])
        periods = cfg.rope_theta ** (torch.arange(hd // 4) * 4 / hd)
        angles = 2 * math.pi * torch.cat([rows[:, None] / periods, cols[:, None] / periods], dim=1)  # (N, hd/2)
        turn, p = torch.polar(torch.ones(()), angles), t - gh * gw

        def rotate_halves(z: torch.Tensor) -> torch.Tensor:
            first, second = z[:, :, p:].chunk(2, dim=-1)
            turned = torch.complex(first, second) * turn
            return torch.cat([z[:, :, :p], torch.cat([turned.real, turned.imag], dim=-1)], dim=2)

        q, k = rotate_halves(q), rotate_halves(k)
    scores = torch.einsum("bhqc,bhkc->bhqk", q, k) / math.sqrt(hd)
    if cfg.pos_embed == "rel_bias":
        scores = scores + brute_relative_bias(block.attn.relative_position_bias_table, grid, t - grid[0] * grid[1])
    if cfg.talking_heads:
        wl, bl = block.attn.proj_l.weight, block.attn.proj_l.bias
        scores = torch.einsum("bhqk,gh->bgqk", scores, wl) + bl[None, :, None, None]
    probs = scores.softmax(-1)
    if cfg.talking_heads:
        ww, bw = block.attn.proj_w.weight, block.attn.proj_w.bias
        probs = torch.einsum("bhqk,gh->bgqk", probs, ww) + bw[None, :, None, None]
    return probs


def brute_relative_bias(table: torch.Tensor, grid: tuple[int, int], p: int) -> torch.Tensor:
    """BEiT's bias (H, T, T) entry by entry: patch pairs read the row of their (row, col) offset in a
    (2gh-1) x (2gw-1) table; pairs with a prefix token the last three rows (prefix->patch,
    patch->prefix, prefix->prefix)."""
    gh, gw = grid
    n_rel, t = (2 * gh - 1) * (2 * gw - 1), p + gh * gw
    bias = torch.empty(table.shape[1], t, t)
    for i in range(t):
        for j in range(t):
            if i < p or j < p:
                row = n_rel + (2 if i < p and j < p else 0 if i < p else 1)
            else:
                (ri, ci), (rj, cj) = divmod(i - p, gw), divmod(j - p, gw)
                row = (ri - rj + gh - 1) * (2 * gw - 1) + (ci - cj + gw - 1)
            bias[:, i, j] = table[row]
    return bias


def brute_class_attention(model: VisionTransformer, j: int, cls: torch.Tensor, patches: torch.Tensor) -> torch.Tensor:
    """Class-attention block j's probabilities (B, H, 1, 1+N), query = [CLS], recomputed by hand."""
    block, cfg = model.class_blocks[j], model.config
    u = torch.cat([cls, patches], dim=1)
    b, t, d = u.shape
    y = F.layer_norm(u, (d,), block.norm1.weight, block.norm1.bias, cfg.layer_norm_eps)
    q = (y[:, :1] @ block.attn.q.weight.T + block.attn.q.bias).reshape(b, 1, cfg.num_heads, -1).transpose(1, 2)
    k = (y @ block.attn.k.weight.T + block.attn.k.bias).reshape(b, t, cfg.num_heads, -1).transpose(1, 2)
    return (torch.einsum("bhqc,bhkc->bhqk", q, k) / math.sqrt(cfg.head_dim)).softmax(-1)


@pytest.mark.parametrize("talking", [False, True], ids=["mhsa", "talking"])
@pytest.mark.parametrize("case", STRUCTURE, ids=[_ids(c) for c in STRUCTURE])
def test_fused_and_capture_paths_agree(case: tuple, talking: bool) -> None:
    stem, pe, layout = case
    cfg = make_config(stem, pe, layout, depth=2, mask_token=True, talking_heads=talking, layer_scale_init=0.5)
    model = VisionTransformer(cfg).eval()
    with torch.no_grad():  # random, non-trivial values everywhere (zeros would hide layout mistakes)
        for p in model.parameters():
            p.normal_(0, 0.3)
    x = torch.randn(2, 3, *IMAGE)
    head_mask = torch.ones(cfg.depth + cfg.class_attn_depth, cfg.num_heads)
    head_mask[0, 1] = 0
    mask = patch_mask(2, cfg.num_patches)
    with torch.no_grad():
        fast = model(x, mask=mask, head_mask=head_mask)
        out = model.forward_intermediates(x, mask=mask, head_mask=head_mask, capture="all")
    torch.testing.assert_close(out["logits"], fast, atol=1e-5, rtol=0)

    layout_ = out["layout"]
    t = layout_.num_tokens
    assert len(out["attentions"]) == cfg.depth and len(out["hidden_states"]) == cfg.depth
    for probs in out["attentions"]:
        assert probs.shape == (2, cfg.num_heads, t, t)
        if not talking:  # talking heads mix heads after the softmax, so rows need not sum to 1
            torch.testing.assert_close(probs.sum(-1), torch.ones(2, cfg.num_heads, t), atol=1e-5, rtol=0)
    # the last block's probabilities equal a by-hand recomputation from its captured input
    with torch.no_grad():
        expected = brute_attention(model, cfg.depth - 1, out["hidden_states"][-2], layout_.grid)
    torch.testing.assert_close(out["attentions"][-1], expected, atol=1e-5, rtol=1e-4)

    if cfg.class_attn_depth:
        probs = out["class_attentions"][0]
        assert probs.shape == (2, cfg.num_heads, 1, 1 + cfg.num_patches)
        torch.testing.assert_close(probs.sum(-1), torch.ones(2, cfg.num_heads, 1), atol=1e-5, rtol=0)
        with torch.no_grad():
            expected = brute_class_attention(model, 0, model.cls_token.expand(2, -1, -1), out["hidden_states"][-1])
        torch.testing.assert_close(probs, expected, atol=1e-5, rtol=1e-4)
    else:
        assert "class_attentions" not in out


def test_capture_accepts_a_single_name_and_rejects_unknown_ones() -> None:
    model = VisionTransformer(make_config("patchify", "learned", ("cls", "cls", 0))).eval()
    x = torch.randn(1, 3, *IMAGE)
    out = model.forward_intermediates(x, capture="hidden_states")
    assert set(out) == {"hidden_states", "logits", "head_logits", "layout"}
    out = model.forward_intermediates(x, capture="all")
    assert {"stem", "patches", "masked", "with_prefix", "with_pos", "embedded", "pre_logits"} <= set(out)
    with pytest.raises(ValueError, match="unknown capture keys"):
        model.forward_intermediates(x, capture=["attention"])


def test_dropout_and_drop_path_in_training_stay_finite_and_vanish_in_eval() -> None:
    cfg = make_config("patchify", "learned", ("cls", "cls", 0), depth=2, drop_rate=0.3, pos_drop_rate=0.3,
                      attn_drop_rate=0.3, drop_path_rate=0.5)
    model = VisionTransformer(cfg)
    x = torch.randn(4, 3, *IMAGE)
    model.train()
    a, b = model(x), model(x)
    assert torch.isfinite(a).all() and not torch.equal(a, b)  # stochastic in training
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(x), model.forward_intermediates(x, capture="all")["logits"],
                                   atol=1e-5, rtol=0)
        assert torch.equal(model(x), model(x))


@pytest.mark.parametrize("talking", [False, True], ids=["mhsa", "talking"])
def test_captured_attention_is_differentiable(talking: bool) -> None:
    """Gradients flow through captured maps (attention x gradient methods need them); without
    autograd the capture path may reuse buffers, and gives the same numbers."""
    model = VisionTransformer(make_config("patchify", "learned", ("cls", "cls", 0), talking_heads=talking)).eval()
    x = torch.randn(2, 3, *IMAGE, requires_grad=True)
    out = model.forward_intermediates(x, capture=["attentions"])
    out["attentions"][0][..., 0].sum().backward()  # attention paid to token 0 (a row sum would be 1)
    assert x.grad is not None and x.grad.abs().sum() > 0
    with torch.inference_mode():
        again = model.forward_intermediates(x.detach(), capture=["attentions"])
    torch.testing.assert_close(again["attentions"][0], out["attentions"][0].detach(), atol=1e-6, rtol=0)
