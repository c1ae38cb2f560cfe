"""On the built-in data, whose shapes are known exactly: the masks are the drawn shapes, and on the bundled
classroom model (trained on `shapes`) the class-specific maps find the shape more often than chance."""

from __future__ import annotations

import numpy as np
import pytest

from vit_explorer import load
from vit_explorer.analysis import faithfulness as faith
from vit_explorer.data.synthetic import generate, object_masks
from vit_explorer.explore import relevance as rel
from vit_explorer.paths import BUNDLED_MODEL


def test_object_masks_are_the_drawn_shapes() -> None:
    images, _ = generate(6, variant="where", split="val")
    masks = object_masks(6, variant="where", split="val").numpy()
    assert masks.shape == (6, 32, 32) and masks.any(axis=(1, 2)).all()
    for image, mask in zip(images.numpy().astype(float), masks, strict=True):
        inside, outside = image[:, mask].mean(axis=1), image[:, ~mask].mean(axis=1)
        assert np.abs(inside - outside).max() > 40  # the shape's colour is far from the background's
    with pytest.raises(ValueError, match="variant"):
        object_masks(1, variant="stripes")


@pytest.mark.skipif(not (BUNDLED_MODEL / "vit_explorer.json").exists(), reason="the bundled model is not built")
def test_maps_find_the_shape_on_the_bundled_model() -> None:
    loaded = load(str(BUNDLED_MODEL), device="cpu")
    n = 8
    result = rel.localisation(loaded, ["occlusion", "attention-gradient", "rollout"], n=n)
    chance = np.mean([faith.patch_coverage(m, 4).astype(bool).mean() for m in object_masks(n, split="val").numpy()])
    assert result.images == n and set(result.pointing) == {"occlusion", "attention-gradient", "rollout"}
    assert result.pointing["occlusion"] > chance and result.pointing["attention-gradient"] > chance
    assert all(0.0 <= v <= 1.0 for v in result.iou.values())
