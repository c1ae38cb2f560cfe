"""A user's ImageFolder tree: one sub-folder per class, images inside (any depth).

A `train/` + `val/` pair of such trees is used as given; otherwise a seeded tenth of each class
is held out for validation. Every image is resized to the model's input size; an image that
turns out to be corrupt while training is skipped with a warning that names it.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from PIL import Image

from .images import IMAGE_EXTENSIONS, ImageError, open_image


class Batch(NamedTuple):
    images: torch.Tensor  # uint8 (B, 3, H, W)
    labels: torch.Tensor  # int64 (B,)
    skipped: list[str]  # messages naming the unreadable images left out of this batch


class ImageSet(torch.utils.data.Dataset[Batch]):
    """A training or validation split: its length, and whole batches by index (never one image at a time)."""

    def __len__(self) -> int:
        raise NotImplementedError

    def __getitems__(self, indices: list[int]) -> Batch:
        raise NotImplementedError


def _class_folders(root: Path) -> list[Path]:
    if not root.is_dir():
        raise ValueError(f"{root}: {'not a folder' if root.exists() else 'no such folder'}")
    try:
        folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError as error:
        raise ValueError(f"{root}: cannot read the folder ({error})") from None
    if not folders:
        raise ValueError(f"{root}: no class folders; an image folder needs one sub-folder of images per class")
    return folders


def _check_inside(path: Path, real: Path, base: Path, follow_links: bool) -> None:
    """Refuse `path` (resolved: `real`) outside the dataset folder `base`, unless links may be followed there."""
    if not follow_links and not real.is_relative_to(base):
        raise ValueError(f"{path}: a link to {real}, outside the dataset folder {base}; copy what it holds into "
                         "the dataset, or give --follow-links to read it anyway")


def _images_in(folder: Path, base: Path, follow_links: bool) -> list[tuple[Path, Path]]:
    """(path, resolved path) of each regular file with an image extension under `folder`, links followed only
    where they stay inside `base`; a folder reached twice (a link to an ancestor, two links to one folder) is read
    once. Only regular files: a FIFO or device named like an image would hang the reader."""
    files = []
    visited: set[Path] = set()
    _check_inside(folder, folder.resolve(), base, follow_links)
    for dirpath, dirnames, names in os.walk(folder, followlinks=True):
        here = Path(dirpath)
        real = here.resolve()
        if real in visited:
            dirnames[:] = []
            continue
        visited.add(real)
        kept = []
        for name in sorted(dirnames):
            sub = here / name
            sub_real = sub.resolve() if sub.is_symlink() else real / name
            _check_inside(sub, sub_real, base, follow_links)
            if sub_real not in visited:
                kept.append(name)
        dirnames[:] = kept
        for name in names:
            path = here / name
            if not name.lower().endswith(IMAGE_EXTENSIONS) or not path.is_file():
                continue
            file_real = path.resolve() if path.is_symlink() else real / name
            _check_inside(path, file_real, base, follow_links)
            files.append((path, file_real))
    return sorted(files)


def scan(root: Path, classes: list[str] | None = None, *, within: Path | None = None, follow_links: bool = False
         ) -> tuple[list[Path], list[int], list[str]]:
    """(files, labels, class names) of an ImageFolder tree; errors name the offending folder.

    Nothing outside the dataset folder `within` (default: `root`) is read unless `follow_links`; a file
    found twice in one class (through a link) is taken once, in two classes refused."""
    base = (within or root).resolve()
    _check_inside(root, root.resolve(), base, follow_links)
    folders = _class_folders(root)
    names = [f.name for f in folders]
    if classes is not None and names != classes:
        raise ValueError(f"{root}: class folders {names} differ from the training classes {classes}")
    files: list[Path] = []
    labels: list[int] = []
    seen: dict[Path, tuple[Path, int]] = {}  # resolved path -> (the path it was first found as, its class)
    for label, folder in enumerate(folders):
        found = _images_in(folder, base, follow_links)
        if not found:
            raise ValueError(f"{folder}: class folder without images (extensions {', '.join(IMAGE_EXTENSIONS)})")
        for path, real in found:
            if real in seen:
                first, first_label = seen[real]
                if first_label != label:
                    raise ValueError(f"{path}: the same file as {first} ({real}), so it would be in two classes "
                                     f"({names[first_label]} and {names[label]}); remove one of them")
                continue
            seen[real] = (path, label)
            files.append(path)
            labels.append(label)
    return files, labels, names


def check_disjoint(train: list[Path], val: list[Path]) -> None:
    """Refuse a file that is both a training and a validation image (through a link): validation would be a lie."""
    first = {path.resolve(): path for path in train}
    for path in val:
        if (real := path.resolve()) in first:
            raise ValueError(f"{path}: the same file as {first[real]} ({real}), so it would be both a training and "
                             "a validation image; remove one of them")


def size_note(files: list[Path], size: tuple[int, int], sample: int = 256) -> str | None:
    """A note when the images (the first `sample`) have sizes other than the model's input."""
    sizes: set[tuple[int, int]] = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        for path in files[:sample]:
            try:
                with Image.open(path) as image:  # reads the header only
                    sizes.add((image.height, image.width))
            except (OSError, SyntaxError, ValueError, Image.DecompressionBombError):
                continue  # reported when the image is loaded
    if sizes and sizes != {size}:
        shown = ", ".join(f"{h}x{w}" for h, w in sorted(sizes)[:5]) + (" ..." if len(sizes) > 5 else "")
        return f"images have {len(sizes)} different size(s) ({shown}); all are resized to {size[0]}x{size[1]}"
    return None


