"""Relevance methods ranked over a dataset, and the batch call a notebook uses.

`explain(images, methods, targets, model=loaded)` explains a batch of images (PIL images or a (B, 3, H, W) tensor of
uint8 or 0..1 floats), a target per image (an index or label; None: the top class, found for the whole batch in one
pass), and returns every method's maps and faithfulness records. `rank_dataset` runs it over a dataset source
(`explore.dataset.open_source`: built-in sets, folders, CIFAR), batch by batch through a `Job`, and reports each
method's mean AUCs with seeded percentile-bootstrap 95 % intervals over the images; on the built-in sets, whose
object masks are known exactly, also the pointing game and the 60 %-mass IoU.

`AUCS` is the table of what is averaged: a new AUC of `relevance.Faithfulness` is one line there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from PIL import Image

from ..checkpoints import LoadedModel
from ..jobs import Job
from . import budget
from . import relevance as rel
from .dataset import BUILTIN_SIDE, DatasetSource, _batches, dataset_preprocessing
from .figures import BarsFigure, json_number
from .forward import Inputs

AUCS: dict[str, Callable[[rel.Faithfulness], float]] = {
    "deletion": lambda f: f.deletion_auc,
    "insertion": lambda f: f.insertion_auc,
    "positive": lambda f: f.positive_auc,
    "negative": lambda f: f.negative_auc,
    "road_morf": lambda f: f.road_morf_auc,
    "road_lerf": lambda f: f.road_lerf_auc,
}
LOCALISATION = ("pointing", "iou")  # on images whose object masks are known
RANK_BY = ("negative", "positive")  # a method's place: mean negative AUC - mean positive AUC, largest first
BOOTSTRAP_SAMPLES = 2000
CONFIDENCE = 0.95
BATCH = 16  # images decoded and given their top class per pass


# ---------------------------------------------------------------------------- intervals
@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float


def bootstrap(values: np.ndarray, *, seed: int = 0, samples: int = BOOTSTRAP_SAMPLES,
              confidence: float = CONFIDENCE) -> Interval:
    """The mean of (n,) values and its percentile-bootstrap interval (resampling the values, seeded)."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        raise ValueError("no values to average")
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, values.size, (samples, values.size))].mean(axis=1)  # (samples,)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    mean = float(values.mean())
    return Interval(mean, min(float(low), mean), max(float(high), mean))


# ---------------------------------------------------------------------------- a batch
@dataclass
class Batch:
    """What `explain` returns: per method its maps and, when measured, one faithfulness record per image."""

    methods: list[str]
    targets: list[rel.Resolved]  # one per image
    relevance: dict[str, np.ndarray]  # method -> (B, gh, gw)
    faithfulness: dict[str, list[rel.Faithfulness]]  # method -> B records ({} when not measured)
    display: np.ndarray  # (B, H, W, 3) uint8 the images as the model sees them

    def aucs(self, method: str) -> dict[str, np.ndarray]:
        """AUC name -> (B,) the method's AUC on each image."""
        return {name: np.array([get(f) for f in self.faithfulness[method]]) for name, get in AUCS.items()}


def _pixels(loaded: LoadedModel, images: Sequence[Image.Image] | torch.Tensor) -> torch.Tensor:
    """(B, 3, H, W) the images through the model's preprocessing at its input size."""
    if isinstance(images, torch.Tensor):
        if images.ndim != 4 or images.shape[1] != 3:
            raise ValueError(f"images: a tensor batch must be (B, 3, H, W), got {tuple(images.shape)}")
        scale = 1.0 if images.is_floating_point() else 255.0
        arrays = (images.detach().float().cpu() / scale).clamp(0, 1).mul(255).round().to(torch.uint8)
        images = [Image.fromarray(a.permute(1, 2, 0).numpy()) for a in arrays]
    if not images:
        raise ValueError("images: none given")
    pre = dataset_preprocessing(loaded)
    return torch.cat([pre(image.convert("RGB")) for image in images])


def _session(loaded: LoadedModel, pixels: torch.Tensor, target: rel.Target, baseline: str) -> rel.Session:
    """relevance.prepare's session for one preprocessed image (1, 3, H, W) with no [MASK] or head switched off."""
    model = loaded.model
    layout = model.layout((int(pixels.shape[-2]), int(pixels.shape[-1])))

    def run() -> dict[str, Any]:
        with torch.inference_mode():
            return model.forward_intermediates(pixels)

    def unmasked() -> torch.Tensor:
        with torch.inference_mode():
            return model(pixels)[0].float()

    resolved = rel.resolve_target(loaded, target, run, unmasked)
    display = loaded.preprocessing.to_image(pixels)
    inputs = Inputs.unmasked(loaded, Image.fromarray(display), (int(pixels.shape[-2]), int(pixels.shape[-1])))
    return rel.Session(loaded, inputs, rel.Scorer(model, pixels, layout, None, None, resolved, baseline), display)


