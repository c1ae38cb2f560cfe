"""A feature store: every image's tokens at chosen token states, on disk, read memory-mapped and streamed.

Layout of a store folder:

    STORE/manifest.json            what the store holds (check_manifest), written by rank 0
    STORE/.writing.lock            flocked by the process writing the store
    STORE/<shard>/shard.json       how far the shard got: {"next": image position, "rows": images written, "skipped"}
    STORE/<shard>/index.npy        (capacity,) int64: the image position (into manifest "images") of each row
    STORE/<shard>/pooled.npy       (capacity, D') float32: what the head reads
    STORE/<shard>/predicted.npy    (capacity,) int64: the model's class (-1 without a classifier)
    STORE/<shard>/s<state>_<kind>.npy   float32: cls / mean (capacity, D), patch (capacity * patches, D)
    STORE/<shard>/patches.npy, patch_index.npy, norm_mean.npy, norm_max.npy, norm_argmax.npy, prefix_norms.npy
                                   (and distance.npy): what explore.dataset.Features reads, every state (EXTRAS)

A shard is a run of consecutive images written by one process (one rank under torchrun); its files are allocated
for all its images at once and filled in order, and shard.json is rewritten after each batch is flushed, so an
interrupted run resumes where it stopped. Images not yet in the store (by stable id: a content hash of the image
and its path) are appended as new shards. Rows are the images kept (an unreadable one is skipped and named), in
shard order; patch rows are (image, patch) flattened, image-major, patches in raster order over the grid.

Every file is read as hostile: the manifest is a bounded regular file whose schema and sizes are checked before any
array is mapped; arrays are regular files whose header must declare the dtype and shape the manifest implies, read
with `np.load(..., allow_pickle=False, mmap_mode='r')`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..checkpoints import LoadedModel
from ..checkpoints.errors import CheckpointError
from ..checkpoints.files import open_regular, parse_json, read_bounded, write_atomic
from ..errors import UserError, describe
from ..jobs import Job
from ..text import shown
from . import dataset as D

FORMAT = "vit-explorer-store"
VERSION = 1
KINDS = ("cls", "mean", "patch")
MANIFEST = "manifest.json"
SHARD_STATUS = "shard.json"
LOCK = ".writing.lock"  # flocked by the process writing the store
MAX_MANIFEST_BYTES = 512 * 2**20  # 1,000,000 images take about 150 MiB of manifest
MAX_STATUS_BYTES = 64 * 2**20
MAX_IMAGES = 50_000_000
MAX_WIDTH = 65_536
MAX_STATES = 4_096
MAX_PATCHES = 1_000_000
MAX_SHARDS = 100_000
MAX_TEXT = 4_096  # characters of a path, a name or a skipped message
SHARD_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
ID = re.compile(r"^[0-9a-f]{32}$")


class StoreError(UserError, ValueError):
    """A store that cannot be read, or that holds other features than asked for; the message names the folder."""


# ---------------------------------------------------------------------------------------------- the manifest
def _int(value: Any, where: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise StoreError(f"{where}: expected a whole number from {lo:,} to {hi:,}, got {shown(repr(value))}")
    return value


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise StoreError(f"{where}: expected text of at most {MAX_TEXT} characters")
    return value


def _list(value: Any, where: str, most: int) -> list[Any]:
    if not isinstance(value, list) or len(value) > most:
        raise StoreError(f"{where}: expected a list of at most {most:,} items")
    return value


def _dict(value: Any, where: str, keys: Sequence[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise StoreError(f"{where}: expected an object")
    missing = [k for k in keys if k not in value]
    if missing:
        raise StoreError(f"{where}: missing {', '.join(missing)}")
    return value


def check_manifest(data: Any, where: str) -> dict[str, Any]:
    """The manifest, its schema and sizes checked (StoreError naming `where` and the field otherwise)."""
    m = _dict(data, where, ("format", "version", "model", "preprocessing", "states", "kinds", "width", "pooled_width",
                            "patches", "grid", "depth", "prefix_names", "sample", "distance", "data", "images",
                            "shards"))
    if m["format"] != FORMAT:
        raise StoreError(f"{where}: not a vit-explorer feature store (format {shown(repr(m['format']))})")
    if m["version"] != VERSION:
        raise StoreError(f"{where}: a feature store of version {shown(repr(m['version']))}; this vit-explorer reads "
                         f"version {VERSION}")
    model = _dict(m["model"], f"{where}: model", ("hash", "name"))
    _text(model["hash"], f"{where}: model.hash")
    _text(model["name"], f"{where}: model.name")
    _dict(m["preprocessing"], f"{where}: preprocessing", ())
    states = [_int(s, f"{where}: states", 0, MAX_STATES) for s in _list(m["states"], f"{where}: states", MAX_STATES)]
    kinds = [_text(k, f"{where}: kinds") for k in _list(m["kinds"], f"{where}: kinds", len(KINDS))]
    if not states or len(set(states)) != len(states) or not kinds or len(set(kinds)) != len(kinds) \
            or any(k not in KINDS for k in kinds):
        raise StoreError(f"{where}: states must be distinct state numbers and kinds distinct names among {KINDS}")
    _int(m["width"], f"{where}: width", 1, MAX_WIDTH)
    _int(m["pooled_width"], f"{where}: pooled_width", 1, MAX_WIDTH)
    if any(st > _int(m["depth"], f"{where}: depth", 0, MAX_STATES) for st in states):
        raise StoreError(f"{where}: states must lie in 0..depth")
    [_text(n, f"{where}: prefix_names") for n in _list(m["prefix_names"], f"{where}: prefix_names", MAX_PATCHES)]
    if m["sample"] is not None:
        sample = _dict(m["sample"], f"{where}: sample", ("patches", "seed"))
        _int(sample["patches"], f"{where}: sample.patches", 0, MAX_PATCHES)
        _int(sample["seed"], f"{where}: sample.seed", 0, 2**63 - 1)
    if m["distance"] is not None:
        distance = _dict(m["distance"], f"{where}: distance", ("blocks", "heads"))
        _int(distance["blocks"], f"{where}: distance.blocks", 1, MAX_STATES)
        _int(distance["heads"], f"{where}: distance.heads", 1, MAX_WIDTH)
    _int(m["patches"], f"{where}: patches", 1, MAX_PATCHES)
    grid = [_int(g, f"{where}: grid", 1, MAX_PATCHES) for g in _list(m["grid"], f"{where}: grid", 2)]
    if len(grid) != 2 or grid[0] * grid[1] != m["patches"]:  # numbers first: "a" * 10**9 is a string
        raise StoreError(f"{where}: grid must be [rows, cols] with rows x cols = patches")
    data_ = _dict(m["data"], f"{where}: data", ("name", "label_names"))
    _text(data_["name"], f"{where}: data.name")
    [_text(n, f"{where}: data.label_names") for n in _list(data_["label_names"], f"{where}: label_names", 10**6)]
    images = _list(m["images"], f"{where}: images", MAX_IMAGES)
    ids = set()
    for n, image in enumerate(images):
        at = f"{where}: images[{n}]"
        image = _dict(image, at, ("id", "path", "label", "split"))
        if not isinstance(image["id"], str) or not ID.match(image["id"]) or image["id"] in ids:
            raise StoreError(f"{at}: id must be 32 hexadecimal digits, unique")
        ids.add(image["id"])
        _text(image["path"], f"{at}.path")
        _int(image["label"], f"{at}.label", -1, len(data_["label_names"]) - 1)
        _int(image["split"], f"{at}.split", 0, 1)
    shards = _list(m["shards"], f"{where}: shards", MAX_SHARDS)
    names, end = set(), 0
    for n, shard in enumerate(shards):
        at = f"{where}: shards[{n}]"
        shard = _dict(shard, at, ("name", "start", "stop"))
        if not isinstance(shard["name"], str) or not SHARD_NAME.match(shard["name"]) or shard["name"] in names:
            raise StoreError(f"{at}: name must be lowercase letters, digits and '-', unique")
        names.add(shard["name"])
        if _int(shard["start"], f"{at}.start", 0, len(images)) != end:
            raise StoreError(f"{at}: shards must cover the images in order, without gaps or overlaps")
        end = _int(shard["stop"], f"{at}.stop", shard["start"], len(images))
    if end != len(images):
        raise StoreError(f"{where}: the shards cover {end:,} of the {len(images):,} images")
    return m


def _read_json(path: Path, limit: int, what: str) -> Any:
    try:
        return parse_json(read_bounded(path, limit, what, StoreError), str(path))
    except CheckpointError as error:
        raise StoreError(str(error)) from None


def _status(path: Path, shard: dict[str, Any]) -> dict[str, Any]:
    """A shard's shard.json, checked against its place in the manifest (a missing one: nothing written yet)."""
    file = path / shard["name"] / SHARD_STATUS
    if not file.exists() and not file.is_symlink():
        return {"next": shard["start"], "rows": 0, "skipped": []}
    s = _dict(_read_json(file, MAX_STATUS_BYTES, "shard status"), str(file), ("next", "rows", "skipped"))
    _int(s["next"], f"{file}: next", shard["start"], shard["stop"])
    _int(s["rows"], f"{file}: rows", 0, s["next"] - shard["start"])
    [_text(m, f"{file}: skipped") for m in _list(s["skipped"], f"{file}: skipped", shard["stop"] - shard["start"])]
    return s


