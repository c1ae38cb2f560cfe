"""Where a lesson's steps lead: each step's settings resolved against the steps before it, as the app applies them
(a step sets only what it names; a new model resets the masks, the selection and the input size to its own; a new
image or size clears the mask). The app's lesson runner applies steps one by one on the live session; the web
page export (explore/web_lesson.py) needs every step's state at once, and both draw a random mask with `step_mask`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

from .attention import CLASS_ATTENTION
from .lessons import Lesson, LessonError, Model, Step

if TYPE_CHECKING:
    from ..checkpoints import LoadedModel

DEFAULT_MODE = "one head"  # the Attention view's mode before a lesson names one (AttentionSettings' default)


def step_mask(step: Step, grid: tuple[int, int], current: np.ndarray) -> np.ndarray:
    """The (gh, gw) bool mask a step leaves: its own ("none", a random share drawn with its seed, or patches), or
    `current` when it names none. Patches outside the grid are left out."""
    if step.mask == "none":
        return np.zeros(grid, bool)
    if isinstance(step.mask, float):
        rng = np.random.default_rng(step.mask_seed)
        mask = np.zeros(grid[0] * grid[1], bool)
        mask[rng.permutation(mask.size)[: round(step.mask * mask.size)]] = True
        return mask.reshape(grid)
    if isinstance(step.mask, tuple):
        mask = np.zeros(grid, bool)
        for row, col in step.mask:
            if row < grid[0] and col < grid[1]:
                mask[row, col] = True
        return mask
    return current


def step_head_mask(step: Step, shape: tuple[int, int], current: np.ndarray) -> np.ndarray:
    """The (layers, heads) head mask a step leaves: every head on but its `heads_off`, or `current` if it names
    none."""
    if step.heads_off is None:
        return current
    heads = np.ones(shape, np.float32)
    for layer, head in step.heads_off:
        if layer < shape[0] and head < shape[1]:
            heads[layer, head] = 0.0
    return heads


@dataclass(frozen=True)
class StepState:
    """Everything that decides what one step of a lesson shows."""

    model: Model
    image: str  # "sample:NAME" or a path
    size: tuple[int, int]  # (H, W) fed to the model
    mask: np.ndarray  # (gh, gw) bool, True = [MASK]
    head_mask: np.ndarray  # (layers, heads) float32, 1 keeps a head
    mode: str  # the Attention view's mode (explore.attention.MODES)
    layer: int  # among the blocks the mode counts (CaiT's class-attention blocks for CLASS_ATTENTION)
    head: int
    heads: tuple[int, ...] | None  # the heads "all heads" shows (None: all)
    query: tuple[int, int] | None  # (row, col) of the query patch; None: the first prefix token
    compare: Model | None  # the model this step's Compare view runs beside


def lesson_states(lesson: Lesson, loaded_for: Callable[[Model], LoadedModel],
                  image_for: Callable[[str], Image.Image]) -> list[StepState]:
    """Every step's state, in order. `loaded_for` gives a step's model (the same object for the same key),
    `image_for` opens "sample:NAME" or a path. LessonError when a step would show a model or an image that no
    step before it has named."""
    states: list[StepState] = []
    model: Model | None = None
    loaded: LoadedModel | None = None
    image: str | None = None
    size = (0, 0)
    mask = np.zeros((0, 0), bool)
    head_mask = np.ones((0, 0), np.float32)
    mode, layer, head = DEFAULT_MODE, 0, 0
    query: tuple[int, int] | None = None
    for index, step in enumerate(lesson.steps):
        where = f"{lesson.path}: step {index + 1}"
        if step.model is not None and (model is None or step.model.key != model.key):
            model, loaded = step.model, loaded_for(step.model)
            cfg = loaded.config
            size = tuple(loaded.preprocessing.size)  # type: ignore[assignment]
            if mode == CLASS_ATTENTION and not cfg.class_attn_depth:
                mode = "mean of heads"
            mask = np.zeros(_grid(loaded, size), bool)
            head_mask = np.ones((cfg.num_blocks, cfg.num_heads), np.float32)
            layer, head, query = min(layer, _layers(loaded, mode) - 1), min(head, cfg.num_heads - 1), None
        if model is None or loaded is None:
            raise LessonError(f"{where}: no step so far names a model (\"model\"); the first step must")
        if step.image is not None:
            image = step.image
            mask = np.zeros(_grid(loaded, size), bool)
        if image is None:
            raise LessonError(f"{where}: no step so far names an image (\"image\"); the page needs one")
        if step.size is not None:
            picture = image_for(image)
            new = loaded.preprocessing.native_size(picture.height, picture.width) if step.size == "native" \
                else step.size
            if tuple(new) != size:
                loaded.model.check_image_size(*new)
                size, query = (int(new[0]), int(new[1])), None
                mask = np.zeros(_grid(loaded, size), bool)
        grid = _grid(loaded, size)
        mask = step_mask(step, grid, mask)
        head_mask = step_head_mask(step, (head_mask.shape[0], head_mask.shape[1]), head_mask)
        if step.mode is not None:
            mode = step.mode
        layers = _layers(loaded, mode)
        layer = max(0, min(step.layer if step.layer is not None else layer, layers - 1))
        head = max(0, min(step.head if step.head is not None else head, loaded.config.num_heads - 1))
        heads = None
        if step.heads is not None:
            heads = tuple(h for h in step.heads if h < loaded.config.num_heads) or None
        if not isinstance(step.query, str):  # "keep": the query stays
            query = step.query
        states.append(StepState(model, image, size, mask.copy(), head_mask.copy(), mode, layer, head, heads, query,
                                step.compare))
    return states


def _grid(loaded: LoadedModel, size: tuple[int, int]) -> tuple[int, int]:
    p = loaded.config.patch_size
    return (size[0] // p, size[1] // p)


def _layers(loaded: LoadedModel, mode: str) -> int:
    """The blocks the layer counts in `mode` (Session.num_layers)."""
    cfg = loaded.config
    return cfg.class_attn_depth if mode == CLASS_ATTENTION and cfg.class_attn_depth else cfg.depth
