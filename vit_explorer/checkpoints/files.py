"""File I/O for untrusted input and for our own output.

Reading: only regular files of bounded size are opened (a FIFO, a device such as a symlink to
/dev/zero, a folder or a socket is refused before anything is read, so nothing hangs or reads
forever), and JSON is parsed with bounded size and nesting depth. Writing: a file through a
temporary sibling renamed into place, a folder the same way, so a failure (a full disk) leaves
neither a half-written file nor a half-written folder.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from .errors import CheckpointError

MAX_JSON_BYTES = 64 * 2**20  # the largest real config (ImageNet-21k id2label + label2id) is about 1.5 MB
MAX_JSON_DEPTH = 32  # real configs nest 3 or 4 levels; Python's parser recurses once per level
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _read_umask() -> int:
    mask = os.umask(0)  # the only way to read it is to set it; done once, at import, before any thread
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def size_text(n: int) -> str:
    """Bytes in the largest unit that keeps a digit before the point: '1.5 GiB'."""
    value = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} {unit}" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def open_regular(path: Path, limit: int, what: str, error: type[Exception] = CheckpointError) -> BinaryIO:
    """Open `path` for reading if it is a regular file of at most `limit` bytes, else raise `error`.

    O_NONBLOCK makes opening a FIFO without a writer return at once (then fstat refuses it);
    it has no effect on regular files. fstat of the opened descriptor sees through symlinks.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error(f"{path}: the {what} file is missing") from None
    except OSError as e:
        raise error(f"{path}: cannot open the {what} file ({e.strerror})") from None
    try:
        info = os.fstat(fd)
        for test, kind in _KINDS:
            if test(info.st_mode):
                raise error(f"{path}: is {kind}, not a regular {what} file")
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{path}: not a regular {what} file")
        if info.st_size > limit:
            raise error(f"{path}: {size_text(info.st_size)} is more than a {what} file may be ({size_text(limit)})")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bounded(path: Path, limit: int, what: str, error: type[Exception] = CheckpointError) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (reading stops there: /proc files report 0)."""
    with open_regular(path, limit, what, error) as f:
        try:
            data = f.read(limit + 1)
        except OSError as e:
            raise error(f"{path}: cannot read the {what} file ({e.strerror})") from None
    if len(data) > limit:
        raise error(f"{path}: more than a {what} file may be ({size_text(limit)})")
    return data


def parse_json(data: bytes, where: str) -> Any:
    """JSON from bytes with bounded depth (a UTF-8 byte-order mark, Notepad's default, is read past); a
    CheckpointError naming `where` for anything else."""
    try:
        value = json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{where}: not valid JSON (not UTF-8 text: {e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{where}: not valid JSON ({e})") from None
    except RecursionError:
        raise CheckpointError(f"{where}: JSON nested more than {MAX_JSON_DEPTH} levels deep") from None
    except ValueError as e:  # e.g. an integer of more than 4300 digits
        raise CheckpointError(f"{where}: not valid JSON ({e})") from None
    if _depth(value) > MAX_JSON_DEPTH:
        raise CheckpointError(f"{where}: JSON nested more than {MAX_JSON_DEPTH} levels deep")
    return value


def _depth(value: Any) -> int:
    """Nesting depth of parsed JSON, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def read_json(path: Path, limit: int = MAX_JSON_BYTES) -> dict[str, Any]:
    """A JSON object from a bounded regular file, or a CheckpointError naming the file."""
    data = parse_json(read_bounded(path, limit, "JSON"), str(path))
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object ({{...}}), got {type(data).__name__}")
    return data


def check_target(path: Path) -> None:
    """ValueError unless `path` is missing or a regular file (through links): writing to a named pipe blocks until
    someone reads it (an export froze the window for good), a device or a folder is not a file to replace."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise ValueError(f"{path}: cannot write there ({e.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        kind = next((kind for test, kind in _KINDS if test(info.st_mode)), "not a regular file")
        raise ValueError(f"{path}: is {kind}, not a regular file to write; choose another name")


def write_atomic(path: Path, write: Callable[[str], Any]) -> None:
    """Write through a temporary file in the same folder, then rename: never a half-written file, and never into
    anything but a regular file (`check_target`)."""
    check_target(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_folder(out: Path, write: Callable[[Path], Any], replace: bool = False) -> Path:
    """Fill a new folder: `write` fills a temporary sibling, renamed to `out` once complete.

    `out` must not exist or be an empty folder (an empty folder is replaced by the rename), unless
    `replace`: then an existing folder `out` (the caller has checked that it may go) is moved aside,
    the new one renamed into its place, and the old one removed. Nothing is written through a link
    in `out`. On any failure (a full disk) the temporary folder is removed and `out` is as it was, so
    a retry works.
    """
    if out.exists() and not replace and not (out.is_dir() and not any(out.iterdir())):
        raise CheckpointError(f"{out}: exists and is not an empty folder; choose an empty or new folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    old = None
    try:
        write(tmp)
        os.chmod(tmp, 0o777 & ~_UMASK)  # mkdtemp makes 0700
        if replace and out.is_dir() and not out.is_symlink() and any(out.iterdir()):
            old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".old"))
            os.replace(out, old)  # over the empty placeholder: from here `out` is missing until the next rename
            try:
                os.replace(tmp, out)
            except BaseException:
                os.replace(old, out)
                old = None
                raise
        else:
            os.replace(tmp, out)
    except CheckpointError:
        raise
    except Exception as error:  # OSError, or safetensors' own error for the same (a full disk)
        kept = "the folder is as it was" if replace else "nothing was written"
        raise CheckpointError(f"{out}: writing failed ({error}); {kept}") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return out
