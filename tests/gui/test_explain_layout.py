"""The Explain view outside a lesson, as large as inside (issue 27, item 7): at 1280x800 and 1024x768 in normal mode
it drew six maps of ~223x86 px and a curve plot ~45 px tall with one tick. Now the chosen map is drawn large (its
data area at least 35 % of the screen's height), its curves beside or under it (at least 120 px), the ranked maps
right below (each at least 120 px), the pane scrolls vertically only, and the legend is under the data, not on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from vit_explorer.gui.measure import LARGEST_SHARE, SMALLEST_PX

from .screens import run_on_screen

EXPLAIN_CHILD = r"""
import pyqtgraph as pg
from PySide6.QtCore import QPoint, QRect

maximise()
window.show_view("Explain")
view = window.views["Explain"]
settle(lambda: view._drawn is not None and len(view._drawn.plots) == 6 and view._detail is not None, seconds=300)
settle(quiet=1.5)

def on_screen(item, widget):
    # an item's rectangle in window pixels, unclipped (what it takes on the page: scroll to see all of it)
    rect = widget.mapFromScene(item.sceneBoundingRect()).boundingRect()
    return QRect(widget.viewport().mapTo(window, rect.topLeft()), rect.size())

def boxes(widget):
    return [on_screen(p.getViewBox(), widget) for p in widget.scene().items() if isinstance(p, pg.PlotItem)]

viewport = view.maps_area.viewport()
shown = QRect(viewport.mapTo(window, QPoint(0, 0)), viewport.size())
curves = [p for p in view.curves.scene().items() if isinstance(p, pg.PlotItem)][0]
legend = on_screen(curves.legend, view.curves)
left = curves.getAxis("left")
low, high = curves.getViewBox().viewRange()[1]
ticks = [v for level in left.tickValues(low, high, left.height()) for v in level[1]]
print(json.dumps({
    "screen": [window.screen().geometry().width(), window.screen().geometry().height()],
    "detail": [on_screen(view._detail.plots[0].getViewBox(), view.detail).getRect()],
    "curves": [b.getRect() for b in boxes(view.curves)],
    "maps": [on_screen(p.getViewBox(), view.plots).getRect() for p in view._drawn.plots],
    "shown": shown.getRect(),
    "legend_on_data": legend.intersects(boxes(view.curves)[0]),
    "y_ticks": len(ticks),
    "page_width": view.page.width(), "viewport_width": viewport.width(),
    "widgets": {name: QRect(widget.mapTo(window, QPoint(0, 0)), widget.size()).getRect()
                for name, widget in (("detail", view.detail), ("curves", view.curves), ("maps", view.plots))},
    "beside": view.detail_row.direction().name}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("screen", [(1280, 800), (1024, 768), (1920, 1080)], ids=["1280x800", "1024x768", "1920x1080"])
def test_explain_figures_are_readable_in_a_normal_window(tmp_path: Path, screen: tuple[int, int]) -> None:
    out = run_on_screen(tmp_path, screen, EXPLAIN_CHILD)[-1]
    height = out["screen"][1]
    x, y, w, h = out["shown"]

    def visible(r: list[int]) -> bool:  # wholly inside the scroll area's viewport, as first shown
        return r[0] >= x - 1 and r[1] >= y - 1 and r[0] + r[2] <= x + w + 1 and r[1] + r[3] <= y + h + 1

    (detail,) = out["detail"]
    assert min(detail[2:]) >= LARGEST_SHARE * height - 1 and visible(detail), out  # the figure the view is about
    (curve,) = out["curves"]
    assert min(curve[2:]) >= SMALLEST_PX, out
    if screen[0] >= 1280:  # its curves beside it, on screen with it
        assert out["beside"] == "LeftToRight" and visible(curve), out
    else:  # the pane is too narrow for both side by side: the curves right under the map (scroll to them)
        assert out["beside"] == "TopToBottom" and detail[1] + detail[3] < curve[1] < detail[1] + detail[3] + 150, out
    assert out["y_ticks"] >= 3 and not out["legend_on_data"], out
    assert len(out["maps"]) == 6 and all(min(m[2:]) >= SMALLEST_PX for m in out["maps"]), out  # scroll to see them
    assert max(m[3] for m in out["maps"]) - min(m[3] for m in out["maps"]) <= 2, out  # every map the same size
    assert out["page_width"] <= out["viewport_width"], out  # scrolls vertically only: nothing cut on the right
    # the ranked maps right under the chosen map and its curves (at 1920x1080 the room left went between them: 120 px)
    widgets = out["widgets"]
    above = max(widgets[name][1] + widgets[name][3] for name in ("detail", "curves"))
    assert 0 <= widgets["maps"][1] - above <= 12, widgets
