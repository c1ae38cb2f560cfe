"""AttnLRP (Achtibat et al., ICML 2024) and its CP-LRP variant (Ali et al., ICML 2022) as modified gradients, the
way LXT 2.1's efficient implementation applies them: relevance at a value x is x * (its modified gradient), so one
forward and one backward pass give the input's relevance, and every linear layer (patch embedding, q/k/v, output
projections, MLP layers, LayerScale, the heads, the mean over patches, the position embedding's add) follows
LRP-0 by its plain gradient, its bias absorbing its share. The rules change the gradient where LRP-0 is not the rule:

- a norm (LayerNorm, RMSNorm): the identity rule through the normalisation, its scale 1/std held constant (the
  centring stays, it is linear);
- an element-wise activation (GELU, quick-GELU, SiLU): the identity rule, gradient f(x) / x (LXT's eps 1e-10);
- attention: the softmax's own gradient is AttnLRP's softmax rule (Prop. 3.1), and the uniform rule on the two
  matrix products q k^T and A v halves each operand's share: the gradient at q and k is divided by 4 (a half of
  A's half), at v by 2. CP-LRP instead holds the probabilities constant (q and k carry no gradient) and
  gives A v's relevance to v;
- SwiGLU's gate times value: the uniform rule (each halved) after the gate's identity rule; CP-LRP holds the gate
  constant.

The rules are hooks on the model's named sites (`hooks`): each replaces the value at a site by the same value
whose gradient is the rule's, computed from the values the pass produced at the sites before it (a norm's input,
an activation's input), so the numbers are the real pass's. An optional gamma per linear layer type (Montavon et
al. 2019; zennit's Gamma) widens the positive weights: `Rules.gamma`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ..models import TokenLayout, VisionTransformer, ViTConfig
from ..models.blocks import AttentionPool, Mlp, SwiGLU
from ..models.hooks import HookFn, HookPoint

EPS = 1e-10  # LXT's identity-rule stabiliser
# the linear layers a gamma may widen: the blocks' attention output projections, every MLP's first and second layers
# (SwiGLU: its gate and value both are fc1)
GAMMA_LAYERS = ("proj", "fc1", "fc2")


@dataclass(frozen=True)
class Rules:
    """conservative: CP-LRP (the attention probabilities and SwiGLU's gate held constant) instead of AttnLRP;
    gamma: per linear layer type (GAMMA_LAYERS) the gamma rule's gamma (absent or 0: LRP-0)."""

    conservative: bool = False
    gamma: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = set(self.gamma) - set(GAMMA_LAYERS)
        if unknown:
            raise ValueError(f"gamma for {', '.join(sorted(unknown))}: choose layer types from {GAMMA_LAYERS}")
        if any(g < 0 for g in self.gamma.values()):
            raise ValueError("gamma must be >= 0")


def with_gradient(value: torch.Tensor, surrogate: torch.Tensor, factor: float = 1.0) -> torch.Tensor:
    """`value` exactly, with the gradient of `surrogate` (times `factor`) flowing back through it."""
    delta = surrogate - surrogate.detach()
    return value.detach() + (delta if factor == 1.0 else delta * factor)


def scale_gradient(x: torch.Tensor, factor: float) -> torch.Tensor:
    """x exactly, its gradient multiplied by `factor` (0: held constant); a view of x with a gradient hook, one
    operation less each way than with_gradient(x, x, factor)."""
    if factor == 0:
        return x.detach()
    if factor == 1.0 or not x.requires_grad:
        return x
    y = x.view_as(x)
    y.register_hook(lambda g: g * factor)  # type: ignore[no-untyped-call]
    return y


def norm_rule(norm: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The identity rule through a norm's normalisation: y = norm(x) (..., D) with 1/std (LayerNorm) or 1/rms
    (RMSNorm) held constant (LXT's layer_norm_forward / rms_norm_forward)."""
    if isinstance(norm, nn.Identity):
        return y
    xf = x.float()
    if isinstance(norm, nn.LayerNorm):
        centred = xf - xf.mean(dim=-1, keepdim=True)
        scale = (centred.pow(2).mean(dim=-1, keepdim=True) + norm.eps).rsqrt()
        out = centred * scale.detach()
    elif isinstance(norm, nn.RMSNorm):
        eps = norm.eps if norm.eps is not None else torch.finfo(xf.dtype).eps
        out = xf * (xf.pow(2).mean(dim=-1, keepdim=True) + eps).rsqrt().detach()
    else:
        raise ValueError(f"AttnLRP: no rule for the norm {type(norm).__name__}")
    weight, bias = getattr(norm, "weight", None), getattr(norm, "bias", None)
    if isinstance(weight, torch.Tensor):
        out = out * weight.float()
    if isinstance(bias, torch.Tensor):
        out = out + bias.float()
    return with_gradient(y, out.to(y.dtype))


def identity_rule(pre: torch.Tensor, post: torch.Tensor) -> torch.Tensor:
    """The identity rule on an element-wise activation post = f(pre): gradient post / pre (LXT's
    identity_rule_implicit, with its eps)."""
    return with_gradient(post, pre * (post / (pre + EPS)).detach())


def _stabilise(z: torch.Tensor) -> torch.Tensor:
    """zennit's default stabiliser: 1e-6 added away from zero (zero counts as positive)."""
    return z + ((z >= 0).to(z.dtype) * 2 - 1) * 1e-6


def gamma_rule(x: torch.Tensor, layer: nn.Linear, z: torch.Tensor, gamma: float) -> torch.Tensor:
    """zennit's generalised gamma rule on z = layer(x) (..., out), in LXT's gradient x input form: an output's
    relevance z * g goes back in proportion to the contributions of the same sign as z, widened by gamma (where
    z > 0: x+ (W + gamma W+), x- (W + gamma W-) and the bias b + gamma b+; where z < 0 the mirror image)."""
    w, b = layer.weight, layer.bias
    up, down = w + gamma * w.clamp(min=0), w + gamma * w.clamp(max=0)
    b_up = None if b is None else b + gamma * b.clamp(min=0)
    b_down = None if b is None else b + gamma * b.clamp(max=0)
    px, nx = x.clamp(min=0), x.clamp(max=0)
    pos = F.linear(px, up, b_up) + F.linear(nx, down)  # the denominator where z > 0
    neg = F.linear(px, down, b_down) + F.linear(nx, up)  # where z < 0
    share_pos = ((z > 0).to(z.dtype) * z / _stabilise(pos)).detach()
    share_neg = ((z < 0).to(z.dtype) * z / _stabilise(neg)).detach()
    return with_gradient(z, pos * share_pos + neg * share_neg)


def refusal(config: ViTConfig) -> str | None:
    """Why the rules do not cover a model of this config (None: they do): the hybrid stem alone."""
    if config.stem == "hybrid":
        return ("the hybrid stem's ResNet (GroupNorm, max-pool) has no rule in AttnLRP or LXT; use "
                "gradient-x-input or integrated-gradients, which cover it")
    return None


class _Pass:
    """The values a pass has produced so far at the sites the rules read (kept by hooks, in forward order)."""

    def __init__(self) -> None:
        self.seen: dict[str, torch.Tensor] = {}

    def keep(self, name: str) -> tuple[str, HookFn]:
        def fn(x: torch.Tensor, hook: HookPoint) -> None:
            self.seen[name] = x
        return name, fn

    def replace(self, name: str, rule: Callable[[torch.Tensor], torch.Tensor]) -> tuple[str, HookFn]:
        return name, lambda y, hook: rule(y)


def _gamma_at(p: _Pass, x_site: str, out_site: str, layer: nn.Linear, gamma: float,
              out_of: Callable[[torch.Tensor], torch.Tensor] = lambda y: y,
              take: Callable[[torch.Tensor], torch.Tensor] = lambda x: x) -> list[tuple[str, HookFn]]:
    """The gamma rule on `layer`, whose input is the value at `x_site` (shaped by `take`) and whose output, through
    `out_of` (LayerScale, a residual), is the value at `out_site`."""
    def rule(y: torch.Tensor) -> torch.Tensor:
        x = take(p.seen[x_site])
        return with_gradient(y, out_of(gamma_rule(x, layer, layer(x), gamma)))
    return [p.keep(x_site), p.replace(out_site, rule)]


def _mlp_hooks(p: _Pass, prefix: str, mlp: nn.Module, x_site: str, out_site: str, rules: Rules,
               out_of: Callable[[torch.Tensor], torch.Tensor] = lambda y: y) -> list[tuple[str, HookFn]]:
    """The activation's identity rule (SwiGLU: and the product's uniform rule) at `{prefix}hook_post`; with a gamma,
    fc1's rule at its output from its input at `x_site`; a sub-LN's identity rule and fc2's gamma at `out_site`
    (`out_of` turns fc2's output into that site's value: LayerScale, the pool's residual)."""
    assert isinstance(mlp, Mlp | SwiGLU)
    pre, post = f"{prefix}hook_pre", f"{prefix}hook_post"
    g1, g2 = rules.gamma.get("fc1", 0.0), rules.gamma.get("fc2", 0.0)
    out: list[tuple[str, HookFn]] = [p.keep(x_site)] if g1 else []
    firsts = [(pre, mlp.fc1_g), (f"{prefix}hook_pre_linear", mlp.fc1_x)] if isinstance(mlp, SwiGLU) else \
        [(pre, mlp.fc1)]

    def fc1(layer: nn.Linear) -> Callable[[torch.Tensor], torch.Tensor]:
        return lambda z: gamma_rule(p.seen[x_site], layer, z, g1)

    for site, layer in firsts:
        if g1:
            out.append(p.replace(site, fc1(layer)))
        out.append(p.keep(site))
    if isinstance(mlp, SwiGLU):
        lin = f"{prefix}hook_pre_linear"

        def swiglu(y: torch.Tensor) -> torch.Tensor:
            gate, value = p.seen[pre], p.seen[lin]
            if rules.conservative:  # the gate held constant (LXT's cp_gated_mlp_forward)
                return with_gradient(y, mlp.act(gate).detach() * value)
            return with_gradient(y, identity_rule(gate, mlp.act(gate)) * value, 0.5)
        out.append(p.replace(post, swiglu))
    else:
        out.append(p.replace(post, lambda y: identity_rule(p.seen[pre], y)))
    if isinstance(mlp.norm, nn.Identity):
        return out + (_gamma_at(p, post, out_site, mlp.fc2, g2, out_of) if g2 else [])

    def sub_ln(y: torch.Tensor) -> torch.Tensor:  # EVA-02's norm between the activation and fc2
        h = p.seen[post]
        normed = norm_rule(mlp.norm, h, mlp.norm(h))
        z = mlp.fc2(normed)
        return with_gradient(y, out_of(gamma_rule(normed, mlp.fc2, z, g2) if g2 else z))
    return out + [p.keep(post), p.replace(out_site, sub_ln)]


def hooks(model: VisionTransformer, rules: Rules, layout: TokenLayout) -> list[tuple[str, HookFn]]:
    """The (site, hook) pairs that make one pass of `model` (a VisionTransformer) propagate AttnLRP's (or
    CP-LRP's) modified gradient; ValueError where `refusal` gives a reason."""
    cfg = model.config
    reason = refusal(cfg)
    if reason is not None:
        raise ValueError(f"AttnLRP: {reason}")
    p = _Pass()
    qk = 0.0 if rules.conservative else 0.25  # CP-LRP: the probabilities carry no relevance back
    v = 1.0 if rules.conservative else 0.5
    out: list[tuple[str, HookFn]] = []

    def norm_at(norm: nn.Module, x_site: str, y_site: str, take: Callable[[torch.Tensor], torch.Tensor]
                = lambda x: x) -> None:
        if not isinstance(norm, nn.Identity):
            out.extend([p.keep(x_site), p.replace(y_site, lambda y: norm_rule(norm, take(p.seen[x_site]), y))])

    norm_at(model.embed_norm, "hook_stem", "hook_embed", lambda s: s.flatten(2).transpose(1, 2))
    norm_at(model.norm_pre, "hook_with_pos", "hook_embedded")
    for stack in ("blocks", "class_blocks"):
        for i, block in enumerate(getattr(model, stack)):
            prefix = f"{stack}.{i}."
            norm_at(block.norm1, prefix + "hook_resid_pre", prefix + "ln1.hook_normalized")
            out.extend([p.replace(prefix + "attn.hook_q", lambda x: scale_gradient(x, qk)),
                        p.replace(prefix + "attn.hook_k", lambda x: scale_gradient(x, qk)),
                        p.replace(prefix + "attn.hook_v", lambda x: scale_gradient(x, v))])
            if rules.gamma.get("proj"):
                out.extend(_gamma_at(p, prefix + "attn.hook_z", prefix + "hook_attn_out", block.attn.proj,
                                     rules.gamma["proj"], block.ls1, lambda z: z.flatten(2)))  # (B, T, D)
            norm_at(block.norm2, prefix + "hook_resid_mid", prefix + "ln2.hook_normalized")
            out.extend(_mlp_hooks(p, prefix + "mlp.", block.mlp, prefix + "ln2.hook_normalized",
                                  prefix + "hook_mlp_out", rules, block.ls2))
    last = f"class_blocks.{cfg.class_attn_depth - 1}."

    def final_input() -> torch.Tensor:
        """What the final norm reads: the last block's output (CaiT: [CLS] from the class blocks, the patches)."""
        if cfg.class_attn_depth:
            return torch.cat([p.seen[last + "hook_resid_post"], p.seen[last + "hook_resid_pre"][:, 1:]], dim=1)
        return p.seen[f"blocks.{cfg.depth - 1}.hook_resid_post" if cfg.depth else "hook_embedded"]

    if not isinstance(model.norm, nn.Identity):
        sites = [last + "hook_resid_pre", last + "hook_resid_post"] if cfg.class_attn_depth else \
            [f"blocks.{cfg.depth - 1}.hook_resid_post" if cfg.depth else "hook_embedded"]
        out.extend([*(p.keep(site) for site in sites),
                    p.replace("ln_final.hook_normalized", lambda y: norm_rule(model.norm, final_input(), y))])
    pool = model.attn_pool if hasattr(model, "attn_pool") else None
    if pool is not None:
        # the pool's keys and values both come from the final tokens: halve there (v's share), and halve again at
        # the pattern (k's share of q k^T); CP-LRP: the pattern is constant and v keeps A v's relevance
        out.append(p.replace("ln_final.hook_normalized", lambda x: scale_gradient(x, v)))
        out.append(p.replace("attn_pool.hook_pattern", lambda a: scale_gradient(a, 0.0 if rules.conservative
                                                                                    else 0.5)))
        if isinstance(pool, AttentionPool):
            norm_at(pool.norm, "attn_pool.hook_attn_out", "attn_pool.ln.hook_normalized")
            out.extend(_mlp_hooks(p, "attn_pool.mlp.", pool.mlp, "attn_pool.ln.hook_normalized", "hook_pooled",
                                  rules, lambda y: p.seen["attn_pool.hook_attn_out"] + y))
    if not isinstance(model.fc_norm, nn.Identity):
        pool_parts = model.pool  # the pooling record: [CLS], the mean of the patches or both, then fc_norm
        out.extend([p.keep("ln_final.hook_normalized"), p.replace(
            "hook_pooled", lambda y: norm_rule(model.fc_norm, pool_parts.concat(p.seen["ln_final.hook_normalized"],
                                                                                layout), y))])
    return out
