"""Methods ranked over a dataset: percentile-bootstrap intervals (hold the mean, seeded), the batch call equals the
one-image call, the built-in sets' masks through the model's preprocessing score a planted map, ranking.csv's
columns, and cancellation."""

from __future__ import annotations

import threading
from dataclasses import replace

import numpy as np
import pytest
import torch
from PIL import Image

from vit_explorer.analysis import faithfulness as faith
from vit_explorer.checkpoints import LoadedModel
from vit_explorer.checkpoints.preprocess import Preprocess
from vit_explorer.data import synthetic
from vit_explorer.errors import Cancelled
from vit_explorer.explore import dataset as D
from vit_explorer.explore import ranking
from vit_explorer.explore import relevance as rel
from vit_explorer.explore.forward import Inputs
from vit_explorer.jobs import Job
from vit_explorer.models import VisionTransformer, preset


@pytest.fixture(scope="module")
def loaded() -> LoadedModel:
    torch.manual_seed(0)
    model = VisionTransformer(preset("classroom-tiny")).eval()
    return LoadedModel(model, model.config, list(synthetic.SHAPES), Preprocess(model.config.image_size))


def _images(n: int) -> list[Image.Image]:
    rng = np.random.default_rng(1)
    return [Image.fromarray((rng.random((40, 40, 3)) * 255).astype(np.uint8)) for _ in range(n)]


def test_bootstrap_holds_the_mean_and_is_seeded() -> None:
    values = np.random.default_rng(0).normal(0.3, 0.1, 40)
    a, b = ranking.bootstrap(values, seed=3), ranking.bootstrap(values, seed=3)
    assert a == b and a.low <= a.mean <= a.high and a.mean == pytest.approx(values.mean())
    assert a.low < a.high and ranking.bootstrap(values, seed=4) != a
    wider = ranking.bootstrap(values[:8], seed=3)
    assert wider.high - wider.low > a.high - a.low  # fewer images, wider interval
    same = ranking.bootstrap(np.full(5, 0.25))
    assert same.low == same.mean == same.high == 0.25
    with pytest.raises(ValueError, match="no values"):
        ranking.bootstrap(np.array([]))


def _equal_to_one_at_a_time(loaded: LoadedModel, images: list[Image.Image], methods: list[str],
                            targets: list[int | str | None], options: rel.Options) -> ranking.Batch:
    """The batch (every method on the whole batch, the curves in stacked passes) against `rel.explain` of each image
    alone with the seed the batch gives it (options.seed + its place): maps, targets and every AUC, curve by curve."""
    batch = ranking.explain(images, methods, targets, model=loaded, options=options)
    size = loaded.preprocessing.size
    for i, (image, target) in enumerate(zip(images, targets, strict=True)):
        alone = replace(options, seed=options.seed + i)
        one = rel.explain(Inputs.unmasked(loaded, image, size), methods, rel.Target(target), options=alone)
        assert batch.targets[i].index == one[0].target.index and batch.targets[i].kind == one[0].target.kind
        for e in one:
            # within rounding: of the map's scale, and of the float32 scores a map of differences is made of
            # (occlusion's: a score drop of 1.6e-7 came out 1.8e-7 alone, one ulp of the probabilities differenced)
            scale = max(float(np.abs(e.relevance).max()), 1e-12)
            atol = max(1e-5 * scale, 2 * float(np.finfo(np.float32).eps))
            np.testing.assert_allclose(batch.relevance[e.method][i], e.relevance, rtol=1e-4, atol=atol,
                                       err_msg=e.method)
            f, g = batch.faithfulness[e.method][i], e.faithfulness
            assert g is not None
            for curve in ("positive", "negative", "deletion", "insertion", "road_morf", "road_lerf"):
                np.testing.assert_allclose(getattr(f, curve), getattr(g, curve), rtol=0, atol=1e-5,
                                           err_msg=f"{e.method} {curve}")
            for name, get in ranking.AUCS.items():
                assert get(f) == pytest.approx(get(g), abs=1e-5), (e.method, name)
    return batch


