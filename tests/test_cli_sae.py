"""`vit-explorer sae`: issue 30's output contract on the bundled model and built-in data, resume, bad flags."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from vit_explorer import load
from vit_explorer.analysis import sae as S
from vit_explorer.cli import main
from vit_explorer.paths import BUNDLED

MODEL = str(BUNDLED["classroom"])
FLAGS = ["--data", "shapes", "--limit", "24", "--state", "2", "--k", "4", "--expansion", "2", "--batch-size", "64"]


@pytest.mark.slow
def test_sae_output_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["sae", MODEL, *FLAGS, "--steps", "12", "--out", str(out)]) == 0
    d = load(MODEL).config.embed_dim
    w = load_file(out / "sae.safetensors")
    assert {k: tuple(v.shape) for k, v in w.items()} == {"W_enc": (d, 2 * d), "b_enc": (2 * d,),
                                                         "W_dec": (2 * d, d), "b_dec": (d,)}
    torch.testing.assert_close(w["W_dec"].norm(dim=1), torch.ones(2 * d), atol=1e-5, rtol=0)
    metrics = json.loads((out / "metrics.json").read_text())
    assert {"kind", "k", "state", "tokens", "fvu", "l0", "dead_fraction", "logit_recovered"} <= set(metrics)
    assert (metrics["kind"], metrics["k"], metrics["state"], metrics["tokens"]) == ("topk", 4, 2, "patch")
    assert 0 < metrics["l0"] <= 4 and 0 <= metrics["dead_fraction"] <= 1 and metrics["fvu"] >= 0
    assert metrics["ce_zero"] > metrics["ce_clean"]
    with open(out / "features.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["feature"]) for r in rows] == list(range(2 * d))
    assert set(rows[0]) == {"feature", "frequency", "effect", "best_factor", "ap"}
    assert all(0 <= float(r["ap"]) <= 1 and r["best_factor"] for r in rows)
    assert sum(float(r["frequency"]) for r in rows) == pytest.approx(metrics["l0"], rel=1e-5)
    assert set(metrics["ground_truth"]["object"]) == {"sae", "pca", "kmeans", "prevalence"}
    with open(out / "curves.csv") as f:
        assert len(list(csv.DictReader(f))) == 12
    assert all((out / n).stat().st_size > 1000 for n in ("curves.png", "feature_maps.png", "steering.png"))
    # resume: 12 more steps continue the same run
    assert main(["sae", MODEL, *FLAGS, "--steps", "12", "--out", str(out)]) == 2
    assert "--resume" in capsys.readouterr().err
    assert main(["sae", MODEL, *FLAGS, "--steps", "20", "--out", str(out), "--resume"]) == 0
    assert json.loads((out / "metrics.json").read_text())["steps"] == 20
    with open(out / "curves.csv") as f:
        assert len(list(csv.DictReader(f))) == 20


def test_sae_cls_tokens_on_a_folder_free_run(tmp_path: Path) -> None:
    out = tmp_path / "cls"
    assert main(["sae", MODEL, "--data", "where", "--limit", "18", "--state", "0", "--tokens", "cls", "--kind",
                 "batchtopk", "--k", "2", "--expansion", "1", "--steps", "3", "--out", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["tokens"] == "cls" and metrics["kind"] == "batchtopk" and "object" not in metrics["ground_truth"]
    assert S.state_site(0) == "hook_embedded"
    from vit_explorer.explore.sae import open_sae

    sae, _ = open_sae(out, load(MODEL))  # BatchTopK's running threshold comes back from metrics.json
    assert float(sae.threshold) == pytest.approx(metrics["threshold"]) and math.isfinite(metrics["threshold"])
    z = sae.encode(torch.randn(5, sae.W_enc.shape[0]))
    assert torch.isfinite(z).all() and (z >= 0).all()


@pytest.mark.parametrize(("flags", "message"), [
    (["--state", "99"], "--state"),
    (["--k", "0"], "--k"),
    (["--expansion", "0"], "--expansion"),
])
def test_bad_flags_are_one_line_errors(flags, message, tmp_path: Path, capsys) -> None:
    base = ["sae", MODEL, "--data", "shapes", "--limit", "8", "--state", "1", "--out", str(tmp_path / "o")]
    assert main(base + flags) == 2
    err = capsys.readouterr().err
    assert message in err and err.strip().splitlines()[-1].startswith("vit-explorer sae: error:")
