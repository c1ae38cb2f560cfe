"""Exact properties of the model's parts, each checked against a computation written out by hand:
stems, head masks, [MASK], position embeddings (learned, 2D, sine-cosine, RoPE), resampling,
rectangular inputs and the token layout."""

from __future__ import annotations

import math

import pytest
import torch
from timm.layers import resample_abs_pos_embed

from vit_explorer.models import VisionTransformer, ViTConfig, count_parameters
from vit_explorer.models.config import POS_EMBEDS
from vit_explorer.models.position import apply_rope, rope_angles, sincos_1d, sincos_2d

PES = POS_EMBEDS
LAYOUTS = {  # name -> (prefix_tokens, pool, class_attn_depth)
    "cls": ("cls", "cls", 0), "cls+dist": ("cls+dist", "cls", 0), "gap": ("none", "gap", 0),
    "cls-gap": ("cls", "gap", 0), "cait": ("cls", "cls", 1),
}


def tiny(layout: str = "cls", **overrides) -> ViTConfig:
    prefix, pool, class_attn = LAYOUTS[layout]
    values = dict(image_size=(16, 24), patch_size=4, num_classes=5, embed_dim=32, depth=2, num_heads=4,
                  prefix_tokens=prefix, pool=pool, class_attn_depth=class_attn, pos_embed_prefix=not class_attn)
    return ViTConfig(**{**values, **overrides})


# ---------------------------------------------------------------------------------------- stems
def test_patchify_conv_equals_unfold_linear() -> None:
    model = VisionTransformer(tiny())
    stem = model.patch_embed
    x = torch.randn(2, 3, 16, 24)
    with torch.no_grad():
        conv, unfold = stem(x), stem.forward_unfold(x)
        # one patch by hand: the flattened (C, P, P) pixels times the flattened kernel, plus the bias
        by_hand = stem.proj.weight.flatten(1) @ x[1, :, 4:8, 8:12].flatten() + stem.proj.bias
    diff = (conv - unfold).abs().max().item()
    print(f"max |Conv2d - (Unfold + Linear)| = {diff:.2e}")
    assert conv.shape == unfold.shape == (2, 32, 4, 6)
    assert diff < 1e-5
    torch.testing.assert_close(conv[1, :, 1, 2], by_hand, atol=1e-5, rtol=0)


def test_patches_are_the_stem_grid_in_raster_order() -> None:
    model = VisionTransformer(tiny(stem="conv")).eval()
    with torch.no_grad():
        out = model.forward_intermediates(torch.randn(2, 3, 16, 24), capture=["stem", "patches"])
    layout = out["layout"]
    for row, col in [(0, 0), (1, 4), (3, 5)]:
        token = layout.token_index(row, col) - layout.num_prefix_tokens
        assert torch.equal(out["patches"][:, token], out["stem"][:, :, row, col])


# ---------------------------------------------------------------------------------------- head masks
def _zero_head_hook(head: int, head_dim: int):
    def hook(module: torch.nn.Module, args: tuple[torch.Tensor]) -> tuple[torch.Tensor]:
        x = args[0].clone()
        x[..., head * head_dim:(head + 1) * head_dim] = 0  # that head's slice of the input to attn.proj
        return (x,)
    return hook


