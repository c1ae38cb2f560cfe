"""The Components view: the parts' bars add up to the logit, the lens maps have one picture per state, and the
painting gesture patches the painted patches at the chosen block (every patch at a block's input: the clean run;
none: the corrupted run), computed off the GUI thread; the sweep draws a block x token heatmap."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPointF

from tests.gui.conftest import wait_result
from vit_explorer.explore.components import lens_maps, patch_once
from vit_explorer.gui.views.components import TABS


def show(window, title: str):
    dock = window.docks[title]
    dock.raise_()
    view = window.views[title]
    view.set_on_screen(True)
    return view


def test_parts_lens_and_painting(qtbot, window) -> None:
    view = show(window, "Components")
    qtbot.waitUntil(lambda: view.decomposed is not None, timeout=20000)
    d = view.decomposed
    assert d.total == pytest.approx(d.logit, rel=1e-4)
    assert d.target == int(np.argmax(window.session.result.probs))
    assert "add up exactly" in view.legend.full_text
    view.tabs.setCurrentIndex(TABS.index("By head"))  # the same decomposition, drawn by head: nothing recomputed
    assert view.decomposed is d and "add up exactly" in view.legend.full_text

    view.target.setCurrentIndex(view.target.findData(3))
    view.target.activated.emit(view.target.currentIndex())
    qtbot.waitUntil(lambda: view.decomposed is not d and view.decomposed.target == 3, timeout=20000)

    view.tabs.setCurrentIndex(TABS.index("Lens"))
    qtbot.waitUntil(lambda: view.maps is not None, timeout=20000)
    depth = window.session.loaded.config.depth
    assert view.maps.classes.shape[0] == depth + 1
    np.testing.assert_array_equal(view.maps.classes, lens_maps(window.session.inputs()).classes)

    view.tabs.setCurrentIndex(TABS.index("Patching"))
    qtbot.waitUntil(lambda: view.runs is not None, timeout=20000)
    view.layer.setValue(1)
    p = window.session.loaded.config.patch_size
    gh, gw = view.painted.shape
    # the gesture: press on the first patch, drag over the rest of the top row
    view.press(QPointF(p / 2, p / 2), start=True)
    for col in range(1, gw):
        view.press(QPointF(col * p + p / 2, p / 2), start=False)
    assert view.painted[0].all() and view.painted.sum() == gw
    expected, _ = patch_once(view.runs, 1, view._positions())
    qtbot.waitUntil(lambda: view.effect is not None and view.effect == pytest.approx(expected, abs=1e-6),
                    timeout=20000)
    # every patch and the prefix tokens at a block's input: the clean run's logit difference
    view.with_prefix.setChecked(True)
    view.painted[:] = True
    view.set_painted_patch((0, 0), True)
    qtbot.waitUntil(lambda: view.effect == pytest.approx(1.0, abs=1e-4), timeout=20000)
    view.with_prefix.setChecked(False)
    view.clear_painted()
    qtbot.waitUntil(lambda: view.effect == pytest.approx(0.0, abs=1e-6), timeout=20000)
    # a drag that starts on a painted patch unpaints
    view.press(QPointF(p / 2, p / 2), start=True)
    view.press(QPointF(p / 2, p / 2), start=True)
    assert not view.painted.any()

    view.sweep_button.click()
    qtbot.waitUntil(lambda: view.sweep is not None, timeout=30000)
    tokens = window.session.result.layout.num_tokens
    assert view.sweep.raw.shape == (depth, tokens)
    header, rows = view.table()
    assert header == ["block", "token", "effect"] and len(rows) == depth * tokens


def test_heads_component_and_another_image_corruption(qtbot, window) -> None:
    view = show(window, "Components")
    view.tabs.setCurrentIndex(TABS.index("Patching"))
    view.component.setCurrentIndex(view.component.findData("head"))
    view.component.activated.emit(view.component.currentIndex())
    other = next(i for i in range(view.corruption.count()) if "another image" in view.corruption.itemText(i))
    view.corruption.setCurrentIndex(other)
    view.corruption.activated.emit(other)
    qtbot.waitUntil(lambda: view.runs is not None and view.runs.component == "head", timeout=20000)
    assert view.head.isEnabled()
    view.sweep_button.click()
    qtbot.waitUntil(lambda: view.sweep is not None, timeout=30000)
    cfg = window.session.loaded.config
    assert view.sweep.axis == "head" and view.sweep.raw.shape == (cfg.depth, cfg.num_heads)


def test_sweep_pressed_on_another_tab_records_the_runs_then_sweeps(qtbot, window) -> None:
    """Sweep pressed on the "By block" tab once said "open the Patching tab with a classifier model first": it opens
    that tab, which records the clean and the corrupted run, and the sweep follows and is drawn in its tab."""
    view = show(window, "Components")
    qtbot.waitUntil(lambda: view.decomposed is not None, timeout=20000)
    assert view.tab == "By block" and view.runs is None
    view.sweep_button.click()
    qtbot.waitUntil(lambda: view.sweep is not None, timeout=30000)
    assert view.tab == "Sweep" and view.runs is not None
    assert view.sweep.raw.shape == (window.session.loaded.config.depth, window.session.result.layout.num_tokens)


def test_corruption_from_the_session_needs_a_mask(qtbot, window) -> None:
    view = show(window, "Components")
    view.tabs.setCurrentIndex(TABS.index("Patching"))
    index = view.corruption.findData("mask-session")
    view.corruption.setCurrentIndex(index)
    view.corruption.activated.emit(index)
    qtbot.waitUntil(lambda: "Nothing to corrupt" in view.note.full_text, timeout=10000)
    mask = np.zeros(window.session.grid, bool)
    mask[:2] = True
    window.session.set_mask(mask)
    wait_result(qtbot, window.session)
    qtbot.waitUntil(lambda: view.runs is not None, timeout=20000)
    assert view.runs.corrupted.mask[:2].all() and not view.runs.clean.mask.any()


@pytest.mark.parametrize(("size", "text_steps"), [((1280, 800), 0), ((1024, 768), 0), ((1280, 800), 3)],
                         ids=["1280x800", "1024x768", "1280x800-large-text"])
def test_every_tab_fits(qtbot, window, size: tuple[int, int], text_steps: int) -> None:
    """Each tab, the sweep drawn too, on a projector's screen (with a projector's text too) and on 1024x768:
    nothing clipped or squeezed (a page scrolls rather than squeeze its figure)."""
    from tests.gui.test_layout import layout_problems

    for _ in range(text_steps):
        window.presentation.step(1)
    window.resize(*size)
    window.share_width()
    qtbot.waitUntil(lambda: (window.width(), window.height()) == size, timeout=5000)
    view = show(window, "Components")
    problems = {}
    for i, tab in enumerate(TABS):
        view.tabs.setCurrentIndex(i)
        view.bring_up_to_date()
        if tab == "Patching":
            qtbot.waitUntil(lambda: view.runs is not None, timeout=20000)
            view.set_painted_patch((0, 0), True)
            view.sweep_button.click()
            qtbot.waitUntil(lambda: view.sweep is not None, timeout=30000)
            view.bring_up_to_date()
        qtbot.wait(50)
        if found := layout_problems(window.docks["Components"]):
            problems[tab] = found
    assert not problems, problems


def test_distilled_and_features_only_models(qtbot, window, deit_checkpoint, tmp_path) -> None:
    from tests.gui.conftest import save_tiny

    view = show(window, "Components")
    with qtbot.waitSignal(window.session.model_changed, timeout=20000):
        window.load(str(deit_checkpoint))
    wait_result(qtbot, window.session)
    qtbot.waitUntil(lambda: view.decomposed is not None, timeout=20000)
    names = {p.name for p in view.decomposed.parts}
    assert "dist_token" in names and view.decomposed.total == pytest.approx(view.decomposed.logit, rel=1e-4)
    with qtbot.waitSignal(window.session.model_changed, timeout=20000):
        window.load(str(save_tiny(tmp_path / "features", num_classes=0)))
    wait_result(qtbot, window.session)
    qtbot.waitUntil(lambda: view.decomposed is not None, timeout=20000)
    assert view.decomposed.kind == "feature" and "no classifier" in view.note.full_text
    view.tabs.setCurrentIndex(TABS.index("Lens"))
    assert view.maps is None and "no classifier" in view.note.full_text


SWEEP_CHILD = r"""
import pyqtgraph as pg
from vit_explorer.gui.views.components import TABS

