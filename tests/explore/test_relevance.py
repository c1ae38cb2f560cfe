"""The Explain view's layer: every family gives a finite map for every method the METHODS table says it
supports and a clear refusal for the others; class-specific maps follow the target class; targets (index,
label, DeiT's heads, a similarity for models without a classifier), [MASK] and head masks apply; work stops
when cancelled; the JSON contract."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from PIL import Image

from vit_explorer.checkpoints import LoadedModel
from vit_explorer.checkpoints.preprocess import Preprocess
from vit_explorer.errors import Cancelled
from vit_explorer.explore import relevance as rel
from vit_explorer.explore.forward import Inputs
from vit_explorer.jobs import Job
from vit_explorer.models import VisionTransformer

from ..models.test_families import FAMILY_PRESETS, IMAGE, tiny

VARIANTS = {"aimv2-l14-query": ("aimv2-l14", dict(pool="query", num_classes=5))}  # AIMv2 with its classifier's pool
FAMILIES = FAMILY_PRESETS + ["vit-s16", "deit-s-distilled", "cait-xxs24"] + list(VARIANTS)


def _model(name: str, **overrides) -> VisionTransformer:
    preset_name, extra = VARIANTS.get(name, (name, {}))
    return tiny(preset_name, **{**extra, **overrides})


def _loaded(model: VisionTransformer) -> LoadedModel:
    cfg = model.config
    return LoadedModel(model, cfg, [f"class{i}" for i in range(cfg.num_classes)], Preprocess(IMAGE))


def _inputs(name: str, mask: np.ndarray | None = None, head_mask: np.ndarray | None = None, *,
            model: VisionTransformer | None = None, **overrides) -> Inputs:
    model = model or _model(name, **overrides)
    cfg = model.config
    loaded = _loaded(model)
    image = Image.fromarray((np.random.default_rng(0).random((*IMAGE, 3)) * 255).astype(np.uint8))
    grid = model.layout().grid
    heads = (cfg.depth + cfg.class_attn_depth, cfg.num_heads)
    return Inputs(loaded, image, IMAGE, np.zeros(grid, bool) if mask is None else mask,
                  np.ones(heads) if head_mask is None else head_mask)


@pytest.mark.parametrize("method", list(rel.METHODS))
@pytest.mark.parametrize("name", FAMILIES)
def test_every_family_gives_a_finite_map_or_a_clear_refusal(name: str, method: str) -> None:
    inputs = _inputs(name)
    reason = rel.METHODS[method].reason(inputs.loaded.config)
    if reason is not None:
        with pytest.raises(ValueError, match=f"method '{method}' does not apply to this model: .+; use "):
            rel.explain(inputs, [method])
        return
    (result,) = rel.explain(inputs, [method], measure=method in ("attention-gradient", "occlusion"))
    assert result.relevance.shape == inputs.loaded.model.layout().grid
    assert np.isfinite(result.relevance).all()
    if result.faithfulness is not None:
        f = result.faithfulness
        assert f.positive.shape == f.negative.shape == (10,) and np.isfinite(f.positive).all()
        assert f.positive[0] == pytest.approx(f.negative[0])  # nothing removed yet: the same image
        assert f.deletion[0] == pytest.approx(f.insertion[-1])


def test_the_table_refuses_only_where_the_rules_are_missing() -> None:
    refused = {name for name in FAMILIES if rel.METHODS["transformer-attribution"].reason(_model(name).config)}
    # CaiT's class attention and the attention pools (SigLIP's and PE's MAP, AIMv2's query) have no LRP rule
    assert refused == {"siglip-b16", "siglip2-b16-naflex", "pe-core-b16", "aimv2-l14-query", "cait-xxs24"}
    assert all(m.reason(_model(name).config) is None for name in FAMILIES for key, m in rel.METHODS.items()
               if key not in ("transformer-attribution", "attnlrp", "cp-lrp"))  # AttnLRP's: test_attnlrp.py


@pytest.mark.parametrize("method", ["attention-gradient", "transformer-attribution", "gradcam",
                                    "integrated-gradients", "occlusion"])
@pytest.mark.parametrize("name", ["vit-s16", "deit-s-distilled", "beit-b16", "pe-core-b16", "aimv2-l14-query",
                                  "dinov2-s14-in1k"])
def test_class_specific_maps_follow_the_target_class(name: str, method: str) -> None:
    inputs = _inputs(name)
    if rel.METHODS[method].reason(inputs.loaded.config):
        pytest.skip("refused by the table (checked in the family test)")
    maps = [rel.explain(inputs, [method], rel.Target(index=i), measure=False)[0].relevance for i in (0, 3)]
    assert not np.allclose(maps[0], maps[1], atol=1e-7, rtol=1e-4)
    rollout = [rel.explain(inputs, ["rollout"], rel.Target(index=i), measure=False)[0].relevance for i in (0, 3)]
    np.testing.assert_array_equal(rollout[0], rollout[1])  # attention rollout does not depend on the class


def test_targets_index_label_top_and_deit_heads() -> None:
    inputs = _inputs("deit-s-distilled")
    top = rel.prepare(inputs).scorer.resolved
    assert top.kind == "class" and top.head == "average"
    with torch.no_grad():
        logits = inputs.loaded.model(inputs.loaded.preprocess(inputs.image))[0]
    assert top.index == int(logits.argmax()) and "average of both heads" in top.title
    assert rel.prepare(inputs, rel.Target(index="class2")).scorer.resolved.index == 2
    assert rel.prepare(inputs, rel.Target(index="4")).scorer.resolved.index == 4
    dist = rel.explain(inputs, ["attention-gradient"], rel.Target(index=1, head="dist"), measure=False)[0]
    cls = rel.explain(inputs, ["attention-gradient"], rel.Target(index=1, head="cls"), measure=False)[0]
    assert dist.target.head == "dist" and not np.allclose(dist.relevance, cls.relevance)
    with pytest.raises(ValueError, match="neither a class index nor one of this model's labels"):
        rel.prepare(inputs, rel.Target(index="zebra"))
    with pytest.raises(ValueError, match="out of range"):
        rel.prepare(inputs, rel.Target(index=99))
    with pytest.raises(ValueError, match="only DeiT distilled"):
        rel.prepare(_inputs("vit-s16"), rel.Target(head="dist"))


def test_a_model_without_a_classifier_explains_a_similarity_named_in_the_title() -> None:
    mask = np.zeros((4, 6), bool)
    mask[1:3, 2:4] = True
    inputs = _inputs("dinov2-s14", mask=mask)
    (result,) = rel.explain(inputs, ["attention-gradient"])
    assert result.target.kind == "similarity" and "the same image unmasked" in result.target.title
    assert np.abs(result.relevance).max() > 0 and result.note == ""
    other = Image.fromarray(np.full((*IMAGE, 3), 90, np.uint8))
    (against,) = rel.explain(_inputs("dinov2-s14"), ["gradcam"], rel.Target(reference=other), measure=False)
    assert "the reference image" in against.target.title and np.isfinite(against.relevance).all()
    (itself,) = rel.explain(_inputs("dinov2-s14"), ["gradcam"], measure=False)
    assert "gradient is zero" in itself.note
    with pytest.raises(ValueError, match="no classifier"):
        rel.prepare(inputs, rel.Target(index=0))


def test_masks_and_heads_switched_off_apply() -> None:
    plain = rel.explain(_inputs("vit-s16"), ["attention-gradient"], rel.Target(index=0), measure=False)[0]
    mask = np.zeros((4, 6), bool)
    mask[0, :3] = True
    heads = np.ones((2, 4))
    heads[1, 0] = 0
    masked = rel.explain(_inputs("vit-s16", mask=mask, head_mask=heads), ["attention-gradient"], rel.Target(index=0),
                         measure=False)[0]
    assert not np.allclose(plain.relevance, masked.relevance)
    np.testing.assert_array_equal(masked.masked, mask)


def test_mask_and_blur_baselines_and_the_pointing_game() -> None:
    inputs = _inputs("vit-s16")
    obj = np.zeros(IMAGE, bool)
    obj[4:12, 8:16] = True
    for baseline in rel.BASELINES:
        (result,) = rel.explain(inputs, ["occlusion"], rel.Target(index=0), baseline, object_mask=obj)
        f = result.faithfulness
        assert f.baseline == baseline and f.pointing is not None and 0.0 <= f.iou <= 1.0
    with pytest.raises(ValueError, match="baseline must be one of"):
        rel.explain(inputs, ["occlusion"], baseline="noise")


def test_cancel_stops_between_batches_and_progress_is_reported() -> None:
    cancel = threading.Event()
    seen: list[float] = []

    def progress(share: float, what: str) -> None:
        seen.append(share)
        if share > 0.2:
            cancel.set()

    with pytest.raises(Cancelled):
        rel.explain(_inputs("vit-s16"), ["integrated-gradients", "occlusion"], job=Job(progress, cancel))
    assert seen and seen == sorted(seen) and seen[-1] < 0.5


def test_json_contract() -> None:
    (result,) = rel.explain(_inputs("deit-s-distilled"), ["attention-gradient"], rel.Target(index=2))
    out = rel.to_json("src", "img.png", result)
    assert set(out) == {"source", "image", "method", "target", "grid", "relevance", "faithfulness"}
    assert out["target"] == {"index": 2, "label": "class2", "head": "average"} and out["grid"] == [4, 6]
    assert np.array(out["relevance"]).shape == (4, 6)
    f = out["faithfulness"]
    assert {"positive_auc", "negative_auc", "deletion_auc", "insertion_auc", "curves"} <= set(f)
    assert len(f["curves"]["positive"]) == len(f["curves"]["negative"]) == 10
    assert {"deletion", "insertion"} <= set(f["curves"])


@pytest.mark.parametrize("name", ["vit-s16", "deit-s-distilled", "deit3-s16", "beit-b16", "clip-b16", "eva02-ti14",
                                  "dinov2-s14-in1k", "aimv2-l14"])
def test_lrp_conserves_the_target_relevance_from_the_output_to_the_first_blocks_input(name: str) -> None:
    inputs = _inputs(name)
    classifier = rel.has_classifier(inputs.loaded.config)
    other = Image.fromarray(np.full((*IMAGE, 3), 90, np.uint8))
    session = rel.prepare(inputs, rel.Target(index=1) if classifier else rel.Target(reference=other))
    done = rel.propagate(session.scorer, inputs.loaded.config)
    if classifier:  # the one-hot logit through the head's rule
        assert float(done.start.sum()) == pytest.approx(1.0, abs=1e-4)
    else:  # the cosine's terms e_d r_d / |e|
        with torch.no_grad():
            out = inputs.loaded.model.forward_intermediates(session.scorer.pixels)
        cosine = float(rel.target_logit(out, session.scorer.resolved)[0])
        assert float(done.start.sum()) == pytest.approx(cosine, abs=1e-4)
    assert float(done.input.sum()) == pytest.approx(float(done.start.sum()), rel=1e-3)
    assert len(done.attention) == inputs.loaded.config.depth


LRP_PRESETS = [name for name in ["vit-s16", "deit-s-distilled", "classroom", "classroom-conv", *FAMILY_PRESETS]
               if rel.METHODS["transformer-attribution"].reason(_model(name).config) is None]


@pytest.mark.parametrize("name", LRP_PRESETS)
def test_lrp_flows_through_the_numbers_the_forward_computed(name: str) -> None:
    """The rules read the pass's own sites, never a copy of the block: each value LRP reads is the value the
    forward computed there, and a forward changed by a hook (block 0's attention branch zeroed) is the network LRP
    explains: that block's attention then gets no relevance, and all of it goes through the residual."""
    from vit_explorer.analysis import lrp

    inputs = _inputs(name)
    model = inputs.loaded.model
    classifier = rel.has_classifier(inputs.loaded.config)
    other = Image.fromarray(np.full((*IMAGE, 3), 90, np.uint8))
    session = rel.prepare(inputs, rel.Target(index=1) if classifier else rel.Target(reference=other))
    read: dict[int, dict[str, torch.Tensor]] = {}
    original = lrp.block_relevance

    def spy(block, values, relevance, **kwargs):
        read[next(i for i, b in enumerate(model.blocks) if b is block)] = values
        return original(block, values, relevance, **kwargs)

    lrp.block_relevance = spy
    try:
        rel.propagate(session.scorer, inputs.loaded.config)
    finally:
        lrp.block_relevance = original
    with torch.no_grad():
        _, cache = model.run_with_cache(session.scorer.pixels)
    assert sorted(read) == list(range(model.config.depth))
    for i, values in read.items():
        assert set(values) == set(lrp.block_sites(model.blocks[i]))
        for site, value in values.items():
            torch.testing.assert_close(value, cache[f"blocks.{i}.{site}"], msg=f"block {i} {site}")

    model.add_hook("blocks.0.hook_attn_out", lambda branch, hook: torch.zeros_like(branch))
    try:
        done = rel.propagate(session.scorer, inputs.loaded.config)
    finally:
        model.reset_hooks()
    assert float(done.attention[0].abs().max()) == 0.0
    assert float(done.attention[1].abs().max()) > 0.0


@pytest.mark.parametrize("half", ["cls", "mean"])
def test_a_head_over_cls_beside_the_mean_reads_the_rows_its_halves_weigh(half: str) -> None:
    """DINOv2's classifier: logit = W_cls [CLS] + W_mean mean(patches). With one half of W zero the model is the
    same function as one pooling by [CLS] (pool='cls') or by the mean of the patches (pool='gap', no fc_norm) with
    the other half as its head, so both gradient methods must give that model's map."""
    both = _model("dinov2-s14-in1k")
    d = both.config.embed_dim
    alone = _model("dinov2-s14-in1k", pool="cls" if half == "cls" else "gap")
    kept, dropped = (slice(0, d), slice(d, 2 * d)) if half == "cls" else (slice(d, 2 * d), slice(0, d))
    with torch.no_grad():
        both.head.weight[:, dropped] = 0
    state = both.state_dict()
    alone.load_state_dict({**state, "head.weight": state["head.weight"][:, kept]})
    target = rel.Target(index=2)
    for method in ("attention-gradient", "transformer-attribution"):
        ours = rel.explain(_inputs("", model=both), [method], target, measure=False)[0].relevance
        theirs = rel.explain(_inputs("", model=alone), [method], target, measure=False)[0].relevance
        np.testing.assert_allclose(ours, theirs, atol=1e-6 * np.abs(theirs).max(), rtol=1e-4)
        assert np.abs(ours).max() > 0


def test_the_halves_readout_weighs_each_half_by_the_size_of_its_contribution() -> None:
    layout = _model("dinov2-s14-in1k").layout()
    pooled = torch.tensor([[1.0, 2.0, 3.0, 4.0]])  # [CLS] half (1, 2), mean half (3, 4)
    weights = rel.halves_readout(pooled, torch.tensor([[1.0, 1.0, 1.0, -1.5]]), layout)  # contributions 3 and -3
    assert float(weights[0, 0]) == pytest.approx(0.5) and float(weights.sum()) == pytest.approx(1.0)
    weights = rel.halves_readout(pooled, torch.tensor([[1.0, 0.0, 1.0, 0.0]]), layout)  # 1 and 3
    assert float(weights[0, 0]) == pytest.approx(0.25)
    torch.testing.assert_close(weights[0, 1:], torch.full((layout.num_patches,), 0.75 / layout.num_patches))
    assert float(rel.halves_readout(pooled, torch.tensor([[0.0, 0.0, 2.0, 0.0]]), layout)[0, 0]) == 0  # mean alone
    assert float(rel.halves_readout(pooled, torch.zeros(1, 4), layout)[0, 0]) == 0.5  # neither half: both alike
