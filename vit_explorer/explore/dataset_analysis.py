"""The dataset analyses over extracted features (explore.dataset.Features), as arrays the app and the CLI
both draw: probes per token state, CKA between states (of one model or two), the images that drive a CKA
cell, 2-D projections, the mean attention distance over the dataset and token-norm statistics."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..analysis import cka as C
from ..analysis import knn as K
from ..analysis import probes as P
from ..checkpoints import LoadedModel
from ..jobs import Job
from ..text import shown
from .dataset import DatasetSource, Features, features_for
from .figures import Figure, LinesFigure, MapsFigure, ScatterFigure, state_ticks
from .forward import STATE_AXIS

EXACT_CKA_IMAGES = 3000  # above this many images CKA runs as minibatch CKA (the Gram matrices would be N x N)
MINIBATCH = 1000  # images per minibatch then
PROJECTIONS = ("pca", "tsne", "umap")
MAX_TSNE = 20_000  # t-SNE is quadratic in time beyond a few tens of thousands of points
MIN_NEIGHBOURS = 5  # points t-SNE and UMAP need (UMAP's spectral start fails in scipy on 3)
MIN_CKA_IMAGES = 4  # below, CKA says nothing: two images give 1.0 for any features, and the debiased needs n > 3
SPREAD = 1e-6  # features whose spread is this small relative to their size are the same for every image


class Rows(Protocol):
    """Features (N, D) read by rows: an array, or a feature store's column."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    def __getitem__(self, rows: Any) -> np.ndarray: ...


@dataclass(frozen=True)
class ProbeCurves:
    tokens: str  # 'cls' or 'mean'
    states: np.ndarray  # (S,) state indices
    knn: np.ndarray  # (S,) validation accuracy of the weighted k-NN probe per state
    linear: np.ndarray  # (S,) of the linear probe
    best_state: int  # the state with the best linear accuracy (ties: the earliest)
    val: np.ndarray  # (V,) indices (into the features) of the validation images
    predictions: np.ndarray  # (V,) the linear probe's predictions at the best state
    confusion: np.ndarray  # (C, C) true x predicted counts at the best state
    label_names: list[str]
    linear_model: str = P.LOGISTIC  # which linear probe was fitted (P.RIDGE above P.MAX_LOGISTIC_WORK)
    knn_method: str = ""  # which neighbour search the k-NN probe ran (analysis.knn.method_for)

    def _repr_png_(self) -> bytes:
        """Inline in Jupyter: accuracy over the token states and the confusion at the best one."""
        from .notebook import png

        return png(probe_figure([self], len(self.states) - 1), confusion_figure(self))


def _split(features: Features) -> tuple[np.ndarray, np.ndarray]:
    src = features.source
    if not src.labelled:
        raise ValueError(f"{src.name}: the images have no labels; probes need one sub-folder per class")
    train, val = np.flatnonzero(src.split == 0), np.flatnonzero(src.split == 1)
    if not len(train) or not len(val):
        raise ValueError(f"{src.name}: {len(train)} training and {len(val)} validation images; a probe needs both "
                         "(use more images or another --val-fraction)")
    return train, val


def probe_curves(features: Features, tokens: str = "cls", *, seed: int = 0, knn: bool = True, linear: bool = True
                 ) -> ProbeCurves:
    """k-NN and linear probe accuracy at every state, on the features' own split (NaN for a probe not run)."""
    train, val = _split(features)
    labels = features.source.labels
    names = features.source.label_names
    by_state = features.tokens(tokens)
    states = np.array(sorted(by_state))
    knn_acc, lin_acc, preds = np.full(len(states), np.nan), np.full(len(states), np.nan), []
    for n, state in enumerate(states):
        x = by_state[int(state)]
        if knn:
            knn_acc[n] = P.knn_probe(x[train], labels[train], x[val], labels[val], num_classes=len(names)).accuracy
        if linear:
            result = P.linear_probe(x[train], labels[train], x[val], labels[val], seed=seed)
            lin_acc[n] = result.accuracy
            preds.append(result.predictions)
        else:
            preds.append(P.knn_predict(x[train], labels[train], x[val], num_classes=len(names)))
    score = lin_acc if linear else knn_acc
    best = int(np.nanargmax(score)) if np.isfinite(score).any() else len(states) - 1
    width = by_state[int(states[0])].shape[1]
    model = P.linear_model(len(train), width, int(np.unique(labels[train]).size))
    return ProbeCurves(tokens, states, knn_acc, lin_acc, int(states[best]), val, preds[best],
                       P.confusion(labels[val], preds[best], len(names)), names, model, K.method_for(len(train)))


