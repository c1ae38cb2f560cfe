"""The architecture is enforced, not described: the import contracts in pyproject.toml hold, and
they fail when a module breaks them (a violation planted in a copy of the package)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` on the package under `root`, with the project's contracts."""
    env = {"PYTHONPATH": str(root), "PATH": str(LINT_IMPORTS.parent)}
    return subprocess.run([str(LINT_IMPORTS), "--config", str(ROOT / "pyproject.toml"), "--no-cache"], cwd=root,
                          env=env, capture_output=True, text=True, timeout=300)


def test_contracts_are_kept() -> None:
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(("module", "line", "contract"), [
    ("models/_planted.py", "from ..gui import session\n", "The stack"),
    ("explore/_planted.py", "import pyqtgraph\n", "Qt only in gui/"),
    ("checkpoints/_planted.py", "import transformers\n", "neither transformers nor timm"),
    ("analysis/_planted.py", "from ..checkpoints import load\n", "The stack"),
])
def test_a_planted_violation_breaks_its_contract(tmp_path: Path, module: str, line: str, contract: str) -> None:
    shutil.copytree(ROOT / "vit_explorer", tmp_path / "vit_explorer", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "vit_explorer" / module).write_text(line)
    done = lint_imports(tmp_path)
    assert done.returncode != 0
    broken = done.stdout[done.stdout.index("Broken contracts"):]
    assert contract in broken and "_planted" in broken, done.stdout[-3000:]
