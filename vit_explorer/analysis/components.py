"""Which component computes the answer: the readout as an exact sum of the residual stream's parts (direct
logit attribution), the logit lens, and activation patching between two runs.

The residual stream after the blocks is a sum: the embedded input (patch embeddings as they enter, [MASK]
included; the prefix tokens; the position embedding), then for every block each head's output through its
slice of the attention projection, the projection's bias and the MLP's output (LayerScale folded into each).
A layer without a bias (AIMv2's) adds none. The final norm is linear once its scale is frozen at the run's own
value (TransformerLens' `apply_ln_to_stack`): a LayerNorm's centring applies to every part, its shift is a part of
its own; an RMSNorm (AIMv2) has neither, only its frozen divisor and its scale. The pooling is linear in the tokens
(the [CLS] row, the mean of the patches); an attention-pool head (SigLIP's and PE's MAP, AIMv2's query pool, with
its own number of heads, over the patches or every token) is linear in its values once its attention is frozen at
the run's own probabilities, so every part goes through the value projection (per pool head, weighted by that
head's probabilities) and the output projection, while the value bias, the projection bias and MAP's residual MLP
(nonlinear in the pooled vector) are parts of their own. The head's row for the target class then gives each
part's share, and the parts plus the head's bias add up to the target logit. A pre-norm on the embedded input
(CLIP, PE) is frozen the same way; a norm on the patch embeddings (AIMv2) comes before the parts (they enter
normed).

Without a classifier the target is the cosine with a reference embedding (the features' norm frozen) or the
projection on a given direction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..jobs import Job
from ..models import pooling
from ..models.blocks import AttentionPool, LayerScale, QueryPool
from ..models.hooks import HookFn
from ..models.vit import VisionTransformer

SITES = ("resid", "attn", "mlp", "head")  # what activation patching can replace: the hook sites of SITE_HOOKS
# a component -> its hook site in each block: the stream a block reads, what each branch adds (LayerScale
# included), each head's output (B, T, heads, hd). CaiT's class-attention blocks are counted after the blocks;
# their "resid" is the whole sequence [CLS; patches] they read, their "attn" and "mlp" [CLS]'s alone
SITE_HOOKS = {"resid": "hook_resid_pre", "attn": "hook_attn_out", "mlp": "hook_mlp_out", "head": "attn.hook_z"}
SiteEdit = Callable[[int, str, torch.Tensor], torch.Tensor | None]  # (layer, component, value) -> replacement


def site_name(model: VisionTransformer, layer: int, component: str) -> str:
    """The hook site of a component in block `layer` (class-attention blocks numbered after the blocks)."""
    depth = model.config.depth
    stack, i = ("blocks", layer) if layer < depth else ("class_blocks", layer - depth)
    return f"{stack}.{i}.{SITE_HOOKS[component]}"


def site_hooks(model: VisionTransformer, edit: SiteEdit, components: Sequence[str] = SITES
               ) -> list[tuple[str, HookFn]]:
    """Forward hooks that call edit(layer, component, value) at each component's site in every block."""
    def at(layer: int, component: str) -> HookFn:
        return lambda value, hook: edit(layer, component, value)

    return [(site_name(model, layer, c), at(layer, c)) for layer in range(model.config.num_blocks) for c in components]


@dataclass(frozen=True)
class Part:
    """One additive share of the target: `layer` and `head` are None where they do not apply."""

    name: str
    layer: int | None
    head: int | None
    value: float


@dataclass
class Decomposition:
    target: int  # the class index (features-only: the feature index, or -1 for the cosine with a reference)
    logit: float  # the model's own value of the target
    parts: list[Part]
    bias: float  # the head's bias for the target (0 without one)
    kind: str = "logit"  # "logit", "feature", "cosine" or "direction"

    @property
    def total(self) -> float:
        """The parts plus the bias: equal to `logit` up to rounding."""
        return sum(p.value for p in self.parts) + self.bias

    def by_layer(self, depth: int) -> list[float]:
        """The sum of each layer's parts (heads, projection bias, MLP), layers 0 .. depth-1."""
        sums = [0.0] * depth
        for p in self.parts:
            if p.layer is not None:
                sums[p.layer] += p.value
        return sums

    def heads(self, layers: int, heads: int) -> list[list[float]]:
        """(layers, heads) each head's share."""
        grid = [[0.0] * heads for _ in range(layers)]
        for p in self.parts:
            if p.head is not None and p.layer is not None:
                grid[p.layer][p.head] = p.value
        return grid


