"""Every view usable on a projector's 1280x800 and on 1024x768: no widget squeezed below the size it
needs, cut off by its parent or lying over a sibling, and no figure wider or taller than its view."""

from __future__ import annotations

import pyqtgraph as pg
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractScrollArea, QAbstractSpinBox, QComboBox, QTabBar, QToolBar, QWidget


def _scrolled(widget: QWidget, root: QWidget) -> bool:
    """Inside a scroll area (scrolling shows it) or a composite widget's own parts."""
    parent = widget.parentWidget()
    while parent is not None and parent is not root:
        if isinstance(parent, (QAbstractScrollArea, QAbstractSpinBox, QComboBox, QTabBar, QToolBar)):
            return True
        parent = parent.parentWidget()
    return False


def layout_problems(root: QWidget) -> list[str]:
    problems = []
    shown = [w for w in root.findChildren(QWidget) if w.isVisible() and not w.isWindow() and not _scrolled(w, root)]
    for w in shown:
        name = f"{type(w).__name__} {w.objectName() or getattr(w, 'text', lambda: '')()!r}"
        hint = w.minimumSizeHint()
        if hint.isValid() and (w.width() < hint.width() - 1 or w.height() < hint.height() - 1):
            problems.append(f"{name} squeezed to {w.width()}x{w.height()} (needs {hint.width()}x{hint.height()})")
        parent = w.parentWidget()
        if parent is not None and not parent.rect().contains(w.geometry()):
            problems.append(f"{name} cut off by its parent: {w.geometry().getRect()} in {parent.rect().getRect()}")
    for parent in {w.parentWidget() for w in shown}:
        siblings = [w for w in shown if w.parentWidget() is parent]
        for i, a in enumerate(siblings):
            for b in siblings[i + 1:]:
                if a.geometry().intersects(b.geometry()):
                    problems.append(f"{type(a).__name__} and {type(b).__name__} overlap in {type(parent).__name__}")
    for view in root.findChildren(pg.GraphicsView):
        ci = getattr(view, "ci", None)
        if view.isVisible() and ci is not None:
            need = ci.effectiveSizeHint(Qt.SizeHint.MinimumSize)
            if need.width() > view.width() + 1 or need.height() > view.height() + 1:
                problems.append(f"a figure needs {need.width():.0f}x{need.height():.0f} but has {view.width()}x"
                                f"{view.height()}")
    return problems


@pytest.mark.parametrize(("size", "text_steps"), [((1280, 800), 0), ((1024, 768), 0), ((1280, 800), 3)],
                         ids=["1280x800", "1024x768", "1280x800-large-text"])
def test_no_view_is_clipped_or_overlapping(qtbot, window, size: tuple[int, int], text_steps: int) -> None:
    for _ in range(text_steps):  # Ctrl+plus: the text a projector needs (1.5x)
        window.presentation.step(1)
    window.resize(*size)
    window.share_width()
    qtbot.waitUntil(lambda: (window.width(), window.height()) == size, timeout=5000)
    problems = {}
    for title, dock in window.docks.items():
        dock.raise_()
        if title in window.views:
            window.views[title].bring_up_to_date()
        qtbot.wait(50)
        found = layout_problems(dock)
        if found:
            problems[title] = found
    assert not problems, problems


@pytest.mark.parametrize("size", [(1280, 800), (1024, 768)], ids=["1280x800", "1024x768"])
def test_two_models_side_by_side_fit_the_compare_view(qtbot, window, deit_checkpoint, size: tuple[int, int]) -> None:
    """Each side has half the view: its titles wrap to fit (the rollout's and the PE grid's titles, and a
    model named by a long path, made the two columns wider than the view at 1280x800)."""
    window.resize(*size)
    window.share_width()
    qtbot.waitUntil(lambda: (window.width(), window.height()) == size, timeout=5000)
    window.docks["Compare"].raise_()
    view = window.views["Compare"]
    view.compare_with(str(deit_checkpoint))
    qtbot.waitUntil(lambda: view.sides is not None, timeout=30000)
    qtbot.wait(50)
    assert view.sides[1].name == deit_checkpoint.name
    assert not layout_problems(window.docks["Compare"])
