"""The Components view's arrays (Qt-free; the app, the CLI and scripts share them): the target logit's parts
(analysis.components.decompose), the logit lens as a class map over the image per layer, and activation
patching between a clean and a corrupted run of the same model (the [MASK]-painted image, another image,
the image with heads off), one patch at a time (the painting gesture) or swept over layers x positions or
layers x heads."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from ..analysis.components import (
    SITES,
    Decomposition,
    Sweep,
    decompose,
    default_foil,
    lens,
    logit_difference,
    patched_logits,
    record_site,
    sweep,
)
from ..checkpoints import LoadedModel
from ..jobs import Job
from ..models import TokenLayout
from .figures import BarsFigure, MapsFigure, dimmed, json_number
from .forward import Inputs, check_inputs, pixels_for

CORRUPTIONS = ("mask", "image", "heads")  # what the corrupted run changes: [MASK] painted, another image, heads off


def run_masks(inputs: Inputs) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The run's [MASK] (N,) and head mask (layers, heads) as the model takes them (None: nothing off)."""
    device = inputs.loaded.device
    mask = torch.from_numpy(inputs.mask.reshape(-1).astype(bool)).to(device) if inputs.mask.any() else None
    heads = None
    if (inputs.head_mask < 1).any():
        heads = torch.from_numpy(inputs.head_mask.astype(np.float32)).to(device)
    return mask, heads


@dataclass
class ModelDecomposition(Decomposition):
    """A Decomposition with the model it came from, so it shows itself inline in Jupyter (`parts_figure`)."""

    loaded: LoadedModel | None = field(default=None, repr=False)

    def _repr_png_(self) -> bytes:
        from .notebook import png

        assert self.loaded is not None
        return png(parts_figure(self, self.loaded))


def decomposition(inputs: Inputs, target: int | None = None, reference: torch.Tensor | None = None
                  ) -> ModelDecomposition:
    """The target's parts for the run `inputs` describes (its [MASK] and head switches included)."""
    check_inputs(inputs)
    mask, heads = run_masks(inputs)
    d = decompose(inputs.loaded.model, pixels_for(inputs), target=target, mask=mask, head_mask=heads,
                  reference=reference)
    return ModelDecomposition(d.target, d.logit, d.parts, d.bias, d.kind, loaded=inputs.loaded)


def decomposition_json(d: Decomposition) -> dict[str, Any]:
    """`vit-explorer components --json`: {"target", "logit", "parts": [{"name", "layer", "head", "value"}],
    "bias"}; the parts plus the bias add up to the logit."""
    return {"target": d.target, "logit": json_number(d.logit),
            "parts": [{"name": p.name, "layer": p.layer, "head": p.head, "value": json_number(p.value)}
                      for p in d.parts],
            "bias": json_number(d.bias)}


def part_label(name: str, layer: int | None, head: int | None) -> str:
    """A part's name as the chart and the CLI's table write it."""
    if head is not None:
        return f"block {layer} head {head}"
    if layer is not None:
        return f"block {layer} {name.replace('_', ' ')}"
    return name.replace("_", " ")


# ---------------------------------------------------------------------------------------------- the lens
@dataclass
class LensMaps:
    """What each token 'says' at each depth: state 0 is the embedded input, state i the output of block i - 1."""

    layout: TokenLayout
    classes: np.ndarray  # (states, gh, gw) int: each patch's top class
    probs: np.ndarray  # (states, gh, gw) that class's probability
    prefix_classes: np.ndarray  # (states, prefix) the prefix tokens' top classes
    prefix_probs: np.ndarray  # (states, prefix)
    final: int  # the model's own prediction


