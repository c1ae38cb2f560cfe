"""The one control of a view's long work (Explain, Dataset, Heads, Components): a progress bar fed by the job's
`progress(share, what)` (queued by the runner to the session), and a button that runs the work and, while it
runs, cancels it (or, for work that starts by itself, a Cancel button shown only while it runs). A view's other
long work runs through the same controls (`start` with the words its cancel says), one job at a time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QProgressBar, QPushButton, QWidget

from ...jobs import Job
from .base import View

STEPS = 1000  # the bar's resolution


class JobControls(QWidget):
    """Runs one channel's job for `view`: `start` submits it, the button cancels it, `progressed(share, what)`
    repeats the job's progress for the view's note. `run_text`: the button's text while idle (clicking it calls
    `on_run`); None: the button reads `cancel_text` and shows only while the job runs."""

    progressed = Signal(float, str)

    def __init__(self, view: View, channel: str, *, run_text: str | None = None, cancel_text: str = "Cancel",
                 on_run: Callable[[], None] | None = None, on_cancelled: Callable[[], None] | None = None,
                 bar_width: int = 160) -> None:
        super().__init__()
        self.view, self.channel = view, channel
        self.run_text, self.cancel_text = run_text, cancel_text
        self.on_run, self.on_cancelled = on_run, on_cancelled
        self._on_cancelled = on_cancelled  # what the user's Cancel of the job running now says
        self.running = False
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.button = QPushButton(run_text or cancel_text)
        self.button.clicked.connect(self._clicked)
        self.bar = QProgressBar()
        self.bar.setMaximumWidth(bar_width)
        self.bar.setFormat("%p%")
        layout.addWidget(self.button)
        layout.addWidget(self.bar)
        view.listen(view.session.job_progress, self._job_progress)
        self._show(False)

    def start(self, model_id: int, fn: Callable[[Job], Any], on_done: Callable[[Any], None],
              on_error: Callable[[str], None] | None = None, *,
              on_cancelled: Callable[[], None] | None = None) -> None:
        """Run fn(job) on the channel for the results of model `model_id` (superseding the job running there); the
        controls show it until it ends. `on_cancelled`: what the user's Cancel of this job says (else the
        controls')."""
        self._on_cancelled = on_cancelled or self.on_cancelled
        self._show(True)

        def done(value: Any) -> None:
            self._show(False)
            on_done(value)

        def failed(message: str) -> None:
            self._show(False)
            (on_error or self.view.session.error.emit)(message)

        self.view.run_for_model(model_id, self.channel, lambda job: fn(job), done, failed)

    def cancel(self) -> None:
        """Stop the job (the user's Cancel): nothing of it is delivered, and `on_cancelled` says so."""
        self.stop()
        if self._on_cancelled is not None:
            self._on_cancelled()

    def stop(self) -> None:
        """Drop the job without a word (a new model: what it computed no longer applies)."""
        self.view.session.cancel(self.channel)
        self._show(False)

    def _clicked(self) -> None:
        if self.running:
            self.cancel()
        elif self.on_run is not None:
            self.on_run()

    def _show(self, running: bool) -> None:
        self.running = running
        self.button.setText(self.cancel_text if running or self.run_text is None else self.run_text)
        self.button.setVisible(running or self.run_text is not None)
        self.bar.setRange(0, 0)  # busy until the job first reports
        self.bar.setVisible(running)

    def _job_progress(self, channel: str, share: float, what: str) -> None:
        if channel != self.channel or not self.running:
            return
        self.bar.setRange(0, STEPS)
        self.bar.setValue(round(share * STEPS))
        self.progressed.emit(share, what)
