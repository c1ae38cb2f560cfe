"""The type hints are checked, not only written: mypy with the project's configuration (pyproject.toml) passes,
and fails on a type error planted in a copy of the package."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def mypy(root: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(cache)]
    return subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=600)


def test_the_package_type_checks(tmp_path: Path) -> None:
    done = mypy(ROOT, tmp_path / "cache")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize(("module", "code", "error"), [
    ("models/_planted.py", "def half(n: int) -> int:\n    return n / 2\n", "Incompatible return value"),
    ("explore/_planted.py", "def untyped(x):\n    return x\n", "missing a type annotation"),
])
def test_a_planted_type_error_fails(tmp_path: Path, module: str, code: str, error: str) -> None:
    shutil.copytree(ROOT / "vit_explorer", tmp_path / "vit_explorer", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "vit_explorer" / module).write_text(code)
    done = mypy(tmp_path, tmp_path / "cache")
    assert done.returncode != 0 and "_planted.py" in done.stdout and error in done.stdout, done.stdout[-3000:]
