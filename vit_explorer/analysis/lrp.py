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
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..models.blocks import Block, Mlp, SwiGLU

EPS = 1e-9  # the authors' stabiliser


def _f32(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The rules divide by small sums: a bf16 / fp16 model's activations and weights go through them in float32."""
    return tuple(t.float() for t in tensors)


def safe_divide(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a / b with b pushed away from zero by EPS, and 0 where b is exactly 0 (the authors' safe_divide)."""
    den = b.clamp(min=EPS) + b.clamp(max=EPS)
    den = den + (den == 0).to(den.dtype) * EPS
    return a / den * (b != 0).to(b.dtype)


def linear_rule(x: torch.Tensor, weight: torch.Tensor | nn.Module, relevance: torch.Tensor) -> torch.Tensor:
    """Eq. 4, alpha = 1, beta = 0: relevance (..., out) of y = x W^T -> (..., in), shared in proportion to
    the same-sign contributions x_j+ w_ij+ and x_j- w_ij-. `weight` may be the nn.Linear itself."""
    if isinstance(weight, nn.Module):
        assert isinstance(weight, nn.Linear), f"LRP: no linear rule for {type(weight).__name__}"
        weight = weight.weight
    x, weight, relevance = _f32(x, weight, relevance)
    pw, nw = weight.clamp(min=0), weight.clamp(max=0)
    px, nx = x.clamp(min=0), x.clamp(max=0)
    s = safe_divide(relevance, F.linear(px, pw) + F.linear(nx, nw))  # (..., out)
    return px * (s @ pw) + nx * (s @ nw)


def matmul_rule(a: torch.Tensor, b: torch.Tensor, relevance: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 3 on both operands of z = a @ b, each halved: (..., n, m) @ (..., m, p) with relevance (..., n, p)."""
    a, b, relevance = _f32(a, b, relevance)
    s = safe_divide(relevance, a @ b)  # (..., n, p)
    return a * (s @ b.transpose(-2, -1)) / 2, b * (a.transpose(-2, -1) @ s) / 2


def add_rule(a: torch.Tensor, b: torch.Tensor, relevance: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 3 and 6 for z = a + b: each branch's x * R / z, rescaled to its share of the incoming sum (per image)."""
    a, b, relevance = _f32(a, b, relevance)
    s = safe_divide(relevance, a + b)
    ra, rb = a * s, b * s
    dims = tuple(range(1, relevance.ndim))
    total = relevance.sum(dim=dims, keepdim=True)
    sa, sb = ra.sum(dim=dims, keepdim=True), rb.sum(dim=dims, keepdim=True)
    share_a = safe_divide(sa.abs(), sa.abs() + sb.abs()) * total
    share_b = safe_divide(sb.abs(), sa.abs() + sb.abs()) * total
    return ra * safe_divide(share_a, sa), rb * safe_divide(share_b, sb)


def mean_rule(x: torch.Tensor, relevance: torch.Tensor) -> torch.Tensor:
    """Eq. 3 for the mean over tokens (B, N, D) -> (B, D): each token's share x / (N mean) of the relevance."""
    x, relevance = _f32(x, relevance)
    return x * safe_divide(relevance, x.mean(dim=1))[:, None] / x.shape[1]


def block_sites(block: Block) -> list[str]:
    """The sites of one block whose values the rules read (local names, after `blocks.{i}.`)."""
    rotated = hasattr(block.attn, "hook_rot_q")
    qk = ["attn.hook_rot_q", "attn.hook_rot_k"] if rotated else ["attn.hook_q", "attn.hook_k"]
    return ["hook_resid_pre", "ln1.hook_normalized", *qk, "attn.hook_v", "attn.hook_pattern", "attn.hook_z",
            "hook_attn_out", "hook_resid_mid", "ln2.hook_normalized", "mlp.hook_post", "hook_mlp_out"]


def _mlp_relevance(mlp: nn.Module, x: torch.Tensor, post: torch.Tensor, relevance: torch.Tensor) -> torch.Tensor:
    """The MLP (Mlp or SwiGLU) from its input x (B, T, D) and its hidden activation (the pass's mlp.hook_post),
    relevance at its output -> at its input."""
    assert isinstance(mlp, Mlp | SwiGLU)
    hidden = mlp.norm(post)  # (B, T, hidden): fc2's input (the sub-LN, where there is one, passes relevance)
    if isinstance(mlp, SwiGLU):
        r_hidden = linear_rule(hidden, mlp.fc2.weight, relevance) / 2  # the product's two operands, halved
        return linear_rule(x, mlp.fc1_g.weight, r_hidden) + linear_rule(x, mlp.fc1_x.weight, r_hidden)
    return linear_rule(x, mlp.fc1.weight, linear_rule(hidden, mlp.fc2.weight, relevance))


def block_relevance(block: Block, values: dict[str, torch.Tensor], relevance: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """One pre-norm block: `values` its sites' values in the pass (block_sites), relevance (B, T, D) at its
    output -> (relevance at its input (B, T, D), relevance at its attention map (B, heads, T, T))."""
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

    r_mid, r_branch2 = add_rule(mid, branch2, relevance)
    r_mid = r_mid + _mlp_relevance(block.mlp, h2, values["mlp.hook_post"], r_branch2)  # norm2, LayerScale: through
    r_x, r_branch1 = add_rule(x, branch1, r_mid)
    r_heads = linear_rule(merged, attn.proj.weight, r_branch1).reshape(b, t, attn.num_heads, attn.head_dim)
    r_heads = r_heads.transpose(1, 2)  # (B, H, T, hd); a masked head's input is zero, so it gets none
    r_probs, r_v = matmul_rule(probs, v, r_heads)  # (B, H, T, T), (B, H, T, hd)
    r_q, r_k_t = matmul_rule(q, k.transpose(-2, -1), r_probs)  # the softmax passes it through to q k^T
    r_qkv = torch.stack([r_q, r_k_t.transpose(-2, -1), r_v]).permute(1, 3, 0, 2, 4).reshape(b, t, 3 * c)
    return r_x + linear_rule(h1, attn.qkv.weight, r_qkv), r_probs
