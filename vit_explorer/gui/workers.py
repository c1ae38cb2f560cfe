"""Background work for the app: jobs on thread pools, stale results dropped, errors reported.

Workers never touch widgets: a job is a plain function whose result travels back to the GUI thread
through a queued signal. Each job belongs to a *channel* ("load", "forward", "pe", ...); submitting
a new job on a channel makes every older job on it stale, so its result is dropped and, if it has
not started yet, it never runs. A job that accepts a `job` argument receives a `jobs.Job`: its progress is
queued to the GUI thread (`Runner.progressed`, for the current job of a channel only) and its cancel is the
channel's, set by `cancel` or a newer job; a job that stops with `Cancelled` delivers nothing (whoever cancelled
it says so).
"""

from __future__ import annotations

import inspect
import threading
import traceback
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal, Slot

from ..errors import Cancelled, describe
from ..jobs import Job


class _JobSignals(QObject):
    finished = Signal(str, int, object)  # channel, generation, result
    failed = Signal(str, int, str, str)  # channel, generation, message, traceback
    progressed = Signal(str, int, float, str)  # channel, generation, share, what


class _Job(QRunnable):
    def __init__(self, runner: Runner, channel: str, generation: int, fn: Callable[..., Any],
                 cancel: threading.Event) -> None:
        super().__init__()
        self.fn: Callable[..., Any] | None = fn
        self.runner, self.channel, self.generation, self.cancel = runner, channel, generation, cancel
        self.signals = runner._signals

    def run(self) -> None:
        fn, self.fn = self.fn, None  # the pool may keep a finished job: it must not keep what fn holds (a model)
        if fn is None or self.runner.is_stale(self.channel, self.generation) or self.cancel.is_set():
            return  # run once; superseded before it started: do not waste the CPU
        try:
            if "job" in inspect.signature(fn).parameters:
                result = fn(job=Job(self._progress, self.cancel))
            else:
                result = fn()
        except Cancelled:
            return
        except BaseException as error:  # noqa: BLE001 - a worker must never take the app down
            self.signals.failed.emit(self.channel, self.generation, describe(error), traceback.format_exc())
            return
        self.signals.finished.emit(self.channel, self.generation, result)

    def _progress(self, share: float, what: str) -> None:
        self.signals.progressed.emit(self.channel, self.generation, share, what)


class Runner(QObject):
    """Runs jobs per channel in thread pools; delivers only the newest job's result per channel."""

    error = Signal(str, str)  # channel, message
    progressed = Signal(str, float, str)  # channel, share, what: the current job's progress

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        # forward passes and analyses share one thread: they would fight over the same cores
        self._compute = QThreadPool(self)
        self._compute.setMaxThreadCount(1)
        self._io = QThreadPool(self)  # loading checkpoints and images
        self._io.setMaxThreadCount(2)
        self._generation: dict[str, int] = {}
        self._callbacks: dict[str, tuple[int, Callable[[Any], None], Callable[[str], None] | None]] = {}
        self._cancel: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self._signals = _JobSignals()
        self._signals.finished.connect(self._on_finished)
        self._signals.failed.connect(self._on_failed)
        self._signals.progressed.connect(self._on_progressed)

    def submit(self, channel: str, fn: Callable[..., Any], on_done: Callable[[Any], None],
               on_error: Callable[[str], None] | None = None, *, pool: str = "compute", priority: int = 0) -> int:
        """Run fn() in the background; on_done(result) runs on the GUI thread if still current. A job of
        higher priority starts before waiting jobs of lower priority (the forward pass before analyses)."""
        with self._lock:
            generation = self._generation.get(channel, 0) + 1
            self._generation[channel] = generation
        old = self._cancel.get(channel)
        if old is not None:
            old.set()
        cancel = threading.Event()
        self._cancel[channel] = cancel
        self._callbacks[channel] = (generation, on_done, on_error)
        (self._io if pool == "io" else self._compute).start(_Job(self, channel, generation, fn, cancel), priority)
        return generation

    def cancel(self, channel: str) -> None:
        """Drop whatever runs or waits on a channel."""
        with self._lock:
            self._generation[channel] = self._generation.get(channel, 0) + 1
        event = self._cancel.pop(channel, None)
        if event is not None:
            event.set()
        self._callbacks.pop(channel, None)

    def is_stale(self, channel: str, generation: int) -> bool:
        with self._lock:
            return self._generation.get(channel, 0) != generation

    def busy(self) -> bool:
        return self._compute.activeThreadCount() > 0 or self._io.activeThreadCount() > 0

    def wait(self, msecs: int = 30000) -> bool:
        """Wait for all jobs (tests and shutdown)."""
        return self._compute.waitForDone(msecs) and self._io.waitForDone(msecs)

    @Slot(str, int, object)
    def _on_finished(self, channel: str, generation: int, result: Any) -> None:
        entry = self._callbacks.get(channel)
        if entry is None or entry[0] != generation or self.is_stale(channel, generation):
            return
        del self._callbacks[channel]
        try:
            entry[1](result)
        except Exception as error:  # noqa: BLE001 - drawing a result must not take the app down: say what failed
            traceback.print_exc()
            message = f"showing the result failed: {describe(error)}"
            (entry[2] or (lambda text: self.error.emit(channel, text)))(message)

    @Slot(str, int, float, str)
    def _on_progressed(self, channel: str, generation: int, share: float, what: str) -> None:
        if not self.is_stale(channel, generation):
            self.progressed.emit(channel, share, what)

    @Slot(str, int, str, str)
    def _on_failed(self, channel: str, generation: int, message: str, trace: str) -> None:
        entry = self._callbacks.get(channel)
        if entry is None or entry[0] != generation:
            return
        del self._callbacks[channel]
        if entry[2] is not None:
            entry[2](message)
        else:
            self.error.emit(channel, message)


class GeneratorThread(QObject):
    """Iterates a generator of events on its own thread (training) and sends each item to the GUI.

    `item` carries each item; `done` fires once at the end with an error message or "". Stopping
    and pausing belong to the producer (the trainer's `Control`), so there is one way to do each.
    """

    item = Signal(object)  # not `event`: that would hide QObject.event, Qt's event handler
    done = Signal(str)

    def __init__(self, make: Callable[[], Any], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._make = make
        self._thread = threading.Thread(target=self._loop, name="vit-explorer-generator", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _loop(self) -> None:
        try:
            for item in self._make():
                self.item.emit(item)
        except BaseException as error:  # noqa: BLE001 - reported in the UI, never a crash
            self.done.emit(describe(error))
            return
        self.done.emit("")
