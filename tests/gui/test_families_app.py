"""The app opens the families of issue 18 (a hybrid R50 model from timm, a DINOv2 classifier from transformers, a
bf16 checkpoint) and every view draws for each; the status bar says the dtype the model runs in."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from .conftest import wait_result


def _hybrid(folder: Path) -> Path:
    import timm

    from tests.checkpoints.conftest import randomize, save_timm_hub

    model = timm.create_model("vit_base_r50_s16_224", pretrained=False, embed_dim=48, depth=2, num_heads=2,
                              img_size=64, num_classes=7)
    return save_timm_hub(randomize(model), folder)


def _dinov2_classifier(folder: Path, dtype: torch.dtype = torch.float32) -> Path:
    from transformers import Dinov2Config, Dinov2ForImageClassification

    from tests.checkpoints.conftest import LABELS, randomize

    config = Dinov2Config(hidden_size=48, num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=8,
                          mlp_ratio=2, id2label=dict(enumerate(LABELS)))
    randomize(Dinov2ForImageClassification(config)).to(dtype).save_pretrained(folder)
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("family", ["hybrid", "dinov2_classifier", "bf16"])
def test_every_view_draws_for_the_family(qtbot, window, tmp_path: Path, family: str) -> None:
    make = {"hybrid": _hybrid, "dinov2_classifier": _dinov2_classifier,
            "bf16": lambda folder: _dinov2_classifier(folder, torch.bfloat16)}[family]
    source = make(tmp_path / family)
    errors: list[str] = []
    window.session.error.connect(errors.append)
    with qtbot.waitSignal(window.session.model_changed, timeout=30000):
        window.load(str(source))
    result = wait_result(qtbot, window.session)
    dtype = "bfloat16" if family == "bf16" else "float32"
    assert window.device_label.text() == f"device: cpu · {dtype}"
    assert result.layout.grid == ((4, 4) if family == "hybrid" else (4, 4))
    for title, view in window.views.items():
        png = view.export_png(tmp_path / f"{title}.png")
        assert png.stat().st_size > 1000, title
    assert not errors, errors


def test_the_app_upcasts_with_dtype(qtbot, tmp_path: Path) -> None:
    """`vit-explorer SOURCE --dtype float32`: a bf16 checkpoint opens in float32, and the status bar says so."""
    from vit_explorer.gui.app import make_app
    from vit_explorer.gui.main_window import MainWindow

    source = _dinov2_classifier(tmp_path / "bf16", torch.bfloat16)
    make_app()
    win = MainWindow(str(source), "float32")
    qtbot.addWidget(win)
    win.show()
    qtbot.waitUntil(lambda: win.session is not None and win.session.result is not None, timeout=30000)
    assert win.session.loaded.dtype == torch.float32 and win.device_label.text() == "device: cpu · float32"
    win.close()
