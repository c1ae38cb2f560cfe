"""Issue 29: attention health per logged step (training/health.py) equals a numpy recomputation from the captured
attention and block outputs, and the trainer yields it after every Step."""

from __future__ import annotations

import math

import numpy as np
import torch

from vit_explorer.models import VisionTransformer
from vit_explorer.training import events as ev
from vit_explorer.training.health import attention_health, health_series
from vit_explorer.training.recipe import Recipe
from vit_explorer.training.trainer import train

from .conftest import tiny_config


def recomputed(model: VisionTransformer, pixels: torch.Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Entropy per block (mean over heads and queries), the largest token norm per block and [CLS]'s last-block
    attention to the patches, from run_with_cache's captures, in numpy."""
    model.eval()
    _, cache = model.run_with_cache(pixels)
    depth, n = model.config.depth, model.layout().num_patches
    entropy, norms = [], []
    for b in range(depth):
        p = cache[f"blocks.{b}.attn.hook_pattern"][0].double().numpy()  # (heads, T, T)
        entropy.append(float((-(p * np.log(np.where(p > 0, p, 1.0))).sum(-1)).mean()))
        norms.append(float(np.linalg.norm(cache[f"blocks.{b}.hook_resid_post"][0].double().numpy(), axis=-1).max()))
    last = cache[f"blocks.{depth - 1}.attn.hook_pattern"][0].double().numpy()
    cls = last[:, 0, -n:].mean(0).reshape(model.layout().grid)
    return np.asarray(entropy), np.asarray(norms), cls


def test_health_equals_a_recomputation_from_the_captured_attention() -> None:
    torch.manual_seed(0)
    model = VisionTransformer(tiny_config(depth=3, num_heads=2)).train()
    pixels = torch.randn(1, 3, 16, 16)
    health = attention_health(model, 7, pixels)
    assert model.training  # its mode is kept
    entropy, norms, cls = recomputed(model, pixels)
    np.testing.assert_allclose(health.entropy, entropy, rtol=1e-5)
    np.testing.assert_allclose(health.max_norm, norms, rtol=1e-5)
    np.testing.assert_allclose(health.cls_attention, cls, rtol=1e-5, atol=1e-7)
    assert health.step == 7 and health.max_entropy == math.log(model.layout().num_tokens)
    assert (health.entropy <= health.max_entropy + 1e-6).all()  # uniform attention is the maximum
    steps, series, largest = health_series([health])
    assert steps == [7] and series["uniform (log T)"] == [health.max_entropy]
    assert series["block 2"] == [float(health.entropy[2])] and largest == [float(health.max_norm.max())]


def test_the_trainer_yields_health_after_every_step(colour_data) -> None:
    recipe = Recipe(steps=10, batch_size=32, lr=1e-3, warmup=0.0, log_every=5, eval_every=1.0, snapshot_every=100)
    found = list(train(tiny_config(num_classes=4, depth=2), colour_data, recipe))
    steps = [e.step for e in found if isinstance(e, ev.Step)]
    health = [e for e in found if isinstance(e, ev.AttentionHealth)]
    assert steps == [5, 10] and [h.step for h in health] == steps
    assert all(h.entropy.shape == (2,) and np.isfinite(h.entropy).all() and h.cls_attention.shape == (4, 4)
               for h in health)
    last, final = health[-1], next(e for e in found if isinstance(e, ev.Finished))
    assert not np.array_equal(health[0].entropy, last.entropy)  # it follows the model as it learns
    assert final.model.config.depth == 2
