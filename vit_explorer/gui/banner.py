"""The message banner under the toolbar: an error (a failed load, a forward pass that failed) stays until the user
dismisses it or the next model loads, and says what to do.

The banner is one line: the message's first line, elided to the banner's width. A message may quote a file or
what was typed, and Qt lays out a wrapped, unbreakable line of 100,000 characters in gigabytes, so the label
never holds more than MAX_LINE characters; "Details…" shows the whole message (at most MAX_MESSAGE characters)
in a scrollable view of its own.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFontMetrics, QResizeEvent, QTextOption
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

STYLE = "background: #b3261e; color: white;"
MAX_LINE = 400  # characters of the message the banner's line starts from (more than any screen shows)
MAX_MESSAGE = 20_000  # characters of a message kept for the details view


def bounded(message: str) -> str:
    """The message, cut to MAX_MESSAGE characters with a note saying how long it was."""
    if len(message) <= MAX_MESSAGE:
        return message
    return f"{message[:MAX_MESSAGE]}\n… (cut: the message has {len(message):,} characters)"


class Banner(QWidget):
    changed = Signal(bool)  # shown or dismissed

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)  # the whole row of its toolbar
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.setStyleSheet(f"Banner {{ {STYLE} }} QLabel {{ color: white; }} QToolButton {{ color: white; }}")
        self._message = ""
        self.details_view: QDialog | None = None  # made on the first click on Details…
        self._details_text = QPlainTextEdit()
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 4, 4, 4)
        self.label = QLabel("")
        self.label.setTextFormat(Qt.TextFormat.PlainText)  # a message quoting a file never renders as HTML
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        # the line takes the width it is given and asks for none: a long message never widens the window
        self.label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        layout.addWidget(self.label, 1)
        self.details = QToolButton()
        self.details.setText("Details…")
        self.details.setAutoRaise(True)
        self.details.setToolTip("The whole message, in a window of its own.")
        self.details.clicked.connect(self.show_details)
        layout.addWidget(self.details, 0, Qt.AlignmentFlag.AlignTop)
        close = QToolButton()
        close.setText("✕")
        close.setAutoRaise(True)
        close.setToolTip("Dismiss this message.")
        close.clicked.connect(self.dismiss)
        layout.addWidget(close, 0, Qt.AlignmentFlag.AlignTop)

    def text(self) -> str:
        """The whole message (bounded), not only the line the banner shows."""
        return self._message

    def show_message(self, message: str) -> None:
        """Show a message (the holder shows or hides the banner on `changed`)."""
        self._message = bounded(message)
        self._elide()
        self.changed.emit(True)

    def dismiss(self) -> None:
        self._message = ""
        self.label.setText("")
        if self.details_view is not None:
            self.details_view.close()
        self.changed.emit(False)

    def show_details(self) -> None:
        """The whole message in a scrollable, read-only view (long lines wrapped anywhere)."""
        if self.details_view is None:
            self.details_view = QDialog(self)
            self.details_view.setWindowTitle("Message")
            layout = QVBoxLayout(self.details_view)
            self._details_text.setReadOnly(True)
            self._details_text.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
            layout.addWidget(self._details_text)
            buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
            buttons.rejected.connect(self.details_view.close)
            layout.addWidget(buttons)
            self.details_view.resize(720, 360)
        self._details_text.setPlainText(self._message)
        self.details_view.show()
        self.details_view.raise_()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        """The message's first line, cut to the label's width with an ellipsis."""
        line = self._message[:MAX_LINE].split("\n", 1)[0]
        if line != self._message:
            line += " …"
        width = max(self.label.width(), 40)
        self.label.setText(QFontMetrics(self.label.font()).elidedText(line, Qt.TextElideMode.ElideRight, width))
