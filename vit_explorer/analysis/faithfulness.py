"""How faithful a relevance map is: perturbation curves (Chefer et al.'s positive / negative test),
deletion and insertion (Petsiuk et al. 2018), and on images whose object mask is known the pointing game
and the IoU of the map thresholded at a share of its mass (DINO's 60 %).

The curves remove patches in the map's order; the removal itself is the caller's `score` function, which
takes a batch of removal masks (k, N) bool (True = removed) and returns the target's score (k,) for each,
so the same code serves every baseline (zero pixels, the [MASK] token, a blur). Ties in the map keep the
patches' raster order (a stable sort), so two methods are compared at the same fractions, baseline and
tie order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import torch

Score = Callable[[np.ndarray], np.ndarray]  # (k, N) bool removal masks -> (k,) target scores
PERTURBATION_FRACTIONS = tuple(i / 10 for i in range(10))  # 0, 10, ..., 90 % of the patches removed
DELETION_STEPS = 50  # deletion / insertion: fractions 0, 1/50, ..., 1 (or one patch a step on smaller grids)
MASS_SHARE = 0.6  # DINO's threshold: the smallest set of patches holding 60 % of the map's mass


def removal_order(relevance: np.ndarray, most_first: bool) -> np.ndarray:
    """Patch indices (N,) from most (most_first) or least relevant; ties keep raster order (stable)."""
    flat = np.asarray(relevance, dtype=np.float64).reshape(-1)
    return np.argsort(-flat if most_first else flat, kind="stable")


def counts(fractions: tuple[float, ...] | np.ndarray, n: int) -> np.ndarray:
    """How many of n patches each fraction removes (rounded to the nearest whole patch)."""
    return np.asarray([int(round(f * n)) for f in fractions], dtype=np.int64)


def removal_masks(order: np.ndarray, removed: np.ndarray) -> np.ndarray:
    """(S, N) bool: row s removes the first removed[s] patches of `order`."""
    n = order.shape[0]
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    return rank[None, :] < np.asarray(removed)[:, None]


def scores(score: Score, masks: np.ndarray, batch: int) -> Iterator[int | np.ndarray]:
    """`score` over the rows of masks in batches; yields the rows done after each batch, then the (S,) scores."""
    out = []
    for start in range(0, len(masks), batch):
        out.append(np.asarray(score(masks[start:start + batch]), dtype=np.float64))
        yield min(start + batch, len(masks))
    yield np.concatenate(out) if out else np.zeros(0)


def perturbation_masks(relevance: np.ndarray, positive: bool,
                       fractions: tuple[float, ...] | np.ndarray = PERTURBATION_FRACTIONS) -> np.ndarray:
    """Chefer et al.'s test: (10, N) masks removing the most (positive) or least (negative) relevant patches."""
    flat = np.asarray(relevance).reshape(-1)
    return removal_masks(removal_order(flat, most_first=positive), counts(fractions, flat.size))


def deletion_fractions(n: int, steps: int = DELETION_STEPS) -> np.ndarray:
    """0 .. 1 in min(steps, n) equal steps."""
    return np.linspace(0.0, 1.0, min(steps, n) + 1)


def deletion_masks(relevance: np.ndarray, fractions: np.ndarray) -> np.ndarray:
    """Petsiuk's deletion: the most relevant patches removed first."""
    return perturbation_masks(relevance, True, fractions)


def insertion_masks(relevance: np.ndarray, fractions: np.ndarray) -> np.ndarray:
    """Petsiuk's insertion: from the fully removed image, the most relevant patches put back first."""
    return ~deletion_masks(relevance, fractions)


def auc(curve: np.ndarray, fractions: np.ndarray | tuple[float, ...]) -> float:
    """The area under a curve over the fractions of patches removed (trapezoids)."""
    y, x = np.asarray(curve, dtype=np.float64), np.asarray(fractions, dtype=np.float64)
    return float(np.sum((x[1:] - x[:-1]) * (y[1:] + y[:-1]) / 2))


