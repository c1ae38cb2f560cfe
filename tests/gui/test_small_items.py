"""Issue 15's small items through the main window: one table of actions for the menus, the shortcuts and the F1
help; the F1 help's wrapped lines; the window's frame on the screen; a failed load in the status bar and the
banner; the Model box's history."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QTimer
from PySide6.QtGui import QKeySequence, QTextDocument, QTextTable
from PySide6.QtWidgets import QApplication, QMessageBox


def shortcut_help(qtbot, window) -> str:
    """Help > Keyboard shortcuts, as the user opens it: the text of the dialog it shows (closed again)."""
    texts: list[str] = []

    def read_and_close() -> None:
        dialog = QApplication.activeModalWidget()
        if not isinstance(dialog, QMessageBox):
            QTimer.singleShot(20, read_and_close)
            return
        texts.append(dialog.text())
        dialog.close()

    menu = next(action.menu() for action in window.menuBar().actions() if action.text() == "&Help")
    item = next(action for action in menu.actions() if action.text() == "Keyboard shortcuts")
    QTimer.singleShot(0, read_and_close)
    item.trigger()
    qtbot.waitUntil(lambda: bool(texts))
    return texts[0]


def help_rows(html: str, width: float = 1000) -> tuple[QTextDocument, list[tuple[str, str]]]:
    """The help laid out at `width` pixels, and its table's rows (keys, what they do)."""
    document = QTextDocument()
    document.setHtml(html)
    document.setTextWidth(width)
    document.size()  # lays the document out: its blocks have their lines
    tables = [frame for frame in document.rootFrame().childFrames() if isinstance(frame, QTextTable)]
    assert len(tables) == 1, html
    table = tables[0]
    rows = [tuple(table.cellAt(r, c).firstCursorPosition().block().text().replace("\xa0", " ").strip()
                  for c in range(2)) for r in range(table.rows())]
    return document, rows


def test_the_menus_the_shortcuts_and_the_help_are_made_from_one_table_of_actions(qtbot, window) -> None:
    from vit_explorer.gui.actions import ACTIONS, key_text

    menus = {action.text().lstrip("&"): action.menu() for action in window.menuBar().actions()}
    for action in ACTIONS:
        items = [item for item in menus[action.menu].actions() if item.text() == action.title]
        assert len(items) == 1, f"{action.title} in the {action.menu} menu"
        assert items[0].shortcuts() == [QKeySequence(key) for key in action.keys], action.title
    _, rows = help_rows(shortcut_help(qtbot, window))
    table = [action for action in ACTIONS if action.keys]
    assert len(rows) == len(table)  # nothing in the help that is not in the table
    for (keys, what), action in zip(rows, table, strict=True):
        assert keys.startswith(key_text(action.keys)) and what == action.help, (keys, what)
        for key in action.panel_keys:
            assert key_text((key,)) in keys, (keys, key)


def test_the_lesson_steps_are_in_the_menu_only_while_a_lesson_runs(qtbot, window) -> None:
    from vit_explorer.explore.lessons import Lesson, Step

    step = window.menu_actions["Next step"]
    assert not step.isEnabled()  # PageDown belongs to the focused control while no lesson runs
    window.lesson.start(Lesson("menu", (Step("a", "a"), Step("b", "b")), Path("menu.json")))
    assert step.isEnabled()
    step.trigger()
    assert window.lesson.index == 1
    window.lesson.leave()
    assert not step.isEnabled()


def test_a_wrapped_line_of_the_shortcut_help_starts_where_its_first_line_does(qtbot, window) -> None:
    document, _ = help_rows(shortcut_help(qtbot, window), width=300)  # narrow: the long rows wrap
    wrapped = 0
    block = document.begin()
    while block.isValid():
        layout, text = block.layout(), block.text()
        starts = []
        for i in range(layout.lineCount()):
            line = layout.lineAt(i)
            first = line.textStart()
            while first < line.textStart() + line.textLength() and text[first] in " \xa0":
                first += 1  # where the line's text is seen to start
            x = line.cursorToX(first)
            starts.append(x[0] if isinstance(x, tuple) else x)
        if len(starts) > 1:
            wrapped += 1
            assert max(starts) - min(starts) < 1, (text, starts)
        block = block.next()
    assert wrapped, "no row wrapped at 300 px: the test would prove nothing"


def test_the_window_and_its_frame_fit_the_screens_available_room(qtbot, window) -> None:
    room = window.screen().availableGeometry()  # offscreen: 800x800, with a frame of 2 px about the window
    assert window.frameGeometry() != window.geometry(), "no frame: the test would prove nothing"
    assert room.contains(window.frameGeometry()), (window.frameGeometry(), room)
    assert room.contains(window.statusBar().mapToGlobal(window.statusBar().rect().bottomRight()))


def test_a_window_managers_frame_is_left_room_on_projector_screens() -> None:
    from PySide6.QtCore import QMargins, QRect, QSize

    from vit_explorer.gui.main_window import PREFERRED_SIZE, fit_window

    frame = QMargins(1, 19, 1, 1)  # openbox's title bar and borders
    for screen, fits in (((1280, 800), False), ((1024, 768), False), ((1920, 1080), True)):
        room = QRect(0, 0, *screen)
        inside, fitted = fit_window(QSize(*PREFERRED_SIZE), room, frame)
        assert fitted == fits and room.contains(inside.marginsAdded(frame)), (screen, inside)
        assert inside.size() == (QSize(*PREFERRED_SIZE) if fits else room.marginsRemoved(frame).size())


def test_a_failed_load_says_so_in_the_status_bar_and_names_its_path_once(qtbot, window, tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-model")
    window.load(missing)
    assert "loading" in window.statusBar().currentMessage()
    qtbot.waitUntil(lambda: window.banner.isVisible() and window.load_button.isEnabled(), timeout=10000)
    assert "loading" not in window.statusBar().currentMessage()
    assert "could not load" in window.statusBar().currentMessage()
    assert window.banner.text().count(missing) == 1, window.banner.text()
    assert window.banner.text().startswith("could not load")


def test_the_model_box_lists_the_recent_sources_on_a_click_and_from_its_arrow(qtbot, tiny_checkpoint: Path) -> None:
    from PySide6.QtCore import QSettings, Qt

    from .conftest import open_window

    recent = ["/models/one", "google/vit-base-patch16-224"]
    QSettings().setValue("recent_sources", recent)
    window = open_window(qtbot, str(tiny_checkpoint))
    try:
        box = window.source_box
        items = [box.itemText(i) for i in range(box.count())]
        assert set(recent) <= set(items), items
        window.load_button.setFocus()
        qtbot.mouseClick(box.lineEdit(), Qt.MouseButton.LeftButton)  # where people click: the text
        popup = box.completer().popup()
        qtbot.waitUntil(popup.isVisible, timeout=5000)
        shown = [popup.model().index(i, 0).data() for i in range(popup.model().rowCount())]
        assert set(recent) <= set(shown), shown
        popup.hide()
        box.showPopup()
        assert box.view().isVisible() and box.view().model().rowCount() == len(items)
        box.hidePopup()
    finally:
        window.close()
