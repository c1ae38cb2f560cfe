"""What a teacher or a researcher tripped over in front of a class (issue 9), each driven through the window."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from PySide6.QtCore import QPointF, QSettings
from PySide6.QtGui import QImage, QKeySequence
from PySide6.QtWidgets import QMenu

from vit_explorer.checkpoints import Preprocess, save_native
from vit_explorer.models import VisionTransformer, preset

from .conftest import open_window, save_tiny, wait_result


def show(window, title: str):
    window.docks[title].raise_()
    return window.views[title]


# ---------------------------------------------------------------------------- loading and the Model box
def test_the_first_window_fits_the_screen(window) -> None:
    room = window.screen().availableGeometry()
    assert window.width() <= room.width() and window.height() <= room.height()


def test_an_image_as_the_source_opens_on_the_bundled_model(qtbot, sample_png: Path) -> None:
    from vit_explorer.paths import BUNDLED_MODEL

    win = open_window(qtbot, str(sample_png))
    assert Path(win.session.loaded.source) == BUNDLED_MODEL
    qtbot.waitUntil(lambda: win.session.image_name == sample_png.name, timeout=10000)
    assert not win.banner.text()
    win.close()


def test_the_model_box_names_a_built_model(qtbot, window) -> None:
    view = show(window, "Model builder")
    with qtbot.waitSignal(window.session.model_changed, timeout=20000):
        view.build_button.click()
    assert window.source_box.currentText() == "(built in the Model builder)"
    assert "built" in window.windowTitle()


# ---------------------------------------------------------------------------- prediction
def test_the_prediction_axis_is_fixed_at_0_to_100_percent(qtbot, window) -> None:
    prediction = window.views["Prediction"]
    x_range = prediction._drawn.plot.getViewBox().viewRange()[0]
    top = float(window.session.result.probs.max())
    assert x_range[0] == pytest.approx(0.0) and x_range[1] >= 1.0  # not stretched to the top bar's length
    assert top < 0.9  # the tiny random model is unsure: a scaled axis would have filled the chart


# ---------------------------------------------------------------------------- attention
def test_a_clicked_patch_becomes_the_query_at_once(qtbot, window) -> None:
    view = show(window, "Attention")
    qtbot.waitUntil(lambda: view.maps is not None, timeout=10000)
    panel = window.image_panel
    panel.mode_group.button(1).setChecked(True)  # Query
    panel.press(QPointF(4 * 3 + 1, 4 * 5 + 1), start=True)  # patch (row 5, col 3) of the 8x8 grid
    qtbot.waitUntil(lambda: view.maps is not None and "patch (5, 3)" in view.figure.titles[0], timeout=10000)
    result = window.session.result
    row = 1 + 5 * 8 + 3
    np.testing.assert_allclose(view.maps[0], result.maps[0][0, 0, row, 1:].numpy().reshape(8, 8), rtol=1e-6)
    view.reset_query.click()
    assert window.session.query is None and "[CLS]" in view.figure.titles[0]


def test_the_attention_mode_follows_the_model_family(qtbot, window, timm_cait_folder: Path,
                                                     tiny_checkpoint: Path) -> None:
    view = show(window, "Attention")
    with qtbot.waitSignal(window.session.model_changed, timeout=30000):
        window.load(str(timm_cait_folder))
    wait_result(qtbot, window.session)
    view.mode.setCurrentText("class attention (CaiT)")
    assert view.layer.maximum() == 1  # two class-attention blocks, not the 2 self-attention ones + more
    view.layer.setValue(5)
    assert view.layer.value() == 1
    with qtbot.waitSignal(window.session.model_changed, timeout=30000):
        window.load(str(tiny_checkpoint))
    wait_result(qtbot, window.session)
    assert view.mode.currentText() != "class attention (CaiT)"
    qtbot.waitUntil(lambda: view.maps is not None, timeout=10000)  # not a blank view


def test_switched_off_heads_are_marked_on_the_maps(qtbot, window) -> None:
    heads = show(window, "Heads")
    heads.buttons[0][1].click()
    view = show(window, "Attention")
    view.mode.setCurrentText("all heads")
    qtbot.waitUntil(lambda: view.figure is not None and "(off)" in " ".join(view.figure.titles), timeout=10000)
    assert view.figure.titles == ("head 0", "head 1 (off)")


def test_cait_rollout_honours_discard(qtbot, window, timm_cait_folder: Path) -> None:
    with qtbot.waitSignal(window.session.model_changed, timeout=30000):
        window.load(str(timm_cait_folder))
    view = show(window, "Attention")
    view.mode.setCurrentText("rollout")
    qtbot.waitUntil(lambda: view.figure is not None and "rollout" in view.figure.titles[0], timeout=10000)
    before = view.maps.copy()
    assert view.discard.isVisible()
    view.discard.setValue(0.9)
    qtbot.waitUntil(lambda: view.figure is not None and "discard 0.90" in view.figure.titles[0], timeout=10000)
    assert not np.allclose(view.maps, before)


# ---------------------------------------------------------------------------- heads
def test_head_importance_is_for_the_masked_input_and_says_so(qtbot, window) -> None:
    view = show(window, "Heads")
    qtbot.waitUntil(lambda: view.result is not None and view.result.image_name == window.session.image_name,
                    timeout=20000)
    unmasked = view.importance.copy()
    assert "class '" in view.note.text() and window.session.image_name in view.note.text()
    mask = np.zeros(window.session.grid, bool)
    mask[:, :4] = True
    window.session.set_mask(mask)
    qtbot.waitUntil(lambda: view.result is not None and view.result.masked_patches == 32, timeout=20000)
    assert "32 patches masked" in view.note.text()
    assert not np.allclose(view.importance, unmasked)


def test_measuring_importance_shows_progress_and_can_be_cancelled(qtbot, window) -> None:
    view = show(window, "Heads")
    qtbot.waitUntil(lambda: view.result is not None, timeout=20000)
    seen: list[tuple[float, str]] = []
    view.measured.connect(lambda share, what: seen.append((share, what)))
    view.measure_importance()
    assert view.progress.isVisible() and view.measure.text() == "Cancel"
    qtbot.waitUntil(lambda: not view.running, timeout=20000)
    assert seen and seen[-1] == (1.0, "head 4 of 4")
    view.measure_importance()
    view.measure.click()  # Cancel
    assert not view.running and view.measure.text() == "Measure importance" and "cancelled" in view.note.text()


# ---------------------------------------------------------------------------- exports
def test_png_export_is_the_figure_at_a_scale_with_what_it_shows(qtbot, window, tmp_path: Path) -> None:
    view = show(window, "Attention")
    qtbot.waitUntil(lambda: view.maps is not None, timeout=10000)
    path = view.export_png(tmp_path / "attention.png", scale=2)
    image = QImage(str(path))
    plots = view.picture()
    assert plots is view.plots  # the figure, without the view's own buttons
    assert (image.width(), image.height()) == (plots.width() * 2, plots.height() * 2)
    assert image.text("view") == "Attention" and image.text("layer") == "0" and image.text("query") == "[CLS]"
    assert image.text("model") == window.session.loaded.source and image.text("image")


def test_csv_export_records_model_layer_head_query_and_image(qtbot, window, tmp_path: Path) -> None:
    view = show(window, "Attention")
    qtbot.waitUntil(lambda: view.maps is not None, timeout=10000)
    lines = view.export_csv(tmp_path / "attention.csv").read_text().splitlines()
    info = dict(line[2:].split(": ", 1) for line in lines if line.startswith("# "))
    assert info["model"] == window.session.loaded.source and info["layer"] == "0" and info["head"] == "0"
    assert info["query"] == "[CLS]" and info["image"] == window.session.image_name and info["mode"] == "one head"
    rows = list(csv.reader([line for line in lines if not line.startswith("#")]))
    assert rows[0] == ["map", "row", "col", "attention"] and len(rows) == 1 + 64


def test_export_dialog_remembers_its_folder_and_confirms(qtbot, window, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from PySide6.QtWidgets import QFileDialog

    asked: list[str] = []

    def save_name(parent, caption, start, filters):
        asked.append(start)
        return str(tmp_path / "shots" / "prediction.png"), filters

    (tmp_path / "shots").mkdir()
    monkeypatch.setattr(QFileDialog, "getSaveFileName", save_name)
    view = window.views["Prediction"]
    with qtbot.waitSignal(window.session.notice, timeout=5000) as blocker:
        view.ask_export("png")
    assert "prediction.png" in blocker.args[0]
    assert "saved" in window.statusBar().currentMessage()
    view.ask_export("png")
    assert Path(asked[1]).parent == tmp_path / "shots"  # the next dialog opens where the last file went


def test_training_csv_has_validation_points(qtbot, window, tmp_path: Path) -> None:
    view = show(window, "Training")
    view.model_choice.setCurrentIndex(view.model_choice.findData("classroom-tiny"))
    view.steps.setValue(8)
    view.batch.setValue(32)
    view.train_size.setValue(256)
    view.out.setText(str(tmp_path / "run"))
    assert view.start()
    qtbot.waitUntil(lambda: view.runs[0].finished is not None and not view.running, timeout=120000)
    header, rows = view.table()
    assert header == ["run", "split", "step", "loss", "accuracy"]
    assert {row[1] for row in rows} == {"train", "validation"}


def test_app_training_asks_before_replacing_a_saved_run(qtbot, window, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from vit_explorer.gui.views.training import CHANGES, Run

    out = save_tiny(tmp_path / "saved")
    before = (out / "model.safetensors").read_bytes()
    view = show(window, "Training")
    view.out.setText(str(out))
    asked: list[Path] = []
    monkeypatch.setattr(view, "confirm_replace", lambda path: asked.append(path) or False)
    view.runs = [Run("run 1", preset("classroom-tiny"), tmp_path / "first"),
                 Run(CHANGES[0][0], preset("classroom-tiny"), tmp_path / "second")]
    shown = list(view.runs)
    assert not view.start()
    assert asked == [out] and not view.running
    assert (out / "model.safetensors").read_bytes() == before
    assert view.runs == shown  # answering "No" keeps the runs on screen
    compared = save_tiny(out.with_name(f"{out.name}-{CHANGES[0][0].replace(' ', '-')}"))
    view.change.setCurrentIndex(0)
    assert not view.start_comparison()
    assert asked[-1] == compared and view.runs == shown


# ---------------------------------------------------------------------------- parameters, position, compute
def test_parameter_names_and_shapes_are_not_elided(qtbot, window) -> None:
    view = show(window, "Parameters")
    view.bring_up_to_date()
    tree = view.tree
    tree.expandAll()
    qtbot.wait(50)
    metrics = tree.fontMetrics()
    widest = 0
    item = tree.topLevelItem(0)
    while item is not None:
        widest = max(widest, metrics.horizontalAdvance(item.text(1)))
        item = tree.itemBelow(item)
    assert tree.columnWidth(1) >= widest
    assert "multiply-adds" in view.note.text() and "GFLOPs" in view.note.text()  # compute, as papers count it


def test_a_zero_position_table_says_why_the_grid_is_blank(qtbot, window, tmp_path: Path) -> None:
    model = VisionTransformer(preset("classroom-tiny")).eval()
    with __import__("torch").no_grad():
        model.pos_embed.zero_()
    source = save_native(tmp_path / "zero", model, [f"c{i}" for i in range(10)], Preprocess((32, 32)))
    with qtbot.waitSignal(window.session.model_changed, timeout=20000):
        window.load(str(source))
    view = show(window, "Position embeddings")
    view.bring_up_to_date()
    assert "zero" in view.note.text() and "no position embedding" not in view.note.text()


def test_resampled_position_embeddings_say_so(qtbot, window) -> None:
    window.session.set_size((24, 40))
    wait_result(qtbot, window.session)
    view = show(window, "Position embeddings")
    view.bring_up_to_date()
    assert "trained for 8×8, resampled to 6×10" in view.figure.title


# ---------------------------------------------------------------------------- the window
def test_quit_help_and_theme_menus(qtbot, window) -> None:
    from vit_explorer.gui import theme

    actions = {a.text(): a for menu in window.menuBar().findChildren(QMenu) for a in menu.actions()}
    assert actions["Quit"].shortcut() == QKeySequence("Ctrl+Q")
    assert "Keyboard shortcuts" in actions and "About vit-explorer" in actions
    assert actions["Presentation mode"].shortcut() == QKeySequence("F11")
    actions["Dark"].trigger()
    assert QSettings().value("theme") == "dark" and theme.chosen() == "dark"
    def window_lightness() -> int:
        return window.palette().color(window.palette().ColorRole.Window).lightness()

    qtbot.waitUntil(lambda: window_lightness() < 80, timeout=5000)
    actions["Light"].trigger()
    qtbot.waitUntil(lambda: window_lightness() > 180, timeout=5000)
    actions["Quit"].trigger()
    assert not window.isVisible()


def test_text_size_is_scaled_and_remembered(qtbot, window) -> None:
    from vit_explorer.gui import figures

    prediction = window.views["Prediction"]
    before = prediction._drawn.plot.titleLabel.opts["size"]
    window.presentation.step(1)
    window.presentation.step(1)
    after = prediction._drawn.plot.titleLabel.opts["size"]
    assert float(after.removesuffix("pt")) > float(before.removesuffix("pt"))
    assert float(QSettings().value("text_scale")) == pytest.approx(1.3)
    window.presentation.step(0)
    assert figures.title_size() == f"{figures.TITLE_POINTS}pt"


def test_presentation_mode_is_full_screen_with_larger_text(qtbot, window) -> None:
    window.presentation.toggle()
    qtbot.waitUntil(window.isFullScreen, timeout=5000)
    small = window.screen().geometry().height() < 900  # a projector of 768 or 800 lines: one step smaller
    assert not window.source_bar.isVisible() and window.presentation.scale == pytest.approx(1.3 if small else 1.5)
    window.presentation.toggle()
    qtbot.waitUntil(lambda: not window.isFullScreen(), timeout=5000)
    assert window.source_bar.isVisible() and window.presentation.scale == pytest.approx(1.0)


def test_the_samples_box_follows_the_image(qtbot, window, tmp_path: Path) -> None:
    panel = window.image_panel
    if panel.samples.count() < 2:
        pytest.skip("no bundled samples")
    panel.samples.activated.emit(1)  # chosen from the box's list
    wait_result(qtbot, window.session)
    assert window.session.image_name.startswith(panel.samples.itemText(1)) and panel.samples.currentIndex() == 1
    other = tmp_path / "other.png"
    Image.new("RGB", (32, 32), (10, 200, 30)).save(other)
    panel.open_path(str(other))
    assert panel.samples.currentIndex() == 0  # "Samples…", not the name of a sample no longer shown


def test_runs_are_kept_under_one_vit_explorer_folder() -> None:
    from vit_explorer.gui.views.training import runs_folder

    assert runs_folder().parts.count("vit-explorer") == 1


def test_no_layout_warnings_while_views_update(qtbot, window, qapp) -> None:
    """Colour bars used to be looked up with QGraphicsGridLayout::itemAt on empty cells, warning each time."""
    from PySide6.QtCore import qInstallMessageHandler

    messages: list[str] = []
    previous = qInstallMessageHandler(lambda kind, context, text: messages.append(text))
    try:
        view = show(window, "Attention")
        for mode in ("all heads", "mean of heads", "one head"):
            view.mode.setCurrentText(mode)
            qtbot.waitUntil(lambda: view.maps is not None, timeout=10000)
        window.image_panel.random_mask()
        wait_result(qtbot, window.session)
        qtbot.wait(100)
    finally:
        qInstallMessageHandler(previous)
    assert not [m for m in messages if "itemAt" in m]


@pytest.mark.filterwarnings("ignore::vit_explorer.checkpoints.errors.CheckpointWarning")  # the banner shows it
def test_a_model_with_nan_weights_loads_with_a_warning_in_the_banner(qtbot, window, tmp_path: Path) -> None:
    import torch

    model = VisionTransformer(preset("classroom-tiny")).eval()
    with torch.no_grad():
        model.blocks[0].mlp.fc1.weight[0, 0] = float("nan")
    source = save_native(tmp_path / "nan", model, [f"c{i}" for i in range(10)], Preprocess((32, 32)))
    with qtbot.waitSignal(window.session.model_changed, timeout=20000):
        window.load(str(source))
    assert window.message_bar.isVisible() and "blocks.0.mlp.fc1.weight" in window.banner.text()