def lens_maps(inputs: Inputs) -> LensMaps:
    """One forward pass keeping every token state, each read through the final norm and the head."""
    check_inputs(inputs)
    model = inputs.loaded.model
    mask, heads = run_masks(inputs)
    with torch.inference_mode():
        out = model.forward_intermediates(pixels_for(inputs), mask=mask, head_mask=heads,
                                          capture=["embedded", "hidden_states"])
        logits = lens(model, [out["embedded"]] + out["hidden_states"])[:, 0].float()  # (S, T, C)
    layout: TokenLayout = out["layout"]
    top = logits.softmax(-1).max(-1)  # (S, T) each
    k, (gh, gw) = layout.num_prefix_tokens, layout.grid
    probs, classes = top.values.cpu().numpy(), top.indices.cpu().numpy()
    return LensMaps(layout, classes[:, k:].reshape(-1, gh, gw), probs[:, k:].reshape(-1, gh, gw), classes[:, :k],
                    probs[:, :k], int(out["logits"][0].argmax()))


# ---------------------------------------------------------------------------------------------- patching
def corrupted_inputs(clean: Inputs, corruption: str, *, image: Any = None, image_id: int = -1,
                     mask: np.ndarray | None = None, head_mask: np.ndarray | None = None) -> Inputs:
    """The corrupted run of the same model: "mask" the clean image with `mask` painted [MASK] (default: every
    patch), "image" another image, "heads" the clean image with `head_mask`'s heads off (default: all)."""
    if corruption not in CORRUPTIONS:
        raise ValueError(f"corruption must be one of {CORRUPTIONS}, got {corruption!r}")
    if corruption == "mask":
        return replace(clean, mask=np.ones_like(clean.mask, dtype=bool) if mask is None else mask)
    if corruption == "heads":
        return replace(clean, head_mask=np.zeros_like(clean.head_mask) if head_mask is None else head_mask)
    if image is None:
        raise ValueError("corruption 'image' needs the other image")
    return replace(clean, image=image, image_id=image_id)


@dataclass
class PatchRuns:
    """A clean and a corrupted run, recorded once at one site, so each painted patch costs one forward."""

    clean: Inputs
    corrupted: Inputs
    component: str
    source: dict[int, torch.Tensor]  # layer -> the clean run's values at the site
    clean_logits: torch.Tensor  # (C,)
    corrupted_logits: torch.Tensor  # (C,)
    target: int
    foil: int

    @property
    def clean_difference(self) -> float:
        return float(logit_difference(self.clean_logits.double(), self.target, self.foil))

    @property
    def corrupted_difference(self) -> float:
        return float(logit_difference(self.corrupted_logits.double(), self.target, self.foil))

    def normalise(self, difference: float) -> float:
        """0: the corrupted run's logit difference, 1: the clean run's (NaN when both agree)."""
        span = self.clean_difference - self.corrupted_difference
        return (difference - self.corrupted_difference) / span if span else float("nan")


def _check_pair(clean: Inputs, corrupted: Inputs) -> None:
    if clean.loaded is not corrupted.loaded or tuple(clean.size) != tuple(corrupted.size):
        raise ValueError("the clean and the corrupted run must use the same model at the same input size")


def record_runs(clean: Inputs, corrupted: Inputs, component: str, target: int | None = None,
                foil: int | None = None) -> PatchRuns:
    """Record the clean run's `component` (one of SITES) and both runs' logits."""
    if component not in SITES:
        raise ValueError(f"component must be one of {SITES}, got {component!r}")
    check_inputs(clean)
    check_inputs(corrupted)
    _check_pair(clean, corrupted)
    model = clean.loaded.model
    mask, heads = run_masks(clean)
    logits_a, source = record_site(model, pixels_for(clean), component, mask=mask, head_mask=heads)
    mask_b, heads_b = run_masks(corrupted)
    with torch.no_grad():
        logits_b = model.forward_intermediates(pixels_for(corrupted), mask=mask_b, head_mask=heads_b)["logits"]
    a, b = logits_a[0].float().cpu(), logits_b[0].float().cpu()
    target = int(a.argmax()) if target is None else target
    foil = default_foil(a, b, target) if foil is None else foil
    for name, value in (("target", target), ("foil", foil)):
        if not 0 <= value < a.shape[0]:
            raise ValueError(f"{name} {value} is out of range: this model has {a.shape[0]} outputs")
    return PatchRuns(clean, corrupted, component, source, a, b, target, foil)


