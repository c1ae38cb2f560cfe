"""bench/bench_explain.py runs unchanged in its reduced form: both cases measured, as ratios against timm."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "bench_explain.py"


@pytest.mark.slow
def test_the_reduced_form_measures_both_cases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("bench_explain", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_explain", bench)
    spec.loader.exec_module(bench)
    out = tmp_path / "explain.json"
    assert bench.main(["--reduced", "--rounds", "1", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["form"] == "reduced" and len(report["rows"]) == 2
    for row in report["rows"]:
        assert row["ours_s"] > 0 and row["reference_s"] > 0 and row["ratio"] > 0 and isinstance(row["met"], bool)