class FolderImages(ImageSet):
    """Images from files, resized to `size` (H, W); `__getitems__` leaves out (and names) unreadable ones.

    With `keep`, each image is decoded once and kept (a small set: later epochs cost no decoding, and
    the loader needs no worker processes); an unreadable one is retried, and reported, every time.
    """

    def __init__(self, files: list[Path], labels: list[int], size: tuple[int, int], keep: bool = False) -> None:
        self.files = files
        self.labels = torch.tensor(labels, dtype=torch.int64)
        self.size = size
        self.kept: dict[int, torch.Tensor] | None = {} if keep else None

    def __len__(self) -> int:
        return len(self.files)

    def load(self, index: int) -> torch.Tensor:
        """(3, H, W) uint8; raises ImageError naming the file."""
        if self.kept is not None and index in self.kept:
            return self.kept[index]
        image = open_image(self.files[index]).resize((self.size[1], self.size[0]), Image.Resampling.BILINEAR)
        pixels = torch.from_numpy(np.asarray(image).copy()).permute(2, 0, 1)  # (3, H, W)
        if self.kept is not None:
            self.kept[index] = pixels
        return pixels

    def check_readable(self, what: str) -> None:
        """Refuse a set with no image that decodes: training on it would save an untrained model."""
        if not self.files:
            raise ValueError(f"{what}: there are none (every class needs two images to hold one out for "
                             "validation, or give train/ and val/ sub-folders)")
        first = None
        for index in range(len(self.files)):
            try:
                self.load(index)
                return
            except ImageError as error:
                first = first or str(error)
        raise ValueError(f"{what}: none of the {len(self.files)} images can be read (the first: {first}); "
                         "replace them with images Pillow opens (PNG, JPEG, ...)")

    def __getitems__(self, indices: list[int]) -> Batch:
        images, keep, skipped = [], [], []
        for i in indices:
            try:
                images.append(self.load(i))
                keep.append(i)
            except ImageError as error:
                skipped.append(str(error))  # reported by the trainer; the batch goes on without it
        if not images:
            return Batch(torch.empty(0, 3, *self.size, dtype=torch.uint8), torch.empty(0, dtype=torch.int64), skipped)
        return Batch(torch.stack(images), self.labels[keep], skipped)


def split_holdout(labels: list[int], fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Indices (train, val): a seeded `fraction` of each class (at least one image when it has two) held out."""
    g = torch.Generator().manual_seed(seed)
    train: list[int] = []
    val: list[int] = []
    label_tensor = torch.tensor(labels)
    for c in range(int(label_tensor.max()) + 1):
        members = (label_tensor == c).nonzero().squeeze(1)
        idx: list[int] = members[torch.randperm(members.numel(), generator=g)].tolist()
        k = int(round(len(idx) * fraction)) if len(idx) > 1 else 0
        k = max(k, 1) if len(idx) > 1 else 0
        val += idx[:k]
        train += idx[k:]
    return sorted(train), sorted(val)
