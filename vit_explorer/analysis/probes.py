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

from . import knn

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


def knn_predict(train: np.ndarray, train_labels: np.ndarray, test: np.ndarray, *, k: int = KNN_K,
                temperature: float = KNN_TEMPERATURE, num_classes: int | None = None, chunk: int = 1024
                ) -> np.ndarray:
    """DINO's weighted k-NN: the predicted class (n_test,) of each test feature; k is capped at the number of
    training examples. The neighbours come from `analysis.knn.search` (FAISS where installed, else brute force in
    chunks of test features, memory chunk x n_train)."""
    train, labels, test = _check(train, train_labels, test)
    if k < 1 or temperature <= 0:
        raise ValueError(f"k must be >= 1 and the temperature > 0, got k={k}, temperature={temperature}")
    classes = int(labels.max()) + 1 if num_classes is None else num_classes
    return knn_vote(knn.search(train, test, k, chunk=chunk), labels, classes, temperature)


def knn_vote(found: knn.Neighbours, labels: np.ndarray, classes: int, temperature: float = KNN_TEMPERATURE
             ) -> np.ndarray:
    """(q,) the class with the most weight exp(similarity / T) among each query's neighbours (ties: the lowest)."""
    weights = np.where(found.index >= 0, np.exp(found.similarity / temperature), 0.0)  # (q, k); IVF may miss
    votes = np.zeros((found.index.shape[0], classes))
    np.add.at(votes, (np.arange(found.index.shape[0])[:, None], labels[np.maximum(found.index, 0)]), weights)
    return votes.argmax(axis=1)


def linear_predict(train: np.ndarray, train_labels: np.ndarray, test: np.ndarray, *, seed: int = 0,
                   c: float = 1.0, model: str | None = None) -> np.ndarray:
    """A linear probe: features standardised on the training side, then multinomial logistic regression
    (scikit-learn, lbfgs, L2 strength 1/c), or above MAX_LOGISTIC_WORK a ridge classifier (`linear_model`; `model`
    picks LOGISTIC or RIDGE instead); the predicted class (n_test,) of each test feature."""
    from sklearn.linear_model import LogisticRegression, RidgeClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    train, labels, test = _check(train, train_labels, test)
    if np.unique(labels).size < 2:  # scikit-learn refuses one class; every prediction is that class
        return np.full(test.shape[0], labels[0], dtype=np.int64)
    if (model or linear_model(train.shape[0], train.shape[1], int(np.unique(labels).size))) == RIDGE:
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


class RidgeStream:
    """The RIDGE linear probe (StandardScaler + RidgeClassifier, alpha=1, as `linear_predict` fits it above
    MAX_LOGISTIC_WORK) from training batches streamed once: it keeps the sums its closed form needs (the feature
    sums, the (d, d) cross products and the per-class sums, in float64 about a shift for precision), so memory is
    d x d whatever the number of images."""

    def __init__(self, width: int, classes: int, alpha: float = 1.0) -> None:
        self.alpha, self.classes = alpha, classes
        self.n = 0
        self.shift: np.ndarray | None = None  # (d,) the first batch's mean, subtracted before summing
        self.total = np.zeros(width)  # (d,) sum of shifted x
        self.cross = np.zeros((width, width))  # (d, d) sum of shifted x x^T
        self.by_class = np.zeros((classes, width))  # (C, d) sum of shifted x per class
        self.counts = np.zeros(classes, dtype=np.int64)

    def update(self, x: np.ndarray, labels: np.ndarray) -> None:
        """One batch of training features (b, d) and their classes (b,)."""
        x = np.asarray(x, dtype=np.float64)
        labels = np.asarray(labels, dtype=np.int64)
        if x.ndim != 2 or x.shape[1] != self.total.shape[0] or labels.shape != (x.shape[0],) or \
                (labels < 0).any() or (labels >= self.classes).any() or not np.isfinite(x).all():
            raise ValueError(f"a batch must be finite features (b, {self.total.shape[0]}) with b class indices below "
                             f"{self.classes}, got {x.shape} and {labels.shape}")
        if self.shift is None:
            self.shift = x.mean(axis=0) if len(x) else np.zeros(x.shape[1])
        x = x - self.shift
        self.n += len(x)
        self.total += x.sum(axis=0)
        self.cross += x.T @ x
        np.add.at(self.by_class, labels, x)
        self.counts += np.bincount(labels, minlength=self.classes)

    def fit(self) -> RidgeFit:
        """The fitted probe: scaler statistics, coefficients per class present and intercepts."""
        if self.n == 0 or self.shift is None:
            raise ValueError("no training examples: a probe needs labelled images on its training side")
        n = self.n
        mean_shifted = self.total / n
        mean = self.shift + mean_shifted
        centred = self.cross - n * np.outer(mean_shifted, mean_shifted)  # (d, d) Xc^T Xc
        var = np.clip(np.diag(centred) / n, 0, None)
        eps = np.finfo(np.float64).eps
        constant = var <= n * eps * var + (n * mean * eps) ** 2  # scikit-learn's test of a constant feature
        scale = np.where(constant, 1.0, np.sqrt(var))
        present = np.flatnonzero(self.counts)
        gram = centred / np.outer(scale, scale)  # Z^T Z of the standardised features
        # Z^T y_c with y_c = +-1 one-hot: 2 (sum_c x - n_c mean) / scale (Z's columns sum to 0)
        targets = 2 * (self.by_class[present] - np.outer(self.counts[present], mean_shifted)).T / scale[:, None]
        coef = np.linalg.solve(gram + self.alpha * np.eye(len(gram)), targets)  # (d, C')
        return RidgeFit(mean, scale, coef, 2 * self.counts[present] / n - 1, present)


@dataclass(frozen=True)
class RidgeFit:
    mean: np.ndarray  # (d,) the scaler's mean
    scale: np.ndarray  # (d,) its scale (1 for a constant feature)
    coef: np.ndarray  # (d, C') one column per class present in training
    intercept: np.ndarray  # (C',)
    classes: np.ndarray  # (C',) the class index of each column

    def decision(self, x: np.ndarray) -> np.ndarray:
        """(b, C') scores of features (b, d)."""
        return ((np.asarray(x, dtype=np.float64) - self.mean) / self.scale) @ self.coef + self.intercept

    def predict(self, x: np.ndarray) -> np.ndarray:
        """(b,) the class with the highest score (one class in training: that class)."""
        return self.classes[self.decision(x).argmax(axis=1)]
