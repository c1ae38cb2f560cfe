"""Read state dicts from untrusted files: safetensors, or pickles with `torch.load(weights_only=True)` only.

Before anything is allocated: the file is a regular file of bounded size; a safetensors header is
read and checked by us (length, JSON, tensor count, dtypes, shapes, offsets), then its tensors are
views of a private memory map of the file (no copy; `release` gives back pages no longer needed); a
pickle archive's entries are checked (count, stored not compressed, sizes). After
reading: every tensor is a dense floating-point tensor (integer, bool and complex weights are no
weights), except BatchNorm's `num_batches_tracked` counter.
"""

from __future__ import annotations

import io
import math
import mmap
import pickle
import re
import warnings
import weakref
import zipfile
from pathlib import Path
from typing import Any

import torch

from .errors import CheckpointError
from .files import open_regular, parse_json
from .pickles import downgrade, downgrade_bytes, protocol

PICKLE_SUFFIXES = (".pth", ".pt", ".bin", ".ckpt")
WEIGHT_SUFFIXES = (".safetensors",) + PICKLE_SUFFIXES
WEIGHT_NAMES = ("model.safetensors", "pytorch_model.bin")  # what a hub-style folder holds, preferred first
MAX_WEIGHTS_BYTES = 100 * 2**30  # 25e9 parameters (models.config.MAX_PARAMETERS) in fp32 are 93 GiB
MAX_TENSORS = 10_000  # ViT-H has about 400, CaiT-M48 about 1000
MAX_HEADER_BYTES = 16 * 2**20  # a safetensors header lists name, dtype, shape and offsets: ~100 bytes a tensor
MAX_PICKLE_BYTES = 64 * 2**20  # data.pkl holds only the structure; the tensors' bytes are separate entries
MAX_DIMS = 8
# safetensors dtype -> bytes per element; only the floating-point ones are weights
SAFETENSORS_DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8, "I32": 4,
                      "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1, "C64": 8}
FLOAT_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
COUNTERS = ("num_batches_tracked",)  # BatchNorm's step counter (the conv stem): a 0-dim int64, not a weight
ZIP_MAGIC = b"PK\x03\x04"


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """A state dict from a .safetensors or a pickle file (weights only), every tensor checked."""
    if path.suffix == ".safetensors":
        state = read_safetensors(path)
    elif path.suffix in PICKLE_SUFFIXES:
        state = read_pickle(path)
    else:
        raise CheckpointError(f"{path}: unknown weights format; expected one of {', '.join(WEIGHT_SUFFIXES)}")
    check_tensors(state, path)
    return state


def check_weights_file(path: Path) -> None:
    """A quick look, without reading the tensors: the file is safetensors with a valid header, or a PyTorch
    archive or pickle. Names the file and what it is instead (e.g. a text file given a weights suffix)."""
    if path.suffix == ".safetensors":
        check_safetensors_header(path)
        return
    with open_regular(path, MAX_WEIGHTS_BYTES, "weights") as f:
        head = f.read(4)
    if not (head == ZIP_MAGIC or head[:1] == b"\x80"):  # torch.save's zip archive, or a pickle's PROTO opcode
        raise CheckpointError(f"{path}: not a PyTorch weights file (it is neither a torch.save archive nor a pickle)")


def find_weights(folder: Path) -> Path:
    """The weights file of a hub-style folder: model.safetensors, else pytorch_model.bin."""
    for name in WEIGHT_NAMES:
        if (folder / name).exists():
            return folder / name
    if (folder / "model.safetensors.index.json").exists() or (folder / "pytorch_model.bin.index.json").exists():
        raise CheckpointError(f"{folder}: sharded weights (*.index.json) are not supported; save unsharded")
    raise CheckpointError(f"{folder}: no weights found (expected {' or '.join(WEIGHT_NAMES)})")


