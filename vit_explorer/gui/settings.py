"""The app's settings (QSettings) read as hostile input: every value checked for its type, with the default for
anything odd, and the settings files opened only if they are regular files of bounded size.

QSettings reads its file as soon as it is constructed, and a FIFO in its place blocks that read forever, so
`guard_files` looks at the files first (through a QSettings of another organization, which reads nothing, to
learn where they are) and, if one is not a regular file of at most MAX_BYTES (or holds a pickle), points
QSettings at an empty temporary folder for this session and says so.
"""

from __future__ import annotations

import atexit
import math
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

from PySide6.QtCore import QSettings

MAX_BYTES = 1 << 20  # the app writes a few hundred bytes
MAX_TEXT = 4096  # characters of one text value (a path)
PROBE_ORGANIZATION = "vit-explorer-settings-probe"  # no such files: constructing its QSettings reads nothing

_problem = ""


def problem() -> str:
    """Why this session does not use the settings file ("" when it does)."""
    return _problem


def _files(application: str, organization: str) -> list[Path]:
    """The files QSettings(organization, application) reads: per user and per system, the application's and the
    organization's."""
    found = []
    for scope in (QSettings.Scope.UserScope, QSettings.Scope.SystemScope):
        probe = Path(QSettings(QSettings.defaultFormat(), scope, PROBE_ORGANIZATION, application).fileName())
        base = probe.parent.parent
        found += [base / organization / probe.name, base / f"{organization}{probe.suffix}"]
    return found


def _bad(path: Path) -> str:
    """What is wrong with a settings file ("" for none there, or a regular file of bounded size that holds no
    pickled Python object: PySide unpickles "PySide::PyObjectWrapper" values as they are read, running any code)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))  # a FIFO: no wait for a writer
    except FileNotFoundError:
        return ""
    except OSError as error:
        return f"cannot be read ({error.strerror})"
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a character device"))
        return "is " + next((kind for test, kind in kinds if test(info.st_mode)), "not a regular file")
    with os.fdopen(fd, "rb") as file:
        if info.st_size > MAX_BYTES:
            return f"has {info.st_size:,} bytes, more than a settings file may have ({MAX_BYTES:,})"
        try:
            data = file.read(MAX_BYTES + 1)
        except OSError as error:
            return f"cannot be read ({error.strerror})"
    if len(data) > MAX_BYTES:
        return f"has more than {MAX_BYTES:,} bytes, more than a settings file may have"
    if b"PyObjectWrapper" in data:
        return "holds a pickled Python object (reading it would run code; the app never writes one)"
    return ""


def guard_files(application: str, organization: str) -> None:
    """Before anything constructs a QSettings: use a temporary settings folder if a settings file is unsafe."""
    global _problem
    for path in _files(application, organization):
        why = _bad(path)
        if why:
            folder = tempfile.mkdtemp(prefix="vit-explorer-settings-")
            atexit.register(shutil.rmtree, folder, ignore_errors=True)
            for scope in (QSettings.Scope.UserScope, QSettings.Scope.SystemScope):
                QSettings.setPath(QSettings.defaultFormat(), scope, folder)
            _problem = (f"{path}: the settings file {why}; this session starts with the default settings and "
                        f"keeps changes in {folder}. Remove or replace that file to have settings remembered.")
            print(f"vit-explorer: {_problem}", file=sys.stderr)
            return


def _is_text(value: object) -> bool:
    """A text the app could have written: a string of at most MAX_TEXT characters, without control characters or
    U+FFFD (what bytes that are not UTF-8 decode to)."""
    return isinstance(value, str) and 0 < len(value) <= MAX_TEXT and value.isprintable() and "\ufffd" not in value


def read_text(key: str, default: str, choices: tuple[str, ...] | None = None) -> str:
    """A text setting (one of `choices` when given), else `default`."""
    value = QSettings().value(key, default)
    if not isinstance(value, str) or not _is_text(value) or (choices is not None and value not in choices):
        return default
    return value


def read_texts(key: str, limit: int) -> list[str]:
    """A list of texts (at most `limit`; INI files keep a list of one as a plain text); values of another type
    are left out, and anything but a list or a text gives []."""
    value = QSettings().value(key, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return []
    return [item for item in value if _is_text(item)][:limit]


def read_number(key: str, default: float, low: float, high: float) -> float:
    """A finite number from `low` to `high` (INI files keep numbers as text), else `default`."""
    value = QSettings().value(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float, str)) or (isinstance(value, str) and
                                                                                 len(value) > 64):
        return default
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return default
    return number if math.isfinite(number) and low <= number <= high else default
