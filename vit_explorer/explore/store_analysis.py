"""The dataset analyses over a feature store (explore.store), streamed: memory is a batch of rows (and the (D, D)
sums of the closed-form probe, the FAISS index of the k-NN's training side), whatever the number of images.

- probes per token state: DINO's weighted k-NN (analysis.knn over the training rows, streamed into the index) and
  the ridge linear probe (analysis.probes.RidgeStream: the in-memory RIDGE probe's closed form from sums);
- CKA between states, of one store or two of the same images (dataset_analysis.cka_arrays reading rows on demand);
- the projector's PCA (the mean and covariance summed over batches, then each batch projected);
- the nearest images and the nearest patches of query features.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..analysis import knn as K
from ..analysis import probes as P
from ..jobs import Job
from ..text import shown
from .dataset_analysis import MIN_CKA_IMAGES, ProbeCurves, cka_arrays
from .store import FeatureStore, StoreError

BATCH = 4096  # rows read at a time
KNN_SAMPLE = 65_536  # training rows an approximate (IVF) index is trained on


def _train_val(store: FeatureStore) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    labels, split = store.labels(), store.split()
    names = list(store.manifest["data"]["label_names"])
    if not names or (labels < 0).any():
        raise StoreError(f"{store.path}: the images have no labels; probes need one sub-folder per class")
    train, val = np.flatnonzero(split == 0), np.flatnonzero(split == 1)
    if not len(train) or not len(val):
        raise StoreError(f"{store.path}: {len(train)} training and {len(val)} validation images; a probe needs both")
    return labels, train, val, names


def _with_rows(store: FeatureStore, state: int, kind: str, batch_size: int
               ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(rows (b,), tokens (b, D)) of the store's rows in order, one batch at a time."""
    start = 0
    for batch in store.iter_tokens(state, kind, batch_size):
        yield np.arange(start, start + len(batch)), batch
        start += len(batch)


def _sample(store: FeatureStore, state: int, kind: str, rows: np.ndarray, seed: int) -> np.ndarray | None:
    """What an approximate index over `rows` trains on (a seeded sample of them); None where the search is exact."""
    if K.method_for(len(rows)) in (K.FLAT, K.BRUTE):
        return None
    picked = np.sort(np.random.default_rng(seed).permutation(rows)[:KNN_SAMPLE])
    return store.rows(picked, state, kind)


def knn_store(store: FeatureStore, state: int, kind: str, train: np.ndarray, val: np.ndarray, labels: np.ndarray,
              classes: int, *, batch_size: int = BATCH, seed: int = 0) -> np.ndarray:
    """DINO's weighted k-NN predictions (V,) for the rows `val` from the rows `train` (both sorted), the training
    rows streamed into the index."""
    is_train = np.zeros(len(store), bool)
    is_train[train] = True
    sample = _sample(store, state, kind, train, seed)
    database = (batch[is_train[rows]] for rows, batch in _with_rows(store, state, kind, batch_size))
    found = K.search_stream(database, store.rows(val, state, kind), P.KNN_K, total=len(train), sample=sample,
                            seed=seed)
    return P.knn_vote(found, labels[train], classes)


def ridge_store(store: FeatureStore, state: int, kind: str, train: np.ndarray, val: np.ndarray, labels: np.ndarray,
                classes: int, *, batch_size: int = BATCH) -> np.ndarray:
    """The ridge probe's predictions (V,) for the rows `val`, fitted on the rows `train` in one streamed pass."""
    is_train = np.zeros(len(store), bool)
    is_train[train] = True
    ridge = P.RidgeStream(store.width, classes)
    for rows, batch in _with_rows(store, state, kind, batch_size):
        keep = is_train[rows]
        ridge.update(batch[keep], labels[rows[keep]])
    fit = ridge.fit()
    return np.concatenate([fit.predict(store.rows(val[s:s + batch_size], state, kind))
                           for s in range(0, len(val), batch_size)]) if len(val) else np.zeros(0, np.int64)


