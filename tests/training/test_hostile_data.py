"""Hostile datasets for `vit-explorer train --dataset FOLDER`: CIFAR pickles that try to run code or
allocate without bound, malformed CIFAR files, and image folders with nothing readable. Each is
refused with one line naming the file and the problem; no payload ever runs."""

import io
import os
import pickle
import pickletools
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vit_explorer.data import cifar
from vit_explorer.data.datasets import load_data

from .conftest import TINY, assert_refused, run_train, snapshot

MARKER = "pwned"  # a payload that runs creates this file in the dataset folder


class Payload:
    """Unpickling calls `call(*args)`: what an attacker's __reduce__ does."""

    def __init__(self, call: Callable[..., object], *args: object) -> None:
        self.call, self.args = call, args

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return self.call, self.args


def _batch(n: int = 8, seed: int = 0) -> dict[bytes, object]:
    rng = np.random.default_rng(seed)
    return {b"batch_label": b"training batch", b"labels": [int(v) for v in rng.integers(0, 10, n)],
            b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), b"filenames": [b"x.png"] * n}


def _cifar10(root: Path, protocol: int = 2) -> Path:
    """A CIFAR-10 folder in the official layout: five training batches, a test batch and the meta file."""
    root.mkdir(parents=True, exist_ok=True)
    for i in range(1, 6):
        (root / f"data_batch_{i}").write_bytes(pickle.dumps(_batch(seed=i), protocol=protocol))
    (root / "test_batch").write_bytes(pickle.dumps(_batch(seed=9), protocol=protocol))
    meta = {b"label_names": [f"c{i}".encode() for i in range(10)], b"num_cases_per_batch": 8}
    (root / "batches.meta").write_bytes(pickle.dumps(meta, protocol=protocol))
    return root


def _python2_batch() -> bytes:
    """A batch as Python 2's cPickle wrote the official files: str keys, numpy.core's _reconstruct, BINSTRING."""
    def string(b: bytes) -> bytes:
        return b"U" + bytes([len(b)]) + b if len(b) < 256 else b"T" + len(b).to_bytes(4, "little") + b

    pixels = np.arange(8 * 3072, dtype=np.int64).astype(np.uint8).tobytes()
    return (b"\x80\x02}q\x00(" + string(b"data") + b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85"
            + string(b"b") + b"\x87R(K\x01K\x08M\x00\x0c\x86cnumpy\ndtype\n" + string(b"u1") + b"K\x00K\x01\x87R(K\x03"
            + string(b"|") + b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb\x89" + string(pixels) + b"tb"
            + string(b"labels") + b"](" + b"K\x01" * 8 + b"eu.")


@pytest.mark.parametrize("protocol", [0, 1, 2, 3, 4, 5])
def test_cifar_pickles_of_every_protocol_still_load(tmp_path: Path, protocol: int) -> None:
    data = load_data(str(_cifar10(tmp_path, protocol)), image_size=(32, 32))
    assert len(data.train) == 40 and data.labels[3] == "c3"
    expected = _batch(seed=1)[b"data"][0].reshape(3, 32, 32)  # type: ignore[union-attr]
    assert (data.train.images[0].numpy() == expected).all()


def test_a_python2_cifar_file_loads(tmp_path: Path) -> None:
    _cifar10(tmp_path)
    (tmp_path / "data_batch_1").write_bytes(_python2_batch())
    globals_named = {arg for op, arg, _ in pickletools.genops(_python2_batch()) if op.name == "GLOBAL"}
    assert globals_named == {"numpy.core.multiarray _reconstruct", "numpy ndarray", "numpy dtype"}
    data = load_data(str(tmp_path), image_size=(32, 32))
    assert data.train.images[0].flatten()[:3].tolist() == [0, 1, 2] and data.train.labels[0] == 1


