"""Hostile lesson files: every case is refused by `read_lesson` with a LessonError of one bounded line that names
the file and the field, and nothing else escapes (no ValueError, OSError, RecursionError), nothing hangs."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from vit_explorer.explore.lessons import FORMAT, LessonError, read_lesson

STEP = {"title": "Patches", "caption": "An image becomes a sequence of patches."}
MAX_MESSAGE = 2000  # characters: a message quotes excerpts, never a file's whole text


def lesson(**changes: Any) -> dict[str, Any]:
    return {"format": FORMAT, "version": 1, "title": "t", "steps": [dict(STEP)], **changes}


def step(**changes: Any) -> dict[str, Any]:
    return lesson(steps=[{**STEP, **changes}])


@dataclass(frozen=True)
class Case:
    name: str  # "lessons/what"
    make: Callable[[Path], Path]  # writes the hostile input under a scratch folder, returns the path to read
    field: str  # what the message must name (the field, or what the file is)


def text(content: str | bytes) -> Callable[[Path], Path]:
    def make(root: Path) -> Path:
        path = root / "lesson.json"
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
        return path
    return make


def data(value: Any) -> Callable[[Path], Path]:
    return text(json.dumps(value))


def fifo(root: Path) -> Path:
    os.mkfifo(root / "lesson.json")
    return root / "lesson.json"


def folder(root: Path) -> Path:
    (root / "lesson.json").mkdir()
    return root / "lesson.json"


def dev_zero(root: Path) -> Path:
    (root / "lesson.json").symlink_to("/dev/zero")
    return root / "lesson.json"


def unreadable(root: Path) -> Path:
    path = data(lesson())(root)
    path.chmod(0)
    return path


def field_in_a_fifo(root: Path) -> Path:
    os.mkfifo(root / "picture.png")
    return data(step(image="picture.png"))(root)


def link_loop(root: Path) -> Path:
    (root / "a.json").symlink_to(root / "b.json")
    (root / "b.json").symlink_to(root / "a.json")
    return root / "a.json"


def image_link_loop(root: Path) -> Path:
    (root / "loop").mkdir()
    link_loop(root / "loop")
    return data(step(image="loop/a.json"))(root)


CASES = [
    # the file itself
    Case("lessons/fifo", fifo, "is a named pipe"),
    Case("lessons/folder", folder, "is a folder"),
    Case("lessons/dev-zero-link", dev_zero, "is a character device"),
    Case("lessons/missing", lambda root: root / "gone.json", "missing"),
    Case("lessons/nul-in-path", lambda root: root / "a\0b.json", "NUL"),
    Case("lessons/name-too-long", lambda root: root / ("x" * 300 + ".json"), "too long"),
    Case("lessons/path-of-100k-characters", lambda root: root / "/".join(["d" * 200] * 500), "characters"),
    Case("lessons/no-permission", unreadable, "Permission denied"),
    Case("lessons/a-loop-of-links", link_loop, "Too many levels of symbolic links"),
    Case("lessons/step-image-a-loop-of-links", image_link_loop, "image"),
    Case("lessons/larger-than-1-MB", data(lesson(title="x" * 1_100_000)), "more than a lesson file may be"),
    Case("lessons/title-of-10^6-characters", data(step(title="x" * 10**6)), "more than a lesson file may be"),
    Case("lessons/empty-file", text(""), "not valid JSON"),
    Case("lessons/invalid-utf8", text(b'{"format": "\xff\xfe"}'), "not UTF-8"),
    # a byte-order mark (Notepad's default) is read past (tests/test_hostile_round4.py): what follows it is judged
    Case("lessons/utf8-bom-then-no-json", text("\ufeff{not json"), "not valid JSON"),
    Case("lessons/nul-bytes-in-the-json", text(b'{"format"\x00: 1}'), "not valid JSON"),
    Case("lessons/utf16", text(json.dumps(lesson()).encode("utf-16")), "not UTF-8"),
    Case("lessons/deep-nesting-100000", text("[" * 100_000 + "]" * 100_000), "nested"),
    Case("lessons/deep-nesting-40-in-a-field", data(step(options=json.loads('{"a":' * 40 + "1" + "}" * 40))),
         "nested"),
    Case("lessons/integer-of-5000-digits", text(json.dumps(lesson())[:-1] + ', "n": ' + "9" * 5000 + "}"),
         "4300 digits"),
    Case("lessons/a-list", data([lesson()]), "not a vit-explorer lesson"),
    Case("lessons/format-other", data(lesson(format="other")), "not a vit-explorer lesson"),
    # the version: a whole number, 1
    Case("lessons/version-true", data(lesson(version=True)), "version: True"),
    Case("lessons/version-1.0", data(lesson(version=1.0)), "version: 1.0"),
    Case("lessons/version-string", data(lesson(version="1")), "version: '1'"),
    Case("lessons/version-2", data(lesson(version=2)), "version: 2"),
    Case("lessons/version-missing", data({k: v for k, v in lesson().items() if k != "version"}), "version: None"),
    Case("lessons/version-of-4000-digits", text(json.dumps(lesson())[:-1] + ', "version": ' + "9" * 4000 + "}"),
         "version: an integer of about"),
    # the lesson's fields
    Case("lessons/unknown-field", data(lesson(colour="red")), "unknown keys 'colour'"),
    Case("lessons/10000-unknown-fields", data(lesson(**{f"k{i}": 1 for i in range(10_000)})), "and 9,995 more"),
    Case("lessons/unknown-field-of-150k-characters", data(lesson(**{"k" * 150_000: 1})), "150,000 characters"),
    Case("lessons/title-int", data(lesson(title=3)), "title: expected text"),
    Case("lessons/title-blank", data(lesson(title="   ")), "title: expected text"),
    Case("lessons/title-of-150k-characters", data(lesson(title="x" * 150_000)), "title: 150,000 characters"),
    Case("lessons/models-a-list", data(lesson(models=["a"])), "models"),
    Case("lessons/models-value-int", data(lesson(models={"a": 1})), "models"),
    Case("lessons/models-1000-names", data(lesson(models={f"m{i}": "bundled:classroom" for i in range(1000)})),
         "models: 1,000 names"),
    Case("lessons/models-nul-in-a-path", data(lesson(models={"a": "x\0y"})), "models: 'a'"),
    Case("lessons/models-name-too-long", data(lesson(models={"a": "x" * 5000})), "models: 'a'"),
    Case("lessons/models-unknown-bundled", data(lesson(models={"a": "bundled:" + "z" * 150_000})),
         "no bundled model"),
    Case("lessons/steps-missing", data({k: v for k, v in lesson().items() if k != "steps"}), "steps"),
    Case("lessons/steps-empty", data(lesson(steps=[])), "steps"),
    Case("lessons/steps-an-object", data(lesson(steps={"a": STEP})), "steps"),
    Case("lessons/201-steps", data(lesson(steps=[STEP] * 201)), "steps"),
    Case("lessons/100000-steps", data(lesson(steps=[{}] * 100_000)), "steps"),
    Case("lessons/step-a-string", data(lesson(steps=["x"])), "step 1: expected an object"),
    # a step's fields, each with the wrong type or value
    Case("lessons/step-unknown-field", data(step(colour="red")), "step 1 ('Patches'): unknown keys 'colour'"),
    Case("lessons/step-title-missing", data(lesson(steps=[{"caption": "c"}])), "step 1: title"),
    Case("lessons/step-title-list", data(step(title=["a"])), "step 1: title"),
    Case("lessons/step-title-150k-and-a-bad-view", data(step(title="x" * 150_000, view=3)), "view: 3"),
    Case("lessons/step-caption-of-150k-characters", data(step(caption="c" * 150_000)), "caption: 150,000 characters"),
    Case("lessons/step-caption-null", data(step(caption=None)), "caption: expected text"),
    Case("lessons/step-figure-int", data(step(figure=7)), "figure: expected text"),
    Case("lessons/step-model-int", data(step(model=1)), "model: expected a model name"),
    Case("lessons/step-model-unknown-preset", data(step(model="preset:" + "g" * 150_000)), "model: no preset"),
    Case("lessons/step-options-without-model", data(step(options={"depth": 2})), "options need a model"),
    Case("lessons/step-options-a-list", data(step(model="preset:classroom", options=[1])), "options"),
    Case("lessons/step-options-unknown-field", data(step(model="preset:classroom", options={"x" * 150_000: 1})),
         "options"),
    Case("lessons/step-options-depth-0", data(step(model="preset:classroom", options={"depth": 0})), "depth"),
    Case("lessons/step-options-depth-of-4000-digits",
         text(json.dumps(step(model="preset:classroom", options={"depth": 0})).replace('"depth": 0', '"depth": '
                                                                                      + "9" * 4000)), "depth"),
    Case("lessons/step-options-depth-true", data(step(model="preset:classroom", options={"depth": True})), "depth"),
    Case("lessons/step-options-pos-embed-150k",
         data(step(model="preset:classroom", options={"pos_embed": "p" * 150_000})), "pos_embed"),
    Case("lessons/step-image-int", data(step(image=5)), "image"),
    Case("lessons/step-image-empty", data(step(image="")), "image"),
    Case("lessons/step-image-missing", data(step(image="missing.png")), "no such image file"),
    Case("lessons/step-image-a-folder", data(step(image=".")), "image: "),
    Case("lessons/step-image-a-fifo", field_in_a_fifo, "not a regular file"),
    Case("lessons/step-image-nul", data(step(image="a\0b.png")), "image: 'a\\x00b.png': a path cannot hold a NUL"),
    Case("lessons/step-image-name-too-long", data(step(image="i" * 5000)), "image"),
    Case("lessons/step-image-unknown-sample", data(step(image="sample:" + "u" * 150_000)), "no bundled sample"),
    Case("lessons/step-size-a-string", data(step(size="big")), "size"),
    Case("lessons/step-size-floats", data(step(size=[32.0, 32.0])), "size"),
    Case("lessons/step-size-bools", data(step(size=[True, True])), "size"),
    Case("lessons/step-size-huge", data(step(size=[100_000, 100_000])), "size"),
    Case("lessons/step-view-int", data(step(view=3)), "view: 3"),
    Case("lessons/step-view-a-list", data(step(view=["Attention"])), "view: ['Attention']"),
    Case("lessons/step-view-of-150k-characters", data(step(view="v" * 150_000)), "view: 'vvv"),
    Case("lessons/step-attention-a-list", data(step(attention=[0])), "attention"),
    Case("lessons/step-attention-unknown-field", data(step(attention={"row": 1})), "attention"),
    Case("lessons/step-attention-mode-int", data(step(attention={"mode": 1})), "attention.mode: 1"),
    Case("lessons/step-attention-mode-a-list", data(step(attention={"mode": ["one head"]})), "attention.mode"),
    Case("lessons/step-attention-layer-true", data(step(attention={"layer": True})), "attention.layer: expected"),
    Case("lessons/step-attention-layer-negative", data(step(attention={"layer": -1})), "attention.layer"),
    Case("lessons/step-attention-layer-infinity", text(json.dumps(step(attention={"layer": 0})).replace(
        '"layer": 0', '"layer": Infinity')), "attention.layer: expected"),
    Case("lessons/step-attention-head-of-4000-digits", text(json.dumps(step(attention={"head": 0})).replace(
        '"head": 0', '"head": ' + "9" * 4000)), "attention.head: expected a whole number from 0 to 9999, got an"),
    Case("lessons/step-query-one-number", data(step(query=[1])), "query"),
    Case("lessons/step-query-bools", data(step(query=[True, False])), "query"),
    Case("lessons/step-query-a-string", data(step(query="centre")), "query"),
    Case("lessons/step-mask-random-nan", text(json.dumps(step(mask={"random": 0.5})).replace("0.5", "NaN")),
         "mask: random"),
    Case("lessons/step-mask-random-2", data(step(mask={"random": 2})), "mask: random"),
    Case("lessons/step-mask-random-true", data(step(mask={"random": True})), "mask: random"),
    Case("lessons/step-mask-seed-float", data(step(mask={"random": 0.5, "seed": 1.5})), "mask: seed"),
    Case("lessons/step-mask-unknown-field", data(step(mask={"random": 0.5, "colour": 1})), "mask"),
    Case("lessons/step-mask-pairs-of-one", data(step(mask=[[1]])), "mask"),
    Case("lessons/step-mask-a-number", data(step(mask=0.5)), "mask"),
    Case("lessons/step-heads-off-a-string", data(step(heads_off="all")), "heads_off"),
    Case("lessons/step-heads-off-negative", data(step(heads_off=[[0, -1]])), "heads_off"),
    Case("lessons/step-heads-off-100000-pairs-one-bad", data(step(heads_off=[[0, 0]] * 100_000 + [[0]])), "heads_off"),
    Case("lessons/step-compare-int", data(step(compare=3)), "compare"),
    Case("lessons/step-compare-with-nul", data(step(compare="a\0b")), "compare"),
    Case("lessons/second-step-bad", data(lesson(steps=[STEP, {**STEP, "title": "Second", "view": 3}])),
         "step 2 ('Second'): view"),
]


def test_case_names_are_unique_and_name_their_surface() -> None:
    names = [case.name for case in CASES]
    assert len(set(names)) == len(names) and all(name.startswith("lessons/") for name in names)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_a_hostile_lesson_is_refused_naming_the_file_and_the_field(tmp_path: Path, case: Case) -> None:
    path = case.make(tmp_path)
    if case.name == "lessons/no-permission" and os.access(path, os.R_OK):
        pytest.skip("running as a user who reads every file (root)")
    with pytest.raises(LessonError) as caught:
        read_lesson(path)
    message = str(caught.value)
    assert "\n" not in message and len(message) < MAX_MESSAGE, message[:3000]
    assert message.startswith(str(path).replace("\0", "\\0")[:200]), message
    assert case.field in message, message
