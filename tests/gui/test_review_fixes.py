"""What a review of the GUI found, each driven through the window: stale results of another model or input,
controls that fell off the grid, lesson steps that half-applied, dialogs answered "No" that had already acted."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from .conftest import save_tiny, wait_result

CAIT = {"pos_embed_prefix": False, "class_attn_depth": 1, "talking_heads": True, "layer_scale_init": 0.5}


def show(window, title: str):
    window.docks[title].raise_()
    return window.views[title]


def open_model(qtbot, window, source: Path) -> None:
    with qtbot.waitSignal(window.session.model_changed, timeout=30000):
        window.load(str(source))
    wait_result(qtbot, window.session)


# ---------------------------------------------------------------------------- attention
def test_the_layer_steps_through_the_blocks_the_attention_mode_shows(qtbot, window, tmp_path: Path) -> None:
    open_model(qtbot, window, save_tiny(tmp_path / "cait", **CAIT))  # 2 self-attention blocks, 1 class-attention
    session = window.session
    view = show(window, "Attention")
    view.mode.setCurrentText("one head")
    for _ in range(4):
        window.step_layer(1)
    assert session.layer == 1  # the last self-attention block: a class-attention block has no N x N maps
    qtbot.waitUntil(lambda: view.figure is not None and view.figure.titles[0].startswith("layer 1"), timeout=10000)
    view.mode.setCurrentText("class attention (CaiT)")
    assert session.layer == 0 and view.layer.value() == 0  # the one class-attention block
    window.step_layer(1)
    assert session.layer == 0 and view.figure.heading.startswith("class-attention block 0")
    view.mode.setCurrentText("mean of heads")
    window.step_layer(1)
    assert session.layer == 1
    qtbot.waitUntil(lambda: view.figure is not None and view.figure.titles[0].startswith("layer 1"), timeout=10000)


# ---------------------------------------------------------------------------- heads
def test_a_new_model_drops_the_head_importance_measured_on_the_old_one(qtbot, window, tmp_path: Path) -> None:
    from vit_explorer.checkpoints import load

    deeper = load(save_tiny(tmp_path / "deeper", depth=3))
    view = show(window, "Heads")
    qtbot.waitUntil(lambda: view.result is not None and not view.running, timeout=20000)
    errors: list[str] = []
    window.session.error.connect(errors.append)
    view.measure_importance()
    window.session.set_model(deeper)  # the old measurement finishes after the new buttons are made
    assert view.measure.text() == "Measure importance" and not view.progress.isVisible() and view.result is None
    qtbot.waitUntil(lambda: view.result is not None and not view.running, timeout=20000)  # the new model's, at once
    assert view.importance.shape == (3, 2) and not errors


def test_head_importance_is_measured_again_for_a_moved_mask_or_a_new_size(qtbot, window) -> None:
    session = window.session
    view = show(window, "Heads")
    mask = np.zeros(session.grid, bool)
    mask[:, :4] = True
    session.set_mask(mask)
    qtbot.waitUntil(lambda: view.result is not None and view.result.masked_patches == 32 and not view.running,
                    timeout=20000)
    before = view.importance.copy()
    session.set_mask(~mask)  # as many patches, other ones
    qtbot.waitUntil(lambda: not view.running and not np.allclose(view.importance, before), timeout=20000)
    session.set_mask(np.zeros(session.grid, bool))
    qtbot.waitUntil(lambda: not view.running and view.result.masked_patches == 0, timeout=20000)
    before = view.importance.copy()
    session.set_size((24, 40))  # nothing masked before or after, at another size
    qtbot.waitUntil(lambda: not view.running and not np.allclose(view.importance, before), timeout=20000)


def test_head_importance_needs_a_classifier(qtbot, window, tmp_path: Path) -> None:
    open_model(qtbot, window, save_tiny(tmp_path / "features", num_classes=0))
    view = show(window, "Heads")
    qtbot.wait(200)  # a model this small would be measured at once
    assert view.result is None and not view.running and not view.measure.isEnabled()
    assert "no classifier" in view.measure.toolTip() and "no classifier" in view.note.text()
    view.measure_importance()
    assert not view.running
    open_model(qtbot, window, save_tiny(tmp_path / "classifier"))
    assert view.measure.isEnabled()
    qtbot.waitUntil(lambda: view.result is not None, timeout=20000)


# ---------------------------------------------------------------------------- features
def test_the_patch_box_follows_the_grid_at_another_size(qtbot, window) -> None:
    view = show(window, "Features")
    assert view.patch.maximum() == 63  # 8 x 8
    window.session.set_size((48, 48))
    assert view.patch.maximum() == 143  # 12 x 12
    view.patch.setValue(143)
    window.session.set_size((24, 40))
    assert view.patch.maximum() == 59 and view.patch.value() == 59  # 6 x 10


def test_features_runs_the_other_images_as_the_result_ran(qtbot, window, monkeypatch) -> None:
    from vit_explorer.gui.views import features as features_view

    session = window.session
    view = show(window, "Features")
    view.mode.setCurrentText("patch correspondence")
    view.bring_up_to_date()
    result = session.result
    jobs: list = []
    monkeypatch.setattr(session, "run", lambda channel, fn, *rest, **options: jobs.append(fn))
    session.set_head_mask(np.array([[1, 0], [1, 1]], np.float32))  # no forward pass runs: the result stays the old one
    session.set_size((24, 40))
    view.refresh()
    ran = []
    real = features_view.run_forward
    monkeypatch.setattr(features_view, "run_forward", lambda inputs, *more: ran.append(inputs) or real(inputs, *more))
    jobs[-1]()
    assert ran and all(inputs.size == (32, 32) and (inputs.head_mask == result.inputs.head_mask).all()
                       and inputs.loaded is result.inputs.loaded for inputs in ran)


def test_nearest_images_runs_the_samples_once_and_leaves_out_the_image_itself(qtbot, window, monkeypatch) -> None:
    from vit_explorer.data.images import sample_images
    from vit_explorer.gui.views import features as features_view

    session = window.session
    samples = sample_images()
    if len(samples) < 2:
        pytest.skip("no bundled samples")
    window.image_panel.open_sample_or_path(f"sample:{samples[0].stem}")
    wait_result(qtbot, session)
    view = show(window, "Features")
    view.mode.setCurrentText("nearest images")
    view.bring_up_to_date()
    assert view.figure.title.startswith("Nearest images") and samples[0].stem not in view.figure.labels
    ran = []
    real = features_view.run_forward
    monkeypatch.setattr(features_view, "run_forward", lambda inputs, *more: ran.append(inputs) or real(inputs, *more))
    session.toggle_patch(0, 0)
    wait_result(qtbot, session)
    view.bring_up_to_date()
    assert not ran and view.figure.title.startswith("Nearest images")  # the samples' features were kept
    session.set_head_mask(np.array([[1, 0], [1, 1]], np.float32))
    wait_result(qtbot, session)
    view.bring_up_to_date()
    assert len(ran) == len(samples)  # other heads: other features (kept for every sample, the image's too)


# ---------------------------------------------------------------------------- any view's background work
@pytest.mark.parametrize(("title", "mode"), [("Attention", "rollout"), ("Features", "token norms"), ("Compare", None),
                                             ("Embeddings", None)])
def test_work_started_for_the_old_model_is_dropped_when_the_model_changes(qtbot, window, tmp_path: Path, monkeypatch,
                                                                          title: str, mode: str | None) -> None:
    from vit_explorer.checkpoints import load

    session = window.session
    other = load(save_tiny(tmp_path / "other", depth=3))
    view = show(window, title)
    if title == "Compare":
        session.set_compared(other, "other")
    if mode is not None:
        view.mode.setCurrentText(mode)
    view.bring_up_to_date()
    drawn: list = []
    monkeypatch.setattr(view, "_show" if title == "Embeddings" else "_draw", drawn.append)
    view.refresh()  # work on the old model's result
    show(window, "Parameters")  # hidden, the view starts no work for the new model that would replace it
    session.set_model(other)
    wait_result(qtbot, session)
    qtbot.waitUntil(lambda: not session.working(), timeout=10000)
    qtbot.wait(50)
    assert drawn == []


# ---------------------------------------------------------------------------- lessons and the image panel
def lesson_of(*steps):
    from vit_explorer.explore.lessons import Lesson, Step

    return Lesson("review", tuple(Step(f"step {i}", "caption", **step) for i, step in enumerate(steps)),
                  Path("review.json"))


def test_a_lesson_step_at_a_size_the_model_cannot_take_says_so_and_applies_the_rest(qtbot, window) -> None:
    session = window.session
    window.lesson.start(lesson_of({}, {"size": (30, 30), "mask": ((0, 0),), "mode": "all heads", "layer": 1,
                                       "view": "Heads"}))
    with qtbot.waitSignal(window.lesson.applied, timeout=10000):
        window.lesson.next()  # the tiny model's patches are 4 pixels: 30 does not divide
    assert "not a multiple of the patch size" in window.banner.text()
    assert session.size == (32, 32) and session.mask[0, 0] and session.mask.sum() == 1
    assert window.views["Attention"].mode_name == "all heads" and session.layer == 1
    window.lesson.leave()


def test_lesson_models_load_on_the_device_the_session_uses(monkeypatch) -> None:
    import vit_explorer.checkpoints as checkpoints
    import vit_explorer.explore.build as build
    from vit_explorer.explore.lessons import Model
    from vit_explorer.gui.lesson import materialize

    devices: list[str | None] = []
    monkeypatch.setattr(checkpoints, "load", lambda source, **options: devices.append(options.get("device")))
    monkeypatch.setattr(build, "preferred_device", lambda: "the session's device")
    materialize(Model(source="some/checkpoint"))
    assert devices == ["the session's device"]


def test_only_page_keys_step_a_lesson_from_anywhere_in_the_window(qtbot, window) -> None:
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QPushButton

    window.activateWindow()
    window.lesson.start(lesson_of({}, {}, {}, {}))
    clear = next(b for b in window.image_panel.findChildren(QPushButton) if b.text() == "Clear")
    clear.setFocus()
    for key in (Qt.Key.Key_Space, Qt.Key.Key_Right, Qt.Key.Key_Backspace, Qt.Key.Key_Left):
        qtbot.keyClick(clear, key)
        assert window.lesson.index == 0, key
    qtbot.keyClick(clear, Qt.Key.Key_PageDown)
    assert window.lesson.index == 1
    previous = window.lesson.panel.buttons[0]
    previous.setFocus()
    qtbot.keyClick(previous, Qt.Key.Key_Right)  # the arrows step within the lesson panel
    assert window.lesson.index == 2
    qtbot.keyClick(previous, Qt.Key.Key_Left)
    qtbot.keyClick(clear, Qt.Key.Key_PageUp)
    assert window.lesson.index == 0
    window.lesson.leave()


def test_the_size_boxes_show_the_size_a_lesson_set(qtbot, window) -> None:
    window.session.set_size((24, 40))
    panel = window.image_panel
    assert (panel.height_box.value(), panel.width_box.value()) == (24, 40)


# ---------------------------------------------------------------------------- figures
def test_the_colour_bar_names_what_the_map_shows(qtbot, window) -> None:
    view = show(window, "Attention")
    qtbot.waitUntil(lambda: view.figure is not None, timeout=10000)
    assert view._drawn.bar.axis.labelText == "attention"
    view.mode.setCurrentText("rollout")  # one map over the image, as "one head" draws: the plot is kept
    qtbot.waitUntil(lambda: view.figure is not None and "rollout" in view.figure.titles[0], timeout=10000)
    assert view._drawn.bar.axis.labelText == "rollout weight"


# ---------------------------------------------------------------------------- model builder
@pytest.mark.parametrize("overrides", [{"prefix_tokens": "none", "pool": "map", "num_classes": 0},  # SigLIP
                                       {"num_classes": 0, "reg_tokens": 4, "pos_embed_prefix": False,
                                        "layer_scale_init": 1e-5},  # DINOv2 with registers
                                       {"pool": "gap"},  # [CLS] kept, the head on the mean of the patches
                                       {"layer_scale_init": 1e-6}],  # DeiT III's LayerScale
                         ids=["siglip", "dinov2", "cls-gap", "deit3-layer-scale"])
def test_the_builder_starts_from_any_open_model(qtbot, window, tmp_path: Path, overrides: dict) -> None:
    from vit_explorer.checkpoints import load

    loaded = load(save_tiny(tmp_path / "model", **overrides))
    window.session.set_model(loaded)
    view = show(window, "Model builder")
    view.from_current()
    assert view.config() == loaded.config
    if not loaded.config.num_classes:
        assert view.classes.text() == "features only"
    view.prefix.setCurrentIndex(view.prefix.findData("cls+dist"))  # another prefix: the head reads what it offers
    assert (view.config().prefix_tokens, view.config().pool) == ("cls+dist", "cls")


def test_drawing_lands_under_the_cursor_on_a_cropped_photo(qtbot, window, tmp_path: Path) -> None:
    """A timm-like recipe (shortest side to 36, centre crop 32) on a wide photo: the stroke is where it was drawn."""
    from PIL import Image
    from PySide6.QtCore import QPointF

    from vit_explorer.checkpoints import Preprocess, load
    from vit_explorer.checkpoints.native import save_native

    tiny = load(save_tiny(tmp_path / "plain"))
    recipe = Preprocess((32, 32), resize_shortest=36, crop=True, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
    open_model(qtbot, window, save_native(tmp_path / "cropped", tiny.model, tiny.labels, recipe))
    window.session.set_image(Image.new("RGB", (300, 120)), "black")
    wait_result(qtbot, window.session)
    panel = window.image_panel
    panel.mode_group.button(2).setChecked(True)  # Draw
    panel.brush.setValue(2)
    panel.press(QPointF(24.5, 8.5), start=True)  # model pixel (row 8, column 24)
    result = wait_result(qtbot, window.session)
    assert result.display[8, 24].min() > 150 and result.display[8, 8].max() < 50