# ---------------------------------------------------------------------------------------- safetensors
# (address, length, map) of the weights files read by memory map; a map lives as long as a tensor viewing it
_MAPS: list[tuple[int, int, weakref.ref[mmap.mmap]]] = []


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a checked safetensors file as views of a private memory map of it: nothing is copied
    (the pages are read when first used, and shared with the page cache), and a tensor written to gets a
    page of its own (copy-on-write), never the file. A tensor whose bytes are not aligned to its element
    size (no writer we know of does that) is copied."""
    entries = check_safetensors_header(path)
    try:
        with open_regular(path, MAX_WEIGHTS_BYTES, "weights") as f:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{path}: cannot map the weights file into memory ({error})") from None
    start = 8 + int.from_bytes(mapped[:8], "little")
    _MAPS[:] = [m for m in _MAPS if m[2]() is not None]
    _MAPS.append((torch.frombuffer(mapped, dtype=torch.uint8, count=1).data_ptr(), len(mapped), weakref.ref(mapped)))
    state = {}
    for name, entry in entries.items():
        dtype = FLOAT_DTYPES.get(entry["dtype"], torch.int64)  # the header allows only weights and counters
        first, last = entry["data_offsets"]
        if last == first:
            state[name] = torch.zeros(entry["shape"], dtype=dtype)
            continue
        size = dtype.itemsize
        view = torch.frombuffer(mapped, dtype=dtype, count=(last - first) // size, offset=start + first)
        state[name] = (view if (start + first) % size == 0 else view.clone()).reshape(entry["shape"])
    return state


def release(*tensors: torch.Tensor) -> None:
    """Give back the pages of memory-mapped tensors that are no longer needed (the parts of a fused q/k/v, the
    bf16 originals of an upcast copy): without it they stay resident beside what was made of them. The caller
    must not use these tensors again (their pages would be read from the file anew). Tensors that are not
    views of a mapped weights file are left alone."""
    page = mmap.PAGESIZE
    if not hasattr(mmap, "MADV_DONTNEED"):  # Windows: no madvise; the pages go when the map does
        return
    for t in tensors:
        ptr, n = t.data_ptr(), t.numel() * t.element_size()
        for base, length, ref in _MAPS:
            mapped = ref()
            if mapped is not None and base <= ptr and ptr + n <= base + length:
                first = -(-(ptr - base) // page) * page  # whole pages inside the tensor only: a neighbour keeps its own
                last = (ptr - base + n) // page * page
                if last > first:
                    mapped.madvise(mmap.MADV_DONTNEED, first, last - first)
                break


def check_safetensors_header(path: Path) -> dict[str, Any]:
    """The header of a safetensors file, checked: 8-byte length, JSON object, at most MAX_TENSORS
    entries of floating-point tensors whose shapes fit their byte ranges inside the file."""
    with open_regular(path, MAX_WEIGHTS_BYTES, "weights") as f:
        size = f.seek(0, io.SEEK_END)
        f.seek(0)
        head = f.read(8)
        if len(head) < 8:
            raise CheckpointError(f"{path}: cannot read safetensors weights, file is truncated or corrupt "
                                  f"({len(head)} bytes)")
        n = int.from_bytes(head, "little")
        if n > min(MAX_HEADER_BYTES, size - 8):
            raise CheckpointError(f"{path}: cannot read safetensors weights, file is truncated or corrupt (the header "
                                  f"claims {n:,} bytes; the file has {size - 8:,} after the length, and a header "
                                  f"may have at most {MAX_HEADER_BYTES:,})")
        header = parse_json(f.read(n), f"{path} (safetensors header)")
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: the safetensors header is not a JSON object")
    entries = {k: v for k, v in header.items() if k != "__metadata__"}
    if len(entries) > MAX_TENSORS:
        raise CheckpointError(f"{path}: lists {len(entries):,} tensors; a ViT checkpoint has at most {MAX_TENSORS:,}")
    data_size = size - 8 - n
    for name, entry in entries.items():
        _check_entry(path, name, entry, data_size)
    return entries


def _check_entry(path: Path, name: str, entry: Any, data_size: int) -> None:
    def bad(problem: str, corrupt: bool = True) -> CheckpointError:
        why = "cannot read safetensors weights, file is truncated or corrupt: " if corrupt else ""
        return CheckpointError(f"{path}: {why}tensor {name[:200]!r} {problem}")

    if not isinstance(entry, dict):
        raise bad("is not described by a JSON object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in SAFETENSORS_DTYPES:
        raise bad(f"has unknown dtype {str(dtype)[:20]!r}")
    if not (isinstance(shape, list) and len(shape) <= MAX_DIMS
            and all(type(s) is int and 0 <= s < 2**40 for s in shape)):
        raise bad(f"has an invalid shape (a list of at most {MAX_DIMS} non-negative integers is allowed)")
    if dtype not in FLOAT_DTYPES and not (name.endswith(COUNTERS) and dtype == "I64" and shape == []):
        raise bad(f"has dtype {dtype}; weights must be floating point (F32, F16, BF16 or F64)", corrupt=False)
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)
            and 0 <= offsets[0] <= offsets[1] <= data_size):
        raise bad(f"has data_offsets {str(offsets)[:60]} outside the file's {data_size:,} data bytes")
    if offsets[1] - offsets[0] != math.prod(shape) * SAFETENSORS_DTYPES[dtype]:
        raise bad(f"has shape {shape} of {dtype}, which does not fill its {offsets[1] - offsets[0]:,} bytes")


# --------------------------------------------------------------------------------------------- pickles
def read_pickle(path: Path) -> dict[str, torch.Tensor]:
    """A state dict from a .pth/.bin; never unpickles anything but tensors and plain containers."""
    with open_regular(path, MAX_WEIGHTS_BYTES, "weights") as f:
        source: Path | io.BytesIO = path
        try:
            head = f.read(4)
            f.seek(0)
            if head == ZIP_MAGIC:  # how torch.load tells its archive format from the legacy one
                if _zip_protocol(f) > 3:
                    source = _rewrite_zip(f)
            elif protocol(head) > 3:
                source = _rewrite_legacy(f)
        except (ValueError, EOFError, OSError, zipfile.BadZipFile, KeyError) as error:
            raise CheckpointError(f"{path}: cannot read PyTorch weights, file is truncated or corrupt "
                                  f"({_one_line(error)})") from None
    try:
        with warnings.catch_warnings():  # torch's notes on a file's contents (sparse tensors); we judge those
            warnings.simplefilter("ignore")
            obj = torch.load(source, map_location="cpu", weights_only=True)
    except MemoryError:
        raise CheckpointError(f"{path}: not enough memory to read these weights") from None
    except pickle.UnpicklingError as error:
        # torch's message advises loading unsafely; keep only the name of what was refused
        found = re.search(r"GLOBAL ([\w.]+)|unrecognized function ([\w.<> ]+)", str(error))
        if not found:  # not a refused object: bytes that are no pickle torch can read
            raise CheckpointError(f"{path}: cannot read PyTorch weights, file is truncated or corrupt "
                                  f"(not a pickle of tensors)") from None
        what = f" ({found.group(1) or found.group(2)})"
        raise CheckpointError(
            f"{path}: the file contains non-tensor objects{what} and will not be unpickled; "
            "vit-explorer reads pickles only with torch.load(weights_only=True). "
            "Re-save the weights as a plain state dict or as .safetensors"
        ) from None
    except Exception as error:  # a corrupt file makes torch raise almost anything (RuntimeError, KeyError, ...)
        raise CheckpointError(f"{path}: cannot read PyTorch weights, file is truncated or corrupt "
                              f"({_one_line(error)})") from None
    return unwrap_state_dict(obj, path)


def _one_line(error: BaseException) -> str:
    """The first line of an error, without torch's advice to retry with weights_only=False."""
    text = (str(error).strip().splitlines() or [type(error).__name__])[0]
    if "weights_only" in text or "Weights only" in text:
        return type(error).__name__
    return text[:200]