@pytest.mark.parametrize("capture", [False, True], ids=["fast", "capture"])
@pytest.mark.parametrize("kind", ["mhsa", "talking", "cait-class-attention"])
def test_head_mask_equals_zeroing_that_heads_slice_by_hand(kind: str, capture: bool) -> None:
    cfg = tiny("cait" if kind == "cait-class-attention" else "cls", talking_heads=kind == "talking")
    model = VisionTransformer(cfg).eval()
    layer, head = (2, 3) if kind == "cait-class-attention" else (1, 2)
    attn = model.class_blocks[0].attn if layer >= cfg.depth else model.blocks[layer].attn
    x = torch.randn(2, 3, 16, 24)
    head_mask = torch.ones(cfg.depth + cfg.class_attn_depth, cfg.num_heads)
    head_mask[layer, head] = 0

    def run(mask: torch.Tensor | None) -> torch.Tensor:
        with torch.no_grad():
            if capture:
                return model.forward_intermediates(x, head_mask=mask, capture="all")["logits"]
            return model(x, head_mask=mask)

    seen: list[torch.Tensor] = []
    handle = attn.proj.register_forward_pre_hook(lambda m, args: seen.append(args[0].clone()))
    masked, plain = run(head_mask), run(None)
    handle.remove()
    handle = attn.proj.register_forward_pre_hook(_zero_head_hook(head, cfg.head_dim))
    by_hand = run(None)
    handle.remove()

    hd = cfg.head_dim
    assert torch.all(seen[0][..., head * hd:(head + 1) * hd] == 0)
    keep = [c for c in range(cfg.embed_dim) if not head * hd <= c < (head + 1) * hd]
    assert torch.equal(seen[0][..., keep], seen[1][..., keep])
    torch.testing.assert_close(masked, by_hand, atol=0, rtol=0)
    assert not torch.allclose(masked, plain)


@pytest.mark.parametrize("capture", [False, True], ids=["fast", "capture"])
def test_masking_all_heads_leaves_only_the_proj_bias(capture: bool) -> None:
    cfg = tiny(layer_scale_init=0.5)
    model = VisionTransformer(cfg).eval()
    block = model.blocks[0]
    with torch.no_grad():
        block.attn.proj.bias.normal_()
    head_mask = torch.ones(cfg.depth, cfg.num_heads)
    head_mask[0] = 0
    branch: list[torch.Tensor] = []
    handle = block.attn.register_forward_hook(lambda m, args, out: branch.append(out[0]))
    with torch.no_grad():
        out = model.forward_intermediates(torch.randn(2, 3, 16, 24), head_mask=head_mask,
                                          capture="all" if capture else ["hidden_states", "embedded"])
    handle.remove()
    assert torch.equal(branch[0], block.attn.proj.bias.expand_as(branch[0]))
    x = out["embedded"] + block.ls1.gamma * block.attn.proj.bias  # the whole attention branch
    with torch.no_grad():
        expected = x + block.ls2(block.mlp(block.norm2(x)))
    torch.testing.assert_close(out["hidden_states"][0], expected, atol=1e-6, rtol=0)


# ---------------------------------------------------------------------------------------- [MASK]
@pytest.mark.parametrize("mask_token", [True, False], ids=["learned-mask-token", "zeros"])
def test_replace_puts_the_mask_token_exactly_at_masked_positions_before_pe(mask_token: bool) -> None:
    cfg = tiny("cls+dist", mask_token=mask_token)
    model = VisionTransformer(cfg).eval()
    mask = torch.rand(2, cfg.num_patches) < 0.4
    with torch.no_grad():
        out = model.forward_intermediates(torch.randn(2, 3, 16, 24), mask=mask,
                                          capture=["patches", "masked", "with_prefix", "with_pos"])
    token = model.mask_token[0, 0] if mask_token else torch.zeros(cfg.embed_dim)
    masked, patches = out["masked"], out["patches"]
    assert torch.equal(masked[mask], token.expand(int(mask.sum()), -1))
    assert torch.equal(masked[~mask], patches[~mask])
    assert torch.equal(out["with_prefix"][:, 2:], masked)
    pe = model.position_embedding(cfg.grid_size)  # (2+N, D)
    torch.testing.assert_close(out["with_pos"], out["with_prefix"] + pe, atol=0, rtol=0)
    assert ("mask_token" in dict(model.named_parameters())) == mask_token


def test_a_one_dimensional_mask_applies_to_every_image() -> None:
    model = VisionTransformer(tiny(mask_token=True)).eval()
    mask = torch.zeros(24, dtype=torch.bool)
    mask[[0, 5, 23]] = True
    with torch.no_grad():
        out = model.forward_intermediates(torch.randn(3, 3, 16, 24), mask=mask, capture=["masked"])
    assert torch.equal(out["masked"][:, mask], model.mask_token.expand(3, 3, -1))