def _paired(a: Features, b: Features | None) -> None:
    if b is not None and a.source.paths != b.source.paths:
        raise ValueError("the two models' features cover different images (one could not read some); CKA needs "
                         "the same images in both")


def constant(x: np.ndarray) -> bool:
    """Whether features (N, D) are the same for every image (to rounding): a collapsed model, identical images."""
    x = np.asarray(x, dtype=np.float64)
    return bool(np.ptp(x, axis=0).max(initial=0.0) <= SPREAD * max(float(np.abs(x).max(initial=0.0)), 1e-30))


def constant_states(features: Features, tokens: str) -> list[int]:
    """The token states whose features do not vary over the images, leaving out the [CLS] before any block
    (the same learned vector for every image by design)."""
    return [s for s, x in sorted(features.tokens(tokens).items()) if constant(x) and not (tokens == "cls" and s == 0)]


def cka_states(a: Features, b: Features | None = None, tokens: str = "cls", *, kernel: str = "linear",
               threshold: float = 0.5, debiased: bool = False, minibatch: int | None = None,
               tokens_b: str | None = None) -> np.ndarray:
    """CKA of every state of `a` (rows) with every state of `b` (columns; None: `a` itself), on the same images.
    Exact CKA up to EXACT_CKA_IMAGES images; beyond, or with `minibatch` (images per batch), minibatch CKA
    (which estimates the debiased value). RBF bandwidth: `threshold` x the median distance. Fewer than
    MIN_CKA_IMAGES images are refused (ValueError)."""
    _paired(a, b)
    if len(a) < MIN_CKA_IMAGES:
        raise ValueError(f"{shown(a.source.name)}: CKA of {len(a)} image(s) says nothing (with 2 it is 1.0 for any "
                         f"features); it needs at least {MIN_CKA_IMAGES} (use more images or a larger --limit)")
    xs = [v for _, v in sorted(a.tokens(tokens).items())]
    ys = None if b is None else [v for _, v in sorted(b.tokens(tokens_b or tokens).items())]
    return cka_arrays(xs, ys, kernel=kernel, threshold=threshold, debiased=debiased, minibatch=minibatch)


def cka_arrays(xs: Sequence[Rows], ys: Sequence[Rows] | None = None, *, kernel: str = "linear",
               threshold: float = 0.5, debiased: bool = False, minibatch: int | None = None) -> np.ndarray:
    """`cka_states` over features (N, D) per state given as arrays or anything that gives rows by index (a feature
    store's columns): minibatch CKA reads one batch of rows of each at a time."""
    n = xs[0].shape[0]
    if minibatch is None and n <= EXACT_CKA_IMAGES:  # every row at once (x[:]: an array's view, a column read)
        return C.cka_matrix([x[:] for x in xs], None if ys is None else [y[:] for y in ys], kernel,
                            threshold=threshold, debiased=debiased)
    size = minibatch or MINIBATCH
    if size < 4:
        raise ValueError(f"--minibatch must be at least 4 images (the unbiased HSIC needs more than 3), got {size}")
    acc = C.MinibatchCKA(len(xs), None if ys is None else len(ys), kernel, threshold)
    order = np.random.default_rng(0).permutation(n)  # batches mix the classes, as random minibatches do
    for start in range(0, n, size):
        rows = order[start:start + size]
        if len(rows) < 4:  # a last batch too small for the unbiased estimator is left out
            break
        rows = np.sort(rows)  # read in order (a memory map reads forward); a Gram matrix's order does not matter
        acc.update([x[rows] for x in xs], None if ys is None else [y[rows] for y in ys])
    return acc.result()


