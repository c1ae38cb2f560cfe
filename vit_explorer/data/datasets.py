"""Training data behind one interface: the built-in procedural sets, CIFAR-10/100 (local pickle
files) and ImageFolder trees. Every dataset yields whole batches of uint8 images (B, 3, H, W) and
int64 labels (a `Batch`) through `__getitems__`; normalisation and augmentation happen on the batch."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ..checkpoints.preprocess import IMAGENET_MEAN, IMAGENET_STD, Preprocess
from ..errors import UserError
from . import cifar, folder, synthetic
from .folder import Batch, ImageSet

BUILTIN_MEAN = (0.5, 0.5, 0.5)
BUILTIN_STD = (0.5, 0.5, 0.5)
BUILTIN_TRAIN = 20_000  # default sizes of the built-in sets (about 8 s to draw on two cores)
BUILTIN_VAL = 2_000
MAX_BUILTIN = 1_000_000  # images per split of a built-in set (3 GB at 32x32)
MAX_SIDE = 16_384  # pixels per side of the training input
KEEP_BYTES = 2 * 10**9  # an image folder whose decoded images take at most this is decoded once and kept
MAX_SEED = 2**31 - 1  # seeds are multiplied (seed * 1_000_003 + chunk) and must stay int64
DRAW_BYTES = 100  # bytes per pixel of each image in a chunk while the built-in generator draws it (measured)


class DataError(UserError, ValueError):
    """A dataset argument of the wrong type or out of range; `field` names it, `problem` says what is allowed."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field} {problem}")
        self.field = field
        self.problem = problem


