"""Writing a run's folder so that a kill at any moment (SIGKILL included) leaves either a whole
checkpoint or a folder that refuses to load with a clear message, never the config of one run
beside the weights of another.

Each checkpoint is written whole into a private staging folder inside `out` (`.checkpoint-*.tmp`),
then moved into place by renames (each atomic: the staging folder is on the same filesystem):

1. the first checkpoint of a new run in a folder that held another run (`--overwrite`) removes
   that run's vit_explorer.json (the description that makes a folder loadable), and its training
   state when the new run keeps none;
2. training_state.pt, 3. model.safetensors, 4. vit_explorer.json.

A kill before 1 leaves the old run whole. Between 1 and 4 the folder has no description:
`vit-explorer OUT` says vit_explorer.json is missing, and `train --resume` continues from whichever
training state is there (both are whole files), rewriting the description. After 4 the new
checkpoint is whole. Within one run every checkpoint describes the same model, so a kill between
3 and 4 leaves new weights beside the previous checkpoint's description of the same architecture.
A failed write (a full disk) removes the staging folder and changes nothing in place. The next run
in the folder removes what a kill left behind (staging folders, `write_atomic` temporaries).
The staged files are fsync'ed before they are renamed, and the folder after, so power loss too
leaves the last whole checkpoint.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError

from ..checkpoints.files import size_text
from ..checkpoints.native import CONFIG_NAME, WEIGHTS_NAME, save_native
from ..checkpoints.preprocess import Preprocess
from ..models import VisionTransformer
from .state import STATE_NAME

WRITER_FAILURES = ("inline_container", "PytorchStreamWriter")  # how torch.save's RuntimeError says it could not write
STAGING = (".checkpoint-", ".tmp")  # prefix and suffix of a staging folder
# what an interrupted write leaves: staging folders, and write_atomic's temporaries (.NAME.XXXXXXXX.tmp)
LEFTOVERS = (f"{STAGING[0]}*{STAGING[1]}", *(f".{name}.*.tmp" for name in (STATE_NAME, WEIGHTS_NAME, CONFIG_NAME)))


LOCK_NAME = ".vit-explorer-train.lock"  # held (flock) by the run writing the folder; the OS frees it when that dies


@contextlib.contextmanager
def hold_folder(out: Path) -> Iterator[None]:
    """Hold `out` for one run: a second run on the same folder is refused while this one runs.

    The lock is an flock on a file in `out`, so a killed run's lock is released by the OS and never
    blocks the next run; the file is removed on release, and `out` too when this created it and it
    stayed empty (a run refused before it wrote anything leaves no folder behind).
    """
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ValueError(f"{out}: cannot create the output folder ({error.strerror or error}); "
                         "choose another --out") from None
    lock = out / LOCK_NAME
    fd = _take_lock(lock, out)
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)  # before the lock is released: a waiting opener then sees another file
        os.close(fd)
        if created:
            with contextlib.suppress(OSError):
                out.rmdir()  # only when empty


def _take_lock(lock: Path, out: Path) -> int:
    """The descriptor of `lock`, flocked; refused at once (no waiting) when another process holds it."""
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as error:
            raise ValueError(f"{lock}: cannot create the run's lock file ({error.strerror or error}); "
                             "choose another --out") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ValueError(f"{out}: another `vit-explorer train` is writing to this folder (it holds {lock}); "
                             "wait for it to finish, or choose another --out") from None
        try:
            if os.stat(lock, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)  # the holder removed this file as it released it: lock the one there now


def remove_leftovers(out: Path) -> list[str]:
    """Remove what interrupted checkpoint writes left in `out`; the names removed."""
    removed = []
    for pattern in LEFTOVERS:
        for path in sorted(out.glob(pattern)):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed.append(path.name)
    return removed


def write_checkpoint(out: Path, model: VisionTransformer, labels: list[str], preprocessing: Preprocess,
                     extra: dict[str, Any], state: dict[str, Any] | None, replaces_run: bool) -> None:
    """Write a native checkpoint (and the training state, unless None) into `out` as the module docstring
    describes; `replaces_run` for a run's first checkpoint. Raises OSError with nothing changed in place
    when the files cannot be written."""
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out, prefix=STAGING[0], suffix=STAGING[1]))
    try:
        names = [WEIGHTS_NAME, CONFIG_NAME]
        try:
            if state is not None:
                torch.save(state, staging / STATE_NAME)
                names.insert(0, STATE_NAME)
            save_native(staging, model, labels, preprocessing, extra)
            for name in names:  # on disk before any rename, so a crash never puts an empty file in place
                _fsync(staging / name)
        except (RuntimeError, SafetensorError) as error:
            # torch's zip writer reports a full disk as "[enforce fail at inline_container.cc] ... file write
            # failed", safetensors as its own error: the same failure as an OSError, said plainly
            if isinstance(error, RuntimeError) and not any(w in str(error) for w in WRITER_FAILURES):
                raise
            said = re.sub(r"\[enforce fail at [^]]*\]\s*\.?\s*", "", " ".join(str(error).split()))[:300]
            raise OSError(f"{said}; {size_text(shutil.disk_usage(staging).free)} free on its disk") from None
        if replaces_run:
            (out / CONFIG_NAME).unlink(missing_ok=True)
            if state is None:  # an old state beside the new weights would --resume the old run over them
                (out / STATE_NAME).unlink(missing_ok=True)
        for name in names:
            os.replace(staging / name, out / name)
        _fsync(out)  # the renames themselves
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _fsync(path: Path) -> None:
    """Flush a file's (or a folder's entries') data to the disk."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
