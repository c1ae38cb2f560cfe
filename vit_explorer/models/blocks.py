"""Transformer blocks: multi-head self-attention (optionally talking heads, an additive bias), MLPs
(GELU, quick-GELU, SwiGLU, with an optional sub-LN), LayerScale, drop-path, CaiT's class-attention
block, and the attention-pool (MAP) head. Parameter names follow timm's so checkpoints map
one to one.

Attention capture: the output always comes from the fused `scaled_dot_product_attention` (except
with talking heads, which mix heads around the softmax), so capturing never changes what the model
computes; `rows=ALL` also forms the (B, heads, N, N) probabilities explicitly, a list of query
indices only those rows, `rows=None` none. `rows=GRAD` is the one exception, for gradient-based
relevance: every row is formed and the output is computed from them (`probs @ v`), so the probabilities
are in the output's autograd graph and their gradient is the real one (the same numbers to ~1e-6).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from .norms import make_norm
from .position import SCHEMES, apply_rope

if TYPE_CHECKING:
    from .config import ViTConfig

ALL = "all"  # capture every query row
GRAD = "grad"  # every row, with the output computed from them (their gradient is the output's)
Rows = Sequence[int] | str | None
# A block's edit (site, value) -> value: it reads, and may replace, what the block computes at a site:
# "resid" its input (B, T, D), "head" each head's output before the projection (B, heads, T, hd), "attn" and
# "mlp" what each branch adds to the stream, LayerScale included (B, T, D). None: the plain forward pass.
Edit = Callable[[str, torch.Tensor], torch.Tensor]


class LayerScale(nn.Module):
    def __init__(self, dim: int, init_value: float) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim,), float(init_value)))  # no arithmetic: on meta it imports dynamo

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


class QuickGELU(nn.Module):
    """CLIP's (OpenAI) activation: x * sigmoid(1.702 x)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


def activation(name: str) -> nn.Module:
    """The activation of a plain MLP by its ViTConfig.mlp name."""
    if name == "quick_gelu":
        return QuickGELU()
    return nn.GELU(approximate="tanh" if name == "gelu_tanh" else "none")


class Mlp(nn.Module):
    """fc1, activation, (sub-LN norm,) fc2; `bias=False`: neither layer has a bias (AIMv2)."""

    def __init__(self, dim: int, hidden: int, drop: float, act: str = "gelu", norm: bool = False,
                 eps: float = 1e-6, norm_kind: str = "layernorm", bias: bool = True) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden, bias=bias)
        self.act = activation(act)
        self.drop1 = nn.Dropout(drop)
        self.norm = make_norm(norm_kind, hidden, eps) if norm else nn.Identity()
        self.fc2 = nn.Linear(hidden, dim, bias=bias)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.drop2(self.fc2(self.norm(self.drop1(self.act(self.fc1(x))))))
        return out


class SwiGLU(nn.Module):
    """silu(x W_g) * (x W_x), (sub-LN norm,) then the output layer (timm's SwiGLU; its packed form,
    one fc1 with the gate half first, is split into fc1_g and fc1_x when loading)."""

    def __init__(self, dim: int, hidden: int, drop: float, norm: bool = False, eps: float = 1e-6,
                 norm_kind: str = "layernorm", bias: bool = True) -> None:
        super().__init__()
        self.fc1_g = nn.Linear(dim, hidden, bias=bias)
        self.fc1_x = nn.Linear(dim, hidden, bias=bias)
        self.act = nn.SiLU()
        self.drop1 = nn.Dropout(drop)
        self.norm = make_norm(norm_kind, hidden, eps) if norm else nn.Identity()
        self.fc2 = nn.Linear(hidden, dim, bias=bias)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden: torch.Tensor = self.drop1(self.act(self.fc1_g(x)) * self.fc1_x(x))
        out: torch.Tensor = self.drop2(self.fc2(self.norm(hidden)))
        return out


