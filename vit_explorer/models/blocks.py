"""Transformer blocks: multi-head self-attention (optionally talking heads, an additive bias), MLPs
(GELU, quick-GELU, SwiGLU, with an optional sub-LN), LayerScale, drop-path, CaiT's class-attention
block, and the attention-pool (MAP) head. Parameter names follow timm's so checkpoints map
one to one.

Each block calls its named hook sites (models/hooks.py, TransformerLens's names) as it runs. Attention runs the
fused `scaled_dot_product_attention` unless a hook sits on the block's `attn.hook_pattern` or
`attn.hook_attn_scores` (or the block has talking heads, which mix heads around the softmax): then the
probabilities are formed explicitly and the hooks see them. A hook that edits the pattern (or a backward hook, or a
gradient through it) makes the output come from the pattern, so an edit changes the output and a gradient is the
real one (the fused kernel's numbers to ~1e-6); a hook that only reads leaves the fused output, bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from .hooks import HookPoint
from .norms import make_norm
from .position import SCHEMES, apply_rope

if TYPE_CHECKING:
    from .config import ViTConfig


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
        self.hook_pre = HookPoint("hook_pre")  # (B, T, hidden) before the activation
        self.hook_post = HookPoint("hook_post")  # (B, T, hidden) the hidden activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.hook_post(self.act(self.hook_pre(self.fc1(x))))  # (B, T, hidden)
        out: torch.Tensor = self.drop2(self.fc2(self.norm(self.drop1(hidden))))
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
        self.hook_pre = HookPoint("hook_pre")  # (B, T, hidden) the gate before its activation
        self.hook_pre_linear = HookPoint("hook_pre_linear")  # (B, T, hidden) the value half
        self.hook_post = HookPoint("hook_post")  # (B, T, hidden) the gated activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.hook_post(self.act(self.hook_pre(self.fc1_g(x))) * self.hook_pre_linear(self.fc1_x(x)))
        out: torch.Tensor = self.drop2(self.fc2(self.norm(self.drop1(hidden))))
        return out


def make_mlp(config: ViTConfig, ratio: float) -> nn.Module:
    hidden = int(config.embed_dim * ratio)
    d, eps, kind, bias = config.embed_dim, config.layer_norm_eps, config.norm, config.proj_bias
    if config.mlp == "swiglu":
        return SwiGLU(d, hidden, config.drop_rate, config.mlp_norm, eps, norm_kind=kind, bias=bias)
    return Mlp(d, hidden, config.drop_rate, config.mlp, config.mlp_norm, eps, norm_kind=kind, bias=bias)


def _heads_site(site: HookPoint, x: torch.Tensor) -> torch.Tensor:
    """A per-head site sees (B, T, heads, hd), TransformerLens's layout; attention computes in (B, heads, T, hd)."""
    return site(x.transpose(1, 2)).transpose(1, 2) if site.active else x