def _map(file: Path, dtype: np.dtype[Any], shape: tuple[int, ...]) -> np.ndarray:
    """A read-only memory map of an .npy file whose header declares exactly `dtype` and `shape` (checked before
    mapping: a regular file, the size the header implies), else StoreError naming the file."""
    expected = int(np.prod(shape)) * dtype.itemsize
    with open_regular(file, expected + 65_536, "store array", StoreError) as f:
        try:
            version = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            header = read(f, max_header_size=10_000)
            offset = f.tell()
            size = f.seek(0, 2)
        except (ValueError, OSError, SyntaxError) as error:
            raise StoreError(f"{file}: not a readable .npy array ({error})") from None
    got_shape, fortran, got_dtype = header
    if tuple(got_shape) != shape or got_dtype != dtype or fortran or size != offset + expected:
        raise StoreError(f"{file}: holds {got_dtype} {tuple(got_shape)} ({size:,} bytes); the manifest implies "
                         f"{dtype} {shape}")
    try:
        array = np.load(file, allow_pickle=False, mmap_mode="r")
    except (ValueError, OSError) as error:
        raise StoreError(f"{file}: not a readable .npy array ({error})") from None
    if array.shape != shape or array.dtype != dtype:
        raise StoreError(f"{file}: changed while it was read")
    return array


