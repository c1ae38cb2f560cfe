"""The least a mask click can cost in a Python and Qt process, as a ratio to timm's forward of the same model.

`scripts/gui_latency.py` times the app's click: from the press to the Prediction and Attention views painted. This
bench times what no app of this kind can skip, under the same conditions (offscreen, one thread, 60 ms idle before
each click, timm's forward timed just before it): the app's own forward pass for what those views draw
(`run_forward` with the Attention view's needs, on the calling thread: no worker hop) and a repaint of three plain
QPainter widgets (the patch grid with the masked patches, five bars with their labels, the map at the app's size
with a colour bar and its tick labels), no pyqtgraph and no signals. If this floor is above 1.5, no way of drawing
the views meets issue 27's goal on that model; the forward alone is printed too.

    PYTHONPATH=. OMP_NUM_THREADS=1 QT_QPA_PLATFORM=offscreen python bench/bench_click_floor.py
    PYTHONPATH=. OMP_NUM_THREADS=1 QT_QPA_PLATFORM=offscreen python bench/bench_click_floor.py --preset vit-s16
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # timm_twin: timm's copy of our model


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default=None, help="a random-weight model of this preset (default: the bundled)")
    parser.add_argument("--clicks", type=int, default=30)
    args = parser.parse_args()
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PIL import Image
    from PySide6 import QtCore, QtGui, QtWidgets
    from timm_twin import same_logits, timm_twin

    from vit_explorer.checkpoints import Preprocess, load
    from vit_explorer.explore.forward import Inputs, Needs, run_forward
    from vit_explorer.models import VisionTransformer, preset
    from vit_explorer.paths import BUNDLED_MODEL

    torch.set_num_threads(1)
    app = QtWidgets.QApplication([])
    if args.preset:
        from vit_explorer.checkpoints import LoadedModel

        model = VisionTransformer(preset(args.preset)).eval()
        loaded = LoadedModel(model, model.config, [f"class {i}" for i in range(model.config.num_classes)],
                             Preprocess(model.config.image_size))
    else:
        loaded = load(str(BUNDLED_MODEL), device="cpu")
    cfg = loaded.config
    twin = timm_twin(loaded.model)
    x = torch.randn(1, cfg.in_chans, *cfg.image_size)
    diff = same_logits(loaded.model, twin, x)
    gh, gw = cfg.image_size[0] // cfg.patch_size, cfg.image_size[1] // cfg.patch_size
    image = Image.fromarray(np.random.default_rng(0).integers(0, 255, (*cfg.image_size, 3), np.uint8))
    state = {"map": np.zeros((gh, gw), np.float32), "probs": np.zeros(cfg.num_classes),
             "mask": np.zeros((gh, gw), bool)}
    painted: set[str] = set()
    ramp = np.stack([np.linspace(0, 255, 256), np.linspace(0, 128, 256), np.linspace(255, 0, 256),
                     np.full(256, 255)], 1).astype(np.uint8)  # (256, 4) RGBA

    class Panel(QtWidgets.QWidget):
        def paintEvent(self, event: QtGui.QPaintEvent) -> None:  # noqa: N802 - Qt's name
            painter = QtGui.QPainter(self)
            painter.fillRect(self.rect(), QtGui.QColor(128, 128, 128))
            side = min(self.width(), self.height()) / max(gh, gw)
            for row, col in zip(*np.nonzero(state["mask"]), strict=True):
                painter.fillRect(QtCore.QRectF(col * side, row * side, side, side), QtGui.QColor(90, 90, 90))
            painter.end()

    class Bars(QtWidgets.QWidget):
        def paintEvent(self, event: QtGui.QPaintEvent) -> None:  # noqa: N802
            painter = QtGui.QPainter(self)
            probs = state["probs"]
            for i, c in enumerate(np.argsort(-probs)[:5]):
                painter.fillRect(QtCore.QRectF(100, 10 + i * 40, 300 * probs[c], 30), QtGui.QColor(60, 120, 200))
                painter.drawText(10, 30 + i * 40, loaded.labels[c][:12])
                painter.drawText(410, 30 + i * 40, f"{probs[c]:.1%}")
            painter.end()
            painted.add("prediction")

    class Map(QtWidgets.QWidget):
        def paintEvent(self, event: QtGui.QPaintEvent) -> None:  # noqa: N802
            painter = QtGui.QPainter(self)
            values = state["map"]
            low, high = float(values.min()), float(values.max())
            rgba = np.ascontiguousarray(ramp[((values - low) / max(high - low, 1e-12) * 255).astype(np.uint8)])
            picture = QtGui.QImage(rgba.data, gw, gh, 4 * gw, QtGui.QImage.Format.Format_RGBA8888)
            side = min(self.width() - 100, self.height() - 40)
            painter.drawImage(QtCore.QRectF(10, 30, side, side), picture)
            painter.drawText(10, 20, "attention · layer 0 · head 0 · query [CLS]")
            gradient = QtGui.QLinearGradient(0, 30 + side, 0, 30)
            gradient.setColorAt(0, QtGui.QColor(0, 0, 255))
            gradient.setColorAt(1, QtGui.QColor(255, 128, 0))
            painter.fillRect(QtCore.QRectF(side + 20, 30, 20, side), gradient)
            for i in range(5):
                painter.drawText(int(side + 45), int(30 + side - side * i / 4), f"{low + (high - low) * i / 4:.3f}")
            painter.end()
            painted.add("attention")

    window = QtWidgets.QWidget()
    row = QtWidgets.QHBoxLayout(window)
    panel, bars, shown = Panel(), Bars(), Map()
    for widget in (panel, bars, shown):
        row.addWidget(widget)
    window.resize(1600, 1000)  # as scripts/gui_latency.py sizes the app's window
    window.show()
    for _ in range(20):
        app.processEvents()
        time.sleep(0.01)
    needs = Needs(maps=frozenset({0}))  # the Attention view's: one head of block 0
    head_mask = np.ones((cfg.depth, cfg.num_heads), np.float32)
    previous = None
    clicks, forwards, references = [], [], []
    for i in range(args.clicks + 1):  # the first warms up
        for _ in range(3):  # idle before the click, as gui_latency.py does
            app.processEvents()
            time.sleep(0.02)
        start = time.perf_counter()
        with torch.no_grad():
            twin(x)
        reference = time.perf_counter() - start
        start = time.perf_counter()
        state["mask"][divmod(i * 7 % (gh * gw), gw)] ^= True
        panel.update()
        inputs = Inputs(loaded, image, tuple(cfg.image_size), state["mask"].copy(), head_mask, 1, 1, needs, ())
        result = previous = run_forward(inputs, np.zeros(cfg.num_classes), previous)
        forward = time.perf_counter() - start
        state["map"] = result.maps[0][0, 0, 0, result.layout.num_prefix_tokens:].reshape(gh, gw).numpy()
        state["probs"] = result.probs
        painted.clear()
        bars.update()
        shown.update()
        while painted != {"prediction", "attention"}:
            app.processEvents()
        if i:
            clicks.append(time.perf_counter() - start)
            forwards.append(forward)
            references.append(reference)
    click, forward, reference = (float(np.median(v)) for v in (clicks, forwards, references))
    name = args.preset or "bundled classroom"
    print(f"{name}: timm's forward {reference * 1000:.2f} ms (logits within {diff:.1e}); the app's forward pass "
          f"{forward * 1000:.2f} ms ({forward / reference:.2f}x); forward + three plain widgets painted "
          f"{click * 1000:.2f} ms: floor {click / reference:.2f}x (goal <= 1.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
