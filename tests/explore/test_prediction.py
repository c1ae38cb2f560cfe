"""The sentence under the prediction chart: what the masks did."""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image

from vit_explorer.checkpoints import LoadedModel, Preprocess
from vit_explorer.explore.forward import Inputs, Needs, run_forward
from vit_explorer.explore.prediction import change_text
from vit_explorer.models import VisionTransformer, preset


def masked_result(model: VisionTransformer):
    cfg = model.config
    pixels = (np.random.default_rng(0).random((*cfg.image_size, 3)) * 255).astype(np.uint8)
    loaded = LoadedModel(model.eval(), cfg, [f"class {i}" for i in range(cfg.num_classes)], Preprocess(cfg.image_size))
    mask = np.zeros(cfg.grid_size, bool)
    mask[0, :2] = True
    heads = np.ones((cfg.depth, cfg.num_heads), np.float32)
    return run_forward(Inputs(loaded, Image.fromarray(pixels), cfg.image_size, mask, heads, needs=Needs()))


def test_the_change_of_the_unmasked_top_class_in_a_sentence() -> None:
    torch.manual_seed(0)
    result = masked_result(VisionTransformer(preset("classroom-tiny")))
    top = int(result.baseline_probs.argmax())
    text = change_text(result)
    assert text.startswith("With 2 masked patches, 0 heads off: ")
    assert f"'class {top}' {result.baseline_probs[top]:.1%} → {result.probs[top]:.1%}" in text


def test_non_finite_probabilities_are_said_to_be_so() -> None:
    torch.manual_seed(0)
    model = VisionTransformer(preset("classroom-tiny"))
    with torch.no_grad():
        model.blocks[0].mlp.fc1.weight[0, 0] = float("nan")
    text = change_text(masked_result(model))
    assert "not numbers" in text and "nan%" not in text and "no change" not in text
