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


def test_a_small_folder_is_decoded_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder that fits in memory keeps its decoded images: the second epoch opens no file, while an
    unreadable image is tried (and reported) again each time."""
    from vit_explorer.data import datasets, folder

    _tree(tmp_path)
    (tmp_path / "dog" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    data = load_data(str(tmp_path), image_size=(16, 16), val_fraction=0.01)
    assert isinstance(data.train, folder.FolderImages) and data.train.kept is not None
    opened: list[Path] = []
    real_open = folder.open_image
    monkeypatch.setattr(folder, "open_image", lambda path: opened.append(path) or real_open(path))
    everything = list(range(len(data.train)))
    checked = len(data.train.kept)  # load_data's readability check decoded (and kept) the first image
    first = data.train.__getitems__(everything)
    assert len(first.skipped) == 1 and len(opened) == len(everything) - checked
    opened.clear()
    second = data.train.__getitems__(everything)
    assert torch.equal(first.images, second.images) and len(second.skipped) == 1
    assert [p.name for p in opened] == ["broken.png"]
    monkeypatch.setattr(datasets, "KEEP_BYTES", 0)  # a folder too large to keep decodes every time
    assert load_data(str(tmp_path), image_size=(16, 16), val_fraction=0.01).train.kept is None


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


def test_random_crop_without_flip_takes_the_same_crops_unflipped() -> None:
    images = torch.arange(16 * 3 * 8 * 8, dtype=torch.int64).view(16, 3, 8, 8).to(torch.uint8)
    both = random_crop_flip(images, torch.Generator().manual_seed(0), pad=2)
    crops = random_crop_flip(images, torch.Generator().manual_seed(0), pad=2, flip=False)
    flipped = [b for b in range(16) if not torch.equal(both[b], crops[b])]
    assert 0 < len(flipped) < 16
    assert all(torch.equal(both[b], crops[b].flip(-1)) for b in flipped)


def test_normalize_uses_the_recorded_mean_and_std() -> None:
    data = load_data("shapes", train_size=4, val_size=2)
    x = normalize(torch.full((1, 3, 2, 2), 255, dtype=torch.uint8), data.preprocessing)
    assert torch.allclose(x, torch.ones_like(x))


# ------------------------------------------------------------------------------------------------ images
def test_16_bit_greyscale_png_is_scaled_not_clipped(tmp_path: Path) -> None:
    """A 16-bit ramp (0..65535) reads as the same ramp in 0..255, not as white above 255."""
    from vit_explorer.data.images import open_image

    ramp = np.linspace(0, 65535, 64 * 64).reshape(64, 64).astype(np.uint16)
    Image.fromarray(ramp).save(tmp_path / "deep.png")
    rgb = np.asarray(open_image(tmp_path / "deep.png"))
    assert rgb.shape == (64, 64, 3) and (rgb[..., 0] == rgb[..., 2]).all()
    assert abs(rgb[..., 0].astype(float) - ramp / 257).max() <= 1


@pytest.mark.parametrize("kind", ["int32-16bit-range", "int32-wide", "float-unit", "float-wide"])
def test_int32_and_float_tiffs_are_scaled(tmp_path: Path, kind: str) -> None:
    """32-bit integer and float greyscale: the narrowest standard range (0..1 for floats, 0..255,
    0..65535) that holds the values, else their own minimum to maximum."""
    from vit_explorer.data.images import open_image

    base = np.linspace(0, 1, 32 * 32).reshape(32, 32)
    values = {"int32-16bit-range": (base * 40000).astype(np.int32), "int32-wide": (base * 4e6 - 1e6).astype(np.int32),
              "float-unit": base.astype(np.float32), "float-wide": (base * 500 - 100).astype(np.float32)}[kind]
    Image.fromarray(values).save(tmp_path / "scan.tif")
    grey = np.asarray(open_image(tmp_path / "scan.tif"))[..., 0].astype(float)
    expected = {"int32-16bit-range": base * 40000 / 65535 * 255, "int32-wide": base * 255,
                "float-unit": base * 255, "float-wide": base * 255}[kind]
    assert abs(grey - expected).max() <= 1.5, kind
    assert grey.min() < 5 and grey.max() > 100  # neither all black nor all white


def test_exif_orientation_is_applied(tmp_path: Path) -> None:
    """A phone photo stored sideways with EXIF orientation 6 (rotate 90 degrees clockwise to view)."""
    from vit_explorer.data.images import open_image

    stored = np.zeros((20, 40, 3), dtype=np.uint8)  # 40 wide, 20 high; the left half red
    stored[:, :20, 0] = 255
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(stored).save(tmp_path / "phone.jpg", exif=exif, quality=95)
    upright = np.asarray(open_image(tmp_path / "phone.jpg"))
    assert upright.shape == (40, 20, 3)
    assert upright[5, 10, 0] > 200 and upright[35, 10, 0] < 50  # the red half is now on top


@pytest.mark.parametrize("size,fragment", [((20_000, 10_000), "pixels"), ((1, 2000), "20:1"),
                                           ((3000, 10), "20:1")])
def test_huge_and_thin_images_are_refused_before_decoding(tmp_path: Path, size: tuple[int, int],
                                                          fragment: str) -> None:
    from vit_explorer.data.images import ImageError, open_image

    path = tmp_path / "big.png"
    Image.new("1", size).save(path)
    with pytest.raises(ImageError, match=fragment) as info:
        open_image(path)
    assert str(path) in str(info.value)


def test_a_thin_image_is_not_resized_to_gigabytes() -> None:
    """Even an image opened elsewhere (the app's canvas) is refused before resizing: 1x20000 at a
    224 shortest edge would be 224 x 4,480,000 pixels."""
    from vit_explorer.checkpoints.preprocess import Preprocess

    with pytest.raises(ValueError, match="would be resized to 224x4480000"):
        Preprocess((224, 224), resize_shortest=224, crop=True)(Image.new("L", (1, 20000)))


@pytest.mark.timeout(20)
def test_special_files_are_not_read_as_images(tmp_path: Path) -> None:
    import os

    from vit_explorer.data.images import ImageError, open_image

    os.mkfifo(tmp_path / "pipe.png")
    (tmp_path / "zero.png").symlink_to("/dev/zero")
    for name, kind in (("pipe.png", "named pipe"), ("zero.png", "character device")):
        with pytest.raises(ImageError, match=kind):
            open_image(tmp_path / name)
