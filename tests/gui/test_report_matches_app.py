"""One source of truth: every figure the headless report and the app both show holds the same numbers,
for ViT, DeiT distilled, CaiT and a model without [CLS] (GAP), on square and rectangular inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vit_explorer.checkpoints import load
from vit_explorer.explore.figures import arrays
from vit_explorer.report import build_report

from .conftest import open_window, save_tiny, wait_result

MODELS = {  # name -> overrides of the classroom-tiny preset (patch 4, native 32x32)
    "vit": {},
    "deit-distilled": {"prefix_tokens": "cls+dist"},
    "cait": {"pos_embed_prefix": False, "class_attn_depth": 2, "talking_heads": True, "layer_scale_init": 0.5},
    "gap": {"prefix_tokens": "none", "pool": "gap"},
}
SIZES = {"square": (32, 32), "rectangular": (24, 40)}


def assert_same(app: dict[str, np.ndarray], report: dict[str, np.ndarray], what: str) -> None:
    assert app.keys() == report.keys(), what
    for key in app:
        np.testing.assert_array_equal(app[key], report[key], err_msg=f"{what}: {key}")


@pytest.mark.parametrize("size", list(SIZES), ids=list(SIZES))
@pytest.mark.parametrize("name", list(MODELS), ids=list(MODELS))
def test_report_and_app_draw_the_same_numbers(qtbot, tmp_path: Path, sample_png: Path, name: str,
                                              size: str) -> None:
    source = save_tiny(tmp_path / name, **MODELS[name])
    image = Image.open(sample_png).convert("RGB")
    report = build_report(load(source), image=image, image_info={"kind": "file", "path": str(sample_png)},
                          resolution=SIZES[size])
    figures = {name: figure for name, (figure, _) in report.figures.items()}

    window = open_window(qtbot, str(source))
    session = window.session
    window.image_panel.open_path(str(sample_png))
    session.set_size(SIZES[size])
    result = wait_result(qtbot, session)
    layers = result.inputs.loaded.config.depth

    def show(title: str):
        window.docks[title].raise_()
        return window.views[title]

    attention = show("Attention")
    attention.mode.setCurrentText("mean of heads")
    for layer in range(layers):  # the report's per-layer panels are the app's layers, one at a time
        session.select(layer=layer)
        qtbot.waitUntil(lambda: attention.maps is not None, timeout=10000)
        np.testing.assert_array_equal(attention.maps[0], figures["attention_layers.png"].maps[layer])
    assert figures["attention_layers.png"].titles[0].startswith("layer 0")
    attention.mode.setCurrentText("rollout")
    qtbot.waitUntil(lambda: attention.figure is not None and "rollout" in attention.figure.titles[0], timeout=10000)
    assert_same(arrays(attention.figure), arrays(figures["rollout.png"]), "rollout")
    attention.mode.setCurrentText("mean attention distance")
    qtbot.waitUntil(lambda: attention.distance is not None, timeout=10000)
    np.testing.assert_array_equal(attention.distance.reshape(-1), figures["attention_distance.png"].y)
    if "class_attention.png" in figures:
        attention.mode.setCurrentText("class attention (CaiT)")
        for block in range(2):
            session.select(layer=block)
            np.testing.assert_array_equal(attention.maps.mean(axis=0), figures["class_attention.png"].maps[block])

    position = show("Position embeddings")
    position.bring_up_to_date()
    if "pe_similarity.png" in figures:
        assert_same(arrays(position.figure), arrays(figures["pe_similarity.png"]), "position embeddings")
    else:
        assert position.figure is None  # no additive PE: neither draws a grid

    prediction = show("Prediction")
    assert_same(arrays(prediction.figure), arrays(figures["prediction.png"]), "prediction")
    assert prediction.figure.labels == figures["prediction.png"].labels

    embeddings = show("Embeddings")
    qtbot.waitUntil(lambda: embeddings.facts is not None and embeddings.facts.model_id == session.model_id,
                    timeout=10000)
    tiles = next(figure for name, figure in figures.items() if name.endswith(("components.png", "filters.png")))
    assert_same(arrays(embeddings.facts.filters.figure()), arrays(tiles), "stem filters")
    if "token_similarity.png" in figures:
        assert_same(arrays(embeddings.facts.tokens_figure()), arrays(figures["token_similarity.png"]),
                    "token similarity")

    parameters = show("Parameters")
    parameters.bring_up_to_date()
    assert parameters.params.rows == report.params.rows
    assert_same(arrays(parameters.tables.params_figure()), arrays(figures["parameters.png"]), "parameters")
    window.close()