def explain_pixels(loaded: LoadedModel, pixels: torch.Tensor, methods: Sequence[str],
                   targets: Sequence[int | str | None] | None = None, *, baseline: str = "zero", measure: bool = True,
                   object_masks: np.ndarray | None = None, job: Job | None = None) -> Batch:
    """`explain` on preprocessed pixels (B, 3, H, W); `object_masks` (B, H, W) bool adds the pointing game / IoU."""
    if not methods:
        raise ValueError(f"no method chosen; choose from {', '.join(rel.METHODS)}")
    for name in methods:
        rel.check_method(name, loaded.config)
    n = int(pixels.shape[0])
    targets = list(targets) if targets is not None else [None] * n
    if len(targets) != n:
        raise ValueError(f"targets: {len(targets)} given for {n} images; give one per image (or None)")
    job = job or Job()
    pixels = pixels.to(loaded.device)
    if rel.has_classifier(loaded.config) and any(t is None for t in targets):
        with torch.inference_mode():  # the top classes of the whole batch in one pass
            top = loaded.model(pixels).argmax(-1).tolist()
        targets = [top[i] if t is None else t for i, t in enumerate(targets)]
    maps: dict[str, list[np.ndarray]] = {m: [] for m in methods}
    records: dict[str, list[rel.Faithfulness]] = {m: [] for m in methods} if measure else {}
    resolved, display = [], []
    steps = n * len(methods)
    for i in range(n):
        session = _session(loaded, pixels[i:i + 1], rel.Target(targets[i]), baseline)
        resolved.append(session.scorer.resolved)
        display.append(session.display)
        for j, name in enumerate(methods):
            k = i * len(methods) + j
            part = job.part(k / steps, (k + 1) / steps, f"image {i + 1} of {n}: {name}")
            relevance = rel.relevance_map(session, name, job=part.part(0, 0.5 if measure else 1))
            maps[name].append(relevance)
            if measure:
                mask = None if object_masks is None else object_masks[i]
                records[name].append(rel.faithfulness(session, relevance, object_mask=mask, job=part.part(0.5, 1)))
    return Batch(list(methods), resolved, {m: np.stack(v) for m, v in maps.items()}, records, np.stack(display))


def explain(images: Sequence[Image.Image] | torch.Tensor, methods: Sequence[str],
            targets: Sequence[int | str | None] | None = None, *, model: LoadedModel, baseline: str = "zero",
            measure: bool = True, job: Job | None = None) -> Batch:
    """Every method's map of every image (PIL images, or a (B, 3, H, W) tensor of uint8 or 0..1 floats) for its
    target (a class index or label; None or no targets: the top class), each with its faithfulness (`measure`)."""
    return explain_pixels(model, _pixels(model, images), methods, targets, baseline=baseline, measure=measure,
                          job=job)


# ---------------------------------------------------------------------------- over a dataset
@dataclass
class Ranking:
    """Each method's mean AUCs (and, on a built-in set, pointing and IoU) with their intervals, ranked."""

    data: str
    methods: list[str]  # ranked: mean negative - positive AUC, largest first
    scores: dict[str, dict[str, Interval]]  # method -> AUC (or 'pointing', 'iou') -> interval
    images: int
    targets: str  # how each image's target was chosen
    baseline: str
    skipped: list[str] = field(default_factory=list)

    @property
    def columns(self) -> list[str]:
        """The scores present, in order: the AUCs, then pointing and IoU where measured."""
        first = self.scores[self.methods[0]]
        return [name for name in (*AUCS, *LOCALISATION) if name in first]


def builtin_masks(loaded: LoadedModel, source: DatasetSource, indices: list[int], seed: int) -> np.ndarray | None:
    """(k, H, W) bool the objects of a built-in set's images, through the model's preprocessing (None otherwise)."""
    from ..data import synthetic

    if source.root is not None or source.name not in synthetic.VARIANTS:
        return None
    masks = synthetic.object_masks(len(source), seed=seed, size=BUILTIN_SIDE, variant=source.name, split="val")
    pre = dataset_preprocessing(loaded)
    out = []
    for i in indices:
        picture = Image.fromarray(masks[i].numpy().astype(np.uint8) * 255).convert("RGB")
        out.append(loaded.preprocessing.to_image(pre(picture))[..., 0] >= 128)
    return np.stack(out)


def target_rule(loaded: LoadedModel, source: DatasetSource) -> tuple[bool, str]:
    """Whether the dataset's labels are the model's classes (then each image explains its label), and says so."""
    if not rel.has_classifier(loaded.config):
        return False, "the similarity of each image's embedding to itself unmasked (the model has no classifier)"
    if source.labelled and list(source.label_names) == list(loaded.labels):
        return True, "each image's label (the dataset's classes are the model's)"
    return False, "each image's top class (the dataset's labels are not the model's classes)"


