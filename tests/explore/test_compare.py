"""Two models side by side: what carries over from one side to the other, and a pass made once."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from PIL import Image

from vit_explorer.checkpoints import LoadedModel, Preprocess
from vit_explorer.explore.compare import side
from vit_explorer.explore.forward import EVERYTHING, Inputs, Needs, run_forward
from vit_explorer.models import VisionTransformer, preset


def loaded_model(**overrides: object) -> LoadedModel:
    torch.manual_seed(0)
    cfg = preset("classroom-tiny", **overrides)
    return LoadedModel(VisionTransformer(cfg).eval(), cfg, [f"c{i}" for i in range(cfg.num_classes)],
                       Preprocess(cfg.image_size))


def inputs_for(loaded: LoadedModel, needs: Needs = EVERYTHING) -> Inputs:
    cfg = loaded.config
    pixels = (np.random.default_rng(0).random((*cfg.image_size, 3)) * 255).astype(np.uint8)
    mask = np.zeros(cfg.grid_size, bool)
    mask[1, 2] = True
    heads = np.ones((cfg.depth, cfg.num_heads), np.float32)
    return Inputs(loaded, Image.fromarray(pixels), cfg.image_size, mask, heads, model_id=3, image_id=5, needs=needs)


def test_the_current_pass_is_reused_only_when_it_is_the_same_pass() -> None:
    mine = loaded_model()
    inputs = inputs_for(mine)
    done = run_forward(inputs)
    assert side(mine, "mine", inputs, done=done).result is done
    without_rollout = run_forward(inputs_for(mine, Needs()))
    assert side(mine, "mine", inputs, done=without_rollout).result is not without_rollout  # no rollout in it
    moved = dataclasses.replace(inputs, mask=np.roll(inputs.mask, 1))
    fresh = side(mine, "mine", moved, done=done)
    assert fresh.result is not done and fresh.result.inputs.mask[1, 3]
    np.testing.assert_allclose(side(mine, "mine", inputs).result.probs, done.probs, atol=1e-6)


def test_masks_that_do_not_fit_the_other_model_are_left_out_and_said() -> None:
    mine, other = loaded_model(), loaded_model(patch_size=8)
    other_side = side(other, "other", inputs_for(mine))
    assert not other_side.result.inputs.mask.any() and "does not fit this grid" in other_side.note
    assert other_side.result.inputs.model_id == 0  # the other model is not the session's
