"""What the relevance equations imply, on random attention and random blocks: Chefer 2021b's attention-gradient
with unit gradients is 2^L times attention rollout (R = prod (I + A_l) = 2^L prod (I + A_l) / 2, each factor's rows
already summing to 1); Chefer 2021's rollout of gradient-weighted relevance with R_A = A and unit gradients is
rollout; the LRP rules conserve relevance (linear alpha=1 beta=0, the halved products, the normalised adds, a
whole block); Grad-CAM and integrated gradients follow their definitions; the faithfulness helpers count,
order and integrate as stated."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import torch

from vit_explorer.analysis import attention as attn
from vit_explorer.analysis import faithfulness as faith
from vit_explorer.analysis import lrp
from vit_explorer.analysis import relevance as rel
from vit_explorer.models import TokenLayout, VisionTransformer, preset

LAYOUTS = [TokenLayout(("cls",), (3, 4), 4), TokenLayout(("cls", "dist", "reg0"), (2, 3), 4),
           TokenLayout((), (3, 3), 4)]


def _attention(layout: TokenLayout, blocks: int = 3, heads: int = 2, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    t = layout.num_tokens
    return [torch.randn(2, heads, t, t, generator=g).mul(2).softmax(-1) for _ in range(blocks)]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_attention_gradient_with_unit_gradients_is_two_to_the_depth_times_rollout(layout: TokenLayout) -> None:
    maps = _attention(layout)
    ones = [torch.ones_like(a) for a in maps]
    query = 0 if layout.num_prefix_tokens else list(range(layout.num_tokens))
    ours = rel.attention_gradient(maps, ones, layout, query=query)
    expected = 2 ** len(maps) * attn.rollout(maps, layout, query=query)
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=1e-5)
    # a constant gradient c scales each block's term: prod (I + c A_l), not rollout any more unless c = 1
    scaled = rel.attention_gradient(maps, [3 * g for g in ones], layout, query=query)
    assert not torch.allclose(scaled, 4 ** len(maps) * attn.rollout(maps, layout, query=query) / 2 ** len(maps))


def test_attention_gradient_keeps_only_positive_gradient_weighted_attention() -> None:
    layout = LAYOUTS[0]
    maps = _attention(layout)
    negative = [-torch.ones_like(a) for a in maps]  # (grad * A)+ = 0: R stays I, [CLS] row over patches is 0
    assert torch.count_nonzero(rel.attention_gradient(maps, negative, layout)) == 0


def test_cait_class_attention_readout_follows_the_equations() -> None:
    layout = TokenLayout((), (2, 2), 4, class_attn=True)
    maps = _attention(layout, blocks=2)
    g = torch.Generator().manual_seed(1)
    cls = [torch.randn(2, 2, 1, 5, generator=g).softmax(-1) for _ in range(2)]
    ones = [torch.ones_like(a) for a in maps]
    ours = rel.attention_gradient(maps, ones, layout, class_attentions=cls, class_gradients=[torch.ones_like(c)
                                                                                            for c in cls])
    r = torch.eye(4).expand(2, 4, 4)
    for a in maps:
        r = r + a.mean(1) @ r
    full = torch.eye(5).expand(2, 5, 5).clone()
    full[:, 1:, 1:] = r
    for c in cls:  # [CLS] row += abar @ R over [CLS; patches]
        full[:, 0] = full[:, 0] + (c.mean(1) @ full)[:, 0]
    torch.testing.assert_close(ours, full[:, 0, 1:].reshape(2, 2, 2), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("every_token", [False, True])
def test_an_attention_pool_reads_the_rows_of_the_tokens_it_attends(every_token: bool) -> None:
    """The latent query has no residual: its row is abar_pool R over the tokens it reads, the patches (SigLIP,
    AIMv2) or every token, [CLS] and registers included (the Perception Encoder). A pool all on one token reads
    exactly that token's row; with unit gradients it is the mean over heads of the pool times 2^L rollout."""
    layout = LAYOUTS[1]
    maps = _attention(layout)
    ones = [torch.ones_like(a) for a in maps]
    read = layout.num_tokens if every_token else layout.num_patches
    first = layout.num_tokens - read
    for token in (0, layout.num_prefix_tokens + 2) if every_token else (layout.num_prefix_tokens + 2,):
        onto = torch.zeros(2, 3, 1, read)
        onto[..., token - first] = 1.0
        ours = rel.attention_gradient(maps, ones, layout, pool=(onto, torch.ones_like(onto)))
        torch.testing.assert_close(ours, rel.attention_gradient(maps, ones, layout, query=token), atol=1e-6, rtol=0)
    g = torch.Generator().manual_seed(2)
    pool = torch.randn(2, 3, 1, read, generator=g).softmax(-1)
    rows = 2 ** len(maps) * torch.eye(layout.num_tokens)[None] @ _joint(maps)  # (B, T, T): R with unit gradients
    expected = attn.to_grid((pool.mean(1) @ rows[:, first:])[:, 0], layout)
    torch.testing.assert_close(rel.attention_gradient(maps, ones, layout, pool=(pool, torch.ones_like(pool))),
                               expected, atol=1e-5, rtol=1e-5)