def _array_name(state: int, kind: str) -> str:
    return f"s{state}_{kind}.npy"


def _shapes(m: dict[str, Any], capacity: int) -> dict[str, tuple[tuple[int, ...], str]]:
    """Every array file of a shard of `capacity` images: its shape and dtype, from the (checked) manifest."""
    width, states = m["width"], m["depth"] + 1
    out: dict[str, tuple[tuple[int, ...], str]] = {
        "index.npy": ((capacity,), "<i8"), "predicted.npy": ((capacity,), "<i8"),
        "pooled.npy": ((capacity, m["pooled_width"]), "<f4")}
    for state in m["states"]:
        for kind in m["kinds"]:
            out[_array_name(state, kind)] = ((capacity * (m["patches"] if kind == "patch" else 1), width), "<f4")
    if m["sample"] is not None:  # what the dataset analyses read (explore.dataset.Features), every state
        k = m["sample"]["patches"]
        out.update({"patches.npy": ((capacity, states, k, width), "<f2"), "patch_index.npy": ((capacity, k), "<i4"),
                    "norm_mean.npy": ((capacity, states), "<f4"), "norm_max.npy": ((capacity, states), "<f4"),
                    "norm_argmax.npy": ((capacity, states), "<i4"),
                    "prefix_norms.npy": ((capacity, states, len(m["prefix_names"])), "<f4")})
    if m["distance"] is not None:
        out["distance.npy"] = ((capacity, m["distance"]["blocks"], m["distance"]["heads"]), "<f4")
    return out


EXTRAS = ("patches", "patch_index", "norm_mean", "norm_max", "norm_argmax", "prefix_norms", "distance")


# ---------------------------------------------------------------------------------------------- reading
@dataclass
class _Shard:
    name: str
    start: int  # image positions [start, stop) of the manifest's images
    stop: int
    rows: int  # images written (kept)
    next: int  # the next image position to process (stop: complete)
    skipped: list[str]


