"""The prepared GPU benchmark runs unchanged on a machine without a GPU, in its reduced form."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "gpu.py"


@pytest.mark.slow
def test_the_reduced_form_measures_every_case(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("bench_gpu", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_gpu", bench)  # dataclasses look their module up there
    spec.loader.exec_module(bench)
    out = tmp_path / "gpu.json"
    assert bench.main(["--reduced", "--steps", "2", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["form"] == "reduced"
    assert [row["case"] for row in report["rows"]] == list(bench.FULL)
    for row in report["rows"]:
        assert row["rates"] and all(rate > 0 for rate in row["rates"].values()), row
        assert row["ratio"] > 0 and isinstance(row["met"], bool)
    assert "reduced form" in capsys.readouterr().out
