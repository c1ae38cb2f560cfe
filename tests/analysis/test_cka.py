"""CKA against the values of Kornblith et al.'s demo notebook, its invariances, and minibatch CKA."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import ortho_group

from vit_explorer.analysis import cka as C


@pytest.fixture
def demo() -> tuple[np.ndarray, np.ndarray]:
    np.random.seed(1337)
    x = np.random.randn(100, 10)
    y = np.random.randn(100, 10) + x
    return x, y


def test_demo_values(demo: tuple[np.ndarray, np.ndarray]) -> None:
    x, y = demo
    assert C.cka(x, y) == pytest.approx(0.55761, abs=5e-6)
    assert C.cka(x, y, "rbf", threshold=0.5) == pytest.approx(0.65483, abs=5e-6)
    assert C.cka(x, y, debiased=True) == pytest.approx(0.51346, abs=5e-6)


def test_linear_cka_equals_feature_space_formula(demo: tuple[np.ndarray, np.ndarray]) -> None:
    """||Y'X||_F^2 / (||X'X||_F ||Y'Y||_F) on centred features (Kornblith et al. eq. 5)."""
    x, y = (a - a.mean(0) for a in demo)
    expected = np.linalg.norm(y.T @ x) ** 2 / (np.linalg.norm(x.T @ x) * np.linalg.norm(y.T @ y))
    assert C.cka(*demo) == pytest.approx(expected, rel=1e-10)


@pytest.mark.parametrize("kernel,debiased", [("linear", False), ("linear", True), ("rbf", False)])
def test_invariances(demo: tuple[np.ndarray, np.ndarray], kernel: str, debiased: bool) -> None:
    x, y = demo
    base = C.cka(x, y, kernel, debiased=debiased)
    q = ortho_group.rvs(10, random_state=0)
    assert C.cka(x @ q, y, kernel, debiased=debiased) == pytest.approx(base, abs=1e-10)
    assert C.cka(3.7 * x, y, kernel, debiased=debiased) == pytest.approx(base, abs=1e-10)
    general = np.random.default_rng(0).normal(size=(10, 10)) @ np.diag(np.linspace(0.1, 5, 10))
    assert abs(C.cka(x @ general, y, kernel, debiased=debiased) - base) > 1e-3  # not invariant to any linear map


def test_self_similarity_is_one(demo: tuple[np.ndarray, np.ndarray]) -> None:
    x, y = demo
    m = C.cka_matrix([x, y, x + 0.1 * y])
    np.testing.assert_allclose(np.diag(m), 1.0, atol=1e-12)
    np.testing.assert_allclose(m, m.T, atol=1e-12)
    assert m[0, 1] == pytest.approx(C.cka(x, y))
    mb = C.MinibatchCKA(3)
    mb.update([x, y, x + 0.1 * y])
    np.testing.assert_allclose(np.diag(mb.result()), 1.0, atol=1e-12)


def test_debiased_needs_four_examples() -> None:
    x = np.random.default_rng(0).normal(size=(3, 4))
    with pytest.raises(ValueError, match="more than 3"):
        C.cka(x, x, debiased=True)


def test_minibatch_one_batch_is_debiased_full(demo: tuple[np.ndarray, np.ndarray]) -> None:
    x, y = demo
    mb = C.MinibatchCKA(1, 1)
    mb.update([x], [y])
    assert mb.result()[0, 0] == pytest.approx(C.cka(x, y, debiased=True), abs=1e-12)
    assert C.unbiased_hsic_matrix([C.gram_linear(x)], [C.gram_linear(y)])[0, 0] == pytest.approx(
        C.center_gram(C.gram_linear(x), True).ravel() @ C.center_gram(C.gram_linear(y), True).ravel()
        / (100 * 97), rel=1e-10)


def test_minibatch_approaches_full_as_batches_grow() -> None:
    """Mean error over five shuffles of the images falls as batches grow; one batch of all is exact."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1000, 16))
    x[:, :2] *= 4
    y = np.tanh(x @ rng.normal(size=(16, 16))) + 0.5 * rng.normal(size=(1000, 16))
    full = C.cka(x, y, debiased=True)
    errors = []
    for batch in (10, 50, 200, 1000):
        runs = []
        for seed in range(5):
            order = np.random.default_rng(seed).permutation(1000)
            mb = C.MinibatchCKA(1, 1)
            for start in range(0, 1000, batch):
                rows = order[start:start + batch]
                mb.update([x[rows]], [y[rows]])
            runs.append(abs(mb.result()[0, 0] - full))
        errors.append(float(np.mean(runs)))
    assert errors[0] > errors[1] > errors[2] > errors[3]
    assert errors[2] < 0.002 and errors[3] < 1e-12
    averaged = np.mean([C.cka(x[s:s + 10], y[s:s + 10]) for s in range(0, 1000, 10)])
    assert abs(averaged - full) > 5 * errors[0]  # averaging per-batch CKA values is the biased quantity


def test_contributions_sum_to_cka_and_name_the_driver() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(50, 8))
    y = rng.normal(size=(50, 8))
    x[7] *= 30  # one image far out in both representations drives the alignment
    y[7] = x[7]
    shares = C.contributions(x, y)
    assert shares.sum() == pytest.approx(C.cka(x, y))
    assert int(np.argmax(shares)) == 7


def test_rbf_bandwidth_must_be_positive(demo: tuple[np.ndarray, np.ndarray]) -> None:
    with pytest.raises(ValueError, match="threshold"):
        C.cka(*demo, "rbf", threshold=0)


def test_constant_representation_aligns_with_nothing(demo: tuple[np.ndarray, np.ndarray]) -> None:
    """A [CLS] token before any block is the same for every image: CKA 0 with anything else, 1 with itself."""
    x, _ = demo
    constant = np.tile(np.random.default_rng(0).normal(size=(1, 10)), (100, 1))
    assert C.cka(constant, x) == 0.0
    m = C.cka_matrix([constant, x])
    assert m.tolist() == [[1.0, 0.0], [0.0, 1.0]]
    mb = C.MinibatchCKA(2)
    for start in range(0, 100, 25):
        mb.update([constant[start:start + 25], x[start:start + 25]])
    assert mb.result().tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert not C.contributions(constant, x).any()
