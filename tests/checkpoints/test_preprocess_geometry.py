"""Preprocess.source_point undoes the resize and the centre crop: a model pixel maps back to the photo's."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from vit_explorer.checkpoints import Preprocess


def ramps(h: int, w: int) -> Image.Image:
    """Red = the column, green = the row: each pixel holds its own coordinates."""
    rows, cols = np.mgrid[0:h, 0:w]
    return Image.fromarray(np.stack([cols, rows, np.zeros_like(rows)], axis=-1).astype(np.uint8))


@pytest.mark.parametrize("recipe", [
    Preprocess((64, 64), resize_shortest=73, crop=True, interpolation="bilinear", mean=(0, 0, 0), std=(1, 1, 1)),
    Preprocess((64, 64), resize_shortest=73, crop=True, crop_offset="floor", interpolation="bilinear",
               mean=(0, 0, 0), std=(1, 1, 1)),
    Preprocess((48, 80), resize_to=(60, 90), keep_ratio=True, crop=True, interpolation="bilinear",
               mean=(0, 0, 0), std=(1, 1, 1)),
    Preprocess((64, 96), interpolation="bilinear", mean=(0, 0, 0), std=(1, 1, 1)),
], ids=["shortest+crop", "floor crop", "keep ratio+crop", "plain resize"])
def test_a_model_pixel_maps_back_to_the_photo_pixel_it_shows(recipe: Preprocess) -> None:
    h, w = 200, 250
    pixels = recipe(ramps(h, w))[0].numpy() * 255  # (3, H, W): the coordinates each model pixel shows
    mh, mw = recipe.size
    for i, j in [(mh // 4, mw // 3), (mh // 2, mw // 2), (3 * mh // 4, 2 * mw // 3)]:  # inside: no edge effects
        y, x = recipe.source_point(i + 0.5, j + 0.5, h, w)  # the centre of model pixel (i, j)
        assert pixels[1, i, j] + 0.5 == pytest.approx(y, abs=1.0)
        assert pixels[0, i, j] + 0.5 == pytest.approx(x, abs=1.0)
