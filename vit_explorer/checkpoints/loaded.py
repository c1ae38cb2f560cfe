"""`LoadedModel`: what every loader returns and every consumer (CLI, app, analyses) reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from PIL import Image

from ..models import VisionTransformer, ViTConfig
from .labels import generic_label
from .preprocess import Preprocess


@dataclass
class LoadedModel:
    model: VisionTransformer  # in eval mode; model(pixel_values) returns logits
    config: ViTConfig
    labels: list[str]  # one name per class
    preprocessing: Preprocess  # the source's own eval transform
    source: str = ""  # what was asked for (hub id, folder or file)
    kind: str = "native"  # "hf", "timm" or "native"
    details: dict[str, Any] = field(default_factory=dict)  # e.g. the architecture name the source gave
    warnings: list[str] = field(default_factory=list)  # found while loading, e.g. NaN weights; one line each

    def preprocess(self, image: Image.Image) -> torch.Tensor:
        """PIL image -> (1, 3, H, W) on the model's device, as the source preprocesses it."""
        return self.preprocessing(image).to(self.device)

    def top_k(self, logits: torch.Tensor, k: int) -> list[dict[str, Any]]:
        """logits (classes,) -> the k most likely classes as {"index", "label", "prob"} rows."""
        probs = logits.detach().float().cpu().softmax(-1)
        top = torch.topk(probs, min(k, probs.numel()))
        return [{"index": int(i), "label": self.label(int(i)), "prob": float(p)}
                for p, i in zip(top.values, top.indices, strict=True)]

    def label(self, index: int) -> str:
        return self.labels[index] if index < len(self.labels) else generic_label(index)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        """The dtype the model runs in: its weights' own (bf16 stays bf16) unless loaded with another."""
        return self.model.dtype
