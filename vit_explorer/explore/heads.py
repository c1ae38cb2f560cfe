"""Head importance for the Heads view: how much the predicted class's probability drops when each
head alone is removed, on the current image with the current [MASK] (the other switched-off heads
are not removed while measuring: each head is judged in the full model)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..analysis.heads import head_importance
from ..jobs import Job
from .forward import Inputs, pixels_for


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


def measure(inputs: Inputs, image_name: str, job: Job | None = None) -> HeadImportance:
    """Measure every head (in a worker); the job hears of each head and is checked between heads (Cancelled)."""
    loaded = inputs.loaded
    pixels = pixels_for(inputs)
    mask = torch.from_numpy(inputs.mask.reshape(1, -1)).to(pixels.device) if inputs.mask.any() else None
    with torch.inference_mode():
        target = int(loaded.model(pixels, mask=mask)[0].argmax())
        values = head_importance(loaded.model, pixels, torch.tensor([target]), mask=mask, job=job)
    return HeadImportance(values.numpy(), target, loaded.label(target), image_name, int(inputs.mask.sum()))
