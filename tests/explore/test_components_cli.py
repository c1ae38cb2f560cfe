"""`vit-explorer components` and `vit-explorer patch`: their JSON contracts, the sum that adds up, the sweep's
shape and its normalisation, and one-line errors for bad flags."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vit_explorer import load
from vit_explorer.cli import main
from vit_explorer.commands.components import _inputs
from vit_explorer.data.images import open_image
from vit_explorer.explore.components import corrupted_inputs, lens_maps, patch_once, record_runs
from vit_explorer.paths import BUNDLED_MODEL, SAMPLES

STAR, CIRCLE = str(SAMPLES / "star.png"), str(SAMPLES / "circle.png")


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_components_json_adds_up_to_the_logit(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "components", str(BUNDLED_MODEL), STAR, "--target", "3", "--json")
    assert set(out) == {"target", "logit", "parts", "bias"} and out["target"] == 3
    assert all(set(p) == {"name", "layer", "head", "value"} for p in out["parts"])
    total = sum(p["value"] for p in out["parts"]) + out["bias"]
    assert total == pytest.approx(out["logit"], rel=1e-4)
    predicted = run_json(capsys, "predict", str(BUNDLED_MODEL), STAR, "--json")
    assert out["logit"] == pytest.approx(predicted["logits"][3], abs=1e-5)
    heads = [p for p in out["parts"] if p["name"] == "head"]
    assert sorted({(p["layer"], p["head"]) for p in heads}) == [(layer, h) for layer in range(4) for h in range(4)]


def test_patch_json_is_a_normalised_sweep(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "patch", str(BUNDLED_MODEL), STAR, CIRCLE, "--json")
    assert set(out) == {"component", "target", "foil", "clean_difference", "corrupted_difference", "layers",
                        "positions", "effects", "differences"}
    assert out["layers"] == [0, 1, 2, 3] and out["positions"] == list(range(65))
    effects = np.array(out["effects"], dtype=float)
    diffs = np.array(out["differences"], dtype=float)
    span = out["clean_difference"] - out["corrupted_difference"]
    np.testing.assert_allclose(effects, (diffs - out["corrupted_difference"]) / span, atol=1e-9)
    assert effects[0, 0] == pytest.approx(0.0, abs=1e-5)  # [CLS] at block 0 is the same token in both runs
    heads = run_json(capsys, "patch", str(BUNDLED_MODEL), STAR, "mask", "--component", "head", "--json")
    assert np.array(heads["effects"]).shape == (4, 4) and heads["heads"] == [0, 1, 2, 3]


@pytest.mark.parametrize("argv, message", [
    (["patch", str(BUNDLED_MODEL), STAR, "heads", "--heads-off", "9:9"], "--heads-off"),
    (["patch", str(BUNDLED_MODEL), STAR, "mask", "--masked", "70"], "--masked"),
    (["patch", str(BUNDLED_MODEL), STAR, CIRCLE, "--positions", "999"], "positions [999] out of range"),
    (["components", str(BUNDLED_MODEL), STAR, "--target", "10"], "target 10 is out of range"),
])
def test_bad_flags_are_one_line_errors(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_lens_and_one_painted_patch() -> None:
    loaded = load(str(BUNDLED_MODEL))
    clean = _inputs(loaded, open_image(STAR))
    maps = lens_maps(clean)
    assert maps.classes.shape == (5, 8, 8) and maps.probs.shape == (5, 8, 8) and maps.prefix_classes.shape == (5, 1)
    assert maps.prefix_classes[-1, 0] == maps.final  # [CLS] read at the last state is the prediction
    assert ((maps.probs > 0) & (maps.probs <= 1)).all()
    runs = record_runs(clean, corrupted_inputs(clean, "mask"), "resid")
    everything, _ = patch_once(runs, 2, None)
    nothing, _ = patch_once(runs, 2, [])
    assert everything == pytest.approx(1.0, abs=1e-5) and nothing == pytest.approx(0.0, abs=1e-5)
    some, logits = patch_once(runs, 2, [0])
    assert logits.shape == (10,) and not np.isclose(some, 0.0)
