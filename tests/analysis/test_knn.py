"""k-NN search: FAISS's exact index gives the brute-force top-k; without faiss (its import made to fail) the brute
force runs and says so; streamed batches give what one array gives; above the size an approximate index runs and
says so."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from vit_explorer.analysis import knn as K
from vit_explorer.analysis import probes as P

pytest.importorskip("faiss")


@pytest.fixture
def no_faiss(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "faiss", None)  # `import faiss` raises ImportError


def data(n: int = 3000, d: int = 48, q: int = 200, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)).astype(np.float32), rng.normal(size=(q, d)).astype(np.float32)


def reference_top_k(database: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Every cosine similarity, fully sorted (float64)."""
    db, qs = database.astype(np.float64), queries.astype(np.float64)
    sims = (qs / np.linalg.norm(qs, axis=1, keepdims=True)) @ (db / np.linalg.norm(db, axis=1, keepdims=True)).T
    order = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(sims, order, axis=1), order


def test_faiss_exact_search_equals_the_brute_force_top_k() -> None:
    database, queries = data()
    found = K.search(database, queries, 20)
    assert found.method == K.FLAT and not found.approximate
    sims, rows = reference_top_k(database, queries, 20)
    np.testing.assert_array_equal(found.index, rows)
    np.testing.assert_allclose(found.similarity, sims, atol=1e-6, rtol=0)


def test_without_faiss_the_brute_force_gives_the_same_top_k(no_faiss) -> None:
    assert K.faiss_module() is None
    database, queries = data()
    found = K.search(database, queries, 20, chunk=37)
    assert found.method == K.BRUTE and K.method_for(len(database)) == K.BRUTE
    sims, rows = reference_top_k(database, queries, 20)
    np.testing.assert_array_equal(found.index, rows)
    np.testing.assert_allclose(found.similarity, sims, atol=1e-12, rtol=0)


@pytest.mark.parametrize("with_faiss", [True, False])
def test_streamed_batches_give_the_one_array_answer(with_faiss: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not with_faiss:
        monkeypatch.setitem(sys.modules, "faiss", None)
    database, queries = data(n=1000)
    whole = K.search(database, queries, 7)
    parts = K.search_stream((database[s:s + 130] for s in range(0, 1000, 130)), queries, 7, total=1000)
    np.testing.assert_array_equal(parts.index, whole.index)
    np.testing.assert_allclose(parts.similarity, whole.similarity, atol=1e-6, rtol=0)


def test_the_knn_probe_is_the_same_with_and_without_faiss(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(1)
    centres = rng.normal(size=(5, 24)) * 1.2
    labels = rng.integers(0, 5, 600)
    x = centres[labels] + rng.normal(size=(600, 24))
    with_faiss = P.knn_predict(x[:450], labels[:450], x[450:])
    monkeypatch.setitem(sys.modules, "faiss", None)
    np.testing.assert_array_equal(P.knn_predict(x[:450], labels[:450], x[450:]), with_faiss)


def test_above_the_size_an_approximate_index_runs_and_says_so() -> None:
    rng = np.random.default_rng(2)
    centres = rng.normal(size=(40, 32))
    database = (centres[rng.integers(0, 40, 5000)] + 0.1 * rng.normal(size=(5000, 32))).astype(np.float32)
    queries = database[:100]
    found = K.search(database, queries, 10, approximate_above=1000)
    assert found.approximate and "approximate" in found.method and "IVF" in found.method
    assert found.method == K.method_for(5000, approximate_above=1000)
    _, rows = reference_top_k(database, queries, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found.index, rows, strict=True)])
    assert recall > 0.9
    assert (found.index[:, 0] == np.arange(100)).all()  # each point finds itself