@dataclass
class _Record:
    """What a run's edit keeps: every block's head outputs and MLP outputs, the last block's input and
    attention branch (from which the final stream is formed in the model's own order)."""

    last: int
    heads: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> (B, H, T, hd), from hook_z
    mlp: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> (B, T, D)
    resid: torch.Tensor | None = None
    attn: torch.Tensor | None = None

    def __call__(self, layer: int, site: str, value: torch.Tensor) -> torch.Tensor:
        if site == "head":
            self.heads[layer] = value.transpose(1, 2)  # (B, H, T, hd)
        elif site == "mlp":
            self.mlp[layer] = value
        elif layer == self.last:
            setattr(self, site, value)
        return value


def _check_eval(model: VisionTransformer) -> None:
    if model.training:
        raise ValueError("the model is in training mode (dropout, drop-path): call model.eval() before decomposing")


def _ls(branch: nn.Module) -> torch.Tensor | None:
    return branch.gamma if isinstance(branch, LayerScale) else None


@dataclass(frozen=True)
class _Norm:
    """A norm frozen at one run: LayerNorm centres, divides by the standard deviation, scales and shifts;
    RMSNorm divides by the root mean square and scales (no centring, no shift: `bias` None)."""

    weight: torch.Tensor  # (D,) float64
    bias: torch.Tensor | None  # (D,) float64
    eps: float
    centred: bool

    def sigma(self, x: torch.Tensor) -> torch.Tensor:
        """The norm's divisor of each vector of x (..., D), (..., 1): what the run freezes."""
        second = x.var(dim=-1, unbiased=False, keepdim=True) if self.centred else x.pow(2).mean(-1, keepdim=True)
        return (second + self.eps).sqrt()

    def linear(self, x: torch.Tensor) -> torch.Tensor:
        """The linear part of the norm without its divisor: centring (LayerNorm), then the scale."""
        return (_centre(x) if self.centred else x) * self.weight

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """The norm itself on x (..., D) in float64."""
        out = self.linear(x) / self.sigma(x)
        return out if self.bias is None else out + self.bias


def _norm(norm: nn.Module) -> _Norm | None:
    """A LayerNorm's or RMSNorm's parameters, None for an Identity (no norm there)."""
    if isinstance(norm, nn.LayerNorm):
        d, eps, centred = norm.normalized_shape[0], norm.eps, True
    elif isinstance(norm, nn.RMSNorm):
        d, centred = norm.normalized_shape[0], False
        dtype = norm.weight.dtype if norm.weight is not None else torch.get_default_dtype()
        eps = norm.eps if norm.eps is not None else torch.finfo(dtype).eps  # None: the input's machine epsilon
    else:
        return None
    weight = norm.weight.double() if norm.weight is not None else torch.ones(d, dtype=torch.float64)
    bias = getattr(norm, "bias", None)
    return _Norm(weight, None if bias is None else bias.double(), eps, centred)


def _centre(x: torch.Tensor) -> torch.Tensor:
    return x - x.mean(dim=-1, keepdim=True)


def _bias(layer: nn.Linear) -> torch.Tensor:
    """A linear layer's bias in float64 (zeros for a layer without one: AIMv2's, a bias-free query pool's)."""
    if layer.bias is None:
        return layer.weight.new_zeros(layer.out_features, dtype=torch.float64)
    return layer.bias.double()


