"""What the checkpoint formats pass along: where a checkpoint is (`Source`), what its config files
declare (`Declared`), and what its weights become once converted and checked (`Checkpoint`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Generic, TypeVar

import torch

from ..models import ViTConfig
from .files import read_json
from .preprocess import Preprocess

T = TypeVar("T")


@dataclass
class Source:
    """A checkpoint on disk: a folder, and the weights file inside it that was asked for (if any)."""

    folder: Path
    file: Path | None = None  # None: the folder's own weights file
    arch: str | None = None  # a timm model name given by the user (bare state dicts need one)

    def has(self, name: str) -> bool:
        return (self.folder / name).exists()

    @cached_property
    def config_json(self) -> dict[str, Any] | None:
        """The folder's config.json (HF and timm both use that name), read once; None if absent."""
        return read_json(self.folder / "config.json") if self.has("config.json") else None


@dataclass(frozen=True)
class Declared(Generic[T]):
    """A format's validated reading of its config files, before any weights are read."""

    spec: T  # the format's own schema object
    weights: Path  # the weights file to read
    described_by: str  # the file (or model name) that declares the architecture, for messages


@dataclass
class Checkpoint:
    """Weights renamed to our parameter names, with the config they were checked against."""

    config: ViTConfig
    state: dict[str, torch.Tensor]
    labels: list[str]
    preprocessing: Preprocess
    details: dict[str, Any] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)  # our dimension -> the declaring file's field, for messages
    preprocessing_from: str = ""  # the file that declares the preprocessing, for messages
