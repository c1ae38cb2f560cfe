"""`vit-explorer inspect` end to end on tiny checkpoints in every format: files, sizes, content."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vit_explorer.checkpoints.native import save_native
from vit_explorer.checkpoints.preprocess import Preprocess
from vit_explorer.cli import main
from vit_explorer.models import VisionTransformer, preset
from vit_explorer.report import parse_resolution

LABELS = [f"class {i}" for i in range(10)]


def _native(folder: Path, **overrides) -> Path:
    model = VisionTransformer(preset("classroom-tiny", **overrides)).eval()
    return save_native(folder, model, LABELS, Preprocess(model.config.image_size))


def _hf_vit(folder: Path) -> Path:
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(hidden_size=48, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96,
                       image_size=32, patch_size=8, id2label=dict(enumerate(LABELS)))
    ViTForImageClassification(config).save_pretrained(folder)
    return folder


def _timm_cait(folder: Path) -> Path:
    import timm
    from timm.models._hub import save_for_hf

    model = timm.create_model("cait_xxs24_224", pretrained=False, img_size=(32, 32), patch_size=8, embed_dim=48,
                              depth=2, num_classes=len(LABELS))
    save_for_hf(model, str(folder), safe_serialization=True,
                data_config={"input_size": (3, 32, 32), "crop_pct": 0.875, "interpolation": "bicubic"})
    return folder


def _inspect(*args: str) -> int:
    return main(["inspect", *map(str, args)])


def _check_outputs(out: Path, expected_figures: set[str], absent: set[str] = frozenset()) -> dict:
    summary = json.loads((out / "summary.json").read_text())
    assert expected_figures <= set(summary["figures"])
    assert not absent & set(summary["figures"])
    for name, (w, h) in summary["figures"].items():
        with Image.open(out / name) as png:
            assert png.format == "PNG" and png.size == (w, h)
            pixels = np.asarray(png.convert("RGB"), dtype=np.float32)
        assert pixels.std() > 10, f"{name} looks blank"
        assert (pixels.min(axis=-1) < 200).mean() > 0.01, f"{name} is nearly all white"
    with (out / "params.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert rows[-1]["stage"] == "total"
    assert sum(int(r["count"]) for r in rows[:-1]) == int(rows[-1]["count"]) == summary["parameters"]["total"]
    assert sum(summary["parameters"]["by_stage"].values()) == summary["parameters"]["total"]
    assert 1 <= len(summary["top_k"]) <= 5 and summary["top_k"][0]["label"] in LABELS
    return summary


def test_native_cls_at_another_rectangular_resolution(tmp_path: Path) -> None:
    source = _native(tmp_path / "model")
    assert _inspect(source, "--out", tmp_path / "out", "--resolution", "24x40") == 0
    summary = _check_outputs(tmp_path / "out", {"pe_similarity.png", "token_similarity.png",
                                                "patch_embedding_components.png", "attention_layers.png",
                                                "rollout.png", "attention_distance.png", "prediction.png"},
                             absent={"class_attention.png"})
    assert summary["input_size"] == [24, 40]
    assert summary["token_layout"] == {"prefix_tokens": ["cls"], "grid": [6, 10], "patch_size": 4, "num_tokens": 61,
                                       "class_attention": False}
    assert summary["image"]["kind"] in ("bundled sample", "synthetic")
    assert len(summary["mean_attention_distance_px"]) == 2
    assert summary["patch_embedding"]["conv_vs_unfold_max_abs_difference"] < 1e-5


def test_native_distilled_with_an_image_file(tmp_path: Path) -> None:
    source = _native(tmp_path / "model", prefix_tokens="cls+dist")
    image = tmp_path / "photo.png"
    Image.fromarray((np.random.default_rng(0).random((50, 70, 3)) * 255).astype(np.uint8)).save(image)
    assert _inspect(source, "--image", image, "--out", tmp_path / "out", "--top-k", "3") == 0
    summary = _check_outputs(tmp_path / "out", {"token_similarity.png", "pe_similarity.png"})
    assert summary["image"] == {"kind": "file", "path": str(image)}
    curves = summary["token_similarity"]
    assert set(curves) == {"cos([CLS], patch), mean over patches", "cos([CLS], [DIST])"}
    assert all(len(curve) == 3 for curve in curves.values())  # embeddings + 2 blocks
    assert len(summary["top_k"]) == 3


def test_native_gap_with_rope_has_no_pe_figures(tmp_path: Path) -> None:
    source = _native(tmp_path / "model", prefix_tokens="none", pool="gap", pos_embed="rope")
    assert _inspect(source, "--out", tmp_path / "out") == 0
    summary = _check_outputs(tmp_path / "out", {"attention_layers.png", "rollout.png"},
                             absent={"pe_similarity.png", "token_similarity.png"})
    assert "no additive PE" in summary["position_embedding"]["note"]


def test_hf_vit_folder(tmp_path: Path) -> None:
    source = _hf_vit(tmp_path / "hf")
    assert _inspect(source, "--out", tmp_path / "out") == 0
    summary = _check_outputs(tmp_path / "out", {"pe_similarity.png", "rollout.png"})
    assert summary["kind"] == "hf" and summary["token_layout"]["grid"] == [4, 4]


def test_timm_cait_hub_folder(tmp_path: Path) -> None:
    source = _timm_cait(tmp_path / "timm")
    assert _inspect(source, "--out", tmp_path / "out") == 0
    summary = _check_outputs(tmp_path / "out", {"class_attention.png", "rollout.png", "pe_similarity.png"},
                             absent={"token_similarity.png"})
    assert summary["kind"] == "timm"
    assert summary["token_layout"]["prefix_tokens"] == [] and summary["token_layout"]["class_attention"]
    assert set(summary["parameters"]["by_stage"]) == {"embeddings", "encoder", "class attention", "head"}


def test_model_without_classifier(tmp_path: Path) -> None:
    source = _native(tmp_path / "model", num_classes=0)
    assert _inspect(source, "--out", tmp_path / "out") == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["top_k"] == [] and "prediction.png" not in summary["figures"]
    assert "rollout.png" in summary["figures"]


@pytest.mark.parametrize(("args", "message"), [
    (["--resolution", "30x32"], "not a positive multiple of the patch size 4"),
    (["--resolution", "big"], "expected HxW"),
    (["--image", "missing.png"], "missing.png"),
])
def test_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                             message: str) -> None:
    source = _native(tmp_path / "model")
    assert _inspect(source, "--out", tmp_path / "out", *args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("vit-explorer inspect: error:") and message in err[-1]
    assert "Traceback" not in "\n".join(err)


def test_missing_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _inspect(tmp_path / "nothing", "--out", tmp_path / "out") == 2
    assert "vit-explorer inspect: error:" in capsys.readouterr().err


def test_parse_resolution() -> None:
    assert parse_resolution("384") == (384, 384)
    assert parse_resolution("224x320") == (224, 320)
    with pytest.raises(ValueError, match="expected HxW"):
        parse_resolution("224x")


def test_report_figures_come_from_one_forward_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The report runs the model once per image with every capture it needs (the app's update does the same):
    once for its image, once for each bundled sample beside it in the PCA figure (and, with gradients, for the
    relevance maps)."""
    calls = []
    original = VisionTransformer.forward_intermediates

    def counting(self, *args, **kwargs):
        if not torch.is_grad_enabled():  # the relevance figures' passes need gradients: they cannot share it
            calls.append(kwargs.get("capture"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(VisionTransformer, "forward_intermediates", counting)
    source = _native(tmp_path / "model")
    assert _inspect(source, "--out", tmp_path / "out") == 0
    images = len(json.loads((tmp_path / "out" / "summary.json").read_text())["pca_images"])
    assert len(calls) == images >= 1


def test_headless_without_a_display_or_qt_platform(tmp_path: Path) -> None:
    """A server shell: no DISPLAY and no QT_QPA_PLATFORM; Qt must not abort looking for a screen."""
    source = _native(tmp_path / "model")
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    command = [sys.executable, "-m", "vit_explorer", "inspect", str(source), "--out", str(tmp_path / "out")]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "out" / "rollout.png").exists()


# ---------------------------------------------------------------------------- the output folder
def _report_files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def test_a_report_is_replaced_only_with_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, out = _native(tmp_path / "model"), tmp_path / "report"
    assert _inspect(source, "--out", out) == 0
    first = _report_files(out)
    capsys.readouterr()
    assert _inspect(source, "--out", out, "--resolution", "48x64") == 2
    err = capsys.readouterr().err.strip()
    assert err == f"vit-explorer inspect: error: --out {out}: is not empty; give --overwrite to replace the report " \
                  "in it, or choose an empty or new folder"
    assert _report_files(out) == first
    assert _inspect(source, "--out", out, "--resolution", "48x64", "--overwrite") == 0
    assert json.loads((out / "summary.json").read_text())["input_size"] == [48, 64]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "report"]  # no temporaries left beside it