def _through_pattern(site: HookPoint, probs: torch.Tensor, v: torch.Tensor, drop: nn.Module,
                     fused: Callable[[], torch.Tensor]) -> torch.Tensor:
    """Show the probabilities (B, H, R, N) to the pattern site's hooks, then attend. The output comes from what the
    hooks leave when they edit it (return another tensor, or change it in place where torch counts versions: not
    under inference_mode, where an edit must return a new tensor), when a backward hook is there or a gradient
    flows through it; a hook that only reads leaves the fused kernel's output, so reading never changes the
    numbers the model computes."""
    version = None if probs.is_inference() else probs._version
    seen = site(probs)
    edited = seen is not probs or (version is not None and probs._version != version)
    if edited or site.has_backward or seen.requires_grad:
        out: torch.Tensor = drop(seen) @ v
        return out
    return fused()


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
        self.hook_q, self.hook_k, self.hook_v = HookPoint("hook_q"), HookPoint("hook_k"), HookPoint("hook_v")
        if SCHEMES[config.pos_embed].rotates:  # after the rotation, as TransformerLens's
            self.hook_rot_q, self.hook_rot_k = HookPoint("hook_rot_q"), HookPoint("hook_rot_k")
        self.hook_attn_scores = HookPoint("hook_attn_scores")  # (B, H, N, N) before the softmax
        self.hook_pattern = HookPoint("hook_pattern")  # (B, H, N, N) the probabilities
        self.hook_z = HookPoint("hook_z")  # (B, N, H, hd) each head's output, before the output projection

    def project_qkv(self, x: torch.Tensor) -> torch.Tensor:
        if not hasattr(self, "q_bias"):
            return F.linear(x, self.qkv.weight, self.qkv.bias)
        bias = torch.cat([self.q_bias, torch.zeros_like(self.q_bias), self.v_bias])
        return F.linear(x, self.qkv.weight, bias)

    def forward(self, x: torch.Tensor, *, rope: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                num_prefix: int = 0) -> torch.Tensor:
        """x (B, N, D) -> (B, N, D); bias: (heads, N, N) added to the logits (BEiT's relative position bias)."""
        b, n, c = x.shape
        qkv = self.project_qkv(x).reshape(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # each (B, H, N, hd)
        q, k, v = _heads_site(self.hook_q, q), _heads_site(self.hook_k, k), _heads_site(self.hook_v, v)
        if rope is not None:
            q, k = apply_rope(q, rope, num_prefix, self.rope_half), apply_rope(k, rope, num_prefix, self.rope_half)
            q, k = _heads_site(self.hook_rot_q, q), _heads_site(self.hook_rot_k, k)
        if bias is not None:
            bias = bias.to(q.dtype)
        def fused() -> torch.Tensor:
            drop = self.attn_drop.p if self.training else 0.0
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=drop)  # (B, H, N, hd)

        if self.talking_heads or self.hook_pattern.active or self.hook_attn_scores.active:
            out = self.attend(q, k, v, bias, fused)  # (B, H, N, hd)
        else:
            out = fused()
        z = self.hook_z(out.transpose(1, 2))  # (B, N, H, hd)
        return self.proj_drop(self.proj(z.reshape(b, n, c)))

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None,
               fused: Callable[[], torch.Tensor]) -> torch.Tensor:
        """The explicit path: scores, softmax (talking heads mix heads around it), the pattern site, then A v (or,
        where the hooks only read, the fused kernel's output: `_through_pattern`)."""
        logits = (q * self.scale) @ k.transpose(-2, -1)  # (B, H, N, N)
        if bias is not None:
            logits = logits + bias
        if self.talking_heads:
            logits = self.proj_l(logits.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        logits = self.hook_attn_scores(logits)
        probs = _softmax(logits) if not self.hook_attn_scores.active else logits.softmax(dim=-1)
        if self.talking_heads:
            probs = self.proj_w(probs.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        if self.talking_heads or self.hook_attn_scores.active:  # no fused kernel computes these
            out: torch.Tensor = self.attn_drop(self.hook_pattern(probs)) @ v  # (B, H, N, hd)
            return out
        return _through_pattern(self.hook_pattern, probs, v, self.attn_drop, fused)  # (B, H, N, hd)


class StreamBlock(nn.Module):
    """A block's residual-stream sites; each branch's output includes its LayerScale and drop-path."""

    def __init__(self) -> None:
        super().__init__()
        self.hook_resid_pre = HookPoint("hook_resid_pre")
        self.hook_ln1 = HookPoint("ln1.hook_normalized")
        self.hook_attn_out = HookPoint("hook_attn_out")
        self.hook_resid_mid = HookPoint("hook_resid_mid")
        self.hook_ln2 = HookPoint("ln2.hook_normalized")
        self.hook_mlp_out = HookPoint("hook_mlp_out")
        self.hook_resid_post = HookPoint("hook_resid_post")


class Block(StreamBlock):
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
                num_prefix: int = 0) -> torch.Tensor:
        x = self.hook_resid_pre(x)  # (B, T, D)
        attn_out = self.attn(self.hook_ln1(self.norm1(x)), rope=rope, bias=bias, num_prefix=num_prefix)
        x = self.hook_resid_mid(x + self.hook_attn_out(self.drop_path1(self.ls1(attn_out))))
        mlp_out = self.hook_mlp_out(self.drop_path2(self.ls2(self.mlp(self.hook_ln2(self.norm2(x))))))
        out: torch.Tensor = self.hook_resid_post(x + mlp_out)  # (B, T, D)
        return out


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
        self.hook_q, self.hook_k, self.hook_v = HookPoint("hook_q"), HookPoint("hook_k"), HookPoint("hook_v")
        self.hook_pattern = HookPoint("hook_pattern")  # (B, H, 1, N): one row per head, the query is [CLS]
        self.hook_z = HookPoint("hook_z")  # (B, 1, H, hd)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        """u = [CLS; patches] (B, 1+N, D) -> [CLS]'s update (B, 1, D)."""
        b, n, c = u.shape
        q = self.q(u[:, :1]).reshape(b, 1, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, 1, hd)
        k = self.k(u).reshape(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, N, hd)
        v = self.v(u).reshape(b, n, self.num_heads, self.head_dim).transpose(1, 2)
        q, k, v = _heads_site(self.hook_q, q), _heads_site(self.hook_k, k), _heads_site(self.hook_v, v)
        def fused() -> torch.Tensor:
            drop = self.attn_drop.p if self.training else 0.0
            return F.scaled_dot_product_attention(q, k, v, dropout_p=drop)  # (B, H, 1, hd)

        if self.hook_pattern.active:
            probs = ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)  # (B, H, 1, N)
            out = _through_pattern(self.hook_pattern, probs, v, self.attn_drop, fused)  # (B, H, 1, hd)
        else:
            out = fused()
        z = self.hook_z(out.transpose(1, 2))  # (B, 1, H, hd)
        return self.proj_drop(self.proj(z.reshape(b, 1, c)))


