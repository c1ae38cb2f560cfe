"""Native checkpoint files: written atomically, with ordinary permissions."""

import os
import stat
from pathlib import Path

import pytest

from vit_explorer.checkpoints.files import write_atomic


def test_write_atomic_uses_umask_permissions(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "file.txt"
    old = os.umask(0o022)
    try:
        write_atomic(target, lambda tmp: Path(tmp).write_text("hello"))
    finally:
        os.umask(old)
    assert target.read_text() == "hello"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert [p.name for p in target.parent.iterdir()] == ["file.txt"]  # no temporary left behind


def test_write_atomic_keeps_old_file_when_writing_fails(tmp_path: Path) -> None:
    target = tmp_path / "file.txt"
    target.write_text("old")

    def fail(tmp: str) -> None:
        Path(tmp).write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomic(target, fail)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["file.txt"]
