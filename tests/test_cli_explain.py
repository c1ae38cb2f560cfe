"""`vit-explorer explain`: the JSON contract (one method: the object; several: {"methods": [...]}), the
target by index or label, --out's PNGs and CSV, and one-line errors for what cannot run."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vit_explorer.checkpoints.native import save_native
from vit_explorer.checkpoints.preprocess import Preprocess
from vit_explorer.cli import main
from vit_explorer.models import VisionTransformer, preset

LABELS = [f"class {i}" for i in range(10)]


@pytest.fixture()
def files(tmp_path: Path) -> tuple[Path, Path]:
    model = VisionTransformer(preset("classroom-tiny", prefix_tokens="cls+dist")).eval()
    source = save_native(tmp_path / "model", model, LABELS, Preprocess(model.config.image_size))
    image = tmp_path / "image.png"
    Image.fromarray((np.random.default_rng(0).random((40, 40, 3)) * 255).astype(np.uint8)).save(image)
    return source, image


def test_one_method_prints_the_object(files, capsys: pytest.CaptureFixture[str]) -> None:
    source, image = files
    assert main(["explain", str(source), str(image), "--method", "attention-gradient", "--target", "class 3",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"source", "image", "method", "target", "grid", "relevance", "faithfulness"}
    assert out["method"] == "attention-gradient" and out["source"] == str(source) and out["image"] == str(image)
    assert out["target"] == {"index": 3, "label": "class 3", "head": "average"}
    assert out["grid"] == [8, 8] and np.array(out["relevance"]).shape == (8, 8)
    f = out["faithfulness"]
    assert len(f["curves"]["positive"]) == len(f["curves"]["negative"]) == 10
    for key in ("positive_auc", "negative_auc", "deletion_auc", "insertion_auc"):
        assert isinstance(f[key], float)


def test_several_methods_their_list_and_the_out_folder(files, tmp_path: Path, capsys) -> None:
    source, image = files
    out_dir = tmp_path / "out"
    assert main(["explain", str(source), str(image), "--method", "rollout", "gradcam", "--target", "2", "--head",
                 "dist", "--baseline", "blur", "--json", "--out", str(out_dir)]) == 0
    methods = json.loads(capsys.readouterr().out)["methods"]
    assert [m["method"] for m in methods] == ["rollout", "gradcam"]
    assert all(m["target"] == {"index": 2, "label": "class 2", "head": "dist"} for m in methods)
    assert {p.name for p in out_dir.iterdir()} == {"rollout.png", "gradcam.png", "ranking.png", "perturbation.png",
                                                   "deletion_insertion.png", "relevance.csv"}
    rows = list(csv.DictReader(open(out_dir / "relevance.csv")))
    assert sorted(r["method"] for r in rows) == ["gradcam", "rollout"] and {r["baseline"] for r in rows} == {"blur"}


def test_errors_are_one_line(files, capsys) -> None:
    source, image = files
    assert main(["explain", str(source), str(image), "--target", "zebra", "--method", "gradcam"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("vit-explorer explain: error: target 'zebra' is neither")
    with pytest.raises(SystemExit) as stop:
        main(["explain", str(source), str(image), "--method", "lrp"])
    assert stop.value.code == 2 and "invalid choice: 'lrp'" in capsys.readouterr().err


@pytest.mark.parametrize(("extra", "message"), [
    ([], "give exactly one of IMAGE (one image's maps) or --data D"),
    (["IMAGE", "--data", "shapes"], "give exactly one of IMAGE (one image's maps) or --data D (the methods ranked "
                                    "over a dataset), not both"),
    (["IMAGE", "--limit", "3"], "argument --limit: only with --data"),
    (["--data", "shapes", "--target", "2"], "argument --target: not with --data"),
    (["--data", "no/such/folder"], "--data no/such/folder: not a built-in dataset"),
    (["--data", "shapes", "--sanity"], "argument --sanity: one image's maps only, not with --data"),
])
def test_data_refusals_are_one_line(files, capsys, extra: list[str], message: str) -> None:
    source, image = files
    args = [str(image) if a == "IMAGE" else a for a in extra]
    assert main(["explain", str(source), *args]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"vit-explorer explain: error: {message}")


def test_data_writes_the_ranking(files, tmp_path: Path, capsys) -> None:
    source, _ = files
    out_dir = tmp_path / "ranked"
    assert main(["explain", str(source), "--data", "shapes", "--limit", "4", "--method", "rollout", "gradcam",
                 "--json", "--out", str(out_dir)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["images"] == 4 and out["data"] == "shapes" and "top class" in out["targets"]
    assert {r["method"] for r in out["ranking"]} == {"rollout", "gradcam", "random"}  # the baseline row, always
    assert out["random"] == "random" and set(out["no_better_than_random"]) <= {"rollout", "gradcam"}
    rows = list(csv.DictReader(open(out_dir / "ranking.csv")))
    aucs = ["deletion", "insertion", "positive", "negative"]
    assert list(rows[0])[:1 + 3 * len(aucs)] == ["method"] + [f"{a}_{k}" for a in aucs for k in ("mean", "low",
                                                                                                   "high")]
    assert list(rows[0])[-1] == "images" and {r["images"] for r in rows} == {"4"}
    assert [r["method"] for r in rows] == [r["method"] for r in out["ranking"]]
    assert {"pointing_mean", "iou_high"} <= set(rows[0])
    assert {p.name for p in out_dir.iterdir()} >= {"ranking.csv", "ranking_deletion.png", "ranking_iou.png"}
    assert "random" in [r["method"] for r in rows]
    assert main(["explain", str(source), "--data", "shapes", "--limit", "3", "--method", "rollout"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert any(line.split()[1] == "random" and "the baseline to beat" in line for line in printed[1:])
    for r in rows:
        assert float(r["deletion_low"]) <= float(r["deletion_mean"]) <= float(r["deletion_high"])
