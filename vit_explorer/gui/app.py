"""`run_app`: the QApplication (its names, font, theme and garbage collection) and the main window."""

from __future__ import annotations

import gc
import sys

from PySide6.QtGui import QFont, QGuiApplication
from PySide6.QtWidgets import QApplication

from . import settings, theme
from .collector import GuiThreadGarbageCollector
from .main_window import MainWindow
from .theme import FONT_POINTS


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
    settings.guard_files(app.applicationName(), app.organizationName())  # before the first QSettings reads them
    theme.apply(app, theme.chosen())
    QGuiApplication.styleHints().colorSchemeChanged.connect(lambda scheme: theme.apply(app, theme.chosen()))
    font = QFont(app.font())
    font.setPointSize(FONT_POINTS)
    app.setFont(font)
    return app  # type: ignore[return-value]


def run_app(source: str | None = None, dtype: str | None = None) -> int:
    """Open the app on `source` (default: the bundled classroom model), the models it opens run in `dtype` (default:
    their weights' own); returns the exit code."""
    app = make_app()
    window = MainWindow(source, dtype)
    window.show()
    return app.exec()
