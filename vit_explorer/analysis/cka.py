"""Centred kernel alignment (Kornblith et al. 2019, "Similarity of Neural Network Representations
Revisited") between two sets of features of the same images, and minibatch CKA (Nguyen, Raghu &
Kornblith 2021, "Do Wide and Deep Networks Learn the Same Things?") whose memory does not grow with
the number of images.

The formulas are those of the paper's demo notebook: Gram matrices centred on both sides; the RBF
bandwidth a fraction (`threshold`) of the median pairwise distance; the debiased estimator (Song et
al. 2012's unbiased HSIC) zeroes the diagonals and needs more than 3 examples. Minibatch CKA averages
the three HSIC terms over batches and only then divides: an average of per-batch CKA values would be a
different (biased) quantity.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

KERNELS = ("linear", "rbf")


def _features(x: np.ndarray, name: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"{name} must be features (examples, dims), got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError(f"{name} holds NaN or infinite values; CKA of such features is undefined")
    return x


def gram_linear(x: np.ndarray) -> np.ndarray:
    """(n, d) features -> (n, n) Gram matrix of dot products."""
    x = _features(x, "x")
    return x @ x.T


def gram_rbf(x: np.ndarray, threshold: float = 1.0) -> np.ndarray:
    """(n, d) features -> (n, n) RBF Gram matrix whose bandwidth is `threshold` times the median distance
    between examples (the median of the squared distances, as the reference code takes it)."""
    if not threshold > 0:
        raise ValueError(f"threshold (the RBF bandwidth as a fraction of the median distance) must be > 0, got "
                         f"{threshold}")
    dots = gram_linear(x)
    sq_norms = np.diag(dots)
    sq_distances = np.maximum(sq_norms[:, None] + sq_norms[None, :] - 2 * dots, 0.0)  # (n, n)
    median = float(np.median(sq_distances))
    if median <= 0:  # all (or most) examples identical: every distance is 0 relative to any bandwidth
        return np.ones_like(dots)
    return np.exp(-sq_distances / (2 * threshold**2 * median))


def gram(x: np.ndarray, kernel: str = "linear", threshold: float = 1.0) -> np.ndarray:
    if kernel == "linear":
        return gram_linear(x)
    if kernel == "rbf":
        return gram_rbf(x, threshold)
    raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")


def center_gram(k: np.ndarray, debiased: bool = False) -> np.ndarray:
    """A centred copy of a symmetric (n, n) Gram matrix: H K H with H = I - 11^T/n; debiased, the
    U-centring of Song et al. 2012 (zero diagonal) whose inner products are unbiased HSIC estimates."""
    k = np.array(k, dtype=np.float64)  # a copy: the caller's Gram matrix stays as it is
    if k.ndim != 2 or k.shape[0] != k.shape[1]:
        raise ValueError(f"a Gram matrix must be square (n, n), got shape {k.shape}")
    n = k.shape[0]
    if debiased:
        if n <= 3:
            raise ValueError(f"the debiased CKA estimator needs more than 3 examples, got {n}")
        np.fill_diagonal(k, 0)
        means = k.sum(axis=0) / (n - 2)
        means -= means.sum() / (2 * (n - 1))
        k -= means[:, None]
        k -= means[None, :]
        np.fill_diagonal(k, 0)
    else:
        means = k.mean(axis=0)
        means -= means.mean() / 2
        k -= means[:, None]
        k -= means[None, :]
    return k


CONSTANT = 1e-9  # a centred Gram matrix this small relative to the raw one: the same features for every example


def _centred_norm(raw: np.ndarray, centred: np.ndarray) -> float:
    """||centred||, or 0 for a representation that is the same for every example (a [CLS] before any block):
    rounding would otherwise give it a CKA of noise over noise."""
    norm = float(np.linalg.norm(centred))
    return 0.0 if norm <= CONSTANT * float(np.linalg.norm(raw)) else norm


def cka_from_grams(k: np.ndarray, l: np.ndarray, debiased: bool = False) -> float:  # noqa: E741
    """CKA of two (n, n) Gram matrices of the same examples (0 where one representation is constant)."""
    if k.shape != l.shape:
        raise ValueError(f"Gram matrices of different sizes {k.shape} and {l.shape}: CKA needs the same examples")
    kc, lc = center_gram(k, debiased), center_gram(l, debiased)
    denominator = _centred_norm(k, kc) * _centred_norm(l, lc)
    return float(kc.ravel() @ lc.ravel()) / denominator if denominator > 0 else 0.0


def cka(x: np.ndarray, y: np.ndarray, kernel: str = "linear", *, threshold: float = 1.0,
        debiased: bool = False) -> float:
    """CKA of features x (n, d1) and y (n, d2) of the same n examples: 1 for representations equal up to an
    orthogonal transform and isotropic scaling (and, with the RBF kernel, a translation)."""
    x, y = _features(x, "x"), _features(y, "y")
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"x has {x.shape[0]} examples and y {y.shape[0]}: CKA compares the same examples")
    return cka_from_grams(gram(x, kernel, threshold), gram(y, kernel, threshold), debiased)


def contributions(x: np.ndarray, y: np.ndarray, kernel: str = "linear", *, threshold: float = 1.0,
                  debiased: bool = False) -> np.ndarray:
    """Each example's share of CKA(x, y), (n,): row i of <Kc, Lc> over the norms, so the shares sum to the
    CKA value and the largest name the images that drive a cell (the ones both representations agree to set
    apart from the rest)."""
    x, y = _features(x, "x"), _features(y, "y")
    k, l = gram(x, kernel, threshold), gram(y, kernel, threshold)  # noqa: E741
    kc, lc = center_gram(k, debiased), center_gram(l, debiased)
    denominator = _centred_norm(k, kc) * _centred_norm(l, lc)
    rows = (kc * lc).sum(axis=1)  # (n,)
    return rows / denominator if denominator > 0 else np.zeros_like(rows)


def cka_matrix(xs: Sequence[np.ndarray], ys: Sequence[np.ndarray] | None = None, kernel: str = "linear", *,
               threshold: float = 1.0, debiased: bool = False) -> np.ndarray:
    """CKA of every pair (xs[i], ys[j]) of features of the same examples: (len(xs), len(ys)); ys=None compares
    xs with itself (the diagonal is 1, a constant representation's too: it is itself). A constant representation
    has CKA 0 with any other. Each centred Gram matrix is formed once."""

    def centred(features: Sequence[np.ndarray]) -> tuple[list[np.ndarray], np.ndarray]:
        grams, norms = [], []
        for f in features:
            raw = gram(f, kernel, threshold)
            grams.append(center_gram(raw, debiased))
            norms.append(_centred_norm(raw, grams[-1]))
        return grams, np.array(norms)

    grams_x, norms_x = centred(xs)
    grams_y, norms_y = (grams_x, norms_x) if ys is None else centred(ys)
    if grams_x and grams_y and grams_x[0].shape != grams_y[0].shape:
        raise ValueError(f"{grams_x[0].shape[0]} and {grams_y[0].shape[0]} examples: CKA compares the same examples")
    out = np.zeros((len(grams_x), len(grams_y)))
    for i, k in enumerate(grams_x):
        for j, l in enumerate(grams_y):  # noqa: E741
            if ys is None and j <= i:  # symmetric: the lower half is the upper's, the diagonal 1
                out[i, j] = out[j, i] if j < i else 1.0  # the same features: exactly 1 (rounding gives 1 +- 1e-16)
                continue
            denominator = norms_x[i] * norms_y[j]
            out[i, j] = float(k.ravel() @ l.ravel()) / denominator if denominator > 0 else 0.0
    return out


def _hsic_terms(grams: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per Gram matrix (n, n): its diagonal-zeroed entries flattened (r, n*n), row sums (r, n) and totals (r,)."""
    n = grams[0].shape[0]
    if n <= 3:
        raise ValueError(f"the unbiased HSIC estimator needs more than 3 examples per batch, got {n}")
    flat = np.stack([k.ravel() for k in grams])  # (r, n*n)
    flat[:, :: n + 1] = 0  # K~: the diagonal zeroed
    rows = flat.reshape(len(grams), n, n).sum(axis=2)  # (r, n): K~ 1
    return flat, rows, rows.sum(axis=1)


def unbiased_hsic_matrix(ks: Sequence[np.ndarray], ls: Sequence[np.ndarray]) -> np.ndarray:
    """Song et al. 2012's unbiased HSIC of every pair of (n, n) Gram matrices (n > 3): (len(ks), len(ls)),
    1/(n(n-3)) [tr(K~L~) + 1'K~1 1'L~1 / ((n-1)(n-2)) - 2/(n-2) 1'K~L~1], K~ and L~ with zeroed diagonals."""
    n = ks[0].shape[0]
    fk, rk, tk = _hsic_terms(ks)
    fl, rl, tl = _hsic_terms(ls)
    trace = fk @ fl.T  # tr(K~ L~) of symmetric matrices
    return (trace + np.outer(tk, tl) / ((n - 1) * (n - 2)) - 2.0 * (rk @ rl.T) / (n - 2)) / (n * (n - 3))


class MinibatchCKA:
    """Streaming CKA of every pair of `a` x `b` representations (Nguyen et al. 2021): `update` takes one
    minibatch's features per representation and adds its unbiased HSIC terms; `result()` divides their
    averages (sums: the batch count cancels). Memory is one batch's Gram matrices, whatever the number of
    images. b=None: `a` against itself."""

    def __init__(self, a: int, b: int | None = None, kernel: str = "linear", threshold: float = 1.0) -> None:
        if kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
        self.kernel, self.threshold, self.same = kernel, threshold, b is None
        self.cross = np.zeros((a, a if b is None else b))  # sums of HSIC(K_i, L_j) over batches
        self.self_a = np.zeros(a)  # sums of HSIC(K_i, K_i)
        self.self_b = np.zeros(a if b is None else b)  # sums of HSIC(L_j, L_j)
        self.raw_a = np.zeros(a)  # sums of ||K_i||^2 / (n(n-3)): the scale a constant representation is judged by
        self.raw_b = np.zeros(a if b is None else b)
        self.batches = 0
        self.examples = 0

    def update(self, xs: Sequence[np.ndarray], ys: Sequence[np.ndarray] | None = None) -> None:
        """One minibatch: features (batch, d) of each `a` representation (and each `b` one), same images."""
        a, b = self.cross.shape
        if len(xs) != a or (not self.same and (ys is None or len(ys) != b)):
            raise ValueError(f"expected {a} and {b} representations per batch")
        grams_x = [gram(x, self.kernel, self.threshold) for x in xs]
        grams_y = grams_x if self.same or ys is None else [gram(y, self.kernel, self.threshold) for y in ys]
        if self.same:
            cross = unbiased_hsic_matrix(grams_x, grams_x)
            self.self_a += np.diag(cross)
            self.self_b += np.diag(cross)
        else:
            cross = unbiased_hsic_matrix(grams_x, grams_y)
            self.self_a += np.diag(unbiased_hsic_matrix(grams_x, grams_x))
            self.self_b += np.diag(unbiased_hsic_matrix(grams_y, grams_y))
        self.cross += cross
        n = grams_x[0].shape[0]
        self.raw_a += np.array([float(np.sum(k * k)) for k in grams_x]) / (n * (n - 3))
        self.raw_b += np.array([float(np.sum(k * k)) for k in grams_y]) / (n * (n - 3))
        self.batches += 1
        self.examples += grams_x[0].shape[0]

    def result(self) -> np.ndarray:
        """(a, b) CKA values from the HSIC terms averaged over the batches seen so far."""
        if not self.batches:
            raise ValueError("minibatch CKA has seen no batch yet")
        self_a = np.where(self.self_a > CONSTANT**2 * self.raw_a, self.self_a, 0.0)  # constant: no alignment
        self_b = np.where(self.self_b > CONSTANT**2 * self.raw_b, self.self_b, 0.0)
        denominator = np.sqrt(np.clip(np.outer(self_a, self_b), 0, None))
        out = np.divide(self.cross, denominator, out=np.zeros_like(self.cross), where=denominator > 0)
        if self.same:
            np.fill_diagonal(out, 1.0)
        return out
