"""bench/bench_explain.py runs unchanged in its reduced form: every one-pass method on both models and the curve,
as ratios against timm."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "bench_explain.py"


@pytest.mark.slow
def test_the_reduced_form_measures_every_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("bench_explain", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_explain", bench)
    spec.loader.exec_module(bench)
    out = tmp_path / "explain.json"
    assert bench.main(["--reduced", "--rounds", "1", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["form"] == "reduced"
    cases = [row["case"] for row in report["rows"]]
    for model in ("reduced ViT", "classroom"):  # every one-pass method on both models
        for method in ("rollout", "attention-gradient", "transformer-attribution", "gradcam", "gradient-x-input",
                       "attnlrp", "cp-lrp"):
            assert f"{model}: {method} map vs timm forward + backward" in cases
    assert "reduced ViT: ten-step perturbation curve vs timm forward of the batch" in cases
    for row in report["rows"]:
        assert row["ours_s"] > 0 and row["reference_s"] > 0 and row["ratio"] > 0 and isinstance(row["met"], bool)
