"""The native format: a folder with `vit_explorer.json` (config, labels, preprocessing) and
`model.safetensors` (the state dict, parameter names as in `VisionTransformer`)."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from ..models import ConfigError, VisionTransformer, ViTConfig
from .errors import CheckpointError
from .labels import generic_labels
from .preprocess import Preprocess

CONFIG_NAME = "vit_explorer.json"
WEIGHTS_NAME = "model.safetensors"
FORMAT_VERSION = 1


def _read_umask() -> int:
    mask = os.umask(0)  # the only way to read it is to set it; done once, at import, before any thread
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def write_atomic(path: Path, write: Any) -> None:
    """Write through a temporary file in the same folder, then rename: never a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


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


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from a file, or a CheckpointError naming the file."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path}: file is missing") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def read_meta(folder: Path) -> dict[str, Any]:
    path = folder / CONFIG_NAME
    meta = read_json(path)
    if meta.get("format") != "vit-explorer" or "config" not in meta:
        raise CheckpointError(f"{path}: not a vit-explorer checkpoint description (no 'format'/'config')")
    return meta


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    if not path.exists():
        raise CheckpointError(f"{path}: weights file is missing")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(f"{path}: cannot read safetensors weights, file is truncated or corrupt ({error})") \
            from None


def _summarise(keys: list[str], limit: int = 30) -> str:
    """Keys that differ only in a block index are shown once with '*' (blocks.*.attn.qkv.weight)."""
    groups: dict[str, list[str]] = {}
    for key in keys:
        groups.setdefault(re.sub(r"\.\d+\.", ".*.", key), []).append(key)
    shown = [pattern if len(members) > 1 else members[0] for pattern, members in groups.items()]
    return ", ".join(shown[:limit]) + (", ..." if len(shown) > limit else "")


def check_state_dict(model: torch.nn.Module, state: dict[str, torch.Tensor], where: str) -> None:
    """Compare keys and shapes with the model; name every missing, unexpected and mis-shaped key."""
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    misshaped = [f"{k}: checkpoint {tuple(state[k].shape)} vs model {tuple(expected[k].shape)}"
                 for k in sorted(set(expected) & set(state)) if state[k].shape != expected[k].shape]
    if missing or unexpected or misshaped:
        parts = []
        for title, items in (("missing", missing), ("unexpected", unexpected)):
            if items:
                parts.append(f"{len(items)} {title} keys: {_summarise(items)}")
        if misshaped:
            shown = ", ".join(misshaped[:12]) + (", ..." if len(misshaped) > 12 else "")
            parts.append(f"{len(misshaped)} mis-shaped keys: {shown}")
        raise CheckpointError(f"{where}: weights do not match the architecture; " + "; ".join(parts))


def build_model(config: ViTConfig, state: dict[str, torch.Tensor], where: str) -> VisionTransformer:
    """Build the model on the meta device (no allocation), check the weights, then assign them.

    Floating-point weights become float32 (fp16/bf16 checkpoints), matching what `preprocess` returns.
    """
    state = {k: v.float() if v.is_floating_point() else v for k, v in state.items()}
    with torch.device("meta"):
        model = VisionTransformer(config)
    check_state_dict(model, state, where)
    model.load_state_dict(state, assign=True)
    # buffers that are not saved (the zero [MASK] when there is no learned one) were on meta
    for name, buf in list(model.named_buffers()):
        if buf.is_meta:
            module_name, _, attr = name.rpartition(".")
            module = model.get_submodule(module_name) if module_name else model
            module.register_buffer(attr, torch.zeros(buf.shape, dtype=buf.dtype), persistent=False)
    return model.eval()


def config_from_meta(meta: dict[str, Any], where: Path) -> ViTConfig:
    try:
        return ViTConfig.from_dict(meta["config"])
    except (ConfigError, TypeError) as error:
        raise CheckpointError(f"{where}: invalid model config: {error}") from None


def load_native_folder(folder: Path, weights: Path | None = None
                       ) -> tuple[VisionTransformer, list[str], Preprocess, dict[str, Any]]:
    """A native folder; `weights` names another .safetensors file described by the folder's json."""
    meta = read_meta(folder)
    config = config_from_meta(meta, folder / CONFIG_NAME)
    weights = weights or folder / WEIGHTS_NAME
    state = read_safetensors(weights)
    model = build_model(config, state, str(weights))
    labels = list(meta.get("labels") or generic_labels(config.num_classes))
    if config.num_classes and len(labels) != config.num_classes:
        raise CheckpointError(f"{folder / CONFIG_NAME}: {len(labels)} labels for {config.num_classes} classes")
    pre = meta.get("preprocessing")
    try:
        preprocessing = Preprocess.from_dict(pre) if pre else Preprocess(config.image_size)
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"{folder / CONFIG_NAME}: invalid preprocessing: {error}") from None
    return model, labels, preprocessing, meta
