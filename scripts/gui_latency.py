"""Measure the app's start-up and mask-click latency (offscreen).

    python scripts/gui_latency.py                 # launch to first paint / first prediction, bundled model
    python scripts/gui_latency.py --clicks 10 --preset vit-s16
        # latency from a mask click to the updated prediction and attention map, for a random-weight
        # model of that preset (saved as a native checkpoint in a temporary folder)
    python scripts/gui_latency.py --training 20
        # the longest gap between 10 ms timer ticks while the Training view trains with its default recipe
        # for that many seconds, its curves redrawing (the event loop must stay under 50 ms)

Start-up runs in a fresh interpreter (imports included), like `vit-explorer` does.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))  # timm_twin: timm's copy of our model


def child(start: float, source: str | None) -> None:
    """The app as `run_app` opens it, reporting when it first paints and first predicts."""
    from PySide6.QtCore import QEvent, QObject, QTimer

    from vit_explorer.gui.app import make_app
    from vit_explorer.gui.main_window import MainWindow

    app = make_app()
    times: dict[str, float] = {}

    class FirstPaint(QObject):
        def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802
            if event.type() == QEvent.Type.Paint and "paint" not in times:
                times["paint"] = time.time() - start
            return False

    window = MainWindow(source)
    spy = FirstPaint()
    window.installEventFilter(spy)
    window.show()

    def ready() -> None:
        window.session.result_ready.connect(lambda result: finish())

    def finish() -> None:
        if "prediction" not in times:
            times["prediction"] = time.time() - start
            print(json.dumps(times))
            app.quit()

    window.ready.connect(ready)
    QTimer.singleShot(120_000, app.quit)  # a model that never loads must not hang the measurement
    app.exec()


def startup(source: str | None) -> dict[str, float]:
    start = time.time()
    cmd = [sys.executable, __file__, "--child", str(start)] + (["--source", source] if source else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "QT_QPA_PLATFORM": os.environ.get("QT_QPA_PLATFORM", "offscreen")})
    return json.loads(out.stdout.strip().splitlines()[-1])


def open_window(source: str | None) -> tuple[Any, Any]:
    """The app and its window at 1600x1000 on `source`, once the first prediction is in."""
    from PySide6.QtCore import Qt

    from vit_explorer.gui.app import make_app
    from vit_explorer.gui.main_window import MainWindow

    app = make_app()
    window = MainWindow(source)
    window.setWindowState(Qt.WindowState.WindowNoState)  # this size, not maximised to the screen's
    window.resize(1600, 1000)
    window.show()
    while window.session is None or window.session.result is None:
        app.processEvents()
        time.sleep(0.005)
    return app, window


def click_latency(source: str | None, clicks: int, reference: Callable[[], object]) -> tuple[list[float], list[float]]:
    """(click seconds, reference seconds): from toggling a patch to the prediction and attention views having painted
    the new result, as the app's own event loop paints them (no forced repaint: a paint the loop would do anyway is
    not done twice); and `reference()` timed once just before each click, so the machine's load hits both alike."""
    from PySide6.QtCore import QEvent, QEventLoop, QObject, QPointF, QTimer

    app, window = open_window(source)
    session, panel = window.session, window.image_panel
    window.docks["Attention"].raise_()
    attention = window.views["Attention"]
    p = session.loaded.config.patch_size
    gh, gw = session.grid
    loop = QEventLoop()  # waits without spinning, as the app's own event loop does
    viewports = {window.views[name].plots.viewport(): name for name in ("Prediction", "Attention")}
    arrived: list[bool] = [False]
    painted: set[str] = set()
    seen: set[str] = set()  # the views painted at all (the window is on screen)

    def result(_: object) -> None:  # after the views' own slots: the Prediction view has drawn it
        arrived[0] = True
        painted.clear()

    class Painted(QObject):
        def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802
            name = viewports.get(obj)
            if name and event.type() == QEvent.Type.Paint:
                seen.add(name)
            if name and event.type() == QEvent.Type.Paint and arrived[0]:
                if name == "Prediction" or not attention._refresh_pending:  # the Attention view draws a turn later
                    painted.add(name)
                    if len(painted) == len(viewports):
                        QTimer.singleShot(0, loop.quit)  # once this paint is done
            return False

    session.result_ready.connect(result)
    spy = Painted()
    for viewport in viewports:
        viewport.installEventFilter(spy)
    deadline = time.perf_counter() + 20
    while (seen != set(viewports.values()) or session.working()) and time.perf_counter() < deadline:
        app.processEvents()  # both views on screen and no pass left over from opening, before the first click
        time.sleep(0.01)
    latencies, references = [], []
    for i in range(clicks + 1):  # the first click warms up
        for _ in range(3):  # idle before the click, as a person's click finds the app
            app.processEvents()
            time.sleep(0.02)
        t0 = time.perf_counter()
        reference()
        if i:
            references.append(time.perf_counter() - t0)
        row, col = divmod(i * 7 % (gh * gw), gw)
        arrived[0] = False
        t0 = time.perf_counter()
        panel.press(QPointF((col + 0.5) * p, (row + 0.5) * p), start=True)
        timeout = QTimer()
        timeout.setSingleShot(True)
        timeout.timeout.connect(loop.quit)
        timeout.start(5000)
        loop.exec()
        timeout.stop()
        missing = set(viewports.values()) - painted  # the warm-up click may find a view still settling
        assert not i or not missing, (f"click {i}: {sorted(missing)} not painted in 5 s (result "
                                      f"{'arrived' if arrived[0] else 'did not arrive'})")
        if i:
            latencies.append(time.perf_counter() - t0)
    window.close()
    return latencies, references


