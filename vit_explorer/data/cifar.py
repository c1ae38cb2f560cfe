"""CIFAR-10/100 from the standard local python-pickle files (the `cifar-10-batches-py` and
`cifar-100-python` folders of the official archives); nothing is downloaded.

The files are pickles, so they are read with a restricted unpickler (as `torch.load(weights_only=True)`
reads tensors): it builds containers, bytes, strings, numbers and plain numeric numpy arrays, and
refuses every other global a pickle names, so a crafted file cannot run code.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)
MAX_FILE_BYTES = 512 * 2**20  # the largest official file (CIFAR-100 `train`) is about 155 MB
MAX_CLASSES = 1000


def is_cifar10(folder: Path) -> bool:
    return (folder / "data_batch_1").is_file() and (folder / "batches.meta").is_file()


def is_cifar100(folder: Path) -> bool:
    return (folder / "train").is_file() and (folder / "test").is_file() and (folder / "meta").is_file()


class Refused(pickle.UnpicklingError):
    """A pickle that asks for something a CIFAR file never holds."""


class _NDArray:
    """Stands for `numpy.ndarray` in a pickle: only `_reconstruct` may receive it (it cannot build arrays itself)."""


def _empty_array(subtype: Any, shape: Any, typecode: Any) -> np.ndarray:
    """numpy's `_reconstruct`: the empty array that the pickle's BUILD then fills (numpy checks the sizes)."""
    if subtype is not _NDArray or shape != (0,):
        raise Refused("numpy array reconstruction with unexpected arguments")
    return np.empty((0,), dtype=np.int8)


def _plain_dtype(spec: Any, align: Any = False, copy: Any = True) -> np.dtype:
    """numpy.dtype, for plain (non-object) dtypes only: object arrays would hold arbitrary objects."""
    if not isinstance(spec, (str, bytes)):
        raise Refused(f"numpy dtype from {type(spec).__name__}")
    dtype = np.dtype(spec.decode("ascii") if isinstance(spec, bytes) else spec, bool(align), bool(copy))
    if dtype.hasobject:
        raise Refused("numpy object arrays are not allowed")
    return dtype


def _frombuffer(buffer: Any, dtype: Any, shape: Any, order: Any) -> np.ndarray:
    """numpy's `_frombuffer` (pickle protocol 5): a copy of the bytes as an array of that shape."""
    if not isinstance(dtype, np.dtype) or dtype.hasobject or order not in ("C", "F"):
        raise Refused("numpy array from a buffer with unexpected arguments")
    return np.frombuffer(buffer, dtype=dtype).reshape(shape, order=order).copy()


def _latin1(text: Any, encoding: Any = "latin1") -> bytes:
    """`_codecs.encode(text, 'latin1')`: how Python 3 writes bytes with pickle protocols 0-2."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise Refused("_codecs.encode with unexpected arguments")
    return text.encode("latin1")


# every global a CIFAR pickle names, whichever numpy and pickle protocol wrote it
ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"): _empty_array,
    ("numpy._core.multiarray", "_reconstruct"): _empty_array,
    ("numpy", "ndarray"): _NDArray,
    ("numpy", "dtype"): _plain_dtype,
    ("numpy.core.numeric", "_frombuffer"): _frombuffer,
    ("numpy._core.numeric", "_frombuffer"): _frombuffer,
    ("_codecs", "encode"): _latin1,
}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in ALLOWED:
            raise Refused(f"it names {module}.{name}, which a CIFAR file never does")
        return ALLOWED[module, name]


def _unpickle(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ValueError(f"{path}: CIFAR file is missing (or is not a regular file)")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ValueError(f"{path}: {size:,} bytes, larger than any CIFAR file ({MAX_FILE_BYTES:,} at most)")
    try:
        data = _Unpickler(io.BytesIO(path.read_bytes()), encoding="bytes").load()
    except Refused as error:
        raise ValueError(f"{path}: refused to read this pickle: {error}") from None
    except Exception as error:  # noqa: BLE001 - a malformed opcode stream raises any of a dozen types
        raise ValueError(f"{path}: not a readable CIFAR pickle file ({type(error).__name__}: {error})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a CIFAR pickle file (expected a dict, got {type(data).__name__})")
    return {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in data.items()}


def _batch(path: Path, label_key: str) -> tuple[torch.Tensor, torch.Tensor]:
    data = _unpickle(path)
    if "data" not in data or label_key not in data:
        raise ValueError(f"{path}: CIFAR file without 'data' and '{label_key}' entries")
    pixels = data["data"]
    if not isinstance(pixels, np.ndarray) or pixels.dtype != np.uint8 or pixels.ndim != 2 \
            or pixels.shape[1] != 3 * 32 * 32:
        shown = (f"a {pixels.dtype} array of shape {pixels.shape}" if isinstance(pixels, np.ndarray)
                 else type(pixels).__name__)
        raise ValueError(f"{path}: CIFAR 'data' should be a uint8 array of shape (N, 3072), got {shown}")
    labels = data[label_key]
    if isinstance(labels, np.ndarray) and labels.dtype.kind in "iu" and labels.ndim == 1:
        labels = labels.astype(np.int64)
    elif isinstance(labels, list) and all(type(v) is int and abs(v) < 2**31 for v in labels):  # flat: no nesting
        labels = np.asarray(labels, dtype=np.int64) if labels else np.zeros(0, dtype=np.int64)
    else:
        raise ValueError(f"{path}: CIFAR '{label_key}' should be a list of class numbers")
    if labels.shape != (pixels.shape[0],):
        raise ValueError(f"{path}: {labels.shape[0]} labels for {pixels.shape[0]} images")
    # rows are 1024 red, then 1024 green, then 1024 blue values in raster order
    return torch.from_numpy(pixels.reshape(-1, 3, 32, 32).copy()), torch.from_numpy(labels)


def _names(path: Path, key: str) -> list[str]:
    names = _unpickle(path).get(key)
    if not isinstance(names, list) or not names or len(names) > MAX_CLASSES \
            or not all(isinstance(n, (bytes, str)) and 0 < len(n) <= 256 for n in names):
        raise ValueError(f"{path}: no '{key}' list of class names (1 to {MAX_CLASSES} names, each a short string)")
    return [n.decode("utf-8", "replace") if isinstance(n, bytes) else n for n in names]


def load_cifar(folder: Path) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor], list[str]]:
    """(train images, labels), (test images, labels), class names from a CIFAR-10 or -100 folder."""
    if is_cifar10(folder):
        files, label_key = [folder / f"data_batch_{i}" for i in range(1, 6)] + [folder / "test_batch"], "labels"
        meta, names_key = folder / "batches.meta", "label_names"
    elif is_cifar100(folder):
        files, label_key = [folder / "train", folder / "test"], "fine_labels"
        meta, names_key = folder / "meta", "fine_label_names"
    else:
        raise ValueError(f"{folder}: not a CIFAR folder (expected data_batch_1..5, test_batch, batches.meta "
                         "for CIFAR-10 or train, test, meta for CIFAR-100)")
    parts = [_batch(path, label_key) for path in files]
    names = _names(meta, names_key)
    for path, (_, labels) in zip(files, parts, strict=True):
        if labels.numel() and (labels.min() < 0 or labels.max() >= len(names)):
            raise ValueError(f"{path}: labels outside 0..{len(names) - 1} ({meta.name} names {len(names)} classes)")
    train = torch.cat([p[0] for p in parts[:-1]]), torch.cat([p[1] for p in parts[:-1]])
    return train, parts[-1], names
