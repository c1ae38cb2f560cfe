"""Non-finite outputs: a config whose values make them is refused by every loader (a RoPE base below 1), and a
forward pass that gives them (finite weights that overflow) is warned about in `predict` and `inspect`, as
non-finite weights are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from PIL import Image

import vit_explorer
from vit_explorer.checkpoints import CheckpointError, Preprocess, save_native
from vit_explorer.cli import main
from vit_explorer.models import ConfigError, VisionTransformer, preset

OVERFLOW = "the forward pass gave NaN or infinite outputs"


def saved(folder: Path, model: VisionTransformer) -> Path:
    pre = Preprocess(model.config.image_size, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
    return save_native(folder, model, [f"class {i}" for i in range(model.config.num_classes)], pre)


def test_a_saved_config_with_a_tiny_rope_base_is_refused_naming_the_field(tmp_path: Path) -> None:
    folder = saved(tmp_path / "rope", VisionTransformer(preset("classroom-tiny", pos_embed="rope")).eval())
    meta_path = next(p for p in folder.iterdir() if p.suffix == ".json")
    meta = json.loads(meta_path.read_text())
    meta["config"]["rope_theta"] = 1e-300
    meta_path.write_text(json.dumps(meta))
    with pytest.raises((CheckpointError, ConfigError), match="rope_theta"):
        vit_explorer.load(str(folder), device="cpu")


@pytest.fixture(scope="module")
def overflowing(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Finite weights whose products overflow float32: every logit is infinite or NaN."""
    model = VisionTransformer(preset("classroom-tiny")).eval()
    with torch.no_grad():
        model.norm.weight.fill_(1e30)
        model.head.weight.fill_(1e30)
    return saved(tmp_path_factory.mktemp("overflow"), model)


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("image") / "grey.png"
    Image.new("RGB", (32, 32), (90, 120, 150)).save(path)
    return path


def test_predict_warns_about_non_finite_outputs(overflowing: Path, image: Path, capsys) -> None:
    assert main(["predict", str(overflowing), str(image), "--json"]) == 0
    out, err = capsys.readouterr()
    assert "vit-explorer predict: warning:" in err and OVERFLOW in err
    assert None in json.loads(out)["logits"]  # strict JSON: null for NaN and infinity


def test_inspect_writes_the_warning_into_the_summary(overflowing: Path, image: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "report"
    assert main(["inspect", str(overflowing), "--image", str(image), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert any(OVERFLOW in line for line in summary["warnings"])
    assert OVERFLOW in capsys.readouterr().err


def test_a_finite_model_gives_no_such_warning(image: Path, tmp_path: Path, capsys) -> None:
    folder = saved(tmp_path / "fine", VisionTransformer(preset("classroom-tiny")).eval())
    assert main(["predict", str(folder), str(image)]) == 0
    assert "warning" not in capsys.readouterr().err
