"""Captures on demand: a forward pass that computes only what the views ask for (explore.forward.Needs) gives
the same numbers as the pass that captures everything, for each kind of need, with masks and heads off."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from vit_explorer.checkpoints import LoadedModel, Preprocess
from vit_explorer.explore.forward import EVERYTHING, Inputs, Needs, run_forward
from vit_explorer.models import VisionTransformer, preset

TOL = dict(rtol=1e-5, atol=1e-6)


def _inputs(overrides: dict[str, object], needs: Needs) -> Inputs:
    torch.manual_seed(0)
    model = VisionTransformer(preset("classroom-tiny", **overrides)).eval()
    cfg = model.config
    loaded = LoadedModel(model, cfg, [f"class {i}" for i in range(cfg.num_classes)], Preprocess(cfg.image_size))
    pixels = (np.random.default_rng(1).random((*cfg.image_size, 3)) * 255).astype(np.uint8)
    mask = np.zeros(cfg.grid_size, bool)
    mask[1, 2:4] = True
    heads = np.ones((cfg.depth + cfg.class_attn_depth, cfg.num_heads), np.float32)
    heads[0, 1] = 0.0
    return Inputs(loaded, Image.fromarray(pixels), cfg.image_size, mask, heads, needs=needs)


@pytest.mark.parametrize("overrides", [{}, {"prefix_tokens": "none", "pool": "gap"}, {"prefix_tokens": "cls+dist"}],
                         ids=["cls", "gap", "distilled"])
def test_each_need_alone_equals_the_pass_that_keeps_everything(overrides: dict[str, object]) -> None:
    inputs = _inputs(overrides, EVERYTHING)
    full = run_forward(inputs)
    assert EVERYTHING.maps is None and full.maps.keys() == set(range(full.depth))
    plain = run_forward(_inputs(overrides, Needs()))
    np.testing.assert_allclose(plain.probs, full.probs, **TOL)
    np.testing.assert_allclose(plain.baseline_probs, full.baseline_probs, **TOL)
    assert not plain.maps and plain.fused is None and plain.distance is None and not plain.tokens

    one = run_forward(_inputs(overrides, Needs(maps=frozenset({1}))))
    assert one.maps.keys() == {1}
    torch.testing.assert_close(one.maps[1], full.maps[1], **TOL)

    fused = run_forward(_inputs(overrides, Needs(fusion="mean")))
    for block, probs in full.maps.items():
        torch.testing.assert_close(fused.fused[block], probs.mean(dim=1), **TOL)

    query = full.layout.num_prefix_tokens + 5
    rows = run_forward(_inputs(overrides, Needs(query_rows=(query,))))
    for block, probs in full.maps.items():
        torch.testing.assert_close(rows.query_maps[block], probs[:, :, query], **TOL)

    distance = run_forward(_inputs(overrides, Needs(distance=True)))
    np.testing.assert_allclose(distance.distance, full.distance, **TOL)

    tokens = run_forward(_inputs(overrides, Needs(tokens=frozenset({0, 2}))))
    assert tokens.tokens.keys() == {0, 2}
    for state in (0, 2):
        torch.testing.assert_close(tokens.tokens[state], full.tokens[state], **TOL)
    np.testing.assert_allclose(tokens.norms, full.norms, **TOL)


def test_a_pass_after_a_mask_click_reuses_the_preprocessed_image_and_nothing_else() -> None:
    """Given the last result, a pass of the same image object at the same size takes its preprocessed pixels (a mask
    click changes neither) and gives the numbers a pass from the image gives; another image object or size is
    preprocessed anew; [CLS]'s similarity to the patches (all states at once) is each state's, as before."""
    from dataclasses import replace

    from vit_explorer.analysis.tokens import patch_cls_similarity

    inputs = _inputs({}, EVERYTHING)
    first = run_forward(replace(inputs, mask=np.zeros_like(inputs.mask)))
    again = run_forward(inputs, previous=first)
    fresh = run_forward(inputs)
    assert again.pixels is first.pixels and fresh.pixels is not first.pixels
    np.testing.assert_array_equal(again.display, fresh.display)
    np.testing.assert_allclose(again.probs, fresh.probs, **TOL)
    np.testing.assert_allclose(again.norms, fresh.norms, **TOL)
    states = [fresh.tokens[i] for i in sorted(fresh.tokens)]  # (1, T, D) each
    np.testing.assert_allclose(fresh.cls_patch, [float(patch_cls_similarity(s, fresh.layout).mean()) for s in states],
                               **TOL)
    other = replace(inputs, image=inputs.image.transpose(Image.Transpose.FLIP_LEFT_RIGHT))
    flipped = run_forward(other, previous=first)
    assert flipped.pixels is not first.pixels
    np.testing.assert_array_equal(flipped.display, first.display[:, ::-1])