@dataclass(frozen=True)
class _Pool:
    """An attention-pool head at one run: the query's probabilities over the tokens it reads frozen, so it is
    linear in their values. MAP (AttentionPool: a projected latent, a residual MLP) and AIMv2's QueryPool (the
    latent as it is, no MLP); either may have other heads than the blocks (PE)."""

    probs: torch.Tensor  # (H, N) each pool head's attention over the tokens it reads
    w_v: torch.Tensor  # (H, hd, D) each head's slice of the value projection
    v_bias: torch.Tensor  # (D,)
    w_o: torch.Tensor  # (D, D) the output projection
    o_bias: torch.Tensor  # (D,)
    mlp: Callable[[torch.Tensor], torch.Tensor] | None  # the residual MLP on the attended vector (MAP)

    @staticmethod
    def frozen(pool: nn.Module, tokens: torch.Tensor) -> _Pool:
        """The pool linearised on `tokens` (N, D), the normed tokens it reads, in float64."""
        if not isinstance(pool, AttentionPool | QueryPool):
            raise TypeError(f"attn_pool is a {type(pool).__name__}, not an attention-pool head")
        h, hd, d = pool.num_heads, pool.head_dim, tokens.shape[-1]
        if isinstance(pool, AttentionPool):
            query = pool.q(pool.latent).double()
            kv_w, kv_b = pool.kv.weight.double(), _bias(pool.kv)
            w_k, b_k, w_v, b_v = kv_w[:d], kv_b[:d], kv_w[d:], kv_b[d:]
            mlp: Callable[[torch.Tensor], torch.Tensor] | None = \
                lambda out: pool.mlp(pool.norm(out.to(pool.latent.dtype))).double()
        else:
            query = pool.latent.double()  # AIMv2: the learned query as it is
            w_k, b_k, w_v, b_v = pool.k.weight.double(), _bias(pool.k), pool.v.weight.double(), _bias(pool.v)
            mlp = None
        keys = (tokens @ w_k.T + b_k).reshape(-1, h, hd)  # (N, H, hd)
        probs = torch.einsum("hc,nhc->hn", query.reshape(h, hd), keys).mul(hd**-0.5).softmax(-1)  # (H, N)
        return _Pool(probs, w_v.reshape(h, hd, d), b_v, pool.proj.weight.double(), _bias(pool.proj), mlp)

    def attend(self, pooled: torch.Tensor) -> torch.Tensor:
        """(..., H, D) per head probability-weighted tokens -> (..., D) through each head's value slice and the
        output projection (no biases: they are parts of their own)."""
        per_head = torch.einsum("...hd,hcd->...hc", pooled, self.w_v)  # (..., H, hd)
        return per_head.flatten(-2) @ self.w_o.T  # (..., D)


class _Readout:
    """The model's readout after the blocks, linearised at one run: token weights (G, T) that pool the final
    stream (the final norm's 1/sigma folded in), `finish` the linear rest for G pooled vectors (K, G, D) -> (K,),
    and the constant parts (the norms' shifts, the pool's biases and MLP)."""

    def __init__(self, model: VisionTransformer, final: torch.Tensor, prefix: int, u: Callable[[str], torch.Tensor]):
        cfg = model.config
        x = final.double()  # (T, D) the final stream of the one image
        t = x.shape[0]
        norm = _norm(model.norm)
        self.norm = norm
        if norm is not None:
            normed = norm(x)  # (T, D)
            inv = 1.0 / norm.sigma(x)[:, 0]  # (T,)
        else:
            normed, inv = x, torch.ones(t, dtype=x.dtype, device=x.device)
        self.constants: list[tuple[str, float]] = []
        self.pool: _Pool | None = None
        shift = norm.bias if norm is not None else None
        self.fc: tuple[_Norm, torch.Tensor] | None = None
        pool = pooling.POOLS[cfg.pool]
        if pool.latent:
            self._attention_pool(model, normed, 0 if cfg.pool_prefix else prefix, inv, shift, u)
            return
        mean = torch.zeros(t, dtype=x.dtype, device=x.device)
        mean[prefix:] = 1.0 / (t - prefix)  # the mean of the patch tokens
        first = torch.eye(t, dtype=x.dtype, device=x.device)[0]
        # one row per part of the pooled vector (DINOv2's classifiers: [CLS] beside the mean), the head split in them
        d, head = cfg.embed_dim, u(cfg.pool)
        rows = [first if part == pooling.FIRST else mean for part in pool.parts]
        heads = [head[n * d:(n + 1) * d] for n in range(len(pool.parts))]
        if cfg.distilled and cfg.dist_head and cfg.num_classes and not cfg.proj_dim:
            rows.append(torch.eye(t, dtype=x.dtype, device=x.device)[1])
            heads = [0.5 * heads[0], 0.5 * u("dist")]  # DeiT: the two heads averaged, on [CLS] and on dist
        raw = torch.stack(rows)  # (G, T) pooling weights without the norm's scale
        self.weights = raw * inv  # (G, T)
        self.head_rows = torch.stack(heads)  # (G, D)
        fc = _norm(model.fc_norm)  # only a mean alone has one (timm's fc_norm)
        if fc is not None:  # fc_norm normalises the mean: its own frozen scale on the pooled vector
            self.fc = (fc, fc.sigma(raw[0] @ normed))  # the pooled vector's divisor (1,)
            if fc.bias is not None:
                self.constants.append(("fc_norm_shift", float(self.head_rows[0] @ fc.bias)))
        if shift is not None:
            self.constants.insert(0, ("norm_shift", float(self._finish_normed(raw.sum(-1)[:, None] * shift))))

    def _attention_pool(self, model: VisionTransformer, normed: torch.Tensor, start: int, inv: torch.Tensor,
                        shift: torch.Tensor | None, u: Callable[[str], torch.Tensor]) -> None:
        """MAP / query pool: pool head h averages its value slice of every token it reads (from `start`) with that
        head's own probabilities; the value bias (each head's probabilities sum to 1), the output bias and the
        residual MLP (nonlinear in the attended vector) are parts of their own."""
        with torch.no_grad():
            pool = _Pool.frozen(model.get_submodule("attn_pool"), normed[start:])
        t = normed.shape[0]
        raw = torch.zeros(pool.probs.shape[0], t, dtype=normed.dtype, device=normed.device)
        raw[:, start:] = pool.probs
        self.weights = raw * inv  # (H, T)
        self.pool = pool
        target = u(model.config.pool)
        self.head_rows = target[None]
        if shift is not None:
            self.constants.append(("norm_shift", float(self._finish_normed(raw.sum(-1)[:, None] * shift))))
        self.constants += [("pool_value_bias", float(target @ (pool.w_o @ pool.v_bias))),
                           ("pool_proj_bias", float(target @ pool.o_bias))]
        if pool.mlp is not None:
            with torch.no_grad():
                out = pool.attend(raw @ normed) + pool.w_o @ pool.v_bias + pool.o_bias  # (D,) the attended vector
                self.constants.append(("pool_mlp", float(target @ pool.mlp(out))))

    def _finish_normed(self, pooled: torch.Tensor) -> torch.Tensor:
        """(G, D) or (K, G, D) pooled vectors already through the final norm's scale -> the target value."""
        if self.pool is not None:
            return self.pool.attend(pooled) @ self.head_rows[0]
        if self.fc is not None:
            fc, sigma = self.fc
            pooled = fc.linear(pooled) / sigma
        return (pooled * self.head_rows).sum(dim=(-1, -2))

    def finish(self, pooled: torch.Tensor) -> torch.Tensor:
        """(K, G, D) token-weighted sums of K parts -> (K,) their shares of the target."""
        if self.norm is not None:
            pooled = self.norm.linear(pooled)
        return self._finish_normed(pooled)


