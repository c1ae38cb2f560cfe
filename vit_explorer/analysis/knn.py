"""Cosine k-nearest neighbours for the probes' k-NN, the nearest images and the nearest patches.

With FAISS (`faiss-cpu`, the optional extra `pip install -e '.[faiss]'`) the L2-normalised features go into an exact
inner-product index (`IndexFlatIP`); above APPROXIMATE_ABOVE database rows into an approximate one (`IndexIVFFlat`:
NLIST_PER_ROOT x sqrt(n) cells, NPROBE of them searched), and `Neighbours.method` says which ran. Without FAISS the
same exact search runs by brute force in chunks of queries (memory chunk x n).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from types import ModuleType

import numpy as np

APPROXIMATE_ABOVE = 1_000_000  # database rows above which FAISS searches an IVF index, not the exact flat one
NLIST_PER_ROOT = 4  # IVF cells per square root of the database rows
TRAIN_PER_CELL = 64  # training rows per IVF cell (seeded sample)
NPROBE = 32  # IVF cells searched per query
BRUTE = "brute force (exact cosine)"
FLAT = "faiss IndexFlatIP (exact cosine)"


@dataclass(frozen=True)
class Neighbours:
    similarity: np.ndarray  # (q, k) cosine similarity, most similar first
    index: np.ndarray  # (q, k) int64 rows of the database
    method: str  # which search ran: BRUTE, FLAT or the IVF index with its settings (approximate)

    @property
    def approximate(self) -> bool:
        return self.method not in (BRUTE, FLAT)


def faiss_module() -> ModuleType | None:
    """The faiss module, or None where it is not installed."""
    try:
        return importlib.import_module("faiss")
    except ImportError:
        return None


def normalize(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (a zero row stays zero)."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def _top(sims: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k largest of each row of sims (c, m) with their rows (c, m): most similar first, ties the lower row."""
    top = np.argpartition(-sims, k - 1, axis=1)[:, :k]  # (c, k) the k most similar, any order
    top_sims, top_rows = np.take_along_axis(sims, top, axis=1), np.take_along_axis(rows, top, axis=1)
    order = np.lexsort((top_rows, -top_sims), axis=1)
    return np.take_along_axis(top_sims, order, axis=1), np.take_along_axis(top_rows, order, axis=1)


def search_stream(batches: Iterable[np.ndarray], queries: np.ndarray, k: int, *, total: int,
                  sample: np.ndarray | None = None, approximate_above: int = APPROXIMATE_ABOVE, chunk: int = 1024,
                  seed: int = 0) -> Neighbours:
    """`search` over a database given as consecutive batches of rows (b, d) (`total` rows in all), never held whole
    outside the FAISS index. Above `approximate_above` rows FAISS trains its IVF cells on `sample` (rows of the
    database, needed then)."""
    queries = np.asarray(queries)
    if queries.ndim != 2 or k < 1 or total < 1:
        raise ValueError(f"queries must be (examples, dims), k >= 1 and the database not empty, got "
                         f"{queries.shape}, k={k}, {total} rows")
    k = min(k, total)
    d = queries.shape[1]
    faiss = faiss_module()
    qs = normalize(np.asarray(queries, dtype=np.float32 if faiss else np.float64))
    if faiss is None:
        best_sims, best_rows = np.full((len(qs), k), -np.inf), np.full((len(qs), k), -1, dtype=np.int64)
        offset = 0
        for batch in batches:
            db = normalize(_rows(batch, d, np.float64))
            rows = np.arange(offset, offset + len(db))
            for start in range(0, len(qs), chunk):
                at = slice(start, start + chunk)
                sims = np.hstack([best_sims[at], qs[at] @ db.T])  # (c, k + b) cosine similarities
                both = np.hstack([best_rows[at], np.broadcast_to(rows, (sims.shape[0], len(rows)))])
                best_sims[at], best_rows[at] = _top(sims, both, k)
            offset += len(db)
        return Neighbours(best_sims, best_rows, BRUTE)
    method = method_for(total, approximate_above)
    if method == FLAT:
        index = faiss.IndexFlatIP(d)
    else:
        if sample is None:
            raise ValueError(f"an approximate index over {total:,} rows needs a sample of them to train on")
        nlist = _cells(total)
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, nlist, faiss.METRIC_INNER_PRODUCT)
        train = np.asarray(sample)
        train = train[np.sort(np.random.default_rng(seed).permutation(len(train))[:nlist * TRAIN_PER_CELL])]
        index.train(np.ascontiguousarray(normalize(_rows(train, d, np.float32))))
        index.nprobe = min(NPROBE, nlist)
    for batch in batches:
        index.add(np.ascontiguousarray(normalize(_rows(batch, d, np.float32))))
    sims, rows = index.search(np.ascontiguousarray(qs), k)  # (q, k) each
    return Neighbours(sims.astype(np.float64), rows.astype(np.int64), method)


def _cells(total: int) -> int:
    return max(1, int(NLIST_PER_ROOT * np.sqrt(total)))


def method_for(total: int, approximate_above: int = APPROXIMATE_ABOVE) -> str:
    """Which search `search` runs over a database of `total` rows here (what the outputs report)."""
    if faiss_module() is None:
        return BRUTE
    if total <= approximate_above:
        return FLAT
    return (f"faiss IndexIVFFlat (approximate cosine: {_cells(total)} cells, {min(NPROBE, _cells(total))} searched; "
            f"exact up to {approximate_above:,} rows)")


def _rows(batch: np.ndarray, d: int, dtype: type) -> np.ndarray:
    batch = np.asarray(batch, dtype=dtype)
    if batch.ndim != 2 or batch.shape[1] != d:
        raise ValueError(f"features must be (examples, dims) with the same dims, got {batch.shape} and (..., {d})")
    return batch


def search(database: np.ndarray, queries: np.ndarray, k: int, *, approximate_above: int = APPROXIMATE_ABOVE,
           chunk: int = 1024, seed: int = 0) -> Neighbours:
    """The k rows of `database` (n, d) most cosine-similar to each of `queries` (q, d), most similar first; k is
    capped at n."""
    database = np.asarray(database)
    return search_stream([database], queries, k, total=len(database), sample=database,
                         approximate_above=approximate_above, chunk=chunk, seed=seed)
