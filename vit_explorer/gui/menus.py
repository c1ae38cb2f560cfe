"""The menu bar: File, View (layers, masks, text size, theme, presentation, the docks) and Help, with the
keyboard shortcuts a presenter uses."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtGui import QAction, QActionGroup, QKeySequence
from PySide6.QtWidgets import QApplication, QFileDialog, QMenu, QMessageBox

from .. import __version__
from ..paths import LESSONS
from . import theme

if TYPE_CHECKING:
    from .main_window import MainWindow

Shortcut = QKeySequence | QKeySequence.StandardKey | None


def _add(menu: QMenu, text: str, keys: Shortcut, slot: Callable[[], object]) -> QAction:
    action = menu.addAction(text)
    if keys is not None:
        action.setShortcut(keys)
    action.triggered.connect(lambda _checked=False: slot())  # `triggered` passes `checked`: not for the slot
    return action


def install_menus(window: MainWindow) -> None:
    bar = window.menuBar()
    files = bar.addMenu("&File")
    _add(files, "Open image…", QKeySequence.StandardKey.Open, window.image_panel.ask_open)
    _add(files, "Load model", QKeySequence("Ctrl+L"), window.load_typed)
    _add(files, "Export current view as PNG…", QKeySequence("Ctrl+E"), window.export_current)
    files.addSeparator()
    _add(files, "Quit", QKeySequence("Ctrl+Q"), window.close)

    view = bar.addMenu("&View")
    _add(view, "Next layer", QKeySequence("Ctrl+Down"), lambda: window.step_layer(1))
    _add(view, "Previous layer", QKeySequence("Ctrl+Up"), lambda: window.step_layer(-1))
    _add(view, "Clear mask", QKeySequence("Ctrl+Shift+M"), window.image_panel.clear_mask)
    view.addSeparator()
    larger = _add(view, "Larger text", QKeySequence.StandardKey.ZoomIn, lambda: window.presentation.step(1))
    # Ctrl+plus, and Ctrl+= for keyboards where plus needs Shift
    larger.setShortcuts([QKeySequence(QKeySequence.StandardKey.ZoomIn), QKeySequence("Ctrl+=")])
    _add(view, "Smaller text", QKeySequence.StandardKey.ZoomOut, lambda: window.presentation.step(-1))
    _add(view, "Reset text size", QKeySequence("Ctrl+0"), lambda: window.presentation.step(0))
    window.presentation_action = _add(view, "Presentation mode", QKeySequence("F11"), window.presentation.toggle)
    window.presentation_action.setCheckable(True)
    themes = view.addMenu("Theme")
    group = QActionGroup(themes)
    for name in theme.THEMES:
        action = _add(themes, name.capitalize(), None, lambda name=name: theme.choose(_app(), name))
        action.setCheckable(True)
        action.setChecked(name == theme.chosen())
        group.addAction(action)
    view.addSeparator()
    for dock in window.docks.values():
        view.addAction(dock.toggleViewAction())

    from ..explore.lessons import bundled_lessons  # the model code is loaded by the time menus are made

    lessons = bar.addMenu("&Lesson")
    for path in bundled_lessons():
        _add(lessons, f"Start: {lesson_title(path)}", None, lambda path=path: window.open_lesson(str(path)))
    _add(lessons, "Open lesson file…", None, lambda: _ask_lesson(window))
    lessons.addSeparator()
    _add(lessons, "Next step", None, window.lesson.next)
    _add(lessons, "Previous step", None, window.lesson.previous)
    _add(lessons, "Leave lesson", None, window.lesson.leave)

    helps = bar.addMenu("&Help")
    _add(helps, "Keyboard shortcuts", QKeySequence.StandardKey.HelpContents, lambda: show_shortcuts(window))
    _add(helps, "About vit-explorer", None, lambda: show_about(window))


def lesson_title(path: Path) -> str:
    """A bundled lesson's title for the menu (its file name if it cannot be read: opening it says why)."""
    try:
        return str(json.loads(path.read_text(encoding="utf-8"))["title"])
    except (OSError, ValueError, KeyError, TypeError):
        return path.stem


def _ask_lesson(window: MainWindow) -> None:
    path, _ = QFileDialog.getOpenFileName(window, "Open lesson", str(LESSONS), "Lessons (*.json)")
    if path:
        window.open_lesson(path)


def _app() -> QApplication:
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    return app


SHORTCUTS = (
    ("Ctrl+O", "open an image"), ("Ctrl+V", "paste an image"), ("Ctrl+L", "load the model named in the box"),
    ("Ctrl+E", "export the current view as PNG"), ("Ctrl+Up / Ctrl+Down", "previous / next layer"),
    ("Esc or Ctrl+Shift+M", "clear the mask"), ("Ctrl+plus / Ctrl+minus / Ctrl+0", "larger / smaller / default text"),
    ("F11", "presentation mode"), ("PageDown / PageUp (arrows in the lesson panel)", "next / previous lesson step"),
    ("Ctrl+Q", "quit"),
)


def show_shortcuts(window: MainWindow) -> None:
    rows = "".join(f"<tr><td><b>{keys}</b></td><td>&nbsp;&nbsp;{what}</td></tr>" for keys, what in SHORTCUTS)
    QMessageBox.information(window, "Keyboard shortcuts", f"<table>{rows}</table>")


def show_about(window: MainWindow) -> None:
    QMessageBox.about(window, "About vit-explorer", (
        f"<h3>vit-explorer {__version__}</h3>"
        "<p>Open up Vision Transformers layer by layer (ViT, DeiT, CaiT, DeiT III, DINOv2, CLIP, SigLIP, MAE, "
        "BEiT, EVA-02): patches, [CLS] and registers, position embeddings, [MASK], attention per head and "
        "rollout, patch features, classification.</p>"
        "<p>Load a Hugging Face or timm checkpoint (hub id, folder or file), or build and train one. "
        "The command line has the same pictures headless: <tt>vit-explorer inspect</tt>.</p>"))
