"""Layer-wise relevance propagation through the glass-box model's self-attention blocks, by the rules of
Chefer, Gur & Wolf 2021 ("Transformer Interpretability Beyond Attention Visualization"), as their code
applies them:

- linear layers: the alpha-beta rule with alpha = 1, beta = 0 (Eq. 4), biases carry no relevance;
- the two-operand products (q k^T, A v, SwiGLU's gate times value): Eq. 3 (x * grad, with the output's
  relevance over the output) on each operand, each halved so the sum is kept (Eq. 5);
- residual adds: Eq. 3 on each branch, then each branch scaled to its share |sum R_u| / (|sum R_u| +
  |sum R_v|) of the relevance that came in (Eq. 6), so the sum is kept exactly;
- the element-wise layers (LayerNorm, GELU, softmax, LayerScale, dropout, RoPE's rotation): the relevance
  passes through unchanged, as in the authors' implementation;
- mean pooling (GAP): Eq. 3.

The rules read every layer's input and output from the real forward pass, at the block's named hook sites
(`block_sites`; the head mask is already in `attn.hook_z`), never from a copy of the block;
`block_relevance` returns the relevance at the block's input and at its attention map, the R_A that
`relevance.attribution_rollout` weights by the gradient. Relevance is conserved from the output to the
block input wherever no layer's output is exactly zero (the rules' stabiliser drops it there).

A large linear layer's z+ is formed from its output at those sites (`linear_rule`'s `output`: q, k, v; fc1's
`mlp.hook_pre`; the branches where no LayerScale follows), so a hook that edits one of those outputs (rather than
an input, as the head mask does) changes that layer's z+ too, as it changes the add rule's branch values.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from ..models.blocks import Block, Mlp, SwiGLU

EPS = 1e-9  # the authors' stabiliser


def _f32(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The rules divide by small sums: a bf16 / fp16 model's activations and weights go through them in float32."""
    return tuple(t.float() for t in tensors)


