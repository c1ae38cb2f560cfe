"""What the Prediction picture shows: the top-k classes on a fixed 0-100 % axis; for DeiT the class and
distillation heads as markers on the bars of their average; and the masks' effect in words."""

from __future__ import annotations

import numpy as np

from .figures import BarsFigure
from .forward import ForwardResult

HEAD_TITLES = {"cls": "class head", "dist": "distillation head", "gap": "pooled head", "map": "attention-pool head",
               "query": "attention-pool head"}


def short_label(label: str, limit: int = 32) -> str:
    """The first name of a class ('tabby, tabby cat' -> 'tabby'), cut to `limit` characters."""
    label = label.split(",")[0]
    return label if len(label) <= limit else label[: limit - 1] + "…"


def top_classes(result: ForwardResult, k: int) -> np.ndarray:
    """Indices of the k most likely classes, most likely first (as `LoadedModel.top_k` ranks them)."""
    return np.asarray([row["index"] for row in result.inputs.loaded.top_k(result.logits, k)], dtype=np.int64)


def prediction_figure(result: ForwardResult, k: int, title: str = "") -> BarsFigure:
    order = top_classes(result, k)
    heads = result.head_probs if len(result.head_probs) > 1 else {}
    markers = {HEAD_TITLES.get(name, name): p[order] for name, p in heads.items()}
    title = title or ("average of both heads (bars)" if heads else "prediction")
    named = result.inputs.loaded.details.get("labels")  # names the checkpoint did not give: say whose they are
    title += f" · labels: {named}" if named else ""
    labels = tuple(short_label(result.inputs.loaded.label(int(i))) for i in order)
    return BarsFigure(title, labels, result.probs[order].astype(np.float64), xlabel="probability", highlight=0,
                      markers=markers, value_range=(0.0, 1.0))


def change_text(result: ForwardResult) -> str:
    """What the masks did to the prediction, in a sentence."""
    base = result.baseline_probs
    if base is None:
        return "No masks: this is the model's prediction on the whole image."
    label = result.inputs.loaded.label
    top, top_base = int(result.probs.argmax()), int(base.argmax())
    n_masked = int(result.inputs.mask.sum())
    n_heads = int((result.inputs.head_mask < 1).sum())
    what = f"{n_masked} masked patches, {n_heads} heads off"
    if result.inputs.hooks:  # a feature steered (the Dataset view's SAE tab)
        what += f", {len(result.inputs.hooks)} feature{'s' if len(result.inputs.hooks) > 1 else ''} steered"
    if not (np.isfinite(base).all() and np.isfinite(result.probs).all()):
        return f"With {what}: the probabilities are not numbers (NaN or infinity): the weights hold non-finite values."
    delta = result.probs[top_base] - base[top_base]
    change = f"{delta:+.1%}" if abs(delta) >= 0.0005 else "no change"  # not "-0.0%"
    text = f"With {what}: '{label(top_base)}' {base[top_base]:.1%} → {result.probs[top_base]:.1%} ({change})."
    if top != top_base:
        text += f" The top class changed to '{label(top)}' ({result.probs[top]:.1%})."
    return text
