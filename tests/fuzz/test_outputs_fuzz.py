"""Hostile folders around `train` and `inspect`: image folders whose links lead out of the dataset or put one
image in two classes or both splits ("train-folders/"), output folders of `inspect` holding links, FIFOs or
files of the user ("inspect-out/"), and a training --out in use or booby-trapped ("train-out/").

Each case prepares its scratch folder and returns the command line and the fragments its one error line
must hold; the outcome is always a refusal: exit status 2, one `vit-explorer COMMAND: error:` line, no
traceback, nothing under the scratch folder written or lost. `heavy` cases would hang if a guard failed,
so they run in a child process with a memory limit and a timeout."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from PIL import Image
from runner import run, snapshot

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--preset", "classroom-tiny", "--image-size", "16", "--batch-size", "4", "--steps", "1"]
LOCK = ".vit-explorer-train.lock"


@dataclass
class Scratch:
    valid: Path  # the fuzz suite's valid sources (a native checkpoint, an image)
    root: Path  # this case's folder: nothing under it may change
    held: list[int] = field(default_factory=list)  # descriptors to close after the run (locks held)


@dataclass(frozen=True)
class Case:
    name: str  # "surface/what"
    make: Callable[[Scratch], tuple[list[str], list[str]]]  # -> (argv, fragments the error line must hold)
    heavy: bool = False


CASES: list[Case] = []


def add(name: str, make: Callable[[Scratch], tuple[list[str], list[str]]], heavy: bool = False) -> None:
    assert all(c.name != name for c in CASES), name
    CASES.append(Case(name, make, heavy))


# ------------------------------------------------------------------------------------- train-folders
def _class(folder: Path, n: int = 3) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        Image.new("RGB", (16, 16), (40 * i, 90, 200)).save(folder / f"{i}.png")


def _images(s: Scratch, split: bool = False) -> Path:
    """A valid image folder (with train/ and val/ when `split`) and a folder of images outside it."""
    data = s.root / "data"
    for prefix in (["train", "val"] if split else [""]):
        _class(data / prefix / "cat")
        _class(data / prefix / "dog")
    _class(s.root / "outside" / "cat")
    return data


def train_folder(name: str, poison: Callable[[Path, Scratch], list[str]], split: bool = False) -> None:
    def make(s: Scratch) -> tuple[list[str], list[str]]:
        data = _images(s, split)
        fragments = poison(data, s)
        return ["train", *TINY, "--dataset", str(data), "--out", str(s.root / "run")], fragments

    add(f"train-folders/{name}", make)


def _replace(path: Path, target: Path | str) -> Path:
    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink(missing_ok=True)
    path.symlink_to(target)
    return path


def _outside(path: Path, target: Path | str) -> list[str]:
    return [f"{_replace(path, target)}: a link to {target}", "outside the dataset folder", "--follow-links"]


train_folder("class-link-to-the-machine-root", lambda d, s: _outside(d / "everything", "/"))
train_folder("class-link-outside", lambda d, s: _outside(d / "dog", s.root / "outside" / "cat"))
train_folder("image-link-outside", lambda d, s: _outside(d / "dog" / "0.png", s.root / "outside" / "cat" / "0.png"))
train_folder("subfolder-link-outside", lambda d, s: _outside(d / "dog" / "more", s.root / "outside"))
train_folder("image-link-to-etc-passwd", lambda d, s: _outside(d / "dog" / "passwd.png", "/etc/passwd"))
train_folder("split-link-outside", lambda d, s: _outside(d / "train" / "dog", s.root / "outside" / "cat"), split=True)
train_folder("class-link-to-the-dataset", lambda d, s: [str(_replace(d / "mixed", d)), "in two classes"])
train_folder("class-link-to-another-class", lambda d, s: [str(_replace(d / "dog", d / "cat")), "in two classes"])
train_folder("image-link-to-another-class", lambda d, s: [str(_replace(d / "dog" / "9.png", d / "cat" / "0.png")),
                                                          "in two classes"])
train_folder("val-link-to-train", lambda d, s: (_replace(d / "val", d / "train"),
                                                ["both a training and a validation image"])[1], split=True)
train_folder("val-class-link-to-train", lambda d, s: (_replace(d / "val" / "dog", d / "train" / "dog"),
                                                      ["both a training and a validation image"])[1], split=True)
train_folder("val-image-link-to-train", lambda d, s: [str(_replace(d / "val" / "cat" / "0.png",
                                                                   d / "train" / "cat" / "1.png")),
                                                      "both a training and a validation image"], split=True)


# ----------------------------------------------------------------------------------------- inspect-out
def inspect_out(name: str, prepare: Callable[[Path, Scratch], list[str]], *flags: str, heavy: bool = False) -> None:
    def make(s: Scratch) -> tuple[list[str], list[str]]:
        out = s.root / "report"
        fragments = prepare(out, s)
        return ["inspect", str(s.valid / "native"), "--out", str(out), *flags], [str(out), *fragments]

    add(f"inspect-out/{name}", make, heavy)


def _with(out: Path, make: Callable[[Path], object]) -> None:
    out.mkdir()
    make(out / "summary.json")


def _precious(s: Scratch) -> Path:
    path = s.root / "precious.json"
    path.write_text("keep me")
    return path


inspect_out("not-empty", lambda out, s: (_with(out, lambda p: p.write_text("{}")), ["--overwrite"])[1])
inspect_out("summary-link", lambda out, s: (_with(out, lambda p: p.symlink_to(_precious(s))), ["--overwrite"])[1])
inspect_out("summary-fifo", lambda out, s: (_with(out, os.mkfifo), ["--overwrite"])[1], heavy=True)
inspect_out("summary-dev-zero-link", lambda out, s: (_with(out, lambda p: p.symlink_to("/dev/zero")),
                                                     ["--overwrite"])[1])
inspect_out("is-a-file", lambda out, s: (out.write_text("x"), ["is a file"])[1])
inspect_out("is-a-file-overwrite", lambda out, s: (out.write_text("x"), ["is a file"])[1], "--overwrite")
inspect_out("overwrite-user-files", lambda out, s: (_with(out, lambda p: p.write_text("{}")),
                                                    (out / "thesis.tex").write_text("mine"),
                                                    ["holds thesis.tex, which inspect does not write"])[2],
            "--overwrite")
inspect_out("overwrite-a-subfolder", lambda out, s: ((out / "photos").mkdir(parents=True),
                                                     ["holds photos, which inspect does not write"])[1], "--overwrite")
inspect_out("overwrite-through-a-link", lambda out, s: ((s.root / "real").mkdir(),
                                                        (s.root / "real" / "summary.json").write_text("{}"),
                                                        out.symlink_to(s.root / "real"), ["is a link"])[3],
            "--overwrite")


# ------------------------------------------------------------------------------------------ train-out
def train_out(name: str, prepare: Callable[[Path, Scratch], list[str]], *flags: str) -> None:
    def make(s: Scratch) -> tuple[list[str], list[str]]:
        out = s.root / "run"
        fragments = prepare(out, s)
        return ["train", *TINY, "--train-size", "16", "--val-size", "4", "--out", str(out), *flags], fragments

    add(f"train-out/{name}", make)


def _hold(out: Path, s: Scratch) -> list[str]:
    """The folder held by another run: flock on another open file description conflicts even in one process."""
    out.mkdir()
    fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    s.held.append(fd)
    return [str(out), "another `vit-explorer train` is writing to this folder"]


def _lock_link(out: Path, s: Scratch) -> list[str]:
    out.mkdir()
    (out / LOCK).symlink_to(_precious(s))
    return [str(out / LOCK), "cannot create the run's lock file"]


train_out("in-use", _hold)
train_out("in-use-overwrite", _hold, "--overwrite")
train_out("lock-file-is-a-link", _lock_link)
train_out("is-a-file", lambda out, s: (out.write_text("x"), [str(out), "is a file"])[1])
train_out("holds-a-run", lambda out, s: (shutil.copytree(s.valid / "native", out),
                                         [str(out), "already holds a trained model"])[1])


# ------------------------------------------------------------------------------------------------ tests
CHILD = """
import os, resource, sys
import torch  # what importing torch maps is not counted: the limit is on what the command allocates
from vit_explorer.cli import main
with open("/proc/self/statm") as f:
    mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
