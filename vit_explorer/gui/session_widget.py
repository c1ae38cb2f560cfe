"""A widget that reads the session: it connects to the session's signals through `listen` and
disconnects them all when it closes (the session outlives any one view)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import SignalInstance
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import QWidget

from .session import Session


class SessionWidget(QWidget):
    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.session = session
        self._connections: list[tuple[SignalInstance, Callable[..., Any]]] = []

    def listen(self, signal: SignalInstance, slot: Callable[..., Any]) -> None:
        """Connect to a session signal; undone in `disconnect_session`."""
        signal.connect(slot)
        self._connections.append((signal, slot))

    def disconnect_session(self) -> None:
        for signal, slot in self._connections:
            try:
                signal.disconnect(slot)
            except (RuntimeError, TypeError):
                pass  # already gone with the session
        self._connections.clear()

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt's name
        self.disconnect_session()
        super().closeEvent(event)