def make_mlp(config: ViTConfig, ratio: float) -> nn.Module:
    hidden = int(config.embed_dim * ratio)
    d, eps, kind, bias = config.embed_dim, config.layer_norm_eps, config.norm, config.proj_bias
    if config.mlp == "swiglu":
        return SwiGLU(d, hidden, config.drop_rate, config.mlp_norm, eps, norm_kind=kind, bias=bias)
    return Mlp(d, hidden, config.drop_rate, config.mlp, config.mlp_norm, eps, norm_kind=kind, bias=bias)


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
    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        dim = config.embed_dim
        self.num_heads = config.num_heads
        self.head_dim = config.head_dim
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=config.qkv_bias and config.k_bias)
        if config.qkv_bias and not config.k_bias:  # BEiT, EVA-02: queries and values only
            self.q_bias = nn.Parameter(torch.zeros(dim))
            self.v_bias = nn.Parameter(torch.zeros(dim))
        self.talking_heads = config.talking_heads
        if self.talking_heads:  # CaiT: mix heads before (proj_l) and after (proj_w) the softmax
            self.proj_l = nn.Linear(self.num_heads, self.num_heads)
            self.proj_w = nn.Linear(self.num_heads, self.num_heads)
        for name, parameter in SCHEMES[config.pos_embed].create_attention(config).items():
            setattr(self, name, parameter)  # e.g. BEiT's relative position bias table
        self.rope_half = SCHEMES[config.pos_embed].rope_half
        self.attn_drop = nn.Dropout(config.attn_drop_rate)
        self.proj = nn.Linear(dim, dim, bias=config.proj_bias)
        self.proj_drop = nn.Dropout(config.drop_rate)

    def project_qkv(self, x: torch.Tensor) -> torch.Tensor:
        if not hasattr(self, "q_bias"):
            return F.linear(x, self.qkv.weight, self.qkv.bias)
        bias = torch.cat([self.q_bias, torch.zeros_like(self.q_bias), self.v_bias])
        return F.linear(x, self.qkv.weight, bias)

    def forward(self, x: torch.Tensor, *, rope: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                num_prefix: int = 0, head_mask: torch.Tensor | None = None, rows: Rows = None,
                edit: Edit | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """bias: (heads, N, N) added to the logits (BEiT's relative position bias)."""
        b, n, c = x.shape
        qkv = self.project_qkv(x).reshape(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # each (B, H, N, hd)
        if rope is not None:
            q, k = apply_rope(q, rope, num_prefix, self.rope_half), apply_rope(k, rope, num_prefix, self.rope_half)
        if bias is not None:
            bias = bias.to(q.dtype)

        probs = None
        if self.talking_heads:  # heads mix around the softmax: no fused kernel computes that
            logits = (q * self.scale) @ k.transpose(-2, -1)  # (B, H, N, N)
            if bias is not None:
                logits = logits + bias
            logits = self.proj_l(logits.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
            probs = _softmax(logits)
            probs = self.proj_w(probs.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
            out = self.attn_drop(probs) @ v  # (B, H, N, hd)
            probs = None if rows is None else probs if rows in (ALL, GRAD) else probs[:, :, list(rows)]
        elif rows == GRAD:  # the output from the explicit probabilities, so they are in its graph
            logits = (q * self.scale) @ k.transpose(-2, -1)  # (B, H, N, N)
            probs = (logits if bias is None else logits + bias).softmax(dim=-1)
            out = self.attn_drop(probs) @ v  # (B, H, N, hd)
        else:
            drop = self.attn_drop.p if self.training else 0.0
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=drop)  # (B, H, N, hd)
            if rows is not None:  # the output stays the fused kernel's, so capturing never changes it
                q_rows = q if rows == ALL else q[:, :, list(rows)]
                logits = (q_rows * self.scale) @ k.transpose(-2, -1)  # (B, H, R, N)
                if bias is not None:
                    logits = logits + (bias if rows == ALL else bias[:, list(rows)])
                probs = _softmax(logits)
        out = _mask_heads(out, head_mask)
        if edit is not None:
            out = edit("head", out)  # (B, H, N, hd)
        out = out.transpose(1, 2).reshape(b, n, c)
        return self.proj_drop(self.proj(out)), probs


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, config: ViTConfig, drop_path: float) -> None:
        super().__init__()
        dim, eps, layer_scale = config.embed_dim, config.layer_norm_eps, config.layer_scale_init
        self.norm1 = make_norm(config.norm, dim, eps)
        self.attn = Attention(config)
        self.ls1 = LayerScale(dim, layer_scale) if layer_scale is not None else nn.Identity()
        self.drop_path1 = DropPath(drop_path)
        self.norm2 = make_norm(config.norm, dim, eps)
        self.mlp = make_mlp(config, config.mlp_ratio)
        self.ls2 = LayerScale(dim, layer_scale) if layer_scale is not None else nn.Identity()
        self.drop_path2 = DropPath(drop_path)

    def forward(self, x: torch.Tensor, *, rope: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                num_prefix: int = 0, head_mask: torch.Tensor | None = None, rows: Rows = None,
                edit: Edit | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        if edit is not None:
            x = edit("resid", x)
        attn_out, probs = self.attn(self.norm1(x), rope=rope, bias=bias, num_prefix=num_prefix, head_mask=head_mask,
                                    rows=rows, edit=edit)
        branch = self.drop_path1(self.ls1(attn_out))
        x = x + (branch if edit is None else edit("attn", branch))
        branch = self.drop_path2(self.ls2(self.mlp(self.norm2(x))))
        x = x + (branch if edit is None else edit("mlp", branch))
        return x, probs


class ClassAttention(nn.Module):
    """CaiT: only [CLS] queries; keys and values come from [CLS] and all patches."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        dim = config.embed_dim
        self.num_heads = config.num_heads
        self.head_dim = config.head_dim
        self.scale = self.head_dim**-0.5
        self.q = nn.Linear(dim, dim, bias=config.qkv_bias)
        self.k = nn.Linear(dim, dim, bias=config.qkv_bias and config.k_bias)
        self.v = nn.Linear(dim, dim, bias=config.qkv_bias)
        self.attn_drop = nn.Dropout(config.attn_drop_rate)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(config.drop_rate)

    def forward(self, u: torch.Tensor, *, head_mask: torch.Tensor | None = None, capture: bool | str = False,
                edit: Edit | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """capture: True forms the probabilities beside the fused output, GRAD computes the output from them."""
        b, n, c = u.shape  # u = [CLS; patches]
        q = self.q(u[:, :1]).reshape(b, 1, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, 1, hd)
        k = self.k(u).reshape(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, N, hd)
        v = self.v(u).reshape(b, n, self.num_heads, self.head_dim).transpose(1, 2)
        drop = self.attn_drop.p if self.training else 0.0
        probs = None
        if capture == GRAD:  # the output from the explicit probabilities, so they are in its graph
            probs = ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)  # (B, H, 1, N)
            out = self.attn_drop(probs) @ v  # (B, H, 1, hd)
        else:
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=drop)  # (B, H, 1, hd)
        if capture is True:  # beside the fused output, which capturing never changes
            probs = ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)  # (B, H, 1, N): one row per head
        out = _mask_heads(out, head_mask)
        if edit is not None:
            out = edit("head", out)  # (B, H, 1, hd)
        out = out.transpose(1, 2).reshape(b, 1, c)
        return self.proj_drop(self.proj(out)), probs


class ClassAttentionBlock(nn.Module):
    """CaiT's class-attention block: updates [CLS] only, reading the (frozen) patch tokens."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        dim, eps, layer_scale = config.embed_dim, config.layer_norm_eps, config.layer_scale_init
        self.norm1 = make_norm(config.norm, dim, eps)
        self.attn = ClassAttention(config)
        self.ls1 = LayerScale(dim, layer_scale) if layer_scale is not None else nn.Identity()
        self.drop_path1 = DropPath(0.0)
        self.norm2 = make_norm(config.norm, dim, eps)
        self.mlp = make_mlp(config, config.class_attn_mlp_ratio)
        self.ls2 = LayerScale(dim, layer_scale) if layer_scale is not None else nn.Identity()
        self.drop_path2 = DropPath(0.0)

    def forward(self, patches: torch.Tensor, cls: torch.Tensor, *, head_mask: torch.Tensor | None = None,
                capture: bool | str = False, edit: Edit | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """edit: as Block's at the sites "head", "attn" and "mlp" ([CLS]'s alone); the model edits "resid"."""
        u = torch.cat([cls, patches], dim=1)  # (B, 1+N, D)
        attn_out, probs = self.attn(self.norm1(u), head_mask=head_mask, capture=capture, edit=edit)
        branch = self.drop_path1(self.ls1(attn_out))
        cls = cls + (branch if edit is None else edit("attn", branch))
        branch = self.drop_path2(self.ls2(self.mlp(self.norm2(cls))))
        cls = cls + (branch if edit is None else edit("mlp", branch))
        return cls, probs


def _attend_latent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, capture: bool | str
                   ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A pool's latent query (B, H, 1, hd) over keys and values (B, H, N, hd): its output (B, H, 1, hd) and, when
    captured, its attention (B, H, 1, N); with GRAD the output is computed from that attention (in its graph)."""
    probs = ((q * scale) @ k.transpose(-2, -1)).softmax(dim=-1) if capture else None
    out = probs @ v if capture == GRAD and probs is not None else F.scaled_dot_product_attention(q, k, v)
    return out, probs


class _LatentPool(nn.Module):
    """A learned latent query's heads (`pool_heads`, else the blocks'), shared by the two attention pools."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.num_heads = config.pool_heads or config.num_heads
        self.head_dim = config.embed_dim // self.num_heads
        self.scale = self.head_dim**-0.5
        self.latent = nn.Parameter(torch.zeros(1, 1, config.embed_dim))


class AttentionPool(_LatentPool):
    """Multi-head attention pooling (MAP, SigLIP's and the Perception Encoder's head): one learned latent
    query attends over the patch tokens (with `pool_prefix` over every token), then a residual MLP on
    its normed output (timm's AttentionPoolLatent, HF's SiglipMultiheadAttentionPoolingHead). Its
    heads and MLP width may differ from the blocks' (`pool_heads`, `pool_mlp_ratio`: PE's)."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__(config)
        dim = config.embed_dim
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm = make_norm(config.norm, dim, config.layer_norm_eps)
        self.mlp = Mlp(dim, config.pool_mlp_hidden, config.drop_rate, config.mlp)

    def forward(self, x: torch.Tensor, capture: bool | str = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, N, D) -> pooled (B, D), and with `capture` the latent's attention (B, heads, 1, N) (GRAD: the
        output computed from it, so it is in the output's graph)."""
        b, n, c = x.shape
        q = self.q(self.latent).reshape(1, 1, self.num_heads, self.head_dim).transpose(1, 2).expand(b, -1, -1, -1)
        kv = self.kv(x).reshape(b, n, 2, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        k, v = kv.unbind(0)  # (B, H, N, hd)
        out, probs = _attend_latent(q, k, v, self.scale, capture)
        out = self.proj(out.transpose(1, 2).reshape(b, c))  # (B, D)
        return out + self.mlp(self.norm(out)), probs


class QueryPool(_LatentPool):
    """AIMv2's attention-pooling head (HF's Aimv2AttentionPoolingHead): a learned query, used as it is (no
    query projection), attends over the patch tokens; the heads' outputs go through one output layer. No
    norm, no MLP."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__(config)
        dim = config.embed_dim
        self.k = nn.Linear(dim, dim, bias=config.qkv_bias)
        self.v = nn.Linear(dim, dim, bias=config.qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, capture: bool | str = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, N, D) -> pooled (B, D), and with `capture` the query's attention (B, heads, 1, N) (GRAD: the output
        computed from it, as AttentionPool's)."""
        b, n, c = x.shape
        q = self.latent.reshape(1, 1, self.num_heads, self.head_dim).transpose(1, 2).expand(b, -1, -1, -1)
        k = self.k(x).reshape(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, N, hd)
        v = self.v(x).reshape(b, n, self.num_heads, self.head_dim).transpose(1, 2)
        out, probs = _attend_latent(q, k, v, self.scale, capture)
        return self.proj(out.transpose(1, 2).reshape(b, c)), probs
