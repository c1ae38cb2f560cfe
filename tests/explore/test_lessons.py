"""Lesson files: the bundled lesson is valid, and a bad one is refused before any step runs, with a
message naming the file, the step and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vit_explorer.explore.lessons import FORMAT, LessonError, bundled_lessons, parse_lesson, read_lesson

STEP = {"title": "Patches", "caption": "An image becomes a sequence of patches."}


def lesson(**changes: object) -> dict:
    return {"format": FORMAT, "version": 1, "title": "t", "steps": [dict(STEP)], **changes}


def write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "lesson.json"
    path.write_text(json.dumps(data))
    return path


def test_the_bundled_lessons_are_valid() -> None:
    paths = bundled_lessons()
    assert paths
    for path in paths:
        lesson = read_lesson(path)
        assert len(lesson.steps) >= 10 and all(step.caption for step in lesson.steps)


def test_a_step_may_set_everything(tmp_path: Path) -> None:
    step = {**STEP, "figure": "ViT Fig. 1", "model": "preset:classroom", "options": {"pos_embed": "none"},
            "image": "sample:circle", "size": [32, 48], "view": "Attention",
            "attention": {"mode": "all heads", "layer": 1, "head": 2}, "query": [3, 4],
            "mask": {"random": 0.25, "seed": 2}, "heads_off": [[0, 1]], "compare": "bundled:classroom"}
    parsed = read_lesson(write(tmp_path, lesson(steps=[step]))).steps[0]
    assert parsed.model is not None and parsed.model.config().pos_embed == "none"
    assert parsed.size == (32, 48) and parsed.query == (3, 4) and parsed.mask == 0.25 and parsed.mask_seed == 2
    assert parsed.heads_off == ((0, 1),) and parsed.layer == 1 and parsed.head == 2 and parsed.mode == "all heads"
    assert parsed.compare is not None and parsed.compare.source is not None


@pytest.mark.parametrize(("data", "message"), [
    ("not an object", "not a vit-explorer lesson"),
    (lesson(format="other"), "not a vit-explorer lesson"),
    (lesson(version=2), "version"),
    (lesson(extra=1), "unknown keys"),
    (lesson(steps=[]), "steps"),
    (lesson(steps=[{"caption": "x"}]), "step 1: title"),
    (lesson(steps=[{**STEP, "caption": ""}]), "caption"),
    (lesson(steps=[{**STEP, "colour": "red"}]), "unknown keys 'colour'"),
    (lesson(steps=[{**STEP, "view": "Nowhere"}]), "view: 'Nowhere'"),
    (lesson(steps=[{**STEP, "attention": {"mode": "loud"}}]), "attention.mode"),
    (lesson(steps=[{**STEP, "attention": {"layer": -1}}]), "attention.layer"),
    (lesson(steps=[{**STEP, "attention": {"layer": 1.5}}]), "attention.layer"),
    (lesson(steps=[{**STEP, "model": "preset:giant"}]), "no preset 'giant'"),
    (lesson(steps=[{**STEP, "model": "preset:classroom", "options": {"depth": 0}}]), "options"),
    (lesson(steps=[{**STEP, "options": {"depth": 2}}]), "options need a model"),
    (lesson(steps=[{**STEP, "model": "bundled:nothing"}]), "no bundled model 'nothing'"),
    (lesson(steps=[{**STEP, "image": "sample:unicorn"}]), "no bundled sample 'unicorn'"),
    (lesson(steps=[{**STEP, "image": "missing.png"}]), "no such image file"),
    (lesson(steps=[{**STEP, "size": [0, 32]}]), "size"),
    (lesson(steps=[{**STEP, "mask": {"random": 2}}]), "mask: random"),
    (lesson(steps=[{**STEP, "mask": [[1]]}]), "mask"),
    (lesson(steps=[{**STEP, "heads_off": "all"}]), "heads_off"),
    (lesson(steps=[{**STEP, "query": "centre"}]), "query"),
    (lesson(steps=[STEP, {**STEP, "title": "Second", "view": 3}]), "step 2 ('Second'): view"),
    (lesson(models={"a": 1}), "models"),
])
def test_a_bad_lesson_names_the_step_and_field(tmp_path: Path, data: object, message: str) -> None:
    path = write(tmp_path, data)
    with pytest.raises(LessonError) as caught:
        read_lesson(path)
    assert str(path) in str(caught.value) and message in str(caught.value)


def test_unreadable_and_oversized_files(tmp_path: Path) -> None:
    with pytest.raises(LessonError, match="the lesson file is missing"):
        read_lesson(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(LessonError, match="not valid JSON"):
        read_lesson(bad)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(LessonError):
        read_lesson(deep)
    with pytest.raises(LessonError, match="not a vit-explorer lesson"):
        parse_lesson([], tmp_path / "list.json")


def test_a_bundled_model_missing_from_the_installation_is_named(tmp_path: Path, monkeypatch) -> None:
    from vit_explorer.explore import lessons

    monkeypatch.setitem(lessons.BUNDLED, "where", tmp_path / "gone")
    with pytest.raises(LessonError, match=r"step 1.*bundled model 'where' is missing from .*gone"):
        read_lesson(write(tmp_path, lesson(steps=[{**STEP, "model": "bundled:where"}])))
