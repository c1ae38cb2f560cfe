"""The views driven through their widgets: attention, heads, builder, position embeddings, other checkpoints."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF

from vit_explorer.models import preset

from .conftest import wait_result


def show(window, title: str):
    window.docks[title].raise_()
    return window.views[title]


def test_switch_layer_head_and_modes(qtbot, window) -> None:
    view = show(window, "Attention")
    session = window.session
    qtbot.waitUntil(lambda: view.maps is not None, timeout=10000)
    view.layer.setValue(1)
    view.head.setValue(1)
    assert (session.layer, session.head) == (1, 1)
    qtbot.waitUntil(lambda: view.maps is not None, timeout=10000)  # layer 1's maps: a forward pass computes them
    assert set(session.result.maps) == {1}  # only the block on screen keeps its maps
    expected = session.result.maps[1][0, 1, 0, 1:].numpy().reshape(8, 8)  # [CLS] row of head 1
    np.testing.assert_allclose(view.maps[0], expected, rtol=1e-6)
    window.step_layer(-1)
    assert view.layer.value() == 0
    window.step_layer(1)
    window.step_layer(1)  # stays at the last layer
    assert view.layer.value() == 1
    view.mode.setCurrentText("all heads")
    assert view.maps.shape == (2, 8, 8) and len(view._drawn.heats) == 2
    session.select(query=(3, 4))  # a chosen patch is the query at once
    row = 1 + 3 * 8 + 4  # token of patch (3, 4) after [CLS]
    np.testing.assert_allclose(view.maps[1], session.result.maps[1][0, 1, row, 1:].numpy().reshape(8, 8),
                               rtol=1e-6)
    view.mode.setCurrentText("rollout")
    qtbot.waitUntil(lambda: view.maps is not None and len(view.maps) == 1, timeout=10000)
    view.mode.setCurrentText("mean attention distance")
    qtbot.waitUntil(lambda: view.distance is not None, timeout=10000)
    assert view.distance.shape == (2, 2)
    assert view.table()[1][0][0] == 0


def test_toggle_head_changes_prediction(qtbot, window) -> None:
    view = show(window, "Heads")
    session = window.session
    before = session.result.probs.copy()
    qtbot.waitUntil(lambda: view.importance is not None, timeout=10000)
    assert view.importance.shape == (2, 2)
    view.buttons[1][0].click()
    assert session.head_mask[1, 0] == 0
    result = wait_result(qtbot, session)
    assert not np.allclose(result.probs, before, atol=1e-5)
    assert view.buttons[1][0].text() == "off"
    assert "1 heads off" in window.views["Prediction"].change.text()
    view.all_on()
    np.testing.assert_allclose(wait_result(qtbot, session).probs, before, atol=1e-5)


def test_build_model_from_parts(qtbot, window) -> None:
    view = show(window, "Model builder")
    view.pos_embed.setCurrentIndex(view.pos_embed.findData("rope"))
    view.prefix.setCurrentIndex(view.prefix.findData("none"))
    view.stem.setCurrentIndex(view.stem.findData("conv"))
    view.depth_box.setValue(2)
    view.width_box.setValue(64)
    view.heads.setValue(2)
    view.layer_scale.setChecked(True)
    expected = preset("classroom", pos_embed="rope", prefix_tokens="none", pool="gap", stem="conv", depth=2,
                      embed_dim=64, num_heads=2, layer_scale_init=1e-5)
    assert f"{expected.estimate_parameters():,} parameters" in view.estimate.text()
    view.heads.setValue(3)  # 64 is not divisible by 3
    assert "divisible" in view.estimate.text() and not view.build_button.isEnabled()
    view.heads.setValue(2)
    with qtbot.waitSignal(window.session.model_changed, timeout=20000):
        view.build_button.click()
    loaded = window.session.loaded
    assert loaded.config == expected
    assert sum(p.numel() for p in loaded.model.parameters()) == expected.estimate_parameters()
    result = wait_result(qtbot, window.session)
    assert result.layout.num_prefix_tokens == 0
    attention = show(window, "Attention")  # no [CLS]: the map is the attention each patch receives
    qtbot.waitUntil(lambda: attention.maps is not None, timeout=10000)
    assert attention.maps.shape[-2:] == (8, 8)


def test_position_view_click_and_compare(qtbot, window) -> None:
    view = show(window, "Position embeddings")
    qtbot.waitUntil(lambda: view.mosaic is not None, timeout=10000)
    assert view.sim.patches.shape == (8, 8, 8, 8) and "cls" in view.sim.prefix
    mosaic = view.mosaic
    qtbot.waitUntil(lambda: min(mosaic.sceneBoundingRect().width(), mosaic.sceneBoundingRect().height()) > 71,
                    timeout=5000)  # laid out on screen
    tile_centre = mosaic.mapToScene(QPointF(2 * 9 + 4, 5 * 9 + 4))  # 8-cell tiles with 1-cell separators

    class Click:
        def scenePos(self) -> QPointF:  # noqa: N802
            return tile_centre

    view._clicked(Click())
    assert view.patch == (5, 2)
    np.testing.assert_array_equal(view._drawn.maps[0][1].image, view.sim.patches[5, 2])
    view.compare.setCurrentIndex(view.compare.findData("sincos_2d"))
    qtbot.waitUntil(lambda: view.other is not None, timeout=10000)
    assert view.other.patches.shape == (8, 8, 8, 8)


def test_deit_heads_and_token_similarity(qtbot, window, deit_checkpoint: Path) -> None:
    with qtbot.waitSignal(window.session.model_changed, timeout=20000):
        window.load(str(deit_checkpoint))
    result = wait_result(qtbot, window.session)
    assert set(result.head_probs) == {"cls", "dist"}
    prediction = window.views["Prediction"]
    # one chart: bars = the average, symbols = each head on the same classes
    plot, bars = prediction._drawn.plot, prediction._drawn.bars
    title = plot.titleLabel.text.replace("<br>", " ")  # wrapped to the dock's width
    assert "average of both heads" in title and "class head" in title and "distillation head" in title
    order = np.argsort(-result.probs)[:5]
    np.testing.assert_allclose(bars.opts["width"], result.probs[order])
    marks = [item.data["x"] for item in plot.items if isinstance(item, pg.ScatterPlotItem)]
    np.testing.assert_allclose(marks[0], result.head_probs["cls"][order])
    np.testing.assert_allclose(marks[1], result.head_probs["dist"][order])
    view = show(window, "Embeddings")
    qtbot.waitUntil(lambda: view.facts is not None and "cos([CLS], [DIST])" in view.facts.tokens, timeout=10000)
    assert view.facts.tokens["cos([CLS], [DIST])"].shape == (3,)  # input + 2 blocks
    assert len(view._curves) == 2  # [CLS] with the patches, [CLS] with [DIST]
    assert view.facts.unfold_max_diff < 1e-5
    assert "unchanged" in view.facts_label.text()


def test_hf_and_timm_checkpoints(qtbot, window, hf_vit_folder: Path, timm_cait_folder: Path) -> None:
    with qtbot.waitSignal(window.session.model_changed, timeout=30000):
        window.load(str(hf_vit_folder))
    result = wait_result(qtbot, window.session)
    assert window.session.loaded.kind == "hf" and window.session.loaded.labels == ["cat", "dog", "bird"]
    assert result.layout.grid == (4, 4)
    with qtbot.waitSignal(window.session.model_changed, timeout=30000):
        window.load(str(timm_cait_folder))
    result = wait_result(qtbot, window.session)
    assert len(result.class_attentions) == 2
    view = show(window, "Attention")
    view.mode.setCurrentText("class attention (CaiT)")
    assert view.maps.shape == (4, 4, 4)  # heads, grid
    view.mode.setCurrentText("rollout")  # CaiT: rollout through the class-attention blocks
    qtbot.waitUntil(lambda: view.maps is not None and len(view.maps) == 1, timeout=10000)
    assert 0 < view.maps[0].sum() <= 1 + 1e-5  # the patches' share of [CLS] (the rest is [CLS] itself)


def test_attention_opacity_and_map_only(qtbot, window) -> None:
    view = show(window, "Attention")
    qtbot.waitUntil(lambda: view.maps is not None, timeout=10000)
    view.opacity.setValue(25)
    assert view._drawn.heats[0].opacity() == 0.25
    view.raw.setChecked(True)  # the map alone, as a heat map with the patch grid
    assert view._drawn.photos == [] and view.maps.shape == (1, 8, 8)


def test_builder_starts_from_the_open_model(qtbot, window, deit_checkpoint: Path) -> None:
    with qtbot.waitSignal(window.session.model_changed, timeout=20000):
        window.load(str(deit_checkpoint))
    view = show(window, "Model builder")
    view.from_current()
    assert view.config() == window.session.loaded.config  # every field, also those without a control
    view.depth_box.setValue(1)
    assert view.config() == window.session.loaded.config.replace(depth=1)


def test_features_view_every_mode(qtbot, window) -> None:
    from vit_explorer.explore.figures import BarsFigure, ImagesFigure, LinesFigure, MapsFigure

    view = show(window, "Features")
    for mode, kind, title in (("PCA of patch features", ImagesFigure, "First three principal components"),
                              ("[CLS] attention per head", MapsFigure, "[CLS] attention in the last block"),
                              ("token norms", LinesFigure, "Token norms"),
                              ("patch correspondence", ImagesFigure, "Patch correspondence"),
                              ("nearest images", BarsFigure, "Nearest images"),
                              ("outliers and register neurons", LinesFigure, "Patch-token norms per state")):
        view.mode.setCurrentText(mode)
        view.bring_up_to_date()
        assert isinstance(view.figure, kind), (mode, view.note.text())
        assert (view.figure.heading if kind is MapsFigure else view.figure.title).startswith(title), mode
    view.mode.setCurrentText("PCA of patch features")
    view.background.setChecked(True)
    view.bring_up_to_date()
    assert "background removed" in view.figure.title


def test_features_of_a_model_without_classifier(qtbot, window, tmp_path: Path) -> None:
    from .conftest import save_tiny

    source = save_tiny(tmp_path / "features", num_classes=0, reg_tokens=2)
    with qtbot.waitSignal(window.session.model_changed, timeout=20000):
        window.load(str(source))
    wait_result(qtbot, window.session)
    prediction = window.views["Prediction"]
    assert "no classifier" in prediction.change.text() and "Pooled embedding" in prediction.figure.title
    view = show(window, "Features")
    view.mode.setCurrentText("nearest images")
    view.bring_up_to_date()
    assert view.extra is not None and "Pooled embedding" in view.extra.title
    view.mode.setCurrentText("token norms")
    view.bring_up_to_date()
    assert "[REG1]" in view.figure.series


def test_compare_two_models_on_the_same_masked_image(qtbot, window, deit_checkpoint: Path) -> None:
    from vit_explorer.checkpoints import load

    mask = np.zeros(window.session.grid, bool)
    mask[2:5, 2:5] = True
    window.session.set_mask(mask)
    wait_result(qtbot, window.session)
    view = show(window, "Compare")
    window.session.set_compared(load(deit_checkpoint), "deit")
    view.bring_up_to_date()
    mine, other = view.sides
    assert other.name == "deit" and mine.prediction is not None and other.prediction is not None
    assert (other.result.inputs.mask == mask).all() and other.result.inputs.image is window.session.image
    assert other.similarity is not None and other.rollout.maps.shape == (1, 8, 8)
    assert mine.result is window.session.result  # the app's own pass, not run a second time
    assert view.table()[1]
