"""Read and write checkpoints: Hugging Face, timm and the native format.

`load(source)` accepts a hub id (`org/name` for Hugging Face, `timm/name.tag` for timm), a folder
(HF `save_pretrained`, timm hub layout with `architecture` in config.json, native with
vit_explorer.json) or a weights file (.safetensors, or a .pth/.bin read with weights_only=True).
Neither transformers nor timm is imported.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from .errors import CheckpointError
from .files import WEIGHT_SUFFIXES, find_weights, read_weights
from .hf_format import (
    config_from_hf,
    hf_files,
    hf_to_native,
    labels_from_hf,
    native_to_hf,
    preprocess_from_hf,
)
from .loaded import LoadedModel
from .native import CONFIG_NAME, build_model, load_native_folder, read_json, save_native, write_atomic
from .preprocess import Preprocess
from .timm_format import config_from_timm, labels_from_timm, parse_name, preprocess_from_timm, timm_to_native

_HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")


def load(source: str | os.PathLike[str], *, device: str | None = None, arch: str | None = None) -> LoadedModel:
    """Load a hub id, folder or weights file into a LoadedModel (model in eval mode on `device`).

    `arch` is the timm model name (e.g. 'deit_small_distilled_patch16_224') for timm weights that
    do not say what they are (a bare state dict); it overrides a timm config's `architecture`.
    """
    text = os.fspath(source)
    path = Path(text).expanduser()
    if path.exists():
        loaded = _load_path(path, arch)
    elif _HUB_ID.fullmatch(text) and path.suffix not in WEIGHT_SUFFIXES:
        from .hub import download

        folder = download(text, ("config.json", "preprocessor_config.json"))
        kind = _config_kind(read_json(folder / "config.json"), folder / "config.json")
        loaded = _load_timm_folder(folder, arch) if kind == "timm" else _load_hf_folder(folder)
        loaded.details["hub_id"] = text
    else:
        raise CheckpointError(f"{text}: no such file or folder, and not a hub id ('org/name' or 'timm/name')")
    loaded.source = text
    if device is not None:
        try:
            loaded.model.to(device)
        except (AssertionError, RuntimeError, ValueError) as error:  # e.g. 'cuda' on a machine without CUDA
            raise CheckpointError(f"{text}: cannot move the model to device {device!r} ({error})") from None
    return loaded


def _load_path(path: Path, arch: str | None) -> LoadedModel:
    if path.is_dir():
        if (path / CONFIG_NAME).exists():
            return _load_native(path)
        if not (path / "config.json").exists():
            raise CheckpointError(f"{path}: a folder without {CONFIG_NAME} or config.json is no checkpoint "
                                  "vit-explorer can read")
        kind = _config_kind(read_json(path / "config.json"), path / "config.json")
        return _load_timm_folder(path, arch) if kind == "timm" else _load_hf_folder(path)
    if path.suffix not in WEIGHT_SUFFIXES:
        raise CheckpointError(f"{path}: unknown file type; expected a folder or one of {', '.join(WEIGHT_SUFFIXES)}")
    folder = path.parent
    if path.suffix == ".safetensors" and (folder / CONFIG_NAME).exists():
        return _load_native(folder, path)
    if (folder / "config.json").exists():
        config = read_json(folder / "config.json")
        if _config_kind(config, folder / "config.json") == "hf":
            return _load_hf_folder(folder, path)
        return _load_timm_folder(folder, arch, path)
    if arch is None:
        raise CheckpointError(
            f"{path}: a bare state dict does not say which model it is; give the timm model name "
            f"(arch=..., --arch), e.g. vit_base_patch16_224 or cait_s24_224")
    return _load_timm(read_weights(path), arch, {}, {}, str(path))


def _config_kind(config: dict[str, Any], where: Path) -> str:
    if "architecture" in config:
        return "timm"
    if "model_type" in config:
        return "hf"
    raise CheckpointError(f"{where}: neither a timm config ('architecture') nor a Hugging Face one ('model_type')")


def _load_native(folder: Path, weights: Path | None = None) -> LoadedModel:
    model, labels, preprocessing, meta = load_native_folder(folder, weights)
    details = {"weights": str(weights or folder / "model.safetensors"), "training": meta.get("training", {})}
    return LoadedModel(model, model.config, labels, preprocessing, str(folder), "native", details)


def _load_hf_folder(folder: Path, weights: Path | None = None) -> LoadedModel:
    config_path = folder / "config.json"
    hf = read_json(config_path)
    weights = weights or find_weights(folder)
    state = hf_to_native(read_weights(weights))
    config = config_from_hf(hf, state, config_path)
    model = build_model(config, state, str(weights))
    labels = labels_from_hf(hf, config.num_classes, config_path)
    preprocessing = preprocess_from_hf(folder, hf["model_type"], config.image_size)
    details = {"architecture": (hf.get("architectures") or [hf["model_type"]])[0], "weights": str(weights)}
    return LoadedModel(model, config, labels, preprocessing, str(folder), "hf", details)


def _load_timm_folder(folder: Path, arch: str | None, weights: Path | None = None) -> LoadedModel:
    path = folder / "config.json"
    cfg = read_json(path) if path.exists() else {}
    name = arch or cfg.get("architecture")
    if not name:
        raise CheckpointError(f"{path}: no 'architecture' (timm model name); give arch=...")
    weights = weights or find_weights(folder)
    model_args = dict(cfg.get("model_args") or {})
    if "global_pool" in cfg:
        model_args.setdefault("global_pool", cfg["global_pool"])
    return _load_timm(read_weights(weights), name, model_args, cfg.get("pretrained_cfg") or {}, str(weights))


def _load_timm(raw: dict[str, Any], name: str, model_args: dict[str, Any], pretrained_cfg: dict[str, Any],
               where: str) -> LoadedModel:
    parsed = parse_name(name)
    state = timm_to_native(raw)
    config = config_from_timm(name, state, model_args, where)
    model = build_model(config, state, where)
    labels = labels_from_timm(pretrained_cfg, config.num_classes)
    preprocessing = preprocess_from_timm(pretrained_cfg, config, parsed.family, where)
    details = {"architecture": name.removeprefix("timm/"), "weights": where}
    return LoadedModel(model, config, labels, preprocessing, where, "timm", details)


def save(loaded: LoadedModel, out_dir: str | os.PathLike[str]) -> Path:
    """Save a LoadedModel as a native checkpoint folder."""
    extra = {"source": loaded.source, "source_kind": loaded.kind}
    return save_native(out_dir, loaded.model, loaded.labels, loaded.preprocessing, extra)


def convert(loaded: LoadedModel, to: str, out_dir: str | os.PathLike[str]) -> Path:
    """Write `loaded` as a native folder (to='native') or a Hugging Face ViT/DeiT folder (to='hf')
    that transformers' `from_pretrained` loads to the same logits.

    Refuses a folder that already holds a checkpoint (the source included): converting must never
    overwrite weights, or leave a folder whose files describe two different models.
    """
    out = Path(out_dir)
    existing = [name for name in (CONFIG_NAME, "config.json", "model.safetensors", "pytorch_model.bin")
                if (out / name).exists()]
    if existing:
        raise CheckpointError(f"{out}: already holds a checkpoint ({', '.join(existing)}); "
                              "choose an empty or new folder")
    if to == "native":
        return save(loaded, out_dir)
    if to != "hf":
        raise CheckpointError(f"cannot convert to {to!r}; choose 'native' or 'hf'")
    from safetensors.torch import save_file

    hf, processor = hf_files(loaded.config, loaded.labels, loaded.preprocessing)
    # a learned [MASK] is for masked-image modelling; the classification models have no slot for it
    state = {k: v.detach().cpu().contiguous() for k, v in loaded.model.state_dict().items() if k != "mask_token"}
    state = native_to_hf(state, hf["architectures"][0])
    write_atomic(out / "model.safetensors", lambda tmp: save_file(state, tmp, metadata={"format": "pt"}))
    write_atomic(out / "config.json", lambda tmp: Path(tmp).write_text(json.dumps(hf, indent=2)))
    write_atomic(out / "preprocessor_config.json", lambda tmp: Path(tmp).write_text(json.dumps(processor, indent=2)))
    return out


__all__ = ["CheckpointError", "LoadedModel", "Preprocess", "convert", "load", "save"]
