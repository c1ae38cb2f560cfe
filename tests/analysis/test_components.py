"""The logit's parts add up to the logit for every family (random weights and the bundled models), patching
every position of the residual stream gives the source run's logits and patching nothing the receiver's,
and the lens reads each token through the final norm and the head."""

from __future__ import annotations

import threading

import pytest
import torch
from PIL import Image

from tests.models.test_families import FAMILY_PRESETS, IMAGE, tiny
from vit_explorer import load
from vit_explorer.analysis.components import SITES, decompose, lens, patched_logits, record_site, sweep
from vit_explorer.errors import Cancelled
from vit_explorer.jobs import Job
from vit_explorer.models import VisionTransformer, preset
from vit_explorer.models.config import TOKEN_LAYOUTS
from vit_explorer.paths import BUNDLED, SAMPLES

FAMILIES = ["vit-s16", "deit-s-distilled", "cait-xxs24", "classroom", "classroom-conv"] + FAMILY_PRESETS
# the new options where no preset has them: AIMv2's query pool (with and without biases, other heads), RMSNorm
# as the pre-norm, on [CLS] and as fc_norm, a MAP head with other heads and MLP width over the patches only
VARIANTS = {
    "query-pool": ("aimv2-l14", dict(pool="query", num_classes=5)),
    "query-pool-biased": ("aimv2-l14", dict(pool="query", qkv_bias=True, proj_bias=True, pool_heads=2, num_classes=5)),
    "rms-cls-pre-norm": ("aimv2-l14", dict(pool="cls", prefix_tokens="cls", pre_norm=True, num_classes=5)),
    "rms-fc-norm": ("aimv2-l14", dict(fc_norm=True, num_classes=5)),
    "rms-map-pool-heads": ("siglip-b16", dict(norm="rmsnorm", pool_heads=2, pool_mlp_ratio=2.0, proj_bias=False)),
    "pe-patches-only": ("pe-core-b16", dict(pool_prefix=False)),
}
MODELS = FAMILIES + list(VARIANTS)
REL = 1e-4


def model_for(name: str) -> VisionTransformer:
    """A family preset or one of VARIANTS, tiny, random weights."""
    family, overrides = VARIANTS.get(name, (name, {}))
    return tiny(family, **overrides)


def layout_model(name: str) -> VisionTransformer:
    """A tiny classifier with one of the token layouts the builder offers (GAP without fc_norm among them)."""
    fields = dict(TOKEN_LAYOUTS[name])
    model = VisionTransformer(preset("vit-s16", image_size=IMAGE, patch_size=4, embed_dim=32, depth=2, num_heads=4,
                                     num_classes=5, **fields))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    return model.eval()


def assert_adds_up(model: VisionTransformer, pixels: torch.Tensor, **kwargs) -> None:
    d = decompose(model, pixels, **kwargs)
    assert abs(d.total - d.logit) <= REL * max(abs(d.logit), 1e-3), (d.total, d.logit)
    cfg = model.config
    heads = [p for p in d.parts if p.name == "head"]
    assert len(heads) == (cfg.depth + cfg.class_attn_depth) * cfg.num_heads
    if "target" not in kwargs and d.kind == "logit":
        assert d.target == int(model(pixels, mask=kwargs.get("mask"), head_mask=kwargs.get("head_mask"))[0].argmax())


@pytest.mark.parametrize("name", MODELS)
def test_parts_plus_bias_equal_the_logit(name: str) -> None:
    model = model_for(name)
    torch.manual_seed(1)
    pixels = torch.randn(1, 3, *IMAGE)
    mask = torch.zeros(model.config.num_patches, dtype=torch.bool)
    mask[::5] = True
    head_mask = torch.ones(model.config.depth + model.config.class_attn_depth, model.config.num_heads)
    head_mask[0, 1] = 0
    assert_adds_up(model, pixels)
    assert_adds_up(model, pixels, mask=mask, head_mask=head_mask, target=3)
    features = model(pixels)[0]
    assert_adds_up(model, pixels, reference=torch.randn(features.shape[0]))
    assert_adds_up(model, pixels, direction=torch.randn(features.shape[0]))


@pytest.mark.parametrize("layout", list(TOKEN_LAYOUTS))
def test_parts_add_up_for_every_token_layout(layout: str) -> None:
    assert_adds_up(layout_model(layout), torch.randn(1, 3, *IMAGE))


def test_the_parts_follow_the_model() -> None:
    """Zeroing one head removes exactly its part (and it is not zero to start with); the biases are their own."""
    model = tiny("deit3-s16")
    pixels = torch.randn(1, 3, *IMAGE)
    d = decompose(model, pixels, target=1)
    names = {p.name for p in d.parts}
    assert {"patches", "cls_token", "pos_embed", "attn_bias", "mlp", "norm_shift", "head"} <= names
    part = next(p for p in d.parts if p.name == "head" and p.layer == 1 and p.head == 2)
    assert abs(part.value) > 1e-6
    head_mask = torch.ones(2, 4)
    head_mask[1, 2] = 0
    off = decompose(model, pixels, target=1, head_mask=head_mask)
    assert next(p for p in off.parts if p.name == "head" and p.layer == 1 and p.head == 2).value == 0.0
    assert d.bias == pytest.approx(model.head.bias[1].item())


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_bundled_models_add_up(name: str) -> None:
    loaded = load(str(BUNDLED[name]))
    image = Image.open(SAMPLES / "scene-shapes.png").convert("RGB")
    pixels = loaded.preprocess(image)
    mask = torch.zeros(loaded.config.num_patches, dtype=torch.bool)
    mask[10:20] = True
    for target in (None, 0, loaded.config.num_classes - 1):
        assert_adds_up(loaded.model, pixels, **({} if target is None else {"target": target}))
    assert_adds_up(loaded.model, pixels, mask=mask)


