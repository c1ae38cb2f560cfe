"""Links inside an image folder: nothing outside the dataset is read unless asked, and no image is in two
classes or in both splits. (The CLI's refusals are cases of tests/fuzz/test_outputs_fuzz.py.)"""

import os
import shutil
from pathlib import Path

import pytest
from PIL import Image

from vit_explorer.cli import main
from vit_explorer.data.datasets import DataError, check_spec, load_data


def _png(path: Path, colour: tuple[int, int, int] = (200, 30, 30)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (16, 16), colour).save(path)


def _class(folder: Path, n: int = 4, colour: tuple[int, int, int] = (200, 30, 30)) -> None:
    for i in range(n):
        _png(folder / f"{i}.png", colour)


def test_a_class_linked_outside_the_dataset_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "data"
    _class(root / "cat")
    _class(tmp_path / "elsewhere", colour=(0, 0, 200))
    (root / "dog").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ValueError) as info:
        load_data(str(root), image_size=(16, 16))
    message = str(info.value)
    assert f"{root / 'dog'}: a link to {tmp_path / 'elsewhere'}, outside the dataset folder {root}" in message
    assert "--follow-links" in message
    data = load_data(str(root), image_size=(16, 16), follow_links=True)  # asked for: read
    assert data.labels == ["cat", "dog"] and len(data.train) + len(data.val) == 8
    assert data.spec["follow_links"] is True and check_spec(data.spec)["follow_links"] is True


def test_a_class_linked_to_the_root_of_the_machine_is_refused_without_scanning_it(tmp_path: Path) -> None:
    _class(tmp_path / "cat")
    (tmp_path / "everything").symlink_to("/")
    with pytest.raises(ValueError, match=f"{tmp_path / 'everything'}: a link to /, outside the dataset folder"):
        load_data(str(tmp_path), image_size=(16, 16))


def test_an_image_linked_outside_the_dataset_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "data"
    _class(root / "cat")
    _class(root / "dog")
    _png(tmp_path / "secret.png")
    (root / "dog" / "x.png").symlink_to(tmp_path / "secret.png")
    with pytest.raises(ValueError, match=f"{root / 'dog' / 'x.png'}: a link to {tmp_path / 'secret.png'}, outside"):
        load_data(str(root), image_size=(16, 16))


def test_links_inside_the_dataset_are_followed(tmp_path: Path) -> None:
    root = tmp_path / "data"
    _class(root / ".store" / "cats")
    _class(root / "dog")
    (root / "cat").symlink_to(root / ".store" / "cats")  # a hidden folder is no class of its own
    (root / "dog" / "again.png").symlink_to(root / "dog" / "0.png")  # the same image twice in one class: once
    (root / "dog" / "loop").symlink_to(root / "dog")  # a folder that holds itself: read once, no endless walk
    data = load_data(str(root), image_size=(16, 16))
    assert data.labels == ["cat", "dog"] and len(data.train) + len(data.val) == 8


def test_a_class_linked_to_the_dataset_itself_is_refused(tmp_path: Path) -> None:
    _class(tmp_path / "cat")
    _class(tmp_path / "dog")
    (tmp_path / "mixed").symlink_to(tmp_path)
    with pytest.raises(ValueError, match="so it would be in two classes"):
        load_data(str(tmp_path), image_size=(16, 16))


@pytest.mark.parametrize("link", ["val -> train", "val/dog -> train/dog", "val/cat/x.png -> train/cat/0.png"])
def test_an_image_in_both_splits_is_refused(link: str, tmp_path: Path) -> None:
    for split in ("train", "val"):
        _class(tmp_path / split / "cat")
        _class(tmp_path / split / "dog")
    name, target = link.split(" -> ")
    path = tmp_path / name
    shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    path.symlink_to(tmp_path / target)
    with pytest.raises(ValueError, match="so it would be both a training and a validation image"):
        load_data(str(tmp_path), image_size=(16, 16))


def test_follow_links_is_a_boolean(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="follow_links must be true or false"):
        check_spec({"dataset": str(tmp_path), "image_size": [16, 16], "follow_links": "yes"})


def test_train_follows_links_outside_only_with_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "data"
    _class(root / "cat")
    _class(tmp_path / "elsewhere", colour=(0, 0, 200))
    os.symlink(tmp_path / "elsewhere", root / "dog")
    args = ["train", "--preset", "classroom-tiny", "--image-size", "16", "--batch-size", "4", "--steps", "1",
            "--dataset", str(root), "--out", str(tmp_path / "run")]
    assert main(args) == 2 and "--follow-links" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
    assert main([*args, "--follow-links"]) == 0
    assert main(["train", "--resume", "--out", str(tmp_path / "run")]) == 0  # the saved run follows them too
