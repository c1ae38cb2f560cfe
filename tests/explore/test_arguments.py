"""The explore layer's public functions check the arguments the views pass, with messages naming the argument."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from PIL import Image

from vit_explorer.checkpoints import LoadedModel, Preprocess
from vit_explorer.explore.attention import needs_for, query_for
from vit_explorer.explore.forward import Inputs, Needs, run_forward
from vit_explorer.models import VisionTransformer, preset


@pytest.fixture(scope="module")
def inputs() -> Inputs:
    model = VisionTransformer(preset("classroom-tiny")).eval()
    loaded = LoadedModel(model, model.config, [str(i) for i in range(10)], Preprocess((32, 32)), "tiny", "built")
    heads = np.ones((model.config.depth, model.config.num_heads), np.float32)
    return Inputs(loaded, Image.new("RGB", (32, 32)), (32, 32), np.zeros((8, 8), bool), heads)


def test_valid_inputs_run(inputs: Inputs) -> None:
    assert run_forward(inputs).probs.shape == (10,)


@pytest.mark.parametrize(("change", "error", "named"), [
    ({"head_mask": np.full((2, 2), np.nan, np.float32)}, ValueError, "head_mask"),
    ({"head_mask": np.full((2, 2), -1.0, np.float32)}, ValueError, "head_mask"),
    ({"head_mask": np.ones((3, 2), np.float32)}, ValueError, "head_mask"),
    ({"mask": np.full((8, 8), np.nan)}, ValueError, "mask"),
    ({"mask": np.zeros((7, 8), bool)}, ValueError, "mask"),
    ({"mask": [[False] * 8] * 8}, TypeError, "mask"),
    ({"image": None}, TypeError, "image"),
    ({"size": (32.0, 32.0)}, TypeError, "size"),
    ({"size": (30, 32)}, ValueError, "patch size"),
    ({"needs": Needs(query_rows=(65,))}, ValueError, "query_rows"),
], ids=["head-mask-nan", "head-mask-negative", "head-mask-shape", "mask-nan", "mask-shape", "mask-list",
        "image-none", "size-floats", "size-not-multiple", "query-row-outside"])
def test_a_bad_argument_is_refused_by_name(inputs: Inputs, change: dict, error: type, named: str) -> None:
    with pytest.raises(error, match=named):
        run_forward(dataclasses.replace(inputs, **change))


def test_a_half_switched_head_is_a_valid_share(inputs: Inputs) -> None:
    heads = np.full((2, 2), 0.5, np.float32)
    assert torch.isfinite(run_forward(dataclasses.replace(inputs, head_mask=heads)).logits).all()


@pytest.mark.parametrize("patch", [(-1, -1), (0, -3), (1.5, 0), (True, 0), (1, 2, 3)])
def test_query_for_refuses_a_patch_that_is_not_on_a_grid(inputs: Inputs, patch) -> None:
    layout = inputs.loaded.model.layout((32, 32))
    with pytest.raises(ValueError, match="patch"):
        query_for(layout, "cls", patch)


def test_query_for_names_the_patch_or_the_classifier_s_query(inputs: Inputs) -> None:
    layout = inputs.loaded.model.layout((32, 32))
    assert query_for(layout, "cls", (0, 0)).rows == (1,)
    assert query_for(layout, "cls", (8, 0)).rows == (0,)  # off this grid (the size shrank): [CLS]
    with pytest.raises(ValueError, match="pool"):
        query_for(layout, "mean", None)


@pytest.mark.parametrize(("args", "named"), [(("every head", 0, "mean"), "mode"), (("one head", -1, "mean"), "layer"),
                                             (("rollout", 0, "median"), "fusion")])
def test_needs_for_refuses_what_the_attention_view_has_not(args: tuple, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        needs_for(*args)
