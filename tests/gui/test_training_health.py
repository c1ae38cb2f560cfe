"""Issue 29: the Training view draws attention health per logged step: entropy per block with log T, the largest
token norm and the last block's [CLS] thumbnail, each the values a recomputation from captured attention gives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyqtgraph as pg
import torch

from vit_explorer.models import VisionTransformer, preset
from vit_explorer.training import events as ev
from vit_explorer.training.health import attention_health

from .test_training import roomy_training


def started_run(qtbot, window, tmp_path: Path, depth: int):
    """The Training view in a roomy window with one started run of a classroom-tiny model of `depth` blocks."""
    from vit_explorer.gui.session import Run

    roomy_training(qtbot, window)
    view = window.views["Training"]
    config = preset("classroom-tiny", image_size=(32, 32), depth=depth)
    run = Run("run 1", config, tmp_path / "run")
    window.session.set_runs([run])
    view._event(run, ev.Started(10, 5, 0, "cpu", 1, 1000, None))
    return view, run, config


def test_health_plots_show_the_recomputed_values(qtbot, window, tmp_path: Path) -> None:
    view, run, config = started_run(qtbot, window, tmp_path, depth=3)
    torch.manual_seed(0)
    model = VisionTransformer(config)
    pixels = torch.randn(1, 3, 32, 32)
    health = []
    for step in (5, 10):
        with torch.no_grad():  # the model changes between logged steps, as training changes it
            model.blocks[0].attn.qkv.weight.mul_(1.5)
        view._event(run, ev.Step(step, step / 5, 1.0, 0.5, 1e-3, 100.0, None, float(step)))
        health.append(attention_health(model, step, pixels))
        view._event(run, health[-1])
    view.redraw()
    assert {"entropy", "norm"} <= set(view._plots)
    for b in (0, 2):
        x, y = view._health[f"entropy:block {b}"].getData()
        np.testing.assert_allclose(x, [5, 10])
        np.testing.assert_allclose(y, [h.entropy[b] for h in health], rtol=1e-6)
    _, uniform = view._health["entropy:uniform (log T)"].getData()
    np.testing.assert_allclose(uniform, np.log(model.layout().num_tokens))
    _, largest = view._health["norm:run 1"].getData()
    np.testing.assert_allclose(largest, [h.max_norm.max() for h in health], rtol=1e-6)
    assert view._thumb is not None
    np.testing.assert_allclose(view._thumb[1].image, health[-1].cls_attention, rtol=1e-6)
    assert "step 10" in view._thumb[0].titleLabel.text


def test_close_entropies_keep_their_block_names_apart(qtbot, window, tmp_path: Path) -> None:
    """Early in a run the blocks' entropies lie within a few hundredths of a nat: each line's name at its end stays
    readable (no two names overlap) and beside its own line (within the group's height of its end)."""
    view, run, config = started_run(qtbot, window, tmp_path, depth=4)
    flat = np.full((8, 8), 1 / 64, np.float32)
    for step, entropy in ((5, [1.0, 2.5, 2.51, 2.52]), (10, [1.2, 2.49, 2.5, 2.52])):
        view._event(run, ev.Step(step, step / 5, 1.0, 0.5, 1e-3, 100.0, None, float(step)))
        view._event(run, ev.AttentionHealth(step, np.array(entropy), 4.2, np.ones(4), flat))
    view.redraw()
    qtbot.wait(50)
    labels = [view._entropy_labels[f"block {b}"] for b in range(4)]
    boxes = [label.sceneBoundingRect() for label in labels]
    assert all(box.height() > 5 for box in boxes)
    for i in range(4):
        for j in range(i + 1, 4):
            overlap = boxes[i].intersected(boxes[j])
            assert overlap.height() < 1 or overlap.width() < 1, (i, j, boxes[i], boxes[j])
    vb = view._plots["entropy"].getViewBox()
    for b, label in enumerate(labels):
        end = vb.mapViewToScene(pg.Point(10, [1.2, 2.49, 2.5, 2.52][b]))
        assert abs(label.sceneBoundingRect().bottom() - end.y()) <= 3 * boxes[b].height(), b