def test_attention_gradient_reads_rows_by_weight() -> None:
    layout = LAYOUTS[1]
    maps = _attention(layout)
    grads = [torch.randn_like(a) for a in maps]
    weights = torch.zeros(2, layout.num_tokens)
    weights[:, 0], weights[:, layout.num_prefix_tokens:] = 0.3, 0.7 / layout.num_patches
    expected = 0.3 * rel.attention_gradient(maps, grads, layout, query=0) + 0.7 * rel.attention_gradient(
        maps, grads, layout, query=list(range(layout.num_prefix_tokens, layout.num_tokens)))
    torch.testing.assert_close(rel.attention_gradient(maps, grads, layout, query=weights), expected, atol=1e-5,
                               rtol=1e-5)


def _joint(maps: list[torch.Tensor]) -> torch.Tensor:
    """prod_l (I + A_l) / 2, later blocks on the left: rollout's joint attention, (B, T, T)."""
    t = maps[0].shape[-1]
    joint = torch.eye(t).expand(maps[0].shape[0], t, t)
    for a in maps:
        joint = (torch.eye(t) + a.mean(1)) / 2 @ joint
    return joint


@pytest.mark.parametrize("layout", LAYOUTS[:2])
def test_attribution_rollout_of_attention_with_unit_gradients_is_rollout(layout: TokenLayout) -> None:
    """Each block's I + A has rows summing to 2 (no normalisation, as the authors' code): rollout times 2^depth."""
    maps = _attention(layout)
    ones = [torch.ones_like(a) for a in maps]
    ours = rel.attribution_rollout(maps, ones, layout, query=0)
    torch.testing.assert_close(ours / 2 ** len(maps), attn.rollout(maps, layout, query=0), atol=1e-6, rtol=1e-5)


