"""The main window: start-up, loading (good and bad), images, masks, resolution, export."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from .conftest import save_tiny, wait_result


def test_startup_does_not_import_torch_before_paint() -> None:
    """Importing the app module (all that runs before the first paint) pulls in neither torch nor HF/timm."""
    code = ("import sys, vit_explorer.gui.app\n"
            "bad = [m for m in ('torch', 'transformers', 'timm') if m in sys.modules]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_full_startup_imports_neither_transformers_nor_timm(tiny_checkpoint: Path) -> None:
    """Opening the app on a checkpoint, up to its first prediction, never imports transformers or timm."""
    code = (
        "import sys\n"
        "from vit_explorer.gui.app import make_app\n"
        "from vit_explorer.gui.main_window import MainWindow\n"
        "app = make_app()\n"
        f"window = MainWindow({str(tiny_checkpoint)!r})\n"
        "window.ready.connect(lambda: window.session.result_ready.connect(lambda r: app.quit()))\n"
        "window.show()\n"
        "app.exec()\n"
        "assert window.session.result is not None\n"
        "bad = [m for m in ('transformers', 'timm') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_opens_with_a_model_and_predicts(window) -> None:
    session = window.session
    result = session.result
    assert result.probs.shape == (10,)
    assert abs(result.probs.sum() - 1) < 1e-5
    assert result.display.shape == (32, 32, 3)
    assert window.time_label.text().startswith("forward:")
    assert "Prediction" in window.views


def test_mask_changes_prediction(qtbot, window) -> None:
    session = window.session
    before = session.result.probs.copy()
    panel = window.image_panel
    from PySide6.QtCore import QPointF
    panel.press(QPointF(1.0, 1.0), start=True)  # click the top-left patch
    assert session.mask[0, 0]
    panel.percent.setValue(50)
    panel.random_mask()
    result = wait_result(qtbot, session)
    assert result.inputs.mask.sum() == 32
    assert result.baseline_probs is not None
    np.testing.assert_allclose(result.baseline_probs, before, atol=1e-5)
    assert not np.allclose(result.probs, before, atol=1e-4)
    assert "masked patches" in window.views["Prediction"].change.text()
    panel.clear_mask()
    result = wait_result(qtbot, session)
    np.testing.assert_allclose(result.probs, before, atol=1e-5)


def test_failing_load_keeps_the_model(qtbot, window, tmp_path: Path) -> None:
    session = window.session
    old = session.loaded
    bad = tmp_path / "broken"
    bad.mkdir()
    (bad / "vit_explorer.json").write_text("{not json")
    with qtbot.waitSignal(session.error, timeout=20000) as blocker:
        window.load(str(bad))
    assert "broken" in blocker.args[0]
    assert session.loaded is old
    assert window.banner.isVisible() and "broken" in window.banner.text()
    assert window.load_button.isEnabled()
    assert window.source_box.currentText() == old.source  # the box names the model that is loaded
    qtbot.wait(200)
    assert window.banner.isVisible()  # it stays until dismissed, not gone with the status bar's timeout
    window.banner.dismiss()
    assert not window.message_bar.isVisible()


def test_corrupt_image_shows_message(qtbot, window, tmp_path: Path) -> None:
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    image_id = window.session.image_id
    with qtbot.waitSignal(window.session.error, timeout=5000) as blocker:
        assert not window.image_panel.open_path(str(bad))
    assert "bad.png" in blocker.args[0]
    assert window.session.image_id == image_id


def test_resolution_change_rectangular(qtbot, window) -> None:
    panel = window.image_panel
    panel.height_box.setValue(24)
    panel.width_box.setValue(40)
    panel.apply_size()
    result = wait_result(qtbot, window.session)
    assert result.layout.grid == (6, 10)
    assert result.display.shape == (24, 40, 3)
    assert window.session.mask.shape == (6, 10)
    panel.height_box.setValue(25)
    with qtbot.waitSignal(window.session.error, timeout=5000) as blocker:
        panel.apply_size()
    assert "patch size" in blocker.args[0]


def test_recent_sources_remembered(qtbot, window, tiny_checkpoint: Path, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    assert str(tiny_checkpoint) not in window.recent_sources()  # in the temporary folder: gone tomorrow
    monkeypatch.setattr("vit_explorer.gui.main_window.tempfile.gettempdir", lambda: str(tmp_path / "elsewhere"))
    with qtbot.waitSignal(window.session.model_changed, timeout=20000):
        window.load(str(tiny_checkpoint))
    assert window.recent_sources()[0] == str(tiny_checkpoint)
    assert window.source_box.findText(str(tiny_checkpoint)) == 0
    with qtbot.waitSignal(window.session.error, timeout=20000):
        window.load(str(tmp_path / "missing"))
    assert str(tmp_path / "missing") not in window.recent_sources()  # failed loads are not history
    assert window.source_box.findText(str(tmp_path / "missing")) < 0


@pytest.mark.slow
def test_export_every_view(window, tmp_path: Path) -> None:
    for title, view in window.views.items():
        png = view.export_png(tmp_path / f"{title}.png")
        assert png.stat().st_size > 1000, title
        if view.table() is not None:
            csv = view.export_csv(tmp_path / f"{title}.csv")
            assert len(csv.read_text().splitlines()) >= 2, title


def test_drawing_classifies_as_you_draw(qtbot, window) -> None:
    from PySide6.QtCore import QPointF

    panel = window.image_panel
    panel.clear_canvas()
    blank = wait_result(qtbot, window.session)
    assert blank.display.max() == 0
    panel.mode_group.button(2).setChecked(True)  # Draw
    panel.brush.setValue(4)
    panel.press(QPointF(4, 4), start=True)
    panel.press(QPointF(28, 28), start=False)
    result = wait_result(qtbot, window.session)
    assert window.session.image_name == "drawing"
    diagonal = result.display[np.arange(4, 28), np.arange(4, 28)]
    assert diagonal.min() > 200 and result.display[2, 29].max() == 0  # a white stroke, black elsewhere
    assert not np.allclose(result.probs, blank.probs)


def test_paste_image(qtbot, window) -> None:
    from PySide6.QtGui import QImage
    from PySide6.QtWidgets import QApplication

    image = QImage(40, 20, QImage.Format.Format_RGB32)
    image.fill(0xFF3366)
    QApplication.clipboard().setImage(image)
    window.image_panel.paste()
    result = wait_result(qtbot, window.session)
    assert window.session.image.size == (40, 20)
    assert window.session.image.getpixel((5, 5)) == (0xFF, 0x33, 0x66)
    assert result.display.shape == (32, 32, 3)


@pytest.mark.slow
def test_run_app_returns_exit_code(tiny_checkpoint: Path) -> None:
    """`vit-explorer SOURCE` -> run_app: the window opens the source, predicts and quits with code 0.

    In a fresh interpreter: after QApplication.quit() this process's later windows would not start.
    """
    code = (
        "import sys\n"
        "from PySide6.QtCore import QTimer\n"
        "from PySide6.QtWidgets import QApplication\n"
        "from vit_explorer.gui.app import make_app, run_app\n"
        "from vit_explorer.gui.main_window import MainWindow\n"
        "seen = []\n"
        "def check():\n"
        "    for w in QApplication.topLevelWidgets():\n"
        "        if isinstance(w, MainWindow) and w.session is not None and w.session.result is not None:\n"
        "            seen.append(w.session.loaded.source)\n"
        "            w.close()\n"
        "            return\n"
        "    QTimer.singleShot(50, check)\n"
        "make_app()  # run_app reuses it; the timer needs it\n"
        "QTimer.singleShot(50, check)\n"
        f"code = run_app({str(tiny_checkpoint)!r})\n"
        f"assert code == 0 and seen == [{str(tiny_checkpoint)!r}], (code, seen)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_only_the_views_in_sight_compute_after_start_up(qtbot, window) -> None:
    """The tabs behind the first are told at once that they are hidden: at start-up the Heads view measured
    every head's importance unseen, beside the first prediction."""
    shown = {title for title, view in window.views.items() if view.on_screen}
    assert shown == {"Prediction", window.current_view().title}
    heads = window.views["Heads"]
    assert heads._measuring is None and heads.result is None
    window.docks["Heads"].raise_()
    qtbot.waitUntil(lambda: heads.result is not None, timeout=30000)  # a small model: measured once in sight


