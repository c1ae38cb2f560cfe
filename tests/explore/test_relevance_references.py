"""Relevance maps against the reference implementations on the same weights: random, seeded ViT-S/16 and
distilled DeiT-S at 224 (two blocks deep, for speed; every other size as the named models) saved in timm's hub
layout and in Hugging Face's, loaded by `vit_explorer.load`. integrated-gradients equals captum's
IntegratedGradients, gradcam pytorch-grad-cam's GradCAM with the ViT reshape, occlusion and the positive /
negative perturbation curves a direct computation through the reference model, each to 1e-5 of the map's range."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vit_explorer import load
from vit_explorer.explore import relevance as rel
from vit_explorer.explore.forward import Inputs

from ..checkpoints.conftest import randomize, save_timm_hub

SIZE = (224, 224)
TOL = 1e-5  # of the map's range


def _image() -> Image.Image:
    rng = np.random.default_rng(3)
    return Image.fromarray((rng.random((240, 260, 3)) * 255).astype(np.uint8))


def _timm(name: str) -> torch.nn.Module:
    import timm

    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False, depth=2, num_classes=7)
    return randomize(model, seed=1)


def _hf(kind: str) -> torch.nn.Module:
    from transformers import DeiTConfig, DeiTForImageClassificationWithTeacher, ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    args = dict(hidden_size=384, num_hidden_layers=2, num_attention_heads=6, intermediate_size=1536, image_size=224,
                patch_size=16, num_labels=7, attn_implementation="eager")
    model = ViTForImageClassification(ViTConfig(**args)) if kind == "vit" else \
        DeiTForImageClassificationWithTeacher(DeiTConfig(**args))
    return randomize(model, seed=2)


CASES = {"timm-vit-s16": ("timm", "vit_small_patch16_224"), "timm-deit-s-distilled": ("timm",
         "deit_small_distilled_patch16_224"), "hf-vit-s16": ("hf", "vit"), "hf-deit-s-distilled": ("hf", "deit")}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[torch.nn.Module, Path]]:
    cache: dict[str, tuple[torch.nn.Module, Path]] = {}

    def get(case: str) -> tuple[torch.nn.Module, Path]:
        if case not in cache:
            kind, name = CASES[case]
            folder = tmp_path_factory.mktemp(case)
            if kind == "timm":
                model = _timm(name)
                save_timm_hub(model, folder)
            else:
                model = _hf(name)
                model.save_pretrained(folder)
            cache[case] = (model, folder)
        return cache[case]

    return get


def _logits(model: torch.nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """The reference's logits (both families average DeiT's two heads at inference)."""
    if hasattr(model, "config") and not hasattr(model, "pretrained_cfg"):  # transformers
        return lambda x: model(pixel_values=x).logits
    return model


def _session(folder: Path, target: int = 2) -> rel.Session:
    loaded = load(str(folder), device="cpu")
    grid = loaded.model.layout(SIZE).grid
    cfg = loaded.config
    inputs = Inputs(loaded, _image(), SIZE, np.zeros(grid, bool), np.ones((cfg.depth, cfg.num_heads)))
    return rel.prepare(inputs, rel.Target(index=target))


def _close(ours: np.ndarray, ref: np.ndarray) -> None:
    scale = float(ref.max() - ref.min())
    assert scale > 0
    assert ours.shape == ref.shape
    assert np.abs(ours - ref).max() <= TOL * scale, f"max |diff| {np.abs(ours - ref).max():.3g} of range {scale:.3g}"


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_integrated_gradients_equal_captum(case: str, reference) -> None:
    from captum.attr import IntegratedGradients

    model, folder = reference(case)
    session = _session(folder)
    ours = rel.relevance_map(session, "integrated-gradients")
    pixels = session.scorer.pixels.detach().clone()
    attribution = IntegratedGradients(_logits(model)).attribute(pixels, target=2)  # zero baseline, 50, gausslegendre
    gh, gw = ours.shape
    ref = attribution.reshape(1, 3, gh, 16, gw, 16).sum(dim=(1, 3, 5))[0].detach().numpy()
    _close(ours, ref)


@pytest.mark.parametrize("case", list(CASES))
def test_gradcam_equals_pytorch_grad_cam(case: str, reference, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytorch_grad_cam import GradCAM, base_cam
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    model, folder = reference(case)
    session = _session(folder)
    ours = rel.relevance_map(session, "gradcam")
    prefix = session.scorer.layout.num_prefix_tokens
    gh, gw = ours.shape

    def reshape_transform(tensor: torch.Tensor) -> torch.Tensor:  # the library's documented ViT recipe
        result = tensor[:, prefix:, :].reshape(tensor.size(0), gh, gw, tensor.size(2))
        return result.transpose(2, 3).transpose(1, 2)

    if hasattr(model, "pretrained_cfg"):
        layer = model.blocks[-1].norm1
        forward = model
    else:
        encoder = model.vit if hasattr(model, "vit") else model.deit
        layer = encoder.layers[-1].layernorm_before

        class Logits(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.inner = model

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return self.inner(pixel_values=x).logits

        forward = Logits()
    # the raw map: the library's own weights, weighted sum and ReLU, without its rescaling to the input's size
    monkeypatch.setattr(base_cam, "scale_cam_image", lambda cam, target_size=None: np.asarray(cam, np.float32))
    with GradCAM(model=forward, target_layers=[layer], reshape_transform=reshape_transform) as cam:
        ref = cam(input_tensor=session.scorer.pixels.detach().clone(), targets=[ClassifierOutputTarget(2)])[0]
    _close(ours, ref)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["timm-vit-s16", "timm-deit-s-distilled", "hf-deit-s-distilled"])
def test_occlusion_and_perturbation_curves_equal_a_direct_computation(case: str, reference) -> None:
    model, folder = reference(case)
    session = _session(folder)
    forward = _logits(model)
    pixels = session.scorer.pixels.detach().clone()
    gh, gw = session.scorer.layout.grid

    def zeroed(patches: list[int]) -> torch.Tensor:
        x = pixels.clone()
        for p in patches:
            r, c = divmod(p, gw)
            x[:, :, r * 16:(r + 1) * 16, c * 16:(c + 1) * 16] = 0
        return x

    def prob(batch: list[torch.Tensor]) -> np.ndarray:
        with torch.no_grad():
            return forward(torch.cat(batch)).softmax(-1)[:, 2].double().numpy()

    ours = rel.relevance_map(session, "occlusion")
    base = prob([pixels])[0]
    ref = np.concatenate([base - prob([zeroed([p]) for p in range(start, min(start + 28, gh * gw))])
                          for start in range(0, gh * gw, 28)]).reshape(gh, gw)
    _close(ours, ref)

    relevance = rel.relevance_map(session, "attention-gradient")
    measured = rel.faithfulness(session, relevance)
    flat = relevance.reshape(-1)
    n = flat.size
    for positive, curve in ((True, measured.positive), (False, measured.negative)):
        order = sorted(range(n), key=lambda i: -flat[i] if positive else flat[i])  # Python's sort is stable
        expected = prob([zeroed(order[:round(n * k / 10)]) for k in range(10)])
        np.testing.assert_allclose(curve, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("case", ["timm-vit-s16"])
def test_attention_gradient_equals_the_equations_on_timms_own_attention(case: str, reference) -> None:
    """Chefer et al. 2021b on timm's model itself: its (unfused) attention probabilities and their gradients
    taken by hooks, R = I + sum of mean_heads((grad A * A)+) R, the [CLS] row over the patches."""
    model, folder = reference(case)
    session = _session(folder)
    ours = rel.relevance_map(session, "attention-gradient")
    maps: list[torch.Tensor] = []
    handles = []
    for block in model.blocks:
        block.attn.fused_attn = False  # timm then forms the probabilities and passes them through attn_drop
        handles.append(block.attn.attn_drop.register_forward_hook(lambda module, args, out: maps.append(out)))
    try:
        logits = model(session.scorer.pixels.detach().clone())
        grads = torch.autograd.grad(logits[0, 2], maps)
    finally:  # the reference model is shared by the module's tests
        for block, handle in zip(model.blocks, handles, strict=True):
            handle.remove()
            block.attn.fused_attn = True
    t = maps[0].shape[-1]
    r = torch.eye(t)
    for a, g in zip(maps, grads, strict=True):
        r = r + (g * a).clamp(min=0).mean(dim=1)[0] @ r
    gh, gw = ours.shape
    _close(ours, r[0, 1:].reshape(gh, gw).detach().numpy())