def patch_once(runs: PatchRuns, layer: int, positions: Sequence[int] | None, head: int | None = None
               ) -> tuple[float, torch.Tensor]:
    """The corrupted run with the clean values at `layer`, `positions` (token indices of the layout; None: all)
    and (a head site) `head` (None: all heads): its normalised logit difference and its logits (C,). CaiT's
    class-attention blocks read [CLS] in front of the patches (their "resid" positions shift by one) and compute
    only [CLS]: their attn, mlp and head sites are patched whole."""
    cfg = runs.clean.loaded.config
    if layer >= cfg.depth and positions is not None:
        positions = [p + 1 for p in positions] if runs.component == "resid" else None
    mask, heads = run_masks(runs.corrupted)
    logits = patched_logits(runs.clean.loaded.model, pixels_for(runs.corrupted), runs.source, runs.component,
                            [layer], [None if positions is None else list(positions)], [head], mask=mask,
                            head_mask=heads)[0].float().cpu()
    return runs.normalise(float(logit_difference(logits.double(), runs.target, runs.foil))), logits


def run_sweep(clean: Inputs, corrupted: Inputs, component: str, *, target: int | None = None,
              foil: int | None = None, layers: Sequence[int] | None = None, positions: Sequence[int] | None = None,
              batch: int = 32, job: Job | None = None) -> Sweep:
    """analysis.components.sweep for two runs of the app's kind."""
    check_inputs(clean)
    check_inputs(corrupted)
    _check_pair(clean, corrupted)
    mask_a, heads_a = run_masks(clean)
    mask_b, heads_b = run_masks(corrupted)
    return sweep(clean.loaded.model, pixels_for(clean), pixels_for(corrupted), component, layers=layers,
                 positions=positions, target=target, foil=foil, clean_mask=mask_a, corrupted_mask=mask_b,
                 clean_head_mask=heads_a, corrupted_head_mask=heads_b, batch=batch, job=job)


def sweep_json(result: Sweep) -> dict[str, Any]:
    """`vit-explorer patch --json` (keys documented in the README): the component, target and foil classes, both
    runs' logit differences, the layers, the positions (token indices) or heads, and per layer the normalised
    effects and the patched runs' logit differences (null where not finite)."""
    rows = [[json_number(v) for v in row] for row in result.effects.tolist()]
    raw = [[json_number(v) for v in row] for row in result.raw.tolist()]
    return {"component": result.component, "target": result.target, "foil": result.foil,
            "clean_difference": json_number(result.clean), "corrupted_difference": json_number(result.corrupted),
            "layers": result.layers, "positions" if result.axis == "position" else "heads": result.columns,
            "effects": rows, "differences": raw}


# ---------------------------------------------------------------------------------------------- figures
def layer_shares(d: Decomposition, depth: int, class_depth: int = 0) -> tuple[tuple[str, ...], np.ndarray]:
    """The parts summed by where they enter: the embedded input, each block (heads, projection bias, MLP), the
    readout's own parts (norm shifts, the pool's), the head's bias; the values add up to the logit."""
    labels = ["input"] + [f"block {i}" if i < depth else f"class-attn {i - depth}" for i in range(depth + class_depth)]
    values = [0.0] * (depth + class_depth + 2)
    for p in d.parts:
        if p.layer is not None:
            values[p.layer + 1] += p.value
        elif p.name in ("norm_shift", "fc_norm_shift") or p.name.startswith("pool_"):
            values[-1] += p.value
        else:
            values[0] += p.value
    values.append(d.bias)
    return tuple(labels + ["norm & pool", "head bias"]), np.asarray(values)


