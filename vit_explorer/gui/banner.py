"""The message banner under the toolbar: an error (a failed load, a forward pass that failed) stays
until the user dismisses it or the next model loads, wraps instead of being cut off, and says what to do."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QToolButton, QWidget

STYLE = "background: #b3261e; color: white;"


class Banner(QWidget):
    changed = Signal(bool)  # shown or dismissed

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.setStyleSheet(f"Banner {{ {STYLE} }} QLabel {{ color: white; }} QToolButton {{ color: white; }}")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 4, 4, 4)
        self.label = QLabel("")
        self.label.setWordWrap(True)
        self.label.setTextFormat(Qt.TextFormat.PlainText)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.label, 1)
        close = QToolButton()
        close.setText("✕")
        close.setAutoRaise(True)
        close.setToolTip("Dismiss this message.")
        close.clicked.connect(self.dismiss)
        layout.addWidget(close, 0, Qt.AlignmentFlag.AlignTop)

    def text(self) -> str:
        return self.label.text()

    def show_message(self, message: str) -> None:
        """Show a message (the holder shows or hides the banner on `changed`)."""
        self.label.setText(message)
        self.changed.emit(True)

    def dismiss(self) -> None:
        self.label.setText("")
        self.changed.emit(False)
