"""`vit-explorer embed | probe | cka`: the NPZ, CSV and JSON contracts, on an image folder and a built-in set, with
a tiny Hugging Face ViT (a [CLS]) and the bundled classroom model."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vit_explorer.analysis import cka as C
from vit_explorer.cli import main
from vit_explorer.paths import BUNDLED

LABELS = ["red", "green", "blue"]


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                       image_size=32, patch_size=8, id2label=dict(enumerate(LABELS)),
                       label2id={n: i for i, n in enumerate(LABELS)})
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("hf_dataset")
    ViTForImageClassification(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three colour classes of eight images each, and one unreadable file."""
    root = tmp_path_factory.mktemp("colours")
    rng = np.random.default_rng(0)
    for c, name in enumerate(LABELS):
        (root / name).mkdir()
        for i in range(8):
            pixels = rng.integers(0, 80, (36, 36, 3), dtype=np.uint8)
            pixels[..., c] += 150
            Image.fromarray(pixels).save(root / name / f"{i}.png")
    (root / "red" / "broken.png").write_bytes(b"\x89PNG broken")
    return root


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VIT_EXPLORER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")
    return tmp_path / "cache"


def rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_embed_writes_the_npz_contract(hf_dir: Path, data_dir: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "embed"
    assert main(["embed", str(hf_dir), "--data", str(data_dir), "--out", str(out), "--batch-size", "5"]) == 0
    assert "skipped" in capsys.readouterr().err  # the broken file, with a count
    with np.load(out / "embeddings.npz", allow_pickle=False) as npz:
        names = set(npz.files)
        paths, labels, split = npz["paths"], npz["labels"], npz["split"]
        assert list(npz["label_names"]) == sorted(LABELS)  # the class folders, sorted
        for i in range(3):  # states 0..depth
            assert npz[f"cls_{i}"].shape == (24, 32) and npz[f"mean_{i}"].shape == (24, 32)
    assert {"paths", "labels", "label_names", "split"} <= names and "cls_3" not in names
    assert paths[0] == "blue/0.png" and "red/broken.png" not in set(paths)
    assert set(split.tolist()) == {0, 1} and labels.tolist() == sorted(labels.tolist())
    images = rows(out / "images.csv")
    assert len(images) == 24 and images[0]["path"] == "blue/0.png"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["images"] == 24 and summary["skipped"] == 1 and summary["states"] == 3
    assert (out / "projection.png").stat().st_size > 1000


def test_probe_writes_accuracies_per_state(hf_dir: Path, data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "probe"
    assert main(["probe", str(hf_dir), "--data", str(data_dir), "--out", str(out), "--val-fraction", "0.25"]) == 0
    with (out / "probe.csv").open() as f:
        assert f.readline().strip() == "state,tokens,knn,linear"
    table = rows(out / "probe.csv")
    assert [(r["state"], r["tokens"]) for r in table] == [(str(s), t) for t in ("cls", "mean") for s in range(3)]
    assert all(0 <= float(r["knn"]) <= 1 and 0 <= float(r["linear"]) <= 1 for r in table)
    # the colour is in the mean of the patch tokens from the start: the probes read it (6 validation images)
    assert float(table[3]["linear"]) == 1.0
    assert (out / "probe.png").is_file() and (out / "confusion.png").is_file()
    assert json.loads((out / "summary.json").read_text())["validation"] == 6


def test_cka_of_a_model_with_itself_and_with_another(hf_dir: Path, tmp_path: Path) -> None:
    bundled = str(BUNDLED["classroom"])
    out = tmp_path / "cka"
    assert main(["cka", bundled, "--data", "shapes", "--limit", "120", "--out", str(out), "--tokens", "mean"]) == 0
    with (out / "cka.csv").open() as f:
        header = f.readline().strip()
    table = np.loadtxt(out / "cka.csv", delimiter=",", skiprows=1)
    depth = 4
    assert header == "state," + ",".join(map(str, range(depth + 1)))
    assert table.shape == (depth + 1, depth + 2) and table[:, 0].tolist() == list(range(depth + 1))
    np.testing.assert_allclose(np.diag(table[:, 1:]), 1.0)
    from vit_explorer.explore.store import FeatureStore

    cached = FeatureStore.open(next((tmp_path / "cache").iterdir()))  # the cache is a feature store
    assert table[1, 3] == pytest.approx(C.cka(cached.tokens(1, "mean"), cached.tokens(2, "mean")))
    assert (out / "cka.png").is_file()
    out2 = tmp_path / "cka2"
    other = str(BUNDLED["classroom-patchify"])
    assert main(["cka", bundled, other, "--data", "shapes", "--limit", "120", "--out", str(out2), "--kernel", "rbf",
                 "--debiased"]) == 0
    summary = json.loads((out2 / "summary.json").read_text())
    assert summary["kernel"] == "rbf" and summary["source_b"] == other and summary["tokens_compared"] == "cls"
    assert np.loadtxt(out2 / "cka.csv", delimiter=",", skiprows=1).shape == (depth + 1, 1 + 5)


def test_errors_are_one_line(hf_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", str(hf_dir), "--data", str(tmp_path / "nothing"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("vit-explorer probe: error: --data") and "\n" not in err
    flat = tmp_path / "flat"
    flat.mkdir()
    Image.new("RGB", (32, 32)).save(flat / "a.png")
    assert main(["probe", str(hf_dir), "--data", str(flat), "--out", str(tmp_path / "o")]) == 2
    assert "no labels" in capsys.readouterr().err
    assert main(["cka", str(hf_dir), "--data", "shapes", "--out", str(tmp_path / "o"), "--minibatch", "2"]) == 2
    assert "--minibatch" in capsys.readouterr().err


def test_the_store_commands(hf_dir: Path, data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """embed --store fills a store (the broken file skipped once), probe and cka --store read it: the same CSV
    layouts, the ridge probe named, CKA equal to the exact CKA of the stored tokens."""
    from vit_explorer.explore.store import FeatureStore

    store = tmp_path / "store"
    common = ["--data", str(data_dir), "--store", str(store), "--batch-size", "5"]
    assert main(["embed", str(hf_dir), *common, "--out", str(tmp_path / "e"), "--store-tokens", "cls,mean,patch"]) == 0
    held = FeatureStore.open(store)
    assert len(held) == 24 and held.kinds == ["cls", "mean", "patch"] and held.states == [0, 1, 2]
    assert held.tokens(2, "patch").shape == (24 * 16, 32)
    summary = json.loads((tmp_path / "e" / "summary.json").read_text())
    assert summary["images"] == 24 and summary["store"]["images"] == 24 and summary["skipped"] == 1
    assert summary["store"]["embedded"] == 25 and not summary["from_cache"]  # the broken file counts as done
    assert rows(tmp_path / "e" / "images.csv")[0]["path"] == "blue/0.png"
    assert main(["probe", str(hf_dir), *common, "--out", str(tmp_path / "p"), "--val-fraction", "0.25"]) == 0
    assert "ridge" in capsys.readouterr().err
    table = rows(tmp_path / "p" / "probe.csv")
    assert [(r["state"], r["tokens"]) for r in table] == [(str(s), t) for t in ("cls", "mean") for s in range(3)]
    probe = json.loads((tmp_path / "p" / "summary.json").read_text())
    assert probe["from_cache"] and probe["store"]["embedded"] == 0  # the store held every image
    assert probe["linear"]["model"].startswith("StandardScaler + ridge") and "exact" in probe["knn"]["index"]
    assert main(["cka", str(hf_dir), *common, "--out", str(tmp_path / "c"), "--tokens", "mean"]) == 0
    table = np.loadtxt(tmp_path / "c" / "cka.csv", delimiter=",", skiprows=1)
    assert table[1, 3] == pytest.approx(C.cka(held.tokens(1, "mean"), held.tokens(2, "mean")))
    assert main(["embed", str(hf_dir), "--data", str(data_dir), "--out", str(tmp_path / "o"),
                 "--store-tokens", "cls"]) == 2
    assert "give --store" in capsys.readouterr().err
