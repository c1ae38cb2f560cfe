"""What every view shares: the session, signal wiring that is undone on close, PNG/CSV export."""

from __future__ import annotations

import csv
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pyqtgraph as pg
from PySide6.QtCore import QEvent, QEventLoop, QPoint, QSettings, QSize, Qt, QTimer
from PySide6.QtGui import QImage, QPainter, QResizeEvent
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QLabel,
    QMenu,
    QStackedWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from ...checkpoints.files import write_atomic
from ...explore.views import VIEWS
from ...text import MAX_TEXT, elide, one_line
from .. import figures
from ..flow import FlowLayout, flow_row
from ..session import Session
from ..session_widget import SessionWidget
from ..settings import read_text
from ..zoom import ZoomArea

Table = tuple[list[str], Sequence[Sequence[Any]]]  # header, rows
T = TypeVar("T")
EXPORT_FOLDER_KEY = "export_folder"
EXPORT_SCALES = (1, 2, 3)  # PNG sizes offered, as multiples of the figure's size on screen
BUSY_NOTE_MS = 300  # a pass shorter than this shows no "computing…": the note would re-lay the view out twice


class Note(QLabel):
    """A line of text under a view's controls that takes no room while it is empty. Compact (presentation
    mode), it is one line, elided to the width, the whole text in its tooltip: the figure keeps the room. A note
    that keeps lines (`least_lines`: what the view is about in words, as the Prediction view's change) is elided in
    the middle: its end, where the numbers are, stays on screen."""

    def __init__(self, least_lines: int = 0) -> None:
        super().__init__("")
        self.least_lines = least_lines  # >0: the note asks the room its wrapped text needs, at least these lines
        self.setWordWrap(True)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setVisible(False)
        self.full_text = ""
        self.compact = False
        self._busy = QTimer(self)
        self._busy.setSingleShot(True)
        self._busy.timeout.connect(lambda: self.setText("computing…"))

    def setText(self, text: str) -> None:  # noqa: N802 - Qt's name
        self.full_text = elide(text, MAX_TEXT)  # a note may quote what was typed or a file's text: bounded
        self._show()
        self.setVisible(bool(text))

    def show_busy(self, busy: bool) -> None:
        """Say "computing…" once a pass has run for BUSY_NOTE_MS; a quick click's pass changes no layout."""
        if busy:
            self._busy.start(BUSY_NOTE_MS)
            return
        self._busy.stop()
        if self.full_text == "computing…":
            self.setText("")

    def set_compact(self, compact: bool) -> None:
        self.compact = compact
        self.setWordWrap(not compact)
        if compact:
            self.setMinimumHeight(0)
        self._show()

    def _show(self) -> None:
        if not self.compact:
            super().setText(self.full_text)
            self.setToolTip("")
            self._fit_wrapped()
            return
        line = " ".join(self.full_text.split())
        mode = Qt.TextElideMode.ElideMiddle if self.least_lines else Qt.TextElideMode.ElideRight
        super().setText(self.fontMetrics().elidedText(line, mode, max(self.width(), 40)))
        self.setToolTip(self.full_text if super().text() != line else "")

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        hint = super().minimumSizeHint()
        return QSize(40, hint.height()) if self.compact else hint  # elided: any width will do

    def _fit_wrapped(self) -> None:
        """A note that keeps lines asks the height its text wraps to at its width: a squeezed dock then takes the room
        from its neighbours rather than drawing the text over the figure above."""
        if self.least_lines and not self.compact:
            self.setMinimumHeight(0)  # QLabel's height for a width is never under its least height: measured afresh
            wrapped = self.heightForWidth(self.width()) if self.full_text and self.width() > 40 else 0
            self.setMinimumHeight(max(self.least_lines * self.fontMetrics().lineSpacing(), wrapped))

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        if self.compact:
            self._show()
        elif event.size().width() != event.oldSize().width():
            self._fit_wrapped()

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt's name
        super().changeEvent(event)
        if event.type() == QEvent.Type.FontChange:  # Ctrl+plus / Ctrl+0: its lines are taller or shorter now
            self._show()


def placeholder_pane(text: str, content: QWidget) -> tuple[QStackedWidget, QLabel]:
    """A pane that shows `text` (what will appear there, centred and wrapped) until it is switched to `content`
    (`pane.setCurrentWidget`): never an empty box before the first result."""
    placeholder = QLabel(text)
    placeholder.setWordWrap(True)
    placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
    placeholder.setMargin(24)
    pane = QStackedWidget()
    pane.addWidget(placeholder)
    pane.addWidget(content)
    return pane, placeholder


def title_chars(width: int, columns: int, most: int) -> int:
    """The characters (at text scale 1, 14 to `most`) a title wraps at in one of `columns` columns of `width` px."""
    return max(14, min(most, int(width / columns / figures.title_char_px())))


