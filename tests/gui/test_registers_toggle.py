"""Issue 29: the Prediction view's test-time-registers toggle runs the shifted model beside the original (in a
worker); its prediction equals `vit-explorer predict --test-time-registers` on the same neurons, its table exports
the shifted side, and turning it off restores the original alone."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from vit_explorer.cli import main

from .conftest import wait_result


def test_the_toggle_equals_the_cli_and_off_restores(qtbot, window, tiny_checkpoint: Path, sample_png: Path,
                                                    capsys) -> None:
    view = window.views["Prediction"]
    original = window.session.result
    original_probs = original.probs.copy()
    view.neurons.setText("1:3,0:5")
    view.register_mode.setCurrentText("mean")
    view.registers.setChecked(True)
    qtbot.waitUntil(lambda: view.shifted is not None, timeout=30000)
    assert view.shifted.neurons == ((1, 3), (0, 5)) and view.shifted.mode == "mean"

    assert main(["predict", str(tiny_checkpoint), str(sample_png), "--test-time-registers", "1:3,0:5",
                 "--register-mode", "mean", "--json"]) == 0
    logits = torch.tensor(json.loads(capsys.readouterr().out)["logits"])
    np.testing.assert_allclose(view.shifted.probs, logits.softmax(-1).numpy(), rtol=1e-5, atol=1e-7)
    assert not np.allclose(view.shifted.probs, original_probs)  # the register changes the prediction
    assert view.change.text().startswith("With 1 test-time register (1:3, 0:5)")
    header, rows = view.table()
    assert header[-1] == "prob_test_time_registers"
    np.testing.assert_allclose([r[-1] for r in rows], view.shifted.probs[[r[0] for r in rows]], rtol=1e-6)
    assert view._beside is not None and list(view.figure.markers) == ["test-time registers"]  # beside each bar

    view.registers.setChecked(False)
    assert view.shifted is None and view._beside is None
    assert "prob_test_time_registers" not in view.table()[0]
    result = wait_result(qtbot, window.session)
    np.testing.assert_allclose(result.probs, original_probs, rtol=1e-6)  # the model itself is untouched
    np.testing.assert_allclose([bar for bar in view.figure.values], np.sort(original_probs)[::-1][:len(
        view.figure.values)], rtol=1e-6)
