"""Rule of the house: nothing outside vit_explorer/gui imports Qt or pyqtgraph. The import contract
(tests/test_architecture.py) checks the source; this checks what a running interpreter actually loads."""

import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "vit_explorer"
QT_MODULES = ("PySide6", "PyQt5", "PyQt6", "PySide2", "shiboken6", "pyqtgraph", "qtpy")


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
