"""Presenting a lesson on a projector: each step shows exactly the panels, input mode and readout it names,
the Prediction view takes the big views' room, the caption can be hidden, and figures are measured by the
pixels of their data areas (gui/measure.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pyqtgraph as pg
import pytest
from PySide6.QtWidgets import QWidget

from vit_explorer.explore.lessons import LessonError, bundled_lessons, read_lesson
from vit_explorer.gui.measure import data_areas
from vit_explorer.paths import LESSONS

from .conftest import wait_result
from .screens import run_on_screen


def test_a_data_area_is_what_the_widgets_around_it_leave_on_screen(qtbot) -> None:
    outer = QWidget()
    outer.resize(300, 200)
    inner = QWidget(outer)
    inner.setGeometry(0, 0, 300, 120)  # cuts the plot's lower part off
    plot = pg.GraphicsLayoutWidget(inner)
    plot.setGeometry(0, 0, 300, 400)
    box = plot.ci.addViewBox()
    qtbot.addWidget(outer)
    outer.show()
    qtbot.waitExposed(outer)
    plot.ci.setGeometry(0, 0, 300, 400)
    areas = data_areas(outer, outer)
    assert len(areas) == 1 and box.isVisible()
    assert areas[0].rect.height() <= 120 and areas[0].short_side <= 120
    inner.hide()
    assert all(a.short_side == 0 for a in data_areas(outer, outer))


@pytest.fixture
def presenting(qtbot, window):
    window.presentation.toggle()
    window.setFixedSize(1280, 800)  # the offscreen "screen" is smaller than a projector's
    yield window
    if window.presentation.presenting:
        window.presentation.toggle()


def _step_through(qtbot, window, lesson):
    runner = window.lesson
    for index, step in enumerate(lesson.steps):
        with qtbot.waitSignal(runner.applied, timeout=60000, check_params_cb=lambda i, n=index: i == n):
            runner.start(lesson) if index == 0 else runner.next()
        wait_result(qtbot, window.session)
        yield index, step


@pytest.mark.parametrize("path", bundled_lessons(), ids=lambda p: p.stem)
def test_each_presented_step_shows_what_it_names_and_nothing_left_from_before(qtbot, presenting, path: Path) -> None:
    window, lesson = presenting, read_lesson(path)
    tabbed = [dock for title, dock in window.docks.items() if title not in ("Image", "Prediction", "Lesson")]
    panel = window.image_panel
    for index, step in _step_through(qtbot, window, lesson):
        where = f"step {index + 1} ({step.title!r})"
        assert not window.banner.isVisible(), f"{where}: {window.banner.text()}"
        for title, view in window.views.items():  # only the step's view may show fewer than all its panels
            expected = step.panels if title == step.view and step.panels is not None else view.PANELS
            assert view.panels == expected, (where, title)
        alone = step.view == "Prediction"
        assert all(dock.isHidden() == alone for dock in tabbed), where  # the prediction takes the room, or not
        assert window.docks["Image"].isVisible(), where
        # Compare draws both models' predictions: its columns take the prediction's room
        assert window.docks["Prediction"].isVisible() == (step.view != "Compare"), where
        if not alone and step.view is not None:
            assert window.current_view() is window.views[step.view], where
        assert panel.hover_label.isVisible() == step.hover, where
        assert panel.mode_group.checkedButton().text().lower() == step.input_mode, where
        image = max(a.short_side for a in data_areas(panel.plot, window))
        assert image >= 0.25 * window.height(), f"{where}: the input image is {image} px"
        if step.expand:
            tree = window.views["Parameters"].tree
            assert tree.currentItem() is not None and tree.currentItem().text(0) == step.expand[-1], where
            assert tree.currentItem().isExpanded(), where
    assert index == len(lesson.steps) - 1
    window.lesson.leave()
    assert all(not dock.isHidden() for dock in tabbed)  # the views' tabs are back to explore from there
    assert window.docks["Prediction"].isVisible() and all(view.toolbar.isVisible() for view in window.views.values())


def test_the_caption_can_be_hidden_and_its_room_goes_to_the_figures(qtbot, presenting) -> None:
    window = presenting
    lesson = read_lesson(LESSONS / "vit-basics.json")
    next(_step_through(qtbot, window, lesson))
    panel = window.lesson.panel
    qtbot.waitUntil(lambda: panel.caption.isVisible())
    tall = panel.height()
    panel.hide_caption.click()
    qtbot.waitUntil(lambda: panel.height() < tall)
    assert not panel.caption.isVisible() and panel.title.isVisible()
    panel.hide_caption.click()
    qtbot.waitUntil(lambda: panel.caption.isVisible())


def _lesson(tmp_path: Path, **step: object) -> Path:
    path = tmp_path / "lesson.json"
    path.write_text(json.dumps({"format": "vit-explorer-lesson", "version": 1, "title": "t",
                                "steps": [{"title": "a", "caption": "b", **step}]}))
    return path


@pytest.mark.parametrize(("step", "fragment"), [
    ({"view": "Compare", "panels": ["heatmap"]}, "panels"),
    ({"view": "Attention", "panels": ["rollout"]}, "only the views"),
    ({"panels": ["maps"]}, "only the views"),
    ({"view": "Position embeddings", "panels": ["maps"]}, "always ['similarity']"),
    ({"view": "Embeddings", "panels": []}, "panels"),
    ({"view": "Embeddings", "panels": "filters"}, "list"),
    ({"input": "paint"}, "input"),
    ({"hover": 1}, "hover"),
    ({"expand": "encoder"}, "expand"),
    ({"expand": ["x" * 500]}, "expand"),
], ids=lambda v: json.dumps(v)[:40] if isinstance(v, dict) else v)
def test_what_a_step_shows_is_validated(tmp_path: Path, step: dict, fragment: str) -> None:
    with pytest.raises(LessonError, match=r"step 1.*") as error:
        read_lesson(_lesson(tmp_path, **step))
    assert fragment in str(error.value)


PROJECTOR_CHILD = """
from vit_explorer.explore.lessons import bundled_lessons, read_lesson