resource.setrlimit(resource.RLIMIT_AS, (mapped + 2 * 2**30, resource.RLIM_INFINITY))
sys.exit(main(sys.argv[1:]))
"""


def _problems(argv: list[str], fragments: list[str], status: int, err: str) -> list[str]:
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.strip()]
    prefix = f"vit-explorer {argv[0]}: error: "
    problems = [] if status == 2 else [f"exit status {status}, not 2"]
    if len(lines) != 1 or not lines[0].startswith(prefix):
        problems.append(f"stderr is not one '{prefix}...' line: {err[-2000:]!r}")
    elif missing := [f for f in fragments if f not in lines[0]]:
        problems.append(f"the message lacks {missing}: {lines[0][:600]!r}")
    return problems


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_hostile_output_or_data_folder_is_refused(case: Case, valid_sources: Path, tmp_path: Path) -> None:
    s = Scratch(valid_sources, tmp_path / "case")
    s.root.mkdir()
    argv, fragments = case.make(s)
    before = snapshot(s.root)
    try:
        if case.heavy:
            env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "QT_QPA_PLATFORM": "offscreen"}
            done = subprocess.run([sys.executable, "-c", CHILD, *argv], env=env, capture_output=True, text=True,
                                  timeout=120)  # a hang fails the test
            problems = _problems(argv, fragments, done.returncode, done.stderr)
        else:
            outcome = run(argv)
            problems = _problems(argv, fragments, outcome.status, outcome.err)
            problems += [f"took {outcome.seconds:.1f} s"] if outcome.seconds > 60 else []
    finally:
        for fd in s.held:
            os.close(fd)
    assert problems == []
    assert snapshot(s.root) == before, "files were written or lost"
