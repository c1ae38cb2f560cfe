"""An untrained model's attention is close to uniform: its colour bar is centred on the uniform value (1 / the keys)
and the figure says so, instead of stretching noise around 1/65 into structure; a peaked map keeps its own range."""

from __future__ import annotations

import numpy as np
from PIL import Image

from vit_explorer.checkpoints import LoadedModel
from vit_explorer.explore.attention import CLASS_ATTENTION, heads_figure, needs_for, query_for
from vit_explorer.explore.build import build_loaded
from vit_explorer.explore.figures import uniform_levels
from vit_explorer.explore.forward import Inputs, run_forward
from vit_explorer.models import preset


def figure(loaded: LoadedModel, mode: str, heads: tuple[int, ...] | None = None):
    cfg = loaded.config
    pixels = (np.random.default_rng(0).random((*cfg.image_size, 3)) * 255).astype(np.uint8)
    result = run_forward(Inputs(loaded, Image.fromarray(pixels), cfg.image_size, np.zeros(cfg.grid_size, bool),
                                np.ones((cfg.depth + cfg.class_attn_depth, cfg.num_heads), np.float32),
                                needs=needs_for(mode, 0, "mean")))
    query = query_for(result.layout, cfg.pool)
    return heads_figure(result, mode, 0, 0, query, heads=heads)


def test_untrained_class_attention_is_drawn_around_the_uniform_value() -> None:
    cait = build_loaded(preset("classroom", class_attn_depth=2, pos_embed_prefix=False, talking_heads=True,
                               layer_scale_init=1e-5), "cpu", seed=0)
    drawn = figure(cait, CLASS_ATTENTION, heads=(0, 1))
    uniform = 1 / 65  # [CLS] and 64 patches
    assert drawn.levels is not None
    low, high = drawn.levels
    assert abs((low + high) / 2 - uniform) < 1e-9 and low <= drawn.maps.min() and drawn.maps.max() <= high
    assert "untrained: close to uniform, 1/65 = 0.0154 mid-bar" in drawn.heading


def test_untrained_self_attention_of_one_head_says_it_in_its_title() -> None:
    tiny = build_loaded(preset("classroom-tiny"), "cpu", seed=0)
    drawn = figure(tiny, "one head")
    assert drawn.levels is not None and "untrained: close to uniform" in drawn.titles[0]
    assert "1/65" in drawn.titles[0]  # [CLS] and 64 patches


def test_a_peaked_map_keeps_its_own_range() -> None:
    uniform = 1 / 65
    flat = np.full((1, 8, 8), uniform) + np.random.default_rng(0).normal(0, uniform * 0.05, (1, 8, 8))
    assert uniform_levels(flat, uniform) is not None
    peaked = np.full((1, 8, 8), 0.2 / 64)
    peaked[0, 3, 4] = 0.8
    assert uniform_levels(peaked, uniform) is None
