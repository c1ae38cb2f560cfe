"""Hostile inputs, round 4, through the CLI and the library: a label with a newline stays on its line, a patching
sweep runs each position once, a probe of 1,500 classes takes the cheaper probe and says so (in a child under a time
limit: it sat in lbfgs for minutes), CKA warns on states that do not vary, a lesson saved with a byte-order mark is
read, and under torchrun a held output folder ends every rank at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

from vit_explorer.checkpoints import CheckpointError, Preprocess, load, save_native
from vit_explorer.cli import main
from vit_explorer.explore.lessons import FORMAT, read_lesson
from vit_explorer.models import VisionTransformer, ViTConfig, preset

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def lined(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model whose top class is labelled with a newline in it, and an image."""
    folder = tmp_path_factory.mktemp("lined")
    torch.manual_seed(0)
    model = VisionTransformer(preset("classroom-tiny", num_classes=3)).eval()
    with torch.no_grad():
        model.head.bias.copy_(torch.tensor([9.0, 0.0, 0.0]))
    save_native(folder / "model", model, ["two\nlines", "b", "c"], Preprocess((32, 32)))
    Image.new("RGB", (32, 32), (90, 20, 200)).save(folder / "image.png")
    return folder


def test_predicts_table_keeps_a_label_with_a_newline_on_its_line(lined: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["predict", str(lined / "model"), str(lined / "image.png"), "--top-k", "3"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert len(rows) == 3 and "two lines" in rows[0] and "(class 0)" in rows[0], rows
    assert main(["predict", str(lined / "model"), str(lined / "image.png"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["top_k"][0]["label"] == "two\nlines"  # the JSON keeps it whole


def test_a_timm_label_key_with_a_newline_is_named_on_one_line(tmp_path: Path) -> None:
    vit = VisionTransformer(ViTConfig(image_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=2,
                                      num_classes=2)).eval()
    folder = tmp_path / "timm"
    folder.mkdir()
    save_file({k: v.contiguous() for k, v in vit.state_dict().items()}, folder / "model.safetensors")
    args = {"img_size": [32, 32], "patch_size": 8, "num_classes": 2, "embed_dim": 48, "depth": 2, "num_heads": 2}
    (folder / "config.json").write_text(json.dumps({
        "architecture": "vit_tiny_patch16_224", "num_classes": 2, "model_args": args,
        "label_names": {"0\nfake: line " + "x" * 5000: "cat", "1": "dog"},
        "pretrained_cfg": {"input_size": [3, 32, 32]}}))
    with pytest.raises(CheckpointError) as error:
        load(str(folder))
    message = str(error.value)
    assert "\n" not in message and len(message) < 600 and "label_names" in message, message


def test_patch_runs_each_position_once(lined: Path, capsys: pytest.CaptureFixture) -> None:
    positions = ",".join(["0"] * 20_000 + ["3", "0"])
    assert main(["patch", str(lined / "model"), str(lined / "image.png"), "mask", "--positions", positions,
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["positions"] == [0, 3]
    assert np.asarray(result["effects"]).shape == (len(result["layers"]), 2)


PROBE = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (6 * 2**30, resource.RLIM_INFINITY))
from vit_explorer.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_probe_of_1500_classes_takes_the_cheaper_probe_and_says_so(lined: Path, tmp_path: Path) -> None:
    data = tmp_path / "many"
    pixels = np.random.default_rng(0).integers(0, 256, (3000, 8, 8, 3), dtype=np.uint8)
    for c in range(1500):
        (data / f"c{c:04d}").mkdir(parents=True)
        for i in range(2):
            Image.fromarray(pixels[2 * c + i]).save(data / f"c{c:04d}" / f"{i}.png")
    try:
        done = subprocess.run([sys.executable, "-c", PROBE, "probe", str(lined / "model"), "--data", str(data),
                               "--out", str(tmp_path / "out"), "--no-cache", "--val-fraction", "0.5"],
                              capture_output=True, text=True, timeout=240, cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    except subprocess.TimeoutExpired:
        pytest.fail("the probe of 1,500 classes did not finish within 240 s")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "the linear probe is a StandardScaler + ridge regression" in done.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["linear"]["model"].startswith("StandardScaler + ridge regression")


def test_cka_on_identical_images_warns_that_the_states_do_not_vary(lined: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture) -> None:
    for c in range(2):
        (tmp_path / "same" / f"c{c}").mkdir(parents=True)
        for i in range(4):
            Image.new("RGB", (32, 32), (200, 10, 10)).save(tmp_path / "same" / f"c{c}" / f"{i}.png")
    assert main(["cka", str(lined / "model"), "--data", str(tmp_path / "same"), "--out", str(tmp_path / "out"),
                 "--no-cache"]) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warned) == 1 and "states 1, 2 do not vary over the 8 images" in warned[0], warned


def test_a_lesson_saved_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    path = tmp_path / "notepad.json"
    lesson = {"format": FORMAT, "version": 1, "title": "BOM", "steps": [{"title": "a", "caption": "b"}]}
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(lesson).encode())
    assert read_lesson(path).title == "BOM"


@pytest.mark.slow
def test_under_torchrun_a_held_folder_ends_every_rank(tmp_path: Path) -> None:
    from vit_explorer.training.checkpoint import hold_folder

    out = tmp_path / "run"
    argv = ["train", "--preset", "classroom-tiny", "--image-size", "16", "--train-size", "64", "--val-size", "64",
            "--steps", "200", "--batch-size", "16", "--out", str(out)]
    with hold_folder(out):  # another run holds it
        try:
            done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                                   "-m", "vit_explorer", *argv], capture_output=True, text=True, timeout=240,
                                  env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=ROOT)
        except subprocess.TimeoutExpired:
            pytest.fail("a rank went on (or waited) after rank 0 was refused the folder")
    assert done.returncode != 0
    assert done.stderr.count("another `vit-explorer train` is writing to this folder") == 2, done.stderr[-3000:]
