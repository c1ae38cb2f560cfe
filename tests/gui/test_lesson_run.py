"""Lessons in the app: every bundled lesson stepped through end to end on the bundled models, and the views
a lesson may name are the app's."""

from __future__ import annotations

from pathlib import Path

import pytest

from vit_explorer.explore.lessons import VIEWS, bundled_lessons, read_lesson
from vit_explorer.gui.views import VIEW_CLASSES

from .conftest import wait_result


def test_a_lesson_can_open_every_view_of_the_app() -> None:
    assert VIEWS == tuple(view.title for view in VIEW_CLASSES)


def test_there_is_a_bundled_lesson() -> None:
    assert bundled_lessons()


@pytest.mark.slow
@pytest.mark.parametrize("path", bundled_lessons(), ids=lambda p: p.stem)
def test_a_bundled_lesson_runs_end_to_end(qtbot, window, path: Path) -> None:
    lesson = read_lesson(path)
    runner, session = window.lesson, window.session
    models: dict[str, object] = {}  # a step's model key -> the model it loaded (a model is loaded once)
    for index, step in enumerate(lesson.steps):
        with qtbot.waitSignal(runner.applied, timeout=60000, check_params_cb=lambda i, n=index: i == n):
            runner.start(lesson) if index == 0 else runner.next()
        result = wait_result(qtbot, session)
        where = f"{path.name}, step {index + 1} ({step.title!r})"
        assert not window.banner.isVisible(), f"{where}: {window.banner.text()}"
        assert runner.panel.isVisible() and step.title in runner.panel.title.text(), where
        if step.model is not None:
            assert models.setdefault(step.model.key, session.loaded) is session.loaded, where
            if step.model.source:
                assert Path(session.loaded.source).resolve() == Path(step.model.source).resolve(), where
        if step.view == "Prediction":  # a dock beside the tabs, always in view
            assert window.views["Prediction"].on_screen and window.docks["Prediction"].isVisible(), where
        elif step.view is not None:
            assert window.current_view() is window.views[step.view], where
        if step.mode is not None:
            assert window.views["Attention"].mode_name == step.mode, where
        if step.mask == "none":
            assert not result.inputs.mask.any(), where
        elif isinstance(step.mask, float):
            assert result.inputs.mask.sum() == round(step.mask * result.inputs.mask.size), where
        if step.compare is not None:
            compare = window.views["Compare"]
            compare.bring_up_to_date()
            assert compare.sides is not None and window.session.compared is not None, where
        window.current_view().bring_up_to_date()
        assert not window.banner.isVisible(), f"{where}: {window.banner.text()}"
    runner.next()  # past the last step: nothing happens
    assert runner.index == len(lesson.steps) - 1
    runner.leave()
    assert not runner.panel.isVisible() and not runner.running