def available_memory() -> int | None:
    """Bytes this process can still allocate on the host: the machine's available memory, capped by an
    address-space limit (ulimit -v); None where neither can be read."""
    available = None
    try:
        with open("/proc/meminfo") as f:
            available = next((int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:")), None)
    except (OSError, ValueError):
        pass
    if available is None and hasattr(os, "sysconf"):
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError):
            pass
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        if limit != resource.RLIM_INFINITY:
            with open("/proc/self/statm") as f:
                mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            available = min(available or limit, max(limit - mapped, 0))
    except (ImportError, OSError, ValueError):
        pass
    return available


def human_bytes(n: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def check_memory(needed: int, what: str, change: str) -> None:
    """Refuse before allocating when `what` needs more host memory than is available; `change` says what to do."""
    available = available_memory()
    if available is not None and needed > available:
        raise ValueError(f"{what} takes about {human_bytes(needed)}, more than the {human_bytes(available)} of "
                         f"memory available; {change}")


class TensorImages(ImageSet):
    """Images held in memory: uint8 (N, 3, H, W) and labels (N,)."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        self.images = images
        self.labels = labels

    def __len__(self) -> int:
        return self.images.shape[0]

    def __getitems__(self, indices: list[int] | torch.Tensor) -> Batch:
        idx = torch.as_tensor(indices, dtype=torch.int64, device=self.images.device)
        return Batch(self.images[idx], self.labels[idx], [])

    def to(self, device: torch.device) -> TensorImages:
        """The same images on `device` (a GPU run keeps a built-in set there: no copy per step)."""
        return TensorImages(self.images.to(device), self.labels.to(device))


@dataclass
class TrainingData:
    train: ImageSet  # __getitems__(indices) -> Batch(uint8 (B, 3, H, W), int64 (B,), skipped)
    val: ImageSet
    labels: list[str]  # class names
    preprocessing: Preprocess  # the eval transform recorded in the checkpoint (normalisation included)
    spec: dict[str, Any]  # recorded in the checkpoint; `load_data(**spec)` rebuilds the same data
    augment: bool  # random crop with padding + horizontal flip during training
    notes: list[str] = field(default_factory=list)  # things the user should know (printed by the CLI)

    @property
    def num_classes(self) -> int:
        return len(self.labels)


def load_data(dataset: str = "shapes", *, image_size: tuple[int, int] = (32, 32), seed: int = 0,
              train_size: int | None = None, val_size: int | None = None, val_fraction: float = 0.1,
              follow_links: bool = False) -> TrainingData:
    """Open a dataset by name: 'shapes' or 'where' (built in), or a path to a CIFAR-10/100 folder
    (`cifar-10-batches-py`, `cifar-100-python`) or an ImageFolder tree (whose links are followed outside
    its folder only with `follow_links`)."""
    _check_arguments(dataset, image_size, seed, train_size, val_size, val_fraction, follow_links)
    h, w = image_size
    spec: dict[str, Any] = {"dataset": dataset, "image_size": [h, w], "seed": seed}
    if dataset in synthetic.VARIANTS:
        return _builtin(dataset, h, w, seed, train_size, val_size, spec)
    root = Path(dataset).expanduser()
    if not root.exists():
        raise ValueError(f"{dataset}: not a built-in dataset ({', '.join(synthetic.VARIANTS)}) and no such folder")
    if cifar.is_cifar10(root) or cifar.is_cifar100(root):
        return _cifar(root, h, w, spec)
    return _folder(root, h, w, seed, val_fraction, follow_links, spec)


def _check_arguments(dataset: Any, image_size: Any, seed: Any, train_size: Any, val_size: Any,
                     val_fraction: Any, follow_links: Any = False) -> None:
    """Types and ranges of load_data's arguments (they also come from a saved run's training state)."""
    def whole(value: Any, low: int, high: int) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high

    if not isinstance(dataset, str) or not dataset:
        raise DataError("dataset", f"must be a built-in name or a folder, got {dataset!r}")
    if not (isinstance(image_size, (tuple, list)) and len(image_size) == 2
            and all(whole(s, 1, MAX_SIDE) for s in image_size)):
        raise DataError("image_size", f"must be two whole numbers from 1 to {MAX_SIDE}, got {image_size!r}")
    if not whole(seed, 0, MAX_SEED):
        raise DataError("seed", f"must be a whole number from 0 to {MAX_SEED}, got {seed!r}")
    for name, size in (("train_size", train_size), ("val_size", val_size)):
        if size is not None and not whole(size, 1, MAX_BUILTIN):
            raise DataError(name, f"must be a whole number from 1 to {MAX_BUILTIN:,}, got {size!r}")
    if isinstance(val_fraction, bool) or not isinstance(val_fraction, (int, float)) or not 0 < val_fraction < 1:
        raise DataError("val_fraction", f"must be a number between 0 and 1, got {val_fraction!r}")
    if not isinstance(follow_links, bool):
        raise DataError("follow_links", f"must be true or false, got {follow_links!r}")


SPEC_KEYS = ("dataset", "image_size", "seed", "train_size", "val_size", "val_fraction", "follow_links")


def check_spec(spec: Any) -> dict[str, Any]:
    """load_data's keyword arguments from a recorded `TrainingData.spec` (a saved run's), checked;
    a DataError names the field."""
    if not isinstance(spec, dict) or not all(isinstance(k, str) for k in spec):
        raise DataError("data", f"must be a dict of load_data's arguments, got {type(spec).__name__}")
    unknown = sorted(set(spec) - set(SPEC_KEYS))
    if unknown:
        raise DataError(unknown[0], f"is not an argument of load_data ({', '.join(SPEC_KEYS)})")
    for name in ("dataset", "image_size"):
        if name not in spec:
            raise DataError(name, "is missing")
    args = {**spec, "image_size": tuple(spec["image_size"]) if isinstance(spec["image_size"], list)
            else spec["image_size"]}
    _check_arguments(**{"seed": 0, "train_size": None, "val_size": None, "val_fraction": 0.1, **args})
    return args


def _builtin(variant: str, h: int, w: int, seed: int, train_size: int | None, val_size: int | None,
             spec: dict[str, Any]) -> TrainingData:
    if h != w:
        raise ValueError(f"the built-in datasets draw square images; image size {h}x{w} is not square")
    n_train = BUILTIN_TRAIN if train_size is None else train_size
    n_val = BUILTIN_VAL if val_size is None else val_size
    # the images, twice while the chunks are joined, plus one chunk being drawn
    check_memory(2 * (n_train + n_val) * 3 * h * w + DRAW_BYTES * min(synthetic.CHUNK, n_train) * h * w,
                 f"drawing {n_train + n_val:,} built-in images of {h}x{w}",
                 "use a smaller --train-size, --val-size or --image-size")
    train = TensorImages(*synthetic.generate(n_train, seed=seed, size=h, variant=variant, split="train"))
    val = TensorImages(*synthetic.generate(n_val, seed=seed, size=h, variant=variant, split="val"))
    spec.update(train_size=n_train, val_size=n_val)
    pre = Preprocess((h, w), interpolation="bilinear", mean=BUILTIN_MEAN, std=BUILTIN_STD)
    return TrainingData(train, val, list(synthetic.VARIANTS[variant]), pre, spec, augment=False)


def _cifar(root: Path, h: int, w: int, spec: dict[str, Any]) -> TrainingData:
    (xt, yt), (xv, yv), names = cifar.load_cifar(root)
    if (h, w) != (32, 32):
        n = xt.shape[0] + xv.shape[0]
        check_memory(n * 3 * (5 * h * w + 4 * 32 * 32), f"resizing CIFAR's {n:,} images to {h}x{w}",
                     "use a smaller --image-size (CIFAR images are 32x32)")
        xt, xv = (F.interpolate(x.float(), size=(h, w), mode="bilinear", antialias=True)
                  .round().clamp(0, 255).to(torch.uint8) for x in (xt, xv))
    pre = Preprocess((h, w), interpolation="bilinear", mean=cifar.CIFAR_MEAN, std=cifar.CIFAR_STD)  # as trained
    return TrainingData(TensorImages(xt, yt), TensorImages(xv, yv), names, pre, spec, augment=True)


def _folder(root: Path, h: int, w: int, seed: int, val_fraction: float, follow_links: bool, spec: dict[str, Any]
            ) -> TrainingData:
    notes = []
    if (root / "train").is_dir() and (root / "val").is_dir():
        files, labels, names = folder.scan(root / "train", within=root, follow_links=follow_links)
        val_files, val_labels, _ = folder.scan(root / "val", classes=names, within=root, follow_links=follow_links)
        folder.check_disjoint(files, val_files)
        keep = _keeps(len(files) + len(val_files), h, w)
        train = folder.FolderImages(files, labels, (h, w), keep)
        val = folder.FolderImages(val_files, val_labels, (h, w), keep)
    else:
        files, labels, names = folder.scan(root, follow_links=follow_links)
        train_idx, val_idx = folder.split_holdout(labels, val_fraction, seed)
        if not train_idx:
            raise ValueError(f"{root}: too few images to train on ({len(files)})")
        keep = _keeps(len(files), h, w)
        train = folder.FolderImages([files[i] for i in train_idx], [labels[i] for i in train_idx], (h, w), keep)
        val = folder.FolderImages([files[i] for i in val_idx], [labels[i] for i in val_idx], (h, w), keep)
        notes.append(f"{root}: held out {len(val_idx)} of {len(files)} images for validation "
                     "(use train/ and val/ sub-folders to choose them)")
    if len(names) < 2:
        raise ValueError(f"{root}: found {len(names)} class folder; training a classifier needs at least two")
    for split, images in (("training", train), ("validation", val)):
        images.check_readable(f"{root}: the {split} images")
    note = folder.size_note(train.files, (h, w))
    if note:
        notes.append(f"{root}: {note}")
    spec["val_fraction"] = val_fraction
    if follow_links:  # recorded only when given: a saved run's data without it reads no links outside
        spec["follow_links"] = True
    pre = Preprocess((h, w), interpolation="bilinear", mean=IMAGENET_MEAN, std=IMAGENET_STD)
    return TrainingData(train, val, names, pre, spec, augment=True, notes=notes)


def _keeps(images: int, h: int, w: int) -> bool:
    """Whether a folder of `images` is small enough to keep decoded in memory (see FolderImages)."""
    needed = images * 3 * h * w
    return needed <= min(KEEP_BYTES, (available_memory() or 0) // 4)


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on `device` without waiting for the device: a plain copy to a GPU would first wait
    for every queued kernel (a host sync in the middle of a training step)."""
    if device.type != "cuda" or tensor.device == device:
        return tensor.to(device)
    return (tensor if tensor.is_pinned() else tensor.pin_memory()).to(device, non_blocking=True)


