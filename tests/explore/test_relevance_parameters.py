"""The methods' parameters and ROAD against their references on the same weights: ROAD equals pytorch-grad-cam's
ROADMostRelevantFirst / ROADLeastRelevantFirst on identical maps, images and noise; integrated gradients with n steps
and a baseline equals captum's IntegratedGradients; occlusion with a window and stride equals captum's Occlusion;
SmoothGrad with sigma 0 equals its base method; a map lost to float32 rounding is computed in float64."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from vit_explorer import load
from vit_explorer.checkpoints.native import save_native
from vit_explorer.checkpoints.preprocess import Preprocess
from vit_explorer.explore import relevance as rel
from vit_explorer.explore.forward import Inputs
from vit_explorer.models import VisionTransformer, preset

from .test_relevance_references import _close, _image, _logits, _session, reference  # noqa: F401

ATOL = 4 * float(np.finfo(np.float32).eps)  # probabilities (at most 1) in float32, on both sides
SENTINEL = 1e4  # a value no normalised pixel takes: marks captum's occluded pixels
BUNDLED = Path(__file__).resolve().parents[2] / "resources" / "classroom"


def _bundled(target: int | None = None, options: rel.Options | None = None, baseline: str = "zero") -> rel.Session:
    loaded = load(str(BUNDLED), device="cpu")
    inputs = Inputs.unmasked(loaded, _image(), loaded.preprocessing.size)
    return rel.prepare(inputs, rel.Target(index=target), baseline, options)


def _with(session: rel.Session, **options: object) -> rel.Session:
    """The same session with other options (checked as prepare checks them)."""
    chosen = rel.Options(**options)  # type: ignore[arg-type]
    chosen.check(session.config, tuple(session.scorer.pixels.shape[-2:]), session.scorer.baseline)
    session.scorer.options = chosen
    return session


def _percentile(n: int, area: int, removed: int) -> float:
    """The percentile at which grad-cam's threshold (cam < percentile(cam)) keeps all but `removed` of n patches
    of `area` pixels each (the middle of the first removed patch's pixels in the sorted values)."""
    index = (n - removed) * area + area // 2
    return 100 * index / (n * area - 1)


@pytest.mark.parametrize("seed", [0, 7])
def test_road_equals_pytorch_grad_cam(seed: int) -> None:
    from pytorch_grad_cam.metrics.road import ROADLeastRelevantFirst, ROADMostRelevantFirst
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputSoftmaxTarget

    session = _bundled(options=rel.Options(seed=seed))
    scorer = session.scorer
    gh, gw = scorer.layout.grid
    p = scorer.layout.patch_size
    relevance = np.random.default_rng(seed + 1).permutation(gh * gw).reshape(gh, gw).astype(np.float64)  # distinct
    morf, lerf = rel.road(scorer, relevance)
    assert morf.shape == lerf.shape == (9,)
    base = scorer.score(scorer.pixels, None)[0]
    cam = np.kron(relevance, np.ones((p, p))).astype(np.float32)[None]  # (1, H, W) the same map per pixel
    counts = [round(f * gh * gw) for f in rel.faith.ROAD_FRACTIONS]
    targets = [ClassifierOutputSoftmaxTarget(scorer.resolved.index)]
    torch.manual_seed(seed)  # the library draws its noise from torch's generator, in the order ours does
    ref = {metric: [metric(_percentile(gh * gw, p * p, k))(scorer.pixels.clone(), cam, targets, session.loaded.model)[0]
                    for k in counts] for metric in (ROADMostRelevantFirst, ROADLeastRelevantFirst)}
    np.testing.assert_allclose(morf - base, ref[ROADMostRelevantFirst], atol=1e-5, rtol=0)
    np.testing.assert_allclose(lerf - base, ref[ROADLeastRelevantFirst], atol=1e-5, rtol=0)
    assert morf[-1] != lerf[-1]


def test_road_is_in_the_faithfulness_record_and_its_json() -> None:
    session = _bundled()
    relevance = rel.relevance_map(session, "gradcam")
    measured = rel.faithfulness(session, relevance)
    again = rel.road(session.scorer, relevance)
    np.testing.assert_allclose(measured.road_morf, again[0], atol=1e-6)
    np.testing.assert_allclose(measured.road_lerf, again[1], atol=1e-6)
    assert np.isfinite(measured.road_morf_auc) and np.isfinite(measured.road_lerf_auc)
    explanation = rel.explain(session.inputs, ["gradcam"])[0]
    road = rel.to_json("s", "i", explanation)["faithfulness"]["road"]
    assert road["fractions"] == pytest.approx([0.1 * i for i in range(1, 10)])
    assert len(road["morf"]) == len(road["lerf"]) == 9


def _captum_ig(model: torch.nn.Module, pixels: torch.Tensor, baseline: torch.Tensor, target: int, steps: int,
               patch: int) -> tuple[np.ndarray, np.ndarray]:
    from captum.attr import IntegratedGradients

    attribution = IntegratedGradients(model).attribute(pixels.detach().clone(), baselines=baseline, target=target,
                                                       n_steps=steps)  # gausslegendre, as ours
    b, c, h, w = attribution.shape
    per_patch = attribution.reshape(1, c, h // patch, patch, w // patch, patch).sum(dim=(1, 3, 5))[0]
    return per_patch.detach().numpy(), attribution[0].sum(dim=0).detach().numpy()


@pytest.mark.parametrize("ig_baseline", ["zero", "blur", "noise"])
@pytest.mark.parametrize("steps", [7, 50])
def test_integrated_gradients_with_steps_and_baseline_equal_captum(ig_baseline: str, steps: int) -> None:
    session = _bundled(target=3, options=rel.Options(ig_steps=steps, ig_baseline=ig_baseline, pixels=True))
    maps = rel.compute_maps(session, "integrated-gradients")
    scorer = session.scorer
    start = rel.ig_baseline(scorer)
    if ig_baseline == "noise":  # uniform between black and white of the model's normalisation, seeded
        assert float(start.min()) >= -1 and float(start.max()) <= 1 and float(start.std()) > 0.3
    per_patch, pixels = _captum_ig(session.loaded.model, scorer.pixels, start, 3, steps, scorer.layout.patch_size)
    _close(maps.relevance, per_patch)
    assert maps.pixels is not None and maps.pixels.shape == scorer.pixels.shape[-2:]
    _close(maps.pixels, pixels)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["timm-vit-s16", "hf-deit-s-distilled"])
def test_integrated_gradients_with_a_blur_baseline_equal_captum_on_timm_and_hf(case: str, reference) -> None:  # noqa: F811
    model, folder = reference(case)
    session = _with(_session(folder), ig_steps=16, ig_baseline="blur")
    ours = rel.relevance_map(session, "integrated-gradients")
    per_patch, _ = _captum_ig(_logits(model), session.scorer.pixels, rel.ig_baseline(session.scorer), 2, 16, 16)
    _close(ours, per_patch)


def test_integrated_gradients_from_mask_is_complete() -> None:
    """From every patch embedding the [MASK] token: the map sums to the logit's change along the path (IG's
    completeness), which the [MASK]ed image's logit gives."""
    session = _bundled(target=2, options=rel.Options(ig_steps=200, ig_baseline="mask", pixels=True))
    maps = rel.compute_maps(session, "integrated-gradients")
    assert maps.pixels is None  # the path runs in the patch embeddings: per patch only
    scorer = session.scorer
    n = scorer.layout.num_patches
    with torch.no_grad():
        logits = session.loaded.model.forward_intermediates(scorer.pixels.expand(2, -1, -1, -1),
                                                            mask=torch.tensor([[False] * n, [True] * n]))["logits"]
    assert maps.relevance.sum() == pytest.approx(float(logits[0, 2] - logits[1, 2]), rel=1e-3, abs=1e-4)


@pytest.mark.parametrize(("window", "stride", "baseline"), [(None, None, "zero"), ((8, 8), (4, 4), "zero"),
                                                            ((6, 10), (3, 7), "blur"), ((8, 8), (4, 8), "mask")])
def test_occlusion_with_window_and_stride_equals_captum(window, stride, baseline) -> None:
    from captum.attr import Occlusion

    session = _bundled(target=3, baseline=baseline, options=rel.Options(occlusion_window=window,
                                                                       occlusion_stride=stride))
    ours = rel.relevance_map(session, "occlusion")
    scorer = session.scorer
    p = scorer.layout.patch_size
    model = session.loaded.model
    wh, ww = window or (p, p)
    sh, sw = stride or (wh, ww)
    pixels = scorer.pixels.detach().clone()
    if baseline == "mask":  # the [MASK] token in place of the occluded patches: the window's patches as a mask
        n, (gh, gw) = scorer.layout.num_patches, scorer.layout.grid

        def forward(x: torch.Tensor) -> torch.Tensor:  # x: the image with its occluded pixels set to SENTINEL
            gone = (x[:, 0] == SENTINEL).reshape(-1, gh, p, gw, p).all(dim=4).all(dim=2).reshape(-1, n)
            return model.forward_intermediates(torch.where(x == SENTINEL, pixels, x), mask=gone)["logits"].softmax(-1)

        baselines: float | torch.Tensor = SENTINEL
    else:
        def forward(x: torch.Tensor) -> torch.Tensor:
            return model(x).softmax(-1)

        baselines = 0.0 if baseline == "zero" else rel.blur(pixels, p / 2)
    with torch.no_grad():
        attribution = Occlusion(forward).attribute(pixels, sliding_window_shapes=(3, wh, ww), strides=(3, sh, sw),
                                                   baselines=baselines, target=3)
    gh, gw = ours.shape
    ref = attribution[0].mean(dim=0).reshape(gh, p, gw, p).mean(dim=(1, 3)).double().numpy()
    assert np.ptp(ref) > 100 * ATOL
    np.testing.assert_allclose(ours, ref, atol=ATOL, rtol=0)


@pytest.mark.parametrize("method", ["gradcam", "integrated-gradients", "attention-gradient", "gradient-x-input"])
def test_smoothgrad_with_sigma_zero_equals_its_base_method(method: str) -> None:
    session = _bundled(options=rel.Options(ig_steps=10))
    base = rel.relevance_map(session, method)
    _with(session, ig_steps=10, smoothgrad=3, smoothgrad_sigma=0.0)
    np.testing.assert_allclose(rel.relevance_map(session, method), base, rtol=1e-6, atol=1e-7 * np.abs(base).max())
    _with(session, ig_steps=10, smoothgrad=3, smoothgrad_sigma=0.2)
    noisy = rel.relevance_map(session, method)
    assert not np.allclose(noisy, base)
    np.testing.assert_array_equal(rel.relevance_map(session, method), noisy)  # seeded


def test_smoothgrad_leaves_other_methods_and_says_so() -> None:
    session = _bundled(target=4, options=rel.Options(smoothgrad=2))
    maps = rel.compute_maps(session, "rollout")
    assert "gradient methods only" in maps.note


def test_gradcam_reads_the_chosen_block() -> None:
    session = _bundled()
    last = rel.relevance_map(session, "gradcam")
    _with(session, gradcam_block=session.config.depth - 1)
    np.testing.assert_array_equal(rel.relevance_map(session, "gradcam"), last)
    _with(session, gradcam_block=0)
    assert not np.allclose(rel.relevance_map(session, "gradcam"), last)


@pytest.mark.parametrize(("options", "flag"), [
    (dict(ig_steps=0), "--ig-steps"), (dict(ig_baseline="black"), "--ig-baseline"),
    (dict(gradcam_block=4), "--gradcam-block"), (dict(gradcam_block=-1), "--gradcam-block"),
    (dict(smoothgrad=-1), "--smoothgrad"), (dict(smoothgrad_sigma=float("nan")), "--smoothgrad-sigma"),
    (dict(occlusion_window=(40, 4)), "--occlusion-window"), (dict(occlusion_window=(0, 4)), "--occlusion-window"),
    (dict(occlusion_window=(4, 4), occlusion_stride=(8, 4)), "--occlusion-stride")])
def test_settings_a_model_cannot_take_are_refused_naming_the_flag(options: dict, flag: str) -> None:
    with pytest.raises(ValueError, match=f"^argument {flag}"):
        _bundled(options=rel.Options(**options))
    if "occlusion_window" not in options:
        return
    with pytest.raises(ValueError, match="multiples of the patch size"):
        _bundled(baseline="mask", options=rel.Options(occlusion_window=(6, 6)))


def test_a_map_lost_to_float32_rounding_is_computed_in_float64(tmp_path: Path) -> None:
    """A GAP head scaled to 1e-9: attention-gradient's patch rows are 1 + (grad x A)+, about 1e-10 apart, which
    float32 rounds to one constant; computed again in float64 it equals the float64 model's own map, and the user's
    model stays in float32."""
    torch.manual_seed(0)
    model = VisionTransformer(preset("classroom-tiny", prefix_tokens="none", pool="gap")).eval()
    with torch.no_grad():
        model.head.weight.mul_(1e-9)
    source = save_native(tmp_path / "m", model, [str(i) for i in range(model.config.num_classes)],
                         Preprocess(model.config.image_size))
    loaded = load(str(source), device="cpu")
    inputs = Inputs.unmasked(loaded, _image(), loaded.preprocessing.size)
    session = rel.prepare(inputs, rel.Target(index=1))
    maps = rel.compute_maps(session, "attention-gradient")
    assert "float64" in maps.note and np.ptp(maps.relevance) > 0
    assert next(loaded.model.parameters()).dtype == torch.float32
    loaded.model.double()
    session.scorer.pixels = session.scorer.pixels.double()
    _close(maps.relevance, rel.relevance_map(session, "attention-gradient"))


def test_a_random_dinov3_with_a_small_head_is_computed_in_float64() -> None:
    """The issue's case: DINOv3 with its head at scale 1e-3 (its classifier reads [CLS] beside the patches' mean,
    whose rows carry the identity): in float32 attention-gradient's map is rounding noise; in float64 it equals the
    float64 model's map."""
    from .test_relevance import _inputs

    inputs = _inputs("dinov3-b16", num_classes=5)
    with torch.no_grad():
        inputs.loaded.model.head.weight.mul_(1e-3)
    session = rel.prepare(inputs)
    maps = rel.compute_maps(session, "attention-gradient")
    assert "float64" in maps.note
    inputs.loaded.model.double()
    session.scorer.pixels = session.scorer.pixels.double()
    _close(maps.relevance, rel.relevance_map(session, "attention-gradient"))


def test_road_of_a_pixel_level_map_equals_pytorch_grad_cam() -> None:
    """A map of the pixels (as a gradient method's --pixels map): its shares are of the pixels, as grad-cam's."""
    from pytorch_grad_cam.metrics.road import ROADLeastRelevantFirst, ROADMostRelevantFirst
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputSoftmaxTarget

    session = _bundled(options=rel.Options(seed=3))
    scorer = session.scorer
    # distinct in 0..1, and so is 1 - cam, which the library ranks in float32 for LeRF
    cam = (np.random.default_rng(3).permutation(32 * 32).reshape(32, 32) / (32 * 32)).astype(np.float32)
    morf, lerf = rel.road(scorer, cam.astype(np.float64))
    base = scorer.score(scorer.pixels, None)[0]
    n = cam.size
    counts = [round(f * n) for f in rel.faith.ROAD_FRACTIONS]
    targets = [ClassifierOutputSoftmaxTarget(scorer.resolved.index)]
    torch.manual_seed(3)
    ref = {metric: [metric(100 * (n - k - 0.5) / (n - 1))(scorer.pixels.clone(), cam[None],
                                                          targets, session.loaded.model)[0] for k in counts]
           for metric in (ROADMostRelevantFirst, ROADLeastRelevantFirst)}
    np.testing.assert_allclose(morf - base, ref[ROADMostRelevantFirst], atol=1e-5, rtol=0)
    np.testing.assert_allclose(lerf - base, ref[ROADLeastRelevantFirst], atol=1e-5, rtol=0)


def test_every_family_takes_every_parameter() -> None:
    """IG from [MASK] and from noise, SmoothGrad, Grad-CAM on the first block, occlusion by two-patch windows and
    the pixel maps give finite maps on every family (the methods each supports)."""
    from .test_relevance import FAMILIES, _inputs

    for name in FAMILIES:
        inputs = _inputs(name)
        p = inputs.loaded.config.patch_size
        options = rel.Options(ig_steps=4, ig_baseline="mask", smoothgrad=2, gradcam_block=0,
                              occlusion_window=(2 * p, p), occlusion_stride=(p, p), pixels=True)
        methods = [m for m in rel.supported(inputs.loaded.config) if m != "transformer-attribution"]
        for e in rel.explain(inputs, methods, measure=False, options=options):
            assert np.isfinite(e.relevance).all(), (name, e.method)
            assert (e.pixels is not None) == (e.method == "gradient-x-input"), (name, e.method)  # IG from [MASK]
        noise = rel.Options(ig_steps=4, ig_baseline="noise", pixels=True)
        (e,) = rel.explain(inputs, ["integrated-gradients"], measure=False, options=noise)
        assert e.pixels is not None and np.isfinite(e.pixels).all() and e.pixels.shape == inputs.size
