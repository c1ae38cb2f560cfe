"""What a run does on a GPU to go fast without changing its maths: bf16 autocast, torch.compile (with CUDA
graphs for small models), and built-in data kept on the device so that no step waits for the host.

Each is a choice of the recipe ("auto" by default) made here, in one place, so the CPU tests can force
every path that a GPU run takes by default.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from ..data.datasets import TensorImages, TrainingData
from .recipe import Recipe

RESIDENT_SHARE = 0.25  # a built-in set moves to the GPU only if it takes at most this share of the free memory
GRAPH_PARAMETERS = 30_000_000  # models up to this size are launch-bound on a GPU: CUDA graphs pay there
# "auto" compiles only runs long enough to repay the compile (tens of seconds, counted as training time)
COMPILE_MIN_STEPS = 2_000
COMPILE_MIN_SECONDS = 300.0


def use_bf16(recipe: Recipe, dev: torch.device) -> bool:
    """Whether the forward pass runs under bf16 autocast (auto: on a CUDA GPU that has bf16)."""
    if recipe.precision == "auto":
        return dev.type == "cuda" and torch.cuda.is_bf16_supported()
    return recipe.precision == "bf16"


def autocast(recipe: Recipe, dev: torch.device) -> torch.autocast:
    return torch.autocast(dev.type, dtype=torch.bfloat16, enabled=use_bf16(recipe, dev))


def compile_mode(recipe: Recipe, dev: torch.device, data: TrainingData, parameters: int, distributed: bool,
                 total: int | None) -> str | None:
    """The torch.compile mode of the training forward, or None for eager.

    auto: on a CUDA GPU, for classification runs of at least COMPILE_MIN_STEPS steps or COMPILE_MIN_SECONDS
    seconds; CUDA graphs ("reduce-overhead") for a small model on in-memory data (static shapes) in one
    process, the default mode otherwise. Masked patch prediction stays eager: its forward draws random
    numbers on the host.
    """
    if recipe.compile != "auto":
        return None if recipe.compile == "off" else recipe.compile
    long_enough = total >= COMPILE_MIN_STEPS if total is not None else (recipe.time_budget or 0) >= COMPILE_MIN_SECONDS
    if dev.type != "cuda" or recipe.task != "classify" or not long_enough:
        return None
    static = isinstance(data.train, TensorImages) and not distributed
    return "reduce-overhead" if static and parameters <= GRAPH_PARAMETERS else "default"


def resident(data: TrainingData, dev: torch.device) -> TrainingData:
    """`data` with its in-memory splits moved to a CUDA device when they fit comfortably, else as it is."""
    if dev.type != "cuda" or not isinstance(data.train, TensorImages) or not isinstance(data.val, TensorImages):
        return data
    size = sum(t.numel() * t.element_size() for s in (data.train, data.val) for t in (s.images, s.labels))
    if size > RESIDENT_SHARE * torch.cuda.mem_get_info(dev)[0]:
        return data
    return replace(data, train=data.train.to(dev), val=data.val.to(dev))
