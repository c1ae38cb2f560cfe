"""A run's length from its pace and the accuracy measured runs of its model reached (training/expect.py)."""

from __future__ import annotations

from vit_explorer.models import preset
from vit_explorer.training.expect import MEASURED, estimate, measured_for, pace


def test_pace_needs_two_points_apart() -> None:
    assert pace((10, 2.0), (10, 2.0)) is None
    assert pace((10, 2.0), (30, 4.0)) == 10.0


def test_every_measured_figure_names_a_preset_and_where_it_was_measured() -> None:
    for m in MEASURED:
        preset(m.preset)
        assert 0 < m.accuracy <= 1 and m.steps > 0 and m.where


def test_the_nearest_measured_run_of_the_same_model() -> None:
    conv = preset("classroom", stem="conv")
    ref = measured_for(conv, "shapes", 900)
    assert ref is not None and ref.preset == "classroom-conv"
    assert measured_for(conv, "where", 900) is None
    assert measured_for(preset("classroom-tiny"), "shapes", 900) is None
    assert measured_for(conv.replace(num_classes=9), "shapes", 900) is not None  # any number of classes


def test_a_budget_run_is_sized_by_its_pace() -> None:
    conv = preset("classroom-conv")
    text = estimate(conv, "shapes", 10.0, (100, 10.0), None, 60.0)
    assert text.startswith("10.0 steps/s here: about 600 steps in the 60 s budget.")
    assert "Measured:" in text
    sized = estimate(preset("classroom-tiny"), "shapes", 20.0, (100, 5.0), 400, None)
    assert sized.startswith("20.0 steps/s here: 400 steps take about 20 s (15 s left).")
    assert "No measured run" in sized
