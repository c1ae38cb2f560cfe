"""ImageFolder trees and CIFAR pickle folders, built tiny on disk in the real formats."""

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vit_explorer.data.datasets import load_data, normalize, random_crop_flip


def _png(path: Path, colour: tuple[int, int, int], size: tuple[int, int] = (20, 20)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, colour).save(path)


def _tree(root: Path, per_class: int = 5) -> None:
    for name, colour in (("cat", (255, 0, 0)), ("dog", (0, 0, 255))):
        for i in range(per_class):
            _png(root / name / f"{i}.png", colour, (20 + i, 20))


def test_image_folder_split_resize_and_note(tmp_path: Path) -> None:
    _tree(tmp_path)
    data = load_data(str(tmp_path), image_size=(16, 16), seed=0, val_fraction=0.2)
    assert data.labels == ["cat", "dog"]
    assert len(data.train) == 8 and len(data.val) == 2
    batch = data.train.__getitems__([0, 1])
    assert batch.images.shape == (2, 3, 16, 16) and batch.images.dtype == torch.uint8
    assert batch.labels.tolist() == [0, 0] and batch.skipped == []
    assert any("different size" in n and "resized to 16x16" in n for n in data.notes)
    assert data.preprocessing.size == (16, 16)


def test_image_folder_train_val_subfolders(tmp_path: Path) -> None:
    _tree(tmp_path / "train")
    _tree(tmp_path / "val", per_class=1)
    data = load_data(str(tmp_path), image_size=(16, 16))
    assert len(data.train) == 10 and len(data.val) == 2


def test_corrupt_image_is_skipped_and_named(tmp_path: Path) -> None:
    _tree(tmp_path)
    bad = tmp_path / "dog" / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    data = load_data(str(tmp_path), image_size=(16, 16), val_fraction=0.01)
    index = data.train.files.index(bad) if bad in data.train.files else None
    if index is None:  # held out for validation: look there
        dataset, index = data.val, data.val.files.index(bad)
    else:
        dataset = data.train
    batch = dataset.__getitems__([0, index])
    assert len(batch.labels) == 1 and batch.images.shape[0] == 1
    assert len(batch.skipped) == 1 and "broken.png" in batch.skipped[0]


@pytest.mark.parametrize("problem", ["missing", "no_classes", "empty_class", "one_class"])
def test_bad_folders_give_clear_messages(tmp_path: Path, problem: str) -> None:
    root = tmp_path / "data"
    if problem != "missing":
        root.mkdir()
    if problem == "empty_class":
        _tree(root)
        (root / "bird").mkdir()
    if problem == "one_class":
        for i in range(3):
            _png(root / "cat" / f"{i}.png", (1, 2, 3))
    expected = {"missing": "no such folder", "no_classes": "no class folders", "empty_class": "bird: class folder",
                "one_class": "at least two"}[problem]
    with pytest.raises(ValueError, match=expected):
        load_data(str(root), image_size=(16, 16))


def _cifar_batch(path: Path, n: int, label_key: str, classes: int, seed: int) -> tuple[np.ndarray, list[int]]:
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
    labels = [int(v) for v in rng.integers(0, classes, n)]
    with open(path, "wb") as f:
        pickle.dump({b"data": data, label_key.encode(): labels, b"batch_label": b"x"}, f)
    return data, labels


def test_cifar10_pickles(tmp_path: Path) -> None:
    first = None
    for i in range(1, 6):
        batch = _cifar_batch(tmp_path / f"data_batch_{i}", 4, "labels", 10, i)
        first = first or batch
    _cifar_batch(tmp_path / "test_batch", 3, "labels", 10, 9)
    names = [f"c{i}".encode() for i in range(10)]
    with open(tmp_path / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": names, b"num_cases_per_batch": 4}, f)
    data = load_data(str(tmp_path), image_size=(32, 32))
    assert data.labels == [f"c{i}" for i in range(10)]
    assert len(data.train) == 20 and len(data.val) == 3 and data.augment
    batch = data.train.__getitems__([0])
    # the row layout is 1024 red, 1024 green, 1024 blue values, each in raster order
    expected = torch.from_numpy(first[0][0].reshape(3, 32, 32))
    assert torch.equal(batch.images[0], expected) and batch.labels.item() == first[1][0]


def test_cifar100_pickles(tmp_path: Path) -> None:
    _cifar_batch(tmp_path / "train", 6, "fine_labels", 100, 1)
    _cifar_batch(tmp_path / "test", 2, "fine_labels", 100, 2)
    with open(tmp_path / "meta", "wb") as f:
        pickle.dump({b"fine_label_names": [f"f{i}".encode() for i in range(100)]}, f)
    data = load_data(str(tmp_path), image_size=(32, 32))
    assert len(data.labels) == 100 and len(data.train) == 6


def test_broken_cifar_file_is_named(tmp_path: Path) -> None:
    _cifar_batch(tmp_path / "train", 6, "fine_labels", 100, 1)
    (tmp_path / "test").write_bytes(b"garbage")
    (tmp_path / "meta").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="test: not a readable CIFAR pickle"):
        load_data(str(tmp_path))


def test_random_crop_flip_matches_a_padded_crop() -> None:
    images = torch.arange(2 * 3 * 8 * 8, dtype=torch.int64).view(2, 3, 8, 8).to(torch.uint8)
    out = random_crop_flip(images, torch.Generator().manual_seed(0), pad=2)
    g = torch.Generator().manual_seed(0)
    oy, ox = torch.randint(0, 5, (2,), generator=g), torch.randint(0, 5, (2,), generator=g)
    flip = torch.rand(2, generator=g) < 0.5
    padded = torch.nn.functional.pad(images, (2, 2, 2, 2))
    for b in range(2):
        crop = padded[b, :, oy[b]:oy[b] + 8, ox[b]:ox[b] + 8]
        assert torch.equal(out[b], crop.flip(-1) if flip[b] else crop)


def test_normalize_uses_the_recorded_mean_and_std() -> None:
    data = load_data("shapes", train_size=4, val_size=2)
    x = normalize(torch.full((1, 3, 2, 2), 255, dtype=torch.uint8), data.preprocessing)
    assert torch.allclose(x, torch.ones_like(x))
