"""A dataset for the dataset analyses, and each image's features at every token state.

A source is an image folder (one sub-folder per class, or a flat unlabelled folder; train/ and val/
sub-folders are taken as the split), a built-in set, or a CIFAR folder. `--limit N` keeps a seeded,
stratified sample. Images go through the model's own preprocessing (at one size for all: a NaFlex model's
square input) and then, in batches, through the
model on its device (the next batch is decoded on a second thread while the model runs); an image
that cannot be read is reported and skipped, never a crash.

Features per token state i = 0..depth (0 the embedded input, i the output of block i - 1, as
`explore.forward.Needs` counts them): the readout token ([CLS], where the state holds one: not CaiT's
self-attention states, not GAP models), the mean of the patch tokens, a few sampled patch tokens (with
their positions), token-norm statistics; once per image the model's own pooled output and its
prediction; on request the mean attention distance per block and head. They are cached on disk in a feature
store (explore.store) per hash of the weights and the preprocessing, whose images are known by a content hash: a
changed or added file is embedded, the others are read back.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import queue
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from ..analysis.attention import attention_distance
from ..checkpoints import LoadedModel, Preprocess
from ..data import cifar, folder, synthetic
from ..data.images import IMAGE_EXTENSIONS, ImageError, open_image
from ..errors import describe
from ..jobs import Job
from ..text import shown
from . import budget

BUILTIN_IMAGES = 2000  # images drawn from a built-in set when no --limit is given
BUILTIN_SIDE = 64  # pixels per side a built-in set is drawn at (the model's preprocessing resizes them)
PATCHES_PER_IMAGE = 4  # sampled patch tokens kept per image and state (for the patch projector)
CACHE_VERSION = 2  # changes whenever what the cache holds changes (2: a feature store per model and recipe)
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)


@dataclass
class DatasetSource:
    """The images of a dataset (not yet decoded): where they are, their labels and their split."""

    name: str  # what was asked for: a folder, a built-in name
    root: Path | None  # the folder paths are relative to (None: a built-in set)
    paths: list[str]  # one per image, relative to `root` (built-in: 'shapes/val/00012')
    labels: np.ndarray  # (N,) int64 class index, -1 where unlabelled
    label_names: list[str]  # class names ([] when unlabelled)
    split: np.ndarray  # (N,) int8: 0 train, 1 validation
    pixels: torch.Tensor | None = None  # built-in and CIFAR: uint8 (N, 3, h, w); folders: None (read from files)
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.paths)

    @property
    def labelled(self) -> bool:
        return bool(self.label_names) and bool((self.labels >= 0).all())

    def image(self, index: int) -> Image.Image:
        """The image as stored (RGB), or ImageError naming the file."""
        if self.pixels is not None:
            return Image.fromarray(self.pixels[index].permute(1, 2, 0).numpy())
        assert self.root is not None
        return open_image(self.root / self.paths[index])

    def subset(self, indices: np.ndarray) -> DatasetSource:
        keep = [int(i) for i in indices]
        return DatasetSource(self.name, self.root, [self.paths[i] for i in keep], self.labels[keep],
                             self.label_names, self.split[keep], None if self.pixels is None else self.pixels[keep],
                             list(self.notes))


def stratified_sample(labels: np.ndarray, n: int, seed: int) -> np.ndarray:
    """Sorted indices of a seeded sample of n of the labels, each class in proportion (largest remainders)."""
    labels = np.asarray(labels)
    if n >= labels.size:
        return np.arange(labels.size)
    rng = np.random.default_rng(seed)
    classes, counts = np.unique(labels, return_counts=True)
    quota = counts * n / labels.size
    take = np.floor(quota).astype(int)
    for c in np.argsort(-(quota - take), kind="stable")[: n - int(take.sum())]:
        take[c] += 1
    chosen = [rng.permutation(np.flatnonzero(labels == c))[:k] for c, k in zip(classes, take, strict=True)]
    return np.sort(np.concatenate(chosen))


def holdout(labels: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """(N,) int8 split, 1 for a seeded `fraction` of each class (data.folder.split_holdout's rule)."""
    split = np.zeros(len(labels), dtype=np.int8)
    if len(labels):
        _, val = folder.split_holdout([int(v) for v in labels], fraction, seed)
        split[val] = 1
    return split


def open_source(data: str, *, limit: int | None = None, seed: int = 0, val_fraction: float = 0.2,
                follow_links: bool = False) -> DatasetSource:
    """Open a dataset by name: a built-in set ('shapes', 'where'), a CIFAR-10/100 folder, an image folder with
    one sub-folder per class (train/ and val/ trees kept as the split) or a flat folder of unlabelled images.
    `limit`: a seeded, stratified sample of that many images; `val_fraction` of each class is held out for
    validation (seeded), where the data does not say which images validate."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"--limit must be a whole number of images >= 1, got {limit!r}")
    if not 0 < val_fraction < 1:
        raise ValueError(f"--val-fraction must be between 0 and 1, got {val_fraction!r}")
    if data in synthetic.VARIANTS:
        n = BUILTIN_IMAGES if limit is None else limit
        budget.check_images(f"--data {data}", n, budget.pixel_bytes(BUILTIN_SIDE), "the pixels")  # before drawing
        images, drawn = synthetic.generate(n, seed=seed, size=BUILTIN_SIDE, variant=data, split="val")
        lab = drawn.numpy().astype(np.int64)
        return DatasetSource(data, None, [f"{data}/val/{i:05d}" for i in range(n)], lab,
                             list(synthetic.VARIANTS[data]), holdout(lab, val_fraction, seed), images)
    root = Path(data).expanduser()
    try:
        root.stat()
    except FileNotFoundError:
        pass
    except OSError as error:  # a name too long, a loop of links: named, and bounded (it may be 200,000 characters)
        raise ValueError(f"--data {shown(data)}: {error.strerror or error}") from None
    if not root.is_dir():
        raise ValueError(f"--data {shown(data)}: not a built-in dataset ({', '.join(synthetic.VARIANTS)}) and "
                         f"{'not a folder' if root.exists() else 'no such folder'}")
    if cifar.is_cifar10(root) or cifar.is_cifar100(root):
        source = _cifar(root, data)
    elif (root / "train").is_dir() and (root / "val").is_dir():
        source = _train_val(root, data, follow_links)
    elif any(p.is_dir() and not p.name.startswith(".") for p in root.iterdir()):
        files, found, names = folder.scan(root, follow_links=follow_links)
        lab = np.asarray(found, dtype=np.int64)
        source = DatasetSource(data, root, [p.relative_to(root).as_posix() for p in files], lab, names,
                               holdout(lab, val_fraction, seed))
    else:
        source = _flat(root, data, follow_links)
    if limit is not None and limit < len(source):
        kept = stratified_sample(source.labels, limit, seed)
        source = source.subset(kept)
        source.notes.append(f"{shown(data)}: a seeded, stratified sample of {len(kept):,} images (--limit)")
    return source


def _cifar(root: Path, data: str) -> DatasetSource:
    (xt, yt), (xv, yv), names = cifar.load_cifar(root)
    labels = torch.cat([yt, yv]).numpy().astype(np.int64)
    split = np.concatenate([np.zeros(len(yt), np.int8), np.ones(len(yv), np.int8)])  # CIFAR's own test set
    paths = [f"train/{i:05d}" for i in range(len(yt))] + [f"test/{i:05d}" for i in range(len(yv))]
    return DatasetSource(data, root, paths, labels, names, split, torch.cat([xt, xv]))


def _train_val(root: Path, data: str, follow_links: bool) -> DatasetSource:
    files, labels, names = folder.scan(root / "train", within=root, follow_links=follow_links)
    val_files, val_labels, _ = folder.scan(root / "val", classes=names, within=root, follow_links=follow_links)
    folder.check_disjoint(files, val_files)
    paths = [p.relative_to(root).as_posix() for p in files + val_files]
    split = np.concatenate([np.zeros(len(files), np.int8), np.ones(len(val_files), np.int8)])
    return DatasetSource(data, root, paths, np.asarray(labels + val_labels, dtype=np.int64), names, split)


def _flat(root: Path, data: str, follow_links: bool) -> DatasetSource:
    files = [p for p, _ in folder._images_in(root, root.resolve(), follow_links)]
    if not files:
        raise ValueError(f"--data {shown(data)}: no images (extensions {', '.join(IMAGE_EXTENSIONS)}) and no class "
                         "folders; give a folder of images, one sub-folder per class for labels")
    n = len(files)
    return DatasetSource(data, root, [p.relative_to(root).as_posix() for p in files], np.full(n, -1, np.int64), [],
                         np.zeros(n, np.int8), notes=[f"{shown(data)}: no class folders, so the images are unlabelled "
                                                       "(probes need one sub-folder per class)"])


# ---------------------------------------------------------------------------------------------- features
@dataclass
class Features:
    """What the model computes for every image kept (arrays in image order; float32 unless said)."""

    source: DatasetSource  # the images kept (unreadable ones left out)
    depth: int  # token states are 0..depth
    cls: dict[int, np.ndarray]  # state -> (N, D) readout token, for the states that hold a [CLS]
    mean: dict[int, np.ndarray]  # state -> (N, D) mean of the patch tokens
    pooled: np.ndarray  # (N, D') what the head reads (final norm and pooling)
    predicted: np.ndarray  # (N,) int64 the model's own class (-1 without a classifier)
    patches: np.ndarray  # (N, S, k, D) float16 sampled patch tokens per state
    patch_index: np.ndarray  # (N, k) int32 which patch each sample is (raster order over the grid)
    grid: tuple[int, int]  # patch rows, cols
    norm_mean: np.ndarray  # (N, S) mean L2 norm of the patch tokens per state
    norm_max: np.ndarray  # (N, S) largest patch-token norm per state
    norm_argmax: np.ndarray  # (N, S) int32 which patch has it
    prefix_norms: np.ndarray  # (N, S, P) the norm of each prefix token per state
    prefix_names: tuple[str, ...]
    distance: np.ndarray | None  # (N, blocks, heads) mean attention distance in pixels, when measured
    skipped: list[str] = field(default_factory=list)  # one message per unreadable image left out
    key: str = ""  # the cache key these features were stored under
    from_cache: bool = False

    def __len__(self) -> int:
        return int(self.pooled.shape[0])

    @property
    def states(self) -> range:
        return range(self.depth + 1)

    def tokens(self, kind: str) -> dict[int, np.ndarray]:
        """State -> (N, D) features of `kind`: 'cls' or 'mean'."""
        if kind == "cls":
            if not self.cls:
                raise ValueError("this model has no [CLS] token in its token states; use --tokens mean")
            return self.cls
        if kind == "mean":
            return self.mean
        raise ValueError(f"tokens must be 'cls' or 'mean', got {kind!r}")


def readout_states(loaded: LoadedModel) -> bool:
    """Whether every token state holds a [CLS] at position 0 (CaiT's [CLS] joins after the states)."""
    cfg = loaded.config
    return "cls" in cfg.prefix_names and not cfg.class_attn_depth


def _batches(source: DatasetSource, loaded: LoadedModel, batch_size: int, job: Job,
             indices: np.ndarray) -> Iterator[tuple[list[int], torch.Tensor | None, list[str]]]:
    """(indices kept, pixels (B, 3, H, W) or None, skipped messages) per batch of `indices`; decoding runs one batch
    ahead on a thread (Pillow and torch release the GIL while they work)."""
    pre = dataset_preprocessing(loaded)
    chunks = [[int(i) for i in indices[s:s + batch_size]] for s in range(0, len(indices), batch_size)]
    ready: queue.Queue[Any] = queue.Queue(maxsize=2)
    stop = threading.Event()

    def decode() -> None:
        try:
            for chunk in chunks:
                kept, images, skipped = [], [], []
                for i in chunk:
                    if stop.is_set():
                        return
                    try:
                        images.append(pre(source.image(i)))
                        kept.append(i)
                    except ImageError as error:  # names the file
                        skipped.append(str(error))
                    except ValueError as error:  # the preprocessing refused its size
                        skipped.append(f"{source.paths[i]}: {error}")
                ready.put((kept, torch.cat(images) if images else None, skipped))
            ready.put(None)
        except BaseException as error:  # noqa: BLE001 - handed to the consumer, which raises it
            ready.put(error)

    thread = threading.Thread(target=decode, name="vit-explorer-decode", daemon=True)
    thread.start()
    try:
        while (item := ready.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            job.check()
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # unblock a producer waiting on a full queue
            try:
                ready.get_nowait()
            except queue.Empty:
                thread.join(0.05)


@functools.cache
def _keep_heap_small() -> None:
    """Let glibc hand every block over 128 KiB straight back to the system. Its default raises that threshold
    after the first large frees, and the batches' tensors (freed and allocated again, of varying sizes, on two
    threads) then fragment the heap: resident memory grew by about 20 MB per batch of 32 ViT-S/16 images, and
    stays flat with the fixed threshold (bench/bench_embed.py)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, 128 * 1024)
        except (OSError, AttributeError):  # another C library: nothing to tune
            pass


@dataclass
class _Part:
    """What one pass over some of the images computed: the arrays of the images kept, in the order of `kept`."""

    kept: list[int]  # indices into the source
    arrays: dict[str, np.ndarray]  # name -> (len(kept), ...), empty when no image was kept
    skipped: list[str]


def dataset_preprocessing(loaded: LoadedModel) -> Preprocess:
    """The model's preprocessing at one input size for every image: a NaFlex model (SigLIP 2) gives each image
    its own patch grid, but a batch and the patch-level features need one, so there it resizes every image to
    the square input the model starts with (`Preprocess.size`)."""
    return loaded.preprocessing.with_size(loaded.preprocessing.size)


def image_ids(source: DatasetSource) -> list[str]:
    """A stable id per image: a content hash of its path and its bytes (file bytes, or the pixels of a built-in or
    CIFAR set); an unreadable file hashes as missing (extraction then skips it)."""
    ids = []
    for i, rel in enumerate(source.paths):
        h = hashlib.blake2b(rel.encode(), digest_size=16)
        if source.pixels is not None:
            h.update(source.pixels[i].contiguous().numpy().tobytes())
        else:
            assert source.root is not None
            try:
                with (source.root / rel).open("rb") as f:
                    while block := f.read(1 << 20):
                        h.update(block)
            except OSError as error:
                h.update(f"unreadable: {error.strerror}".encode())
        ids.append(h.hexdigest())
    return ids


def patch_sample(image_id: str, patches: int, k: int, seed: int) -> np.ndarray:
    """(k,) which of an image's `patches` tokens are sampled: drawn from its id and the seed, so that an image keeps
    its sample whatever the images beside it, in any shard or process."""
    return np.random.default_rng([seed, int(image_id[:15], 16)]).choice(patches, k, replace=False)


def _patch_sample(loaded: LoadedModel, ids: list[str], patches: int, seed: int) -> np.ndarray:
    """(n, k) which patch tokens are kept per image (`patch_sample` of each id)."""
    n_patch = loaded.model.layout(loaded.preprocessing.size).num_patches
    k = min(patches, n_patch)
    return np.stack([patch_sample(i, n_patch, k, seed) for i in ids]) if ids else np.zeros((0, k), np.int64)


def batch_arrays(loaded: LoadedModel, pixels: torch.Tensor, patch_index: np.ndarray, *, distance: bool = False,
                 patch_states: tuple[int, ...] = ()) -> dict[str, np.ndarray]:
    """One batch's features (see the module doc) from one forward pass of pixels (B, 3, H, W): per image (B, S, ...)
    arrays 'mean', 'patches' (the patch tokens `patch_index` (B, k) names, float16), 'norm_mean', 'norm_max',
    'norm_argmax', 'prefix_norms', 'cls' where every state holds a [CLS]; 'pooled' (B, D'), 'predicted' (B,); with
    `distance` the mean attention distance (B, blocks, heads); and for each state in `patch_states` every patch
    token, 'patch_<state>' (B * N, D) image-major."""
    model, cfg = loaded.model, loaded.config
    device = loaded.device
    layout = model.layout(loaded.preprocessing.size)
    p = layout.num_prefix_tokens
    distances: list[np.ndarray] = []

    def hook(probs: torch.Tensor, site: object) -> None:  # probs: (B, heads, T, T), at each block's pattern
        distances.append(torch.stack([attention_distance(probs[b:b + 1], layout) for b in range(probs.shape[0])])
                         .cpu().numpy())  # (B, heads)

    hooks = [(f"blocks.{i}.attn.hook_pattern", hook) for i in range(cfg.depth)] if distance else []
    with torch.inference_mode(), model.hooks(hooks):
        out = model.forward_intermediates(pixels.to(device), capture=("embedded", "hidden_states", "pre_logits"))
    idx = torch.from_numpy(patch_index).to(device)[:, :, None]  # (B, k, 1)
    per_state: dict[str, list[torch.Tensor]] = {}
    arrays: dict[str, np.ndarray] = {}
    for state, hidden in enumerate([out["embedded"]] + out["hidden_states"]):  # depth + 1 of (B, T, D), in turn
        tokens = hidden.float()
        patch_tokens = tokens[:, p:]  # (B, N, D)
        norms = patch_tokens.norm(dim=-1)  # (B, N)
        reduced = {"mean": patch_tokens.mean(dim=1),  # (B, D)
                   "patches": torch.gather(patch_tokens, 1, idx.expand(-1, -1, tokens.shape[-1])).half(),
                   "norm_mean": norms.mean(-1), "norm_max": norms.max(-1).values,
                   "norm_argmax": norms.argmax(-1).int(), "prefix_norms": tokens[:, :p].norm(dim=-1)}
        if readout_states(loaded):
            reduced["cls"] = tokens[:, 0]  # (B, D)
        for name, value in reduced.items():
            per_state.setdefault(name, []).append(value)
        if state in patch_states:
            arrays[f"patch_{state}"] = patch_tokens.reshape(-1, tokens.shape[-1]).cpu().numpy()
    batch = {name: torch.stack(values, dim=1) for name, values in per_state.items()}  # (B, S, ...)
    batch["pooled"] = out["pre_logits"].float()  # (B, D')
    batch["predicted"] = out["logits"].argmax(-1) if cfg.num_classes else torch.full((len(pixels),), -1)
    arrays.update({name: value.cpu().numpy() for name, value in batch.items()})
    if distance:
        arrays["distance"] = np.stack(distances, axis=1)  # (B, blocks, heads)
    return arrays


def _extract_part(loaded: LoadedModel, source: DatasetSource, indices: np.ndarray, patch_index: np.ndarray, *,
                  batch_size: int, distance: bool, job: Job) -> _Part:
    """The features of the images `indices` of `source` (see `extract`); the job hears of each batch."""
    _keep_heap_small()
    parts: dict[str, list[np.ndarray]] = {}
    kept_all: list[int] = []
    skipped: list[str] = []
    done = 0
    for kept, pixels, bad in _batches(source, loaded, batch_size, job, indices):
        skipped += bad
        done += len(kept) + len(bad)
        if pixels is not None:
            for name, value in batch_arrays(loaded, pixels, patch_index[kept], distance=distance).items():
                parts.setdefault(name, []).append(value)
            kept_all += kept
        job.progress(done / len(indices), "features")
    return _Part(kept_all, {name: np.concatenate(values) for name, values in parts.items()}, skipped)


def _assemble(loaded: LoadedModel, source: DatasetSource, parts: list[_Part], patch_index: np.ndarray) -> Features:
    """One Features from the parts of consecutive shards of the source, in the source's order."""
    kept_all = [i for part in parts for i in part.kept]
    skipped = [message for part in parts for message in part.skipped]
    if not kept_all:
        first = skipped[0] if skipped else "the dataset is empty"
        raise ValueError(f"{source.name}: none of the {len(source)} images can be read (the first: {first})")
    filled = [part.arrays for part in parts if part.kept]
    joined = {name: np.concatenate([arrays[name] for arrays in filled]) for name in filled[0]}
    cfg = loaded.config
    states = cfg.depth + 1
    layout = loaded.model.layout(loaded.preprocessing.size)
    return Features(
        source=source.subset(np.asarray(kept_all)), depth=cfg.depth,
        cls={i: np.ascontiguousarray(joined["cls"][:, i]) for i in range(states)} if "cls" in joined else {},
        mean={i: np.ascontiguousarray(joined["mean"][:, i]) for i in range(states)},
        pooled=joined["pooled"], predicted=joined["predicted"].astype(np.int64), patches=joined["patches"],
        patch_index=patch_index[kept_all].astype(np.int32), grid=layout.grid, norm_mean=joined["norm_mean"],
        norm_max=joined["norm_max"], norm_argmax=joined["norm_argmax"], prefix_norms=joined["prefix_norms"],
        prefix_names=layout.prefix_names, distance=joined.get("distance"), skipped=skipped)


def extract(loaded: LoadedModel, source: DatasetSource, *, batch_size: int = 64, patches: int = PATCHES_PER_IMAGE,
            distance: bool = False, seed: int = 0, job: Job | None = None) -> Features:
    """Every image's features at every token state (see the module doc); the job hears of each batch and is
    checked between batches (Cancelled)."""
    if batch_size < 1:
        raise ValueError(f"--batch-size must be at least 1, got {batch_size}")
    _check_features(loaded, source, patches)
    patch_index = _patch_sample(loaded, image_ids(source), patches, seed)
    part = _extract_part(loaded, source, np.arange(len(source)), patch_index, batch_size=batch_size,
                         distance=distance, job=job or Job())
    return _assemble(loaded, source, [part], patch_index)


def _check_features(loaded: LoadedModel, source: DatasetSource, patches: int) -> None:
    """Refuse, before the first batch, features of every image that would not fit (explore.budget)."""
    budget.check_images(f"--data {shown(source.name)}", len(source), budget.feature_bytes(loaded.config, patches),
                        f"the features ({loaded.config.depth + 1} token states of width {loaded.config.embed_dim})")


# ---------------------------------------------------------------------------------------------- the cache
def default_cache() -> Path:
    """$VIT_EXPLORER_CACHE, else $XDG_CACHE_HOME/vit-explorer/features (~/.cache/... by default)."""
    if os.environ.get("VIT_EXPLORER_CACHE"):
        return Path(os.environ["VIT_EXPLORER_CACHE"]).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "vit-explorer" / "features"


def model_hash(loaded: LoadedModel) -> str:
    """A content hash of the weights and the config (what decides the features, not where they came from)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(json.dumps(loaded.config.to_dict(), sort_keys=True, default=str).encode())
    for name, tensor in loaded.model.state_dict().items():
        h.update(name.encode())
        h.update(str(tensor.dtype).encode())
        h.update(str(tuple(tensor.shape)).encode())
        h.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def cache_folder(loaded: LoadedModel, cache: Path, source: DatasetSource, *, patches: int, distance: bool,
                 seed: int) -> Path:
    """The feature store in the cache folder for these weights, preprocessing, samples and class names
    (explore.store): the images in it are known by content, so a changed or added file is embedded and the rest
    read back."""
    h = hashlib.blake2b(digest_size=20)
    recipe = json.dumps(dataset_preprocessing(loaded).to_dict(), sort_keys=True)
    for part in (str(CACHE_VERSION), model_hash(loaded), recipe, str(patches), str(distance), str(seed),
                 json.dumps(source.label_names)):
        h.update(part.encode())
        h.update(b"\0")
    return cache / h.hexdigest()


def _from_store(loaded: LoadedModel, source: DatasetSource, cache: Path, *, batch_size: int, distance: bool,
                seed: int, patches: int, job: Job | None) -> Features | None:
    """The features of `source` from the cache's feature store, embedding into it the images it lacks first (under
    torchrun every rank writes its shards); None on the ranks other than 0."""
    from . import store  # the store extracts through this module

    if batch_size < 1:
        raise ValueError(f"--batch-size must be at least 1, got {batch_size}")
    _check_features(loaded, source, patches)
    folder = cache_folder(loaded, cache, source, patches=patches, distance=distance, seed=seed)
    ids = image_ids(source)
    held = store.write_store(loaded, source, folder, states=range(loaded.config.depth + 1),
                             kinds=store.default_kinds(loaded), batch_size=batch_size, patches=patches, seed=seed,
                             distance=distance, job=job)
    if rank_and_world()[0] != 0:
        return None
    features = store.features(held, source, ids)
    features.key, features.from_cache = folder.name, held.embedded == 0
    return features


def features_for(loaded: LoadedModel, source: DatasetSource, *, batch_size: int = 64, distance: bool = False,
                 seed: int = 0, patches: int = PATCHES_PER_IMAGE, cache: Path | None = None,
                 job: Job | None = None) -> Features:
    """The features of `source`: with a cache folder `cache`, from its feature store for these weights and
    preprocessing (images it lacks are embedded into it first, `from_cache` says whether none were); with None,
    extracted in memory."""
    if cache is None:
        return extract(loaded, source, batch_size=batch_size, patches=patches, distance=distance, seed=seed, job=job)
    features = _from_store(loaded, source, cache, batch_size=batch_size, distance=distance, seed=seed,
                           patches=patches, job=job)
    assert features is not None  # one process: rank 0
    return features


def rank_and_world() -> tuple[int, int]:
    """(this process's rank, the number of processes) under torchrun's process group; (0, 1) outside one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def shard(n: int, rank: int, world: int) -> np.ndarray:
    """The indices of the images rank `rank` of `world` extracts: consecutive, the first shards one longer."""
    return np.array_split(np.arange(n), world)[rank]


def features_across(loaded: LoadedModel, source: DatasetSource, *, batch_size: int = 64, distance: bool = False,
                    seed: int = 0, patches: int = PATCHES_PER_IMAGE, cache: Path | None = None,
                    job: Job | None = None) -> Features | None:
    """`features_for` under torchrun (as `train` runs): each rank extracts its shard of the images on its own
    device, into its shards of the cache's feature store (or, without a cache, gathered by rank 0 in the source's
    order); rank 0 returns the features, the other ranks None. The job hears of rank 0's progress only. In one
    process: `features_for`."""
    import torch.distributed as dist

    rank, world = rank_and_world()
    if world == 1:
        return features_for(loaded, source, batch_size=batch_size, distance=distance, seed=seed, patches=patches,
                            cache=cache, job=job)
    if cache is not None:  # each rank writes its shards of the cache's store
        return _from_store(loaded, source, cache, batch_size=batch_size, distance=distance, seed=seed,
                           patches=patches, job=job if rank == 0 else None)
    if batch_size < 1:
        raise ValueError(f"--batch-size must be at least 1, got {batch_size}")
    _check_features(loaded, source, patches)  # every rank, before any extracts: all refuse together
    n = len(source)
    patch_index = _patch_sample(loaded, image_ids(source), patches, seed)  # the same draw on every rank
    mine = shard(n, rank, world)

    def report(share: float, what: str) -> None:  # rank 0's shard is the longest: scaled, it reaches n last
        if job is not None:
            job.progress(min(1.0, share * len(mine) * world / n), what)

    part: _Part | str
    try:
        part = _extract_part(loaded, source, mine, patch_index, batch_size=batch_size, distance=distance,
                             job=Job(report if rank == 0 else None))
    except Exception as error:  # noqa: BLE001 - sent to rank 0, which raises it: a rank that stops would hang the rest
        part = f"rank {rank}: {describe(error)}"
    gathered: list[_Part | str] | None = [""] * world if rank == 0 else None
    dist.gather_object(part, gathered, dst=0)
    if gathered is None:
        return None
    failed = [g for g in gathered if isinstance(g, str)]
    if failed:
        raise ValueError(f"feature extraction failed on {len(failed)} of {world} processes: {failed[0]}")
    return _assemble(loaded, source, [g for g in gathered if isinstance(g, _Part)], patch_index)
