"""The one protocol of long work (explanations, dataset analyses, head importance, patching sweeps, the report's
figures): a function takes a `Job`, reports `job.progress(share, what)` (share of the whole in [0, 1], what runs
now) and calls `job.check()` between steps, which raises `Cancelled` once the job is cancelled. The GUI's runner hands
each job one whose progress is queued to the session and whose cancel is the channel's; the CLI hands one whose
progress is a tqdm bar (`tqdm_job`); a plain call gets `Job()`, which reports nowhere and never stops. Loading a
checkpoint reports through the same `Progress` callback."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .errors import Cancelled

Progress = Callable[[float, str], None]  # (share done, what runs now)


class Job:
    """What a long computation reports to and checks with; `cancel` is set (by the user or a newer job) to stop."""

    def __init__(self, progress: Progress | None = None, cancel: threading.Event | None = None) -> None:
        self._progress = progress
        self.cancel = cancel if cancel is not None else threading.Event()

    def check(self) -> None:
        """Raise Cancelled if the job was cancelled (call between steps)."""
        if self.cancel.is_set():
            raise Cancelled("cancelled")

    def progress(self, share: float, what: str = "") -> None:
        """Report the share of the whole done (clipped to [0, 1]) and what runs now."""
        if self._progress is not None:
            self._progress(min(max(float(share), 0.0), 1.0), what)

    def part(self, start: float, end: float, what: str = "") -> Job:
        """A job for the share [start, end] of this one (same cancel); `what` names the part when it says nothing."""
        def say(share: float, said: str) -> None:
            self.progress(start + (end - start) * share, said or what)

        return Job(say, self.cancel)


@contextmanager
def tqdm_job(what: str, *, total: int = 100, unit: str = "%", disable: bool = False) -> Iterator[Job]:
    """A Job whose progress draws a tqdm bar on stderr (the share of `total` units), closed at the end."""
    import sys

    from tqdm import tqdm

    with tqdm(total=total, desc=what, unit=unit, dynamic_ncols=True, file=sys.stderr, disable=disable) as bar:
        yield Job(lambda share, said: bar.update(round(share * total) - bar.n))
