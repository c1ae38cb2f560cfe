"""The Dataset view holds one analysis at a time, in the session: a second dataset replaces the first whole, so
its projector is never coloured with the other's labels (it raised IndexError: index 300 is out of bounds for
axis 0 with size 300 over the old points), and a projection of a replaced analysis is dropped."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vit_explorer.explore import dataset_analysis as A


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VIT_EXPLORER_CACHE", str(tmp_path / "cache"))


def run(qtbot, window, data: str, limit: int) -> A.DatasetState:
    view = window.views["Dataset"]
    before = window.session.dataset
    view.data.setCurrentText(data)
    view.limit.setValue(limit)
    view.run_button.click()
    qtbot.waitUntil(lambda: window.session.dataset is not before and view.points is not None
                    and view.run_button.text() == "Analyse", timeout=90000)
    return window.session.dataset


def folder(root: Path, n: int) -> Path:
    rng = np.random.default_rng(0)
    for i in range(n):
        cls = root / f"class{i % 2}"
        cls.mkdir(parents=True, exist_ok=True)
        Image.fromarray((rng.random((32, 32, 3)) * 255).astype(np.uint8)).save(cls / f"{i}.png")
    return root


def test_a_second_dataset_replaces_the_first_whole(qtbot, window, tmp_path: Path) -> None:
    window.docks["Dataset"].raise_()
    view = window.views["Dataset"]
    first = run(qtbot, window, "shapes", 60)
    assert len(first.projection.rows) == 60 and first.projection.rows.max() == 59
    second = run(qtbot, window, str(folder(tmp_path / "images", 24)), 24)
    assert not window.banner.isVisible(), window.banner.text()
    assert second.analysis is not first.analysis and len(second.analysis.features) == 24
    assert second.projection is not None and len(second.projection.rows) == 24 == len(view.scatter.data)
    assert view.analysis is second.analysis and len(view.point_colours()) == 24
    assert [label.text for _, label in view.legend.items] == ["class0", "class1"]


def test_a_projection_of_a_replaced_analysis_is_dropped(qtbot, window) -> None:
    window.docks["Dataset"].raise_()
    view = window.views["Dataset"]
    first = run(qtbot, window, "shapes", 60)
    newer = replace(first.analysis)  # another analysis, as a second run gives
    window.session.set_dataset(A.DatasetState(newer))
    view._projected(first.analysis, A.Projection(np.zeros((60, 2)), np.arange(60), np.full(60, -1)))  # late
    assert window.session.dataset.analysis is newer and window.session.dataset.projection is None
    mine = A.Projection(np.zeros((60, 2)), np.arange(60), np.full(60, -1))
    view._projected(newer, mine)
    assert window.session.dataset.projection is mine and view.points is mine.points


def test_a_new_model_clears_the_analysis(qtbot, window, tiny_checkpoint: Path) -> None:
    window.docks["Dataset"].raise_()
    run(qtbot, window, "shapes", 40)
    with qtbot.waitSignal(window.session.model_changed, timeout=30000):
        window.load(str(tiny_checkpoint))
    assert window.session.dataset is None and window.views["Dataset"].points is None


def test_the_projector_legend_sits_beside_its_points(qtbot, window) -> None:
    window.docks["Dataset"].raise_()
    view = window.views["Dataset"]
    run(qtbot, window, "shapes", 60)
    view.tabs.setCurrentIndex(view.tabs.indexOf(view.projector.parentWidget()))
    qtbot.waitUntil(lambda: view.legend.items and view.legend.sceneBoundingRect().width() > 0, timeout=10000)
    data = view.scatter_plot.vb.sceneBoundingRect()
    assert view.legend.items and not data.intersects(view.legend.sceneBoundingRect())
