"""The budget of a model run in the app: an input size (typed, or a lesson step's) whose pass would exceed it,
and a preset too large for the memory free, are refused in the banner before anything runs, and the previous
model and size stay; a model whose outputs are NaN or infinite says so in the banner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from vit_explorer.checkpoints import Preprocess, save_native
from vit_explorer.checkpoints.memory import MAX_PATCHES
from vit_explorer.models import VisionTransformer, preset

from .conftest import address_space, open_window, wait_result


def ask_size(window, h: int, w: int) -> None:
    panel = window.image_panel
    panel.height_box.setValue(h)
    panel.width_box.setValue(w)
    panel.apply_size()


@pytest.mark.parametrize("size", [(4096, 4096), (1024, 1024), (4096, 128)], ids=["4096", "1024", "4096x128"])
def test_an_input_size_over_the_budget_is_refused_in_the_banner(qtbot, window, size) -> None:
    before = window.session.result
    ask_size(window, *size)
    assert window.banner.isVisible() and f"more than the {MAX_PATCHES:,}" in window.banner.text()
    assert "use an input of at most" in window.banner.text()
    assert window.session.size == (32, 32) and window.session.mask.shape == (8, 8)  # the previous size stays
    assert not window.session.working() and window.session.result is before  # nothing ran


def test_a_size_within_the_budget_still_runs(qtbot, window) -> None:
    ask_size(window, 64, 96)
    assert wait_result(qtbot, window.session).inputs.size == (64, 96)
    assert not window.banner.isVisible()


def test_a_lesson_step_s_size_over_the_budget_is_refused(qtbot, window, tmp_path: Path) -> None:
    lesson = tmp_path / "big.json"
    lesson.write_text(json.dumps({"format": "vit-explorer-lesson", "version": 1, "title": "too big",
                                  "steps": [{"title": "huge", "caption": "4096 pixels a side", "size": [4096, 4096]}]}))
    with qtbot.waitSignal(window.lesson.applied, timeout=20000):
        window.open_lesson(str(lesson))
    assert "lesson step 1:" in window.banner.text() and f"more than the {MAX_PATCHES:,}" in window.banner.text()
    assert window.session.size == (32, 32)


def test_the_builder_refuses_a_preset_that_does_not_fit(qtbot, window) -> None:
    builder = window.views["Model builder"]
    builder.set_config(preset("dinov2-g14"))
    loaded = window.session.loaded
    with address_space():
        with qtbot.waitSignal(window.session.error, timeout=20000):
            builder.build()
    assert "could not build the model" in window.banner.text() and "needs about" in window.banner.text()
    assert "GiB of memory is free" in window.banner.text() and "smaller model" in window.banner.text()
    assert window.session.loaded is loaded


def test_non_finite_outputs_are_warned_about_in_the_banner(qtbot, tmp_path: Path) -> None:
    model = VisionTransformer(preset("classroom-tiny")).eval()
    with torch.no_grad():  # finite weights whose products overflow float32
        model.norm.weight.fill_(1e30)
        model.head.weight.fill_(1e30)
    folder = save_native(tmp_path / "overflow", model, [str(i) for i in range(10)], Preprocess((32, 32)))
    win = open_window(qtbot, str(folder))
    qtbot.waitUntil(lambda: "NaN or infinite outputs" in win.banner.text(), timeout=10000)
    assert win.banner.text().startswith("warning:")
    win.close()
