"""The Components view's parts are in logit units (they add up to the logit, 4.12 say): their axis says so, not
"share of the logit", which read as a fraction of 1."""

from __future__ import annotations

import pyqtgraph as pg

from .test_components_view import show


def test_the_parts_axis_is_in_logit_units(qtbot, window) -> None:
    view = show(window, "Components")
    qtbot.waitUntil(lambda: view.decomposed is not None, timeout=20000)
    plots = [item for item in view.parts_plots.ci.items if isinstance(item, pg.PlotItem)]
    titles = [plot.getAxis("bottom").labelText for plot in plots]
    assert titles and all("share" not in title for title in titles)
    assert any("logit units" in title for title in titles)