def cka_drivers(a: Features, i: int, j: int, b: Features | None = None, tokens: str = "cls", *,
                kernel: str = "linear", threshold: float = 0.5, k: int = 12, tokens_b: str | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """The k images that contribute most to the CKA of state i of `a` and state j of `b` (or of `a`): their
    indices into the features and their shares of the cell's value (largest first)."""
    _paired(a, b)
    x = a.tokens(tokens)[i]
    y = (b or a).tokens(tokens_b or tokens)[j]
    shares = C.contributions(x, y, kernel, threshold=threshold)
    top = np.argsort(-shares, kind="stable")[:k]
    return top, shares[top]


def project(x: np.ndarray, method: str = "pca", *, seed: int = 0) -> np.ndarray:
    """(N, D) features -> (N, 2) points: PCA (exact, SVD of the centred features), t-SNE (scikit-learn) or UMAP
    (umap-learn), seeded."""
    x = np.asarray(x, dtype=np.float64)
    if method not in PROJECTIONS:
        raise ValueError(f"projection must be one of {PROJECTIONS}, got {method!r}")
    if x.ndim != 2 or x.shape[0] < 3:
        raise ValueError(f"a projection needs at least 3 points (N, D), got shape {x.shape}")
    if method != "pca" and not np.isfinite(x).all():
        raise ValueError(f"the features hold NaN or infinite values: no {method.upper()} of them; use --projection "
                         "pca (or check the model's weights)")
    if method != "pca" and x.shape[0] < MIN_NEIGHBOURS:
        raise ValueError(f"{method.upper()} needs at least {MIN_NEIGHBOURS} points, got {x.shape[0]}; use "
                         "--projection pca or more images")
    if method != "pca" and constant(x):  # scikit-learn's t-SNE dies (SIGSEGV) on them
        raise ValueError(f"the {x.shape[0]} points are all the same (the features do not vary between the images: "
                         f"identical images or a collapsed model): a {method.upper()} of them means nothing; use "
                         "--projection pca")
    if method == "pca":
        centred = x - x.mean(axis=0)
        u, s, _ = np.linalg.svd(centred, full_matrices=False)
        out = u[:, :2] * s[:2]
        if out.shape[1] < 2:
            out = np.pad(out, ((0, 0), (0, 2 - out.shape[1])))
        signs = np.sign(out[np.abs(out).argmax(axis=0), range(2)])  # a deterministic sign per axis
        return out * np.where(signs == 0, 1, signs)
    if method == "tsne":
        if x.shape[0] > MAX_TSNE:
            raise ValueError(f"t-SNE of {x.shape[0]:,} points would take very long; use --limit {MAX_TSNE} or "
                             "UMAP or PCA")
        from sklearn.manifold import TSNE

        flat = np.linalg.svd(x - x.mean(axis=0), compute_uv=False)[1:2].sum() <= SPREAD * np.abs(x).max()
        # a PCA start divides by the spread of its second axis: from a random start where the points lie on a line
        return TSNE(2, perplexity=min(30.0, (x.shape[0] - 1) / 3), init="random" if flat else "pca",
                    random_state=seed).fit_transform(x)
    try:
        import umap
    except ImportError:
        raise ValueError("UMAP needs the umap-learn package (pip install umap-learn); or use PCA or t-SNE") from None
    reducer = umap.UMAP(n_components=2, n_neighbors=min(15, x.shape[0] - 1), random_state=seed, n_jobs=1)
    return np.asarray(reducer.fit_transform(x), dtype=np.float64)


@dataclass(frozen=True)
class DistanceSummary:
    mean: np.ndarray  # (blocks, heads) mean attention distance in pixels over the images
    std: np.ndarray  # (blocks, heads) its spread (standard deviation over the images)
    images: int
    nearest: np.ndarray  # (blocks, heads) index of the image closest to the mean (named in the figure)


def distance_summary(features: Features) -> DistanceSummary:
    """ViT paper Fig. 7 over the dataset: per block and head, the mean over the images and the spread."""
    if features.distance is None:
        raise ValueError("these features were extracted without attention distances (extract(distance=True))")
    d = features.distance  # (N, blocks, heads)
    mean = d.mean(axis=0)
    return DistanceSummary(mean, d.std(axis=0), int(d.shape[0]), np.abs(d - mean).argmin(axis=0))


@dataclass(frozen=True)
class NormSummary:
    patch_mean: np.ndarray  # (S,) mean patch-token norm per state over the images
    patch_max: np.ndarray  # (S,) mean of each image's largest patch norm per state
    outlier_share: np.ndarray  # (S,) share of images whose largest patch norm is over `factor` x their mean
    prefix: dict[str, np.ndarray]  # prefix token name -> (S,) its mean norm
    factor: float


def norm_summary(features: Features, factor: float = 2.0) -> NormSummary:
    """Token-norm statistics per state: the high-norm outlier tokens registers remove (Darcet et al. 2024)."""
    outliers = (features.norm_max > factor * features.norm_mean).mean(axis=0)
    prefix = {name: features.prefix_norms[:, :, k].mean(axis=0) for k, name in enumerate(features.prefix_names)}
    return NormSummary(features.norm_mean.mean(axis=0), features.norm_max.mean(axis=0), outliers, prefix, factor)


# ---------------------------------------------------------------------------------------------- figures
def probe_figure(curves: list[ProbeCurves], depth: int, title: str = "Probe accuracy per token state") -> LinesFigure:
    """Validation accuracy of each probe over the states (x = -1 the embedded input, then after each block)."""
    series: dict[str, np.ndarray] = {}
    for c in curves:
        for probe, values in (("k-NN", c.knn), ("linear", c.linear)):
            if np.isfinite(values).any():
                series[f"{probe}, {'[CLS]' if c.tokens == 'cls' else 'mean of patches'}"] = values
    x = curves[0].states.astype(np.float64) - 1
    return LinesFigure(title, x, series, STATE_AXIS, "validation accuracy", state_ticks(depth + 1))


def confusion_figure(curves: ProbeCurves) -> MapsFigure:
    state = "input" if curves.best_state == 0 else f"after block {curves.best_state - 1}"
    return MapsFigure("", curves.confusion[None].astype(np.float64),
                      (f"Confusion of the linear probe ({curves.tokens}, {state}): true class (rows) x predicted",),
                      None, curves.confusion.shape, colorbar_label="images", cmap="viridis")


def cka_figure(matrix: np.ndarray, title: str) -> MapsFigure:
    """The CKA heatmap: rows the states of the first model, columns those of the second (0 = the input)."""
    return MapsFigure("", matrix[None], (title,), None, matrix.shape, colorbar_label="CKA", cmap="viridis",
                      levels=(0.0, 1.0))


def projection_figure(points: np.ndarray, groups: list[str] | None, title: str) -> ScatterFigure:
    return ScatterFigure(title, points[:, 0], points[:, 1], None if groups is None else tuple(groups),
                         "component 1", "component 2")


def distance_spread_figure(summary: DistanceSummary) -> ScatterFigure:
    blocks, heads = summary.std.shape
    return ScatterFigure(f"Spread of the mean attention distance over {summary.images:,} images",
                         np.repeat(np.arange(blocks), heads).astype(np.float64), summary.std.reshape(-1),
                         tuple(f"head {h}" for _ in range(blocks) for h in range(heads)) if heads <= 20 else None,
                         "layer (network depth)", "standard deviation over the images (pixels)", jitter=0.6,
                         y_from_zero=True)


def norms_figure(summary: NormSummary, depth: int) -> LinesFigure:
    series = {"patch tokens (mean)": summary.patch_mean, "largest patch token (mean over images)": summary.patch_max}
    names = {"cls": "[CLS]", "dist": "distillation"}
    series.update({f"{names.get(name, name)} token": values for name, values in summary.prefix.items()})
    return LinesFigure("Token norms over the dataset", np.arange(depth + 1, dtype=np.float64) - 1, series,
                       STATE_AXIS, "L2 norm", state_ticks(depth + 1))


# ---------------------------------------------------------------------------------------------- all of it, for the app
@dataclass
class DatasetAnalysis:
    """Everything the Dataset view draws for one model (and the compared one) over one dataset."""

    features: Features
    tokens: str  # what the CKA and the projector read: 'cls' where the model has one, else 'mean'
    probes: list[ProbeCurves]  # per token kind ([] when the images have no labels)
    cka: np.ndarray  # (S, S) state x state within the model
    compared: Features | None  # the compared model's features of the same images
    cka_compared: np.ndarray | None  # (S, S_b) this model's states x the compared model's
    tokens_compared: str  # what CKA against the compared model reads in both: [CLS] where both have one
    distance: DistanceSummary | None
    norms: NormSummary

    @property
    def best(self) -> ProbeCurves | None:
        return max(self.probes, key=lambda c: float(np.nanmax(c.linear))) if self.probes else None

    def _repr_png_(self) -> bytes:
        """Inline in Jupyter: the probes over the states, CKA between the states, and the last state's features
        projected (PCA), coloured by label."""
        from .notebook import png

        figures: list[Figure] = [probe_figure(self.probes, self.features.depth)] if self.probes else []
        figures.append(cka_figure(self.cka, f"CKA between the token states ({self.tokens})"))
        last = self.features.tokens(self.tokens)[self.features.depth]
        if len(last) >= 3:
            source = self.features.source
            groups = [source.label_names[i] for i in source.labels] if source.labelled else None
            figures.append(projection_figure(project(last), groups, "The last token state, projected (PCA)"))
        return png(*figures)


@dataclass(frozen=True)
class Projection:
    """The projector's points of one analysis: where each is drawn, and the image and patch it stands for."""

    points: np.ndarray  # (M, 2)
    rows: np.ndarray  # (M,) image index of each point
    patch: np.ndarray  # (M,) patch index of each point (-1: a whole image)


@dataclass(frozen=True)
class DatasetState:
    """What the Dataset view shows: one analysis and a projection of its own features. A second analysis replaces
    it whole, so the projector never colours one dataset's points by another's labels."""

    analysis: DatasetAnalysis
    projection: Projection | None = None  # None until the projection of this analysis arrives


def analyse(loaded: LoadedModel, source: DatasetSource, *, compared: LoadedModel | None = None, batch_size: int = 64,
            seed: int = 0, cache: Path | None = None, job: Job | None = None) -> DatasetAnalysis:
    """Features (cached), probes per state, CKA within the model and against `compared`, attention distance and
    token norms. Progress counts the images of both models; the job is checked between batches and probes."""
    job = job or Job()
    half = 0.5 if compared is not None else 1.0  # each model's share: its images
    features = features_for(loaded, source, batch_size=batch_size, distance=True, seed=seed, cache=cache,
                            job=job.part(0.0, half))
    tokens = "cls" if features.cls else "mean"
    probes = []
    if features.source.labelled and (features.source.split == 1).any() and (features.source.split == 0).any():
        for kind in (["cls"] if features.cls else []) + ["mean"]:
            job.check()
            probes.append(probe_curves(features, kind, seed=seed))
    other = cka_other = None
    tokens_b = tokens
    if compared is not None:
        other = features_for(compared, source, batch_size=batch_size, seed=seed, cache=cache,
                             job=job.part(half, 1.0))
        tokens_b = "cls" if other.cls and tokens == "cls" else "mean"  # what both models have
        if other.source.paths == features.source.paths:
            cka_other = cka_states(features, other, tokens_b)
    return DatasetAnalysis(features, tokens, probes, cka_states(features, None, tokens), other, cka_other, tokens_b,
                           distance_summary(features) if features.distance is not None else None,
                           norm_summary(features))
