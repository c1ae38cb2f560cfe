"""The checkpoint formats vit-explorer reads, in the order `read` tries them, and the one path every
format's checkpoint takes from files to a LoadedModel.

Each entry has three functions: `detect` (is this source in the format?), `read_config` (its
config files, validated, before any weights are read; it also names the weights file) and
`convert` (the weights renamed to ours, with the config they will be checked against). Adding a
format is a module with those three functions and its line in FORMATS, plus tests.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic

import torch

from ..jobs import Progress
from . import hf_format, native, timm_format
from .build import build_model, stored_dtype
from .errors import CheckpointError
from .labels import named_labels
from .loaded import LoadedModel
from .memory import check_fits, check_model_fits
from .source import Checkpoint, Declared, Source, T
from .weights import nonfinite_warning, read_weights


@dataclass(frozen=True)
class Format(Generic[T]):
    kind: str  # LoadedModel.kind
    detect: Callable[[Source], bool]
    read_config: Callable[[Source], Declared[T]]
    convert: Callable[[Declared[T], dict[str, torch.Tensor]], Checkpoint]


FORMATS: tuple[Format[Any], ...] = (
    Format("native", native.detect, native.read_config, native.convert),  # vit_explorer.json
    Format("hf", hf_format.detect, hf_format.read_config, hf_format.convert),  # config.json with model_type
    Format("timm", timm_format.detect, timm_format.read_config, timm_format.convert),  # config.json, architecture
    Format("timm", timm_format.detect_bare, timm_format.read_bare, timm_format.convert),  # a weights file + arch
)


def read(source: Source, device: torch.device, dtype: torch.dtype | None = None,
         progress: Progress | None = None) -> LoadedModel:
    """The first format that detects `source`, read, checked and built on the CPU, in the weights' own dtype or
    `dtype`; `progress(fraction, stage)` hears of each stage (loads of large models take seconds)."""
    say = progress or (lambda fraction, stage: None)
    fmt = next((f for f in FORMATS if f.detect(source)), None)
    if fmt is None:
        raise _unrecognised(source)
    declared = fmt.read_config(source)
    weights = declared.weights
    if weights.is_file():  # the file is mapped, and its pages become resident as they are used
        check_fits(os.path.getsize(weights), torch.device("cpu"), "reading these weights", str(weights))
    say(0.1, "mapping the weights")
    raw = read_weights(weights)
    stored = stored_dtype(raw)
    target = dtype or stored
    say(0.3, "renaming the weights" + (" (fusing q, k, v)" if fmt.kind == "hf" else ""))
    checkpoint = fmt.convert(declared, raw)
    del raw  # the checkpoint's state holds what is still needed (the parts of a fused q/k/v are gone)
    (h, w), patch = checkpoint.preprocessing.size, checkpoint.config.patch_size
    if h % patch or w % patch:
        raise CheckpointError(f"{checkpoint.preprocessing_from or declared.described_by}: the preprocessing gives "
                              f"{h}x{w} inputs, which the model's patch size {patch} does not divide")
    # the weights are mapped now; building converts those in another dtype than `target` one at a time (an
    # upcast needs the new copy), then inference runs on `device` (which, if not the CPU, gets the parameters)
    cpu = torch.device("cpu")
    itemsize = target.itemsize
    converted = sum(t.numel() * itemsize for t in checkpoint.state.values()
                    if t.is_floating_point() and t.dtype != target)
    if device == cpu:
        check_model_fits(checkpoint.config, cpu, declared.described_by, loaded=True, extra=converted, dtype=target)
    else:
        check_fits(converted, cpu, f"converting these weights to {str(target).removeprefix('torch.')}", str(weights))
        check_model_fits(checkpoint.config, device, declared.described_by, dtype=target)
    say(0.5, f"building the model in {str(target).removeprefix('torch.')}"
        + (f" (upcasting from {str(stored).removeprefix('torch.')})" if target != stored else ""))
    model = build_model(checkpoint.config, checkpoint.state, str(weights), declared.described_by, checkpoint.names,
                        target)
    say(0.8, "checking the weights for NaN")
    warning = nonfinite_warning(checkpoint.state, str(weights))
    labels, labels_note = named_labels(checkpoint.labels)
    details = {**checkpoint.details, **({"labels": labels_note} if labels_note else {}),
               "dtype": str(target).removeprefix("torch."), "stored_dtype": str(stored).removeprefix("torch.")}
    say(1.0, "loaded")
    return LoadedModel(model, checkpoint.config, labels, checkpoint.preprocessing, str(source.file or
                       source.folder), fmt.kind, details, [warning] if warning else [])


def _unrecognised(source: Source) -> CheckpointError:
    if source.config_json is not None:
        return CheckpointError(f"{source.folder / 'config.json'}: neither a timm config ('architecture') nor a "
                               "Hugging Face one ('model_type')")
    return CheckpointError(f"{source.folder}: a folder without {native.CONFIG_NAME} or config.json is no "
                           "checkpoint vit-explorer can read")
