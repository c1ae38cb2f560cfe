"""The Explain view, driven through its controls: every chosen method on the current image, ranked by its
faithfulness, the curves of the map clicked, a new target recomputed, [MASK] patches applied, export, cancel."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vit_explorer.explore import relevance as rel

from .conftest import wait_result
from .screens import run_on_screen


def _wait_maps(qtbot, view, methods: list[str]) -> None:
    qtbot.waitUntil(lambda: [e.method for e in view.explanations] == methods and view._drawn is not None,
                    timeout=60000)


def test_explain_view_ranks_maps_draws_curves_and_follows_target_and_masks(window, qtbot, tmp_path) -> None:
    view = window.views["Explain"]
    window.show_view("Explain")
    methods = ["rollout", "attention-gradient", "gradcam"]
    view.choose(methods=methods, baseline="zero")
    _wait_maps(qtbot, view, methods)
    assert not view.progress.isVisible() and not view.cancel_button.isVisible()
    assert [e.method for e in view._order] == [e.method for e in rel.ranked(view.explanations)]
    assert len(view._drawn.plots) == 3 and view.curves.ci.layout.count() == 1  # the first-ranked map's curves
    top = view.explanations[0].target.index
    # a click on the last map draws that method's curves
    last = view._drawn.plots[-1]
    view._clicked(type("Click", (), {"scenePos": lambda self: last.sceneBoundingRect().center()})())
    assert view.chosen == view._order[-1].method

    other = int(np.argsort(-window.session.result.probs)[1])
    before = {e.method: e.relevance for e in view.explanations}
    view.explanations = []
    view.choose(target=other)
    _wait_maps(qtbot, view, methods)
    assert all(e.target.index == other != top for e in view.explanations)
    changed = {e.method: not np.allclose(e.relevance, before[e.method]) for e in view.explanations}
    assert not changed["rollout"] and changed["attention-gradient"]  # rollout is the same map whatever the class

    mask = np.zeros_like(window.session.mask)
    mask[0, :4] = True
    view.explanations = []
    window.session.set_mask(mask)
    wait_result(qtbot, window.session)
    _wait_maps(qtbot, view, methods)
    assert all(np.array_equal(e.masked, mask) for e in view.explanations)

    header, rows = view.table()
    assert header[:2] == ["rank", "method"] and len(rows) == 3
    assert view.export_png(tmp_path / "explain.png").stat().st_size > 0
    assert "attention-gradient" in view.export_csv(tmp_path / "explain.csv").read_text()


def test_cancel_stops_the_work_and_says_so(window, qtbot) -> None:
    view = window.views["Explain"]
    window.show_view("Explain")
    view.choose(methods=["integrated-gradients", "occlusion"])
    qtbot.waitUntil(lambda: view.progress.isVisible(), timeout=10000)
    view.cancel()
    assert "cancelled" in view.note.full_text and not view.progress.isVisible()


EQUAL_MAPS_CHILD = """
present()
window.show_view("Explain")
view = window.views["Explain"]
settle(lambda: view._drawn is not None and len(view._drawn.plots) == 6, seconds=300)
settle(quiet=1.5)
boxes = [view.plots.mapFromScene(p.getViewBox().sceneBoundingRect()).boundingRect() for p in view._drawn.plots]
print(json.dumps({"sides": [min(b.width(), b.height()) for b in boxes],  # on the page: the pane scrolls to them
                  "titles": [plot.titleLabel.text for plot in view._drawn.plots], "height": window.height()}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("screen", [(1920, 1080), (1280, 800)], ids=["1920x1080", "1280x800"])
def test_every_map_of_the_grid_is_the_same_size_when_presenting(tmp_path: Path, screen: tuple[int, int]) -> None:
    """Presenting full screen on a projector's screen, the six default maps of the bundled model: a map whose
    title wrapped onto more lines was drawn smaller than the others (164 px against 197 at 1920x1080); every map
    now has the same data area (on the page, which scrolls vertically under the chosen map and its curves)."""
    shown = run_on_screen(tmp_path, screen, EQUAL_MAPS_CHILD)[-1]
    sides = shown["sides"]
    assert shown["height"] == screen[1] and len(sides) == 6, shown
    assert min(sides) >= 0.12 * screen[1] and max(sides) - min(sides) <= 3, json.dumps(shown)
