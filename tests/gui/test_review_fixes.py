"""What a review of the GUI found, each driven through the window: stale results of another model or input,
controls that fell off the grid, lesson steps that half-applied, dialogs answered "No" that had already acted."""

from __future__ import annotations

from pathlib import Path

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
