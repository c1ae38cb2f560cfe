"""The Position view on schemes that act inside attention: their own picture, computed off the GUI thread."""

from __future__ import annotations

from pathlib import Path

import pytest

from vit_explorer.explore.figures import SimilarityFigure

from .conftest import save_tiny, wait_result


@pytest.mark.parametrize(("scheme", "colorbar"), [("rope", "mean cos of angle differences"),
                                                  ("rel_bias", "attention logit bias")])
def test_a_scheme_inside_attention_shows_its_own_picture(qtbot, window, tmp_path: Path, scheme: str,
                                                         colorbar: str) -> None:
    source = save_tiny(tmp_path / scheme, pos_embed=scheme)
    with qtbot.waitSignal(window.session.model_changed, timeout=30000):
        window.load(str(source))
    wait_result(qtbot, window.session)
    window.docks["Position embeddings"].raise_()
    view = window.views["Position embeddings"]
    qtbot.waitUntil(lambda: view.sim is not None and view.sim.scheme == scheme and view.figure is not None,
                    timeout=10000)
    assert isinstance(view.figure, SimilarityFigure) and view.figure.colorbar_label == colorbar
    assert view.figure.similarity.shape == (8, 8, 8, 8) and view.sim.patches is None
