"""Untrusted text (labels, class names, paths, captions, notes, messages) made fit to show: one line, bounded.

A class name from a checkpoint or a folder may hold a newline, control characters or 100,000 characters; a
table row, an error line, a figure's title or a label shows it through `shown`, which never lets it break the
line or grow without bound. The Qt side (gui/text.py) adds the HTML escaping pyqtgraph needs.
"""

from __future__ import annotations

MAX_NAME = 200  # characters of a name (a class, a path, a model's source) shown in a figure, a row or a message
MAX_TEXT = 2000  # characters of a note or a label on screen (a message keeps the rest in the banner's details)
ELLIPSIS = "…"


def one_line(text: str) -> str:
    """`text` on one line: every run of whitespace and control characters (newlines, tabs, NUL) one space."""
    cleaned = "".join(c if c.isprintable() else " " for c in text)
    return " ".join(cleaned.split())


def elide(text: str, limit: int) -> str:
    """`text`, cut to `limit` characters with an ellipsis at the end when it is longer."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + ELLIPSIS


def shown(text: object, limit: int = MAX_NAME) -> str:
    """`text` on one line and at most `limit` characters: how a name from a file is shown anywhere."""
    return elide(one_line(str(text)), limit)


def quoted(text: object, limit: int = 60) -> str:
    """`text` shown (one line, bounded) between quotes, for an error message that names a key or a value."""
    return f"'{shown(text, limit)}'"