class FeatureStore:
    """A store opened for reading (`FeatureStore.open`): the manifest and memory-mapped token arrays."""

    def __init__(self, path: Path, manifest: dict[str, Any], shards: list[_Shard]) -> None:
        self.path, self.manifest, self.shards = path, manifest, shards
        self._maps: dict[tuple[str, str], np.ndarray] = {}
        self.embedded = 0  # images the write_store call that returned this store embedded (resumed or new)

    @classmethod
    def open(cls, path: str | Path) -> FeatureStore:
        """Open the store folder `path`, its manifest and shard records checked (StoreError otherwise)."""
        path = Path(path)
        if not path.is_dir():
            raise StoreError(f"{shown(str(path))}: no feature store (not a folder)")
        manifest = check_manifest(_read_json(path / MANIFEST, MAX_MANIFEST_BYTES, "store manifest"),
                                  str(path / MANIFEST))
        shards = []
        for s in manifest["shards"]:
            status = _status(path, s)
            shards.append(_Shard(s["name"], s["start"], s["stop"], status["rows"], status["next"], status["skipped"]))
        return cls(path, manifest, shards)

    @property
    def states(self) -> list[int]:
        return list(self.manifest["states"])

    @property
    def kinds(self) -> list[str]:
        return list(self.manifest["kinds"])

    @property
    def width(self) -> int:
        return int(self.manifest["width"])

    @property
    def patches(self) -> int:
        """Patch tokens per image (the rows of 'patch' per image)."""
        return int(self.manifest["patches"])

    @property
    def complete(self) -> bool:
        return all(s.next == s.stop for s in self.shards)

    def __len__(self) -> int:
        """Images stored (rows of 'cls' and 'mean')."""
        return sum(s.rows for s in self.shards)

    def _array(self, shard: _Shard, name: str) -> np.ndarray:
        """The memory map of one of a shard's files, its header checked against the manifest (`_shapes`)."""
        key = (shard.name, name)
        if key not in self._maps:
            shape, dtype = _shapes(self.manifest, shard.stop - shard.start)[name]
            self._maps[key] = _map(self.path / shard.name / name, np.dtype(dtype), shape)
        return self._maps[key]

    def _check(self, state: int, kind: str) -> None:
        if kind not in self.kinds:
            raise StoreError(f"{self.path}: holds no {kind!r} tokens (it holds {', '.join(self.kinds)}); embed "
                             f"them with --store-tokens")
        if state not in self.states:
            raise StoreError(f"{self.path}: holds no token state {state} (it holds {self.states})")

    def _part(self, shard: _Shard, state: int, kind: str) -> np.ndarray:
        """One shard's (rows, D) tokens of `kind` at `state`, memory-mapped (patch: rows x patches)."""
        per = self.patches if kind == "patch" else 1
        return self._array(shard, _array_name(state, kind))[: shard.rows * per]

    def tokens(self, state: int, kind: str) -> np.ndarray:
        """(rows, D) float32 tokens of `kind` ('cls', 'mean' or 'patch': rows = images x patches, image-major) at
        `state`: a memory map when the store has one shard, else the shards joined in memory (use iter_tokens to
        stream a large store)."""
        self._check(state, kind)
        parts = [self._part(s, state, kind) for s in self.shards if s.rows]
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else np.zeros((0, self.width), np.float32)

    def iter_tokens(self, state: int, kind: str, batch_size: int = 4096) -> Iterator[np.ndarray]:
        """The rows of `tokens(state, kind)` in order, as float32 arrays (batch_size, D) (the last may be shorter),
        each a copy: memory is one batch, whatever the store's size."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self._check(state, kind)
        pending: list[np.ndarray] = []
        held = 0
        for shard in self.shards:
            part = self._part(shard, state, kind)
            start = 0
            while start < len(part):
                take = min(batch_size - held, len(part) - start)
                pending.append(part[start:start + take])
                held += take
                start += take
                if held == batch_size:
                    yield np.array(np.concatenate(pending), dtype=np.float32)
                    pending, held = [], 0
        if held:
            yield np.array(np.concatenate(pending), dtype=np.float32)

    def rows(self, rows: np.ndarray, state: int, kind: str) -> np.ndarray:
        """Rows (m,) of `tokens(state, kind)` in that order, (m, D) float32, read from the maps without the rest."""
        self._check(state, kind)
        rows = np.asarray(rows, dtype=np.int64)
        per = self.patches if kind == "patch" else 1
        offsets = np.cumsum([0] + [s.rows * per for s in self.shards])
        if rows.size and (rows.min() < 0 or rows.max() >= offsets[-1]):
            raise IndexError(f"rows must lie in 0..{offsets[-1] - 1}")
        out = np.empty((len(rows), self.width), np.float32)
        which = np.searchsorted(offsets, rows, side="right") - 1
        for n, shard in enumerate(self.shards):
            pick = np.flatnonzero(which == n)
            if len(pick):
                out[pick] = self._part(shard, state, kind)[rows[pick] - offsets[n]]
        return out

    def column(self, state: int, kind: str) -> Column:
        """`tokens(state, kind)` as rows read on demand (what `dataset_analysis.cka_arrays` takes)."""
        self._check(state, kind)
        return Column(self, state, kind)

    def per_image(self, name: str) -> np.ndarray:
        """A per-image array of every stored image (rows, ...): 'index', 'pooled', 'predicted', and where the store
        keeps them the dataset analyses' EXTRAS."""
        if f"{name}.npy" not in _shapes(self.manifest, 0):
            raise StoreError(f"{self.path}: holds no {name!r} per image")
        parts = [self._array(s, f"{name}.npy")[: s.rows] for s in self.shards if s.rows]
        if not parts:
            shape, dtype = _shapes(self.manifest, 0)[f"{name}.npy"]
            return np.zeros(shape, dtype)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def image_index(self) -> np.ndarray:
        """(rows,) int64: the position in manifest["images"] of each stored image."""
        index = self.per_image("index")
        if index.size and (index.min() < 0 or index.max() >= len(self.manifest["images"])):
            raise StoreError(f"{self.path}: an index.npy names images the manifest does not hold")
        return np.asarray(index)

    def labels(self) -> np.ndarray:
        """(rows,) int64 class index of each stored image (-1 unlabelled)."""
        images = self.manifest["images"]
        return np.asarray([images[i]["label"] for i in self.image_index()], dtype=np.int64)

    def split(self) -> np.ndarray:
        """(rows,) int8: 0 train, 1 validation."""
        images = self.manifest["images"]
        return np.asarray([images[i]["split"] for i in self.image_index()], dtype=np.int8)

    def paths(self) -> list[str]:
        images = self.manifest["images"]
        return [images[i]["path"] for i in self.image_index()]

    def pooled(self) -> np.ndarray:
        return self.per_image("pooled")

    def predicted(self) -> np.ndarray:
        return self.per_image("predicted")

    @property
    def skipped(self) -> list[str]:
        return [m for s in self.shards for m in s.skipped]