def _zip_protocol(f: Any) -> int:
    """Check a torch.save archive's entries before torch reads it; the protocol of its data.pkl."""
    with zipfile.ZipFile(f) as archive:
        infos = archive.infolist()
        if len(infos) > MAX_TENSORS + 16:
            raise ValueError(f"{len(infos):,} entries in the archive")
        total = sum(info.file_size for info in infos)
        size = f.seek(0, io.SEEK_END)
        compressed = [i.filename for i in infos if i.compress_type != zipfile.ZIP_STORED]
        if compressed or total > size:
            # torch.save stores entries uncompressed; a compressed one could expand without bound
            raise ValueError(f"compressed entries ({compressed[0][:80] if compressed else 'sizes exceed the file'})")
        pickles = [i for i in infos if i.filename.endswith("data.pkl")]
        if len(pickles) != 1 or pickles[0].file_size > MAX_PICKLE_BYTES:
            raise ValueError("no single data.pkl of bounded size")
        with archive.open(pickles[0]) as data:
            return protocol(data.read(2))


def _rewrite_zip(f: Any) -> io.BytesIO:
    """The archive with its data.pkl rewritten as protocol 2 (in memory; tensors' bytes are copied)."""
    out = io.BytesIO()
    with zipfile.ZipFile(f) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("data.pkl"):
                data = downgrade_bytes(data, 4 * MAX_PICKLE_BYTES)
            dst.writestr(info, data)
    out.seek(0)
    return out


