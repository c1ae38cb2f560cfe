"""Relevance maps from attention and gradients: Chefer et al.'s two methods, Grad-CAM on the tokens,
integrated gradients (captum's definition) and the per-patch sums of pixel attributions.

Inputs are what hooks on each block's `attn.hook_pattern` see (each (B, heads, T, T) attention, in the
output's graph: a hooked block computes its output from them) with the gradient of the target with respect
to each; the TokenLayout says which tokens are prefix tokens. Nothing here assumes one [CLS] token or a square grid.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch

from ..models.config import TokenLayout
from .attention import to_grid

Query = int | Sequence[int]


def widened(x: torch.Tensor) -> torch.Tensor:
    """x in float32, or in its own dtype where that is wider (a map recomputed in float64 stays in float64)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def _rows(query: Query) -> list[int]:
    return [query] if isinstance(query, int) else list(query)


def gradient_weighted(attention: torch.Tensor, gradient: torch.Tensor) -> torch.Tensor:
    """Chefer et al. 2021b, Eq. 5: mean over heads of the positive part of (gradient * attention):
    (B, H, R, T) -> (B, R, T)."""
    return (widened(gradient) * widened(attention)).clamp(min=0).mean(dim=1)


def attention_gradient(attentions: Sequence[torch.Tensor], gradients: Sequence[torch.Tensor], layout: TokenLayout,
                       *, query: Query | torch.Tensor = 0, class_attentions: Sequence[torch.Tensor] = (),
                       class_gradients: Sequence[torch.Tensor] = (), pool: tuple[torch.Tensor, torch.Tensor] | None
                       = None) -> torch.Tensor:
    """Chefer et al. 2021b (Generic Attention-model Explainability): R = I over the tokens; for each
    self-attention block in order R <- R + Abar R with Abar = mean_heads((grad A * A)+) (Eq. 6, no
    renormalisation); the map is the readout's row of R over the patches, (B, gh, gw).

    The readout: `query`, one token or several whose rows are averaged (GAP: every patch), or (B, T) weights
    of the rows (DINOv2's [CLS] beside the mean of the patches). CaiT: [CLS] joins in the class-attention
    blocks, each adding abar [r; R] to [CLS]'s row r over [CLS; patches] (its initial row: itself). An
    attention pool (SigLIP's MAP, AIMv2's query): its latent query has no residual, so its row is abar_pool R
    over the tokens it reads, the last ones (`pool` = (attention, gradient), each (B, heads, 1, N), or
    (B, heads, 1, T) when it reads every token, the Perception Encoder's).
    """
    if len(attentions) != len(gradients) or len(class_attentions) != len(class_gradients):
        raise ValueError("one gradient per attention map is needed")
    b, t = attentions[0].shape[0], layout.num_tokens
    relevance = torch.eye(t, device=attentions[0].device, dtype=widened(attentions[0]).dtype).expand(b, t, t)
    for a, g in zip(attentions, gradients, strict=True):
        relevance = relevance + gradient_weighted(a, g) @ relevance  # (B, T, T)
    if class_attentions:  # CaiT: [CLS]'s row over [CLS; patches], the patches' rows from the blocks
        row = torch.zeros(b, 1 + t, device=relevance.device)
        row[:, 0] = 1.0
        for a, g in zip(class_attentions, class_gradients, strict=True):
            abar = gradient_weighted(a, g)[:, 0]  # (B, 1+N)
            row = row + abar[:, :1] * row + torch.cat([abar.new_zeros(b, 1), (abar[:, None, 1:] @ relevance)[:, 0]],
                                                       dim=1)
        return row[:, 1:].reshape(b, *layout.grid)
    if pool is not None:
        abar = gradient_weighted(*pool)[:, 0]  # (B, N or T): the latent's weights over the tokens it reads
        k = t - abar.shape[-1]  # the pool reads the patches, or (PE) every token, [CLS] included
        return to_grid((abar[:, None] @ relevance[:, k:])[:, 0], layout)
    if isinstance(query, torch.Tensor):
        return to_grid((query[:, None].to(relevance) @ relevance)[:, 0], layout)
    return to_grid(relevance[:, _rows(query)].mean(dim=1), layout)


