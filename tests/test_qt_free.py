"""Rule of the house: nothing outside vit_explorer/gui imports Qt or pyqtgraph."""

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "vit_explorer"
QT_MODULES = ("PySide6", "PyQt5", "PyQt6", "PySide2", "shiboken6", "pyqtgraph", "qtpy")


def _imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_no_qt_imports_outside_gui() -> None:
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if "gui" in path.relative_to(PACKAGE).parts:
            continue
        for name in _imported_modules(path):
            if name.split(".")[0] in QT_MODULES:
                offenders.append(f"{path.relative_to(PACKAGE.parent)} imports {name}")
    assert not offenders, "\n".join(offenders)


def test_core_modules_load_without_qt() -> None:
    """Import every non-GUI module in a fresh interpreter and check Qt never got loaded."""
    modules = sorted(
        ".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        for p in PACKAGE.rglob("*.py")
        if "gui" not in p.relative_to(PACKAGE).parts and p.name != "__main__.py"
    )
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        f"bad = [m for m in sys.modules if m.split('.')[0] in {QT_MODULES!r}]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