class Column:
    """One state's tokens of one kind in a store, read by rows: `column[rows]` (m, D), `column[:]` all of them."""

    def __init__(self, store: FeatureStore, state: int, kind: str) -> None:
        self.store, self.state, self.kind = store, state, kind
        per = store.patches if kind == "patch" else 1
        self.shape = (len(store) * per, store.width)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows: Any) -> np.ndarray:
        return self.store.rows(np.arange(self.shape[0])[rows], self.state, self.kind)


def features(store: FeatureStore, source: D.DatasetSource, ids: list[str] | None = None) -> D.Features:
    """The dataset analyses' Features of the images of `source` (`ids`: their image_ids) that the store holds, in
    the source's order; the unreadable ones left out and named. StoreError for a store that does not keep them
    (every state's mean, the sampled patches and norms)."""
    m = store.manifest
    if m["sample"] is None or m["states"] != list(range(m["depth"] + 1)) or "mean" not in m["kinds"]:
        raise StoreError(f"{store.path}: keeps not every state's tokens and samples; the dataset analyses need them")
    ids = D.image_ids(source) if ids is None else ids
    row_of = {m["images"][position]["id"]: row for row, position in enumerate(store.image_index())}
    kept = [i for i, image_id in enumerate(ids) if image_id in row_of]
    said: dict[str, str] = {}  # id -> why it was skipped
    written = set(store.image_index().tolist())
    for shard in store.shards:
        missing = [p for p in range(shard.start, shard.next) if p not in written]
        said.update({m["images"][p]["id"]: message for p, message in zip(missing, shard.skipped, strict=False)})
    skipped = [said[image_id] for image_id in ids if image_id in said]
    if not kept:
        first = skipped[0] if skipped else "the dataset is empty"
        raise ValueError(f"{source.name}: none of the {len(source)} images can be read (the first: {first})")
    rows = np.asarray([row_of[ids[i]] for i in kept])
    per = {name: store.per_image(name)[rows] for name in ("pooled", "predicted", *EXTRAS) if name != "distance"}
    states = store.states
    return D.Features(
        source=source.subset(np.asarray(kept)), depth=m["depth"],
        cls={s: store.rows(rows, s, "cls") for s in states} if "cls" in m["kinds"] else {},
        mean={s: store.rows(rows, s, "mean") for s in states}, pooled=per["pooled"],
        predicted=per["predicted"].astype(np.int64), patches=per["patches"], patch_index=per["patch_index"],
        grid=(m["grid"][0], m["grid"][1]), norm_mean=per["norm_mean"], norm_max=per["norm_max"],
        norm_argmax=per["norm_argmax"], prefix_norms=per["prefix_norms"], prefix_names=tuple(m["prefix_names"]),
        distance=store.per_image("distance")[rows] if m["distance"] is not None else None, skipped=skipped)


# ---------------------------------------------------------------------------------------------- writing
def _recipe(loaded: LoadedModel, states: Sequence[int], kinds: Sequence[str], patches: int, seed: int,
            distance: bool) -> dict[str, Any]:
    """The manifest's fields that decide the features: another store with other values is another store."""
    layout = loaded.model.layout(loaded.preprocessing.size)
    cfg = loaded.config
    return {"format": FORMAT, "version": VERSION,
            "model": {"hash": D.model_hash(loaded), "name": type(loaded.model).__name__},
            "preprocessing": D.dataset_preprocessing(loaded).to_dict(), "states": list(states), "kinds": list(kinds),
            "width": cfg.embed_dim, "pooled_width": cfg.pooled_dim or cfg.embed_dim, "patches": layout.num_patches,
            "grid": list(layout.grid), "depth": cfg.depth, "prefix_names": list(layout.prefix_names),
            "sample": {"patches": min(patches, layout.num_patches), "seed": seed},
            "distance": {"blocks": cfg.depth, "heads": cfg.num_heads} if distance else None}


