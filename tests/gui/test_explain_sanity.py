"""The Explain view's checks: the random row beside the maps (not one of them), ROAD's curves, and the sanity
check as a job on the view's one controls (progress, cancel) whose strip of the clicked method's maps is drawn
below them."""

from __future__ import annotations

from vit_explorer.explore import sanity
from vit_explorer.gui.views.explain import CURVE_KINDS


def _wait_maps(qtbot, view, methods: list[str]) -> None:
    qtbot.waitUntil(lambda: [e.method for e in view.explanations] == methods and view._drawn is not None,
                    timeout=60000)


def test_random_row_road_curves_and_the_sanity_strip(window, qtbot) -> None:
    view = window.views["Explain"]
    window.show_view("Explain")
    methods = ["rollout", "gradcam"]
    view.choose(methods=methods, baseline="zero")
    _wait_maps(qtbot, view, methods)
    assert view.random_row is not None and view.random_row.method == "random"
    assert len(view._drawn.plots) == 2 and "random attribution" in view.heading.text()
    view.curve_kind.setCurrentIndex(CURVE_KINDS.index("ROAD"))
    view._draw_curves()
    assert view.curves.ci.layout.count() == 1

    view.curve_kind.setCurrentIndex(CURVE_KINDS.index("sanity check"))
    view.curve_kind.activated.emit(view.curve_kind.currentIndex())  # as a user's choice: it runs the check
    assert view.progress.isVisible() or all(e.sanity for e in view.explanations)
    qtbot.waitUntil(lambda: all(e.sanity for e in view.explanations), timeout=60000)
    assert view.random_row.sanity is None  # the baseline row reads no model
    assert view.curve_kind.currentText() == "sanity check"
    titles = [item.titleLabel.text for item in view.curves.ci.items if hasattr(item, "titleLabel")]
    steps = [name for name, _ in sanity.cascade(window.session.loaded.model)]
    assert "trained" in titles  # the trained map, then one map per step with its two numbers
    titles = [t.replace("<br>", " ") for t in titles]  # wrapped to the column's width
    assert [t.split(" ρ ")[0] for t in titles if " ρ " in t] == steps
    numbers = view.note.full_text.split("trained map: ")[1].split(" · ")
    assert "Spearman ρ / SSIM" in view.note.full_text and [n.rsplit(" ", 1)[0] for n in numbers] == steps


def test_the_sanity_check_is_cancelled_and_says_so(window, qtbot) -> None:
    view = window.views["Explain"]
    window.show_view("Explain")
    view.choose(methods=["integrated-gradients"])
    _wait_maps(qtbot, view, ["integrated-gradients"])
    view.run_sanity()
    qtbot.waitUntil(lambda: view.progress.isVisible(), timeout=10000)
    view.cancel()
    assert "cancelled" in view.note.full_text and not view.progress.isVisible()
