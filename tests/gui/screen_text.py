"""Walk every widget and figure item under a widget and list the text that breaks the rule of gui/text.py: a
label that may render HTML (every label of a view is plain), a pyqtgraph text that rendered a file's markup, a text
longer than its bound.

Hostile names carry MARK just before their markup: shown as written, the markup follows MARK on screen; rendered
as HTML, it is gone (`MARK<b>bold</b>` reads `MARKbold`), and an `<img>` becomes an image in the document."""

from __future__ import annotations

from typing import Any

from vit_explorer.text import MAX_TEXT

MARK = "QZX"  # a hostile name's marker: MARK<b>bold</b>, MARK<img ...>, MARK<i>cat
RENDERED = (f"{MARK}bold", f"{MARK}cat")  # what a hostile name reads when it was rendered as HTML
TOOLTIP = 4 * MAX_TEXT  # a tooltip shows more than a line, still bounded


def _texts_of(widget: Any) -> list[tuple[str, str]]:
    """(what, text) for each text a widget shows: its own, its items' (combo boxes, lists, tables)."""
    from PySide6.QtWidgets import QAbstractButton, QComboBox, QLabel, QListWidget, QTableWidget

    found = []
    if isinstance(widget, (QLabel, QAbstractButton)):  # a QLineEdit holds what was typed, unwrapped: not bounded
        found.append(("text", widget.text()))
    if isinstance(widget, QComboBox):
        found += [(f"item {i}", widget.itemText(i)) for i in range(widget.count())]
    if isinstance(widget, QListWidget):
        found += [(f"row {i}", widget.item(i).text()) for i in range(widget.count())]
    if isinstance(widget, QTableWidget):
        found += [(f"cell {r},{c}", widget.item(r, c).text()) for r in range(widget.rowCount())
                  for c in range(widget.columnCount()) if widget.item(r, c) is not None]
    return found


def widget_problems(root: Any) -> list[str]:
    """Every widget under `root`: labels plain, texts bounded, tooltips never a file's text as HTML."""
    from PySide6.QtCore import Qt
    from PySide6.QtGui import Qt as GuiQt  # mightBeRichText lives on QtGui's Qt
    from PySide6.QtWidgets import QLabel, QWidget

    problems = []
    for widget in [root, *root.findChildren(QWidget)]:
        name = f"{type(widget).__name__} {widget.objectName() or hex(id(widget))}"
        if isinstance(widget, QLabel) and widget.textFormat() != Qt.TextFormat.PlainText:
            problems.append(f"{name}: a label that may render HTML (text format {widget.textFormat().name}): "
                            f"{widget.text()[:80]!r}")
        for what, text in _texts_of(widget):
            if len(text) > MAX_TEXT:
                problems.append(f"{name} {what}: {len(text):,} characters (at most {MAX_TEXT:,})")
        tip = widget.toolTip()
        if len(tip) > TOOLTIP:
            problems.append(f"{name} tooltip: {len(tip):,} characters (at most {TOOLTIP:,})")
        if MARK in tip and GuiQt.mightBeRichText(tip) and "&lt;" not in tip:
            problems.append(f"{name} tooltip renders a file's text as HTML: {tip[:80]!r}")
    return problems


def figure_problems(root: Any) -> list[str]:
    """Every text item of every pyqtgraph scene under `root`: a file's markup shown as written, bounded."""
    import pyqtgraph as pg
    from PySide6.QtWidgets import QGraphicsTextItem

    problems = []
    for view in root.findChildren(pg.GraphicsView):
        for item in view.scene().items():
            if not isinstance(item, QGraphicsTextItem):
                continue
            plain, document = item.toPlainText(), item.document().toHtml()
            where = f"{type(item.parentItem()).__name__} text {plain[:60]!r}"
            if any(rendered in plain for rendered in RENDERED) or "<img" in document:
                problems.append(f"{where}: a file's markup rendered as HTML")
            if len(plain) > MAX_TEXT:
                problems.append(f"{where}: {len(plain):,} characters (at most {MAX_TEXT:,})")
    return problems


def problems(root: Any) -> list[str]:
    return widget_problems(root) + figure_problems(root)
