"""`vit-explorer convert` and `vit-explorer predict --json` on a tiny Hugging Face folder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vit_explorer.checkpoints import load
from vit_explorer.cli import main

LABELS = ["circle", "square", "triangle", "star", "cross"]


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                       image_size=32, patch_size=8, id2label=dict(enumerate(LABELS)),
                       label2id={n: i for i, n in enumerate(LABELS)})
    model = ViTForImageClassification(config)
    with torch.no_grad():
        model.classifier.weight.normal_(0, 1.0)  # spread the logits so top-k order is meaningful
        model.classifier.bias.normal_(0, 1.0)
    folder = tmp_path_factory.mktemp("hf_cli")
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def image_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("img") / "shape.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 56, 3), dtype=np.uint8)).save(path)
    return path


def test_predict_json(hf_dir: Path, image_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", str(hf_dir), str(image_path), "--top-k", "3", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["source"] == str(hf_dir) and result["image"] == str(image_path)
    assert len(result["logits"]) == len(LABELS)
    top = result["top_k"]
    assert [set(row) for row in top] == [{"index", "label", "prob"}] * 3
    assert [row["label"] for row in top] == [LABELS[row["index"]] for row in top]
    probs = torch.tensor(result["logits"]).softmax(-1)
    assert [row["index"] for row in top] == probs.topk(3).indices.tolist()
    assert all(abs(row["prob"] - probs[row["index"]].item()) < 1e-6 for row in top)
    # the logits are those of the loaded model on the source's own preprocessing
    loaded = load(hf_dir)
    with torch.no_grad():
        expected = loaded.model(loaded.preprocess(Image.open(image_path)))[0]
    assert torch.allclose(torch.tensor(result["logits"]), expected, atol=1e-5)


@pytest.mark.parametrize("to", ["native", "hf"])
def test_convert_then_predict_the_same(to: str, hf_dir: Path, image_path: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / to
    assert main(["convert", str(hf_dir), "--to", to, "--out", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    results = []
    for source in (hf_dir, out):
        assert main(["predict", str(source), str(image_path), "--json"]) == 0
        results.append(json.loads(capsys.readouterr().out))
    assert results[0]["top_k"][0]["label"] == results[1]["top_k"][0]["label"]
    assert np.allclose(results[0]["logits"], results[1]["logits"], atol=1e-5)


def test_convert_bad_source_is_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing-folder"
    assert main(["convert", str(missing), "--to", "native", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert str(missing) in err and len(err.strip().splitlines()) == 1


def test_convert_refuses_a_folder_that_holds_a_checkpoint(hf_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = (hf_dir / "model.safetensors").read_bytes()
    assert main(["convert", str(hf_dir), "--to", "hf", "--out", str(hf_dir)]) == 2
    err = capsys.readouterr().err
    assert "already holds a checkpoint" in err and str(hf_dir) in err
    assert (hf_dir / "model.safetensors").read_bytes() == before  # the source is untouched


def test_predict_refuses_a_model_without_classifier(tmp_path: Path, image_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from vit_explorer.checkpoints.native import save_native
    from vit_explorer.checkpoints.preprocess import Preprocess
    from vit_explorer.models import VisionTransformer, preset

    model = VisionTransformer(preset("classroom-tiny", num_classes=0))
    save_native(tmp_path / "headless", model, [], Preprocess((32, 32)))
    assert main(["predict", str(tmp_path / "headless"), str(image_path)]) == 2
    assert "no classifier head" in capsys.readouterr().err


def test_predict_into_a_closed_pipe_ends_quietly(hf_dir: Path, image_path: Path) -> None:
    """`vit-explorer predict ... | head -c 10`: the reader leaving is not an error to print ("[Errno 32] Broken
    pipe" was), and the exit status says SIGPIPE as a shell's would (141)."""
    import os
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)  # nobody reads: the first write fails
    code = "import sys; from vit_explorer.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run([sys.executable, "-c", code, "predict", str(hf_dir), str(image_path), "--json"],
                          stdout=write, stderr=subprocess.PIPE, text=True, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    os.close(write)
    assert done.returncode == 141 and done.stderr == ""