def _evil(marker: Path) -> list[tuple[str, object]]:
    """Objects whose unpickling would create `marker` (or otherwise act) if anything let it run."""
    return [
        ("os.system", Payload(os.system, f"touch {marker}")),
        ("os.popen", Payload(os.popen, f"touch {marker}")),
        ("builtins.open", Payload(open, str(marker), "w")),
        ("builtins.exec", Payload(exec, f"open({str(marker)!r}, 'w')")),
        ("builtins.eval", Payload(eval, f"open({str(marker)!r}, 'w')")),
        ("builtins.getattr", Payload(getattr, Payload(__import__, "os"), "system")),
        ("subprocess", Payload(__import__("subprocess").call, ["touch", str(marker)])),
        ("pathlib", Payload(Path.touch, marker)),
        ("importlib", Payload(__import__("importlib").import_module, "this")),
        ("shutil", Payload(__import__("shutil").rmtree, str(marker.parent))),
        ("numpy.load", Payload(np.load, str(marker))),
        ("numpy.frombuffer", Payload(np.frombuffer, b"\x00" * 8)),
        ("numpy.ndarray", Payload(np.ndarray, (10**12,))),
        ("pickle.loads", Payload(pickle.loads, pickle.dumps(1))),
    ]


def _evil_files(root: Path) -> list[tuple[str, str, bytes]]:
    """(id, file to replace, bytes) for every payload in every place a CIFAR folder has pickles."""
    marker = root / MARKER
    cases = []
    for name, payload in _evil(marker):
        cases.append((f"{name} as data", "data_batch_1", pickle.dumps({b"data": payload, b"labels": []}, 2)))
    first = _evil(marker)[0][1]
    cases += [
        ("payload in labels, protocol 4", "data_batch_1", pickle.dumps({**_batch(), b"labels": [first]}, 4)),
        ("payload in labels, protocol 5", "data_batch_1", pickle.dumps({**_batch(), b"labels": [1, first]}, 5)),
        ("payload as a key", "data_batch_1", pickle.dumps({first: 1}, 3)),
        ("payload at top level", "data_batch_1", pickle.dumps(first, 0)),
        ("payload in the test batch", "test_batch", pickle.dumps({**_batch(), b"filenames": first}, 2)),
        ("payload in the meta file", "batches.meta", pickle.dumps({b"label_names": [first]}, 2)),
        ("payload in the last batch", "data_batch_5", pickle.dumps([first], 1)),
        ("numpy object array", "data_batch_1", pickle.dumps({b"data": np.array([first, 1], dtype=object)}, 2)),
        ("object dtype protocol 5", "data_batch_1", pickle.dumps({b"data": np.array([1, 2], dtype=object)}, 5)),
        ("huge _reconstruct", "data_batch_1",
         pickle.dumps(Payload(__import__("numpy._core.multiarray", fromlist=["x"])._reconstruct, np.ndarray,
                              (10**12,), b"b"), 2)),
        ("_codecs.encode rot13", "data_batch_1", pickle.dumps(Payload(__import__("_codecs").encode, "x", "rot13"), 2)),
    ]
    return cases


EVIL_IDS = [case[0] for case in _evil_files(Path("/x"))]


