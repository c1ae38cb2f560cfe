"""Round-4 leftovers in the app: the session checks its masks, the size boxes go back after a refused size, the
window title and status bar quote a long source bounded, a dropped web address says why nothing opens, and a
training run from the app holds its output folder as `vit-explorer train` does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent

from vit_explorer.training.checkpoint import hold_folder

from .conftest import open_window, save_tiny


@pytest.mark.parametrize("bad", [0.5, np.nan, 2.0])
def test_the_session_refuses_a_mask_that_is_not_0_or_1(window, bad: float) -> None:
    session = window.session
    before, heads = session.mask.copy(), session.head_mask.copy()
    mask = np.zeros(session.grid)
    mask[0, 0] = bad
    with pytest.raises(ValueError, match="only 0 and 1"):
        session.set_mask(mask)
    head_mask = np.ones_like(heads)
    head_mask[0, 0] = bad if bad != 0.5 else -1.0
    with pytest.raises(ValueError, match="from 0 .* to 1"):
        session.set_head_mask(head_mask)
    with pytest.raises(ValueError, match="shape"):
        session.set_head_mask(np.ones((heads.shape[0] + 1, heads.shape[1])))
    assert (session.mask == before).all() and (session.head_mask == heads).all()
    session.set_head_mask(np.full_like(heads, 0.5))  # a head scaled, as the Heads view's measure does
    assert (session.head_mask == 0.5).all()


def test_the_size_boxes_go_back_after_a_refused_size(window) -> None:
    panel, session = window.image_panel, window.session
    size = session.size
    panel.height_box.setValue(4096)
    panel.width_box.setValue(4096)
    panel.apply_size()  # 1024 x 1024 patches of 4 pixels: over the budget of one forward pass
    assert session.size == size
    assert (panel.height_box.value(), panel.width_box.value()) == size
    assert "patches" in window.banner.text()


def test_a_long_source_is_quoted_bounded_in_the_title_and_the_status_bar(qtbot, tmp_path: Path) -> None:
    source = save_tiny(tmp_path / ("m" * 240))
    window = open_window(qtbot, str(source))
    assert len(window.windowTitle()) <= 100 and window.windowTitle().startswith("vit-explorer — mmm")
    assert len(window.statusBar().currentMessage()) <= 300
    window.close()


def test_a_dropped_web_address_says_why_nothing_opens(window) -> None:
    data = QMimeData()
    data.setUrls([QUrl("http://example.com/model.safetensors")])
    source = window.session.loaded
    window.dropEvent(QDropEvent(QPointF(10, 10), Qt.DropAction.CopyAction, data, Qt.MouseButton.LeftButton,
                                Qt.KeyboardModifier.NoModifier))
    assert "http://example.com/model.safetensors: a dropped web address is not opened" in window.banner.text()
    assert window.session.loaded is source


def test_training_from_the_app_holds_its_folder(qtbot, window, tmp_path: Path) -> None:
    window.docks["Training"].raise_()
    view = window.views["Training"]
    view.model_choice.setCurrentIndex(view.model_choice.findData("classroom-tiny"))
    view.steps.setValue(5)
    view.out.setText(str(tmp_path / "run"))
    with hold_folder(tmp_path / "run"):  # `vit-explorer train` writes there
        assert view.start()
        qtbot.waitUntil(lambda: not view.running, timeout=60000)
    assert "another `vit-explorer train` is writing to this folder" in view.status.text()
    assert not (tmp_path / "run" / "vit_explorer.json").exists()