def probe_curves(store: FeatureStore, kind: str = "cls", *, knn: bool = True, linear: bool = True,
                 batch_size: int = BATCH, seed: int = 0, job: Job | None = None) -> ProbeCurves:
    """k-NN and ridge probe accuracy at every state the store holds, on its images' split (NaN for a probe not
    run); the job is checked between states."""
    job = job or Job()
    labels, train, val, names = _train_val(store)
    states = np.array(store.states)
    knn_acc, lin_acc, preds = np.full(len(states), np.nan), np.full(len(states), np.nan), []
    for n, state in enumerate(states):
        job.check()
        if knn or not linear:
            knn_pred = knn_store(store, int(state), kind, train, val, labels, len(names), batch_size=batch_size,
                                 seed=seed)
            knn_acc[n] = P.accuracy(knn_pred, labels[val]) if knn else np.nan
        if linear:
            pred = ridge_store(store, int(state), kind, train, val, labels, len(names), batch_size=batch_size)
            lin_acc[n] = P.accuracy(pred, labels[val])
        preds.append(pred if linear else knn_pred)
        job.progress((n + 1) / len(states), "probes")
    score = lin_acc if linear else knn_acc
    best = int(np.nanargmax(score)) if np.isfinite(score).any() else len(states) - 1
    return ProbeCurves(kind, states, knn_acc, lin_acc, int(states[best]), val, preds[best],
                       P.confusion(labels[val], preds[best], len(names)), names, P.RIDGE,
                       K.method_for(len(train)) if knn else "")


def cka(a: FeatureStore, b: FeatureStore | None = None, kind: str = "cls", *, kind_b: str | None = None,
        kernel: str = "linear", threshold: float = 0.5, debiased: bool = False, minibatch: int | None = None
        ) -> np.ndarray:
    """CKA of every state of store `a` (rows) with every state of `b` (columns; None: `a` itself), on the same
    images, rows read on demand (dataset_analysis.cka_arrays: exact up to its limit, minibatch beyond)."""
    ids = [x["id"] for x in a.manifest["images"]]
    if b is not None and [ids[i] for i in a.image_index()] != [b.manifest["images"][i]["id"]
                                                                for i in b.image_index()]:
        raise StoreError(f"{a.path} and {b.path} hold different images (or in another order); CKA needs the same")
    if len(a) < MIN_CKA_IMAGES:
        raise StoreError(f"{shown(str(a.path))}: CKA of {len(a)} image(s) says nothing; it needs at least "
                         f"{MIN_CKA_IMAGES}")
    xs = [a.column(s, kind) for s in a.states]
    ys = None if b is None else [b.column(s, kind_b or kind) for s in b.states]
    return cka_arrays(xs, ys, kernel=kernel, threshold=threshold, debiased=debiased, minibatch=minibatch)


def pca(store: FeatureStore, state: int, kind: str = "cls", *, batch_size: int = BATCH) -> np.ndarray:
    """(N, 2) the rows projected on their first two principal components (dataset_analysis.project's PCA and its
    sign rule), from the mean and covariance summed over batches."""
    d = store.width
    shift = None
    total, cross, n = np.zeros(d), np.zeros((d, d)), 0
    for batch in store.iter_tokens(state, kind, batch_size):
        x = batch.astype(np.float64)
        shift = x.mean(axis=0) if shift is None else shift
        x -= shift
        total += x.sum(axis=0)
        cross += x.T @ x
        n += len(x)
    if n < 3 or shift is None:
        raise StoreError(f"{store.path}: a projection needs at least 3 points, the store holds {n}")
    mean = total / n
    values, vectors = np.linalg.eigh(cross - n * np.outer(mean, mean))  # ascending
    axes = vectors[:, ::-1][:, :2]  # (d, 2) the two largest
    out = np.concatenate([(b.astype(np.float64) - shift - mean) @ axes
                          for b in store.iter_tokens(state, kind, batch_size)])
    signs = np.sign(out[np.abs(out).argmax(axis=0), range(2)])  # the sign rule of dataset_analysis.project
    return out * np.where(signs == 0, 1, signs)


def nearest_images(store: FeatureStore, state: int, kind: str, queries: np.ndarray, k: int = 5, *,
                   batch_size: int = BATCH) -> K.Neighbours:
    """The k stored images most cosine-similar to each query feature (q, D): their rows (see store.paths())."""
    return K.search_stream(store.iter_tokens(state, kind, batch_size), queries, k, total=len(store),
                           sample=_sample(store, state, kind, np.arange(len(store)), 0))


def nearest_patches(store: FeatureStore, state: int, queries: np.ndarray, k: int = 5, *, batch_size: int = BATCH
                    ) -> tuple[K.Neighbours, np.ndarray, np.ndarray]:
    """The k stored patch tokens most cosine-similar to each query (q, D): the neighbours (rows of 'patch') and
    their image rows and patch indices (q, k) each (raster order over the grid)."""
    total = len(store) * store.patches
    found = K.search_stream(store.iter_tokens(state, "patch", batch_size), queries, k, total=total,
                            sample=_sample(store, state, "patch", np.arange(total), 0))
    image, patch = np.divmod(found.index, store.patches)
    return found, image, patch