def rank_dataset(loaded: LoadedModel, source: DatasetSource, methods: Sequence[str], *, baseline: str = "zero",
                 seed: int = 0, batch_size: int = BATCH, job: Job | None = None) -> Ranking:
    """Explain every image of a `dataset.DatasetSource` with each method and rank the methods by their mean AUCs
    (seeded bootstrap intervals over the images)."""
    for name in methods:
        rel.check_method(name, loaded.config)
    if not methods:
        raise ValueError(f"no method chosen; choose from {', '.join(rel.METHODS)}")
    n = len(source)
    if n == 0:
        raise ValueError(f"--data {source.name}: no images")
    grid = loaded.model.check_image_size(*loaded.preprocessing.size)
    per_image = len(methods) * (int(np.prod(grid)) * 8 + 16 * 128)  # the maps and the faithfulness curves kept
    budget.check_images(f"--data {source.name}", n, per_image, "the relevance maps and curves")
    job = job or Job()
    use_labels, targets = target_rule(loaded, source)
    scores: dict[str, dict[str, list[float]]] = {m: {} for m in methods}
    done, skipped = 0, []
    for kept, pixels, missed in _batches(source, loaded, batch_size, job, np.arange(n)):
        skipped += missed
        if pixels is None:
            continue
        labels = [int(source.labels[i]) for i in kept] if use_labels else None
        masks = builtin_masks(loaded, source, kept, seed)
        part = job.part(done / n, (done + len(kept)) / n, f"images {done + 1}-{done + len(kept)} of {n}")
        batch = explain_pixels(loaded, pixels, methods, labels, baseline=baseline, object_masks=masks, job=part)
        for m in methods:
            for name, values in batch.aucs(m).items():
                scores[m].setdefault(name, []).extend(values.tolist())
            if masks is not None:
                records = batch.faithfulness[m]
                scores[m].setdefault("pointing", []).extend(float(bool(f.pointing)) for f in records)
                scores[m].setdefault("iou", []).extend(float(f.iou or 0.0) for f in records)
        done += len(kept)
    if done == 0:
        raise ValueError(f"--data {source.name}: no image could be read ({len(skipped)} skipped)")
    intervals = {m: {name: bootstrap(np.array(v), seed=seed) for name, v in s.items()} for m, s in scores.items()}
    order = sorted(methods, key=lambda m: -(intervals[m][RANK_BY[0]].mean - intervals[m][RANK_BY[1]].mean))
    job.progress(1.0, "done")
    return Ranking(source.name, order, intervals, done, targets, baseline, skipped)


def csv_rows(ranking: Ranking) -> tuple[list[str], list[list[Any]]]:
    """ranking.csv's header (method, each score's mean / low / high, images) and one row per method, ranked."""
    header = ["method"] + [f"{c}_{k}" for c in ranking.columns for k in ("mean", "low", "high")] + ["images"]
    rows = []
    for m in ranking.methods:
        s = ranking.scores[m]
        rows.append([m] + [getattr(s[c], k) for c in ranking.columns for k in ("mean", "low", "high")]
                    + [ranking.images])
    return header, rows


def to_json(source: str, ranking: Ranking) -> dict[str, Any]:
    """`explain --data --json`'s object: the data, the target rule, the baseline and each method's scores."""
    return {"source": source, "data": ranking.data, "images": ranking.images, "targets": ranking.targets,
            "baseline": ranking.baseline, "confidence": CONFIDENCE,
            "ranking": [{"method": m, **{c: {"mean": json_number(s.mean), "low": json_number(s.low),
                                             "high": json_number(s.high)}
                                         for c, s in ranking.scores[m].items()}}
                        for m in ranking.methods]}


def figures(ranking: Ranking) -> dict[str, BarsFigure]:
    """Score name -> its bars: each method's mean, with the 95 % interval's ends as markers, in rank order."""
    labels = tuple(rel.METHODS[m].short for m in ranking.methods)
    out = {}
    for c in ranking.columns:
        s = [ranking.scores[m][c] for m in ranking.methods]
        what = {"pointing": "pointing game hit rate", "iou": "IoU of the 60 %-mass region"}.get(c, f"{c} AUC")
        out[c] = BarsFigure(f"{what} over {ranking.images} images ({ranking.baseline} baseline)", labels,
                            np.array([i.mean for i in s]), f"mean {what}, 95 % interval", "{:.3f}",
                            markers={"95 % low": np.array([i.low for i in s]),
                                     "95 % high": np.array([i.high for i in s])})
    return out


def summary_lines(ranking: Ranking) -> list[str]:
    """The ranking as text, one line per method."""
    lines = []
    for rank, m in enumerate(ranking.methods, start=1):
        parts = [f"{c} {s.mean:.3f} [{s.low:.3f}, {s.high:.3f}]" for c, s in ranking.scores[m].items()]
        lines.append(f"{rank}. {m:<24} " + " · ".join(parts))
    return lines