def attribution_rollout(relevances: Sequence[torch.Tensor], gradients: Sequence[torch.Tensor], layout: TokenLayout,
                        *, query: Query | torch.Tensor = 0) -> torch.Tensor:
    """Chefer et al. 2021 (Transformer Interpretability Beyond Attention Visualization), Eq. 13-15: per block
    Abar = mean_heads((grad A * R_A)+) with R_A the LRP relevance of the attention map, the identity added (no
    row normalisation: the paper's equations and the authors' `compute_rollout_attention`, whose normalisation
    line is commented out), multiplied in layer order (later blocks on the left); the readout's row over the
    patches, (B, gh, gw). With R_A = A and unit gradients this is attention rollout times 2 per block. `query`
    may also be (B, T) weights of the rows (a GAP head: each token's relevance at the output, since the mean of
    the rows of the product is nearly uniform whatever the class)."""
    if len(relevances) != len(gradients):
        raise ValueError("one gradient per relevance map is needed")
    t = layout.num_tokens
    eye = torch.eye(t, device=relevances[0].device, dtype=widened(relevances[0]).dtype)
    joint = None
    for r, g in zip(relevances, gradients, strict=True):
        step = gradient_weighted(r, g) + eye  # (B, T, T)
        joint = step if joint is None else step @ joint
    assert joint is not None
    if isinstance(query, torch.Tensor):
        return to_grid((query[:, None].to(joint) @ joint)[:, 0], layout)
    return to_grid(joint[:, _rows(query)].mean(dim=1), layout)


def gradcam(activations: torch.Tensor, gradients: torch.Tensor, layout: TokenLayout) -> torch.Tensor:
    """Grad-CAM on tokens (pytorch-grad-cam's ViT recipe): the patch tokens reshaped to the grid as channels
    (B, D, gh, gw), each channel weighted by the mean of its gradient over the grid, summed, ReLU: (B, gh, gw).
    activations, gradients: (B, T, D)."""
    k = layout.num_prefix_tokens
    acts, grads = widened(activations[:, k:]), widened(gradients[:, k:])  # (B, N, D)
    weights = grads.mean(dim=1, keepdim=True)  # (B, 1, D)
    return (acts * weights).sum(dim=-1).clamp(min=0).reshape(-1, *layout.grid)


def gauss_legendre(n_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """captum's 'gausslegendre' rule on [0, 1]: the points (alphas) and weights of the n-point rule."""
    if n_steps < 1:
        raise ValueError(f"n_steps must be at least 1, got {n_steps}")
    x, w = np.polynomial.legendre.leggauss(n_steps)
    return 0.5 * (x + 1), 0.5 * w


def integrated_gradients(target: Callable[[torch.Tensor], torch.Tensor], inputs: torch.Tensor,
                         baseline: torch.Tensor | None = None, *, n_steps: int = 50, batch: int = 10
                         ) -> Iterator[int | torch.Tensor]:
    """Integrated gradients (Sundararajan et al.; captum's definition and defaults): (x - x') * sum_i w_i
    grad f(x' + a_i (x - x')) with the Gauss-Legendre points a_i and weights w_i, for each of B inputs (B, ...);
    `target` maps a batch of points (B k, ...), image-major (each input's k points together), to its (B k,) scores;
    baseline (B or 1, ...) default zero. Yields the number of points done after each `batch` of them (so a caller
    can report progress and stop), then the (B, ...) attributions."""
    baseline = torch.zeros_like(inputs) if baseline is None else baseline
    alphas, weights = gauss_legendre(n_steps)
    delta = (inputs - baseline).detach()  # (B, ...)
    total = torch.zeros_like(delta)
    shape = (1, -1) + (1,) * (inputs.ndim - 1)
    for start in range(0, n_steps, batch):
        a = torch.as_tensor(alphas[start:start + batch], dtype=inputs.dtype, device=inputs.device)
        w = torch.as_tensor(weights[start:start + batch], dtype=inputs.dtype, device=inputs.device)
        points = (baseline[:, None] + a.view(shape) * delta[:, None]).flatten(0, 1).requires_grad_(True)  # (B k, ...)
        (grads,) = torch.autograd.grad(target(points).sum(), points)
        total = total + (grads.reshape(delta.shape[0], -1, *grads.shape[1:]) * w.view(shape)).sum(dim=1)
        yield min(start + batch, n_steps)
    yield delta * total


def per_patch(attribution: torch.Tensor, patch: int) -> torch.Tensor:
    """(B, C, H, W) pixel attributions -> (B, H/P, W/P), summed over each patch's pixels and channels."""
    b, c, h, w = attribution.shape
    grid = attribution.reshape(b, c, h // patch, patch, w // patch, patch)
    return grid.sum(dim=(1, 3, 5))
