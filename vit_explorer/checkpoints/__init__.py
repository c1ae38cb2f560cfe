"""Read and write checkpoints: Hugging Face, timm and the native format."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import CheckpointError
from .loaded import LoadedModel
from .native import CONFIG_NAME, load_native_folder, save_native
from .preprocess import Preprocess


def load(source: str | os.PathLike[str], *, device: str | None = None) -> LoadedModel:
    """Load a native checkpoint folder (HF/timm sources: see the loaders added below)."""
    path = Path(source)
    if path.is_dir() and (path / CONFIG_NAME).exists():
        model, labels, preprocessing, meta = load_native_folder(path)
        loaded = LoadedModel(model, model.config, labels, preprocessing, str(source), "native")
    else:
        raise CheckpointError(f"{source}: not a checkpoint folder, file or hub id that vit-explorer can read")
    if device is not None:
        loaded.model.to(device)
    return loaded


def save(loaded: LoadedModel, out_dir: str | os.PathLike[str]) -> Path:
    """Save a LoadedModel as a native checkpoint folder."""
    return save_native(out_dir, loaded.model, loaded.labels, loaded.preprocessing)


__all__ = ["CheckpointError", "LoadedModel", "Preprocess", "load", "save"]
