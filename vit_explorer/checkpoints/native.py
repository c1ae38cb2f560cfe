"""The native format: a folder with `vit_explorer.json` (config, labels, preprocessing; its schema is
`schemas.parse_native`) and `model.safetensors` (the state dict, parameter names as in
`VisionTransformer`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from safetensors.torch import save_file

from ..models import VisionTransformer
from .build import build_model, check_state_dict
from .errors import CheckpointError
from .files import read_json, write_atomic
from .labels import generic_labels
from .preprocess import Preprocess
from .schemas import FORMAT_VERSION, NativeMeta, parse_native
from .source import Checkpoint, Declared, Source

CONFIG_NAME = "vit_explorer.json"
WEIGHTS_NAME = "model.safetensors"
# names of our dimensions in the json's config, for messages
NATIVE_NAMES = {"width": "embed_dim", "mlp_width": "MLP width (embed_dim x mlp_ratio)", "heads": "num_heads",
                "pos_rows": "position-table rows (patches, plus prefix tokens if pos_embed_prefix)",
                "class_mlp_width": "class-attention MLP width (embed_dim x class_attn_mlp_ratio)"}
# build_model, check_state_dict, read_json and write_atomic lived here once and are still imported from here
__all__ = ["CONFIG_NAME", "FORMAT_VERSION", "WEIGHTS_NAME", "build_model", "check_state_dict", "convert", "detect",
           "read_config", "read_json", "read_meta", "save_native", "write_atomic"]


def save_native(out_dir: str | os.PathLike[str], model: VisionTransformer, labels: list[str],
                preprocessing: Preprocess, extra: dict[str, Any] | None = None) -> Path:
    """Save weights and metadata as a native checkpoint folder (atomically, file by file)."""
    out = Path(out_dir)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    meta = {
        "format": "vit-explorer",
        "version": FORMAT_VERSION,
        "config": model.config.to_dict(),
        "labels": list(labels),
        "preprocessing": preprocessing.to_dict(),
        **(extra or {}),
    }
    write_atomic(out / WEIGHTS_NAME, lambda tmp: save_file(state, tmp, metadata={"format": "pt"}))
    write_atomic(out / CONFIG_NAME, lambda tmp: Path(tmp).write_text(json.dumps(meta, indent=2)))
    return out


def read_meta(folder: Path) -> dict[str, Any]:
    """The folder's vit_explorer.json as written (checked to be ours, and valid)."""
    path = folder / CONFIG_NAME
    meta = read_json(path)
    parse_native(meta, str(path))
    return meta


# ------------------------------------------------------------------------------------ the format entry
def detect(source: Source) -> bool:
    return source.has(CONFIG_NAME) and (source.file is None or source.file.suffix == ".safetensors")


def read_config(source: Source) -> Declared[NativeMeta]:
    path = source.folder / CONFIG_NAME
    return Declared(parse_native(read_json(path), str(path)), source.file or source.folder / WEIGHTS_NAME, str(path))


def convert(declared: Declared[NativeMeta], raw: dict[str, Any]) -> Checkpoint:
    """Native weights already have our names; the config is the json's, checked when the model is built."""
    meta, config = declared.spec, declared.spec.config
    try:
        preprocessing = meta.preprocessing or Preprocess(config.image_size)
    except ValueError as error:
        raise CheckpointError(f"{declared.described_by}: no preprocessing given, and the default fails: {error}") \
            from None
    return Checkpoint(config, raw, meta.labels or generic_labels(config.num_classes), preprocessing,
                      {"weights": str(declared.weights), "training": meta.training}, NATIVE_NAMES,
                      declared.described_by)
