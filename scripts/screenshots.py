"""Offscreen screenshots of the app, one per view (and per mode of the Attention and Features views), at
1600x1000 (or --size WxH); with --presentation in presentation mode; with --lesson, one per lesson step.

    QT_QPA_PLATFORM=offscreen python scripts/screenshots.py --out shots [--size 1280x800] [--source SOURCE]
        [--image IMAGE] [--compare SOURCE] [--presentation] [--lesson resources/lessons/vit-basics.json]
        [--theme light|dark] [--views Explain,Dataset] [--user-settings]
        [--dataset shapes [--dataset-limit N] [--sae DIR]]  (only the Dataset view, one screenshot per tab; with
        --sae, a folder of `vit-explorer sae --out`, its Features (SAE) tab and a steering example too)

Without --source the bundled classroom model is used (or, if it is missing, a freshly built one).

The app opens with a fresh installation's settings (its default text size, theme and layout), not the ones
Ctrl+plus or the View menu left behind; --user-settings opens with yours.

Offscreen, the screen is made --size (Qt's offscreen screen is 800x800 otherwise, and a presented window
fills it): a presented window then has a real full-screen window's size, so the sizes printed equal a real
window's. A window that is not presented has no window manager's frame offscreen: a real one is a title bar
shorter, which the script says.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the PNG files")
    parser.add_argument("--source", default=None, help="checkpoint to open (default: the bundled model)")
    parser.add_argument("--image", default=None, help="image to show (default: the first bundled sample)")
    parser.add_argument("--mask", type=int, default=20, help="percentage of patches to mask (default 20)")
    parser.add_argument("--size", default="1600x1000", help="window size WxH (default 1600x1000)")
    parser.add_argument("--compare", default=None, help="a second model for the Compare view")
    parser.add_argument("--presentation", action="store_true", help="in presentation mode (full screen, large text)")
    parser.add_argument("--theme", choices=("light", "dark"), default=None,
                        help="the colour theme (default: a fresh installation's; with --user-settings, your "
                             "remembered one)")
    parser.add_argument("--views", default=None,
                        help="comma-separated view titles to shoot (default: every view and mode)")
    parser.add_argument("--lesson", default=None, help="a lesson file: one screenshot per step, and nothing else")
    parser.add_argument("--dataset", default=None, help="a dataset for the Dataset view: its tabs, and nothing else")
    parser.add_argument("--dataset-limit", type=int, default=1000, help="images of --dataset analysed (default 1000)")
    parser.add_argument("--sae", default=None, help="with --dataset: a trained SAE's folder for the Features (SAE) tab")
    parser.add_argument("--train-steps", type=int, default=40,
                        help="steps of the two short training runs shown in the Training view (0: none)")
    parser.add_argument("--user-settings", action="store_true",
                        help="open with your remembered settings (text size, theme, layout); by default a fresh "
                             "installation's, so a text size left by Ctrl+plus is not measured")
    parser.add_argument("--registers", default=None, metavar="BLOCK:UNIT,...",
                        help="also shoot the Prediction view's test-time-registers toggle with these neurons "
                             "('finder': its top 4 over the samples) and the Features view's register diagnosis")
    args = parser.parse_args(argv)
    width, height = (int(v) for v in args.size.lower().split("x"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.user_settings:  # what a person who has just installed the app sees
        os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="vit-explorer-shots-")
    if os.environ.get("QT_QPA_PLATFORM", "offscreen") == "offscreen":  # a screen of --size, as a real one is
        screen = out / "offscreen_screen.json"
        screen.write_text(json.dumps({"screens": [{"name": f"{width}x{height}", "x": 0, "y": 0, "width": width,
                                                   "height": height, "logicalDpi": 96, "logicalBaseDpi": 96,
                                                   "dpr": 1}]}))
        os.environ["QT_QPA_PLATFORM"] = f"offscreen:configfile={screen}"
        if not args.presentation:
            print(f"note: offscreen there is no window frame; a real {width}x{height} window's client area is "
                  "a title bar shorter", file=sys.stderr)


    from PySide6.QtCore import Qt

    from vit_explorer.gui.app import make_app
    from vit_explorer.gui.main_window import MainWindow
    from vit_explorer.paths import BUNDLED_MODEL

    app = make_app()
    source = args.source
    if source is None and not (BUNDLED_MODEL / "vit_explorer.json").exists():
        source = ""  # build one below
    if args.theme:
        from vit_explorer.gui import theme

        theme.choose(app, args.theme)
    window = MainWindow(source or None)
    window.setWindowState(Qt.WindowState.WindowNoState)  # this size, not maximised to the screen's
    window.resize(width, height)
    window.show()

    def wait(condition, timeout: float = 120.0) -> None:
        end = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > end:
                raise TimeoutError("the app did not get ready in time")
            app.processEvents()
            time.sleep(0.01)

    wait(lambda: window.session is not None)
    session = window.session
    if source == "":
        window.views["Model builder"].build()
    wait(lambda: session.result is not None)
    if args.image:
        window.image_panel.open_path(args.image)
    elif not window.image_panel.samples.count() > 1:  # no bundled samples yet: a picture of the built-in set
        from PIL import Image

        from vit_explorer.data.synthetic import generate

        images, _ = generate(1, size=session.size[0], split="val")
        session.set_image(Image.fromarray(images[0].permute(1, 2, 0).numpy()), "shapes sample")
    if args.presentation:
        window.presentation.toggle()  # full screen: the screen of --size
    if args.lesson:
        return shoot_lesson(app, window, args.lesson, out)
    if args.dataset:
        return shoot_dataset(app, window, args.dataset, args.dataset_limit, args.compare, out, args.sae)
    if args.train_steps:
        train(app, window, args.train_steps, out)
    if args.mask:
        window.image_panel.percent.setValue(args.mask)
        window.image_panel.random_mask()
    settle(app, window)
    if args.registers:
        shoot_registers(app, window, args.registers, out)
    chosen = args.views.split(",") if args.views else None
    for title, dock in window.docks.items():
        if title in ("Image", "Prediction") or (chosen is not None and title not in chosen):
            continue
        dock.raise_()
        settle(app, window)
        shoot(window, out / f"{title.lower().replace(' ', '_')}.png", window.views.get(title))
    if args.compare and (chosen is None or "Compare" in chosen):
        window.docks["Compare"].raise_()
        window.views["Compare"].compare_with(args.compare)
        settle(app, window, 3.0)
        shoot(window, out / "compare.png", window.views["Compare"])
    if chosen is not None:
        window.close()
        return 0
    window.docks["Attention"].raise_()
    modes = ["all heads", "rollout", "mean attention distance"]
    if session.result.class_attentions:
        modes.append("class attention (CaiT)")
    for mode in modes:
        session.set_attention(mode=mode)
        settle(app, window)
        shoot(window, out / f"attention_{mode.split(' (')[0].replace(' ', '_')}.png")
    features = window.views["Features"]
    window.docks["Features"].raise_()
    from vit_explorer.gui.views.features import MODES as FEATURE_MODES

    for mode in FEATURE_MODES:
        features.mode.setCurrentText(mode)
        settle(app, window)
        shoot(window, out / f"features_{mode.replace(' ', '_').replace('[', '').replace(']', '')}.png")
    window.close()
    return 0


def shoot_lesson(app, window, path: str, out: Path) -> int:
    """Every step of a lesson, in order, as the presenter sees it."""
    runner = window.lesson
    window.open_lesson(path)
    if runner.lesson is None:
        print(window.banner.text(), file=sys.stderr)
        return 1
    from vit_explorer.gui.measure import step_measure

    done: list[int] = []
    measured: list[dict] = []
    runner.applied.connect(done.append)
    for index in range(len(runner.lesson.steps)):
        if index:
            runner.next()
        end = time.monotonic() + 120
        while index not in done and time.monotonic() < end:
            app.processEvents()
            time.sleep(0.02)
        settle(app, window, 2.0)
        shoot(window, out / f"lesson_{index + 1:02d}.png")
        measured.append({"step": index + 1, **step_measure(window, runner.lesson.steps[index].view)})
        print(json.dumps(measured[-1]))
    (out / "lesson_areas.json").write_text(json.dumps(measured, indent=1))
    window.close()
    return 0


def shoot_dataset(app, window, data: str, limit: int, compare: str | None, out: Path, sae: str | None = None) -> int:
    """The Dataset view's tabs after analysing `data` (against `compare` too, when given); with `sae`, its
    Features (SAE) tab and a steering example."""
    import numpy as np

    if compare:
        window.views["Compare"].compare_with(compare)
        settle(app, window, 3.0)
    view = window.views["Dataset"]
    window.docks["Dataset"].raise_()
    view.data.setCurrentText(data)
    view.limit.setValue(limit)
    view.start()
    end = time.monotonic() + 600
    while (view.analysis is None or view.points is None) and time.monotonic() < end:
        app.processEvents()
        time.sleep(0.02)
    settle(app, window)
    if compare:
        view.cka_of.setCurrentIndex(1)
    view.show_drivers(view.analysis.features.depth, view.analysis.features.depth)
    pages = [("probes", view.probe_kind, 0), ("confusion", view.probe_kind, 1), ("cka", None, 0),
             ("projector", None, 0), ("distance", view.distance_kind, 0), ("norms", view.distance_kind, 2)]
    tabs = {"probes": 0, "confusion": 0, "cka": 1, "projector": 2, "distance": 3, "norms": 3}
    for name, box, choice in pages:
        view.tabs.setCurrentIndex(tabs[name])
        if box is not None:
            box.setCurrentIndex(choice)
        if name == "projector":
            view._hovered(view.scatter, [view.scatter.points()[0]], None)
            lasso = lasso_around(view.points)  # a selection, as a Shift+drag draws it
            view.lasso_box.outline.setData(*np.vstack([lasso, lasso[:1]]).T)
            view.select_inside(lasso)
        settle(app, window, 0.5)
        shoot(window, out / f"dataset_{name}.png")
    if sae:
        shoot_sae(app, window, view, sae, out)
    window.close()
    return 0


def shoot_sae(app, window, view, folder: str, out: Path) -> None:
    """The Features (SAE) tab on the feature that moves the prediction most, opened on its top-activating image
    with that patch clicked; then the feature clamped to three times its largest activation at every token (the
    Prediction view shows the change)."""
    from vit_explorer.explore import sae as E

    tab = view.sae
    view.tabs.setCurrentWidget(tab)
    if not tab.open(folder):
        raise SystemExit(tab.note.text())
    while tab.encoded is None:
        app.processEvents()
        time.sleep(0.02)
    tab.order.setCurrentIndex(1 if tab.effect is not None else 0)
    feature = tab.feature
    grid = view.analysis.features.grid
    image, patch = divmod(int(E.top_tokens(tab.encoded.z, feature, 1)[0]), grid[0] * grid[1])
    view.open_image(tab.encoded.kept[image], patch)
    settle(app, window)
    tab.choose_feature(feature)
    settle(app, window, 0.5)
    shoot(window, out / "dataset_sae.png")
    tab.figure_kind.setCurrentIndex(1)  # its map on the image clicked
    tab.value.setValue(round(3 * float(tab.encoded.z[:, feature].max())))  # three times its largest activation
    tab.steering.setCurrentIndex(2)  # clamp to the value
    settle(app, window)
    shoot(window, out / "dataset_sae_steering.png")


def lasso_around(points):
    """A freehand-looking loop around the middle of a 2-D point cloud: (40, 2)."""
    import numpy as np

    t = np.linspace(0, 2 * np.pi, 40, endpoint=False)
    r = 0.8 + 0.2 * np.sin(3 * t)
    return np.median(points, axis=0) + points.std(axis=0) * 0.8 * np.stack([r * np.cos(t), r * np.sin(t)], axis=1)


def shoot_registers(app, window, neurons: str, out: Path) -> None:
    """The register diagnosis and neurons (Features view), then the original and the shifted model side by side
    (Prediction, Attention, Features' token norms), and the image's attention entropy per block and head."""
    features = window.views["Features"]
    window.docks["Features"].raise_()
    features.mode.setCurrentText("outliers and register neurons")
    settle(app, window, 3.0)
    shoot(window, out / "registers_diagnosis.png", features)
    view = window.views["Prediction"]
    window.docks["Prediction"].raise_()
    view.neurons.setText("" if neurons == "finder" else neurons)
    view.registers.setChecked(True)
    settle(app, window, 3.0)
    shoot(window, out / "registers_toggle.png", view)
    window.docks["Attention"].raise_()
    window.session.set_attention(mode="one head")
    settle(app, window, 3.0)
    shoot(window, out / "registers_attention.png", window.views["Attention"])
    window.docks["Features"].raise_()
    features.mode.setCurrentText("token norms")
    settle(app, window, 3.0)
    shoot(window, out / "registers_norms.png", features)
    features.mode.setCurrentText("attention entropy")
    settle(app, window, 3.0)
    shoot(window, out / "attention_entropy.png", features)
    view.registers.setChecked(False)


def shoot(window, path: Path, view=None) -> None:
    """Save the window as a PNG; with `view`, print the (width, height) of its data areas as a person sees them."""
    window.grab().save(str(path), "PNG")
    print(path)
    if view is not None:
        from vit_explorer.gui.measure import data_areas

        areas = [(a.rect.width(), a.rect.height()) for a in data_areas(view.picture(), window)]
        print(json.dumps({"shot": path.name, "data_areas": areas, "text_scale": window.presentation.scale}))


def train(app, window, steps: int, out: Path) -> None:
    """Two short runs (the model as built, then without position embedding) for the Training view."""
    view = window.views["Training"]
    window.docks["Training"].raise_()
    view.steps.setValue(steps)
    view.batch.setValue(64)
    view.train_size.setValue(2000)
    view.out.setText(str(out / "run"))
    view.start()
    while view.running or not view.runs[-1].finished:
        app.processEvents()
        time.sleep(0.02)
    view.change.setCurrentIndex(0)
    view.start_comparison()
    while view.running or not view.runs[-1].finished:
        app.processEvents()
        time.sleep(0.02)


def settle(app, window, seconds: float = 1.5, quiet: float = 0.5) -> None:
    """Let workers finish and views redraw: at least `seconds`, and `quiet` seconds with no job running (a view
    draws what a job delivered and lays itself out over a few turns of the event loop after it ends)."""
    start = time.monotonic()
    calm = None
    while time.monotonic() - start < 60 + seconds:
        app.processEvents()
        time.sleep(0.02)
        now = time.monotonic()
        calm = None if window.session.working() else (calm or now)
        if now - start >= seconds and calm is not None and now - calm >= quiet:
            break
    app.processEvents()


if __name__ == "__main__":
    sys.exit(main())