def parts_figure(d: Decomposition, loaded: LoadedModel) -> BarsFigure:
    """The Components view's parts: the target's logit as the sum of what each block (and the input, the readout,
    the head's bias) adds to it."""
    cfg = loaded.config
    labels, values = layer_shares(d, cfg.depth, cfg.class_attn_depth)
    what = f"class {d.target} ({loaded.label(d.target)})" if d.kind == "logit" else f"feature {d.target}"
    return BarsFigure(f"{what}: logit {d.logit:.3f} = the sum of these parts", labels, values,
                      xlabel="part of the logit (logit units)", value_format="{:+.3f}")


def head_shares(d: Decomposition, layers: int, heads: int) -> np.ndarray:
    """(layers, heads) each head's share of the target."""
    return np.asarray(d.heads(layers, heads), dtype=np.float64)


def class_colours(n: int) -> np.ndarray:
    """(n, 3) uint8: distinct colours for n classes (hues around the circle, alternating lightness)."""
    import colorsys

    return np.asarray([[round(255 * c) for c in colorsys.hsv_to_rgb(i / max(n, 1), 0.85, 1.0 if i % 2 else 0.8)]
                       for i in range(n)], dtype=np.uint8)


LENS_FLOOR = 0.25  # the brightness of a probability of 0, so that every patch's hue can still be told


def lens_pictures(maps: LensMaps, num_classes: int, side: int = 96) -> list[np.ndarray]:
    """One (side', side', 3) uint8 picture per state: each patch in its top class's colour, brighter as that class
    is more probable (LENS_FLOOR + (1 - LENS_FLOOR) p: a patch that says nothing in particular is dark)."""
    colours = class_colours(num_classes).astype(np.float32)
    gh, gw = maps.classes.shape[1:]
    scale = max(1, side // max(gh, gw))
    out = []
    for classes, probs in zip(maps.classes, maps.probs, strict=True):
        rgb = colours[classes] * (LENS_FLOOR + (1 - LENS_FLOOR) * probs[..., None])  # (gh, gw, 3)
        out.append(np.kron(rgb, np.ones((scale, scale, 1), np.float32)).round().astype(np.uint8))
    return out


SWEEP_LEVEL = 0.05  # the least colour range of a sweep's maps: tiny effects are not stretched to full colour


def sweep_figure(result: Sweep, layout: TokenLayout, display: np.ndarray | None) -> MapsFigure:
    """A position sweep as one map over the patch grid per block (the prefix tokens' effects in the titles), on
    one diverging scale symmetric about 0 (to the largest effect, at least SWEEP_LEVEL): where patching the clean
    run's values in moves the answer back."""
    if result.axis != "position":
        raise ValueError("sweep_figure draws a sweep over positions; a sweep over heads is a layers x heads map")
    gh, gw = layout.grid
    effects = result.effects.numpy()
    index = {token: j for j, token in enumerate(result.columns)}
    maps = np.full((len(result.layers), gh, gw), np.nan)
    titles = []
    for i, layer in enumerate(result.layers):
        for token, j in index.items():
            at = layout.patch_position(token)
            if at is not None:
                maps[i][at] = effects[i, j]
        prefix = [f"{name} {effects[i, index[t]]:+.2f}" for t, name in enumerate(layout.prefix_names) if t in index]
        titles.append(f"block {layer}" + (f" ({', '.join(prefix)})" if prefix else ""))
    finite = np.abs(effects[np.isfinite(effects)])
    top = max(SWEEP_LEVEL, float(finite.max()) if finite.size else 0.0)
    return MapsFigure(f"{result.component} patched at one position: effect (1 = clean)", maps, tuple(titles),
                      dimmed(display), layout.grid, colorbar_label="normalised effect", cmap="CET-D1",
                      levels=(-top, top), opacity=0.8)
