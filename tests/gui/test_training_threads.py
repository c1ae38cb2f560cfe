"""The Training view trains on the threads `vit-explorer train` takes (one on a CPU by default) and says so."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from vit_explorer.training import threads

from .test_training import configure


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU run leaves the CPU threads as they are")
def test_the_training_view_says_how_many_cpu_threads_it_trains_on(qtbot, window, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(threads.ENV, raising=False)
    window.docks["Training"].raise_()
    view = window.views["Training"]
    configure(view, tmp_path / "run", steps=5)
    said: list[str] = []
    shown = view.note.setText
    monkeypatch.setattr(view.note, "setText", lambda text: (said.append(text), shown(text)))
    assert view.start()
    qtbot.waitUntil(lambda: view.runs[0].finished is not None and not view.running, timeout=120000)
    assert any(text.startswith("training on 1 CPU thread (the default on a CPU") for text in said), said
