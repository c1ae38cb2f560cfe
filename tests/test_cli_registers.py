"""`vit-explorer registers` and `predict --test-time-registers`: issue 29's JSON contract, the files --out writes,
predict without the flag exactly as before, and bad flags as one-line errors."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from vit_explorer import load
from vit_explorer.cli import main
from vit_explorer.data.images import open_image
from vit_explorer.paths import BUNDLED, SAMPLES

MODEL = str(BUNDLED["classroom"])


def test_registers_json_contract_and_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["registers", MODEL, "--data", "shapes", "--limit", "16", "--json", "--out", str(out)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert {"states", "neurons", "outlier_state"} <= set(result)
    depth = load(MODEL).config.depth
    assert [s["state"] for s in result["states"]] == list(range(depth + 1))
    for state in result["states"]:
        assert set(state) == {"state", "outlier_share", "max_norm", "median_norm"}
        assert 0 <= state["outlier_share"] <= 1 and state["max_norm"] >= state["median_norm"] > 0
    assert all(set(n) == {"block", "unit", "score"} for n in result["neurons"])
    scores = [n["score"] for n in result["neurons"]]
    assert scores == sorted(scores, reverse=True)
    assert result["outlier_state"] is None or 0 <= result["outlier_state"] <= depth
    assert json.loads((out / "registers.json").read_text()) == result
    with open(out / "states.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == depth + 1 and float(rows[0]["max_norm"]) == pytest.approx(result["states"][0]["max_norm"])
    assert (out / "entropy.csv").exists() and (out / "norms.png").stat().st_size > 1000


def _predict(capsys: pytest.CaptureFixture[str], *flags: str) -> dict:
    image = str(SAMPLES / "circle.png")
    assert main(["predict", MODEL, image, "--json", *flags]) == 0
    return json.loads(capsys.readouterr().out)


def test_predict_without_the_flag_is_as_before_and_with_it_moves_the_neurons(capsys) -> None:
    plain = _predict(capsys)
    loaded = load(MODEL)
    with torch.inference_mode():
        expected = loaded.model(loaded.preprocess(open_image(str(SAMPLES / "circle.png"))))[0]
    assert plain["logits"] == expected.tolist()
    moved = _predict(capsys, "--test-time-registers", "1:3,2:5", "--register-mode", "mean")
    assert set(moved) == set(plain) and moved["logits"] != plain["logits"]
    unchanged = _predict(capsys, "--test-time-registers", "1:3")
    assert unchanged["logits"] != plain["logits"]  # the register is a token the patches attend to


@pytest.mark.parametrize(("flags", "message"), [
    (["--test-time-registers", "1"], "BLOCK:UNIT"),
    (["--test-time-registers", "99:0"], "block 99"),
    (["--test-time-registers", "0:99999"], "unit 99999"),
])
def test_bad_register_flags_are_one_line_errors(flags, message, capsys) -> None:
    assert main(["predict", MODEL, str(SAMPLES / "circle.png"), *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("vit-explorer predict: error:")


def test_the_readme_registers_example_runs_and_agrees(monkeypatch: pytest.MonkeyPatch) -> None:
    import re

    root = Path(__file__).resolve().parents[1]
    text = (root / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Registers, outliers and attention health"):]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    monkeypatch.chdir(root)
    scope: dict[str, object] = {}
    with torch.inference_mode():
        exec(compile(code.group(1), "README.md", "exec"), scope)
    d, out = scope["d"], scope["out"]
    assert d.outlier_state is None and d.neurons(5) == []  # type: ignore[attr-defined]
    assert out["layout"].registers == (1,)  # type: ignore[index]
    assert torch.equal(scope["by_hand"], out["logits"])  # type: ignore[index,arg-type]


def test_an_absolute_threshold_and_no_attention(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["registers", MODEL, "--data", "shapes", "--limit", "8", "--json", "--threshold", "1e-3",
                 "--no-attention", "--out", str(out)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert all(s["outlier_share"] == 1.0 for s in result["states"])  # every token is over so low a cut
    assert result["outlier_state"] == 0 and len(result["neurons"]) == 20  # every token is an outlier
    assert result["rule"] == "norm > 0.001" and not (out / "entropy.csv").exists()
    assert main(["registers", MODEL, "--data", "shapes", "--ratio", "0.5"]) == 2
    assert "--ratio" in capsys.readouterr().err
