"""The app and the exported lesson page agree: stepping through every bundled lesson in the app leaves, at each
step, the state `lesson_states` resolves (the page's state: model, image, size, mask, heads off), and the app's
prediction there is the shared forward pass on that state (which the page's JavaScript equals, see
tests/explore/test_web_lesson.py). Lesson > Export as web page… writes the lesson presented."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtWidgets import QFileDialog

from vit_explorer.checkpoints import LoadedModel
from vit_explorer.data.images import sample_images
from vit_explorer.explore.forward import Inputs, Needs, run_forward
from vit_explorer.explore.lesson_states import lesson_states
from vit_explorer.explore.lessons import bundled_lessons, read_lesson
from vit_explorer.explore.web_lesson import open_step_image

from .conftest import wait_result


def image_name(image: str) -> str:
    """The name the session gives an image a lesson step opens."""
    if image.startswith("sample:"):
        return next(p.name for p in sample_images() if p.stem == image.removeprefix("sample:"))
    return Path(image).name


@pytest.mark.slow
@pytest.mark.parametrize("path", bundled_lessons(), ids=lambda p: p.stem)
def test_every_step_in_the_app_is_the_state_the_page_shows(qtbot, window, path: Path) -> None:
    lesson = read_lesson(path)
    runner, session = window.lesson, window.session
    loaded_by_key: dict[str, LoadedModel] = {}
    for index, step in enumerate(lesson.steps):
        with qtbot.waitSignal(runner.applied, timeout=60000, check_params_cb=lambda i, n=index: i == n):
            runner.start(lesson) if index == 0 else runner.next()
        result = wait_result(qtbot, session)
        if step.model is not None:
            loaded_by_key.setdefault(step.model.key, session.loaded)
        so_far = replace(lesson, steps=lesson.steps[: index + 1])  # the steps up to here, with the app's models
        state = lesson_states(so_far, lambda model: loaded_by_key[model.key], open_step_image)[index]
        where = f"{path.name}, step {index + 1}"
        assert session.loaded is loaded_by_key[state.model.key], where
        assert session.image_name == image_name(state.image) and tuple(session.size) == state.size, where
        assert np.array_equal(result.inputs.mask, state.mask), where
        assert np.array_equal(result.inputs.head_mask, state.head_mask), where
        assert session.layer == state.layer and session.attention.mode == state.mode, where
        assert session.query == state.query and session.heads == state.heads, where
        again = run_forward(Inputs(session.loaded, open_step_image(state.image), state.size, state.mask,
                                   state.head_mask, needs=Needs()))
        assert np.abs(again.logits.numpy() - result.logits.numpy()).max() < 1e-5, where
    runner.leave()


def test_lesson_export_as_web_page_writes_the_lesson_presented(qtbot, window, tmp_path: Path, monkeypatch) -> None:
    lesson = tmp_path / "lesson.json"
    lesson.write_text('{"format": "vit-explorer-lesson", "version": 1, "title": "one", "steps": [{"title": "a", '
                      '"caption": "b", "model": "bundled:classroom-patchify", "image": "sample:star"}]}')
    out = tmp_path / "page.html"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *args, **kwargs: (str(out), ""))
    with qtbot.waitSignal(window.lesson.applied, timeout=60000):
        window.open_lesson(str(lesson))
    notices: list[str] = []
    window.session.notice.connect(notices.append)
    window.menu_actions["Export as web page…"].trigger()
    qtbot.waitUntil(lambda: bool(notices), timeout=60000)
    assert str(out) in notices[0] and out.read_text(encoding="utf-8").startswith("<!doctype html>")
    assert "classroom-patchify" in out.read_text(encoding="utf-8")
