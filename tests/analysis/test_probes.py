"""The k-NN and linear probes against scikit-learn on the same features and split."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.neighbors import NearestNeighbors
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from vit_explorer.analysis import probes as P


@pytest.fixture
def blobs() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(5, 24)) * 1.2
    labels = rng.integers(0, 5, 400)
    x = centres[labels] + rng.normal(size=(400, 24))
    return x[:300], labels[:300], x[300:], labels[300:]


def reference_knn(train: np.ndarray, labels: np.ndarray, test: np.ndarray, k: int = 20, t: float = 0.07
                  ) -> np.ndarray:
    """sklearn's exact cosine neighbours, weighted as DINO's eval_knn weights them."""
    nn = NearestNeighbors(n_neighbors=k, metric="cosine", algorithm="brute").fit(train)
    distances, indices = nn.kneighbors(test)
    weights = np.exp((1 - distances) / t)  # cosine similarity = 1 - cosine distance
    votes = np.zeros((test.shape[0], labels.max() + 1))
    for row in range(test.shape[0]):
        for w, i in zip(weights[row], indices[row], strict=True):
            votes[row, labels[i]] += w
    return votes.argmax(1)


def test_knn_equals_sklearn_neighbours(blobs) -> None:
    train, y_train, test, y_test = blobs
    ours = P.knn_predict(train, y_train, test)
    np.testing.assert_array_equal(ours, reference_knn(train, y_train, test))
    result = P.knn_probe(train, y_train, test, y_test)
    assert result.accuracy == pytest.approx((reference_knn(train, y_train, test) == y_test).mean())
    assert 0.5 < result.accuracy <= 1


def test_knn_weighting_matters() -> None:
    """One very close neighbour of class 0 outweighs two farther ones of class 1, as exp(sim / 0.07) weighs
    them; with a flat weighting (a huge temperature) the majority, class 1, wins."""
    train = np.array([[1.0, 0.0], [0.6, 0.8], [0.6, -0.8]])
    labels = np.array([0, 1, 1])
    assert P.knn_predict(train, labels, np.array([[1.0, 0.05]]), k=3).tolist() == [0]
    assert P.knn_predict(train, labels, np.array([[1.0, 0.05]]), k=3, temperature=100.0).tolist() == [1]


def test_knn_chunks_and_small_training_set(blobs) -> None:
    train, y_train, test, _ = blobs
    np.testing.assert_array_equal(P.knn_predict(train, y_train, test, chunk=7), P.knn_predict(train, y_train, test))
    assert P.knn_predict(train[:5], y_train[:5], test).shape == (100,)  # k capped at 5


def test_linear_equals_sklearn(blobs) -> None:
    train, y_train, test, y_test = blobs
    ref = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000, random_state=0)).fit(train, y_train)
    np.testing.assert_array_equal(P.linear_predict(train, y_train, test), ref.predict(test))
    assert P.linear_probe(train, y_train, test, y_test).accuracy == pytest.approx(ref.score(test, y_test))


def test_confusion_counts() -> None:
    m = P.confusion(np.array([0, 0, 1, 2]), np.array([0, 1, 1, 1]), 3)
    assert m.tolist() == [[1, 1, 0], [0, 1, 0], [0, 1, 0]]
    assert m.sum() == 4


def test_bad_features_are_named() -> None:
    with pytest.raises(ValueError, match="NaN"):
        P.knn_predict(np.array([[np.nan, 1.0]]), np.array([0]), np.array([[1.0, 1.0]]))
    with pytest.raises(ValueError, match="same dims"):
        P.linear_predict(np.ones((4, 3)), np.array([0, 1, 0, 1]), np.ones((2, 2)))
