"""The Components sweep reads over the image: the photo under its diverging maps is grey and dimmed (over the full
colour photo the maps' pale middle washed out)."""

from __future__ import annotations

import numpy as np
import torch

from vit_explorer.analysis.components import sweep
from vit_explorer.explore.components import sweep_figure
from vit_explorer.explore.figures import DIMMED, dimmed
from vit_explorer.models import VisionTransformer, preset


def test_dimmed_is_grey_at_the_kept_brightness() -> None:
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (6, 5, 3), dtype=np.uint8)
    out = dimmed(image)
    assert out.shape == image.shape and out.dtype == np.uint8
    assert (out[..., 0] == out[..., 1]).all() and (out[..., 1] == out[..., 2]).all()
    grey = image.astype(np.float64) @ np.array([0.299, 0.587, 0.114])
    np.testing.assert_allclose(out[..., 0], grey * DIMMED, atol=0.51)
    assert dimmed(None) is None


def test_the_sweep_is_drawn_over_the_dimmed_photo() -> None:
    torch.manual_seed(0)
    model = VisionTransformer(preset("classroom-tiny")).eval()
    clean, corrupted = torch.randn(1, 3, 32, 32), torch.randn(1, 3, 32, 32)
    result = sweep(model, clean, corrupted, "resid", layers=[0])
    photo = np.random.default_rng(1).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    figure = sweep_figure(result, model.layout((32, 32)), photo)
    np.testing.assert_array_equal(figure.image, dimmed(photo))
    assert figure.image.mean() <= DIMMED * photo.mean() + 1
