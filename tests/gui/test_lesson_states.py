"""A lesson step is a state: entered forwards, backwards, by a jump or after a burst of key presses, every step of
every bundled lesson puts the app in the same state with the same numbers, that state is the one
`explore.lesson_states.step_state` resolves (model, image, size, masks, heads, view, panels, mode, layer, head,
query, click mode, hover, Explain target, compared model), and its claims (`expect`) hold."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vit_explorer.explore.lesson_states import step_state
from vit_explorer.explore.lessons import bundled_lessons, read_lesson

from .conftest import wait_result
from .test_lesson_export import image_name


def state(window) -> dict[str, Any]:
    """Everything a step sets, as the app holds it, and the numbers it shows."""
    session, runner = window.session, window.lesson
    loaded = session.loaded
    explain = window.views["Explain"]
    return {
        "model": (loaded.source, loaded.config.to_dict()),
        "weights": float(sum(p.detach().double().sum() for p in loaded.model.parameters())),
        "image": (session.image_name, session.image.tobytes()),
        "size": session.size, "mask": session.mask.tolist(), "head_mask": session.head_mask.tolist(),
        "views": window.views_on_screen(), "panels": window.current_view().panels,
        "attention": session.attention, "layer": session.layer, "head": session.head, "heads": session.heads,
        "query": session.query, "input": window.image_panel.input_mode(), "hover": session.hover,
        "target": explain.target.currentData(),
        "compared": session.compared.config.to_dict() if session.compared is not None else None,
        "rows": window.views["Parameters"].open_rows() if "Parameters" in window.views_on_screen() else (),
        "probs": session.result.probs.tolist(),
        "failures": list(runner.failures),
    }


def resolved(window, lesson, index: int, start_view: str) -> None:
    """The app holds the whole state the one resolver gives step `index` (on the model and image on screen)."""
    session, explain = window.session, window.views["Explain"]
    want = step_state(lesson.states[index], session.loaded, session.image)
    where = f"{lesson.path.name}, step {index + 1}"
    assert not want.problems, where
    if want.model is not None and want.model.preset is not None:
        assert session.loaded.config == want.model.config(), where
    elif want.model is not None:
        assert Path(session.loaded.source).resolve() == Path(want.model.source).resolve(), where
    if want.image is not None:
        assert session.image_name == image_name(want.image), where
    assert tuple(session.size) == want.size, where
    assert np.array_equal(session.mask, want.mask) and np.array_equal(session.head_mask, want.head_mask), where
    assert (session.attention.mode, session.layer, session.head, session.heads, session.query) == (
        want.mode, want.layer, want.head, want.heads, want.query), where
    assert window.image_panel.input_mode() == want.input_mode and session.hover == want.hover, where
    assert explain.target.currentData() == want.target, where
    view = want.view or start_view
    assert view in window.views_on_screen(), where
    assert window.views[view].panels == (want.panels or window.views[view].PANELS), where
    assert (session.compared is None) == (want.compare is None), where
    if want.compare is not None and want.compare.preset is not None:
        assert session.compared.config == want.compare.config(), where


def enter(qtbot, window, lesson, index: int) -> dict[str, Any]:
    """Go to step `index` (start the lesson first if it is not running) and wait until it is in place."""
    runner = window.lesson
    with qtbot.waitSignal(runner.applied, timeout=60000, check_params_cb=lambda i: i == index):
        if not runner.running:
            runner.start(lesson)
        runner.go(index)
    wait_result(qtbot, window.session)
    return state(window)


def same(a: dict[str, Any], b: dict[str, Any], where: str) -> None:
    for key in a:
        if key == "probs":
            np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-7, err_msg=where)
        else:
            assert a[key] == b[key], f"{where}: {key}"


@pytest.mark.parametrize("path", bundled_lessons(), ids=lambda p: p.stem)
def test_every_step_is_the_same_state_forwards_backwards_and_in_any_order(qtbot, window, path: Path) -> None:
    lesson = read_lesson(path)
    runner = window.lesson
    start_view = window.current_view().title
    forwards = []
    for index in range(len(lesson.steps)):
        with qtbot.waitSignal(runner.applied, timeout=60000, check_params_cb=lambda i, n=index: i == n):
            runner.start(lesson) if index == 0 else runner.next()
        wait_result(qtbot, window.session)
        forwards.append(state(window))
        assert not forwards[-1]["failures"], forwards[-1]["failures"]  # the step's claims hold
        resolved(window, lesson, index, start_view)
    for index in reversed(range(len(lesson.steps) - 1)):
        with qtbot.waitSignal(runner.applied, timeout=60000, check_params_cb=lambda i, n=index: i == n):
            runner.previous()
        wait_result(qtbot, window.session)
        same(forwards[index], state(window), f"{path.name}, step {index + 1}, backwards")
        resolved(window, lesson, index, start_view)
    order = list(range(len(lesson.steps)))
    random.Random(27).shuffle(order)
    for index in order:
        same(forwards[index], enter(qtbot, window, lesson, index), f"{path.name}, step {index + 1}, jumped to")
        resolved(window, lesson, index, start_view)


@pytest.mark.parametrize("path", bundled_lessons(), ids=lambda p: p.stem)
def test_a_burst_of_key_presses_ends_on_the_state_of_its_last_step(qtbot, window, path: Path) -> None:
    lesson = read_lesson(path)
    runner = window.lesson
    last = len(lesson.steps) - 1
    start_view = window.current_view().title
    expected = {index: enter(qtbot, window, lesson, index) for index in (last, 2)}
    runner.go(last)
    stale: list[int] = []  # results delivered for inputs the session no longer has
    window.session.result_ready.connect(
        lambda result: stale.append(runner.index) if not window.session.current(result.inputs) else None)
    with qtbot.waitSignal(runner.applied, timeout=60000, check_params_cb=lambda i: i == 2):
        for _ in range(last - 2):  # PageUp, PageUp, ... without waiting for any step to be in place
            runner.previous()
    wait_result(qtbot, window.session)
    qtbot.waitUntil(lambda: not window.session.working(), timeout=30000)
    same(expected[2], state(window), f"{path.name}: a burst from step {last + 1} back to step 3")
    resolved(window, lesson, 2, start_view)
    assert not stale, f"results of earlier inputs drawn at steps {stale}"


def test_the_mask_of_a_step_never_shows_at_a_step_before_it(qtbot, window) -> None:
    """PageUp from the last step to step 3 used to leave step 6's 40 % mask on (26 patches)."""
    lesson = read_lesson(bundled_lessons()[0])
    masked = next(i for i, step in enumerate(lesson.steps) if isinstance(step.mask, float))
    enter(qtbot, window, lesson, len(lesson.steps) - 1)
    assert enter(qtbot, window, lesson, masked)["mask"] != enter(qtbot, window, lesson, masked - 3)["mask"]
    assert not window.session.mask.any()


