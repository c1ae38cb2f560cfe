"""The Training view in front of a class: a placeholder before the first run, figures whose data areas stay
readable at 1280x800 and 1024x768 and export whole, an export that names the run, and the run's length and
expected accuracy said after its first steps."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage

from vit_explorer.gui.measure import data_areas

from .test_training import configure

READABLE_PX = 120  # the smallest short side of a data area the issue counts as readable on a projector


def _train(qtbot, window, out: Path, steps: int = 15, model: str = "classroom-tiny"):
    window.docks["Training"].raise_()
    view = window.views["Training"]
    configure(view, out, steps)
    view.model_choice.setCurrentIndex(view.model_choice.findData(model))
    assert view.start()
    qtbot.waitUntil(lambda: view.runs[0].finished is not None and not view.running, timeout=120000)
    return view


def test_before_the_first_run_the_plot_pane_says_what_will_appear(qtbot, window) -> None:
    window.docks["Training"].raise_()
    view = window.views["Training"]
    view.redraw()
    assert view.pane.currentWidget() is view.placeholder and view.placeholder.isVisible()
    assert not view.plots.isVisible()
    text = view.placeholder.text()
    assert "Start" in text and "loss" in text and "position embedding" in text


def test_the_default_is_the_conv_stem_for_a_minute_and_says_why(qtbot, window) -> None:
    view = window.views["Training"]
    assert view.config().stem == "conv" and view.budget.value() == 60 and view.steps.value() == 0
    assert view.recipe().time_budget == 60


@pytest.mark.parametrize("size", [(1280, 800), (1024, 768)], ids=["1280x800", "1024x768"])
def test_figures_are_readable_and_export_whole(qtbot, window, tmp_path: Path, size: tuple[int, int]) -> None:
    window.resize(*size)
    window.share_width()
    qtbot.waitUntil(lambda: (window.width(), window.height()) == size, timeout=5000)
    view = _train(qtbot, window, tmp_path / "run")
    # and the comparison run, whose long name widens the legend: it pushed the PE grid and its colour bar past the
    # pane's edge (at 1024x768 over the curves alone; at 1280x800 in one row over the curves)
    view.change.setCurrentIndex(0)
    assert view.start_comparison()
    qtbot.waitUntil(lambda: view.runs[-1].finished is not None and not view.running, timeout=120000)
    view.redraw()
    qtbot.wait(50)
    areas = data_areas(view.plots, window)
    # loss, accuracy, attention entropy, largest token norm, PE similarity, [CLS] thumbnail: each one readable; a
    # pane too narrow for six (1024x768) draws loss, accuracy and the PE grid, each readable
    assert len(areas) == (6 if size == (1280, 800) else 3), areas
    assert view._with_health == (size == (1280, 800))
    assert min(a.short_side for a in areas) >= READABLE_PX, [a.rect for a in areas]
    need = view.plots.ci.effectiveSizeHint(Qt.SizeHint.MinimumSize)  # nothing drawn past the widget's edge
    assert need.width() <= view.plots.width() + 1 and need.height() <= view.plots.height() + 1
    image = QImage(str(view.export_png(tmp_path / "training.png")))
    assert (image.width(), image.height()) == (view.plots.width(), view.plots.height())


def test_the_export_names_the_run_not_the_loaded_model(qtbot, window, tmp_path: Path) -> None:
    view = _train(qtbot, window, tmp_path / "run")
    info = QImage(str(view.export_png(tmp_path / "training.png")))
    keys = set(info.textKeys())
    assert "image" not in keys and "model" not in keys  # the loaded model and image are not what it shows
    run = info.text("run 1")
    for part in ("preset classroom-tiny", "stem patchify", "data shapes", "256 training images", "15 steps",
                 "batch 32", "15 steps done (completed)", "validation accuracy", str(tmp_path / "run")):
        assert part in run, (part, run)
    csv = (view.export_csv(tmp_path / "training.csv")).read_text()
    assert "# run 1: preset classroom-tiny" in csv


def test_after_the_first_steps_it_says_how_long_and_what_to_expect(qtbot, window, tmp_path: Path) -> None:
    view = _train(qtbot, window, tmp_path / "run", steps=20, model="classroom-conv")
    assert view.estimate.isVisible()
    text = view.estimate.text()
    assert "steps/s here: 20 steps take about" in text
    assert "Measured:" in text and "validation accuracy after" in text and "fewer steps" in text
