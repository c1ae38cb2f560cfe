"""The app's actions in one table: each one's menu, title, keys, handler and help text. The menus, the keyboard
shortcuts and the shortcut help (Help > Keyboard shortcuts, F1) are all built from it (menus.py), and the lesson
panel's own keys too (lesson.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QFileDialog, QMessageBox

from .. import __version__
from ..paths import LESSONS

if TYPE_CHECKING:
    from ..explore.web_lesson import Exported
    from .main_window import MainWindow

MENUS = ("File", "View", "Lesson", "Help")  # in the menu bar's order


@dataclass(frozen=True)
class Action:
    menu: str  # one of MENUS
    title: str  # the menu item's text
    keys: tuple[str, ...]  # portable key sequences ("Ctrl+O"), the first one shown in the menu; () for none
    handler: Callable[[MainWindow], object]
    help: str  # what the shortcut help says it does (actions without keys are not in the help)
    panel_keys: tuple[str, ...] = ()  # keys that do it only while the lesson panel has the focus (elsewhere the
    # arrows belong to the focused control)
    separator: bool = False  # a separator above it in its menu
    checkable: bool = False
    lesson: bool = False  # only while a lesson is presented


def _window(method: str) -> Callable[[MainWindow], object]:
    return lambda window: getattr(window, method)()


ACTIONS = (
    Action("File", "Open image…", ("Ctrl+O",), lambda w: w.image_panel.ask_open(), "open an image"),
    Action("File", "Paste image", ("Ctrl+V",), lambda w: w.image_panel.paste(), "paste an image"),
    Action("File", "Load model", ("Ctrl+L",), _window("load_typed"), "load the model named in the Model box"),
    Action("File", "Export current view as PNG…", ("Ctrl+E",), _window("export_current"),
           "export the current view as PNG"),
    Action("File", "Quit", ("Ctrl+Q",), _window("close"), "quit", separator=True),
    Action("View", "Next layer", ("Ctrl+Down",), lambda w: w.step_layer(1), "the next layer"),
    Action("View", "Previous layer", ("Ctrl+Up",), lambda w: w.step_layer(-1), "the previous layer"),
    Action("View", "Clear mask", ("Esc", "Ctrl+Shift+M"), lambda w: w.image_panel.clear_mask(), "clear the mask"),
    # Ctrl+= for keyboards where plus needs Shift
    Action("View", "Larger text", ("Ctrl++", "Ctrl+="), lambda w: w.presentation.step(1),
           "larger text and figures", separator=True),
    Action("View", "Smaller text", ("Ctrl+-",), lambda w: w.presentation.step(-1), "smaller text and figures"),
    Action("View", "Reset text size", ("Ctrl+0",), lambda w: w.presentation.step(0), "the default text size"),
    Action("View", "Presentation mode", ("F11",), lambda w: w.presentation.toggle(),
           "presentation mode: full screen, larger text, the figures first", checkable=True),
    Action("Lesson", "Open lesson file…", (), lambda w: ask_lesson(w), ""),
    Action("Lesson", "Next step", ("PgDown",), lambda w: w.lesson.next(), "the lesson's next step",
           panel_keys=("Right",), separator=True, lesson=True),
    Action("Lesson", "Previous step", ("PgUp",), lambda w: w.lesson.previous(), "the lesson's previous step",
           panel_keys=("Left",), lesson=True),
    Action("Lesson", "Leave lesson", (), lambda w: w.lesson.leave(), "", lesson=True),
    Action("Lesson", "Export as web page…", (), lambda w: export_lesson_page(w), "", separator=True),
    Action("Help", "Keyboard shortcuts", ("F1",), lambda w: show_shortcuts(w), "this list of shortcuts"),
    Action("Help", "About vit-explorer", (), lambda w: show_about(w), ""),
)


def key_text(keys: tuple[str, ...]) -> str:
    """Keys as the platform writes them ("Ctrl++ or Ctrl+=")."""
    return " or ".join(QKeySequence(key).toString(QKeySequence.SequenceFormat.NativeText) for key in keys)


def shortcut_rows() -> list[tuple[str, str]]:
    """(keys, what they do) for every action that has keys, in the table's order."""
    rows = []
    for action in ACTIONS:
        if action.keys:
            keys = key_text(action.keys)
            if action.panel_keys:
                keys += f" ({key_text(action.panel_keys)} in the lesson panel)"
            rows.append((keys, action.help))
    return rows


def shortcuts_html() -> str:
    """The shortcut help: a table whose cells wrap within themselves (the space between the columns is padding,
    not leading spaces, so a wrapped line starts where its first line does)."""
    rows = "".join(f'<tr><td style="padding-right: 16px;"><b>{escape(keys)}</b></td><td>{escape(what)}</td></tr>'
                   for keys, what in shortcut_rows())
    return f'<table cellspacing="2">{rows}</table>'


def ask_lesson(window: MainWindow) -> None:
    path, _ = QFileDialog.getOpenFileName(window, "Open lesson", str(LESSONS), "Lessons (*.json)")
    if path:
        window.open_lesson(path)


def export_lesson_page(window: MainWindow) -> None:
    """The lesson presented (else one chosen) as one HTML file that students open in a browser, offline
    (explore/web_lesson.py); written in the background, the status bar says where."""
    session = window.session
    source = str(session.lesson.path) if session.lesson is not None else QFileDialog.getOpenFileName(
        window, "Export lesson as web page", str(LESSONS), "Lessons (*.json)")[0]
    if not source:
        return
    out, _ = QFileDialog.getSaveFileName(window, "Export as web page", Path(source).with_suffix(".html").name,
                                         "Web page (*.html)")
    if not out:
        return

    def export() -> Exported:
        from ..explore.web_lesson import export_lesson

        return export_lesson(source, out)

    def done(page: Exported) -> None:
        session.notice.emit(f"wrote {page.path} ({page.bytes / 2**20:.1f} MB, {page.steps} steps); open it in a "
                            "browser")

    session.run("export-lesson", export, done, lambda message: session.error.emit(f"export as web page: {message}"),
                io=True)


def show_shortcuts(window: MainWindow) -> None:
    QMessageBox.information(window, "Keyboard shortcuts", shortcuts_html())


def show_about(window: MainWindow) -> None:
    QMessageBox.about(window, "About vit-explorer", (
        f"<h3>vit-explorer {__version__}</h3>"
        "<p>Open up Vision Transformers layer by layer (ViT, DeiT, CaiT, DeiT III, DINOv2, CLIP, SigLIP, MAE, "
        "BEiT, EVA-02): patches, [CLS] and registers, position embeddings, [MASK], attention per head and "
        "rollout, patch features, classification.</p>"
        "<p>Load a Hugging Face or timm checkpoint (hub id, folder or file), or build and train one. "
        "The command line has the same pictures headless: <tt>vit-explorer inspect</tt>.</p>"))
