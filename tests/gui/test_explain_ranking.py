"""The Explain view ranks the chosen methods over the Dataset view's images: a table of mean AUCs with bootstrap
intervals and a bar figure with the intervals' ends, cancellable with progress; without a dataset it says where to
get one. The ranking runs on the view's one controls: its Cancel stops it."""

from __future__ import annotations

from pathlib import Path

import pytest

from vit_explorer.explore import ranking as rk

from .test_dataset_state import run


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VIT_EXPLORER_CACHE", str(tmp_path / "cache"))


@pytest.mark.slow
def test_explain_view_ranks_methods_over_the_dataset(qtbot, window) -> None:
    view = window.views["Explain"]
    window.show_view("Explain")
    view.choose(methods=["rollout", "gradcam"])
    view.rank_button.click()
    assert "Dataset view first" in view.note.text() and view.ranking is None

    window.docks["Dataset"].raise_()
    run(qtbot, window, "shapes", 12)
    window.show_view("Explain")
    view.rank_button.click()
    assert view.job.running and view.job.button.text() == "Cancel" and view.job.button.isVisibleTo(view)
    view.job.button.click()  # cancelled: nothing delivered
    assert not view.job.running and "cancelled" in view.note.text() and view.ranking is None

    view.rank_button.click()
    qtbot.waitUntil(lambda: view.ranking is not None and not view.job.running, timeout=90000)
    result = view.ranking
    assert result.images == 12 and sorted(result.methods) == ["gradcam", "random", "rollout"]  # the baseline row
    header, rows = rk.csv_rows(result)
    assert view.ranking_table.rowCount() == 3 and view.ranking_table.columnCount() == len(header)
    assert [view.ranking_table.horizontalHeaderItem(i).text() for i in range(len(header))] == header
    assert [view.ranking_table.item(r, 0).text() for r in range(3)] == result.methods
    assert view.ranking_table.isVisibleTo(view) and view.ranking_plots.isVisibleTo(view)
    assert [view.rank_score.itemText(i) for i in range(view.rank_score.count())] == result.columns
    assert view.ranking_plots.ci.layout.count() == 1
    for m in result.methods:
        s = result.scores[m]["deletion"]
        assert s.low <= s.mean <= s.high