def test_every_method_on_a_batch_equals_one_image_at_a_time(loaded: LoadedModel) -> None:
    methods = rel.supported(loaded.config)  # every method this model takes, the random baseline included
    assert {"occlusion", "integrated-gradients", "attnlrp", "random"} <= set(methods)
    images, targets = _images(3), [0, None, synthetic.SHAPES[3]]  # an index, the top class (6), a label
    batch = _equal_to_one_at_a_time(loaded, images, methods, targets, rel.Options(ig_steps=12))
    assert batch.relevance["rollout"].shape == (3, 8, 8) and len(batch.faithfulness["rollout"]) == 3
    assert batch.targets[2].index == 3
    assert len({t.index for t in batch.targets}) == 3  # a different target per image in one batch
    assert not np.allclose(batch.relevance["random"][0], batch.relevance["random"][1])  # each image its own seed
    as_tensor = torch.stack([torch.from_numpy(np.array(im)).permute(2, 0, 1) for im in images])
    np.testing.assert_allclose(ranking.explain(as_tensor, ["rollout"], targets, model=loaded, measure=False)
                               .relevance["rollout"], batch.relevance["rollout"], rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="one per image"):
        ranking.explain(images, methods, [1], model=loaded)


def test_a_batch_with_parameters_and_other_baselines_equals_one_image_at_a_time(loaded: LoadedModel) -> None:
    options = rel.Options(ig_steps=6, ig_baseline="noise", smoothgrad=2, occlusion_window=(8, 8),
                          occlusion_stride=(4, 4), seed=5)
    _equal_to_one_at_a_time(loaded, _images(3), ["integrated-gradients", "gradcam", "occlusion", "random"],
                            [1, 4, None], options)
    for baseline in ("blur", "mask"):
        batch = ranking.explain(_images(3), ["attention-gradient"], [0, 3, 5], model=loaded, baseline=baseline)
        for i, image in enumerate(_images(3)):
            alone = rel.explain(Inputs.unmasked(loaded, image, loaded.preprocessing.size), ["attention-gradient"],
                                rel.Target([0, 3, 5][i]), baseline, options=rel.Options(seed=i))[0]
            assert alone.faithfulness is not None
            for name, get in ranking.AUCS.items():
                assert get(batch.faithfulness["attention-gradient"][i]) == pytest.approx(
                    get(alone.faithfulness), abs=1e-5), (baseline, name)


def test_a_batch_of_similarities_equals_one_image_at_a_time() -> None:
    torch.manual_seed(1)
    model = VisionTransformer(preset("classroom-tiny", num_classes=0, pre_norm=True, proj_dim=12)).eval()
    embedder = LoadedModel(model, model.config, [], Preprocess(model.config.image_size))
    # a similarity of an image to itself hardly moves: the gradient methods' maps (its gradient is zero) and
    # occlusion's drops are rounding noise; LRP holds the norm constant, rollout reads no target
    methods = ["attnlrp", "cp-lrp", "rollout"]
    assert all(rel.METHODS[m].reason(model.config) is None for m in methods)
    batch = _equal_to_one_at_a_time(embedder, _images(3), methods, [None] * 3, rel.Options())
    assert {t.kind for t in batch.targets} == {"similarity"}


def test_a_planted_map_on_the_built_in_masks_points_and_overlaps(loaded: LoadedModel) -> None:
    source = D.open_source("where", limit=4)
    masks = ranking.builtin_masks(loaded, source, [0, 1, 2, 3], seed=0)
    assert masks is not None and masks.shape == (4, 32, 32)
    exact = synthetic.object_masks(4, size=32, variant="where", split="val").numpy()
    assert (masks == exact).mean() > 0.97  # drawn at 64 and resized: the same shapes up to their edges
    pixels = torch.cat([D.dataset_preprocessing(loaded)(source.image(i)) for i in range(4)])
    scorer, _ = ranking.batch_scorer(loaded, pixels, [int(label) for label in source.labels[:4]])
    planted = [faith.patch_coverage(masks[i], 4) for i in range(4)]
    hits = rel.faithfulness_batch(scorer, planted, object_masks=list(masks))
    misses = rel.faithfulness_batch(scorer, [1.0 - p for p in planted], object_masks=list(masks))
    for hit, miss in zip(hits, misses, strict=True):
        assert hit.pointing and hit.iou is not None and hit.iou > 0.6
        assert not miss.pointing and miss.iou is not None and miss.iou < 0.2