def _along(kind: str, target: int, features: torch.Tensor, vector: torch.Tensor | None) -> torch.Tensor:
    """The direction (outputs,) in the model's output space whose dot product with the outputs is the target."""
    if kind in ("logit", "feature"):
        along = torch.zeros(features.shape[-1], dtype=torch.float64, device=features.device)
        along[target] = 1.0
        return along
    assert vector is not None
    along = vector.double()
    if kind == "cosine":  # the outputs' and the reference's norms frozen at the run's own values
        along = along / (along.norm() * features.double().norm())
    return along


def _linear(module: nn.Module, name: str) -> nn.Linear:
    """A Linear submodule by its dotted name (the head, a block's attention projection)."""
    layer = module.get_submodule(name)
    if not isinstance(layer, nn.Linear):
        raise TypeError(f"{name} is a {type(layer).__name__}, not a linear layer")
    return layer


def _target_rows(model: VisionTransformer, along: torch.Tensor) -> Callable[[str], torch.Tensor]:
    """For a head by name, the row (D,) in the pooled space whose dot product gives the target."""
    cfg = model.config

    def row(head: str) -> torch.Tensor:
        if cfg.proj_dim:
            return _linear(model, "proj").weight.double().T @ along
        if cfg.num_classes:
            return _linear(model, "head_dist" if head == "dist" else "head").weight.double().T @ along
        return along  # features only: the pooled vector is the output

    return row


def _head_bias(model: VisionTransformer, along: torch.Tensor) -> float:
    """The head's bias along the target (DeiT: both heads' averaged); 0 without a biased head."""
    cfg = model.config
    if cfg.proj_dim or not cfg.num_classes or _linear(model, "head").bias is None:
        return 0.0
    bias = _linear(model, "head").bias.double()
    if cfg.distilled and cfg.dist_head:
        bias = 0.5 * (bias + _linear(model, "head_dist").bias.double())
    return float(bias @ along)