def test_current_view_follows_the_tab(window) -> None:
    window.docks["Heads"].raise_()
    assert window.current_view() is window.views["Heads"]
    window.docks["Parameters"].raise_()
    assert window.current_view() is window.views["Parameters"]


def test_plots_follow_a_palette_change(qtbot, window) -> None:
    import pyqtgraph as pg
    from PySide6.QtWidgets import QApplication

    from vit_explorer.gui.theme import dark_palette

    app = QApplication.instance()
    before = app.palette()
    plot = window.views["Prediction"].plots
    axis = window.views["Prediction"]._drawn.plot.getAxis("bottom")
    dark = dark_palette()
    try:
        app.setPalette(dark)
        qtbot.waitUntil(lambda: plot.backgroundBrush().color() == dark.color(dark.ColorRole.Base), timeout=5000)
        assert axis.textPen().color() == dark.color(dark.ColorRole.Text)
        assert pg.getConfigOption("foreground") == dark.color(dark.ColorRole.Text)  # plots drawn later too
    finally:
        app.setPalette(before)
    qtbot.waitUntil(lambda: plot.backgroundBrush().color() == before.color(before.ColorRole.Base), timeout=5000)


def test_garbage_is_collected_on_the_gui_thread_only(qtbot) -> None:
    """Automatic collection is off (a worker thread could otherwise run Qt destructors); the GUI
    thread's timer collects cycles instead."""
    import gc
    import weakref

    from vit_explorer.gui.app import make_app

    make_app()
    assert not gc.isenabled()

    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a  # a reference cycle: only the cyclic collector frees it
    alive = weakref.ref(a)
    del a, b
    assert alive() is not None  # nothing collects it at once
    qtbot.waitUntil(lambda: alive() is None, timeout=5000)  # the GUI thread's timer does, whatever the counts


