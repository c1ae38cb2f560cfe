"""Read and write checkpoints: Hugging Face, timm and the native format.

`load(source)` accepts a hub id (`org/name` for Hugging Face, `timm/name.tag` for timm), a folder
(HF `save_pretrained`, timm hub layout with `architecture` in config.json, native with
vit_explorer.json) or a weights file (.safetensors, or a .pth/.bin read with weights_only=True).
The formats are a table (formats.FORMATS); every file is validated before it is used (files.py,
fields.py, schemas.py, weights.py). Neither transformers nor timm is imported.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from pathlib import Path

import torch

from ..jobs import Progress
from .build import parse_dtype
from .devices import resolve_device
from .errors import CheckpointError, CheckpointWarning
from .files import write_atomic, write_folder
from .formats import read
from .hf_format import hf_files, hf_weights
from .loaded import LoadedModel
from .native import CONFIG_NAME, save_native
from .preprocess import Preprocess
from .source import Source
from .weights import WEIGHT_NAMES, WEIGHT_SUFFIXES

_HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")


def load(source: str | os.PathLike[str], *, device: str | None = None, arch: str | None = None,
         dtype: str | torch.dtype | None = None, progress: Progress | None = None) -> LoadedModel:
    """Load a hub id, folder or weights file into a LoadedModel (model in eval mode on `device`).

    `arch` is the timm model name (e.g. 'deit_small_distilled_patch16_224') for timm weights that
    do not say what they are (a bare state dict); it overrides a timm config's `architecture`.
    The weights are read by memory map and keep their stored dtype (a bf16 checkpoint runs in bf16, on the
    CPU as torch does), unless `dtype` ('float32', 'bfloat16', 'float16', 'float64') says otherwise (an
    upcast); `LoadedModel.dtype` says which. `progress(fraction, stage)` hears of each stage of the load.
    Problems found on the way that do not stop loading (NaN weights) are in `LoadedModel.warnings`
    and are also issued as CheckpointWarning.
    """
    text = os.fspath(source)
    target = resolve_device(device)
    wanted = parse_dtype(dtype)
    path = Path(text).expanduser()
    if path.exists():
        if path.is_dir():
            found = Source(path, None, arch)
        elif path.suffix in WEIGHT_SUFFIXES:
            found = Source(path.parent, path, arch)
        else:
            raise CheckpointError(f"{path}: unknown file type; expected a folder or one of "
                                  f"{', '.join(WEIGHT_SUFFIXES)}")
        loaded = read(found, target, wanted, progress)
    elif _HUB_ID.fullmatch(text) and path.suffix not in WEIGHT_SUFFIXES:
        from .hub import download

        loaded = read(Source(download(text, ("config.json", "preprocessor_config.json")), None, arch), target, wanted,
                      progress)
        loaded.details["hub_id"] = text
    else:
        raise CheckpointError(f"{text}: no such file or folder, and not a hub id ('org/name' or 'timm/name')")
    loaded.source = text
    for warning in loaded.warnings:
        warnings.warn(warning, CheckpointWarning, stacklevel=2)
    if device is not None:
        try:
            loaded.model.to(target)
        except (AssertionError, RuntimeError, ValueError) as error:  # e.g. out of GPU memory
            raise CheckpointError(f"{text}: cannot move the model to device {device!r} ({error})") from None
    return loaded


def save(loaded: LoadedModel, out_dir: str | os.PathLike[str]) -> Path:
    """Save a LoadedModel as a native checkpoint folder."""
    extra = {"source": loaded.source, "source_kind": loaded.kind}
    return save_native(out_dir, loaded.model, loaded.labels, loaded.preprocessing, extra)


def convert(loaded: LoadedModel, to: str, out_dir: str | os.PathLike[str]) -> Path:
    """Write `loaded` as a native folder (to='native') or a Hugging Face ViT, DeiT or DINOv2 folder
    (to='hf') that transformers' `from_pretrained` loads to the same outputs.

    The folder is written whole or not at all (through a temporary sibling renamed at the end), and
    must be new or empty: converting must never overwrite weights, mix the files of two models, or
    leave a half-written folder that a retry would refuse.
    """
    out = Path(out_dir)
    existing = [name for name in (CONFIG_NAME, "config.json", *WEIGHT_NAMES) if (out / name).exists()]
    if existing:
        raise CheckpointError(f"{out}: already holds a checkpoint ({', '.join(existing)}); "
                              "choose an empty or new folder")
    if to == "native":
        return write_folder(out, lambda tmp: save(loaded, tmp))
    if to != "hf":
        raise CheckpointError(f"cannot convert to {to!r}; choose 'native' or 'hf'")
    from safetensors.torch import save_file

    hf, processor = hf_files(loaded.config, loaded.labels, loaded.preprocessing)
    state = hf_weights(loaded.config, {k: v.detach().cpu().contiguous() for k, v in loaded.model.state_dict().items()})

    def write(folder: Path) -> None:
        write_atomic(folder / "model.safetensors", lambda tmp: save_file(state, tmp, metadata={"format": "pt"}))
        write_atomic(folder / "config.json", lambda tmp: Path(tmp).write_text(json.dumps(hf, indent=2)))
        write_atomic(folder / "preprocessor_config.json",
                     lambda tmp: Path(tmp).write_text(json.dumps(processor, indent=2)))

    return write_folder(out, write)


__all__ = ["CheckpointError", "CheckpointWarning", "LoadedModel", "Preprocess", "convert", "load", "save",
           "save_native"]
