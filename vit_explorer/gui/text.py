"""The one way untrusted text reaches the screen in the app: Qt labels as plain text, pyqtgraph's texts escaped,
both bounded (vit_explorer.text).

Qt labels guess HTML from the text (an `<img width=30000 height=30000>` class name lays out gigabytes), and
pyqtgraph's titles, labels and legends always take HTML: `plain_labels` makes every label under a widget plain
(the window calls it on each view as it is built, so a new view needs nothing; a label made later goes through
`plain`), and `html` is how a name goes into a pyqtgraph text (`Legend` escapes its entries).
"""

from __future__ import annotations

import html as _html

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QWidget

from ..text import MAX_NAME, shown


def html(text: object, limit: int = MAX_NAME) -> str:
    """`text` as pyqtgraph shows it as written: one line, bounded, HTML-escaped."""
    return _html.escape(shown(text, limit), quote=False)


def plain(label: QLabel) -> QLabel:
    """`label`, showing its text as written (never as HTML)."""
    label.setTextFormat(Qt.TextFormat.PlainText)
    return label


def plain_labels(root: QWidget) -> None:
    """Every QLabel under `root` (and `root` itself) shows plain text."""
    labels = root.findChildren(QLabel)
    if isinstance(root, QLabel):
        labels.append(root)
    for label in labels:
        plain(label)


class Legend(pg.LegendItem):
    """pg.LegendItem, its names escaped and bounded: pyqtgraph draws them as HTML."""

    def addItem(self, item: object, name: str) -> None:  # noqa: N802 - pyqtgraph's name
        super().addItem(item, html(name))
