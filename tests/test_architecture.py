"""The architecture is enforced, not described: the import contracts in pyproject.toml hold, and
they fail when a module breaks them (a violation planted in a copy of the package)."""

from __future__ import annotations

import ast
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


MAX_LINES = 80
WIDGET_BASES = ("QWidget", "View", "SessionWidget", "QMainWindow", "QDialog")  # whose __init__ builds widgets


def long_functions(package: Path) -> list[str]:
    """Functions over MAX_LINES lines, except the constructors of widgets (a form is long by nature)."""
    found = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        widgets = {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
                   and any(getattr(base, "id", getattr(base, "attr", "")) in WIDGET_BASES for base in node.bases)}
        for cls in [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)] + [tree]:
            for node in getattr(cls, "body", []):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                    widget_init = node.name == "__init__" and getattr(cls, "name", "") in widgets
                    if lines > MAX_LINES and not widget_init:
                        found.append(f"{path.relative_to(package.parent)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_is_longer_than_a_screen() -> None:
    assert not long_functions(ROOT / "vit_explorer")


def test_a_planted_long_function_is_found(tmp_path: Path) -> None:
    package = tmp_path / "vit_explorer"
    package.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (package / "long.py").write_text(f"def long() -> None:\n{body}\n")
    assert long_functions(package) == [f"vit_explorer/long.py:1 long ({MAX_LINES + 1} lines)"]
