import math

import numpy as np
import pytest
import torch

from vit_explorer.analysis.pe import pe_similarity
from vit_explorer.models import VisionTransformer, ViTConfig

from .conftest import make_model


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    dot = sum(float(x) * float(y) for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(float(x) ** 2 for x in a) * sum(float(y) ** 2 for y in b))


def _learned_rows(model: VisionTransformer) -> tuple[torch.Tensor, int]:
    """The raw learned table and how many prefix rows it has, read from the config by hand."""
    cfg = model.config
    prefix = {"cls": 1, "cls+dist": 2, "none": 0}[cfg.prefix_tokens] if cfg.pos_embed_prefix else 0
    return model.pos_embed[0].detach(), prefix


def test_learned_pe_against_loops(model: VisionTransformer) -> None:
    table, k = _learned_rows(model)
    gh, gw = model.config.grid_size
    result = pe_similarity(model)
    assert result.patches.shape == (gh, gw, gh, gw)
    for i in range(gh):
        for j in range(gw):
            for r in range(gh):
                for c in range(gw):
                    want = _cos(table[k + i * gw + j], table[k + r * gw + c])
                    assert result.patches[i, j, r, c] == pytest.approx(want, abs=1e-5)
    names = ("cls", "dist")[:k]
    assert sorted(result.prefix) == sorted(names)
    for t, name in enumerate(names):
        for r in range(gh):
            for c in range(gw):
                assert result.prefix[name][r, c] == pytest.approx(_cos(table[t], table[k + r * gw + c]), abs=1e-5)


def test_last_patch_is_kept_and_prefix_rows_dropped(model: VisionTransformer) -> None:
    result = pe_similarity(model)
    gh, gw = model.config.grid_size
    diagonal = result.patches.reshape(gh * gw, gh * gw).diagonal()
    np.testing.assert_allclose(diagonal, 1.0, atol=1e-5)  # every patch, the last one included, is itself


def test_cait_says_the_pe_covers_patches_only() -> None:
    result = pe_similarity(make_model("cait"))
    assert result.prefix == {} and "patches only" in result.note


@pytest.mark.parametrize("scheme", ["sincos_2d", "learned_2d", "sincos_1d"])
def test_other_schemes(scheme: str) -> None:
    model = make_model("cls+dist", pos_embed=scheme)
    gh, gw = model.config.grid_size
    result = pe_similarity(model)
    patches = model.position_embedding((gh, gw)).detach()[2:]
    for i, j, r, c in [(0, 0, gh - 1, gw - 1), (1, 2, 3, 0), (gh - 1, gw - 1, 0, 1)]:
        want = _cos(patches[i * gw + j], patches[r * gw + c])
        assert result.patches[i, j, r, c] == pytest.approx(want, abs=1e-5)
    assert result.prefix == {}  # these schemes give the prefix tokens no position
    assert "no position embedding" in result.note
    if scheme == "sincos_2d":  # fixed 2D sine-cosine: similarity depends on the offset only
        np.testing.assert_allclose(result.patches[0, 0, :-1, :-1], result.patches[1, 1, 1:, 1:], atol=1e-5)


@pytest.mark.parametrize("scheme", ["none", "rope"])
def test_no_additive_pe(scheme: str) -> None:
    result = pe_similarity(make_model("cls", pos_embed=scheme))
    assert result.patches is None and result.prefix == {}
    assert "no additive PE" in result.note


def test_resampled_grid(model: VisionTransformer) -> None:
    grid = (5, 3)
    result = pe_similarity(model, grid)
    pe = model.position_embedding(grid).detach()
    k = pe.shape[0] - 15
    assert result.patches.shape == (5, 3, 5, 3)
    for i, j, r, c in [(0, 0, 4, 2), (2, 1, 0, 2), (4, 2, 4, 2)]:
        assert result.patches[i, j, r, c] == pytest.approx(_cos(pe[k + i * 3 + j], pe[k + r * 3 + c]), abs=1e-5)


def test_vit_l14_at_518() -> None:
    """The DINOv2-L grid (37x37 patches): one matrix product, the diagonal all ones."""
    model = VisionTransformer(ViTConfig(image_size=518, patch_size=14, embed_dim=1024, depth=1, num_heads=16))
    result = pe_similarity(model)
    assert result.patches.shape == (37, 37, 37, 37)
    np.testing.assert_allclose(result.patches.reshape(1369, 1369).diagonal(), 1.0, atol=1e-5)