def test_lrp_rules_conserve_relevance() -> None:
    g = torch.Generator().manual_seed(0)
    x, w, r = torch.randn(2, 5, 8, generator=g), torch.randn(6, 8, generator=g), torch.randn(2, 5, 6, generator=g)
    z = torch.nn.functional.linear(x.clamp(min=0), w.clamp(min=0)) + torch.nn.functional.linear(x.clamp(max=0),
                                                                                                 w.clamp(max=0))
    assert (z == 0).any()  # an output with only opposite-sign contributions: the alpha=1 rule drops its relevance
    torch.testing.assert_close(lrp.linear_rule(x, w, r).sum(), r[z > 0].sum(), atol=1e-4, rtol=1e-5)
    a, b, rm = torch.randn(2, 3, 4, generator=g), torch.randn(2, 4, 5, generator=g), torch.randn(2, 3, 5, generator=g)
    ra, rb = lrp.matmul_rule(a, b, rm)
    torch.testing.assert_close(ra.sum() + rb.sum(), rm.sum(), atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(ra.sum(), rm.sum() / 2, atol=1e-4, rtol=1e-5)  # each operand gets half
    u, v, ru = torch.randn(2, 5, 8, generator=g), torch.randn(2, 5, 8, generator=g), torch.randn(2, 5, 8, generator=g)
    ra, rb = lrp.add_rule(u, v, ru)
    torch.testing.assert_close(ra.sum((1, 2)) + rb.sum((1, 2)), ru.sum((1, 2)), atol=1e-4, rtol=1e-5)
    tokens, rp = torch.randn(2, 6, 8, generator=g), torch.randn(2, 8, generator=g)
    torch.testing.assert_close(lrp.mean_rule(tokens, rp).sum(1), rp, atol=1e-4, rtol=1e-5)


def _authors_safe_divide(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # as their code writes it
    den = b.clamp(min=1e-9) + b.clamp(max=1e-9)
    den = den + den.eq(0).type(den.type()) * 1e-9
    return a / den * b.ne(0).type(b.type())


def _straightforward_rules(x, w, r, a, b, rm, u, v, ru):
    """The linear (alpha = 1, beta = 0), product and add rules written out term by term, as the authors' code forms
    them: x+ W+ + x- W- forward, s W+ and s W- back; x * (s b^T) / 2; each branch's share |s_u| / (|s_a| + |s_b|)."""
    pw, nw, px, nx = w.clamp(min=0), w.clamp(max=0), x.clamp(min=0), x.clamp(max=0)
    s = _authors_safe_divide(r, torch.nn.functional.linear(px, pw) + torch.nn.functional.linear(nx, nw))
    linear = px * (s @ pw) + nx * (s @ nw)
    s = _authors_safe_divide(rm, a @ b)
    product = (a * (s @ b.transpose(-2, -1)) / 2, b * (a.transpose(-2, -1) @ s) / 2)
    s = _authors_safe_divide(ru, u + v)
    su, sv, total = (u * s).sum((1, 2), keepdim=True), (v * s).sum((1, 2), keepdim=True), ru.sum((1, 2), keepdim=True)
    added = tuple(part * _authors_safe_divide(_authors_safe_divide(mine.abs(), su.abs() + sv.abs()) * total, mine)
                  for part, mine in ((u * s, su), (v * s, sv)))
    return linear, product, added


@pytest.mark.parametrize("shape", [(2, 5, 8, 6), (1, 197, 384, 1152), (1, 65, 384, 96)])
def test_the_rules_equal_their_straightforward_form(shape: tuple[int, int, int, int]) -> None:
    """lrp's rules (no mask where z+ = 0, z+ from the pass's x W^T on a large layer, the halving folded in) give what
    the straightforward form gives, within 1e-5 of the largest value, on random operands with exact zeros: an
    input row of zeros, and an output with only opposite-sign contributions (z+ = 0: x W^T + |x| |W|^T cancels
    there, and that row is formed the straightforward way)."""
    b, t, n, m = shape
    g = torch.Generator().manual_seed(1)
    x, w, r = torch.randn(b, t, n, generator=g), torch.randn(m, n, generator=g) / n ** 0.5, torch.randn(b, t, m,
                                                                                                           generator=g)
    x[0, 1] = 0.0
    x[0, 0], w[0] = x[0, 0].abs(), -w[0].abs()  # token 0's output 0: z+ = 0, its relevance reaches no input
    a, bb, rm = torch.rand(b, 3, t, t, generator=g), torch.randn(b, 3, t, 16, generator=g), torch.randn(b, 3, t, 16,
                                                                                                         generator=g)
    u, v, ru = torch.randn(b, t, n, generator=g), torch.randn(b, t, n, generator=g), torch.randn(b, t, n, generator=g)
    linear, product, added = _straightforward_rules(x, w, r, a, bb, rm, u, v, ru)
    from_output = lrp.linear_rule(x, w, r, lambda: x @ w.T)  # z+ from the pass's x W^T (on large layers)
    for ours, expected in ((lrp.linear_rule(x, w, r), linear), (from_output, linear),
                           *zip(lrp.matmul_rule(a, bb, rm), product, strict=True),
                           *zip(lrp.add_rule(u, v, ru), added, strict=True)):
        scale = float(expected.abs().max())
        assert float((ours - expected).abs().max()) <= 1e-5 * scale
    b_exact = torch.tensor([0.0, -1e-9, 2.0, -3e-10])  # safe_divide's two special points: 0 and -EPS
    torch.testing.assert_close(lrp.safe_divide(torch.ones(4), b_exact), _authors_safe_divide(torch.ones(4), b_exact),
                               rtol=0, atol=0)


def _one_block(name: str) -> tuple[VisionTransformer, torch.Tensor]:
    """A one-block model of preset `name` (its weights large and random) and a random input to its block."""
    overrides = dict(image_size=(12, 16), patch_size=4, embed_dim=32, depth=1, num_heads=4)
    if preset(name).rope_ref_grid:
        overrides["rope_ref_grid"] = (3, 3)
    model = VisionTransformer(preset(name, **overrides)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    return model, torch.randn(1, model.layout().num_tokens, 32)


@contextmanager
def _block_pass(model: VisionTransformer, x: torch.Tensor) -> Iterator[dict[str, torch.Tensor]]:
    """Block 0's own pass on `x`, the values at its sites kept (by site), under its hooks and without grad."""
    layout, block = model.layout(), model.blocks[0]
    bias = model.pos_scheme.attention_bias(block, model.config, layout.grid, layout.num_prefix_tokens)
    values: dict[str, torch.Tensor] = {}
    keep = [(f"blocks.0.{site}", lambda t, hook: values.__setitem__(hook.name.split(".", 2)[2], t))
            for site in lrp.block_sites(block)]
    with torch.no_grad(), model.hooks(keep):
        block(x, rope=model.rope_angles(layout.grid), bias=bias, num_prefix=layout.num_prefix_tokens)
        yield values


@pytest.mark.parametrize("name", ["vit-s16", "deit3-s16", "beit-b16", "eva02-ti14", "aimv2-l14"])
def test_a_block_forms_z_from_its_projections_outputs_as_from_their_inputs(name: str, monkeypatch) -> None:
    """Every linear layer whose output the pass shows (qkv from q, k, v less BEiT's biases; fc1; the projections
    where no LayerScale follows) gives the block the relevance the two-product form gives, within 1e-5."""
    model, x = _one_block(name)
    relevance = torch.zeros_like(x)
    relevance[:, 0] = torch.rand(32)  # the readout's row alone, as the last block gets it
    with _block_pass(model, x) as values:
        r_in, r_attn = lrp.block_relevance(model.blocks[0], values, relevance)
        monkeypatch.setattr(lrp, "REUSED", 0)  # every layer large enough to take z+ from its output
        reused_in, reused_attn = lrp.block_relevance(model.blocks[0], values, relevance)
    for ours, expected in ((reused_in, r_in), (reused_attn, r_attn)):
        assert float((ours - expected).abs().max()) <= 1e-5 * float(expected.abs().max())


@pytest.mark.parametrize("name", ["vit-s16", "deit3-s16", "eva02-ti14", "dinov2-g14", "beit-b16"])
def test_a_whole_block_conserves_relevance_and_gives_its_attention_map_a_share(name: str) -> None:
    model, x = _one_block(name)
    relevance = torch.rand_like(x)
    with _block_pass(model, x) as values:
        r_in, r_attn = lrp.block_relevance(model.blocks[0], values, relevance)
    torch.testing.assert_close(r_in.sum(), relevance.sum(), atol=1e-3, rtol=1e-4)
    n = model.layout().num_tokens
    assert r_attn.shape == (1, 4, n, n) and torch.isfinite(r_attn).all()


def test_gradcam_weights_channels_by_their_mean_gradient_and_keeps_the_positive_part() -> None:
    layout = TokenLayout(("cls",), (2, 2), 4)
    acts = torch.randn(1, 5, 3)
    grads = torch.randn(1, 5, 3)
    expected = torch.relu((acts[0, 1:] * grads[0, 1:].mean(0)).sum(-1)).reshape(2, 2)
    torch.testing.assert_close(rel.gradcam(acts, grads, layout)[0], expected)


def test_integrated_gradients_of_a_quadratic_are_exact_and_complete() -> None:
    x = torch.randn(1, 3, 4, 4)
    steps = list(rel.integrated_gradients(lambda p: (p ** 2).sum(dim=(1, 2, 3)), x, n_steps=7, batch=3))
    assert steps[:-1] == [3, 6, 7]
    torch.testing.assert_close(steps[-1], x ** 2, atol=1e-5, rtol=1e-5)  # the path integral of 2 a x * x


def test_perturbation_counts_order_and_auc() -> None:
    relevance = np.array([[0.5, 0.1, 0.5], [0.9, 0.0, 0.1]])
    assert faith.removal_order(relevance, True).tolist() == [3, 0, 2, 1, 5, 4]  # ties in raster order
    assert faith.removal_order(relevance, False).tolist() == [4, 1, 5, 0, 2, 3]
    masks = faith.perturbation_masks(relevance, True)
    assert masks.shape == (10, 6) and masks.sum(1).tolist() == [round(6 * k / 10) for k in range(10)]
    assert masks[2].tolist() == [False, False, False, True, False, False]  # round(1.2) = 1 patch: the most relevant
    assert faith.auc(np.array([1.0, 0.0]), np.array([0.0, 1.0])) == 0.5
    inserted = faith.insertion_masks(relevance, faith.deletion_fractions(6))
    assert inserted[0].all() and not inserted[-1].any()


def test_pointing_game_and_the_sixty_percent_region() -> None:
    relevance = np.array([[0.0, 0.1], [0.6, 0.3]])
    coverage = np.array([[0.0, 0.0], [1.0, 0.2]])
    assert faith.pointing_hit(relevance, coverage)
    assert faith.mass_region(relevance).tolist() == [[False, False], [True, False]]
    assert faith.mass_iou(relevance, coverage) == 1.0
    assert not faith.mass_region(np.zeros((2, 2))).any()