def test_rank_dataset_columns_and_cancel(loaded: LoadedModel) -> None:
    source = D.open_source("shapes", limit=4)
    result = ranking.rank_dataset(loaded, source, ["rollout", "gradcam"], batch_size=3)
    assert result.images == 4 and sorted(result.methods) == ["gradcam", "random", "rollout"]  # the baseline row
    assert result.random == "random"
    whole = ranking.rank_dataset(loaded, source, ["rollout", "gradcam"], batch_size=4)  # image i seeded 0 + i
    for m in result.methods:
        for name, s in result.scores[m].items():
            assert s.mean == pytest.approx(whole.scores[m][name].mean, abs=1e-6), (m, name)
    assert "label" in result.targets
    header, rows = ranking.csv_rows(result)
    auc_columns = [f"{a}_{k}" for a in ranking.AUCS for k in ("mean", "low", "high")]
    assert header == ["method", *auc_columns, "pointing_mean", "pointing_low", "pointing_high", "iou_mean",
                      "iou_low", "iou_high", "images"]
    assert [r[0] for r in rows] == result.methods and all(r[-1] == 4 for r in rows)
    for m in result.methods:
        for s in result.scores[m].values():
            assert s.low <= s.mean <= s.high
    gaps = [result.scores[m]["negative"].mean - result.scores[m]["positive"].mean for m in result.methods]
    assert gaps == sorted(gaps, reverse=True)
    assert set(ranking.figures(result)) == set(result.columns)
    flat = D.open_source("shapes", limit=3)
    flat.label_names = []  # labels that are not the model's classes: the top class
    assert "top class" in ranking.rank_dataset(loaded, flat, ["rollout"]).targets
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled):
        ranking.rank_dataset(loaded, source, ["rollout"], job=Job(cancel=cancel))


def test_the_random_row_and_the_methods_no_better_than_it() -> None:
    def scores(gap: float) -> dict[str, ranking.Interval]:
        return {name: ranking.Interval(0.5, 0.4, 0.6) for name in ranking.AUCS}

    gaps = {"occlusion": ranking.Interval(0.5, 0.40, 0.60), "gradcam": ranking.Interval(0.2, 0.05, 0.35),
            "random": ranking.Interval(0.1, 0.0, 0.2), "rollout": ranking.Interval(-0.1, -0.2, 0.0)}
    result = ranking.Ranking("shapes", list(gaps), {m: scores(g.mean) for m, g in gaps.items()}, 20, "labels",
                             "zero", gaps=gaps)
    assert result.random == "random"
    assert [m for m in result.methods if result.no_better_than_random(m)] == ["gradcam", "rollout"]
    lines = ranking.summary_lines(result)
    assert "NO BETTER" not in lines[0] and "NO BETTER THAN RANDOM" in lines[1] and lines[3].endswith(
        "NO BETTER THAN RANDOM")
    assert lines[2].startswith("3. random") and "the baseline to beat" in lines[2]
    figure = ranking.figures(result)["deletion"]
    assert figure.labels == ("occlusion", "Grad-CAM · no better than random", "random (baseline)",
                             "rollout · no better than random") and figure.highlight == 2
    out = ranking.to_json("model", result)
    assert [r["method"] for r in out["ranking"]] == list(gaps) and out["random"] == "random"
    assert out["no_better_than_random"] == ["gradcam", "rollout"]
    header, rows = ranking.csv_rows(result)
    assert [r[0] for r in rows] == list(gaps) and header[0] == "method" and header[-1] == "images"