def test_full_collections_freeze_their_survivors_and_a_new_model_collects_them(qtbot, window, tmp_path) -> None:
    """A full collection's survivors are frozen, so the next full collections stay short; garbage among them (an
    old model in a reference cycle) is collected once a model has been replaced."""
    import gc
    import weakref

    from vit_explorer.gui.app import make_app
    from vit_explorer.gui.collector import GuiThreadGarbageCollector

    from .conftest import save_tiny

    collector = make_app().findChild(GuiThreadGarbageCollector)

    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a
    alive = weakref.ref(a)
    gc.collect(1)  # gen 2's count passes its threshold at the next tick
    for _ in range(collector.thresholds[2] + 1):
        gc.collect(1)
    collector.collect()  # a full collection: the cycle, still referenced, survives and is frozen
    assert gc.get_freeze_count() > 0
    del a, b
    collector.collect()
    assert alive() is not None  # frozen: the ticks leave it
    with qtbot.waitSignal(window.session.model_changed, timeout=30000):
        window.load(str(save_tiny(tmp_path / "other")))
    qtbot.waitUntil(lambda: alive() is None, timeout=5000)


def session_receivers(session) -> dict[str, int]:
    """How many slots each of the session's signals reaches, by signature."""
    from PySide6.QtCore import SIGNAL, QMetaMethod

    meta = session.metaObject()
    methods = [meta.method(i) for i in range(meta.methodOffset(), meta.methodCount())]
    names = [bytes(m.methodSignature()).decode() for m in methods if m.methodType() == QMetaMethod.MethodType.Signal]
    return {name: session.receivers(SIGNAL(name)) for name in names}


def test_closing_disconnects_every_widget_from_the_session(qtbot, window, tmp_path: Path) -> None:
    """Views and the image panel connect through `listen` and leave nothing connected when they close: what
    stays connected is the window's own (counted while no view waits on a one-off connection)."""
    from vit_explorer.gui.session_widget import SessionWidget

    widgets = [w for w in [*window.views.values(), window.image_panel] if isinstance(w, SessionWidget)]
    assert len(widgets) == len(window.views) + 1 and all(w._connections for w in widgets[:1])
    session = window.session
    listened = {name: sum(signal == getattr(session, name.split("(")[0]) for w in widgets
                          for signal, _ in w._connections) for name in session_receivers(session)}
    own = {name: count - listened[name] for name, count in session_receivers(session).items()}
    with qtbot.waitSignal(session.model_changed, timeout=20000):  # views rebuild for it, before its first result
        window.load(str(save_tiny(tmp_path / "other", depth=3)))
    window.close()
    assert all(not w._connections for w in widgets)
    assert session_receivers(session) == own
