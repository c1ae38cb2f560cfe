"""AIMv2's native-resolution tower without its head (the hub's apple/aimv2-large-patch14-native) in the app: the
Prediction dock says what its features are, and the Position view draws its columns-first sine-cosine table for a
non-square input's own grid."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from vit_explorer.models.position import sincos_2d

from .conftest import open_window, wait_result


@pytest.fixture(scope="module")
def aimv2_native_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import Aimv2VisionConfig, Aimv2VisionModel

    torch.manual_seed(0)
    model = Aimv2VisionModel(Aimv2VisionConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                               intermediate_size=64, patch_size=8, image_size=32, is_native=True,
                                               use_head=False))
    folder = tmp_path_factory.mktemp("aimv2_native")
    model.save_pretrained(folder)
    return folder


def test_aimv2_native_says_its_features_and_draws_its_table(qtbot, aimv2_native_folder: Path,
                                                            sample_png: Path) -> None:
    win = open_window(qtbot, str(aimv2_native_folder))
    session = win.session
    win.image_panel.open_path(str(sample_png))
    wait_result(qtbot, session)
    assert "its features, the mean of the normed patch tokens" in win.views["Prediction"].change.text()
    session.set_size((24, 48))  # any size the patch divides: a 3 x 6 grid
    result = wait_result(qtbot, session)
    assert result.layout.grid == (3, 6)
    win.docks["Position embeddings"].raise_()
    view = win.views["Position embeddings"]
    qtbot.waitUntil(lambda: view.sim is not None and view.sim.grid == (3, 6), timeout=10000)
    assert view.sim.scheme == "sincos_2d_xy" and view.sim.patches.shape == (3, 6, 3, 6)
    table = torch.nn.functional.normalize(sincos_2d((3, 6), 32, cols_first=True), dim=-1)
    expected = (table @ table.T).reshape(3, 6, 3, 6).numpy()
    assert abs(view.sim.patches - expected).max() < 1e-5  # the cosine similarity of the table's rows
    win.close()