@torch.no_grad()
def decompose(model: VisionTransformer, pixels: torch.Tensor, *, target: int | None = None,
              mask: torch.Tensor | None = None, head_mask: torch.Tensor | None = None,
              reference: torch.Tensor | None = None, direction: torch.Tensor | None = None) -> Decomposition:
    """The target (a class logit; without a classifier a feature, the cosine with `reference` or the
    projection on `direction`) of one image (1, 3, H, W) as the sum of the residual stream's parts and the head's
    bias (module docstring). target None: the top class (the largest feature)."""
    _check_eval(model)
    cfg = model.config
    if pixels.ndim != 4 or pixels.shape[0] != 1:
        raise ValueError(f"decompose takes one image (1, 3, H, W), got {tuple(pixels.shape)}")
    record = _Record(last=cfg.num_blocks - 1)
    with model.hooks(site_hooks(model, record)):
        out = model.forward_intermediates(pixels, mask=mask, head_mask=head_mask, capture=["masked", "with_pos"])
    logits = out["logits"][0]
    layout = out["layout"]
    classifier = bool(cfg.num_classes) and not cfg.proj_dim and reference is None and direction is None
    kind = "logit" if classifier else "cosine" if reference is not None else "direction" if direction is not None \
        else "feature"
    vector = reference if reference is not None else direction
    if vector is not None and vector.shape != logits.shape:
        raise ValueError(f"the {kind} vector has shape {tuple(vector.shape)}; this model's output has "
                         f"{tuple(logits.shape)}")
    if target is None:
        target = int(logits.argmax()) if kind in ("logit", "feature") else -1
    elif kind in ("logit", "feature") and not 0 <= target < logits.shape[0]:
        raise ValueError(f"target {target} is out of range: this model has {logits.shape[0]} outputs (0 .. "
                         f"{logits.shape[0] - 1})")
    if kind == "logit" or kind == "feature":
        value = float(logits[target])
    else:
        assert vector is not None
        value = float(logits.double() @ vector.double()) / (
            float(logits.double().norm() * vector.double().norm()) if kind == "cosine" else 1.0)

    assert record.resid is not None and record.attn is not None
    final = (record.resid + record.attn) + record.mlp[record.last]  # (1, T', D) as the model adds them
    if cfg.class_attn_depth:
        final = final[:, :1]  # CaiT: the last class block's [CLS]; the patches come from the blocks' input
        final = torch.cat([final, record.resid[:, 1:]], dim=1)
    along = _along(kind, target, logits, vector)
    readout = _Readout(model, final[0], 0 if cfg.class_attn_depth else layout.num_prefix_tokens,
                       _target_rows(model, along))
    parts = _embedding_parts(model, out, readout, layout.num_prefix_tokens)
    parts += _block_parts(model, record, readout)
    parts += [Part(name, None, None, v) for name, v in readout.constants]
    return Decomposition(target, value, parts, _head_bias(model, along), kind)


def _share(readout: _Readout, stream: torch.Tensor, offset: int) -> torch.Tensor:
    """(K, T', D) parts of a stream that starts at final token `offset` -> (K,) their shares of the target."""
    w = readout.weights[:, offset:offset + stream.shape[1]]  # (G, T')
    return readout.finish(w @ stream.double())  # (K, G, D) pooled first