def test_bert_mode_is_80_10_10_and_reproducible() -> None:
    model = VisionTransformer(tiny(mask_token=True))
    b, n, d = 64, 64, 32
    patches = torch.randn(b, n, d)
    mask = torch.rand(b, n) < 0.75
    with torch.no_grad():
        out = model.apply_mask(patches, mask, "bert", generator=torch.Generator().manual_seed(0))
        again = model.apply_mask(patches, mask, "bert", generator=torch.Generator().manual_seed(0))
        other = model.apply_mask(patches, mask, "bert", generator=torch.Generator().manual_seed(1))
    assert torch.equal(out, again) and not torch.equal(out, other)
    assert torch.equal(out[~mask], patches[~mask])
    is_token = (out == model.mask_token[0]).all(-1)  # (B, N)
    unchanged = (out == patches).all(-1)
    # a random replacement is some patch of the same image: compare with all of that image's patches
    matches = (out[:, :, None, :] == patches[:, None, :, :]).all(-1)  # (B, N, N)
    is_random = matches.any(-1) & ~unchanged
    total = int(mask.sum())
    fractions = [int((kind & mask).sum()) / total for kind in (is_token, is_random, unchanged)]
    print(f"bert corruption over {total} masked patches: mask/random/unchanged = {fractions}")
    assert (is_token | is_random | unchanged)[mask].all()
    assert abs(fractions[0] - 0.8) < 0.03
    assert abs(fractions[1] - 0.1) < 0.02
    assert abs(fractions[2] - 0.1) < 0.02


# ---------------------------------------------------------------------------------------- position embeddings
@pytest.mark.parametrize("layout", ["cls+dist", "cait"])
@pytest.mark.parametrize("antialias", [True, False])
def test_learned_pe_resampling(layout: str, antialias: bool) -> None:
    cfg = tiny(layout, image_size=16, pe_resample_antialias=antialias)  # a 4x4 grid
    model = VisionTransformer(cfg)
    k = 0 if layout == "cait" else 2  # CaiT's table has no prefix rows
    table = model.pos_embed.detach()
    with torch.no_grad():
        native = model.position_embedding((4, 4))
        for grid in [(6, 3), (2, 2), (4, 7)]:
            pe = model.position_embedding(grid)
            assert pe.shape == (k + grid[0] * grid[1], cfg.embed_dim)
            assert torch.equal(pe[:k], table[0, :k])  # prefix rows are kept out of the interpolation
            reference = resample_abs_pos_embed(table, list(grid), [4, 4], num_prefix_tokens=k, antialias=antialias)
            torch.testing.assert_close(pe, reference[0], atol=1e-6, rtol=0)
        model.pos_embed.copy_(torch.full_like(table, 0.25))
        constant = model.position_embedding((5, 9))
    assert torch.equal(native, table[0])  # the native grid is the identity
    torch.testing.assert_close(constant, torch.full_like(constant, 0.25), atol=1e-6, rtol=0)


def test_learned_pe_without_prefix_rows_equals_timm_no_embed_class() -> None:
    """pos_embed_prefix=False: the table covers patches only and prefix tokens get no position."""
    from timm.models.vision_transformer import VisionTransformer as TimmViT

    reference = TimmViT(img_size=(16, 24), patch_size=4, embed_dim=32, depth=2, num_heads=4, num_classes=5,
                        no_embed_class=True, dynamic_img_size=True).eval()
    model = VisionTransformer(tiny("cls", pos_embed_prefix=False)).eval()
    model.load_state_dict(reference.state_dict())
    assert model.pos_embed.shape == (1, 24, 32)
    assert model.config.estimate_parameters() == count_parameters(model) == count_parameters(reference)
    for size in [(16, 24), (24, 16)]:
        x = torch.randn(2, 3, *size)
        with torch.no_grad():
            out = model.forward_intermediates(x, capture=["with_prefix", "with_pos"])
            torch.testing.assert_close(out["logits"], reference(x), atol=1e-5, rtol=0)
        assert torch.equal(out["with_pos"][:, 0], out["with_prefix"][:, 0])  # [CLS] unchanged by the PE
    distilled = VisionTransformer(tiny("cls+dist", pos_embed_prefix=False))
    pe = distilled.position_embedding((5, 3))
    assert pe.shape == (2 + 15, 32) and torch.equal(pe[:2], torch.zeros(2, 32))
    assert torch.equal(distilled.position_embedding((4, 6))[2:], distilled.pos_embed[0])


