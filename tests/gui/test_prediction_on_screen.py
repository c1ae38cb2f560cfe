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


TOGGLED = r"""
view = window.views["Prediction"]
if sys.argv[2] == "on":
    view.registers.setChecked(True)
settle(lambda: view.shifted is not None or sys.argv[2] != "on")
settle()
top = lambda w: w.mapTo(window, w.rect().topLeft()).y()
bottom = lambda w: w.mapTo(window, w.rect().bottomLeft()).y()
print(json.dumps({"settings_shown": view.register_row.isVisible(), "controls_bottom": bottom(view.toolbar),
                  "settings_top": top(view.register_row), "settings_bottom": bottom(view.register_row),
                  "plots_top": top(view.plots), "plots_bottom": bottom(view.plots),
                  "note_top": top(view.change), "note_shown": view.change.isVisible(),
                  "note_needs": view.change.heightForWidth(view.change.width()), "note_height": view.change.height()}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("toggle", ["off", "on"])
def test_the_register_settings_take_one_row_and_the_sentence_never_covers_the_chart(tmp_path: Path,
                                                                                    toggle: str) -> None:
    """At 1024x768 the test-time-registers settings once took two more control rows and the sentence under the
    chart was drawn over its axis: the settings show (in one row) only while the toggle is on, and the sentence
    gets the height its wrapped lines need, below the chart."""
    shown = run_on_screen(tmp_path, (1024, 768), TOGGLED, "", toggle)[-1]
    assert shown["settings_shown"] == (toggle == "on"), shown
    if toggle == "on":  # one row, between the controls and the chart
        assert shown["controls_bottom"] <= shown["settings_top"] < shown["settings_bottom"] <= shown["plots_top"]
        assert shown["settings_bottom"] - shown["settings_top"] < 50, shown
    assert shown["plots_bottom"] - shown["plots_top"] >= 120, shown
    assert shown["note_shown"], shown
    assert shown["note_top"] > shown["plots_bottom"], shown
    assert shown["note_height"] >= shown["note_needs"], shown


MASKED = r"""
present()
view = window.views["Prediction"]
if sys.argv[2] == "lesson":  # step 6: the Prediction view is the step's figure, 40 % of the patches masked
    window.open_lesson(str(sys.argv[3]))
    window.lesson.go(5)
else:  # the dock beside the image: narrow
    window.image_panel.percent.setValue(40)
    window.image_panel.random_mask()
settle(lambda: window.session.result is not None and window.session.result.baseline_probs is not None)
settle()
top = lambda w: w.mapTo(window, w.rect().topLeft()).y()
bottom = lambda w: w.mapTo(window, w.rect().bottomLeft()).y()
print(json.dumps({"shown": view.change.text(), "full": view.change.full_text, "tooltip": view.change.toolTip(),
                  "needs": view.change.heightForWidth(view.change.width()), "height": view.change.height(),
                  "note_top": top(view.change), "plots_top": top(view.plots), "plots_bottom": bottom(view.plots)}))
"""
LESSON = Path(__file__).resolve().parents[2] / "resources" / "lessons" / "vit-basics.json"


@pytest.mark.slow
@pytest.mark.parametrize("where", ["lesson", "dock"])
@pytest.mark.parametrize("screen", [(1280, 800), (1024, 768)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_presented_the_masks_effect_keeps_its_numbers_on_screen(tmp_path: Path, screen: tuple[int, int],
                                                                where: str) -> None:
    """Lesson step 6 says "the prediction panel says how the probability of the class changed", but presented the
    sentence was elided at its end, where the numbers are: "With 26 masked patches, 0 heads off: 'star' 8…". It is
    elided in the middle now (one line, the figure keeps its room): its end stays on screen (in the step's wide
    view the new probability and the change whole), the whole sentence in the tooltip, the line below the chart,
    which keeps at least 120 px."""
    shown = run_on_screen(tmp_path, screen, MASKED, "", where, str(LESSON))[-1]
    full, text = shown["full"], shown["shown"]
    assert full.startswith("With ") and "→" in full, shown
    assert text.startswith("With ") and text.endswith(full[-8:]), shown  # its start and its last number
    if where == "lesson":  # the step's wide view: the new probability and the change, whole
        assert text.endswith(full.split("→")[-1]), shown
    assert text == full or shown["tooltip"] == full, shown
    assert shown["note_top"] > shown["plots_bottom"] and shown["plots_bottom"] - shown["plots_top"] >= 120, shown
