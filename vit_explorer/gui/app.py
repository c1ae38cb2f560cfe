"""`run_app`: the QApplication, the palette that follows the system, and the main window."""

from __future__ import annotations

import gc
import sys

from PySide6.QtCore import QObject, Qt, QTimer
from PySide6.QtGui import QColor, QFont, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication

from .main_window import MainWindow

FONT_POINTS = 12  # readable on a projector


def dark_palette() -> QPalette:
    palette = QPalette()
    colors = {
        QPalette.ColorRole.Window: "#202124", QPalette.ColorRole.WindowText: "#e8eaed",
        QPalette.ColorRole.Base: "#17181a", QPalette.ColorRole.AlternateBase: "#2a2b2e",
        QPalette.ColorRole.Text: "#e8eaed", QPalette.ColorRole.Button: "#2d2e31",
        QPalette.ColorRole.ButtonText: "#e8eaed", QPalette.ColorRole.Highlight: "#8ab4f8",
        QPalette.ColorRole.HighlightedText: "#202124", QPalette.ColorRole.ToolTipBase: "#2d2e31",
        QPalette.ColorRole.ToolTipText: "#e8eaed", QPalette.ColorRole.Link: "#8ab4f8",
        QPalette.ColorRole.PlaceholderText: "#9aa0a6",
    }
    for role, color in colors.items():
        palette.setColor(role, QColor(color))
    return palette


def apply_palette(app: QApplication) -> None:
    """Fusion style with a light or dark palette, whichever the system asks for."""
    app.setStyle("Fusion")
    dark = QGuiApplication.styleHints().colorScheme() == Qt.ColorScheme.Dark
    app.setPalette(dark_palette() if dark else app.style().standardPalette())


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
    apply_palette(app)
    QGuiApplication.styleHints().colorSchemeChanged.connect(lambda scheme: apply_palette(app))
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
