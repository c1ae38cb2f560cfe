"""How readable the class is from a set of features: DINO's weighted k-NN classifier (Caron et al.
2021, `eval_knn.py`) and a linear probe (scikit-learn's logistic regression), each trained on one part
of the images and scored on the other; and the confusion matrix of a probe's predictions.

k-NN: features L2-normalised, cosine similarity to every training feature, the k most similar vote
for their class with weight exp(similarity / T) (k = 20, T = 0.07 as in DINO); the class with the most
weight wins (ties: the lowest class index).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KNN_K = 20
KNN_TEMPERATURE = 0.07
MAX_ITER = 1000  # logistic regression's solver iterations (lbfgs; standardised features converge well before)
# training images x feature width x classes above which logistic regression would sit in lbfgs for minutes (1,500
# classes x 2 images did): a ridge classifier, closed form in one solve, is the linear probe then
MAX_LOGISTIC_WORK = 10**8
LOGISTIC = "StandardScaler + LogisticRegression (lbfgs, C=1)"
RIDGE = "StandardScaler + ridge regression on one-hot classes (closed form, alpha=1)"


def linear_model(train_images: int, width: int, classes: int) -> str:
    """The linear probe fitted to so many training images, features and classes: LOGISTIC, or RIDGE above
    MAX_LOGISTIC_WORK."""
    return LOGISTIC if train_images * width * classes <= MAX_LOGISTIC_WORK else RIDGE


@dataclass(frozen=True)
class ProbeResult:
    accuracy: float  # share of the validation examples predicted right, 0..1
    predictions: np.ndarray  # (n_val,) predicted class per validation example


def _check(train: np.ndarray, train_labels: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                                                    np.ndarray]:
    train, test = np.asarray(train, dtype=np.float64), np.asarray(test, dtype=np.float64)
    labels = np.asarray(train_labels)
    if train.ndim != 2 or test.ndim != 2 or train.shape[1] != test.shape[1]:
        raise ValueError(f"features must be (examples, dims) with the same dims, got {train.shape} and {test.shape}")
    if labels.shape != (train.shape[0],) or not np.issubdtype(labels.dtype, np.integer) or (labels < 0).any():
        raise ValueError(f"training labels must be {train.shape[0]} class indices >= 0, got shape {labels.shape}")
    if train.shape[0] == 0:
        raise ValueError("no training examples: a probe needs labelled images on its training side")
    if not (np.isfinite(train).all() and np.isfinite(test).all()):
        raise ValueError("features hold NaN or infinite values; a probe on them is meaningless")
    return train, labels.astype(np.int64), test


def normalize(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (a zero row stays zero)."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def knn_predict(train: np.ndarray, train_labels: np.ndarray, test: np.ndarray, *, k: int = KNN_K,
                temperature: float = KNN_TEMPERATURE, num_classes: int | None = None, chunk: int = 1024
                ) -> np.ndarray:
    """DINO's weighted k-NN: the predicted class (n_test,) of each test feature; k is capped at the number of
    training examples. Test features go in chunks, so memory is chunk x n_train."""
    train, labels, test = _check(train, train_labels, test)
    if k < 1 or temperature <= 0:
        raise ValueError(f"k must be >= 1 and the temperature > 0, got k={k}, temperature={temperature}")
    classes = int(labels.max()) + 1 if num_classes is None else num_classes
    k = min(k, train.shape[0])
    train_n = normalize(train)
    out = np.empty(test.shape[0], dtype=np.int64)
    for start in range(0, test.shape[0], chunk):
        sims = normalize(test[start:start + chunk]) @ train_n.T  # (c, n_train) cosine similarities
        top = np.argpartition(-sims, k - 1, axis=1)[:, :k]  # (c, k) the k most similar, any order
        weights = np.exp(np.take_along_axis(sims, top, axis=1) / temperature)  # (c, k)
        votes = np.zeros((top.shape[0], classes))
        np.add.at(votes, (np.arange(top.shape[0])[:, None], labels[top]), weights)
        out[start:start + chunk] = votes.argmax(axis=1)
    return out


def linear_predict(train: np.ndarray, train_labels: np.ndarray, test: np.ndarray, *, seed: int = 0,
                   c: float = 1.0) -> np.ndarray:
    """A linear probe: features standardised on the training side, then multinomial logistic regression
    (scikit-learn, lbfgs, L2 strength 1/c), or above MAX_LOGISTIC_WORK a ridge classifier (`linear_model`); the
    predicted class (n_test,) of each test feature."""
    from sklearn.linear_model import LogisticRegression, RidgeClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    train, labels, test = _check(train, train_labels, test)
    if np.unique(labels).size < 2:  # scikit-learn refuses one class; every prediction is that class
        return np.full(test.shape[0], labels[0], dtype=np.int64)
    if linear_model(train.shape[0], train.shape[1], int(np.unique(labels).size)) == RIDGE:
        ridge = make_pipeline(StandardScaler(), RidgeClassifier(alpha=1.0))
        ridge.fit(train, labels)
        return np.asarray(ridge.predict(test), dtype=np.int64)
    probe = make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=MAX_ITER, random_state=seed))
    probe.fit(train, labels)
    return np.asarray(probe.predict(test), dtype=np.int64)


def accuracy(predictions: np.ndarray, labels: np.ndarray) -> float:
    """Share of right predictions, 0..1 (NaN with no example)."""
    labels = np.asarray(labels)
    return float((np.asarray(predictions) == labels).mean()) if labels.size else float("nan")


def confusion(labels: np.ndarray, predictions: np.ndarray, num_classes: int) -> np.ndarray:
    """(true class, predicted class) counts: (num_classes, num_classes) int64."""
    out = np.zeros((num_classes, num_classes), dtype=np.int64)
    np.add.at(out, (np.asarray(labels, dtype=np.int64), np.asarray(predictions, dtype=np.int64)), 1)
    return out


def knn_probe(train: np.ndarray, train_labels: np.ndarray, test: np.ndarray, test_labels: np.ndarray, *,
              k: int = KNN_K, temperature: float = KNN_TEMPERATURE, num_classes: int | None = None) -> ProbeResult:
    predictions = knn_predict(train, train_labels, test, k=k, temperature=temperature, num_classes=num_classes)
    return ProbeResult(accuracy(predictions, test_labels), predictions)


def linear_probe(train: np.ndarray, train_labels: np.ndarray, test: np.ndarray, test_labels: np.ndarray, *,
                 seed: int = 0) -> ProbeResult:
    predictions = linear_predict(train, train_labels, test, seed=seed)
    return ProbeResult(accuracy(predictions, test_labels), predictions)