@pytest.mark.parametrize("case", EVIL_IDS)
def test_cifar_payload_never_runs(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _cifar10(tmp_path / "cifar")
    _, name, blob = next(c for c in _evil_files(root) if c[0] == case)
    (root / name).write_bytes(blob)
    before = snapshot(root)
    outcome = run_train([*TINY, "--steps", "1", "--dataset", str(root), "--out", str(tmp_path / "run")], capsys)
    assert_refused(outcome, name)
    assert not (root / MARKER).exists() and snapshot(root) == before
    assert not (tmp_path / "run").exists()


def test_cifar_payload_never_runs_on_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _cifar10(tmp_path / "cifar")
    out = tmp_path / "run"
    assert run_train([*TINY[:2], "--image-size", "32", "--batch-size", "8", "--steps", "1", "--dataset", str(root),
                      "--out", str(out)], capsys).code == 0
    (root / "data_batch_3").write_bytes(pickle.dumps({b"data": Payload(os.system, f"touch {root / MARKER}")}, 2))
    saved = snapshot(out)
    assert_refused(run_train(["--resume", "--out", str(out)], capsys), "data_batch_3", "posix.system")
    assert not (root / MARKER).exists() and snapshot(out) == saved


def _fifo(path: Path) -> bytes | None:
    os.mkfifo(path)
    return None


# malformed CIFAR files: (id, file, contents or a function that makes the file, expected fragment)
MALFORMED: list[tuple[str, str, bytes | Callable[[Path], object], str]] = [
    ("empty file", "data_batch_1", b"", "not a readable CIFAR pickle"),
    ("garbage", "data_batch_2", b"garbage bytes", "not a readable CIFAR pickle"),
    ("truncated", "data_batch_1", pickle.dumps(_batch(), 2)[:500], "not a readable CIFAR pickle"),
    ("a list", "data_batch_1", pickle.dumps([1, 2, 3], 2), "expected a dict"),
    ("no data", "data_batch_1", pickle.dumps({b"labels": [1]}, 2), "without 'data'"),
    ("data as a list", "data_batch_1", pickle.dumps({b"data": [[0] * 3072], b"labels": [1]}, 2), "uint8 array"),
    ("data of floats", "data_batch_1", pickle.dumps({b"data": np.zeros((2, 3072)), b"labels": [1, 2]}, 2),
     "uint8 array"),
    ("data too narrow", "data_batch_1", pickle.dumps({b"data": np.zeros((2, 100), np.uint8), b"labels": [1, 2]}, 2),
     "shape (N, 3072)"),
    ("data 3-D", "data_batch_1", pickle.dumps({b"data": np.zeros((2, 3, 1024), np.uint8), b"labels": [1, 2]}, 2),
     "shape (N, 3072)"),
    ("labels too few", "data_batch_1", pickle.dumps({**_batch(), b"labels": [1]}, 2), "1 labels for 8 images"),
    ("labels nested", "data_batch_1", pickle.dumps({**_batch(), b"labels": [[1] * 8] * 8}, 2), "list of class"),
    ("labels strings", "data_batch_1", pickle.dumps({**_batch(), b"labels": ["a"] * 8}, 2), "list of class"),
    ("labels huge", "data_batch_1", pickle.dumps({**_batch(), b"labels": [10**30] * 8}, 2), "list of class"),
    ("labels floats", "data_batch_1", pickle.dumps({**_batch(), b"labels": np.zeros(8)}, 2), "list of class"),
    ("label out of range", "data_batch_1", pickle.dumps({**_batch(), b"labels": [10] * 8}, 2), "labels outside"),
    ("label negative", "test_batch", pickle.dumps({**_batch(), b"labels": [-1] * 8}, 2), "labels outside"),
    ("no class names", "batches.meta", pickle.dumps({b"label_names": []}, 2), "class names"),
    ("class names not strings", "batches.meta", pickle.dumps({b"label_names": list(range(10))}, 2), "class names"),
    ("a million class names", "batches.meta", pickle.dumps({b"label_names": [b"x"] * 10**6}, 2), "class names"),
    ("a class name of 1 MB", "batches.meta", pickle.dumps({b"label_names": [b"x" * 2**20] * 10}, 2), "class names"),
    ("a file too large", "data_batch_4", lambda p: os.truncate(p, cifar.MAX_FILE_BYTES + 1), "larger than any CIFAR"),
    ("test batch a folder", "test_batch", lambda p: (p.unlink(), p.mkdir()), "not a regular file"),
    ("test batch a FIFO", "test_batch", lambda p: (p.unlink(), _fifo(p)), "not a regular file"),
    ("test batch to /dev/zero", "test_batch", lambda p: (p.unlink(), p.symlink_to("/dev/zero")), "not a regular"),
    ("test batch missing", "test_batch", lambda p: p.unlink(), "CIFAR file is missing"),
]


@pytest.mark.parametrize("case,name,contents,fragment", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_cifar_is_named(case: str, name: str, contents: bytes | Callable[[Path], object], fragment: str,
                                  tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _cifar10(tmp_path / "cifar")
    path = root / name
    if isinstance(contents, bytes):
        path.write_bytes(contents)
    else:
        contents(path)
    outcome = run_train([*TINY, "--steps", "1", "--dataset", str(root), "--out", str(tmp_path / "run")], capsys)
    assert_refused(outcome, name, fragment)
    assert not (tmp_path / "run").exists()


def _png(path: Path, colour: tuple[int, int, int] = (200, 30, 30)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (16, 16), colour).save(path)


def _tree(root: Path, per_class: int = 6) -> None:
    for c, name in enumerate(("cat", "dog")):
        for i in range(per_class):
            _png(root / name / f"{i}.png", (200 * c, 40, 90))


def _break_all(root: Path) -> None:
    for path in root.rglob("*.png"):
        path.write_bytes(b"\x89PNG\r\n\x1a\n truncated")


def _break_val(root: Path) -> None:
    _tree(root / "train")
    _tree(root / "val", per_class=2)
    _break_all(root / "val")


def _text_as_images(root: Path) -> None:
    for c in ("a", "b"):
        (root / c).mkdir(parents=True)
        for i in range(4):
            (root / c / f"{i}.jpg").write_text("not an image")


def _special_files(root: Path) -> None:
    for c in ("a", "b"):
        (root / c).mkdir(parents=True)
        os.mkfifo(root / c / "fifo.png")
        (root / c / "zero.png").symlink_to("/dev/zero")
        (root / c / "folder.png").mkdir()


def _empty_files(root: Path) -> None:
    for c in ("a", "b"):
        (root / c).mkdir(parents=True)
        for i in range(3):
            (root / c / f"{i}.png").touch()


def _singletons(root: Path) -> None:
    _png(root / "a" / "0.png")
    _png(root / "b" / "0.png")


FOLDERS: list[tuple[str, Callable[[Path], None], str]] = [
    ("every image unreadable", lambda r: (_tree(r), _break_all(r)), "none of the 10 images can be read"),
    ("every validation image unreadable", _break_val, "the validation images: none of the 4 images"),
    ("text files named .jpg", _text_as_images, "none of the"),
    ("FIFOs, devices and folders named .png", _special_files, "class folder without images"),
    ("empty .png files", _empty_files, "none of the"),
    ("one image per class: nothing to validate on", _singletons, "the validation images: there are none"),
]


@pytest.mark.parametrize("case,make,fragment", FOLDERS, ids=[f[0] for f in FOLDERS])
def test_image_folder_without_readable_images_is_refused(case: str, make: Callable[[Path], None], fragment: str,
                                                         tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "images"
    make(root)
    outcome = run_train([*TINY, "--batch-size", "4", "--steps", "2", "--dataset", str(root),
                         "--out", str(tmp_path / "run")], capsys)
    assert_refused(outcome, str(root), fragment)
    assert not (tmp_path / "run").exists()  # no untrained model saved as if it were trained


def test_restricted_unpickler_admits_only_the_cifar_globals() -> None:
    assert set(cifar.ALLOWED) == {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
                                  ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.numeric", "_frombuffer"),
                                  ("numpy._core.numeric", "_frombuffer"), ("_codecs", "encode")}
    with pytest.raises(pickle.UnpicklingError, match="print, which a CIFAR file never does"):
        cifar._Unpickler(io.BytesIO(pickle.dumps(Payload(print, "hi"), 2))).load()


def test_cifar_resized_beyond_memory_is_refused_before_resizing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="resizing CIFAR's 48 images to 16384x16384 takes about .* use a smaller"):
        load_data(str(_cifar10(tmp_path)), image_size=(16_384, 16_384))
