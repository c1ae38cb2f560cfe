"""Transformer blocks: multi-head self-attention (optionally talking heads), MLP, LayerScale,
drop-path, and CaiT's class-attention block. Parameter names follow timm's so checkpoints map
one to one.

Attention capture: the output always comes from the fused `scaled_dot_product_attention` (except
with talking heads, which mix heads around the softmax), so capturing never changes what the model
computes; `rows=ALL` also forms the (B, heads, N, N) probabilities explicitly, a list of query
indices only those rows, `rows=None` none.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .position import apply_rope

ALL = "all"  # capture every query row
Rows = Sequence[int] | str | None


class LayerScale(nn.Module):
    def __init__(self, dim: int, init_value: float) -> None:
        super().__init__()
        self.gamma = nn.Parameter(init_value * torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


class DropPath(nn.Module):
    """Stochastic depth: drop the whole residual branch per sample, rescaling the kept ones."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.p == 0.0 or not self.training:
            return x
        keep = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(1 - self.p)
        return x * keep / (1 - self.p)


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int, drop: float) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.drop1 = nn.Dropout(drop)
        self.fc2 = nn.Linear(hidden, dim)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop2(self.fc2(self.drop1(self.act(self.fc1(x)))))


def _mask_heads(out: torch.Tensor, head_mask: torch.Tensor | None) -> torch.Tensor:
    """Zero whole heads of out (B, H, T, hd): applied to each head's output, so exact on any path."""
    if head_mask is None:
        return out
    return out * head_mask.to(out.device, out.dtype).view(1, -1, 1, 1)


def _softmax(logits: torch.Tensor) -> torch.Tensor:
    """Softmax over keys. In place unless autograd needs the input: the (B, H, T, T) scores are
    the capture path's largest tensor, and a second buffer of that size costs a third of its time."""
    if torch.is_grad_enabled() and logits.requires_grad:
        return logits.softmax(dim=-1)
    return torch.softmax(logits, dim=-1, out=logits)


class Attention(nn.Module):
    def __init__(self, dim: int, num_heads: int, qkv_bias: bool, attn_drop: float, proj_drop: float,
                 talking_heads: bool = False) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.talking_heads = talking_heads
        if talking_heads:  # CaiT: mix heads before (proj_l) and after (proj_w) the softmax
            self.proj_l = nn.Linear(num_heads, num_heads)
            self.proj_w = nn.Linear(num_heads, num_heads)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x: torch.Tensor, *, rope: torch.Tensor | None = None, num_prefix: int = 0,
                head_mask: torch.Tensor | None = None, rows: Rows = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # each (B, H, N, hd)
        if rope is not None:
            q, k = apply_rope(q, rope, num_prefix), apply_rope(k, rope, num_prefix)

        probs = None
        if self.talking_heads:  # heads mix around the softmax: no fused kernel computes that
            logits = (q * self.scale) @ k.transpose(-2, -1)  # (B, H, N, N)
            logits = self.proj_l(logits.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
            probs = _softmax(logits)
            probs = self.proj_w(probs.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
            out = self.attn_drop(probs) @ v  # (B, H, N, hd)
            probs = None if rows is None else probs if rows == ALL else probs[:, :, list(rows)]
        else:
            drop = self.attn_drop.p if self.training else 0.0
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=drop)  # (B, H, N, hd)
            if rows is not None:  # the output stays the fused kernel's, so capturing never changes it
                q_rows = q if rows == ALL else q[:, :, list(rows)]
                probs = _softmax((q_rows * self.scale) @ k.transpose(-2, -1))  # (B, H, R, N)
        out = _mask_heads(out, head_mask)
        out = out.transpose(1, 2).reshape(b, n, c)
        return self.proj_drop(self.proj(out)), probs


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float, qkv_bias: bool, drop: float,
                 attn_drop: float, drop_path: float, layer_scale: float | None, eps: float,
                 talking_heads: bool = False) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.attn = Attention(dim, num_heads, qkv_bias, attn_drop, drop, talking_heads)
        self.ls1 = LayerScale(dim, layer_scale) if layer_scale is not None else nn.Identity()
        self.drop_path1 = DropPath(drop_path)
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), drop)
        self.ls2 = LayerScale(dim, layer_scale) if layer_scale is not None else nn.Identity()
        self.drop_path2 = DropPath(drop_path)

    def forward(self, x: torch.Tensor, *, rope: torch.Tensor | None = None, num_prefix: int = 0,
                head_mask: torch.Tensor | None = None, rows: Rows = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        attn_out, probs = self.attn(self.norm1(x), rope=rope, num_prefix=num_prefix, head_mask=head_mask, rows=rows)
        x = x + self.drop_path1(self.ls1(attn_out))
        x = x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))
        return x, probs


class ClassAttention(nn.Module):
    """CaiT: only [CLS] queries; keys and values come from [CLS] and all patches."""

    def __init__(self, dim: int, num_heads: int, qkv_bias: bool, attn_drop: float, proj_drop: float) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.q = nn.Linear(dim, dim, bias=qkv_bias)
        self.k = nn.Linear(dim, dim, bias=qkv_bias)
        self.v = nn.Linear(dim, dim, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, u: torch.Tensor, *, head_mask: torch.Tensor | None = None, capture: bool = False
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        b, n, c = u.shape  # u = [CLS; patches]
        q = self.q(u[:, :1]).reshape(b, 1, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, 1, hd)
        k = self.k(u).reshape(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, N, hd)
        v = self.v(u).reshape(b, n, self.num_heads, self.head_dim).transpose(1, 2)
        drop = self.attn_drop.p if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=drop)  # (B, H, 1, hd)
        probs = None
        if capture:  # beside the fused output, which capturing never changes
            probs = ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)  # (B, H, 1, N): one row per head
        out = _mask_heads(out, head_mask).transpose(1, 2).reshape(b, 1, c)
        return self.proj_drop(self.proj(out)), probs


class ClassAttentionBlock(nn.Module):
    """CaiT's class-attention block: updates [CLS] only, reading the (frozen) patch tokens."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float, qkv_bias: bool, drop: float,
                 attn_drop: float, drop_path: float, layer_scale: float | None, eps: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.attn = ClassAttention(dim, num_heads, qkv_bias, attn_drop, drop)
        self.ls1 = LayerScale(dim, layer_scale) if layer_scale is not None else nn.Identity()
        self.drop_path1 = DropPath(drop_path)
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), drop)
        self.ls2 = LayerScale(dim, layer_scale) if layer_scale is not None else nn.Identity()
        self.drop_path2 = DropPath(drop_path)

    def forward(self, patches: torch.Tensor, cls: torch.Tensor, *, head_mask: torch.Tensor | None = None,
                capture: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        u = torch.cat([cls, patches], dim=1)  # (B, 1+N, D)
        attn_out, probs = self.attn(self.norm1(u), head_mask=head_mask, capture=capture)
        cls = cls + self.drop_path1(self.ls1(attn_out))
        cls = cls + self.drop_path2(self.ls2(self.mlp(self.norm2(cls))))
        return cls, probs
