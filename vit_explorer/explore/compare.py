"""Two models side by side on the same image, masks and head switches: their predictions, attention
rollout and position-embedding similarity ("patchify against conv stem", "with and without PE"), or a preset
of several (`PRESETS`: patchify against conv against hybrid)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import torch

from ..checkpoints import LoadedModel
from . import attention, position
from .figures import BarsFigure, MapsFigure, SimilarityFigure
from .forward import ForwardResult, Inputs, Needs, run_forward
from .prediction import prediction_figure, short_label, top_classes


@dataclass(frozen=True)
class Side:
    """One model's pictures; `note` says what could not be carried over from the other side."""

    name: str
    result: ForwardResult
    prediction: BarsFigure | None  # None without a classifier
    rollout: MapsFigure
    similarity: SimilarityFigure | None  # None without an additive position embedding
    note: str = ""


def side(loaded: LoadedModel, name: str, inputs: Inputs, top_k: int = 5, done: ForwardResult | None = None
         ) -> Side:
    """`loaded` run on `inputs`' image at its own input size, with the masks where they fit its grid; `done`,
    a pass already made (the app's current result), is used instead when it is that same pass."""
    cfg = loaded.config
    size = inputs.size if inputs.loaded is loaded else tuple(loaded.preprocessing.size)
    grid = (size[0] // cfg.patch_size, size[1] // cfg.patch_size)
    notes = []
    mask = inputs.mask if inputs.mask.shape == grid else np.zeros(grid, bool)
    if inputs.mask.any() and inputs.mask.shape != grid:
        notes.append(f"the mask ({inputs.mask.shape[0]}×{inputs.mask.shape[1]}) does not fit this grid: not applied")
    layers = (cfg.num_blocks, cfg.num_heads)
    heads = inputs.head_mask if inputs.head_mask.shape == layers else np.ones(layers, np.float32)
    if (inputs.head_mask < 1).any() and inputs.head_mask.shape != layers:
        notes.append("the switched-off heads do not exist in this model: all heads on")
    model_id = inputs.model_id if loaded is inputs.loaded else 0
    ours = Inputs(loaded, inputs.image, (int(size[0]), int(size[1])), mask, heads, model_id, inputs.image_id,
                  needs=Needs(fusion="mean"))
    reuse = done is not None and done.inputs.same_pass(ours) and ours.needs.covered_by(done.inputs.needs)
    result = done if reuse and done is not None else run_forward(ours)
    query = attention.query_for(result.layout, cfg.pool)
    # short titles: each side has half the width, and its column is headed by the model's name
    rollout = replace(attention.rollout_figure(result, query), titles=(f"attention rollout from {query.name}",))
    sim = position.similarity(loaded.model, result.layout.grid)
    similarity = None
    if sim.patches is not None:
        similarity = SimilarityFigure(f"PE similarity ({position.describe(loaded.model, sim.grid)})", sim.patches)
    else:
        notes.append(sim.note)
    prediction = prediction_figure(result, top_k, name) if cfg.num_classes else None
    return Side(name, result, prediction, rollout, similarity, "; ".join(notes))


def joint_prediction(a: Side, b: Side, top_k: int = 3) -> BarsFigure | None:
    """Both models' probabilities in one chart when they share their classes: the union of their top classes
    (in `a`'s order), `a`'s as bars and `b`'s as markers on them; None when the classes differ (each side then
    shows its own) or a side has no classifier."""
    ra, rb = a.result, b.result
    la, lb = ra.inputs.loaded, rb.inputs.loaded
    if a.prediction is None or b.prediction is None or la.labels != lb.labels or ra.probs.shape != rb.probs.shape:
        return None
    order = list(top_classes(ra, top_k))
    order += [int(i) for i in top_classes(rb, top_k) if int(i) not in order]
    order.sort(key=lambda i: -float(ra.probs[i]))
    labels = tuple(short_label(la.label(i)) for i in order)
    return BarsFigure(f"{a.name} (bars) and {b.name} (markers)", labels, ra.probs[order].astype(np.float64),
                      xlabel="probability", highlight=0, markers={b.name: rb.probs[order].astype(np.float64)},
                      value_range=(0.0, 1.0))



def stem_models() -> list[tuple[str, LoadedModel]]:
    """The three ways to feed the classroom transformer: the bundled patchify and convolutional-stem models
    (trained on the shapes), and the conv model's transformer after the ViT paper's hybrid stem (a ResNet's
    first stage, stride 4; random, seeded: untrained). Each name says its stem's parameter count."""
    from ..checkpoints import load
    from ..models import VisionTransformer
    from ..paths import BUNDLED

    patchify, conv = load(BUNDLED["classroom-patchify"]), load(BUNDLED["classroom"])
    config = conv.config.replace(stem="hybrid", conv_stem_channels=[], conv_stem_strides=[])
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = VisionTransformer(config)
    blocks = {k: v for k, v in conv.model.state_dict().items() if not k.startswith("patch_embed.")}
    model.load_state_dict({**model.state_dict(), **blocks})  # strict: the same transformer, only the stem differs
    hybrid = LoadedModel(model.eval(), config, conv.labels, conv.preprocessing, "hybrid stem", "built",
                         {"config": config.to_dict()})
    named = [("patchify", patchify, ""), ("conv", conv, ""), ("hybrid", hybrid, ", untrained")]
    return [(f"{name} stem: {loaded.config.stem_parameters():,} params{state}", loaded)
            for name, loaded, state in named]


# name -> the models a Compare preset shows side by side (each with its column's heading)
PRESETS: dict[str, Callable[[], list[tuple[str, LoadedModel]]]] = {
    "stems: patchify vs conv vs hybrid": stem_models,
}