present()
for path in bundled_lessons():
    lesson, done = read_lesson(path), []
    window.lesson.applied.connect(done.append)
    for index, step in enumerate(lesson.steps):
        window.lesson.start(lesson) if index == 0 else window.lesson.next()
        settle(lambda: index in done)
        panel = window.lesson.panel
        cut = panel.caption.height() < panel.caption.heightForWidth(panel.caption.width())
        print(json.dumps({"lesson": path.name, "step": index + 1, "caption_cut": cut,
                          **step_measure(window, step.view)}), flush=True)
    window.lesson.leave()
    window.lesson.applied.disconnect(done.append)
"""


@pytest.mark.slow
@pytest.mark.parametrize("screen", [(1280, 800), (1024, 768)], ids=["1280x800", "1024x768"])
def test_every_lesson_step_is_readable_on_a_projector(tmp_path: Path, screen: tuple[int, int]) -> None:
    """Presenting every step of every bundled lesson full screen on a projector's screen (an offscreen screen of
    that size): the step's figure is at least 35 % of the screen's height on its short side, none of its data
    areas under 120 px, the input image at least 25 %, the caption whole (gui/measure.py, the same measurement
    `scripts/screenshots.py --lesson` prints from a real window)."""
    steps = run_on_screen(tmp_path, screen, PROJECTOR_CHILD)
    assert len(steps) == sum(len(read_lesson(p).steps) for p in bundled_lessons())
    problems = {f"{s['lesson']} step {s['step']} ({s['view']})": s["short"] + (["caption cut"] if s["caption_cut"]
                                                                               else [])
                for s in steps if s["short"] or s["caption_cut"]}
    assert all(s["screen_height"] == screen[1] for s in steps), steps[0]
    assert not problems, problems