def patch_coverage(object_mask: np.ndarray, patch: int) -> np.ndarray:
    """(H, W) bool object mask -> (H/P, W/P) share of each patch's pixels on the object."""
    h, w = object_mask.shape
    return object_mask.reshape(h // patch, patch, w // patch, patch).mean(axis=(1, 3))


def pointing_hit(relevance: np.ndarray, coverage: np.ndarray) -> bool:
    """The pointing game: the map's maximum lies on a patch that touches the object (the first maximum in
    raster order on ties)."""
    return bool(coverage.reshape(-1)[int(np.argmax(np.asarray(relevance).reshape(-1)))] > 0)


def mass_region(relevance: np.ndarray, share: float = MASS_SHARE) -> np.ndarray:
    """The smallest set of patches (most relevant first, stable) holding `share` of the map's positive mass,
    as a bool grid of the map's shape; an all-zero map gives an empty region."""
    flat = np.clip(np.asarray(relevance, dtype=np.float64).reshape(-1), 0, None)
    total = flat.sum()
    region = np.zeros(flat.size, dtype=bool)
    if total > 0:
        order = removal_order(flat, most_first=True)
        kept = int(np.searchsorted(np.cumsum(flat[order]) / total, share - 1e-12)) + 1
        region[order[:kept]] = True
    return region.reshape(np.shape(relevance))


def mass_iou(relevance: np.ndarray, coverage: np.ndarray, share: float = MASS_SHARE) -> float:
    """IoU of the `share`-of-mass region with the object's patches (those at least half covered)."""
    region, obj = mass_region(relevance, share), coverage >= 0.5
    union = np.logical_or(region, obj).sum()
    return float(np.logical_and(region, obj).sum() / union) if union else 0.0


# ---------------------------------------------------------------------------- ROAD (Rong et al., ICML 2022)
ROAD_FRACTIONS = tuple(i / 10 for i in range(1, 10))  # 10, ..., 90 % of the patches imputed (pytorch-grad-cam's)
ROAD_NOISE = 0.01  # the imputation's noise (absolute, in the input's units), as the paper's code and grad-cam
# the weights of a missing pixel's eight neighbours in the linear imputation, in the reference's order
NEIGHBOURS = (((1, 1), 1 / 12), ((0, 1), 1 / 6), ((-1, 1), 1 / 12), ((1, -1), 1 / 12), ((0, -1), 1 / 6),
              ((-1, -1), 1 / 12), ((1, 0), 1 / 6), ((-1, 0), 1 / 6))


def linear_imputation(image: np.ndarray, missing: np.ndarray) -> np.ndarray:
    """Rong et al.'s linear imputation: each missing pixel of a (C, H, W) image ((H, W) bool `missing`) becomes the
    weighted mean of its eight neighbours (NEIGHBOURS, those inside the image), missing neighbours solved for
    jointly (one sparse linear system per image, every channel a right-hand side); returns the (n, C) float64 values
    of the missing pixels in raster order. Every pixel missing: nothing to interpolate from, all zero."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.linalg import spsolve

    c, h, w = image.shape
    flat_missing = missing.reshape(-1)
    unknown = np.flatnonzero(flat_missing)  # (n,) raster indices of the missing pixels
    n = unknown.size
    if n == 0 or n == flat_missing.size:
        return np.zeros((n, c))
    variable = np.zeros(flat_missing.size, dtype=np.int64)
    variable[unknown] = np.arange(n)
    values = image.reshape(c, -1)
    rhs = np.zeros((n, c))
    weights_sum = np.ones(n)
    rows, cols, data = [np.arange(n)], [np.arange(n)], []
    y, x = unknown // w, unknown % w
    for (dy, dx), weight in NEIGHBOURS:
        ny, nx = y + dy, x + dx
        inside = (ny >= 0) & (nx >= 0) & (ny < h) & (nx < w)
        weights_sum[~inside] -= weight
        ids, neighbour = np.flatnonzero(inside), (ny * w + nx)[inside]
        known = ~flat_missing[neighbour]
        rhs[ids[known]] -= weight * values[:, neighbour[known]].T
        rows.append(ids[~known])
        cols.append(variable[neighbour[~known]])
        data.append(np.full(int((~known).sum()), weight))
    data.insert(0, -weights_sum)
    system = coo_matrix((np.concatenate(data), (np.concatenate(rows), np.concatenate(cols))), shape=(n, n)).tocsc()
    return np.asarray(spsolve(system, rhs)).reshape(n, c)


def noisy_linear_imputation(image: torch.Tensor, missing: np.ndarray, noise: float = ROAD_NOISE,
                            generator: torch.Generator | None = None) -> torch.Tensor:
    """ROAD's noisy linear imputation of a (C, H, W) float image: the missing pixels' linear imputation (float32)
    plus `noise` times standard normal noise from `generator`, drawn as pytorch-grad-cam's NoisyLinearImputer draws
    it from torch's global generator (`randn_like` of the transposed solution: in the solution's memory order)."""
    solved = torch.tensor(linear_imputation(image.detach().cpu().numpy(), missing), dtype=torch.float)  # (n, C)
    filled = image.detach().cpu().reshape(image.shape[0], -1).clone()
    draw = torch.empty_like(solved.t()).normal_(generator=generator)  # (C, n), the strides randn_like keeps
    noisy = solved.t() + noise * draw
    filled[:, np.flatnonzero(missing.reshape(-1))] = noisy.to(filled.dtype)
    return filled.reshape(image.shape).to(image.device)


def road_masks(relevance: np.ndarray, most_first: bool, fractions: tuple[float, ...] = ROAD_FRACTIONS
               ) -> np.ndarray:
    """(S, N) bool: the patches ROAD imputes at each fraction, most (MoRF) or least (LeRF) relevant first (stable)."""
    return perturbation_masks(relevance, most_first, fractions)
