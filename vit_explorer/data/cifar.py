"""CIFAR-10/100 from the standard local python-pickle files (the `cifar-10-batches-py` and
`cifar-100-python` folders of the official archives); nothing is downloaded."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)


def is_cifar10(folder: Path) -> bool:
    return (folder / "data_batch_1").is_file() and (folder / "batches.meta").is_file()


def is_cifar100(folder: Path) -> bool:
    return (folder / "train").is_file() and (folder / "test").is_file() and (folder / "meta").is_file()


def _unpickle(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ValueError(f"{path}: CIFAR file is missing")
    try:
        with open(path, "rb") as f:
            data = pickle.load(f, encoding="bytes")
    except (pickle.UnpicklingError, EOFError, OSError, ValueError) as error:
        raise ValueError(f"{path}: not a readable CIFAR pickle file ({error})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a CIFAR pickle file (expected a dict)")
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in data.items()}


def _batch(path: Path, label_key: str) -> tuple[torch.Tensor, torch.Tensor]:
    data = _unpickle(path)
    if "data" not in data or label_key not in data:
        raise ValueError(f"{path}: CIFAR file without 'data' and '{label_key}' entries")
    pixels = np.asarray(data["data"], dtype=np.uint8)
    if pixels.ndim != 2 or pixels.shape[1] != 3 * 32 * 32:
        raise ValueError(f"{path}: CIFAR 'data' should be (N, 3072) bytes, got shape {pixels.shape}")
    labels = np.asarray(data[label_key], dtype=np.int64)
    if labels.shape != (pixels.shape[0],):
        raise ValueError(f"{path}: {labels.shape[0]} labels for {pixels.shape[0]} images")
    # rows are 1024 red, then 1024 green, then 1024 blue values in raster order
    return torch.from_numpy(pixels.reshape(-1, 3, 32, 32).copy()), torch.from_numpy(labels)


def _names(path: Path, key: str) -> list[str]:
    names = _unpickle(path).get(key)
    if not names:
        raise ValueError(f"{path}: no '{key}' list of class names")
    return [n.decode() if isinstance(n, bytes) else str(n) for n in names]


def load_cifar(folder: Path) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor], list[str]]:
    """(train images, labels), (test images, labels), class names from a CIFAR-10 or -100 folder."""
    if is_cifar10(folder):
        parts = [_batch(folder / f"data_batch_{i}", "labels") for i in range(1, 6)]
        train = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
        test = _batch(folder / "test_batch", "labels")
        names = _names(folder / "batches.meta", "label_names")
    elif is_cifar100(folder):
        train = _batch(folder / "train", "fine_labels")
        test = _batch(folder / "test", "fine_labels")
        names = _names(folder / "meta", "fine_label_names")
    else:
        raise ValueError(f"{folder}: not a CIFAR folder (expected data_batch_1..5, test_batch, batches.meta "
                         "for CIFAR-10 or train, test, meta for CIFAR-100)")
    for labels in (train[1], test[1]):
        if labels.numel() and (labels.min() < 0 or labels.max() >= len(names)):
            raise ValueError(f"{folder}: labels outside 0..{len(names) - 1}")
    return train, test, names
