"""Garbage collection on the GUI thread, in steps short enough not to stall the window."""

from __future__ import annotations

import gc

from PySide6.QtCore import QCoreApplication, QObject, QTimer


class GuiThreadGarbageCollector(QObject):
    """Python's cyclic garbage collector runs in whichever thread happens to cross a threshold. When
    that is a worker thread and the garbage holds Qt objects (a closed window, a rebuilt plot), their
    C++ destructors run there and can deadlock with the GUI thread (seen: QObject::~QObject in a
    worker waiting for the GIL while the GUI thread, holding it, waits for Qt's lock). So automatic
    collection is switched off and the GUI thread collects on a timer: the youngest generation at every
    tick (cheap, and independent of allocation counts, which deferred Qt deletions can hold below the
    threshold for good), the older ones when their counts pass Python's own thresholds.

    A full collection of a heap holding torch, Qt and a model (a quarter of a million objects or more)
    takes 150-250 ms: a visible stall, every minute or so. So the survivors of each full collection are
    frozen (`gc.freeze`: long-lived, not scanned again) and the next ones scan only what came since;
    `collect_everything` unfreezes and collects the lot, when a model has been replaced: the moment a
    large amount of garbage appears and the user is waiting for the new model anyway. While the app imports
    torch and its core (about 200,000 objects that live as long as the process) the collector holds off,
    then freezes them uncollected: scanning them on the way cost the first prediction 0.2 s.
    """

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
        if generation == 2:
            gc.freeze()

    def hold(self) -> None:
        """No collections until `resume` (while the core is imported)."""
        self.timer.stop()

    def resume(self) -> None:
        """Freeze everything there is (the imported modules), then collect on the timer again."""
        gc.freeze()
        self.timer.start()


def app_collector() -> GuiThreadGarbageCollector | None:
    """The application's collector (`make_app` installs it), if there is one."""
    app = QCoreApplication.instance()
    return app.findChild(GuiThreadGarbageCollector) if app is not None else None


def collect_everything() -> None:
    """A full collection of every object, the frozen ones included; the survivors are frozen again."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
