"""One controls widget for long work: Explain, Dataset, Heads and Components each hold a JobControls; the
Components sweep (which had no progress) shows its share as it goes and is cancelled by its button; the runner
hands a job its Job, queues its progress, and delivers nothing of a job that stopped with Cancelled."""

from __future__ import annotations

from vit_explorer.gui.views.components import TABS
from vit_explorer.gui.views.job_controls import JobControls
from vit_explorer.gui.workers import Runner

from .test_components_view import show


def test_every_view_of_long_work_holds_the_one_controls(window) -> None:
    for title, channel in (("Explain", "explain"), ("Dataset", "dataset"), ("Heads", "head-importance"),
                           ("Components", "components-sweep")):
        (controls,) = window.views[title].findChildren(JobControls)
        assert controls.channel == channel


def test_the_sweep_shows_its_progress_and_its_button_cancels_it(qtbot, window) -> None:
    view = show(window, "Components")
    view.tabs.setCurrentIndex(TABS.index("Patching"))
    view.bring_up_to_date()
    qtbot.waitUntil(lambda: view.runs is not None, timeout=20000)
    seen: list[float] = []
    view.sweep_job.progressed.connect(lambda share, what: seen.append(share))
    view.sweep_button.click()
    assert view.sweep_button.text() == "Cancel sweep" and view.sweep_job.bar.isVisible()
    qtbot.waitUntil(lambda: view.sweep is not None, timeout=30000)
    assert seen and seen == sorted(seen) and seen[-1] == 1.0
    assert view.sweep_button.text() == "Sweep" and not view.sweep_job.bar.isVisible()
    view.sweep = None
    view.sweep_button.click()
    view.sweep_button.click()  # Cancel sweep
    assert view.sweep_button.text() == "Sweep" and "sweep cancelled" in view.note.full_text
    qtbot.wait(300)
    assert view.sweep is None


def test_a_cancelled_job_delivers_nothing_and_progress_is_queued(qtbot) -> None:
    runner = Runner()
    delivered: list[object] = []
    progress: list[tuple[str, float, str]] = []
    runner.progressed.connect(lambda channel, share, what: progress.append((channel, share, what)))

    def stops(job) -> None:
        job.progress(0.5, "half")
        job.cancel.set()
        job.check()

    runner.submit("c", stops, delivered.append, delivered.append)
    assert runner.wait()
    qtbot.waitUntil(lambda: progress == [("c", 0.5, "half")], timeout=5000)
    qtbot.wait(50)
    assert delivered == []
