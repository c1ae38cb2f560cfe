"""A lesson step's `target`: the class the Explain view explains, by label or index; anything else is refused
naming the step and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vit_explorer.explore.lessons import FORMAT, LessonError, read_lesson

STEP = {"title": "Why", "caption": "A map for one class.", "view": "Explain"}


def _read(tmp_path: Path, target: object):
    path = tmp_path / "lesson.json"
    path.write_text(json.dumps({"format": FORMAT, "version": 1, "title": "t", "steps": [{**STEP, "target": target}]}))
    return read_lesson(path).steps[0]


def test_a_target_by_label_or_index(tmp_path: Path) -> None:
    assert _read(tmp_path, "star").target == "star"
    assert _read(tmp_path, 3).target == 3


@pytest.mark.parametrize("bad", [-1, True, 2.5, "", [1]])
def test_a_bad_target_names_the_step_and_field(tmp_path: Path, bad: object) -> None:
    with pytest.raises(LessonError, match=r"step 1 \('Why'\): target: expected"):
        _read(tmp_path, bad)
