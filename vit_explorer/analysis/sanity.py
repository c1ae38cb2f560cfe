"""Sanity checks of relevance maps (Adebayo et al. 2018, cascading model-parameter randomisation): how alike two
maps are, by Spearman's rank correlation and by SSIM, and the randomisation of a model's parameters in place.

SSIM is the standard one (Wang et al. 2004) as scikit-image's `structural_similarity` computes it by default: a
uniform 7 x 7 window (smaller on a smaller grid, odd), K1 = 0.01, K2 = 0.03, sample covariances, the mean over the
pixels whose window lies inside the map; each map is first scaled to 0..1 by its own minimum and maximum, as
Adebayo et al. compare normalised maps (data range 1).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import torch

SSIM_WINDOW = 7
K1, K2 = 0.01, 0.03


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation of two maps (ties share their mean rank); NaN when either map is constant."""
    from scipy.stats import rankdata

    ra, rb = (rankdata(np.asarray(x, dtype=np.float64).reshape(-1)) for x in (a, b))
    ra, rb = ra - ra.mean(), rb - rb.mean()
    norm = math.sqrt(float((ra * ra).sum() * (rb * rb).sum()))
    return float((ra * rb).sum() / norm) if norm > 0 else math.nan


def scaled(values: np.ndarray) -> np.ndarray:
    """A map scaled to 0..1 by its own minimum and maximum (a constant map: all zero)."""
    x = np.asarray(values, dtype=np.float64)
    spread = float(np.ptp(x)) if x.size else 0.0
    return (x - x.min()) / spread if spread > 0 else np.zeros_like(x)


def ssim(a: np.ndarray, b: np.ndarray, *, data_range: float = 1.0, window: int = SSIM_WINDOW) -> float:
    """The mean structural similarity of two (h, w) images (see the module's docstring); NaN on a grid smaller
    than 3 x 3. The window shrinks to the largest odd size that fits."""
    from scipy.ndimage import uniform_filter

    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    side = min(window, *x.shape)
    side -= 1 - side % 2  # odd
    if side < 3:
        return math.nan
    cov_norm = side**2 / (side**2 - 1)
    ux, uy = uniform_filter(x, size=side), uniform_filter(y, size=side)
    vx = cov_norm * (uniform_filter(x * x, size=side) - ux * ux)
    vy = cov_norm * (uniform_filter(y * y, size=side) - uy * uy)
    vxy = cov_norm * (uniform_filter(x * y, size=side) - ux * uy)
    c1, c2 = (K1 * data_range) ** 2, (K2 * data_range) ** 2
    s = (2 * ux * uy + c1) * (2 * vxy + c2) / ((ux**2 + uy**2 + c1) * (vx + vy + c2))
    pad = (side - 1) // 2
    return float(s[pad:s.shape[0] - pad, pad:s.shape[1] - pad].mean())


def map_ssim(a: np.ndarray, b: np.ndarray) -> float:
    """SSIM of two relevance maps, each scaled to 0..1 first."""
    return ssim(scaled(a), scaled(b))


def randomise_(parameters: Iterable[torch.nn.Parameter], generator: torch.Generator) -> None:
    """Draw each parameter tensor anew, in place, from a normal distribution with the tensor's own mean and standard
    deviation (so activations keep their scale; a tensor of one value, or all equal, keeps it)."""
    with torch.no_grad():
        for p in parameters:
            if p.numel() < 2:
                continue
            mean, std = p.double().mean(), p.double().std()
            draw = torch.randn(p.shape, generator=generator, dtype=torch.float64)
            p.copy_((mean + std * draw).to(p))
