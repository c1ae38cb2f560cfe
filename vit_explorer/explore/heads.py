"""Head importance for the Heads view: how much the predicted class's probability drops when each
head alone is removed, on the current image with the current [MASK] (the other switched-off heads
are not removed while measuring: each head is judged in the full model)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from ..analysis.heads import head_importance
from .forward import Inputs, pixels_for


class Cancelled(Exception):
    """A measurement stopped because a newer one (or the user) cancelled it."""


@dataclass(frozen=True)
class HeadImportance:
    values: np.ndarray  # (layers, heads): drop in the target class's probability when that head alone is removed
    target: int  # the class predicted with the current mask and every head on
    target_label: str
    image_name: str
    masked_patches: int

    def describe(self) -> str:
        mask = f", {self.masked_patches} patches masked" if self.masked_patches else ""
        return f"importance for class '{self.target_label}' on image '{self.image_name}'{mask}"


def measure(inputs: Inputs, image_name: str, cancel: threading.Event | None = None,
            progress: Callable[[int, int], None] | None = None) -> HeadImportance:
    """Measure every head (in a worker); `cancel` stops it between heads, `progress(done, total)` reports."""

    def on_cell(done: int, total: int) -> None:
        if cancel is not None and cancel.is_set():
            raise Cancelled("head importance measurement cancelled")
        if progress is not None:
            progress(done, total)

    loaded = inputs.loaded
    pixels = pixels_for(inputs)
    mask = torch.from_numpy(inputs.mask.reshape(1, -1)).to(pixels.device) if inputs.mask.any() else None
    with torch.inference_mode():
        target = int(loaded.model(pixels, mask=mask)[0].argmax())
        values = head_importance(loaded.model, pixels, torch.tensor([target]), mask=mask, on_cell=on_cell)
    return HeadImportance(values.numpy(), target, loaded.label(target), image_name, int(inputs.mask.sum()))
