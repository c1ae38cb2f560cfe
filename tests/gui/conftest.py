"""GUI fixtures: settings in a temporary folder, tiny checkpoints, a ready main window."""

from __future__ import annotations

import gc
import resource
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from PIL import Image
from PySide6.QtCore import QSettings

from vit_explorer.checkpoints import Preprocess, save_native
from vit_explorer.models import VisionTransformer, preset


@pytest.fixture(autouse=True)
def _settings(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Keep the recent-sources list out of the user's real settings."""
    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope,
                      str(tmp_path_factory.mktemp("settings")))


@pytest.fixture(scope="package", autouse=True)
def _gc_back_on_after_gui_tests() -> Iterator[None]:
    """make_app hands garbage collection to the GUI thread's timer (which freezes long-lived objects); later
    (non-GUI) tests get it back."""
    yield
    gc.unfreeze()
    gc.collect()
    gc.enable()


def save_tiny(folder: Path, name: str = "classroom-tiny", **overrides: object) -> Path:
    model = VisionTransformer(preset(name, **overrides)).eval()
    labels = [f"shape {i}" for i in range(model.config.num_classes)]
    pre = Preprocess(model.config.image_size, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
    return save_native(folder, model, labels, pre)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def deit_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("deit"), prefix_tokens="cls+dist")


@pytest.fixture(scope="session")
def sample_png(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("img") / "stripes.png"
    image = Image.new("RGB", (48, 40), (20, 20, 20))
    for x in range(0, 48, 6):
        image.paste((250, 200, 40), (x, 0, x + 3, 40))
    image.save(path)
    return path


def open_window(qtbot, source: str | None):
    """The main window on a source, shown, its views built and its first prediction made."""
    from vit_explorer.gui.app import make_app
    from vit_explorer.gui.main_window import MainWindow

    make_app()
    win = MainWindow(source)
    qtbot.addWidget(win)
    win.show()
    with qtbot.waitSignal(win.ready, timeout=30000):
        pass
    qtbot.waitUntil(lambda: win.session.loaded is not None and win.session.result is not None, timeout=30000)
    return win


@pytest.fixture
def window(qtbot, tiny_checkpoint: Path, sample_png: Path):
    """The main window on a tiny native checkpoint, with an image and a first prediction."""
    win = open_window(qtbot, str(tiny_checkpoint))
    win.image_panel.open_path(str(sample_png))
    wait_result(qtbot, win.session)
    yield win
    win.close()


def wait_result(qtbot, session, timeout: int = 20000):
    """Wait until the newest forward pass has been delivered for the current inputs."""
    def current() -> bool:
        r = session.result
        return (r is not None and r.inputs.image_id == session.image_id and r.inputs.model_id == session.model_id
                and r.inputs.size == session.size and (r.inputs.mask == session.mask).all()
                and (r.inputs.head_mask == session.head_mask).all() and r.inputs.hooks == session.hooks)
    qtbot.waitUntil(current, timeout=timeout)
    return session.result


@pytest.fixture(scope="session")
def hf_vit_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny transformers ViT classifier in its save_pretrained layout."""
    from transformers import ViTConfig, ViTForImageClassification

    labels = ["cat", "dog", "bird"]
    model = ViTForImageClassification(ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32, patch_size=8,
        id2label=dict(enumerate(labels)), label2id={n: i for i, n in enumerate(labels)}))
    folder = tmp_path_factory.mktemp("hf_vit")
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def timm_cait_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny timm CaiT in timm's own hub layout (config.json + model.safetensors)."""
    import timm
    from timm.models._hub import save_for_hf

    model = timm.create_model("cait_xxs24_224", pretrained=False, img_size=32, patch_size=8, num_classes=5,
                              embed_dim=32, depth=2).eval()
    folder = tmp_path_factory.mktemp("timm_cait")
    save_for_hf(model, str(folder), safe_serialization=True,
                data_config={"input_size": (3, 32, 32), "crop_pct": 0.875, "interpolation": "bicubic"})
    return folder


@contextmanager
def address_space(extra: int = 2 * 2**30) -> Iterator[None]:
    """This process may map at most `extra` bytes more than it does now (what the budget sees as free)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:
        mapped = int(f.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (mapped + extra, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
