"""The Parameters view follows the input size (compute) and ignores masks."""

from __future__ import annotations

import numpy as np

from .conftest import wait_result


def test_the_compute_follows_the_size_and_masks_change_nothing(qtbot, window) -> None:
    window.docks["Parameters"].raise_()
    view = window.views["Parameters"]
    session = window.session
    before = view.tables
    assert before is not None and before.size == session.size
    mask = np.zeros(session.grid, bool)
    mask[0, 0] = True
    session.set_mask(mask)
    wait_result(qtbot, session)
    assert view.tables is before  # a mask changes neither parameters nor compute
    h, w = session.size
    session.set_size((h, 2 * w))
    wait_result(qtbot, session)
    assert view.tables.size == (h, 2 * w) and view.tables.params is before.params
    assert view.tables.total_flops > before.total_flops and f"one {h}×{2 * w} image" in view.note.text()
