"""A freshly initialised model from a config, wrapped as a LoadedModel (the builder's "Build and open")."""

from __future__ import annotations

import torch

from ..checkpoints import LoadedModel, Preprocess
from ..checkpoints.devices import preferred_device as preferred_device  # the app's (a lesson's models too)
from ..checkpoints.devices import resolve_device
from ..checkpoints.labels import generic_labels
from ..checkpoints.memory import FLOAT, check_fits, check_run
from ..models import VisionTransformer, ViTConfig


def build_loaded(config: ViTConfig, device: str | None = None, where: str = "the built model") -> LoadedModel:
    """Random weights (timm's init) in eval mode; inputs normalised with mean = std = 0.5. Refused with a
    BudgetError, before anything is allocated, when its parameters and one forward pass would not fit."""
    target = resolve_device(device, default="auto")
    check_run(config, target, where)
    if target.type != "cpu":  # the parameters are made on the CPU first
        check_fits(config.estimate_parameters() * FLOAT, torch.device("cpu"), "building this model", where)
    model = VisionTransformer(config).eval().to(target)
    pre = Preprocess(config.image_size, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
    return LoadedModel(model, config, generic_labels(config.num_classes), pre, "", "built",
                       {"config": config.to_dict()})