maximise()
window.show_view("Components")
view = window.views["Components"]
settle(lambda: view.decomposed is not None)
view.sweep_button.click()
settle(lambda: view.sweep is not None and view.tab == "Sweep", quiet=1.0)
page = view.tabs.currentWidget()
boxes = [p.getViewBox().sceneBoundingRect() for p in view.sweep_plots.scene().items()
         if isinstance(p, pg.PlotItem) and not isinstance(p, pg.ColorBarItem)]
print(json.dumps({"screen": window.screen().geometry().height(), "sides": [min(b.width(), b.height()) for b in boxes],
                  "page_width": page.widget().width(), "viewport_width": page.viewport().width(),
                  "maps": len(view.sweep.layers)}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("screen", [(1280, 800), (1024, 768)], ids=["1280x800", "1024x768"])
def test_the_sweeps_maps_are_as_large_as_a_lessons_figure(tmp_path, screen: tuple[int, int]) -> None:
    """At 1280x800 in normal mode the sweep drew four maps of 161 px in the pane's height: each is now at least
    LARGEST_SHARE of the screen's height, in as many columns as the pane's width holds, and the tab scrolls down
    (never across) to the rest."""
    from tests.gui.screens import run_on_screen
    from vit_explorer.gui.measure import LARGEST_SHARE

    out = run_on_screen(tmp_path, screen, SWEEP_CHILD)[-1]
    assert len(out["sides"]) == out["maps"] == 4, out
    assert min(out["sides"]) >= LARGEST_SHARE * out["screen"] - 2, out
    assert out["page_width"] <= out["viewport_width"], out
