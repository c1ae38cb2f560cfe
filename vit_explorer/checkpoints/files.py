"""Read weights and JSON safely: safetensors, or pickles with `torch.load(weights_only=True)` only."""

from __future__ import annotations

import pickle
import re
import zipfile
from pathlib import Path
from typing import Any

import torch

from .errors import CheckpointError
from .native import read_safetensors

PICKLE_SUFFIXES = (".pth", ".pt", ".bin", ".ckpt")
WEIGHT_SUFFIXES = (".safetensors",) + PICKLE_SUFFIXES


def read_pickle(path: Path) -> dict[str, torch.Tensor]:
    """A state dict from a .pth/.bin; never unpickles anything but tensors and plain containers."""
    if not path.exists():
        raise CheckpointError(f"{path}: weights file is missing")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        # torch's message advises unsafe loading; keep only the name of what was refused
        found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(error))
        what = f" ({found.group(1)})" if found else ""
        raise CheckpointError(
            f"{path}: the file contains non-tensor objects{what} and will not be unpickled; "
            "vit-explorer reads pickles only with torch.load(weights_only=True). "
            "Re-save the weights as a plain state dict or as .safetensors"
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError, zipfile.BadZipFile) as error:
        raise CheckpointError(f"{path}: cannot read PyTorch weights, file is truncated or corrupt ({error})") from None
    return unwrap_state_dict(obj, path)


def unwrap_state_dict(obj: Any, path: Path) -> dict[str, torch.Tensor]:
    """Accept a bare state dict or one wrapped as {'model': sd}, {'state_dict': sd} or {'model_ema': sd}."""
    if isinstance(obj, dict):
        for key in ("model", "state_dict", "model_ema"):
            if isinstance(obj.get(key), dict):
                obj = obj[key]
                break
    if not isinstance(obj, dict) or not obj:
        raise CheckpointError(f"{path}: expected a state dict (name -> tensor), got {type(obj).__name__}")
    tensors = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}
    if not tensors:
        raise CheckpointError(f"{path}: no tensors found; keys: {sorted(map(str, obj))[:10]}")
    # DataParallel / DDP wrappers prefix every name with 'module.'
    if all(k.startswith("module.") for k in tensors):
        tensors = {k[len("module."):]: v for k, v in tensors.items()}
    return tensors


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """A state dict from a .safetensors or a pickle file (weights only)."""
    if path.suffix == ".safetensors":
        return read_safetensors(path)
    if path.suffix in PICKLE_SUFFIXES:
        return read_pickle(path)
    raise CheckpointError(f"{path}: unknown weights format; expected one of {', '.join(WEIGHT_SUFFIXES)}")


def find_weights(folder: Path) -> Path:
    """The weights file of a hub-style folder: model.safetensors, else pytorch_model.bin."""
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (folder / name).exists():
            return folder / name
    if (folder / "model.safetensors.index.json").exists() or (folder / "pytorch_model.bin.index.json").exists():
        raise CheckpointError(f"{folder}: sharded weights (*.index.json) are not supported; save unsharded")
    raise CheckpointError(f"{folder}: no weights found (expected model.safetensors or pytorch_model.bin)")
