"""`run_app`: the QApplication (its names, font, theme and garbage collection) and the main window."""

from __future__ import annotations

import gc
import sys

from PySide6.QtCore import QObject, QTimer
from PySide6.QtGui import QFont, QGuiApplication
from PySide6.QtWidgets import QApplication

from . import theme
from .main_window import MainWindow
from .theme import FONT_POINTS


class GuiThreadGarbageCollector(QObject):
    """Python's cyclic garbage collector runs in whichever thread happens to cross a threshold. When
    that is a worker thread and the garbage holds Qt objects (a closed window, a rebuilt plot), their
    C++ destructors run there and can deadlock with the GUI thread (seen: QObject::~QObject in a
    worker waiting for the GIL while the GUI thread, holding it, waits for Qt's lock). So automatic
    collection is switched off and the GUI thread collects on a timer: the youngest generation at every
    tick (cheap, and independent of allocation counts, which deferred Qt deletions can hold below the
    threshold for good), the older ones when their counts pass Python's own thresholds."""

    def __init__(self, parent: QObject, interval_ms: int = 500) -> None:
        super().__init__(parent)
        self.thresholds = gc.get_threshold()
        self.timer = QTimer(self)
        self.timer.timeout.connect(self.collect)
        self.timer.start(interval_ms)

    def collect(self) -> None:
        generation = 0
        for older, (count, threshold) in enumerate(zip(gc.get_count()[1:], self.thresholds[1:], strict=True), 1):
            if count > threshold:
                generation = older
        gc.collect(generation)


def make_app(argv: list[str] | None = None) -> QApplication:
    """The QApplication (created once), with names for QSettings, style and fonts."""
    app = QApplication.instance()
    if app is None:
        app = QApplication(argv if argv is not None else sys.argv[:1])
    if app.findChild(GuiThreadGarbageCollector) is None:
        GuiThreadGarbageCollector(app)
    gc.disable()  # the collector's timer collects instead (again, should something have switched it back on)
    app.setOrganizationName("vit-explorer")
    app.setApplicationName("vit-explorer")
    theme.apply(app, theme.chosen())
    QGuiApplication.styleHints().colorSchemeChanged.connect(lambda scheme: theme.apply(app, theme.chosen()))
    font = QFont(app.font())
    font.setPointSize(FONT_POINTS)
    app.setFont(font)
    return app  # type: ignore[return-value]


def run_app(source: str | None = None) -> int:
    """Open the app on `source` (default: the bundled classroom model); returns the exit code."""
    app = make_app()
    window = MainWindow(source)
    window.show()
    return app.exec()
