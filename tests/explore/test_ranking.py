"""Methods ranked over a dataset: percentile-bootstrap intervals (hold the mean, seeded), the batch call equals the
one-image call, the built-in sets' masks through the model's preprocessing score a planted map, ranking.csv's
columns, and cancellation."""

from __future__ import annotations

import threading

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


def test_the_batch_call_equals_one_image_at_a_time(loaded: LoadedModel) -> None:
    images = _images(3)
    methods = ["attention-gradient", "rollout"]
    batch = ranking.explain(images, methods, [2, None, "star"], model=loaded)
    assert batch.relevance["rollout"].shape == (3, 8, 8) and len(batch.faithfulness["rollout"]) == 3
    size = loaded.preprocessing.size
    for i, (image, target) in enumerate(zip(images, [2, None, "star"], strict=True)):
        one = rel.explain(Inputs.unmasked(loaded, image, size), methods, rel.Target(target))
        assert batch.targets[i].index == one[0].target.index
        for e in one:
            np.testing.assert_allclose(batch.relevance[e.method][i], e.relevance, rtol=1e-4, atol=1e-6)
            f = batch.faithfulness[e.method][i]
            for name, get in ranking.AUCS.items():
                assert get(f) == pytest.approx(get(e.faithfulness), abs=1e-5), name
    assert batch.targets[2].index == synthetic.SHAPES.index("star")
    as_tensor = torch.stack([torch.from_numpy(np.array(im)).permute(2, 0, 1) for im in images])
    np.testing.assert_allclose(ranking.explain(as_tensor, ["rollout"], model=loaded, measure=False)
                               .relevance["rollout"], batch.relevance["rollout"], rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="one per image"):
        ranking.explain(images, methods, [1], model=loaded)


def test_a_planted_map_on_the_built_in_masks_points_and_overlaps(loaded: LoadedModel) -> None:
    source = D.open_source("where", limit=4)
    masks = ranking.builtin_masks(loaded, source, [0, 1, 2, 3], seed=0)
    assert masks is not None and masks.shape == (4, 32, 32)
    exact = synthetic.object_masks(4, size=32, variant="where", split="val").numpy()
    assert (masks == exact).mean() > 0.97  # drawn at 64 and resized: the same shapes up to their edges
    pixels = torch.cat([D.dataset_preprocessing(loaded)(source.image(i)) for i in range(4)])
    for i in range(4):
        session = ranking._session(loaded, pixels[i:i + 1], rel.Target(int(source.labels[i])), "zero")
        planted = faith.patch_coverage(masks[i], 4)
        hit = rel.faithfulness(session, planted, object_mask=masks[i])
        miss = rel.faithfulness(session, 1.0 - planted, object_mask=masks[i])
        assert hit.pointing and hit.iou is not None and hit.iou > 0.6
        assert not miss.pointing and miss.iou is not None and miss.iou < 0.2


def test_rank_dataset_columns_and_cancel(loaded: LoadedModel) -> None:
    source = D.open_source("shapes", limit=5)
    result = ranking.rank_dataset(loaded, source, ["rollout", "gradcam"], batch_size=2)
    assert result.images == 5 and sorted(result.methods) == ["gradcam", "rollout"]
    assert "label" in result.targets
    header, rows = ranking.csv_rows(result)
    auc_columns = [f"{a}_{k}" for a in ranking.AUCS for k in ("mean", "low", "high")]
    assert header == ["method", *auc_columns, "pointing_mean", "pointing_low", "pointing_high", "iou_mean",
                      "iou_low", "iou_high", "images"]
    assert [r[0] for r in rows] == result.methods and all(r[-1] == 5 for r in rows)
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