def _differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    said = {"model": "the model (weights hash {} here, {} asked)", "preprocessing": "the preprocessing ({} here, {} "
            "asked)", "states": "the token states ({} here, {} asked)", "kinds": "the token kinds ({} here, {} asked)",
            "sample": "the sampled patch tokens ({} here, {} asked)",
            "distance": "the attention distances ({} here, {} asked)"}
    out = []
    for key, value in new.items():
        if old.get(key) != value:
            a, b = old.get(key), value
            if key == "model":
                a, b = (old.get("model") or {}).get("hash"), value["hash"]
            out.append(said.get(key, key + " ({} here, {} asked)").format(shown(json.dumps(a)), shown(json.dumps(b))))
    return out


def _write_json(path: Path, data: dict[str, Any]) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            json.dump(data, f)

    write_atomic(path, write)


def default_kinds(loaded: LoadedModel) -> tuple[str, ...]:
    """'cls' (where every state holds a [CLS]) and 'mean': what the probes, CKA and the projector read."""
    return ("cls", "mean") if D.readout_states(loaded) else ("mean",)


def _plan(path: Path, recipe: dict[str, Any], source: D.DatasetSource, ids: list[str], world: int
          ) -> tuple[dict[str, Any], list[int]]:
    """The manifest to write (the old one with the new images appended as `world` new shards) and the positions
    (into manifest['shards']) of the shards still to fill. StoreError when the folder holds another store."""
    if (path / MANIFEST).exists() or (path / MANIFEST).is_symlink():
        where = str(path / MANIFEST)
        manifest = check_manifest(_read_json(path / MANIFEST, MAX_MANIFEST_BYTES, "store manifest"), where)
        if differs := _differences(manifest, recipe):
            raise StoreError(f"--store {shown(str(path))}: a store made by another model or preprocessing; it "
                             f"differs in {'; '.join(differs)}. Use another folder, or delete this one")
        if manifest["data"]["label_names"] != source.label_names:
            raise StoreError(f"--store {shown(str(path))}: holds images of the classes "
                             f"{shown(', '.join(manifest['data']['label_names']))}, these have "
                             f"{shown(', '.join(source.label_names))}; use another folder")
    elif path.exists() and (not path.is_dir() or any(p.name != LOCK for p in path.iterdir())):
        raise StoreError(f"--store {shown(str(path))}: not empty and not a feature store; choose a new folder")
    else:
        manifest = {**recipe, "data": {"name": source.name, "label_names": list(source.label_names)}, "images": [],
                    "shards": []}
    known = {image["id"] for image in manifest["images"]}
    new = [i for i, image_id in enumerate(ids) if image_id not in known]
    start = len(manifest["images"])
    manifest["images"] += [{"id": ids[i], "path": source.paths[i], "label": int(source.labels[i]),
                            "split": int(source.split[i])} for i in new]
    todo = [n for n, s in enumerate(manifest["shards"]) if _status(path, s)["next"] < s["stop"]]
    first = len(manifest["shards"])
    for n, part in enumerate(np.array_split(np.arange(start, start + len(new)), world)):
        if len(part):
            manifest["shards"].append({"name": f"r{n}-{first + n:05d}", "start": int(part[0]),
                                       "stop": int(part[-1]) + 1})
    todo += list(range(first, len(manifest["shards"])))
    return check_manifest(manifest, str(path / MANIFEST)), todo