def test_the_target_must_exist() -> None:
    model = tiny("vit-s16")
    with pytest.raises(ValueError, match="target 7 is out of range"):
        decompose(model, torch.randn(1, 3, *IMAGE), target=7)
    with pytest.raises(ValueError, match="training mode"):
        decompose(model.train(), torch.randn(1, 3, *IMAGE))


@pytest.mark.parametrize("name", MODELS)
def test_patching_everything_gives_the_source_run_and_nothing_the_receiver(name: str) -> None:
    model = model_for(name)
    cfg = model.config
    a, b = torch.randn(1, 3, *IMAGE), torch.randn(1, 3, *IMAGE)
    logits_a, logits_b = model(a), model(b)
    layers = list(range(cfg.depth + cfg.class_attn_depth))
    for site in SITES:
        _, source = record_site(model, a, site)
        out = patched_logits(model, b, source, site, layers, [None] * len(layers))
        if site == "resid":  # the whole stream at a block's input: the rest of the run is A's
            torch.testing.assert_close(out, logits_a.expand_as(out), atol=1e-5, rtol=1e-5)
        nothing = patched_logits(model, b, source, site, layers, [[] for _ in layers])
        torch.testing.assert_close(nothing, logits_b.expand_as(nothing), atol=1e-5, rtol=1e-5)
    # the last block's attention, MLP or all heads patched together with nothing else change the logits
    _, heads = record_site(model, a, "head")
    one = patched_logits(model, b, heads, "head", [layers[-1]], [None], [0])
    assert not torch.allclose(one, logits_b)


def test_patching_a_position_is_the_run_with_that_token_replaced() -> None:
    """Patching one position of the stream at block 1 equals running block 1 on by hand replaced input."""
    model = tiny("vit-s16")
    a, b = torch.randn(1, 3, *IMAGE), torch.randn(1, 3, *IMAGE)
    _, resid = record_site(model, a, "resid")
    out = patched_logits(model, b, resid, "resid", [1, 1], [[3], [0, 5]])
    seen: dict[int, torch.Tensor] = {}

    def by_hand(layer: int, site: str, value: torch.Tensor) -> torch.Tensor:
        if layer == 1 and site == "resid":
            value = value.clone()
            value[:, seen["pos"]] = resid[1][:, seen["pos"]]
        return value

    for k, pos in enumerate(([3], [0, 5])):
        seen["pos"] = pos
        with model.hooks([("blocks.1.hook_resid_pre", lambda value, hook: by_hand(1, "resid", value))]):
            expected = model.forward_intermediates(b)["logits"]
        torch.testing.assert_close(out[k:k + 1], expected, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(out[0], out[1])


@pytest.mark.parametrize("name", ["vit-s16", "rms-cls-pre-norm"])
def test_lens_at_the_last_state_is_the_model_readout(name: str) -> None:
    model = model_for(name)
    pixels = torch.randn(1, 3, *IMAGE)
    out = model.forward_intermediates(pixels, capture=["embedded", "hidden_states"])
    logits = lens(model, [out["embedded"]] + out["hidden_states"])  # (S, B, T, C)
    assert logits.shape == (3, 1, model.config.num_patches + 1, 5)
    torch.testing.assert_close(logits[-1, :, 0], out["logits"], atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="classifier"):
        lens(tiny("dinov2-s14"), [out["embedded"]])


def test_a_sweep_is_the_single_runs_normalised() -> None:
    model = tiny("deit3-s16")
    clean = torch.randn(1, 3, *IMAGE)
    mask = torch.ones(model.config.num_patches, dtype=torch.bool)
    result = sweep(model, clean, clean, "resid", positions=[0, 2, 7], corrupted_mask=mask, batch=4)
    assert result.raw.shape == (2, 3) and result.layers == [0, 1] and result.columns == [0, 2, 7]
    a = model(clean)[0]
    b = model(clean, mask=mask)[0]
    assert result.target == int(a.argmax()) and result.foil != result.target
    _, source = record_site(model, clean, "resid")
    one = patched_logits(model, clean, source, "resid", [1], [[2]], mask=mask)[0]
    expected = ((one[result.target] - one[result.foil]) - (b[result.target] - b[result.foil])) / (
        (a[result.target] - a[result.foil]) - (b[result.target] - b[result.foil]))
    assert result.effects[1, 1].item() == pytest.approx(expected.item(), abs=1e-5)
    heads = sweep(model, clean, clean, "head", corrupted_head_mask=torch.zeros(2, 4), batch=3)
    assert heads.axis == "head" and heads.raw.shape == (2, 4)
    cancelled = threading.Event()
    cancelled.set()
    with pytest.raises(Cancelled):
        sweep(model, clean, clean, "mlp", corrupted_mask=mask, job=Job(cancel=cancelled))


@pytest.mark.parametrize("name", ["vit-s16", "cait-xxs24", "dinov2-s14-reg4"])
def test_patching_the_whole_stream_is_bitwise_the_source_run(name: str) -> None:
    """One run at a time (the same batch size as the source run's), the whole stream at a block's input patched
    from A gives A's logits bit for bit: the rest of the pass computes exactly what A's did."""
    model = tiny(name)
    a, b = torch.randn(1, 3, *IMAGE), torch.randn(1, 3, *IMAGE)
    logits_a, resid = record_site(model, a, "resid")
    logits_b, _ = record_site(model, b, "resid")
    for layer in range(model.config.depth + model.config.class_attn_depth):
        assert torch.equal(patched_logits(model, b, resid, "resid", [layer], [None]), logits_a)
        assert torch.equal(patched_logits(model, b, resid, "resid", [layer], [[]]), logits_b)