def test_overwrite_replaces_only_a_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, out = _native(tmp_path / "model"), tmp_path / "photos"
    out.mkdir()
    (out / "holiday.jpg").write_bytes(b"mine")
    assert _inspect(source, "--out", out, "--overwrite") == 2
    assert "holds holiday.jpg, which inspect does not write" in capsys.readouterr().err
    assert _report_files(out) == {"holiday.jpg": b"mine"}


def test_a_link_in_the_output_folder_is_never_written_through(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    source, out, precious = _native(tmp_path / "model"), tmp_path / "report", tmp_path / "precious.json"
    precious.write_text("keep me")
    out.mkdir()
    (out / "summary.json").symlink_to(precious)
    assert _inspect(source, "--out", out) == 2  # not empty
    assert "--overwrite" in capsys.readouterr().err
    assert _inspect(source, "--out", out, "--overwrite") == 0  # the link is replaced, not followed
    assert precious.read_text() == "keep me"
    assert not (out / "summary.json").is_symlink() and json.loads((out / "summary.json").read_text())["top_k"]


@pytest.mark.slow
def test_a_fifo_in_the_output_folder_does_not_hang(tmp_path: Path) -> None:
    source, out = _native(tmp_path / "model"), tmp_path / "report"
    out.mkdir()
    os.mkfifo(out / "summary.json")
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    for extra in ([], ["--overwrite"]):  # refused (not empty); replaced without opening the FIFO
        done = subprocess.run([sys.executable, "-m", "vit_explorer", "inspect", str(source), "--out", str(out),
                               *extra], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == (0 if extra else 2), done.stderr[-2000:]
    assert (out / "summary.json").is_file() and json.loads((out / "summary.json").read_text())["top_k"]


def test_a_full_disk_leaves_the_earlier_report_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import errno

    import vit_explorer.gui.figures as figures

    source, out = _native(tmp_path / "model"), tmp_path / "report"
    assert _inspect(source, "--out", out) == 0
    first = _report_files(out)
    real, drawn = figures.render_png, []

    def fills_up(*args: object, **kwargs: object) -> object:
        drawn.append(1)
        if len(drawn) > 2:  # the third figure finds the disk full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(*args, **kwargs)

    monkeypatch.setattr(figures, "render_png", fills_up)
    capsys.readouterr()
    assert _inspect(source, "--out", out, "--overwrite", "--resolution", "48x64") == 2
    err = [line for line in capsys.readouterr().err.replace("\r", "\n").splitlines() if "error:" in line]
    assert len(err) == 1 and err[0].startswith(f"vit-explorer inspect: error: {out}: writing failed"), err
    assert "No space left on device" in err[0] and "the folder is as it was" in err[0]
    assert _report_files(out) == first and sorted(p.name for p in tmp_path.iterdir()) == ["model", "report"]
