"""The families of issue 18 in the app: a SigLIP 2 (NaFlex) model opens, and its Native button gives the image
its own aspect-ratio grid (as Siglip2ImageProcessor does), which every view then runs at."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from .conftest import open_window, wait_result


@pytest.fixture(scope="module")
def siglip2_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import Siglip2VisionConfig, Siglip2VisionModel

    model = Siglip2VisionModel(Siglip2VisionConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                                   intermediate_size=64, patch_size=8, num_patches=16))
    folder = tmp_path_factory.mktemp("siglip2")
    model.save_pretrained(folder)
    return folder


def test_native_gives_a_naflex_image_its_own_grid(qtbot, siglip2_folder: Path, tmp_path: Path) -> None:
    from transformers.models.siglip2.image_processing_siglip2 import get_image_size_for_max_num_patches

    win = open_window(qtbot, str(siglip2_folder))
    session = win.session
    assert session.size == (32, 32)  # the table's own square grid first
    wide = tmp_path / "wide.png"
    Image.new("RGB", (300, 100), (200, 30, 30)).save(wide)
    win.image_panel.open_path(str(wide))
    wait_result(qtbot, session)
    win.image_panel.reset_size()
    result = wait_result(qtbot, session)
    expected = get_image_size_for_max_num_patches(100, 300, patch_size=8, max_num_patches=16)
    assert session.size == expected == (16, 48) and result.layout.grid == (2, 6)  # the 3 : 1 image, 12 patches
    assert (win.image_panel.height_box.value(), win.image_panel.width_box.value()) == expected
    win.close()