def _embedding_parts(model: VisionTransformer, out: dict[str, Any], readout: _Readout, prefix: int) -> list[Part]:
    """The embedded input's parts as they enter: patches ([MASK] included), each kind of prefix token, the PE;
    through a frozen pre-norm (CLIP) with its shift a part of its own."""
    cfg = model.config
    masked = out["masked"][0]  # (N, D) patch embeddings after [MASK]
    t, d = out["with_pos"].shape[1], cfg.embed_dim
    pieces: list[tuple[str, torch.Tensor]] = []
    patches = masked.new_zeros(t, d)
    patches[prefix:] = masked
    pieces.append(("patches", patches))
    names = [n for n in cfg.prefix_names if not n.startswith("reg")]
    for i, name in enumerate(names):
        token = masked.new_zeros(t, d)
        token[i] = getattr(model, f"{name}_token")[0, 0]
        pieces.append((f"{name}_token", token))
    if cfg.reg_tokens:
        regs = masked.new_zeros(t, d)
        regs[len(names):prefix] = model.reg_token[0]
        pieces.append(("registers", regs))
    layout = out["layout"]
    pe = model.position_embedding(layout.grid)
    if pe is not None:
        pieces.append(("pos_embed", pe.to(masked.dtype)))
    stack = torch.stack([p for _, p in pieces]).double()  # (K, T, D)
    pre = _norm(model.norm_pre)
    shift = None
    if pre is not None:  # CLIP, PE: the pre-norm frozen at the run's own scale of each token
        stack = pre.linear(stack) / pre.sigma(out["with_pos"][0].double())
        if pre.bias is not None:
            shift = pre.bias.expand(t, d)[None]
    with torch.no_grad():
        if cfg.class_attn_depth:  # CaiT: [CLS] enters at the class-attention stage, in front of the patches
            cls = torch.zeros(1, t + 1, d, dtype=torch.float64, device=masked.device)
            cls[0, 0] = model.cls_token[0, 0].double()
            values = [float(v) for v in _share(readout, stack, 1)] + [float(_share(readout, cls, 0)[0])]
            names_out = [n for n, _ in pieces] + ["cls_token"]
        else:
            values = [float(v) for v in _share(readout, stack, 0)]
            names_out = [n for n, _ in pieces]
        if shift is not None:
            values.append(float(_share(readout, shift, 1 if cfg.class_attn_depth else 0)[0]))
            names_out.append("pre_norm_shift")
    return [Part(n, None, None, v) for n, v in zip(names_out, values, strict=True)]


def _block_parts(model: VisionTransformer, record: _Record, readout: _Readout) -> list[Part]:
    """Each block's heads (through their projection slices), its projection bias and its MLP. The tokens are
    pooled first (as the readout pools them) in the run's dtype, so each block costs a few small matmuls; what
    follows the pooling is in float64."""
    cfg = model.config
    blocks = list(model.blocks) + list(model.class_blocks)
    through, biases, mlps = [], [], []
    for layer, block in enumerate(blocks):
        offset = 0 if layer >= cfg.depth else (1 if cfg.class_attn_depth else 0)
        heads = record.heads[layer][0]  # (H, T', hd)
        w = readout.weights[:, offset:offset + heads.shape[1]].to(heads.dtype)  # (G, T')
        proj = _linear(block, "attn.proj")
        weight = proj.weight.view(cfg.embed_dim, cfg.num_heads, cfg.head_dim).permute(1, 2, 0)  # (H, hd, D)
        part = ((w @ heads) @ weight).double()  # (H, G, D): each head's pooled output through its projection slice
        bias = w.sum(-1).double()[:, None] * _bias(proj)  # (G, D): every token gets the bias (AIMv2: none)
        gamma = _ls(block.get_submodule("ls1"))
        if gamma is not None:  # LayerScale on the attention branch
            part, bias = part * gamma.double(), bias * gamma.double()
        through.append(part)
        biases.append(bias)
        mlps.append((w @ record.mlp[layer][0]).double())  # (G, D)
    n = len(blocks)
    heads_out = readout.finish(torch.cat(through)).reshape(n, cfg.num_heads)  # (L, H)
    bias_out = readout.finish(torch.stack(biases))  # (L,)
    mlp_out = readout.finish(torch.stack(mlps))  # (L,)
    parts: list[Part] = []
    for layer in range(n):
        parts += [Part("head", layer, h, float(heads_out[layer, h])) for h in range(cfg.num_heads)]
        parts += [Part("attn_bias", layer, None, float(bias_out[layer])),
                  Part("mlp", layer, None, float(mlp_out[layer]))]
    return parts


# ---------------------------------------------------------------------------------------------- logit lens
def lens(model: VisionTransformer, states: Sequence[torch.Tensor]) -> torch.Tensor:
    """Each token's state at each depth read through the final norm and the head(s): states is a list of
    (B, T, D) (the embedded input, then each block's output) -> (S, B, T, classes) logits. A model whose head
    reads the mean of the patches (fc_norm) reads each token through that norm; an attention-pool head (MAP, the
    query pool) is skipped (its pooling is not per token); DeiT averages its two heads on each token."""
    _check_eval(model)
    cfg = model.config
    if not cfg.num_classes or cfg.proj_dim:
        raise ValueError("the logit lens needs a classifier head; this model returns features (num_classes=0 or "
                         "a projection)")
    out = []
    with torch.no_grad():
        for s in states:
            x = model.fc_norm(model.norm(s))  # fc_norm: an identity but on a mean alone
            logits = model.head(x)  # (B, T, C)
            if cfg.distilled and cfg.dist_head:
                logits = (logits + model.head_dist(x)) / 2
            out.append(logits)
    return torch.stack(out)