def _fill(path: Path, manifest: dict[str, Any], shard: dict[str, Any], loaded: LoadedModel,
          source: D.DatasetSource, where: dict[str, int], batch_size: int, job: Job) -> None:
    """Extract the shard's images not yet written into its preallocated arrays, recording progress per batch."""
    folder = path / shard["name"]
    folder.mkdir(parents=True, exist_ok=True)
    status = _status(path, shard)
    mode = "r+" if status["next"] > shard["start"] else "w+"
    shapes = _shapes(manifest, shard["stop"] - shard["start"])
    if mode == "r+":  # resumed: the arrays must be what this shard's record says they are
        for name, (shape, dtype) in shapes.items():
            _map(folder / name, np.dtype(dtype), shape)
    maps = {name: np.lib.format.open_memmap(folder / name, mode=mode, dtype=dtype, shape=shape)
            for name, (shape, dtype) in shapes.items()}
    positions = np.arange(status["next"], shard["stop"])  # manifest positions still to extract
    images = manifest["images"]
    missing = [images[i]["path"] for i in positions if images[i]["id"] not in where]
    if missing:
        raise StoreError(f"--store {shown(str(path))}: shard {shard['name']} is unfinished and needs "
                         f"{len(missing):,} images these data do not hold (the first: {shown(missing[0])}); resume "
                         "with the same --data and --limit")
    order = np.asarray([where[images[i]["id"]] for i in positions], np.int64)  # source indices
    position_of = dict(zip(order.tolist(), positions.tolist(), strict=True))
    k = manifest["sample"]["patches"] if manifest["sample"] else 0
    sample = np.stack([D.patch_sample(images[i]["id"], manifest["patches"], k, manifest["sample"]["seed"])
                       for i in positions]) if k and len(positions) else np.zeros((len(positions), k), np.int64)
    sample_of = dict(zip(order.tolist(), sample, strict=True))
    rows, skipped = status["rows"], list(status["skipped"])
    patch_states = tuple(manifest["states"]) if "patch" in manifest["kinds"] else ()
    done = 0
    D._keep_heap_small()
    for kept, pixels, bad in D._batches(source, loaded, batch_size, job, order):
        skipped += bad
        done += len(kept) + len(bad)
        if pixels is not None:
            b, per = len(kept), manifest["patches"]
            picked = np.stack([sample_of[i] for i in kept]) if k else np.zeros((b, 0), np.int64)
            arrays = D.batch_arrays(loaded, pixels, picked, distance=manifest["distance"] is not None,
                                    patch_states=patch_states)
            for state in manifest["states"]:
                for kind in manifest["kinds"]:
                    m = per if kind == "patch" else 1
                    value = arrays[f"patch_{state}"] if kind == "patch" else arrays[kind][:, state]
                    maps[_array_name(state, kind)][rows * m:(rows + b) * m] = value
            for name in ("pooled", "predicted", *EXTRAS):
                if f"{name}.npy" in maps:
                    maps[f"{name}.npy"][rows:rows + b] = picked if name == "patch_index" else arrays[name]
            maps["index.npy"][rows:rows + b] = [position_of[i] for i in kept]
            rows += b
            del arrays
        for mm in maps.values():
            mm.flush()
        _write_json(folder / SHARD_STATUS, {"next": int(positions[done - 1]) + 1 if done else status["next"],
                                            "rows": rows, "skipped": skipped})
        job.progress(done / max(len(positions), 1), "features")
    _write_json(folder / SHARD_STATUS, {"next": shard["stop"], "rows": rows, "skipped": skipped})


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an flock on the store's lock file, waiting while another process writes the store (two runs filling one
    cache); the OS frees it when its holder dies."""
    if path.exists() and not path.is_dir():
        raise StoreError(f"--store {shown(str(path))}: not a folder; choose a new folder")
    try:
        import fcntl
    except ImportError:  # no flock here (Windows): one writer at a time is the user's care
        yield
        return
    path.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as error:
        raise StoreError(f"{path / LOCK}: cannot open the store's lock file ({error.strerror or error})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def write_store(loaded: LoadedModel, source: D.DatasetSource, path: str | Path, *, states: Sequence[int] | None = None,
                kinds: Sequence[str] | None = None, batch_size: int = 64, patches: int | None = None,
                seed: int | None = None, distance: bool | None = None, job: Job | None = None) -> FeatureStore:
    """Embed the images of `source` not yet in the store folder `path` (created), resuming unfinished shards:
    `states` (default: the store's, else every token state 0..depth) x `kinds` (default: the store's, else
    `default_kinds`). Under torchrun each rank extracts and writes its own shards (rank 0 alone writes the
    manifest); every rank returns the store once all are done. Every image also keeps what the dataset analyses
    read (explore.dataset.Features: `patches` sampled patch tokens per state, drawn from the image's id and `seed`,
    token norms, with `distance` the mean attention distance per head; None: the store's, else 4, 0 and False).
    StoreError when `path` holds a store of another model, preprocessing, states or kinds."""
    import torch.distributed as dist

    path = Path(path)
    depth = loaded.config.depth
    if None in (states, kinds, patches, seed, distance) and (path / MANIFEST).is_file():  # the store's own
        m = FeatureStore.open(path).manifest
        states, kinds = m["states"] if states is None else states, m["kinds"] if kinds is None else kinds
        sample = m["sample"] or {"patches": D.PATCHES_PER_IMAGE, "seed": 0}
        patches, seed = sample["patches"] if patches is None else patches, sample["seed"] if seed is None else seed
        distance = m["distance"] is not None if distance is None else distance
    patches = D.PATCHES_PER_IMAGE if patches is None else patches
    seed, distance = seed or 0, bool(distance)
    states = list(range(depth + 1)) if states is None else sorted({int(s) for s in states})
    kinds = list(default_kinds(loaded) if kinds is None else dict.fromkeys(kinds))
    if bad := [s for s in states if not 0 <= s <= depth]:
        raise StoreError(f"--store-states: state {bad[0]} does not exist; states run from 0 (the embedded input) to "
                         f"{depth}")
    if bad_kinds := [k for k in kinds if k not in KINDS]:
        raise StoreError(f"--store-tokens: {shown(bad_kinds[0])} is not one of {', '.join(KINDS)}")
    if "cls" in kinds and not D.readout_states(loaded):
        raise StoreError("--store-tokens cls: this model has no [CLS] token in its token states; store mean or patch")
    if batch_size < 1:
        raise ValueError(f"--batch-size must be at least 1, got {batch_size}")
    job = job or Job()
    rank, world = D.rank_and_world()
    ids = D.image_ids(source)
    with contextlib.ExitStack() as lock:
        plan: list[Any] = [None]
        if rank == 0:
            try:
                lock.enter_context(_locked(path))  # held until every rank is done
                recipe = _recipe(loaded, states, kinds, patches, seed, distance)
                manifest, todo = _plan(path, recipe, source, ids, world)
                path.mkdir(parents=True, exist_ok=True)
                _write_json(path / MANIFEST, manifest)
                plan = [(manifest, todo)]
            except Exception as error:  # noqa: BLE001 - every rank must hear of it, or the others wait for ever
                plan = [describe(error)]
        if world > 1:
            dist.broadcast_object_list(plan, src=0)
        if isinstance(plan[0], str):
            raise StoreError(plan[0])
        manifest, todo = plan[0]
        where = {image_id: i for i, image_id in enumerate(ids)}
        mine = [manifest["shards"][n] for k, n in enumerate(todo) if k % world == rank]
        failure = ""
        try:
            for k, shard in enumerate(mine):
                _fill(path, manifest, shard, loaded, source, where, batch_size,
                      job.part(k / len(mine), (k + 1) / len(mine)) if rank == 0 else Job(None, job.cancel))
        except Exception as error:  # noqa: BLE001 - gathered below: a rank that stops alone would hang the rest
            if world == 1:
                raise
            failure = f"rank {rank}: {describe(error)}"
        if world > 1:
            failures: list[str] = [""] * world
            dist.all_gather_object(failures, failure)
            if any(failures):
                raise StoreError(f"embedding into the store failed on {sum(map(bool, failures))} of {world} processes: "
                                 f"{next(f for f in failures if f)}")
        job.progress(1.0, "features")
        store = FeatureStore.open(path)
        store.embedded = sum(manifest["shards"][n]["stop"] - manifest["shards"][n]["start"] for n in todo)
        return store


def write_arrays(path: str | Path, tokens: dict[tuple[int, str], np.ndarray], *, labels: np.ndarray,
                 split: np.ndarray, label_names: Sequence[str], paths: Sequence[str] | None = None,
                 grid: tuple[int, int] = (1, 1), name: str = "arrays") -> FeatureStore:
    """A store of features computed elsewhere (tests, benchmarks, another tool): tokens[(state, kind)] (N, D), patch
    (N * grid cells, D), one shard, the model hash 'arrays:<name>', no pooled output (zeros) nor prediction (-1).
    The folder must be new or empty."""
    path = Path(path)
    if path.exists() and any(path.iterdir()):
        raise StoreError(f"{shown(str(path))}: not empty; choose a new folder")
    n = len(labels)
    width = next(iter(tokens.values())).shape[1]
    paths = [f"{name}/{i:08d}" for i in range(n)] if paths is None else list(paths)
    states, kinds = sorted({s for s, _ in tokens}), sorted({k for _, k in tokens}, key=KINDS.index)
    rows = zip(paths, labels, split, strict=True)
    manifest = {"format": FORMAT, "version": VERSION, "model": {"hash": f"arrays:{name}", "name": name},
                "preprocessing": {}, "states": states, "kinds": kinds, "width": width, "pooled_width": width,
                "patches": grid[0] * grid[1], "grid": list(grid), "depth": max(states), "prefix_names": [],
                "sample": None, "distance": None,
                "data": {"name": name, "label_names": list(label_names)},
                "images": [{"id": hashlib.blake2b(f"{name}/{i}".encode(), digest_size=16).hexdigest(), "path": p,
                            "label": int(lab), "split": int(s)} for i, (p, lab, s) in enumerate(rows)],
                "shards": [{"name": "r0-00000", "start": 0, "stop": n}]}
    check_manifest(manifest, str(path / MANIFEST))
    folder = path / "r0-00000"
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {"index.npy": np.arange(n, dtype="<i8"), "predicted.npy": np.full(n, -1, "<i8"),
              **{_array_name(s, k): v for (s, k), v in tokens.items()}}
    for file, value in arrays.items():
        out = np.lib.format.open_memmap(folder / file, mode="w+", dtype=value.dtype if value.ndim == 1 else "<f4",
                                        shape=value.shape)
        for start in range(0, len(value), 65_536):  # a slice at a time: the caller's array may be a memory map
            out[start:start + 65_536] = value[start:start + 65_536]
        out.flush()
    pooled = np.lib.format.open_memmap(folder / "pooled.npy", mode="w+", dtype="<f4", shape=(n, width))
    pooled.flush()
    _write_json(folder / SHARD_STATUS, {"next": n, "rows": n, "skipped": []})
    _write_json(path / MANIFEST, manifest)
    return FeatureStore.open(path)
