"""Relevance maps against the reference implementations on the same weights: random, seeded ViT-S/16 and
distilled DeiT-S at 224 (two blocks deep, for speed; every other size as the named models) saved in timm's hub
layout and in Hugging Face's, loaded by `vit_explorer.load`. integrated-gradients equals captum's
IntegratedGradients, gradcam pytorch-grad-cam's GradCAM with the ViT reshape, occlusion and the positive /
negative perturbation curves a direct computation through the reference model, each to 1e-5 of the map's range;
attention-gradient equals Chefer 2021b's equations on timm's own attention and gradients, and
transformer-attribution the authors' relevance rules (their relprop code, autograd and all) re-told on timm's
modules."""

from __future__ import annotations

import copy
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


def _safe_divide(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # the authors' helper, as they wrote it
    den = b.clamp(min=1e-9) + b.clamp(max=1e-9)
    den = den + den.eq(0).type(den.type()) * 1e-9
    return a / den * b.ne(0).type(b.type())


def _gradprop(z: torch.Tensor, xs: list[torch.Tensor], s: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return torch.autograd.grad(z, xs, s, retain_graph=True)


def _linear_relprop(x: torch.Tensor, weight: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """The authors' Linear.relprop with alpha = 1, beta = 0, with autograd as they wrote it."""
    pw, nw = weight.clamp(min=0), weight.clamp(max=0)
    px = x.clamp(min=0).detach().requires_grad_(True)
    nx = x.clamp(max=0).detach().requires_grad_(True)
    z1, z2 = torch.nn.functional.linear(px, pw), torch.nn.functional.linear(nx, nw)
    s = _safe_divide(r, z1 + z2)
    return px * _gradprop(z1, [px], s)[0] + nx * _gradprop(z2, [nx], s)[0]


def _two_relprop(z_fn, a: torch.Tensor, b: torch.Tensor, r: torch.Tensor, normalise: bool):
    """The authors' Add (normalised) and einsum (not) relprop: x * grad(Z, x, R / Z) for both operands."""
    a, b = a.detach().requires_grad_(True), b.detach().requires_grad_(True)
    z = z_fn(a, b)
    ca, cb = _gradprop(z, [a, b], _safe_divide(r, z))
    ra, rb = a * ca, b * cb
    if normalise:
        sa, sb = ra.sum(), rb.sum()
        ra = ra * _safe_divide(_safe_divide(sa.abs(), sa.abs() + sb.abs()) * r.sum(), ra.sum())
        rb = rb * _safe_divide(_safe_divide(sb.abs(), sa.abs() + sb.abs()) * r.sum(), rb.sum())
    return ra, rb


def _authors_transformer_attribution(model: torch.nn.Module, x: torch.Tensor, target: int) -> torch.Tensor:
    """Chefer et al.'s generate_LRP(method='transformer_attribution') re-told on timm's ViT modules."""
    with torch.no_grad():
        tokens = model.norm_pre(model._pos_embed(model.patch_embed(x)))
        inputs = []
        for block in model.blocks:
            inputs.append(tokens)
            tokens = block(tokens)
        pooled = model.norm(tokens)[:, 0]
    one_hot = torch.zeros(1, model.head.out_features)
    one_hot[0, target] = 1.0
    r = torch.zeros_like(tokens)
    r[:, 0] = _linear_relprop(pooled, model.head.weight, one_hot)  # head, then pool (IndexSelect), norm: identity
    cams = []
    for block, x_in in zip(reversed(model.blocks), reversed(inputs), strict=True):
        attn = block.attn
        b, t, c = x_in.shape
        h = attn.num_heads
        h1 = block.norm1(x_in)
        q, k, v = attn.qkv(h1).reshape(b, t, 3, h, c // h).permute(2, 0, 3, 1, 4).unbind(0)
        probs = ((q * attn.scale) @ k.transpose(-2, -1)).softmax(-1)
        heads = probs @ v
        merged = heads.transpose(1, 2).reshape(b, t, c)
        branch1 = attn.proj(merged)
        mid = x_in + branch1
        h2 = block.norm2(mid)
        hidden = block.mlp.act(block.mlp.fc1(h2))
        branch2 = block.mlp.fc2(hidden)
        r1, r2 = _two_relprop(torch.add, mid, branch2, r, normalise=True)  # add2
        r2 = _linear_relprop(h2, block.mlp.fc1.weight, _linear_relprop(hidden, block.mlp.fc2.weight, r2))
        r = r1 + r2  # clone2
        r1, r2 = _two_relprop(torch.add, x_in, branch1, r, normalise=True)  # add1
        r_heads = _linear_relprop(merged, attn.proj.weight, r2).reshape(b, t, h, c // h).transpose(1, 2)
        cam, r_v = _two_relprop(torch.matmul, probs, v, r_heads, normalise=False)
        cam, r_v = cam / 2, r_v / 2
        cams.append(cam)
        r_q, r_k = _two_relprop(lambda a, bb: torch.einsum("bhid,bhjd->bhij", a, bb), q, k, cam, normalise=False)
        r_qkv = torch.stack([r_q / 2, r_k / 2, r_v]).permute(1, 3, 0, 2, 4).reshape(b, t, 3 * c)
        r = r1 + _linear_relprop(h1, attn.qkv.weight, r_qkv)  # norm1: identity; clone1
    cams.reverse()
    # the gradients of the target logit at each attention map, by hooks, as in their code
    maps: list[torch.Tensor] = []
    handles = []
    for block in model.blocks:
        block.attn.fused_attn = False
        handles.append(block.attn.attn_drop.register_forward_hook(lambda module, args, out: maps.append(out)))
    try:
        grads = torch.autograd.grad(model(x)[0, target], maps)
    finally:
        for block, handle in zip(model.blocks, handles, strict=True):
            handle.remove()
            block.attn.fused_attn = True
    eye = torch.eye(t)
    joint = None
    for cam, grad in zip(cams, grads, strict=True):  # compute_rollout_attention(start_layer=0): no normalisation
        step = (grad * cam).clamp(min=0).mean(dim=1)[0] + eye
        joint = step if joint is None else step @ joint
    return joint[0, 1:]


def test_transformer_attribution_equals_the_authors_rules_retold_on_timm(reference) -> None:
    """In float64 on both sides: LRP divides by layer outputs that can be near zero, which turns float32's
    rounding of two different forward passes into differences of about 1e-4 of the map's range."""
    model, folder = reference("timm-vit-s16")
    session = _session(folder)  # a model of its own: made float64 here
    session.loaded.model.double()
    session.scorer.pixels = session.scorer.pixels.double()
    ours = rel.relevance_map(session, "transformer-attribution")
    ref = _authors_transformer_attribution(copy.deepcopy(model).double(), session.scorer.pixels.detach().clone(), 2)
    _close(ours, ref.reshape(ours.shape).detach().numpy())