def _rewrite_legacy(f: Any) -> io.BytesIO:
    """A pre-1.6 torch.save file (five pickles, then the tensors' bytes) with the pickles as protocol 2."""
    out = io.BytesIO()
    for _ in range(5):  # magic number, format version, system info, the object, storage keys
        out.write(downgrade(f, 4 * MAX_PICKLE_BYTES))
    out.write(f.read())
    out.seek(0)
    return out


def unwrap_state_dict(obj: Any, path: Path) -> dict[str, torch.Tensor]:
    """Accept a bare state dict or one wrapped as {'model': sd}, {'state_dict': sd} or {'model_ema': sd}."""
    if isinstance(obj, dict):
        for key in ("model", "state_dict", "model_ema"):
            if isinstance(obj.get(key), dict):
                obj = obj[key]
                break
    if not isinstance(obj, dict) or not obj:
        raise CheckpointError(f"{path}: expected a state dict (name -> tensor), got {type(obj).__name__}")
    if not all(isinstance(k, str) for k in obj):
        raise CheckpointError(f"{path}: a state dict's names must be strings; found "
                              f"{next(type(k).__name__ for k in obj if not isinstance(k, str))}")
    tensors = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}
    if not tensors:
        raise CheckpointError(f"{path}: no tensors found; keys: {sorted(obj)[:10]}")
    # DataParallel / DDP wrappers prefix every name with 'module.'
    if all(k.startswith("module.") for k in tensors):
        tensors = {k[len("module."):]: v for k, v in tensors.items()}
    return tensors


# ------------------------------------------------------------------------------------- tensor checks
def check_tensors(state: dict[str, torch.Tensor], path: Path) -> None:
    """Every tensor dense and floating point (a counter excepted); CheckpointError naming the first that is not."""
    if len(state) > MAX_TENSORS:
        raise CheckpointError(f"{path}: {len(state):,} tensors; a ViT checkpoint has at most {MAX_TENSORS:,}")
    for name, t in state.items():
        if t.layout != torch.strided:
            raise CheckpointError(f"{path}: tensor {name!r} is {t.layout}; weights are dense tensors")
        if t.dim() > MAX_DIMS:
            raise CheckpointError(f"{path}: tensor {name!r} has {t.dim()} dimensions (at most {MAX_DIMS})")
        if name.endswith(COUNTERS) and t.dtype == torch.int64 and t.dim() == 0:
            continue
        if not t.is_floating_point() or t.dtype not in FLOAT_DTYPES.values():
            raise CheckpointError(f"{path}: tensor {name!r} has dtype {str(t.dtype).removeprefix('torch.')}; "
                                  "weights must be floating point (float32, float16, bfloat16 or float64)")


def nonfinite_warning(state: dict[str, torch.Tensor], where: str, limit: int = 5) -> str | None:
    """A warning naming the tensors that hold NaN or infinite values, or None if all are finite."""
    bad = []
    for name, t in state.items():
        # one pass without allocating: a NaN or an infinity makes the sum non-finite (so, rarely, does an
        # overflow of finite values); only then is the tensor counted element by element
        if t.is_floating_point() and not math.isfinite(float(t.sum())):
            finite = torch.isfinite(t)
            if not bool(finite.all()):
                nan = int(torch.isnan(t).sum())
                bad.append(f"{name} ({nan:,} NaN, {int((~finite).sum()) - nan:,} infinite of {t.numel():,})")
    if not bad:
        return None
    shown = ", ".join(bad[:limit]) + (f", and {len(bad) - limit} more" if len(bad) > limit else "")
    return f"{where}: {len(bad)} weight tensor(s) hold NaN or infinite values, so outputs may be NaN: {shown}"

