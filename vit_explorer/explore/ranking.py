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


def batch_scorer(loaded: LoadedModel, pixels: torch.Tensor, targets: Sequence[int | str | None], *,
                 baseline: str = "zero", options: rel.Options | None = None, first: int = 0
                 ) -> tuple[rel.Scorer, list[rel.Resolved]]:
    """relevance's scorer of a batch of preprocessed images (B, 3, H, W) with no [MASK] or head switched off, each
    image its own target (None: its top class, the whole batch's in one pass) and its own seed (options.seed +
    first + i: image i of a run whose batch starts at image `first`); and each image's target."""
    model, options = loaded.model, options or rel.Options()
    size = (int(pixels.shape[-2]), int(pixels.shape[-1]))
    options.check(loaded.config, size, baseline)
    pixels = pixels.to(loaded.device)
    with torch.inference_mode():  # the top classes (or, without a classifier, the embeddings) in one pass
        outputs = model(pixels)
    top = outputs.argmax(-1).tolist() if rel.has_classifier(loaded.config) else [None] * len(pixels)

    def resolve(i: int, target: int | str | None) -> rel.Resolved:
        def run() -> dict[str, Any]:
            with torch.inference_mode():
                return model.forward_intermediates(pixels[i:i + 1])

        chosen = top[i] if target is None else target
        return rel.resolve_target(loaded, rel.Target(chosen), run, lambda: outputs[i].float())

    resolved = [resolve(i, t) for i, t in enumerate(targets)]
    seeds = tuple(options.seed + first + i for i in range(len(pixels)))
    return rel.Scorer(model, pixels, model.layout(size), None, None, rel.batch_target(resolved), baseline, options,
                      rel.input_bounds(loaded), seeds), resolved


def explain_pixels(loaded: LoadedModel, pixels: torch.Tensor, methods: Sequence[str],
                   targets: Sequence[int | str | None] | None = None, *, baseline: str = "zero", measure: bool = True,
                   object_masks: np.ndarray | None = None, options: rel.Options | None = None, first: int = 0,
                   job: Job | None = None) -> Batch:
    """`explain` on preprocessed pixels (B, 3, H, W), each method on the whole batch at once (its passes' rows
    stacked, a target per row), then every image's faithfulness curves in stacked passes; `object_masks` (B, H, W)
    bool adds the pointing game / IoU; image i's random draws are seeded options.seed + first + i."""
    if not methods:
        raise ValueError(f"no method chosen; choose from {', '.join(rel.METHODS)}")
    for name in methods:
        rel.check_method(name, loaded.config)
    n = int(pixels.shape[0])
    targets = list(targets) if targets is not None else [None] * n
    if len(targets) != n:
        raise ValueError(f"targets: {len(targets)} given for {n} images; give one per image (or None)")
    job = job or Job()
    scorer, resolved = batch_scorer(loaded, pixels, targets, baseline=baseline, options=options, first=first)
    maps: dict[str, np.ndarray] = {}
    records: dict[str, list[rel.Faithfulness]] = {}
    for j, name in enumerate(methods):
        part = job.part(j / len(methods), (j + 1) / len(methods), f"{name} on {n} images")
        computed = rel.batch_maps(scorer, name, loaded.config, job=part.part(0, 0.5 if measure else 1))
        maps[name] = np.stack([m.relevance for m in computed])  # (B, gh, gw)
        if measure:
            masks = None if object_masks is None else list(object_masks)
            records[name] = rel.faithfulness_batch(scorer, list(maps[name]), object_masks=masks,
                                                   job=part.part(0.5, 1, f"{name}: faithfulness"))
    display = np.stack([loaded.preprocessing.to_image(scorer.pixels[i:i + 1]) for i in range(n)])
    return Batch(list(methods), resolved, maps, records, display)


def explain(images: Sequence[Image.Image] | torch.Tensor, methods: Sequence[str],
            targets: Sequence[int | str | None] | None = None, *, model: LoadedModel, baseline: str = "zero",
            measure: bool = True, options: rel.Options | None = None, job: Job | None = None) -> Batch:
    """Every method's map of every image (PIL images, or a (B, 3, H, W) tensor of uint8 or 0..1 floats) for its
    target (a class index or label; None or no targets: the top class), each with its faithfulness (`measure`);
    image i's random draws are seeded options.seed + i."""
    return explain_pixels(model, _pixels(model, images), methods, targets, baseline=baseline, measure=measure,
                          options=options, job=job)


# ---------------------------------------------------------------------------- over a dataset
RANDOM = "random"  # the random-attribution baseline row of every ranking


