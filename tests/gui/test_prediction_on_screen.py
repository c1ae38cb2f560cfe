"""The Prediction dock as a person sees it on a real screen: the probability axis's three labels are all drawn
(a large presented font once hid "0%" and "100%"), and a features-only model's chart, title and values stay
inside the dock (its title once ran past the dock's edge, cutting the values off with it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .screens import run_on_screen

CHILD = r"""
from PySide6.QtGui import QImage, QPainter
if sys.argv[2] == "present":
    present()
settle()
view = window.views["Prediction"]
plot = view._drawn.plot
image = QImage(10, 10, QImage.Format.Format_ARGB32)
painter = QPainter(image)
drawn = [spec[2] for spec in plot.getAxis("bottom").generateDrawSpecs(painter)[2]]
painter.end()
right = lambda item: view.plots.mapFromScene(item.sceneBoundingRect().topRight()).x()
print(json.dumps({"ticks": drawn, "viewport": view.plots.viewport().width(), "title": right(plot.titleLabel.item),
                  "values": [right(text) for text in view._drawn.texts]}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("screen", [(1280, 800), (1024, 768)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_probability_axis_keeps_its_end_labels_when_presented(tmp_path: Path, screen: tuple[int, int]) -> None:
    shown = run_on_screen(tmp_path, screen, CHILD, "", "present")[-1]
    assert shown["ticks"] == ["0%", "50%", "100%"], shown


@pytest.mark.slow
def test_a_features_only_chart_stays_inside_the_dock(tmp_path: Path) -> None:
    from vit_explorer.checkpoints import save
    from vit_explorer.explore.build import build_loaded
    from vit_explorer.models import preset

    folder = save(build_loaded(preset("classroom-tiny", num_classes=0), device="cpu"), tmp_path / "features")
    shown = run_on_screen(tmp_path, (1280, 800), CHILD, str(folder), "normal")[-1]
    assert shown["values"] and max(shown["values"]) <= shown["viewport"], shown
    assert shown["title"] <= shown["viewport"], shown