def safe_divide(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a / b with b pushed away from zero by EPS, and 0 where b is exactly 0 (the authors' safe_divide: their
    b.clamp(min=EPS) + b.clamp(max=EPS) is b + EPS, and EPS where that is 0)."""
    den = b + EPS
    den = den.masked_fill_(den == 0, EPS)
    return (a / den).masked_fill_(b == 0, 0.0)


Output = Callable[[], torch.Tensor] | None  # a linear layer's x W^T in the pass (..., out), formed where it is used


def linear_rule(x: torch.Tensor, weight: torch.Tensor | nn.Module, relevance: torch.Tensor, output: Output = None
                ) -> torch.Tensor:
    """Eq. 4, alpha = 1, beta = 0: relevance (..., out) of y = x W^T -> (..., in), shared in proportion to
    the same-sign contributions x_j+ w_ij+ and x_j- w_ij-. `weight` may be the nn.Linear itself; `output`, the
    forward pass's x W^T (bias taken off), saves a product (`_activator`).

    z+ = x+ W+^T + x- W-^T >= 0, so the authors' safe_divide(R, z+) is R / (z+ + EPS) but for its 0 where z+ = 0;
    there each of that output's terms x+ w+ and x- w- is 0, so the R / EPS left in its place reaches no input and
    that mask is not formed. (One product of [x+, x-] against [W+, W-] instead of two was slower on a CPU.)"""
    if isinstance(weight, nn.Module):
        assert isinstance(weight, nn.Linear), f"LRP: no linear rule for {type(weight).__name__}"
        weight = weight.weight
    if x.dtype != torch.float32:  # a bf16 pass's x W^T has too few digits; a float64 one's rules run in float32
        output = None
    x, weight, relevance = _f32(x, weight, relevance)
    pw, nw = weight.clamp(min=0), weight.clamp(max=0)
    px, nx = x.clamp(min=0), x.clamp(max=0)
    s = relevance / _activator(x, weight, px, nx, pw, nw, output).add_(EPS)  # (..., out)
    return (px * (s @ pw)).addcmul_(nx, s @ nw)


WELL_POSED = 0.125  # z+ from x W^T where it is at least this share of |x| |W|^T (fewer digits lost than 3 bits)
REUSED = 1 << 22  # multiply-adds of a product above which forming z+ from x W^T is faster than the second product


def _activator(x: torch.Tensor, weight: torch.Tensor, px: torch.Tensor, nx: torch.Tensor, pw: torch.Tensor,
               nw: torch.Tensor, output: Output) -> torch.Tensor:
    """z+ = x+ W+^T + x- W-^T (..., out): two products, or from the pass's x W^T as (x W^T + |x| |W|^T) / 2 (one),
    each token row with an output below WELL_POSED of |x| |W|^T formed the first way (the sum cancels there). A
    small layer (under REUSED multiply-adds: the bundled model's) takes the two products: there the dozen
    element-wise operations of the other way cost more than the product they save."""
    if output is None or x.numel() * weight.shape[0] < REUSED:
        return F.linear(px, pw).add_(F.linear(nx, nw))
    size = F.linear(x.abs(), weight.abs())  # (..., out)
    z = (output() + size).mul_(0.5)
    poor = (z < size * WELL_POSED).flatten(0, -2).any(dim=-1)  # (rows,)
    if bool(poor.any()):
        rows, flat = poor.nonzero()[:, 0], z.view(-1, z.shape[-1])
        flat[rows] = F.linear(px.flatten(0, -2)[rows], pw).add_(F.linear(nx.flatten(0, -2)[rows], nw))
    return z


def matmul_rule(a: torch.Tensor, b: torch.Tensor, relevance: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 3 on both operands of z = a @ b, each halved: (..., n, m) @ (..., m, p) with relevance (..., n, p)."""
    a, b, relevance = _f32(a, b, relevance)
    s = safe_divide(relevance, a @ b).mul_(0.5)  # (..., n, p), the halving (exact in floats) done once
    return a * (s @ b.transpose(-2, -1)), b * (a.transpose(-2, -1) @ s)


def add_rule(a: torch.Tensor, b: torch.Tensor, relevance: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 3 and 6 for z = a + b: each branch's x * R / z, rescaled to its share of the incoming sum (per image)."""
    a, b, relevance = _f32(a, b, relevance)
    s = safe_divide(relevance, a + b)
    ra, rb = a * s, b * s
    dims = tuple(range(1, relevance.ndim))
    sums = torch.stack([ra.sum(dim=dims), rb.sum(dim=dims)])  # (2, B): each branch's total
    size = sums.abs()
    share = safe_divide(size, size.sum(dim=0)) * relevance.sum(dim=dims)  # (2, B): |s_u| / (|s_a| + |s_b|) of R's
    scale = safe_divide(share, sums).reshape(2, -1, *(1,) * (relevance.ndim - 1))
    return ra.mul_(scale[0]), rb.mul_(scale[1])


def mean_rule(x: torch.Tensor, relevance: torch.Tensor) -> torch.Tensor:
    """Eq. 3 for the mean over tokens (B, N, D) -> (B, D): each token's share x / (N mean) of the relevance."""
    x, relevance = _f32(x, relevance)
    return x * safe_divide(relevance, x.mean(dim=1))[:, None] / x.shape[1]


def block_sites(block: Block) -> list[str]:
    """The sites of one block whose values the rules read (local names, after `blocks.{i}.`)."""
    rotated = hasattr(block.attn, "hook_rot_q")
    qk = ["attn.hook_rot_q", "attn.hook_rot_k"] if rotated else ["attn.hook_q", "attn.hook_k"]
    return ["hook_resid_pre", "ln1.hook_normalized", *qk, "attn.hook_v", "attn.hook_pattern", "attn.hook_z",
            "hook_attn_out", "hook_resid_mid", "ln2.hook_normalized", "mlp.hook_pre", "mlp.hook_post", "hook_mlp_out"]


def _output(value: torch.Tensor | None, layer: nn.Module) -> Output:
    """x W^T of a linear layer from its output in the pass (..., out) or None, its bias taken off when asked for."""
    bias = getattr(layer, "bias", None)
    if value is None or bias is None:
        return None if value is None else lambda: value
    return lambda: value - bias


def _mlp_relevance(mlp: nn.Module, x: torch.Tensor, pre: torch.Tensor, post: torch.Tensor, out: torch.Tensor | None,
                   relevance: torch.Tensor) -> torch.Tensor:
    """The MLP (Mlp or SwiGLU) from its input x (B, T, D), fc1's (the gate's) output and the hidden activation
    (the pass's mlp.hook_pre and hook_post) and fc2's output where the pass shows it (else None), relevance at its
    output -> at its input."""
    assert isinstance(mlp, Mlp | SwiGLU)
    hidden = mlp.norm(post)  # (B, T, hidden): fc2's input (the sub-LN, where there is one, passes relevance)
    r_hidden = linear_rule(hidden, mlp.fc2.weight, relevance, _output(out, mlp.fc2))
    if isinstance(mlp, SwiGLU):  # the product's two operands, halved
        r_hidden = r_hidden / 2
        return linear_rule(x, mlp.fc1_g.weight, r_hidden, _output(pre, mlp.fc1_g)) + linear_rule(
            x, mlp.fc1_x.weight, r_hidden)
    return linear_rule(x, mlp.fc1.weight, r_hidden, _output(pre, mlp.fc1))


def _live_rows(relevance: torch.Tensor) -> torch.Tensor | None:
    """The tokens (k,) whose relevance (B, T, D) is not all zero in some image, or None when that is every token.
    The token-wise layers (the MLP, the output projection) give an all-zero row nothing, so they run on these rows
    only: in the last block that is the readout's row alone ([CLS]) until the attention spreads it."""
    live = relevance.ne(0).any(dim=-1).any(dim=0)  # (T,)
    return None if bool(live.all()) else live.nonzero()[:, 0]


def _on_rows(rows: torch.Tensor | None, rule: Callable[..., torch.Tensor], *tensors: torch.Tensor | None
             ) -> torch.Tensor:
    """`rule` on the given token rows of each (B, T, ...) tensor (the first one given), the other rows of its
    result 0."""
    if rows is None:
        return rule(*tensors)
    assert tensors[0] is not None
    part = rule(*(None if t is None else t[:, rows] for t in tensors))  # (B, k, ...)
    return part.new_zeros(part.shape[0], tensors[0].shape[1], *part.shape[2:]).index_copy_(1, rows, part)


def block_relevance(block: Block, values: dict[str, torch.Tensor], relevance: torch.Tensor, *, to_input: bool = True
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """One pre-norm block: `values` its sites' values in the pass (block_sites), relevance (B, T, D) at its
    output -> (relevance at its input (B, T, D), relevance at its attention map (B, heads, T, T)). With
    `to_input=False` (the first block, where only the attention map's relevance is wanted) the first is the
    residual's share alone: the rule through the qkv projection is not run."""
    attn = block.attn
    if attn.talking_heads:
        raise ValueError("LRP: the paper gives no rule for talking heads (CaiT)")
    x, h1, h2 = values["hook_resid_pre"], values["ln1.hook_normalized"], values["ln2.hook_normalized"]
    rotated = "attn.hook_rot_q" in values
    q = values["attn.hook_rot_q" if rotated else "attn.hook_q"].transpose(1, 2)  # (B, H, T, hd)
    k = values["attn.hook_rot_k" if rotated else "attn.hook_k"].transpose(1, 2)
    v, probs = values["attn.hook_v"].transpose(1, 2), values["attn.hook_pattern"]  # (B, H, T, hd), (B, H, T, T)
    b, t, c = x.shape
    merged = values["attn.hook_z"].reshape(b, t, c)  # each head's output (a masked head's is zero), merged
    branch1, mid, branch2 = values["hook_attn_out"], values["hook_resid_mid"], values["hook_mlp_out"]

    shown = not block.training  # in eval, each branch is its projection's output (times LayerScale, if any)
    rows = _live_rows(relevance)
    r_mid, r_branch2 = add_rule(mid, branch2, relevance)
    mlp_out = branch2 if shown and isinstance(block.ls2, nn.Identity) else None
    r_mid = r_mid + _on_rows(rows, partial(_mlp_relevance, block.mlp), h2, values["mlp.hook_pre"],  # norm2, LayerScale:
                             values["mlp.hook_post"], mlp_out, r_branch2)  # through
    r_x, r_branch1 = add_rule(x, branch1, r_mid)
    attn_out = branch1 if shown and isinstance(block.ls1, nn.Identity) else None

    def proj(z: torch.Tensor, r: torch.Tensor, y: torch.Tensor | None) -> torch.Tensor:
        return linear_rule(z, attn.proj.weight, r, _output(y, attn.proj))

    r_heads = _on_rows(rows, proj, merged, r_branch1, attn_out)
    r_heads = r_heads.reshape(b, t, attn.num_heads, attn.head_dim).transpose(1, 2)  # (B, H, T, hd); a masked
    # head's input is zero, so it gets none
    r_probs, r_v = matmul_rule(probs, v, r_heads)  # (B, H, T, T), (B, H, T, hd)
    if not to_input:
        return r_x, r_probs
    r_q, r_k_t = matmul_rule(q, k.transpose(-2, -1), r_probs)  # the softmax passes it through to q k^T
    r_qkv = torch.stack([r_q, r_k_t.transpose(-2, -1), r_v]).permute(1, 3, 0, 2, 4).reshape(b, t, 3 * c)

    def qkv() -> torch.Tensor:  # the pass's q, k, v (before RoPE) are the projection's output; less its bias
        out = torch.cat([values[f"attn.hook_{name}"].reshape(b, t, c) for name in "qkv"], dim=-1)  # (B, T, 3C)
        return out - attn.project_qkv(out.new_zeros(c))  # (BEiT's: q's and v's, k's zero)

    return r_x + linear_rule(h1, attn.qkv.weight, r_qkv, None if rotated else qkv), r_probs