@dataclass
class Ranking:
    """Each method's mean AUCs (and, on a built-in set, pointing and IoU) with their intervals, ranked; the random
    baseline's row among them."""

    data: str
    methods: list[str]  # ranked: mean negative - positive AUC, largest first; the random row among them
    scores: dict[str, dict[str, Interval]]  # method -> AUC (or 'pointing', 'iou') -> interval
    images: int
    targets: str  # how each image's target was chosen
    baseline: str
    skipped: list[str] = field(default_factory=list)
    gaps: dict[str, Interval] = field(default_factory=dict)  # method -> negative - positive AUC, per image averaged

    @property
    def columns(self) -> list[str]:
        """The scores present, in order: the AUCs, then pointing and IoU where measured."""
        first = self.scores[self.methods[0]]
        return [name for name in (*AUCS, *LOCALISATION) if name in first]

    @property
    def random(self) -> str | None:
        """The random-attribution row's method (None in a ranking without one)."""
        return next((m for m in self.methods if rel.METHODS[m].baseline), None)

    def no_better_than_random(self, method: str) -> bool:
        """Whether the method's interval of negative - positive AUC reaches the random row's (it overlaps it, or lies
        below it): over these images it is not shown to do better than random attribution."""
        random = self.random
        if random is None or method == random or method not in self.gaps:
            return False
        return self.gaps[method].low <= self.gaps[random].high


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
                 seed: int = 0, batch_size: int = BATCH, options: rel.Options | None = None,
                 job: Job | None = None) -> Ranking:
    """Explain every image of a `dataset.DatasetSource` with each method and the random baseline (seeded per image:
    options.seed + its place in the run), a batch of images at a time, and rank the methods by their mean AUCs
    (seeded bootstrap intervals over the images)."""
    for name in methods:
        rel.check_method(name, loaded.config)
    if not methods:
        raise ValueError(f"no method chosen; choose from {', '.join(rel.METHODS)}")
    methods = [*methods, *([] if any(rel.METHODS[m].baseline for m in methods) else [RANDOM])]
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
        batch = explain_pixels(loaded, pixels, methods, labels, baseline=baseline, object_masks=masks,
                               options=options, first=done, job=part)
        for m in methods:
            for name, values in batch.aucs(m).items():
                scores[m].setdefault(name, []).extend(values.tolist())
            scores[m].setdefault("gap", []).extend(f.gap for f in batch.faithfulness[m])
            if masks is not None:
                records = batch.faithfulness[m]
                scores[m].setdefault("pointing", []).extend(float(bool(f.pointing)) for f in records)
                scores[m].setdefault("iou", []).extend(float(f.iou or 0.0) for f in records)
        done += len(kept)
    if done == 0:
        raise ValueError(f"--data {source.name}: no image could be read ({len(skipped)} skipped)")
    intervals = {m: {name: bootstrap(np.array(v), seed=seed) for name, v in s.items()} for m, s in scores.items()}
    gaps = {m: s.pop("gap") for m, s in intervals.items()}
    order = sorted(methods, key=lambda m: -(intervals[m][RANK_BY[0]].mean - intervals[m][RANK_BY[1]].mean))
    job.progress(1.0, "done")
    return Ranking(source.name, order, intervals, done, targets, baseline, skipped, gaps)


def csv_rows(ranking: Ranking) -> tuple[list[str], list[list[Any]]]:
    """ranking.csv's header (method, each score's mean / low / high, images) and one row per method, ranked (the
    random baseline's row among them, method 'random')."""
    header = ["method"] + [f"{c}_{k}" for c in ranking.columns for k in ("mean", "low", "high")] + ["images"]
    rows = []
    for m in ranking.methods:
        s = ranking.scores[m]
        rows.append([m] + [getattr(s[c], k) for c in ranking.columns for k in ("mean", "low", "high")]
                    + [ranking.images])
    return header, rows


def to_json(source: str, ranking: Ranking) -> dict[str, Any]:
    """`explain --data --json`'s object: the data, the target rule, the baseline and each method's scores (the random
    row among them); "random" names that row and "no_better_than_random" the methods not shown to beat it."""
    return {"source": source, "data": ranking.data, "images": ranking.images, "targets": ranking.targets,
            "baseline": ranking.baseline, "confidence": CONFIDENCE,
            "ranking": [{"method": m, **{c: {"mean": json_number(s.mean), "low": json_number(s.low),
                                             "high": json_number(s.high)}
                                         for c, s in ranking.scores[m].items()}}
                        for m in ranking.methods],
            "random": ranking.random,
            "no_better_than_random": [m for m in ranking.methods if ranking.no_better_than_random(m)]}


def label(ranking: Ranking, method: str) -> str:
    """A method's name in the figures: the random row and the methods no better than it say so."""
    short = rel.METHODS[method].short
    if method == ranking.random:
        return f"{short} (baseline)"
    return f"{short} · no better than random" if ranking.no_better_than_random(method) else short


def figures(ranking: Ranking) -> dict[str, BarsFigure]:
    """Score name -> its bars: each method's mean, with the 95 % interval's ends as markers, in rank order; the
    random row highlighted, the methods whose negative - positive AUC interval reaches random's marked."""
    labels = tuple(label(ranking, m) for m in ranking.methods)
    random = ranking.methods.index(ranking.random) if ranking.random is not None else None
    out = {}
    for c in ranking.columns:
        s = [ranking.scores[m][c] for m in ranking.methods]
        what = {"pointing": "pointing game hit rate", "iou": "IoU of the 60 %-mass region"}.get(c, f"{c} AUC")
        out[c] = BarsFigure(f"{what} over {ranking.images} images ({ranking.baseline} baseline)", labels,
                            np.array([i.mean for i in s]), f"mean {what}, 95 % interval", "{:.3f}", highlight=random,
                            markers={"95 % low": np.array([i.low for i in s]),
                                     "95 % high": np.array([i.high for i in s])})
    return out


def summary_lines(ranking: Ranking) -> list[str]:
    """The ranking as text, one line per method: the random row says it is the baseline, a method whose interval
    of negative - positive AUC reaches random's says it is no better."""
    lines = []
    for rank, m in enumerate(ranking.methods, start=1):
        parts = [f"{c} {s.mean:.3f} [{s.low:.3f}, {s.high:.3f}]" for c, s in ranking.scores[m].items()]
        verdict = " · the baseline to beat" if m == ranking.random else \
            " · NO BETTER THAN RANDOM" if ranking.no_better_than_random(m) else ""
        lines.append(f"{rank}. {m:<24} " + " · ".join(parts) + verdict)
    return lines
