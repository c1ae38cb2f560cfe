"""Outlier tokens, register neurons, test-time registers and attention health: pure functions on one batch.

- High-norm ("outlier") tokens: Darcet et al., "Vision Transformers Need Registers" (ICLR 2024). The norm is the
  residual stream's L2 norm of a token at a state (0 = the embedded input, i = the output of block i - 1).
- Register neurons and test-time registers: Jiang, Dravid, Efros, Gandelsman, "Vision Transformers Don't Need
  Trained Registers" (NeurIPS 2025), their `find_register_neurons` and `activate_on_registers` (see each below).
- Massive activations: Sun et al. 2024, the largest feature magnitudes of a state against its median magnitude.
- Attention entropy per head: Zhai et al. 2023 ("entropy collapse"), in nats; uniform attention over T keys has
  the maximum, log T.

Everything here is torch on tensors a pass produced; the dataset loop that feeds it is explore/registers.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..models.hooks import HookFn, HookPoint

DEFAULT_RATIO = 3.0  # a patch is an outlier when its norm exceeds this many times its image's median patch norm
REGISTER_MODES = ("zero", "mean", "unchanged")  # what the patches keep of a moved neuron's activation


def token_norms(state: torch.Tensor) -> torch.Tensor:
    """(B, T, D) residual stream -> (B, T) the L2 norm of every token, in float32."""
    return state.float().norm(dim=-1)


def outlier_mask(patch_norms: torch.Tensor, *, ratio: float = DEFAULT_RATIO,
                 threshold: float | None = None) -> torch.Tensor:
    """(B, N) patch-token norms -> (B, N) bool: the high-norm tokens.

    Darcet et al. call a token high-norm when its norm lies above the gap of the bimodal norm histogram; for
    DINOv2 ViT-g they cut at an absolute 150 (`threshold=150` reproduces that rule; it holds for that model's
    scale only). The default is the same cut made scale-free: a patch whose norm exceeds `ratio` (3) times the
    median patch norm of its own image at that state. An untrained model has no such tokens.
    """
    if threshold is not None:
        return patch_norms > threshold
    median = patch_norms.median(dim=-1, keepdim=True).values  # (B, 1)
    return patch_norms > ratio * median


def cls_share(pattern: torch.Tensor, keys: torch.Tensor, cls: int = 0) -> torch.Tensor:
    """The attention [CLS] (query `cls`) gives to the keys marked in `keys` (B, T) bool, mean over heads: (B,).

    pattern: (B, heads, T, T). Outliers soak it up in a model that needs registers; their token share is the
    value uniform attention would give."""
    row = pattern[:, :, cls, :].float()  # (B, heads, T)
    return (row * keys[:, None, :].float()).sum(dim=-1).mean(dim=1)


def attention_entropy(pattern: torch.Tensor) -> torch.Tensor:
    """(B, heads, Tq, Tk) probabilities -> (B, heads) entropy in nats, the mean over queries of -sum p log p.
    Its maximum, uniform attention, is log Tk (`max_entropy`); a collapsing head goes to 0."""
    p = pattern.float()
    plogp = torch.where(p > 0, p * torch.log(p.clamp_min(1e-30)), torch.zeros_like(p))
    return -plogp.sum(dim=-1).mean(dim=-1)


def max_entropy(num_keys: int) -> float:
    """The entropy of uniform attention over num_keys keys, in nats."""
    return math.log(num_keys)


MEDIAN_SAMPLE = 4096  # |activations| per image the median is taken over (evenly strided), to keep it cheap


def massive_activations(state: torch.Tensor) -> dict[str, torch.Tensor]:
    """Sun et al. 2024's statistics of one state (B, T, D): per image the largest |activation| ('max', (B,)) and its
    feature dimension ('dim'), the median |activation| ('median', over an even stride of at most MEDIAN_SAMPLE
    values), and per dimension the largest |activation| over the tokens ('per_dim', (B, D)). Sun et al. call an
    activation massive when it exceeds 100 and about 1000x the median; a random model's ratio is a few."""
    x = state.float()
    b, t, d = x.shape
    per_dim = torch.maximum(x.amax(dim=1), x.amin(dim=1).neg())  # (B, D) no |x| copy of the whole state
    top = per_dim.max(dim=-1)
    flat = x.reshape(b, -1)
    step = max(1, flat.shape[1] // MEDIAN_SAMPLE)
    return {"max": top.values, "dim": top.indices, "median": flat[:, ::step].abs().median(dim=-1).values,
            "per_dim": per_dim}


def outlier_weights(masks: torch.Tensor) -> torch.Tensor:
    """(S, B, N) outlier masks -> (S, B, N) weights: 1 / count at each image's outliers, 0 where it has none, so
    that weights @ activations is each image's mean activation over its outlier positions."""
    m = masks.float()
    return m / m.sum(dim=-1, keepdim=True).clamp_min(1.0)


def register_neuron_sums(weights: torch.Tensor, activations: torch.Tensor) -> torch.Tensor:
    """One batch's part of `find_register_neurons`: weights (S, B, N) from `outlier_weights`, activations (B, N, H)
    of one block's MLP hidden units at the patches -> (S, H), per state the sum over images of each unit's mean
    |activation| at that image's outlier positions (images without outliers add 0; divide by their count)."""
    return torch.einsum("sbn,bnh->sh", weights, activations.float().abs())


def rank_neurons(scores: torch.Tensor, top: int = 20) -> list[tuple[int, int, float]]:
    """(blocks, H) mean activation at the outlier positions -> [(block, unit, score)] the largest `top`, best first.

    This is the ranking of the paper's `find_register_neurons` (Jiang et al. 2025; their repository
    nickjiang2378/test-time-registers, shared/algorithms.py): per image, the token norms at `detect_outliers_layer`
    (default -1, the last block's output) above `register_norm_threshold` (an absolute 30) mark the outlier
    positions; an image without any is skipped; for every layer and neuron the score is the mean |activation| over
    those positions; scores are averaged over the images that had outliers (processed_image_cnt = 500) and sorted,
    best first, over all (layer, neuron) pairs. Ours differs in two stated ways: the outliers are patch tokens only
    (a model's own registers and [CLS] are never counted), and the default cut is relative (`outlier_mask`)."""
    flat = scores.reshape(-1)
    k = min(top, flat.numel())
    values, index = flat.topk(k)
    h = scores.shape[1]
    return [(int(i) // h, int(i) % h, float(v)) for v, i in zip(values, index, strict=True)]


RegisterValue = float | torch.Tensor | None  # None: the max over the patches; a number; a (B, U) tensor


def activate_on_registers(units: Sequence[int], num_patches: int, registers: Sequence[int], mode: str = "zero",
                          register_value: RegisterValue = None) -> HookFn:
    """The paper's `activate_on_registers` as a hook for a block's `mlp.hook_post` (B, T, H): for each unit, the
    test-time register tokens get the maximum of that unit's activation over the patches (or `register_value`: a
    number, or (B, U) per image and unit), and the patches get zero ('zero'), their mean ('mean') or keep it
    ('unchanged').

    Patches are the last num_patches tokens; `registers` are sequence indices (the layout's, inside
    `model.test_time_registers(k)`). The edit is in place on the site's value: with 'unchanged' and a register
    value equal to the register's own, the pass is bit for bit the pass without it."""
    if mode not in REGISTER_MODES:
        raise ValueError(f"register mode must be one of {REGISTER_MODES}, got {mode!r}")
    unit_index = torch.as_tensor(list(units), dtype=torch.long)
    reg_index = torch.as_tensor(list(registers), dtype=torch.long)

    def edit(hidden: torch.Tensor, hook: HookPoint) -> torch.Tensor:
        u = unit_index.to(hidden.device)
        patches = hidden[:, -num_patches:, :]  # (B, N, H) a view: writes land in `hidden`
        chosen = patches[:, :, u]  # (B, N, U) a copy
        if register_value is None:
            value = chosen.amax(dim=1)  # (B, U)
        else:
            value = torch.as_tensor(register_value, dtype=chosen.dtype, device=chosen.device).expand(
                chosen.shape[0], len(u))
        if mode == "zero":
            patches[:, :, u] = 0.0
        elif mode == "mean":
            patches[:, :, u] = chosen.mean(dim=1, keepdim=True).expand_as(chosen)
        for r in reg_index.tolist():
            hidden[:, r, u] = value
        return hidden

    return edit


def parse_neurons(text: str) -> list[tuple[int, int]]:
    """'6:123,6:7' -> [(6, 123), (6, 7)]: BLOCK:UNIT pairs (blocks numbered from 0, as the hook sites)."""
    pairs = []
    for item in text.split(","):
        block, sep, unit = item.strip().partition(":")
        if not sep or not block.strip().isdigit() or not unit.strip().isdigit():
            raise ValueError(f"--test-time-registers takes BLOCK:UNIT[,BLOCK:UNIT...] (e.g. 6:1024), got {item!r}")
        pairs.append((int(block), int(unit)))
    if not pairs or len(pairs) > 4096:
        raise ValueError("--test-time-registers takes 1 to 4096 BLOCK:UNIT pairs")
    return pairs


def register_hooks(neurons: Sequence[tuple[int, int]], num_patches: int, registers: Sequence[int],
                   mode: str = "zero", register_value: RegisterValue = None) -> list[tuple[str, HookFn]]:
    """(block, unit) pairs -> one `activate_on_registers` hook per block at `blocks.{b}.mlp.hook_post`."""
    by_block: dict[int, list[int]] = {}
    for block, unit in neurons:
        by_block.setdefault(block, []).append(unit)
    return [(f"blocks.{b}.mlp.hook_post", activate_on_registers(units, num_patches, registers, mode, register_value))
            for b, units in sorted(by_block.items())]
