"""Sanity checks (Adebayo et al. 2018): SSIM equals scikit-image's and Spearman scipy's; on the bundled (trained)
model the maps of a gradient method and of rollout lose their likeness to the trained map as the parameters are
randomised from the top down, on a copy (the user's model is untouched); the random-attribution row and what the
summary and the ranking figure say of a method no better than it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vit_explorer import load
from vit_explorer.analysis import sanity as checks
from vit_explorer.explore import relevance as rel
from vit_explorer.explore import sanity
from vit_explorer.explore.forward import Inputs

RESOURCES = Path(__file__).resolve().parents[2] / "resources"


@pytest.mark.parametrize("shape", [(14, 14), (8, 8), (7, 9), (5, 6), (3, 3)])
def test_ssim_equals_scikit_image(shape: tuple[int, int]) -> None:
    from skimage.metrics import structural_similarity

    rng = np.random.default_rng(sum(shape))
    a = rng.random(shape)
    b = np.clip(a + 0.3 * rng.standard_normal(shape), 0, 1)
    side = min(7, *shape)
    side -= 1 - side % 2
    expected = structural_similarity(a, b, data_range=1.0, win_size=side)
    assert checks.ssim(a, b) == pytest.approx(expected, abs=1e-12)
    assert checks.ssim(a, a) == pytest.approx(1.0)
    assert np.isnan(checks.ssim(a[:2], b[:2]))


def test_spearman_equals_scipy() -> None:
    from scipy.stats import spearmanr

    rng = np.random.default_rng(0)
    a = rng.random((8, 8))
    b = a + rng.random((8, 8))
    b[0, :3] = b[0, 0]  # ties
    assert checks.spearman(a, b) == pytest.approx(spearmanr(a.ravel(), b.ravel()).statistic, abs=1e-12)
    assert np.isnan(checks.spearman(a, np.ones((8, 8))))


def _inputs(name: str) -> Inputs:
    loaded = load(str(RESOURCES / "classroom"), device="cpu")
    image = Image.open(RESOURCES / "samples" / f"{name}.png").convert("RGB")
    return Inputs.unmasked(loaded, image, loaded.preprocessing.size)


def test_maps_lose_the_trained_map_as_the_model_is_randomised_from_the_top() -> None:
    """Mean over four images of Spearman to the trained map: rollout does not read the head (1 after it) and falls
    to below 0.5 once every block is random; integrated gradients falls from the head step to the last."""
    methods = ["rollout", "integrated-gradients", "attention-gradient"]
    names = ["star", "circle", "triangle", "crescent"]
    per_image = []
    for name in names:
        inputs = _inputs(name)
        before = [p.detach().clone() for p in inputs.loaded.model.parameters()]
        session = rel.prepare(inputs, options=rel.Options(ig_steps=16))
        originals = {m: rel.relevance_map(session, m) for m in methods}
        steps = sanity.run(session, originals)
        assert [s.randomised_from for s in steps["rollout"]] == ["head", "block 3", "block 2", "block 1", "block 0",
                                                                 "embedding"]
        assert all(torch.equal(a, b) for a, b in zip(before, inputs.loaded.model.parameters(), strict=True))
        per_image.append({m: [s.spearman for s in steps[m]] for m in methods})
    mean = {m: np.mean([image[m] for image in per_image], axis=0) for m in methods}
    assert mean["rollout"][0] == pytest.approx(1.0)
    assert mean["rollout"][4] < 0.5 and mean["rollout"][4] < mean["rollout"][1] - 0.3
    for method in ("integrated-gradients", "attention-gradient"):
        assert mean[method][4] < mean[method][0] - 0.3, (method, mean[method])
        assert mean[method][4] < 0.3


def test_a_step_randomises_its_part_and_the_steps_are_named_top_down() -> None:
    loaded = load(str(RESOURCES / "classroom"), device="cpu")
    steps = sanity.cascade(loaded.model)
    assert [name for name, _ in steps] == ["head", "block 3", "block 2", "block 1", "block 0", "embedding"]
    covered = {id(p) for _, parameters in steps for p in parameters}
    assert covered == {id(p) for p in loaded.model.parameters()}  # every parameter, once the cascade is done
    weight = loaded.model.head.weight
    original = weight.detach().clone()
    checks.randomise_(steps[0][1], torch.Generator().manual_seed(0))
    assert not torch.allclose(weight, original)
    assert float(weight.detach().std()) == pytest.approx(float(original.std()), rel=0.2)


def test_the_random_row_and_a_method_no_better_than_it() -> None:
    explanations = rel.explain(_inputs("star"), ["rollout", "random"])
    rollout, random = explanations
    assert rel.METHODS["random"].baseline and not rel.METHODS["random"].default
    np.testing.assert_array_equal(random.relevance, rel.explain(_inputs("star"), ["random"])[0].relevance)  # seeded
    assert "the baseline to beat" in rel.summary_text(random, explanations)
    worse = replace(rollout, method="gradcam", faithfulness=random.faithfulness)  # random's own AUCs: no better
    ranking = [rollout, random, worse]
    assert "NO BETTER THAN RANDOM" in rel.summary_text(worse, ranking)
    better = rollout.faithfulness.gap > random.faithfulness.gap
    assert ("NO BETTER THAN RANDOM" in rel.summary_text(rollout, ranking)) is not better
    titles = rel.ranking_figure(ranking).titles
    assert any("random" in t and "(baseline)" in t for t in titles)
    assert any(t.startswith(f"{i}. Grad-CAM") and "≤ random" in t for i, t in enumerate(titles, 1))


@pytest.mark.parametrize("name", ["vit-s16", "deit-s-distilled", "cait-xxs24", "siglip-b16", "dinov2-s14-reg4",
                                  "eva02-ti14", "dinov3-b16", "aimv2-l14-query"])
def test_the_cascade_covers_every_family(name: str) -> None:
    """Every parameter is drawn anew by the last step, each once; CaiT's class blocks come before its blocks; each
    step's map is finite, and the user's model keeps its parameters."""
    from .test_relevance import _inputs

    inputs = _inputs(name)
    model = inputs.loaded.model
    steps = sanity.cascade(model)
    ids = [id(p) for _, parameters in steps for p in parameters]
    assert len(ids) == len(set(ids)) and set(ids) == {id(p) for p in model.parameters()}
    names = [step for step, _ in steps]
    cfg = model.config
    assert names == ["head", *(f"class block {j}" for j in reversed(range(cfg.class_attn_depth))),
                     *(f"block {i}" for i in reversed(range(cfg.depth))), "embedding"]
    before = [p.detach().clone() for p in model.parameters()]
    session = rel.prepare(inputs)
    found = sanity.run(session, {"attention-gradient": rel.relevance_map(session, "attention-gradient")})
    assert [s.randomised_from for s in found["attention-gradient"]] == names
    assert all(np.isfinite(s.relevance).all() for s in found["attention-gradient"])
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