def timm_forward(model: Any) -> tuple[Callable[[], object], float]:
    """(one plain forward, largest logit difference): timm's VisionTransformer carrying `model`'s weights and stem
    (bench/timm_twin.py) on one input (batch 1, no grad, in this process and on its threads), what a click's latency
    is compared with, and how far its logits are from ours on that input (checked under 1e-3)."""
    import torch
    from timm_twin import same_logits, timm_twin

    twin = timm_twin(model)
    cfg = model.config
    x = torch.randn(1, cfg.in_chans, *cfg.image_size)  # (1, C, H, W)
    diff = same_logits(model, twin, x)

    def forward() -> object:
        with torch.no_grad():
            return twin(x)

    for _ in range(3):  # warm up
        forward()
    return forward, diff


def training_gaps(source: str | None, seconds: float) -> np.ndarray:
    """Milliseconds between 10 ms timer ticks while the Training view runs its default recipe."""
    from PySide6.QtCore import QEventLoop, QTimer

    app, window = open_window(source)
    window.docks["Training"].raise_()
    view = window.views["Training"]
    view.out.setText(str(Path(tempfile.mkdtemp()) / "run"))
    assert view.start(), "the training run did not start"
    while not view.runs or not view.runs[0].steps:  # past building the data and the first step
        app.processEvents()
        time.sleep(0.005)
    ticks: list[float] = []
    timer = QTimer()
    timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
    timer.start(10)
    loop = QEventLoop()
    QTimer.singleShot(int(seconds * 1000), loop.quit)
    loop.exec()
    timer.stop()
    steps = len(view.runs[0].steps)
    view.stop()
    while view.running:
        app.processEvents()
        time.sleep(0.005)
    window.close()
    print(f"{steps} training steps recorded")
    return np.diff(ticks) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--source", default=None, help="checkpoint to open (default: the bundled model)")
    parser.add_argument("--preset", default=None, help="measure clicks on a random-weight model of this preset")
    parser.add_argument("--clicks", type=int, default=0, help="measure this many mask clicks instead of start-up")
    parser.add_argument("--training", type=float, default=0, help="measure the event loop while training this long (s)")
    args = parser.parse_args()
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    if args.child is not None:
        child(args.child, args.source)
        return 0
    from vit_explorer.paths import BUNDLED_MODEL

    source = args.source
    if source is None and args.preset is None and not (BUNDLED_MODEL / "vit_explorer.json").exists():
        print(f"{BUNDLED_MODEL} is missing: measuring a random-weight classroom model instead")
        args.preset = "classroom"
    if args.preset:
        from vit_explorer.checkpoints import Preprocess, save_native
        from vit_explorer.models import VisionTransformer, preset

        model = VisionTransformer(preset(args.preset)).eval()
        source = str(save_native(Path(tempfile.mkdtemp()) / args.preset, model,
                                 [f"class {i}" for i in range(model.config.num_classes)],
                                 Preprocess(model.config.image_size)))
    if args.training:
        gaps = training_gaps(source, args.training)
        print(f"while training: {len(gaps) + 1} ticks of 10 ms, longest gap {gaps.max():.1f} ms, "
              f"99th percentile {np.percentile(gaps, 99):.1f} ms, median {np.median(gaps):.1f} ms")
        return 0
    if not args.clicks:
        times = [startup(source) for _ in range(3)]
        for key in ("paint", "prediction"):
            values = sorted(t[key] for t in times)
            print(f"launch to first {key}: median {values[1]:.2f} s (runs: {', '.join(f'{v:.2f}' for v in values)})")
        return 0
    from vit_explorer.checkpoints import load

    reference, diff = timm_forward(load(source or str(BUNDLED_MODEL), device="cpu").model)
    latencies, references = click_latency(source, args.clicks, reference)
    median, plain = float(np.median(latencies)), float(np.median(references))
    ms = [f"{v * 1000:.0f}" for v in sorted(latencies)]
    print(f"mask click -> prediction + attention painted ({args.preset or source or 'bundled'}): "
          f"median {median * 1000:.1f} ms, all (ms): {', '.join(ms)}")
    print(f"timm's forward of the same model (its weights and stem; logits differ by at most {diff:.1e}), timed "
          f"before each click: median {plain * 1000:.1f} ms; click / forward = {median / plain:.2f} (target <= 1.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
