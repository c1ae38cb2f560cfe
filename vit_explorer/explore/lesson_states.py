"""Where a lesson's steps lead: the one place a step becomes the whole state the app shows. `lessons.resolve`
folds the steps up to each one into its settings as written (`StepSettings`); `step_state` settles those against
the step's model and image (the input size, the mask and heads as arrays, the attention mode the model has, the
layer, head and query within it, the class explained as an index). The app's lesson runner puts a `StepState` in
place however the step is entered (forwards, backwards, by a jump); the web page export (explore/web_lesson.py)
needs every step's state at once (`lesson_states`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

from ..models import ConfigError
from .attention import CLASS_ATTENTION
from .lessons import Lesson, LessonError, Model, StepSettings, quoted

if TYPE_CHECKING:
    from ..checkpoints import LoadedModel

FALLBACK_MODE = "mean of heads"  # what a CaiT-only mode shows on a model without class attention (Session.set_model)


def step_mask(settings: StepSettings, grid: tuple[int, int]) -> np.ndarray:
    """The (gh, gw) bool mask of a step: none, a random share drawn with its seed, or patches (those outside the
    grid left out)."""
    mask = np.zeros(grid, bool)
    if isinstance(settings.mask, float):
        rng = np.random.default_rng(settings.mask_seed)
        flat = np.zeros(grid[0] * grid[1], bool)
        flat[rng.permutation(flat.size)[: round(settings.mask * flat.size)]] = True
        return flat.reshape(grid)
    if isinstance(settings.mask, tuple):
        for row, col in settings.mask:
            if row < grid[0] and col < grid[1]:
                mask[row, col] = True
    return mask


def step_head_mask(settings: StepSettings, shape: tuple[int, int]) -> np.ndarray:
    """The (layers, heads) head mask of a step: every head on but its `heads_off` (those the model lacks left
    out)."""
    heads = np.ones(shape, np.float32)
    for layer, head in settings.heads_off:
        if layer < shape[0] and head < shape[1]:
            heads[layer, head] = 0.0
    return heads


@dataclass(frozen=True)
class StepState:
    """Everything one step of a lesson puts on screen, settled against its model and image."""

    model: Model | None  # None: the model on screen when the lesson started
    image: str | None  # "sample:NAME" or a path; None: the image on screen when the lesson started
    size: tuple[int, int]  # (H, W) fed to the model
    mask: np.ndarray  # (gh, gw) bool, True = [MASK]
    head_mask: np.ndarray  # (layers, heads) float32, 1 keeps a head
    mode: str  # the Attention view's mode (explore.attention.MODES), one the model has
    layer: int  # among the blocks the mode counts (CaiT's class-attention blocks for CLASS_ATTENTION)
    head: int
    heads: tuple[int, ...] | None  # the heads "all heads" shows (None: all)
    query: tuple[int, int] | None  # (row, col) of the query patch; None: the first prefix token
    compare: Model | None  # the model this step's Compare view runs beside
    view: str | None  # None: the view on screen when the lesson started
    tab: str | None  # the view behind the Prediction view (None: the one on screen when the lesson started)
    panels: tuple[str, ...] | None  # the view's panels shown (None: all)
    input_mode: str  # what a click on the image does
    hover: bool  # the patch readout under the image while presenting
    expand: tuple[str, ...]  # the Parameters tree's row opened
    target: int | None  # the class the Explain view explains, by index (None: the top class)
    problems: tuple[str, ...] = ()  # what of the settings this model or image cannot show (the banner says it)


def step_state(settings: StepSettings, loaded: LoadedModel, picture: Image.Image) -> StepState:
    """The state of a step whose settings are `settings`, on its model `loaded` and image `picture`. What the model
    cannot show falls back to its default (the model's own size, the top class, "mean of heads") and is named in
    `problems`."""
    cfg, problems = loaded.config, []
    native = tuple(loaded.preprocessing.native_size(picture.height, picture.width))
    size = native if settings.size == "native" else settings.size
    try:
        grid = loaded.model.check_image_size(*size)
    except ConfigError:  # said as the image panel says it
        problems.append(f"size: {size[0]}x{size[1]} is not a multiple of the patch size {cfg.patch_size}; the "
                        f"model's own {native[0]}x{native[1]} instead")
        size, grid = native, loaded.model.check_image_size(*native)
    mode = settings.mode if settings.mode != CLASS_ATTENTION or cfg.class_attn_depth else FALLBACK_MODE
    layers = cfg.class_attn_depth if mode == CLASS_ATTENTION else cfg.depth
    heads = None if settings.heads is None else tuple(h for h in settings.heads if h < cfg.num_heads) or None
    query = settings.query if settings.query is not None and all(
        q < g for q, g in zip(settings.query, grid, strict=True)) else None
    target = settings.target
    if isinstance(target, str):
        target = loaded.labels.index(target) if target in loaded.labels else None
        if target is None:
            problems.append(f"target: {quoted(settings.target)} is not one of this model's labels")
    elif target is not None and target >= len(loaded.labels):
        problems.append(f"target: this model has {len(loaded.labels)} classes, no class {target}")
        target = None
    return StepState(
        model=settings.model, image=settings.image, size=(int(size[0]), int(size[1])),
        mask=step_mask(settings, grid), head_mask=step_head_mask(settings, (cfg.num_blocks, cfg.num_heads)),
        mode=mode, layer=min(settings.layer, layers - 1), head=min(settings.head, cfg.num_heads - 1), heads=heads,
        query=query, compare=settings.compare, view=settings.view, tab=settings.tab, panels=settings.panels,
        input_mode=settings.input_mode, hover=settings.hover, expand=settings.expand, target=target,
        problems=tuple(problems))


def lesson_states(lesson: Lesson, loaded_for: Callable[[Model], LoadedModel],
                  image_for: Callable[[str], Image.Image]) -> list[StepState]:
    """Every step's state, in order, for a lesson that names its own model and image (a page has no app to take
    them from). `loaded_for` gives a step's model (the same object for the same key), `image_for` opens
    "sample:NAME" or a path. LessonError when a step would show a model or an image that no step before it has
    named, or a size its model cannot take."""
    states = []
    for index, settings in enumerate(lesson.states):
        where = f"{lesson.path}: step {index + 1}"
        if settings.model is None:
            raise LessonError(f"{where}: no step so far names a model (\"model\"); the first step must")
        if settings.image is None:
            raise LessonError(f"{where}: no step so far names an image (\"image\"); the page needs one")
        state = step_state(settings, loaded_for(settings.model), image_for(settings.image))
        sized = [problem for problem in state.problems if problem.startswith("size:")]
        if sized:
            raise LessonError(f"{where}: {sized[0]}")
        states.append(state)
    return states