class ClassAttentionBlock(StreamBlock):
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

    def forward(self, patches: torch.Tensor, cls: torch.Tensor) -> torch.Tensor:
        """[CLS] (B, 1, D) reads itself and the patches (B, N, D); its hook_resid_pre (the whole sequence it reads)
        is called by the model, which owns the sequence; the other stream sites hold [CLS] alone."""
        attn_out = self.attn(self.hook_ln1(self.norm1(torch.cat([cls, patches], dim=1))))  # (B, 1, D)
        cls = self.hook_resid_mid(cls + self.hook_attn_out(self.drop_path1(self.ls1(attn_out))))
        mlp_out = self.hook_mlp_out(self.drop_path2(self.ls2(self.mlp(self.hook_ln2(self.norm2(cls))))))
        out: torch.Tensor = self.hook_resid_post(cls + mlp_out)  # (B, 1, D)
        return out


def _attend_latent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, site: HookPoint
                   ) -> torch.Tensor:
    """A pool's latent query (B, H, 1, hd) over keys and values (B, H, N, hd): its output (B, H, 1, hd); with a hook
    at the pattern site the attention (B, H, 1, N) is formed and shown to it (`_through_pattern`)."""
    def fused() -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v)

    if not site.active:
        return fused()
    return _through_pattern(site, ((q * scale) @ k.transpose(-2, -1)).softmax(dim=-1), v, nn.Identity(), fused)


class _LatentPool(nn.Module):
    """A learned latent query's heads (`pool_heads`, else the blocks'), shared by the two attention pools."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.num_heads = config.pool_heads or config.num_heads
        self.head_dim = config.embed_dim // self.num_heads
        self.scale = self.head_dim**-0.5
        self.latent = nn.Parameter(torch.zeros(1, 1, config.embed_dim))
        self.hook_pattern = HookPoint("hook_pattern")  # (B, heads, 1, N): the latent query over the tokens


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
        self.hook_attn_out = HookPoint("hook_attn_out")  # (B, D) the latent query's attention output, projected
        self.hook_ln = HookPoint("ln.hook_normalized")  # (B, D) its norm, which the MLP reads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, N, D) -> pooled (B, D)."""
        b, n, c = x.shape
        q = self.q(self.latent).reshape(1, 1, self.num_heads, self.head_dim).transpose(1, 2).expand(b, -1, -1, -1)
        kv = self.kv(x).reshape(b, n, 2, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        k, v = kv.unbind(0)  # (B, H, N, hd)
        out = _attend_latent(q, k, v, self.scale, self.hook_pattern)
        out = self.hook_attn_out(self.proj(out.transpose(1, 2).reshape(b, c)))  # (B, D)
        pooled: torch.Tensor = out + self.mlp(self.hook_ln(self.norm(out)))
        return pooled


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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, N, D) -> pooled (B, D)."""
        b, n, c = x.shape
        q = self.latent.reshape(1, 1, self.num_heads, self.head_dim).transpose(1, 2).expand(b, -1, -1, -1)
        k = self.k(x).reshape(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, N, hd)
        v = self.v(x).reshape(b, n, self.num_heads, self.head_dim).transpose(1, 2)
        out = _attend_latent(q, k, v, self.scale, self.hook_pattern)
        pooled: torch.Tensor = self.proj(out.transpose(1, 2).reshape(b, c))
        return pooled
