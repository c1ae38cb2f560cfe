"""Mimetic initialisation of self-attention (Trockman & Kolter, "Mimetic Initialization of Self-Attention
Layers", ICML 2023), for models trained from scratch.

A freshly initialised ViT attends uniformly: with small random W_q and W_k every query sees every key
alike, and the first hundreds of steps go by before attention learns to pick anything out (on the
classroom model, most of a two-minute run). Trained ViTs have W_q W_k^T close to a multiple of the
identity (a token attends to tokens like itself, and through the position embedding to its neighbours)
and W_v W_proj close to a negative multiple of it. Starting there, per head

    W_q^h W_k^hT ~ a1 Z1 + b1 I        W_v W_proj ~ a2 Z2 - b2 I        (Z random, scaled 1/sqrt(D))

(each a low-rank factorisation by SVD), makes attention selective from the first step; the gradient
then reaches the position embedding through the attention logits directly, and it learns its 2D layout
early. Only the weight matrices change; biases, norms, MLPs and embeddings keep the model's own init.
"""

from __future__ import annotations

import math

import torch

from ..models import VisionTransformer
from ..models.blocks import Block

QK = (0.7, 0.7)  # (a1, b1): the paper's values for ViTs trained on small images
VO = (0.4, 0.4)  # (a2, b2)


@torch.no_grad()
def mimetic_init(model: VisionTransformer, generator: torch.Generator, qk: tuple[float, float] = QK,
                 vo: tuple[float, float] = VO) -> None:
    """Set W_q, W_k, W_v and W_proj of every self-attention block of `model` as described above."""
    for block in model.blocks:
        if not isinstance(block, Block):
            continue
        attn = block.attn
        d, heads, hd = attn.qkv.in_features, attn.num_heads, attn.head_dim
        qkv = attn.qkv.weight  # (3D, D): rows of q, then k, then v, head after head
        for h in range(heads):
            u, s, vt = torch.linalg.svd(_near_identity(d, *qk, generator))
            root = s[:hd].sqrt()  # the best rank-hd factorisation u s vt ~ (u sqrt s)(sqrt s vt)
            qkv[h * hd:(h + 1) * hd] = (u[:, :hd] * root).T  # W_q^h: (hd, D)
            qkv[d + h * hd:d + (h + 1) * hd] = root[:, None] * vt[:hd]  # W_k^h: (hd, D)
        a2, b2 = vo
        u, s, vt = torch.linalg.svd(_near_identity(d, a2, -b2, generator))
        qkv[2 * d:] = s.sqrt()[:, None] * vt  # W_v: (D, D)
        attn.proj.weight.copy_(u * s.sqrt())  # W_proj: (D, D), so that W_proj W_v = a2 Z - b2 I


def _near_identity(d: int, a: float, b: float, generator: torch.Generator) -> torch.Tensor:
    """a Z + b I with Z a (d, d) standard normal matrix scaled by 1/sqrt(d)."""
    return a * torch.randn(d, d, generator=generator) / math.sqrt(d) + b * torch.eye(d)
