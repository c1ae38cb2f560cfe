"""The feature pictures' numbers, each against a computation written out by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from vit_explorer.checkpoints import LoadedModel, Preprocess
from vit_explorer.explore import features, position
from vit_explorer.explore.forward import Inputs, Needs, run_forward
from vit_explorer.models import VisionTransformer, preset


def result_for(model: VisionTransformer, needs: Needs, seed: int = 0):
    cfg = model.config
    pixels = (np.random.default_rng(seed).random((*cfg.image_size, 3)) * 255).astype(np.uint8)
    loaded = LoadedModel(model.eval(), cfg, [str(i) for i in range(cfg.num_classes)], Preprocess(cfg.image_size))
    heads = np.ones((cfg.depth + cfg.class_attn_depth, cfg.num_heads), np.float32)
    return run_forward(Inputs(loaded, Image.fromarray(pixels), cfg.image_size, np.zeros(cfg.grid_size, bool), heads,
                              needs=needs))


@pytest.fixture
def registers() -> VisionTransformer:
    torch.manual_seed(0)
    model = VisionTransformer(preset("classroom-tiny", reg_tokens=2, image_size=(16, 24)))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("_token"):
                p.normal_()
    return model


def test_keep_mass_keeps_the_fewest_patches_holding_the_share() -> None:
    maps = np.array([[[0.5, 0.1], [0.3, 0.1]]])
    kept = features.keep_mass(maps, 0.6)  # 0.5 alone is 50%: the 0.3 joins to pass 60%
    np.testing.assert_array_equal(kept, [[[0.5, 0.0], [0.3, 0.0]]])
    np.testing.assert_array_equal(features.keep_mass(maps, 1.0), maps)
    with pytest.raises(ValueError):
        features.keep_mass(maps, 0.0)


def test_pca_colours_share_one_basis_across_images() -> None:
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(6, 8, generator=g), torch.randn(4, 8, generator=g)
    joint = features.pca_colours([a, b], [(2, 3), (2, 2)], remove_background=False)
    x = torch.cat([a, b])
    x = x - x.mean(0)
    _, _, vh = torch.linalg.svd(x, full_matrices=False)
    scores = (x @ vh[:3].T).numpy()
    scaled = (scores - scores.min(0)) / (scores.max(0) - scores.min(0))
    for got, want in ((joint.colours[0].reshape(6, 3), scaled[:6]), (joint.colours[1].reshape(4, 3), scaled[6:])):
        # components are defined up to sign: each colour channel matches the hand-computed one or its mirror
        for c in range(3):
            assert np.allclose(got[:, c], want[:, c], atol=1e-5) or np.allclose(got[:, c], 1 - want[:, c], atol=1e-5)
    assert joint.explained.shape == (3,) and np.all(np.diff(joint.explained) <= 1e-9)


def test_background_removal_keeps_the_smaller_side_black_elsewhere() -> None:
    tokens = torch.zeros(10, 4)
    tokens[:3, 0] = 5.0  # three patches stand out along one direction
    tokens += 0.01 * torch.randn(10, 4, generator=torch.Generator().manual_seed(1))
    pca = features.pca_colours([tokens], [(2, 5)], remove_background=True)
    assert pca.foreground[0].reshape(-1).tolist() == [True] * 3 + [False] * 7
    assert np.all(pca.colours[0].reshape(10, 3)[3:] == 0)


def test_token_norms_and_outliers_name_the_registers(registers: VisionTransformer) -> None:
    result = result_for(registers, Needs(tokens=None))
    layout = result.layout
    assert layout.prefix_names == ("cls", "reg0", "reg1") and layout.registers == (1, 2)
    states = [result.tokens[i][0] for i in range(registers.config.depth + 1)]
    np.testing.assert_allclose(result.norms, torch.stack([s.norm(dim=-1) for s in states]).numpy(), rtol=1e-6)
    found = features.outliers(result, state=1, factor=0.5)
    assert set(found.register_norms) == {"reg0", "reg1"}
    assert found.register_norms["reg1"] == pytest.approx(float(states[1][2].norm()), rel=1e-6)
    patch_norms = states[1][3:].norm(dim=-1).numpy()
    np.testing.assert_array_equal(found.outliers.reshape(-1), patch_norms > 0.5 * np.median(patch_norms))
    series = features.norms_figure(result).series
    assert set(series) == {"median patch", "largest patch", "[CLS]", "[REG0]", "[REG1]"}


def test_correspondence_is_the_cosine_of_the_chosen_patch(registers: VisionTransformer) -> None:
    a = result_for(registers, Needs(tokens=frozenset({2})), seed=0)
    b = result_for(registers, Needs(tokens=frozenset({2})), seed=1)
    ta, tb = features.patch_tokens(a, 2), features.patch_tokens(b, 2)
    sim = features.correspondence(ta, tb, 5, b.layout.grid)
    by_hand = [float(torch.dot(ta[5], t) / (ta[5].norm() * t.norm())) for t in tb]
    np.testing.assert_allclose(sim.reshape(-1), by_hand, rtol=1e-5, atol=1e-6)
    figure = features.correspondence_figure(a, b, 2, (1, 1), ("a", "b"))
    assert len(figure.images) == 2 and "most alike at" in figure.titles[1]


def test_cls_heads_need_the_last_blocks_maps(registers: VisionTransformer) -> None:
    depth = registers.config.depth
    result = result_for(registers, Needs(maps=frozenset({depth - 1})))
    figure = features.cls_heads_figure(result, 0.6)
    probs = result.maps[depth - 1][0]
    raw = probs[:, 0, 3:].reshape(-1, *result.layout.grid).numpy()
    np.testing.assert_array_equal(figure.maps, features.keep_mass(raw, 0.6))
    with pytest.raises(ValueError, match="last block"):
        features.cls_heads_figure(result_for(registers, Needs()), 0.6)


def test_rotary_similarity_depends_on_the_offset_only() -> None:
    model = VisionTransformer(preset("classroom-tiny", pos_embed="rope", image_size=(16, 24)))
    sim = position.rotary_similarity(model, (4, 6))
    assert sim.shape == (4, 6, 4, 6)
    np.testing.assert_allclose(np.diagonal(sim.reshape(24, 24)), 1.0, atol=1e-6)
    assert sim[0, 0, 1, 2] == pytest.approx(sim[2, 3, 3, 5], abs=1e-6)  # the same (1, 2) offset
    angles = model.rope_angles((4, 6)).float()  # (N, K): the mean cosine of the angle differences, written out
    by_hand = (angles[:, None, :] - angles[None, :, :]).cos().mean(dim=-1)
    np.testing.assert_allclose(sim.reshape(24, 24), by_hand.numpy(), atol=1e-5)
    assert position.attention_scheme_figure(model, (4, 6)) is not None


def test_relative_bias_is_the_blocks_table_at_each_offset() -> None:
    model = VisionTransformer(preset("classroom-tiny", pos_embed="rel_bias", image_size=(16, 24)))
    with torch.no_grad():
        for block in model.blocks:
            block.attn.relative_position_bias_table.normal_()
    bias = position.relative_bias(model, (4, 6), block=1)
    table = model.blocks[1].attn.relative_position_bias_table.detach().mean(dim=1)  # (rows,) mean over heads
    offset = (2 - 0 + 3) * 11 + (3 - 1 + 5)  # query (2, 3), key (0, 1): offset (2, 2) in a (7, 11) table
    assert bias[2, 3, 0, 1] == pytest.approx(float(table[offset]), abs=1e-6)
    with pytest.raises(ValueError, match="block 9"):
        position.relative_bias(model, (4, 6), block=9)


def test_pca_leaves_non_finite_patches_black_and_refuses_when_none_are_finite() -> None:
    tokens = torch.randn(12, 8, generator=torch.Generator().manual_seed(0))
    tokens[[1, 5]] = float("nan")
    pca = features.pca_colours([tokens], [(3, 4)], remove_background=False)
    colours, kept = pca.colours[0].reshape(12, 3), pca.foreground[0].reshape(12)
    assert np.isfinite(colours).all() and not kept[[1, 5]].any() and kept.sum() == 10
    np.testing.assert_array_equal(colours[[1, 5]], 0.0)
    with pytest.raises(ValueError, match="finite"):
        features.pca_colours([torch.full((12, 8), float("nan"))], [(3, 4)], remove_background=True)


@pytest.mark.parametrize("proj_dim", [0, 12])
def test_the_embedding_shown_is_what_the_model_returns(proj_dim: int) -> None:
    """CLIP's tower returns its projection (here 12 numbers, 512 for ViT-B/16), not the 64 pooled features."""
    torch.manual_seed(0)
    model = VisionTransformer(preset("classroom-tiny", num_classes=0, pre_norm=True, proj_dim=proj_dim))
    result = result_for(model, Needs())
    figure = features.embedding_figure(result, k=5)
    width = proj_dim or model.config.embed_dim
    what = "Image embedding, projected to the joint space" if proj_dim else "Pooled embedding"
    assert figure.title == f"{what} ({width} numbers): the 5 largest"
    shown = [int(label.removeprefix("dim ")) for label in figure.labels]
    np.testing.assert_allclose(figure.values, result.logits.numpy()[shown].astype(np.float64))
    assert np.all(np.abs(figure.values) >= np.sort(np.abs(result.logits.numpy()))[-5] - 1e-9)
