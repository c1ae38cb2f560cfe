"""The look: Fusion style with a light or a dark palette (the system's choice, or the user's, remembered),
and the base font size."""

from __future__ import annotations

from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication, QStyleFactory

from .settings import read_text

FONT_POINTS = 12  # readable on a projector
THEMES = ("system", "light", "dark")
THEME_KEY = "theme"


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


def chosen() -> str:
    """The theme the user chose (remembered), "system" by default."""
    return read_text(THEME_KEY, "system", THEMES)


def choose(app: QApplication, name: str) -> None:
    """Remember and apply a theme."""
    if name not in THEMES:
        raise ValueError(f"theme must be one of {THEMES}, got {name!r}")
    QSettings().setValue(THEME_KEY, name)
    apply(app, name)


def apply(app: QApplication, name: str) -> None:
    """Fusion style with a light or dark palette: the one named, or for "system" whichever the system asks for."""
    dark = name == "dark" or (name == "system" and QGuiApplication.styleHints().colorScheme() == Qt.ColorScheme.Dark)
    style = QStyleFactory.create("Fusion")
    app.setPalette(dark_palette() if dark else style.standardPalette())
    # set after the palette: setting a style polishes every widget again, and widgets with a style sheet take
    # their colours only when polished (set before it, they would keep the previous theme's)
    app.setStyle(style)
