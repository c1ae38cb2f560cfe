"""The Dataset view driven through its widgets: analyse a built-in set (progress, then probes, CKA, projector,
attention distance), a CKA cell lists the images that drive it, a projector point opens its image (a patch point
its patch as the query), cancel stops a run, and the compared model gives a CKA between the two."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication

from vit_explorer.analysis import cka as C
from vit_explorer.checkpoints import load
from vit_explorer.explore import dataset_analysis as A
from vit_explorer.gui import theme


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VIT_EXPLORER_CACHE", str(tmp_path / "cache"))


def analyse(qtbot, window, limit: int = 60):
    window.docks["Dataset"].raise_()
    view = window.views["Dataset"]
    view.data.setCurrentText("shapes")
    view.limit.setValue(limit)
    view.run_button.click()
    assert view.run_button.text() == "Cancel"
    qtbot.waitUntil(lambda: view.analysis is not None and view.points is not None, timeout=60000)
    return view


def test_analyse_draws_every_panel(qtbot, window) -> None:
    view = analyse(qtbot, window)
    a = view.analysis
    depth = window.session.loaded.config.depth
    assert len(a.features) == 60 and view.run_button.text() == "Analyse" and not view.progress.isVisible()
    assert [c.tokens for c in a.probes] == ["cls", "mean"] and a.probes[0].knn.shape == (depth + 1,)
    assert a.cka.shape == (depth + 1, depth + 1)
    np.testing.assert_allclose(np.diag(a.cka), 1.0)
    assert a.cka[1, 2] == pytest.approx(C.cka(a.features.cls[1], a.features.cls[2]))
    assert len(view.probe_plots.ci.items) == 1 and len(view.cka_plots.ci.items) == 1
    view.probe_kind.setCurrentIndex(1)  # the confusion matrix at the best state
    assert len(view.probe_plots.ci.items) == 1
    assert len(view.distance_plots.ci.items) == 1
    for kind in range(3):  # distance, its spread, the token norms: one at a time
        view.distance_kind.setCurrentIndex(kind)
        assert len(view.distance_plots.ci.items) == 1
    assert view.points.shape == (60, 2) and len(view.scatter.data) == 60
    assert [label.text for _, label in view.legend.items] == view.analysis.features.source.label_names
    header, rows = view.table()
    assert header == ["state", "tokens", "knn", "linear"] and len(rows) == 2 * (depth + 1)


def test_before_analyse_a_note_in_the_themes_colours_says_what_to_do(qtbot, window) -> None:
    """Before Analyse the pages were empty plots, a pane of the plots' background (white in the light theme):
    what a person sees there now is the window's own background with a note saying what to do, in both
    themes; once analysed, the pages."""
    app = QApplication.instance()
    window.docks["Dataset"].raise_()
    view = window.views["Dataset"]
    try:
        for name in ("dark", "light"):
            theme.apply(app, name)
            qtbot.wait(50)
            assert view.placeholder.isVisible() and not view.tabs.isVisible()
            assert "press Analyse" in view.placeholder.text() and view.picture() is view.placeholder
            shot = window.grab().toImage()  # the pane as it is on screen, whatever paints it
            pane = QRect(view.pane.mapTo(window, QPoint(0, 0)), view.pane.size())
            colours = Counter(shot.pixel(x, y) for x in range(pane.left(), pane.right(), 3)
                              for y in range(pane.top(), pane.bottom(), 3))
            background, count = colours.most_common(1)[0]
            window_colour = app.palette().color(QPalette.ColorRole.Window)
            assert QColor(background) == window_colour, (name, QColor(background).name(), window_colour.name())
            assert (window_colour.lightness() < 128) == (name == "dark")
            assert count < sum(colours.values()) - 50  # the note's text is drawn on it
    finally:
        theme.apply(app, "system")
    view = analyse(qtbot, window)
    assert view.tabs.isVisible() and not view.placeholder.isVisible() and view.picture() is view.tabs.currentWidget()


def test_cka_cell_lists_its_images_and_opens_one(qtbot, window) -> None:
    view = analyse(qtbot, window)
    view.tabs.setCurrentIndex(1)
    qtbot.wait(100)  # laid out, so the cell is where it is drawn
    qtbot.mouseClick(view.cka_plots.viewport(), Qt.MouseButton.LeftButton, pos=view.cell_at(1, 2))
    assert view.driver_list.count() == 12 and "state 1 and state 2" in view.cell_label.text()
    top, _ = A.cka_drivers(view.analysis.features, 1, 2, tokens="cls", k=12)
    assert view.drivers == top.tolist()
    first = view.driver_list.item(0)
    path = view.analysis.features.source.paths[first.data(Qt.ItemDataRole.UserRole)]
    view.driver_list.itemClicked.emit(first)
    assert window.session.image_name == path


def test_projector_point_opens_its_image_and_patch(qtbot, window) -> None:
    view = analyse(qtbot, window)
    view.tabs.setCurrentIndex(2)
    spots = view.scatter.points()
    view._hovered(view.scatter, [spots[5]], None)
    assert view.thumb.pixmap() is not None and view.analysis.features.source.paths[5] in view.thumb_text.text()
    view._clicked(view.scatter, [spots[5]], None)
    assert window.session.image_name == view.analysis.features.source.paths[5]
    view.points_kind.setCurrentText("patch tokens")
    k = view.analysis.features.patch_index.shape[1]
    qtbot.waitUntil(lambda: view.points is not None and len(view.points) == 60 * k, timeout=20000)
    n = 7
    view._clicked(view.scatter, [view.scatter.points()[n]], None)
    patch = int(view.analysis.features.patch_index.reshape(-1)[n])
    assert window.session.image_name == view.analysis.features.source.paths[n // k]
    assert window.session.query == divmod(patch, view.analysis.features.grid[1])
    view.colour.setCurrentText("probe's prediction")
    colours = view.point_colours()
    assert (colours == -1).sum() == 60 * k - len(view.analysis.best.val) * k  # training images in grey


def test_cancel_stops_the_run(qtbot, window) -> None:
    window.docks["Dataset"].raise_()
    view = window.views["Dataset"]
    view.data.setCurrentText("shapes")
    view.limit.setValue(3000)
    view.run_button.click()
    view.run_button.click()
    assert view.run_button.text() == "Analyse" and "cancelled" in view.note.text()
    qtbot.wait(300)
    assert view.analysis is None


def test_bad_folder_is_reported_not_raised(qtbot, window, tmp_path: Path) -> None:
    window.docks["Dataset"].raise_()
    view = window.views["Dataset"]
    view.data.setCurrentText(str(tmp_path / "missing"))
    view.run_button.click()
    qtbot.waitUntil(lambda: "failed" in view.note.text(), timeout=20000)
    assert "no such folder" in view.note.text() and view.run_button.text() == "Analyse"


def test_against_the_compared_model(qtbot, window, tiny_checkpoint: Path) -> None:
    window.session.set_compared(load(str(tiny_checkpoint)), "twin")
    view = analyse(qtbot, window)
    a = view.analysis
    assert a.cka_compared is not None
    # the same weights: the diagonal is 1, but for the [CLS] before any block, the same for every image (CKA 0)
    np.testing.assert_allclose(np.diag(a.cka_compared)[1:], 1.0, atol=1e-6)
    assert a.cka_compared[0, 0] == 0
    view.cka_of.setCurrentIndex(1)
    matrix, against = view.cka_matrix()
    assert against and matrix is a.cka_compared
    view.show_drivers(2, 2)
    assert view.driver_list.count() == 12


@pytest.fixture
def every_move(monkeypatch: pytest.MonkeyPatch) -> None:
    """pyqtgraph drops mouse moves closer than 10 ms apart; the test's moves come faster than a hand's."""
    import pyqtgraph as pg

    monkeypatch.setitem(pg.CONFIG_OPTIONS, "mouseRateLimit", -1)


def _drag_lasso(qtbot, view, polygon: np.ndarray, modifier=Qt.KeyboardModifier.NoModifier) -> None:
    """A real freehand lasso: press at the first vertex, move through the others (a few steps per edge), release."""
    widget = view.projector.viewport()
    closed = np.vstack([polygon, polygon[:1]])
    path = [a + (b - a) * t for a, b in zip(closed[:-1], closed[1:], strict=True) for t in np.linspace(0, 1, 6)[:-1]]
    qtbot.mousePress(widget, Qt.MouseButton.LeftButton, modifier, view.point_at(*path[0]))
    for x, y in path[1:]:
        qtbot.mouseMove(widget, view.point_at(x, y))
    qtbot.mouseRelease(widget, Qt.MouseButton.LeftButton, modifier, view.point_at(*path[-1]))


def test_lasso_selects_the_points_inside_and_lists_their_images(qtbot, window, every_move) -> None:
    from vit_explorer.analysis.polygon import inside

    view = analyse(qtbot, window)
    view.tabs.setCurrentIndex(2)
    qtbot.wait(100)  # laid out, so points are where they are drawn
    pts = view.points
    centre, spread = np.median(pts, axis=0), pts.std(axis=0)
    # a lasso around the middle of the cloud (a diamond), drawn with Shift: the plain drag pans
    polygon = centre + spread * np.array([[-1.0, 0.0], [0.0, -1.0], [1.0, 0.0], [0.0, 1.0]])
    before = view.lasso_box.viewRange()
    _drag_lasso(qtbot, view, polygon, Qt.KeyboardModifier.ShiftModifier)
    assert view.lasso_box.viewRange() == before  # the lasso did not pan
    drawn = view.lasso_box.vertices
    assert len(drawn) > 10
    expected = np.flatnonzero(inside(pts, np.asarray(drawn)))
    assert 0 < len(expected) < len(pts)
    assert np.array_equal(view.selected, expected)
    assert np.array_equal(view.selected, np.flatnonzero(inside(pts, polygon)))  # the drawn path is the polygon
    assert len(view.marks.data) == len(expected)  # highlighted
    paths = view.analysis.features.source.paths
    assert [view.selection_list.item(i).text() for i in range(view.selection_list.count())] == \
        [paths[i] for i in expected]
    assert f"{len(expected)} images" in view.selection_label.text()
    view.selection_list.itemClicked.emit(view.selection_list.item(0))
    assert window.session.image_name == paths[expected[0]]
    view.clear_button.click()
    assert len(view.selected) == 0 and view.selection_list.count() == 0 and len(view.marks.data) == 0


def test_plain_drag_pans_and_the_lasso_button_draws(qtbot, window, every_move) -> None:
    view = analyse(qtbot, window)
    view.tabs.setCurrentIndex(2)
    qtbot.wait(100)
    pts = view.points
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    around = np.array([[lo[0], lo[1]], [hi[0], lo[1]], [hi[0], hi[1]], [lo[0], hi[1]]]) + [[-1, -1], [1, -1], [1, 1],
                                                                                            [-1, 1]] * (hi - lo) * 0.05
    before = view.lasso_box.viewRange()
    _drag_lasso(qtbot, view, around)  # no Shift, no Lasso button: a pan
    assert len(view.selected) == 0 and view.lasso_box.viewRange() != before
    view.scatter_plot.autoRange()
    qtbot.wait(50)
    view.lasso_button.click()
    _drag_lasso(qtbot, view, around)  # around every point
    assert len(view.selected) == len(pts) and view.selection_list.count() == len(view.selected_images()) == 60
    view.points_kind.setCurrentText("patch tokens")  # a new projection: the old selection goes
    k = view.analysis.features.patch_index.shape[1]
    qtbot.waitUntil(lambda: view.points is not None and len(view.points) == 60 * k, timeout=20000)
    assert len(view.selected) == 0 and view.selection_list.count() == 0


def test_the_projectors_legend_follows_the_text_scale(qtbot, window) -> None:
    """The class names beside the projector grow with presented text, as its axes do (they stayed at 9 pt)."""
    from vit_explorer.gui import figures

    view = analyse(qtbot, window)
    normal = figures.label_size()
    window.presentation.toggle()
    try:
        qtbot.waitUntil(lambda: figures.label_size() != normal and view.legend.items and all(
            label.opts["size"] == figures.label_size() for _, label in view.legend.items), timeout=20000)
    finally:
        window.presentation.toggle()