def test_step_3_clicks_choose_the_query_and_step_17_lists_layerscale(qtbot, window) -> None:
    lesson = read_lesson(bundled_lessons()[0])
    assert "click a patch" in lesson.steps[2].caption
    assert enter(qtbot, window, lesson, 2)["input"] == "query"
    assert "LayerScale" in lesson.steps[16].title
    shown = enter(qtbot, window, lesson, 16)
    assert window.session.loaded.config.layer_scale_init is not None
    assert {"blocks.0.ls1.gamma", "blocks.0.ls2.gamma"} <= set(shown["rows"])


def test_a_claim_that_fails_is_said_in_the_banner(qtbot, window, tmp_path: Path) -> None:
    import json

    lesson = {"format": "vit-explorer-lesson", "version": 1, "title": "t",
              "steps": [{"title": "Scale", "caption": "LayerScale in every block.", "model": "preset:classroom-tiny",
                         "view": "Parameters", "expect": {"model_has": ["LayerScale"]}}]}
    path = tmp_path / "lesson.json"
    path.write_text(json.dumps(lesson))
    enter(qtbot, window, read_lesson(path), 0)
    qtbot.waitUntil(lambda: window.banner.isVisible(), timeout=10000)
    assert window.lesson.failures and "step 1 ('Scale'): expect.model_has" in window.banner.text()
    assert "no LayerScale" in window.banner.text()