# ---------------------------------------------------------------------------------------------- patching
@dataclass
class _Patch:
    """An edit that replaces, in item k of a batch, the site's values at `positions[k]` (None: everything)
    of `layers[k]` with the source run's; `heads[k]` restricts a "head" site to one head."""

    site: str
    source: dict[int, torch.Tensor]  # layer -> the source run's value (1, ...)
    layers: list[int]
    positions: list[list[int] | None]
    heads: list[int | None]

    def __call__(self, layer: int, site: str, value: torch.Tensor) -> torch.Tensor:
        if site != self.site or layer not in self.source:
            return value
        items = [k for k, at in enumerate(self.layers) if at == layer]
        if not items:
            return value
        value = value.clone()
        src = self.source[layer][0]
        for k in items:
            pos, head = self.positions[k], self.heads[k]
            if site == "head":  # (B, T, H, hd)
                sel_h = slice(None) if head is None else head
                if pos is None:
                    value[k, :, sel_h] = src[:, sel_h]
                else:
                    value[k, pos, sel_h] = src[pos, sel_h]
            elif pos is None:  # (B, T, D)
                value[k] = src
            else:
                value[k, pos] = src[pos]
        return value


def record_site(model: VisionTransformer, pixels: torch.Tensor, site: str, *, mask: torch.Tensor | None = None,
                head_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    """One run's logits (1, C) and its values at `site` in every block (layer -> (1, ...))."""
    if site not in SITES:
        raise ValueError(f"component must be one of {SITES}, got {site!r}")
    _check_eval(model)
    kept: dict[int, torch.Tensor] = {}

    def keep(layer: int, at: str, value: torch.Tensor) -> None:
        kept[layer] = value

    with torch.no_grad(), model.hooks(site_hooks(model, keep, [site])):
        logits = model.forward_intermediates(pixels, mask=mask, head_mask=head_mask)["logits"]
    return logits, kept


def patched_logits(model: VisionTransformer, pixels: torch.Tensor, source: dict[int, torch.Tensor], site: str,
                   layers: Sequence[int], positions: Sequence[Sequence[int] | None],
                   heads: Sequence[int | None] | None = None, *, mask: torch.Tensor | None = None,
                   head_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The logits (K, C) of K runs of the receiving image (1, 3, H, W) in one batch, run k with the site's values
    at layers[k], positions[k] (None: all; a head site: heads[k], None: all heads) taken from `source`."""
    if site not in SITES:
        raise ValueError(f"component must be one of {SITES}, got {site!r}")
    _check_eval(model)
    k = len(layers)
    if len(positions) != k or (heads is not None and len(heads) != k):
        raise ValueError(f"layers, positions and heads need one entry per run, got {k}, {len(positions)} and "
                         f"{None if heads is None else len(heads)}")
    n_layers = model.config.num_blocks
    bad = [layer for layer in layers if not 0 <= layer < n_layers]
    if bad:
        raise ValueError(f"layers {bad} out of range: this model has {n_layers} blocks (0 .. {n_layers - 1})")
    edit = _Patch(site, source, list(layers), [None if p is None else list(p) for p in positions],
                  list(heads) if heads is not None else [None] * k)
    batch_mask = None if mask is None else mask.reshape(1, -1).expand(k, -1)
    with torch.no_grad(), model.hooks(site_hooks(model, edit, [site])):
        return model.forward_intermediates(pixels.expand(k, -1, -1, -1), mask=batch_mask,
                                           head_mask=head_mask)["logits"]


def logit_difference(logits: torch.Tensor, target: int, foil: int) -> torch.Tensor:
    """(..., C) -> (...): the target's logit minus the foil's."""
    return logits[..., target] - logits[..., foil]


@dataclass
class Sweep:
    """Patching the source (clean) run's values into the receiving (corrupted) run, one site at a time: for each
    layer and each column (a position, or a head at the chosen positions) the receiver's logit difference
    (target minus foil), normalised so that 0 is the receiver's own and 1 the source's."""

    component: str  # one of SITES
    axis: str  # "position" (token index) or "head"
    layers: list[int]
    columns: list[int]
    target: int
    foil: int
    clean: float  # the source run's logit difference
    corrupted: float  # the receiving run's
    raw: torch.Tensor  # (layers, columns) the patched runs' logit differences

    @property
    def effects(self) -> torch.Tensor:
        """(layers, columns): (patched - corrupted) / (clean - corrupted); NaN when both runs agree."""
        span = self.clean - self.corrupted
        if span == 0:
            return torch.full_like(self.raw, float("nan"))
        return (self.raw - self.corrupted) / span


def default_foil(clean: torch.Tensor, corrupted: torch.Tensor, target: int) -> int:
    """The corrupted run's top class other than the target (what the corruption pushes towards)."""
    order = corrupted.argsort(descending=True).tolist()
    return int(next(c for c in order if c != target)) if len(order) > 1 else target


def sweep(model: VisionTransformer, clean: torch.Tensor, corrupted: torch.Tensor, component: str, *,
          layers: Sequence[int] | None = None, positions: Sequence[int] | None = None, target: int | None = None,
          foil: int | None = None, clean_mask: torch.Tensor | None = None,
          corrupted_mask: torch.Tensor | None = None, clean_head_mask: torch.Tensor | None = None,
          corrupted_head_mask: torch.Tensor | None = None, batch: int = 32, job: Job | None = None) -> Sweep:
    """Patch `component` from the clean run (image (1, 3, H, W), [MASK], heads off) into the corrupted one:
    resid / attn / mlp at each (layer, position) (layers: the self-attention blocks by default; positions: every
    token), or "head": each (layer, head) at `positions` (None: all). The runs go in batches of `batch`; the job
    hears of each batch and is checked between batches (Cancelled). target: the clean run's top class by default;
    foil: the corrupted run's top other class."""
    if component not in SITES:
        raise ValueError(f"component must be one of {SITES}, got {component!r}")
    cfg = model.config
    logits_a, source = record_site(model, clean, component, mask=clean_mask, head_mask=clean_head_mask)
    with torch.no_grad():
        logits_b = model.forward_intermediates(corrupted, mask=corrupted_mask, head_mask=corrupted_head_mask)["logits"]
    target = int(logits_a[0].argmax()) if target is None else int(target)
    n_out = logits_a.shape[-1]
    if not 0 <= target < n_out:
        raise ValueError(f"target {target} is out of range: this model has {n_out} outputs (0 .. {n_out - 1})")
    foil = default_foil(logits_a[0], logits_b[0], target) if foil is None else int(foil)
    if not 0 <= foil < n_out:
        raise ValueError(f"foil {foil} is out of range: this model has {n_out} outputs (0 .. {n_out - 1})")
    n_layers = cfg.num_blocks
    tokens = model.layout((clean.shape[-2], clean.shape[-1])).num_tokens
    bad = [p for p in positions or () if not 0 <= p < tokens]
    if bad:
        raise ValueError(f"positions {bad} out of range: this input has {tokens} tokens (0 .. {tokens - 1})")
    if component == "head":
        layers = list(range(n_layers)) if layers is None else list(layers)
        columns = list(range(cfg.num_heads))
        runs: list[tuple[int, list[int] | None, int | None]] = [
            (layer, None if positions is None else list(positions), h) for layer in layers for h in columns]
    else:
        layers = list(range(cfg.depth)) if layers is None else list(layers)
        bad = [layer for layer in layers if not 0 <= layer < cfg.depth]
        if bad:
            raise ValueError(f"layers {bad}: a sweep over positions covers the self-attention blocks 0 .. "
                             f"{cfg.depth - 1}")
        columns = list(range(tokens)) if positions is None else list(positions)
        runs = [(layer, [p], None) for layer in layers for p in columns]
    out = []
    job = job or Job()
    for start in range(0, len(runs), batch):
        job.check()
        chunk = runs[start:start + batch]
        logits = patched_logits(model, corrupted, source, component, [r[0] for r in chunk], [r[1] for r in chunk],
                                [r[2] for r in chunk], mask=corrupted_mask, head_mask=corrupted_head_mask)
        out.append(logit_difference(logits.double(), target, foil))
        job.progress(min(start + batch, len(runs)) / len(runs), f"patching {component}")
    raw = torch.cat(out).reshape(len(layers), len(columns))
    return Sweep(component, "head" if component == "head" else "position", layers, columns, target, foil,
                 float(logit_difference(logits_a[0].double(), target, foil)),
                 float(logit_difference(logits_b[0].double(), target, foil)), raw)