@functools.lru_cache(maxsize=16)
def _scale(mean: tuple[float, ...], std: tuple[float, ...], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(255 mean, 255 std) as (1, 3, 1, 1) tensors on `device`, made once: a training step copies nothing."""
    scaled = [to_device(torch.tensor(v, dtype=torch.float32).view(1, 3, 1, 1) * 255, device) for v in (mean, std)]
    return scaled[0], scaled[1]


def normalize(images: torch.Tensor, pre: Preprocess) -> torch.Tensor:
    """uint8 (B, 3, H, W) -> float (B, 3, H, W) normalised as `pre` does (same device as images)."""
    mean, std = _scale(tuple(pre.mean), tuple(pre.std), images.device)
    return (images.float() - mean) / std


def random_crop_flip(images: torch.Tensor, generator: torch.Generator, pad: int | None = None, flip: bool = True
                     ) -> torch.Tensor:
    """torchvision-style RandomCrop(size, padding) + RandomHorizontalFlip (unless not `flip`) on a batch
    (B, C, H, W).

    pad defaults to H/8 (4 pixels at 32, as in the CIFAR recipes). Random numbers come from
    `generator` (a CPU generator), so a resumed run draws the same crops.
    """
    b, _, h, w = images.shape
    pad = max(1, h // 8) if pad is None else pad
    padded = F.pad(images, (pad, pad, pad, pad))  # zeros, like torchvision's default fill
    oy = torch.randint(0, 2 * pad + 1, (b,), generator=generator)
    ox = torch.randint(0, 2 * pad + 1, (b,), generator=generator)
    flips = (torch.rand(b, generator=generator) < 0.5) & flip  # drawn either way: the same crops with or without
    oy, ox, flips = to_device(torch.stack([oy, ox, flips.long()]), images.device)  # one copy, not three
    rows = oy[:, None] + torch.arange(h, device=images.device)  # (B, H)
    cols = ox[:, None] + torch.arange(w, device=images.device)  # (B, W)
    cols = torch.where(flips.bool()[:, None], cols.flip(1), cols)
    batch = torch.arange(b, device=images.device)[:, None, None]
    out = padded.permute(0, 2, 3, 1)[batch, rows[:, :, None], cols[:, None, :]]  # (B, H, W, C)
    return out.permute(0, 3, 1, 2).contiguous()
