"""Training data behind one interface: the built-in procedural sets, CIFAR-10/100 (local pickle
files) and ImageFolder trees. Every dataset yields whole batches of uint8 images (B, 3, H, W) and
int64 labels (a `Batch`) through `__getitems__`; normalisation and augmentation happen on the batch."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ..checkpoints.preprocess import IMAGENET_MEAN, IMAGENET_STD, Preprocess
from . import cifar, folder, synthetic
from .folder import Batch

BUILTIN_MEAN = (0.5, 0.5, 0.5)
BUILTIN_STD = (0.5, 0.5, 0.5)
BUILTIN_TRAIN = 20_000  # default sizes of the built-in sets (about 8 s to draw on two cores)
BUILTIN_VAL = 2_000


class TensorImages(torch.utils.data.Dataset):
    """Images held in memory: uint8 (N, 3, H, W) and labels (N,)."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        self.images = images
        self.labels = labels

    def __len__(self) -> int:
        return self.images.shape[0]

    def __getitems__(self, indices: list[int]) -> Batch:
        idx = torch.as_tensor(indices, dtype=torch.int64)
        return Batch(self.images[idx], self.labels[idx], [])


@dataclass
class TrainingData:
    train: torch.utils.data.Dataset  # __getitems__(indices) -> Batch(uint8 (B, 3, H, W), int64 (B,), skipped)
    val: torch.utils.data.Dataset
    labels: list[str]  # class names
    preprocessing: Preprocess  # the eval transform recorded in the checkpoint (normalisation included)
    spec: dict[str, Any]  # recorded in the checkpoint; `load_data(**spec)` rebuilds the same data
    augment: bool  # random crop with padding + horizontal flip during training
    notes: list[str] = field(default_factory=list)  # things the user should know (printed by the CLI)

    @property
    def num_classes(self) -> int:
        return len(self.labels)


def load_data(dataset: str = "shapes", *, image_size: tuple[int, int] = (32, 32), seed: int = 0,
              train_size: int | None = None, val_size: int | None = None, val_fraction: float = 0.1
              ) -> TrainingData:
    """Open a dataset by name: 'shapes' or 'where' (built in), or a path to a CIFAR-10/100 folder
    (`cifar-10-batches-py`, `cifar-100-python`) or an ImageFolder tree."""
    h, w = image_size
    spec: dict[str, Any] = {"dataset": dataset, "image_size": [h, w], "seed": seed}
    if dataset in synthetic.VARIANTS:
        if h != w:
            raise ValueError(f"the built-in datasets draw square images; image size {h}x{w} is not square")
        n_train = BUILTIN_TRAIN if train_size is None else train_size
        n_val = BUILTIN_VAL if val_size is None else val_size
        train = TensorImages(*synthetic.generate(n_train, seed=seed, size=h, variant=dataset, split="train"))
        val = TensorImages(*synthetic.generate(n_val, seed=seed, size=h, variant=dataset, split="val"))
        spec.update(train_size=n_train, val_size=n_val)
        pre = Preprocess((h, w), interpolation="bilinear", mean=BUILTIN_MEAN, std=BUILTIN_STD)
        return TrainingData(train, val, list(synthetic.VARIANTS[dataset]), pre, spec, augment=False)

    root = Path(dataset).expanduser()
    if not root.exists():
        raise ValueError(f"{dataset}: not a built-in dataset ({', '.join(synthetic.VARIANTS)}) and no such folder")
    if cifar.is_cifar10(root) or cifar.is_cifar100(root):
        (xt, yt), (xv, yv), names = cifar.load_cifar(root)
        if (h, w) != (32, 32):
            xt, xv = (F.interpolate(x.float(), size=(h, w), mode="bilinear", antialias=True)
                      .round().clamp(0, 255).to(torch.uint8) for x in (xt, xv))
        pre = Preprocess((h, w), interpolation="bilinear", mean=cifar.CIFAR_MEAN, std=cifar.CIFAR_STD)  # as trained
        return TrainingData(TensorImages(xt, yt), TensorImages(xv, yv), names, pre, spec, augment=True)

    notes = []
    if (root / "train").is_dir() and (root / "val").is_dir():
        files, labels, names = folder.scan(root / "train")
        val_files, val_labels, _ = folder.scan(root / "val", classes=names)
        train = folder.FolderImages(files, labels, (h, w))
        val = folder.FolderImages(val_files, val_labels, (h, w))
    else:
        files, labels, names = folder.scan(root)
        train_idx, val_idx = folder.split_holdout(labels, val_fraction, seed)
        if not train_idx:
            raise ValueError(f"{root}: too few images to train on ({len(files)})")
        train = folder.FolderImages([files[i] for i in train_idx], [labels[i] for i in train_idx], (h, w))
        val = folder.FolderImages([files[i] for i in val_idx], [labels[i] for i in val_idx], (h, w))
        notes.append(f"{root}: held out {len(val_idx)} of {len(files)} images for validation "
                     "(use train/ and val/ sub-folders to choose them)")
    if len(names) < 2:
        raise ValueError(f"{root}: found {len(names)} class folder; training a classifier needs at least two")
    note = folder.size_note(train.files, (h, w))
    if note:
        notes.append(f"{root}: {note}")
    spec["val_fraction"] = val_fraction
    pre = Preprocess((h, w), interpolation="bilinear", mean=IMAGENET_MEAN, std=IMAGENET_STD)
    return TrainingData(train, val, names, pre, spec, augment=True, notes=notes)


def normalize(images: torch.Tensor, pre: Preprocess) -> torch.Tensor:
    """uint8 (B, 3, H, W) -> float (B, 3, H, W) normalised as `pre` does (same device as images)."""
    mean = torch.tensor(pre.mean, device=images.device).view(1, 3, 1, 1) * 255
    std = torch.tensor(pre.std, device=images.device).view(1, 3, 1, 1) * 255
    return (images.float() - mean) / std


def random_crop_flip(images: torch.Tensor, generator: torch.Generator, pad: int | None = None) -> torch.Tensor:
    """torchvision-style RandomCrop(size, padding) + RandomHorizontalFlip on a batch (B, C, H, W).

    pad defaults to H/8 (4 pixels at 32, as in the CIFAR recipes). Random numbers come from
    `generator` (a CPU generator), so a resumed run draws the same crops.
    """
    b, _, h, w = images.shape
    pad = max(1, h // 8) if pad is None else pad
    padded = F.pad(images, (pad, pad, pad, pad))  # zeros, like torchvision's default fill
    oy = torch.randint(0, 2 * pad + 1, (b,), generator=generator).to(images.device)
    ox = torch.randint(0, 2 * pad + 1, (b,), generator=generator).to(images.device)
    flip = (torch.rand(b, generator=generator) < 0.5).to(images.device)
    rows = oy[:, None] + torch.arange(h, device=images.device)  # (B, H)
    cols = ox[:, None] + torch.arange(w, device=images.device)  # (B, W)
    cols = torch.where(flip[:, None], cols.flip(1), cols)
    batch = torch.arange(b, device=images.device)[:, None, None]
    out = padded.permute(0, 2, 3, 1)[batch, rows[:, :, None], cols[:, None, :]]  # (B, H, W, C)
    return out.permute(0, 3, 1, 2).contiguous()
