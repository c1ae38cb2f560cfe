"""A lesson step's claims (`expect`): validated like every other field, stated by every bundled step, and checked
against what is on screen; a step's whole state (`resolve`) does not depend on the steps walked before it;
preset models are built from a seed."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from vit_explorer.explore.build import build_loaded
from vit_explorer.explore.lessons import (
    CLAIMS,
    FORMAT,
    LessonError,
    Shown,
    bundled_lessons,
    check_claims,
    read_lesson,
    resolve,
)
from vit_explorer.models import preset

STEP = {"title": "Scale", "caption": "LayerScale in every block."}


def write(tmp_path: Path, *steps: dict) -> Path:
    path = tmp_path / "lesson.json"
    path.write_text(json.dumps({"format": FORMAT, "version": 1, "title": "t", "steps": list(steps)}))
    return path


def shown(**changes: object) -> Shown:
    base = Shown(config=preset("classroom-tiny"), trained=True, grid=(8, 8), views=("Prediction", "Attention"),
                 mode="one head", layer=0, input_mode="mask", masked=0, heads_off=0, predicted="star", target=None,
                 compared=None, rows=())
    return replace(base, **changes)


def test_every_step_of_every_bundled_lesson_states_its_claims() -> None:
    for path in bundled_lessons():
        for index, step in enumerate(read_lesson(path).steps):
            assert step.expect, f"{path.name}, step {index + 1} ({step.title!r}) states no claim"
            assert set(step.expect) <= set(CLAIMS)


@pytest.mark.parametrize(("expect", "message"), [
    ("LayerScale", "step 1 ('Scale'): expect: expected an object"),
    ({"colour": "red"}, "step 1 ('Scale'): expect: unknown keys 'colour'"),
    ({"model_has": ["wings"]}, "step 1 ('Scale'): expect.model_has: expected a list of"),
    ({"model_has": []}, "expect.model_has"),
    ({"input": "paint"}, "step 1 ('Scale'): expect.input: expected one of"),
    ({"view": "Nowhere"}, "expect.view"),
    ({"layer": -1}, "expect.layer: expected a block number"),
    ({"grid": [8]}, "expect.grid"),
    ({"trained": "yes"}, "expect.trained: expected true or false"),
    ({"compare_differs": ["colour"]}, "expect.compare_differs: expected a list of model config fields"),
    ({"target": ""}, "expect.target: expected a class label"),
])
def test_a_bad_claim_names_the_step_and_the_field(tmp_path: Path, expect: object, message: str) -> None:
    path = write(tmp_path, {**STEP, "expect": expect})
    with pytest.raises(LessonError) as caught:
        read_lesson(path)
    assert str(path) in str(caught.value) and message in str(caught.value)


def test_a_claim_that_does_not_hold_is_named_with_its_step(tmp_path: Path) -> None:
    lesson = read_lesson(write(tmp_path, STEP, {**STEP, "title": "Second", "expect": {
        "model_has": ["LayerScale"], "input": "query", "view": "Compare", "compare_differs": ["pos_embed"],
        "target": "star", "rows": ["blocks.0.ls1.gamma"], "masked": 26}}))
    failures = check_claims(lesson, 1, shown())
    assert len(failures) == 7 and all("step 2 ('Second'): expect." in failure for failure in failures)
    assert "expect.model_has: the model has no LayerScale" in failures[0]
    assert "expect.input: the click mode is 'mask', not 'query'" in failures[1]
    cait = preset("classroom", layer_scale_init=1e-5)
    assert check_claims(lesson, 1, shown(
        config=cait, input_mode="query", views=("Compare",), compared=preset("classroom", pos_embed="none"),
        target="star", rows=("blocks.0.ls1.gamma",), masked=26)) == []
    assert check_claims(lesson, 0, shown()) == []  # a step without claims


def test_the_bundled_steps_3_and_17_claim_what_their_captions_say() -> None:
    lesson = read_lesson(bundled_lessons()[0])
    three, seventeen = lesson.steps[2], lesson.steps[16]
    assert "click a patch" in three.caption and three.input_mode == three.expect["input"] == "query"
    assert "LayerScale" in seventeen.title and "LayerScale" in seventeen.expect["model_has"]
    assert seventeen.model is not None and seventeen.model.config().layer_scale_init is not None


def test_a_step_state_does_not_depend_on_the_steps_walked_before(tmp_path: Path) -> None:
    lesson = read_lesson(write(
        tmp_path,
        {**STEP, "model": "preset:classroom-tiny", "view": "Attention", "attention": {"mode": "rollout"}},
        {**STEP, "mask": {"random": 0.4, "seed": 3}, "heads_off": [[0, 1]], "target": "shape 1", "query": [1, 2]},
        {**STEP, "view": "Prediction"},
        {**STEP, "model": "preset:classroom"}))
    states = resolve(lesson.steps)
    assert states == lesson.states
    first, masked, prediction, other = states
    assert first.mask == "none" and first.heads_off == () and first.query is None and first.target is None
    assert masked.mask == prediction.mask == 0.4 and prediction.tab == "Attention" and prediction.mode == "rollout"
    # a new model resets what loading one resets in the app
    assert other.mask == "none" and other.heads_off == () and other.query is None and other.target is None
    assert other.mode == "rollout" and other.view == "Prediction"


def test_a_preset_model_has_the_same_weights_at_every_build() -> None:
    config = preset("classroom-tiny")
    before = torch.random.get_rng_state()
    a, b = (build_loaded(config, "cpu", seed=0) for _ in range(2))
    assert torch.equal(torch.random.get_rng_state(), before)  # the global generator is left alone
    assert all(torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters(), strict=True))
    c = build_loaded(config, "cpu", seed=1)
    assert not torch.equal(next(a.model.parameters()), next(c.model.parameters()))