class View(SessionWidget):
    """A live view of the session. Subclasses fill `self.body` and override `table()` for CSV."""

    key = ""  # its record in explore.views.VIEWS, which gives the title and panels below
    title = "View"
    PANELS: tuple[str, ...] = ()  # the parts of a multi-panel view that a lesson step can show alone
    MAIN_PANELS: tuple[str, ...] = ()  # those always drawn (the others hang on them)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        record = VIEWS[cls.key]
        cls.title, cls.PANELS, cls.MAIN_PANELS = record.title, record.panels, record.main_panels

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(session, parent)
        self.panels: tuple[str, ...] = self.PANELS  # those drawn
        self._dirty = False
        self._refresh_pending = False  # a scheduled refresh waits for the next turn of the event loop
        self.on_screen = True  # the window says when a tabbed dock hides the view
        self._titles: tuple[Callable[[], int], int] | None = None  # titles_fitting's width now, and as drawn
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        # the view's own controls, wrapping onto more lines on a narrow screen; hidden while a lesson is presented
        # (the step has set what the figure shows)
        self.toolbar = flow_row([])
        self.controls = self.toolbar.layout()
        assert isinstance(self.controls, FlowLayout)
        self.export_button = QToolButton()
        self.export_button.setText("Export")
        self.export_button.setToolTip("Save the figure as a PNG (at 1, 2 or 3 times its size on screen) or the numbers "
                                      "behind it as a CSV table.")
        self.export_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(self.export_button)
        for scale in EXPORT_SCALES:
            menu.addAction(f"PNG, {scale}× (Ctrl+E: {EXPORT_SCALES[0]}×)" if scale == EXPORT_SCALES[0] else
                           f"PNG, {scale}×", lambda scale=scale: self.ask_export("png", scale))
        menu.addAction("CSV", lambda: self.ask_export("csv"))
        self.export_button.setMenu(menu)
        self.controls.set_tail(self.export_button)
        layout.addWidget(self.toolbar)
        self.note = Note()  # what the view is doing or why something is missing
        layout.addWidget(self.note)
        self.body = QVBoxLayout()
        layout.addLayout(self.body, 1)

    def set_panels(self, panels: tuple[str, ...] | None) -> None:
        """Draw only `panels` (None: all of them), e.g. the one a lesson step is about, each larger."""
        chosen = self.PANELS if panels is None else tuple(panels)
        unknown = [name for name in chosen if name not in self.PANELS]
        if unknown or (self.PANELS and not chosen) or not set(self.MAIN_PANELS) <= set(chosen):
            raise ValueError(f"{self.title} has the panels {list(self.PANELS)} (always {list(self.MAIN_PANELS)}), "
                             f"not {list(chosen)}")
        if chosen != self.panels:
            self.panels = chosen
            self.restyle()

    def shows(self, panel: str) -> bool:
        return panel in self.panels

    @contextmanager
    def titles_fitting(self, plots: QWidget, columns: int, beside: int, most: int) -> Iterator[None]:
        """Draw the figures inside with titles wrapped to the characters (at text scale 1, at most `most`) that
        fit one of `columns` columns of `plots`, `beside` pixels of its width going to colour bars and axes:
        wider titles would make the columns wider than the view. A resize that changes that width draws the view
        again (`restyle`)."""
        def chars() -> int:
            return title_chars(plots.width() - beside, columns, most)

        self._titles = chars, chars()
        with figures.title_width(self._titles[1]):
            yield

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        if self._titles is not None and self._titles[0]() != self._titles[1]:
            self.restyle()

    def refresh(self, *_: object) -> None:
        """Recompute and redraw from the session (views that compute something override it)."""

    def restyle(self) -> None:
        """Draw again from scratch, e.g. with a new text size (views that draw figures override it)."""
        self.schedule()

    def schedule(self, *_: object) -> None:
        """Refresh now if the view is on screen, else when it is next shown (hidden tabs cost nothing)."""
        if self.on_screen:
            self._dirty = False
            self.refresh()
        else:
            self._dirty = True

    def schedule_soon(self, *_: object) -> None:
        """`schedule` on the next turn of the event loop, for a new forward result: a burst of results
        costs one refresh, and the view paints in a frame of its own after the image and the prediction,
        so no single frame holds the GUI thread for all the plots at once."""
        if not self._refresh_pending:
            self._refresh_pending = True
            QTimer.singleShot(0, self, self._scheduled)  # dropped with the view if it closes first

    def _scheduled(self) -> None:
        self._refresh_pending = False
        self.schedule()

    def run_for_model(self, model_id: int, channel: str, fn: Callable[..., T], on_done: Callable[[T], None],
                      on_error: Callable[[str], None] | None = None) -> None:
        """`session.run` for work on a result of model `model_id`: what it returns, or the error it raises, is
        dropped when another model is current by then (no newer job need come to make it stale: a hidden view
        starts none)."""
        def done(value: T) -> None:
            if model_id == self.session.model_id:
                on_done(value)

        def failed(message: str) -> None:
            if model_id == self.session.model_id:
                (on_error or self.session.error.emit)(message)

        self.session.run(channel, fn, done, failed)

    def set_on_screen(self, shown: bool) -> None:
        """Told by the window when the view's dock becomes the current tab (or is hidden). A hidden view draws
        nothing, so later forward passes leave out what it asked for (Session.require)."""
        self.on_screen = shown
        if not shown:
            self.session.release(self.title)
        if shown and self._dirty:
            self._dirty = False
            self.refresh()

    # ------------------------------------------------------------------ export
    def picture(self) -> QWidget:
        """The widget exported as PNG: the figure only, without the view's own controls."""
        return self

    def table(self) -> Table | None:
        """The numbers behind the view, or None when it has none."""
        return None

    def export_info(self) -> dict[str, str]:
        """What the exported picture and table show: recorded in the PNG's metadata and the CSV's first lines."""
        info = {"view": self.title, "model": "", "image": self.session.image_name}
        if self.session.loaded is not None:
            info["model"] = self.session.loaded.source or "built model"
            info["input size"] = "x".join(map(str, self.session.size))
        return info

    def _zoom_area(self) -> ZoomArea | None:
        """The dock's page holder this view is the page of (none outside a dock: a test's bare view)."""
        viewport = self.parentWidget()
        area = viewport.parentWidget() if viewport is not None else None
        return area if isinstance(area, ZoomArea) else None

    def page_height(self) -> int:
        """The height this view is laid out in before its blank rows go (ZoomArea.page_height), its own outside a
        dock: what a view chooses its arrangement by."""
        area = self._zoom_area()
        return area.page_height() if area is not None else self.height()

    def bring_up_to_date(self, seconds: float = 10.0) -> None:
        """Refresh a view, hidden ones too, and let its background work finish (bounded), before exporting."""
        area = self._zoom_area()
        if area is not None:  # hidden, its page has not had the dock's room yet
            area.fit()
        deadline = time.monotonic() + seconds
        quiet = 0  # idle turns in a row: a finished forward pass may start this view's own work a turn later
        while quiet < 3 and time.monotonic() < deadline:
            if self._dirty:  # a hidden view only notes that it is out of date: draw it now
                self._dirty = False
                self.refresh()
            QApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
            busy = self.session.working() or self._refresh_pending or self._dirty
            quiet = 0 if busy else quiet + 1

    def export_png(self, path: str | Path, scale: float = 1.0) -> Path:
        """The figure as a PNG at `scale` times its size on screen, with what it shows in its metadata."""
        path = Path(path)
        self.bring_up_to_date()
        widget = self.picture()
        size = widget.size()
        image = QImage(round(size.width() * scale), round(size.height() * scale), QImage.Format.Format_ARGB32)
        image.setDevicePixelRatio(scale)
        image.fill(widget.palette().color(widget.backgroundRole()))
        for view in [widget, *widget.findChildren(pg.GraphicsView)]:
            if isinstance(view, pg.GraphicsView):
                view.scene().prepareForPaint()  # what pyqtgraph does before painting its scenes
        painter = QPainter(image)  # at the image's device pixel ratio: sharper text and lines when scale > 1
        QWidget.render(widget, painter, QPoint())
        painter.end()
        for key, value in self.export_info().items():
            image.setText(key, value)

        def save(tmp: str) -> None:
            if not image.save(tmp, "PNG"):
                raise OSError(f"{path}: could not write the PNG file")

        write_atomic(path, save)  # a regular file only, whole or not at all: a named pipe would block for good
        return path

    def export_csv(self, path: str | Path) -> Path:
        """The numbers as CSV, after comment lines ('# key: value') saying what they are."""
        path = Path(path)
        self.bring_up_to_date()
        table = self.table()
        if table is None:
            raise ValueError(f"{self.title} has no numbers to export yet")
        header, rows = table
        info = self.export_info()

        def write(tmp: str) -> None:
            with open(tmp, "w", newline="") as f:
                for key, value in info.items():
                    f.write(f"# {key}: {one_line(value)}\n")  # a model's source with a newline: still one comment
                writer = csv.writer(f)
                writer.writerow(header)
                writer.writerows(rows)

        write_atomic(path, write)
        return path

    def ask_export(self, kind: str, scale: float = 1.0) -> None:
        """Ask where (starting in the folder used last), export, and confirm in the status bar."""
        folder = read_text(EXPORT_FOLDER_KEY, str(Path.home()))
        name = self.title.lower().replace(" ", "_")
        path, _ = QFileDialog.getSaveFileName(self, f"Export {kind.upper()}", str(Path(folder) / f"{name}.{kind}"),
                                              f"{kind.upper()} (*.{kind})")
        if not path:
            return
        try:
            if kind == "png":
                self.export_png(path, scale)
            else:
                self.export_csv(path)
        except (OSError, ValueError) as error:
            self.session.error.emit(str(error))
            return
        QSettings().setValue(EXPORT_FOLDER_KEY, str(Path(path).parent))
        self.session.notice.emit(f"saved {path}")
