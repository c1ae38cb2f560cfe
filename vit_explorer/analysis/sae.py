"""Sparse autoencoders on token states (pure torch): TopK, BatchTopK and Matryoshka.

TopK (Gao et al. 2024): z = TopK(ReLU((x - b_dec) W_enc + b_enc)), x_hat = z W_dec + b_dec. BatchTopK (Bussmann et
al. 2024) keeps the k * n largest codes of a batch of n tokens (in evaluation, those above a running threshold: an
exponential average of the batch's k*n-th code, momentum 0.9). Matryoshka (Bussmann et al., ICML 2025) trains nested
prefixes of the dictionary: the loss is the mean of the reconstruction errors of the first m/8, m/4, m/2 and m
features. Decoder rows are kept unit L2 norm, renormalised before every training pass (as overcomplete's
`DictionaryLayer`, which the tests match to 1e-5 from the same weights, batches and Adam). No auxiliary dead-latent
loss. Steering edits a state through its hook site so that a feature set to its own value changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch import nn

KINDS = ("topk", "batchtopk", "matryoshka")
MOMENTUM = 0.9  # BatchTopK's running threshold
EPS = 1e-8  # added to a decoder row's norm (overcomplete's normalize_l2)


class SAE(nn.Module):
    """A sparse autoencoder of width m over d-dimensional tokens."""

    threshold: torch.Tensor  # () BatchTopK's running threshold, NaN until the first training batch

    def __init__(self, d: int, m: int, k: int, kind: str = "topk") -> None:
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if not 1 <= k <= m:
            raise ValueError(f"k must be 1..{m} (the dictionary's width), got {k}")
        self.kind, self.k = kind, k
        w = torch.empty(m, d)
        nn.init.xavier_uniform_(w)
        self.W_enc = nn.Parameter(w.t().clone())  # (d, m)
        self.b_enc = nn.Parameter(torch.zeros(m))  # (m,)
        self.W_dec = nn.Parameter(w.clone())  # (m, d): tied at initialisation
        self.b_dec = nn.Parameter(torch.zeros(d))  # (d,)
        self.register_buffer("threshold", torch.tensor(float("nan")))  # BatchTopK's running threshold

    @property
    def width(self) -> int:
        return self.W_dec.shape[0]

    def prefixes(self) -> list[int]:
        """The nested dictionary sizes a Matryoshka SAE is trained on (the whole for the others)."""
        if self.kind != "matryoshka":
            return [self.width]
        return sorted({max(1, self.width // f) for f in (8, 4, 2)} | {self.width})

    @torch.no_grad()
    def normalise_decoder(self) -> None:
        self.W_dec.data = self.W_dec / (self.W_dec.norm(dim=1, keepdim=True) + EPS)

    def pre_codes(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.b_dec) @ self.W_enc + self.b_enc  # (n, m)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Sparse non-negative codes (n, m) of tokens x (n, d)."""
        codes = torch.relu(self.pre_codes(x))  # (n, m)
        if self.kind == "batchtopk":
            if self.training:
                cut = torch.topk(codes.reshape(-1), min(self.k * len(codes), codes.numel())).values[-1]
                kept = cut.detach()
                self.threshold.copy_(kept if self.threshold.isnan() else MOMENTUM * self.threshold
                                     + (1 - MOMENTUM) * kept)
            else:
                cut = self.threshold
            return codes * (codes >= cut).float().detach()
        top = torch.topk(codes, self.k, dim=-1)
        return torch.zeros_like(codes).scatter(-1, top.indices, top.values)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return z @ self.W_dec + self.b_dec  # (n, d)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(codes (n, m), reconstruction (n, d))."""
        z = self.encode(x)
        return z, self.decode(z)

    def loss(self, x: torch.Tensor) -> torch.Tensor:
        """Mean squared error (for Matryoshka, averaged over the nested prefixes)."""
        if self.training:
            self.normalise_decoder()
        z = self.encode(x)
        losses = [((z[:, :p] @ self.W_dec[:p] + self.b_dec) - x).square().mean() for p in self.prefixes()]
        return torch.stack(losses).mean()


def train(sae: SAE, batches: Iterable[torch.Tensor], optimiser: torch.optim.Optimizer) -> Iterator[float]:
    """Train on batches of tokens (n, d), yielding each step's loss; the decoder rows end unit norm."""
    sae.train()
    for x in batches:
        optimiser.zero_grad()
        loss = sae.loss(x)
        torch.autograd.backward(loss)
        optimiser.step()
        yield float(loss.detach())
    sae.normalise_decoder()


def fvu(x: torch.Tensor, x_hat: torch.Tensor) -> float:
    """Fraction of variance unexplained: sum |x - x_hat|^2 / sum |x - mean x|^2 over tokens (n, d)."""
    return float((x - x_hat).square().sum() / (x - x.mean(dim=0)).square().sum().clamp_min(1e-12))


def steer(sae: SAE, feature: int, value: float | None) -> Callable[[torch.Tensor, Any], torch.Tensor]:
    """A forward hook that sets a feature's code to `value` at every token (None: its own value, 0 ablates),
    keeping the SAE's error: x + (z'_f - z_f) W_dec[f]. Where nothing changes, x is returned untouched."""

    def hook(x: torch.Tensor, _site: object) -> torch.Tensor:
        shape = x.shape  # (B, T, D)
        flat = x.reshape(-1, shape[-1])
        z = sae.encode(flat.to(sae.W_enc.dtype))[:, feature]  # (B*T,)
        target = z if value is None else torch.full_like(z, value)
        delta = target - z
        if not bool(delta.any()):
            return x
        return (flat + delta[:, None] * sae.W_dec[feature].to(x.dtype)).reshape(shape)

    return hook


def state_site(state: int) -> str:
    """The hook site of a token state (0 the embedded input, i the output of block i - 1)."""
    return "hook_embedded" if state == 0 else f"blocks.{state - 1}.hook_resid_post"
