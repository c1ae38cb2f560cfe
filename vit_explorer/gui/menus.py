"""The menu bar, built from the table of actions (actions.py): File, View (with the theme and the docks), Lesson
(with the bundled lessons) and Help."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtGui import QAction, QActionGroup, QKeySequence
from PySide6.QtWidgets import QApplication, QMenu

from . import theme
from .actions import ACTIONS, MENUS, Action

if TYPE_CHECKING:
    from .main_window import MainWindow


def _add(menu: QMenu, window: MainWindow, action: Action) -> QAction:
    if action.separator:
        menu.addSeparator()
    item = menu.addAction(action.title)
    item.setShortcuts([QKeySequence(key) for key in action.keys])
    item.setCheckable(action.checkable)
    item.triggered.connect(lambda _checked=False: action.handler(window))  # `triggered` passes `checked`
    return item


def install_menus(window: MainWindow) -> None:
    """The menus, their items in `window.menu_actions` (by title); the lesson's own are enabled while one runs."""
    bar = window.menuBar()
    window.menu_actions = {}
    for name in MENUS:
        menu = bar.addMenu(f"&{name}")
        if name == "Lesson":
            _lessons(menu, window)
        for action in ACTIONS:
            if action.menu == name:
                window.menu_actions[action.title] = _add(menu, window, action)
        if name == "View":
            _themes_and_docks(menu, window)
    window.presentation_action = window.menu_actions["Presentation mode"]
    lesson_actions = [window.menu_actions[action.title] for action in ACTIONS if action.lesson]

    def follow_lesson() -> None:
        for item in lesson_actions:
            item.setEnabled(window.session.lesson is not None)

    window.session.lesson_changed.connect(follow_lesson)
    follow_lesson()


def _themes_and_docks(view: QMenu, window: MainWindow) -> None:
    themes = view.addMenu("Theme")
    group = QActionGroup(themes)
    for name in theme.THEMES:
        action = themes.addAction(name.capitalize())
        action.triggered.connect(lambda _checked=False, name=name: theme.choose(_app(), name))
        action.setCheckable(True)
        action.setChecked(name == theme.chosen())
        group.addAction(action)
    view.addSeparator()
    for dock in window.docks.values():
        view.addAction(dock.toggleViewAction())


def _lessons(menu: QMenu, window: MainWindow) -> None:
    """The bundled lessons (the table's lesson actions follow)."""
    from ..explore.lessons import bundled_lessons  # the model code is loaded by the time menus are made

    for path in bundled_lessons():
        menu.addAction(f"Start: {lesson_title(path)}").triggered.connect(
            lambda _checked=False, path=path: window.open_lesson(str(path)))


def lesson_title(path: Path) -> str:
    """A bundled lesson's title for the menu (its file name if it cannot be read: opening it says why)."""
    try:
        return str(json.loads(path.read_text(encoding="utf-8"))["title"])
    except (OSError, ValueError, KeyError, TypeError):
        return path.stem


def _app() -> QApplication:
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    return app