def test_learned_2d_concatenates_row_and_column_tables() -> None:
    cfg = tiny("cls", pos_embed="learned_2d")  # grid 4x6
    model = VisionTransformer(cfg)
    y, x = model.pos_embed_y.detach(), model.pos_embed_x.detach()
    assert y.shape == (4, 16) and x.shape == (6, 16)
    with torch.no_grad():
        pe = model.position_embedding((4, 6))
        bigger = model.position_embedding((5, 3))
    assert torch.equal(pe[0], torch.zeros(32))  # [CLS] gets no position
    for r, c in [(0, 0), (2, 5), (3, 1)]:
        assert torch.equal(pe[1 + r * 6 + c], torch.cat([y[r], x[c]]))
    grid = bigger[1:].reshape(5, 3, 32)
    assert torch.equal(grid[:, :, :16], grid[:, :1, :16].expand(5, 3, 16))  # Y half depends on the row only
    assert torch.equal(grid[:, :, 16:], grid[:1, :, 16:].expand(5, 3, 16))  # X half on the column only


def test_sincos_formulas() -> None:
    d = 16
    one = sincos_1d(torch.arange(7), d)
    for pos in (0, 3, 6):
        for i in range(d // 2):
            omega = 10000.0 ** (-i / (d / 2))
            assert one[pos, i].item() == pytest.approx(math.sin(pos * omega), abs=1e-6)
            assert one[pos, d // 2 + i].item() == pytest.approx(math.cos(pos * omega), abs=1e-6)
    two = sincos_2d((3, 5), d)  # (15, 16): first half encodes the row, second half the column
    xy = sincos_2d((3, 5), d, cols_first=True)  # AIMv2 native: the column first
    for r, c in [(0, 0), (1, 4), (2, 2)]:
        row, col = sincos_1d(torch.tensor([r]), 8)[0], sincos_1d(torch.tensor([c]), 8)[0]
        torch.testing.assert_close(two[r * 5 + c], torch.cat([row, col]))
        torch.testing.assert_close(xy[r * 5 + c], torch.cat([col, row]))


@pytest.mark.parametrize("pe", ["sincos_1d", "sincos_2d", "sincos_2d_xy"])
def test_fixed_pe_in_the_model(pe: str) -> None:
    cfg = tiny("cls+dist", pos_embed=pe)
    model = VisionTransformer(cfg)
    table = model.position_embedding((3, 5))
    assert torch.equal(table[:2], torch.zeros(2, 32))  # prefix tokens get no position
    expected = sincos_1d(torch.arange(15), 32) if pe == "sincos_1d" else \
        sincos_2d((3, 5), 32, cols_first=pe == "sincos_2d_xy")
    assert torch.equal(table[2:], expected)  # and nothing of it is learned:
    assert not any("pos_embed" in name for name, _ in model.named_parameters())


def test_rope_preserves_norms_and_leaves_prefix_tokens_alone() -> None:
    grid, hd = (4, 5), 16
    angles = rope_angles(grid, hd, theta=100.0)
    x = torch.randn(2, 3, 2 + 20, hd)
    rotated = apply_rope(x, angles, num_prefix=2)
    assert torch.equal(rotated[:, :, :2], x[:, :, :2])
    torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rotated[:, :, 2], x[:, :, 2])  # patch (0, 0): angle 0, no turn
    assert not torch.allclose(rotated[:, :, 3:], x[:, :, 3:])


def test_rope_scores_depend_only_on_the_relative_offset() -> None:
    grid, hd = (5, 6), 16
    angles = rope_angles(grid, hd, theta=10.0)
    q, k = torch.randn(hd), torch.randn(hd)
    n = grid[0] * grid[1]
    qr = apply_rope(q.expand(1, 1, n, hd), angles, 0)[0, 0]  # the same query placed at every patch
    kr = apply_rope(k.expand(1, 1, n, hd), angles, 0)[0, 0]
    scores = qr @ kr.T  # (N, N)
    by_offset: dict[tuple[int, int], list[float]] = {}
    for i in range(n):
        for j in range(n):
            offset = (i // grid[1] - j // grid[1], i % grid[1] - j % grid[1])
            by_offset.setdefault(offset, []).append(scores[i, j].item())
    assert len(by_offset) == (2 * grid[0] - 1) * (2 * grid[1] - 1)
    assert max(max(v) - min(v) for v in by_offset.values()) < 1e-4
    means = torch.tensor([sum(v) / len(v) for v in by_offset.values()])
    assert means.std() > 0.1  # and it does depend on the offset


# ---------------------------------------------------------------------------------------- resolution and layout
@pytest.mark.parametrize("layout", ["cls", "cls+dist", "gap", "cait"])
@pytest.mark.parametrize("pe", PES)
def test_rectangular_inputs_at_other_resolutions(pe: str, layout: str) -> None:
    cfg = tiny(layout, image_size=16, pos_embed=pe)  # built for a 4x4 grid
    model = VisionTransformer(cfg).eval()
    for size in [(16, 24), (24, 16), (8, 32)]:
        grid = (size[0] // 4, size[1] // 4)
        x = torch.randn(2, 3, *size)
        with torch.no_grad():
            out = model.forward_intermediates(x, capture="all")
            fast = model(x)
        assert out["layout"].grid == grid
        t = out["layout"].num_tokens
        assert all(h.shape == (2, t, 32) for h in out["hidden_states"])
        assert all(a.shape == (2, 4, t, t) for a in out["attentions"])
        assert torch.isfinite(out["logits"]).all()
        torch.testing.assert_close(out["logits"], fast, atol=1e-5, rtol=0)


@pytest.mark.parametrize("layout", ["cls", "cls+dist", "gap", "cls-gap", "cait"])
def test_layout_for_every_prefix_option(layout: str) -> None:
    cfg = tiny(layout)
    model = VisionTransformer(cfg).eval()
    expected_prefix = {"cls": ("cls",), "cls+dist": ("cls", "dist"), "gap": (), "cls-gap": ("cls",), "cait": ()}
    with torch.no_grad():
        out = model.forward_intermediates(torch.randn(2, 3, 16, 24), capture=["with_prefix", "masked",
                                                                             "hidden_states"])
    lay = out["layout"]
    assert lay.prefix_names == expected_prefix[layout] == model.prefix_names
    assert lay.grid == (4, 6) and lay.patch_size == 4 and lay.class_attn == (layout == "cait")
    assert lay.num_tokens == len(lay.prefix_names) + 24 == out["hidden_states"][0].shape[1]
    assert lay == model.layout()
    for i, name in enumerate(lay.prefix_names):
        assert lay.patch_position(i) is None
        assert torch.equal(out["with_prefix"][:, i], getattr(model, f"{name}_token")[0].expand(2, -1))
    assert torch.equal(out["with_prefix"][:, lay.num_prefix_tokens:], out["masked"])
    positions = [lay.patch_position(t) for t in range(lay.num_prefix_tokens, lay.num_tokens)]
    assert positions == [(r, c) for r in range(4) for c in range(6)]
    assert all(lay.token_index(r, c) == t + lay.num_prefix_tokens for t, (r, c) in enumerate(positions))
