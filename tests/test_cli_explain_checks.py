"""`vit-explorer explain`'s checks and parameters: ROAD in the faithfulness record, --sanity's steps (JSON, CSV,
strip figures), the random row in the printed ranking (not in the JSON), --pixels, and flags refused by name."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import vit_explorer
from vit_explorer.cli import main
from vit_explorer.explore import relevance as rel
from vit_explorer.explore.forward import Inputs

RESOURCES = Path(__file__).resolve().parents[1] / "resources"
MODEL, IMAGE = str(RESOURCES / "classroom"), str(RESOURCES / "samples" / "star.png")
STEPS = ["head", "block 3", "block 2", "block 1", "block 0", "embedding"]


def test_road_and_the_sanity_steps_in_the_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", MODEL, IMAGE, "--method", "gradcam", "--sanity", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"source", "image", "method", "target", "grid", "relevance", "faithfulness", "sanity"}
    road = out["faithfulness"]["road"]
    assert set(road) == {"fractions", "morf", "lerf"} and len(road["morf"]) == len(road["lerf"]) == 9
    assert road["fractions"] == pytest.approx([0.1 * i for i in range(1, 10)])
    assert [s["randomised_from"] for s in out["sanity"]] == STEPS
    assert all(set(s) == {"randomised_from", "spearman", "ssim"} for s in out["sanity"])
    assert all(-1 <= s["spearman"] <= 1 and -1 <= s["ssim"] <= 1 for s in out["sanity"])


def test_the_random_row_is_ranked_but_not_a_method_of_the_json(tmp_path: Path, capsys) -> None:
    out_dir = tmp_path / "out"
    assert main(["explain", MODEL, IMAGE, "--method", "rollout", "gradcam", "--sanity", "--out", str(out_dir)]) == 0
    printed = capsys.readouterr().out
    assert "random" in printed and "the baseline to beat" in printed
    assert {p.name for p in out_dir.iterdir()} == {
        "rollout.png", "gradcam.png", "ranking.png", "perturbation.png", "deletion_insertion.png", "relevance.csv",
        "sanity.csv", "sanity_rollout.png", "sanity_gradcam.png"}
    assert sorted(r["method"] for r in csv.DictReader(open(out_dir / "relevance.csv"))) == ["gradcam", "rollout"]
    rows = list(csv.DictReader(open(out_dir / "sanity.csv")))
    assert [r["randomised_from"] for r in rows if r["method"] == "gradcam"] == STEPS
    assert main(["explain", MODEL, IMAGE, "--method", "rollout", "gradcam", "--json"]) == 0
    assert [m["method"] for m in json.loads(capsys.readouterr().out)["methods"]] == ["rollout", "gradcam"]


def test_parameters_and_pixel_maps(capsys) -> None:
    assert main(["explain", MODEL, IMAGE, "--method", "integrated-gradients", "--ig-steps", "8", "--ig-baseline",
                 "blur", "--smoothgrad", "2", "--smoothgrad-sigma", "0.1", "--pixels", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    pixels = np.array(out["pixel_relevance"])
    assert pixels.shape == (32, 32)
    summed = pixels.reshape(8, 4, 8, 4).sum(axis=(1, 3))  # the per-patch map is the pixels' sum (float32 rounding)
    np.testing.assert_allclose(summed, out["relevance"], rtol=0, atol=1e-6 * np.abs(summed).max())
    assert main(["explain", MODEL, IMAGE, "--method", "occlusion", "--occlusion-window", "8", "--occlusion-stride",
                 "4x8", "--json"]) == 0
    assert "pixel_relevance" not in json.loads(capsys.readouterr().out)


def test_the_attnlrp_gamma_flag_is_the_options_gamma(capsys) -> None:
    assert main(["explain", MODEL, IMAGE, "--method", "attnlrp", "--attnlrp-gamma", "0.5", "--json"]) == 0
    shown = np.array(json.loads(capsys.readouterr().out)["relevance"])
    loaded = vit_explorer.load(MODEL)
    size = tuple(loaded.config.image_size)
    inputs = Inputs.unmasked(loaded, Image.open(IMAGE).convert("RGB"), size)
    expected = rel.explain(inputs, ["attnlrp"], measure=False, options=rel.Options(attnlrp_gamma=0.5))[0].relevance
    plain = rel.explain(inputs, ["attnlrp"], measure=False)[0].relevance
    np.testing.assert_allclose(shown, expected, rtol=1e-5, atol=1e-7 * np.abs(expected).max())
    assert not np.allclose(shown, plain, rtol=1e-3, atol=1e-3 * np.abs(plain).max())


@pytest.mark.parametrize(("flags", "said"), [
    (["--attnlrp-gamma", "-1"], "argument --attnlrp-gamma:"), (["--attnlrp-gamma", "inf"], "argument --attnlrp-gamma:"),
    (["--ig-steps", "0"], "argument --ig-steps:"), (["--ig-steps", "many"], "argument --ig-steps:"),
    (["--gradcam-block", "9"], "argument --gradcam-block: block 9 does not exist"),
    (["--smoothgrad-sigma", "0.3"], "argument --smoothgrad-sigma: SmoothGrad is off"),
    (["--smoothgrad", "2", "--smoothgrad-sigma", "nan"], "argument --smoothgrad-sigma:"),
    (["--occlusion-window", "3x"], "argument --occlusion-window:"),
    (["--occlusion-window", "64"], "argument --occlusion-window: 64x64 pixels exceeds the input"),
    (["--occlusion-stride", "4"], "argument --occlusion-stride: give --occlusion-window too"),
    (["--occlusion-window", "4", "--occlusion-stride", "8"], "argument --occlusion-stride: 8x8 is larger"),
    (["--occlusion-window", "6", "--baseline", "mask"], "multiples of the patch size")])
def test_flags_are_refused_by_name(flags: list[str], said: str, capsys) -> None:
    try:
        code = main(["explain", MODEL, IMAGE, "--method", "occlusion", *flags])
    except SystemExit as stop:  # argparse's own refusal
        code = stop.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert said in err[-1]
