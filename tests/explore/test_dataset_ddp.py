"""`torchrun --nproc_per_node=2 -m vit_explorer embed` on the CPU (gloo): each process extracts a shard of the
images and rank 0 alone writes embeddings.npz, equal to one process's (same paths in the same order, arrays within
1e-6), with the unreadable file skipped once. torchrun runs --standalone, as in tests/training/test_ddp.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vit_explorer.explore import dataset as D

LABELS = ["red", "green", "blue"]


@pytest.fixture
def model_and_data(tmp_path: Path) -> tuple[Path, Path]:
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                       image_size=32, patch_size=8, id2label=dict(enumerate(LABELS)),
                       label2id={n: i for i, n in enumerate(LABELS)})
    torch.manual_seed(0)
    ViTForImageClassification(config).save_pretrained(tmp_path / "model")
    root = tmp_path / "data"
    rng = np.random.default_rng(0)
    for c, name in enumerate(LABELS):
        (root / name).mkdir(parents=True)
        for i in range(5):  # 15 images + 1 broken: shards of 8 and 8, not a multiple of the batch
            pixels = rng.integers(0, 80, (36, 36, 3), dtype=np.uint8)
            pixels[..., c] += 150
            Image.fromarray(pixels).save(root / name / f"{i}.png")
    (root / "green" / "broken.png").write_bytes(b"\x89PNG broken")
    return tmp_path / "model", root


def test_shards_cover_the_images_in_order() -> None:
    for n in (0, 1, 5, 16, 17):
        for world in (1, 2, 3):
            parts = [D.shard(n, r, world) for r in range(world)]
            assert np.array_equal(np.concatenate(parts), np.arange(n))
            assert max(map(len, parts)) - min(map(len, parts)) <= 1


@pytest.mark.slow
def test_two_processes_write_the_one_process_embeddings(model_and_data: tuple[Path, Path], tmp_path: Path) -> None:
    model, data = model_and_data
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "QT_QPA_PLATFORM": "offscreen",
           "VIT_EXPLORER_CACHE": str(tmp_path / "cache")}
    args = ["-m", "vit_explorer", "embed", str(model), "--data", str(data), "--batch-size", "3", "--no-cache"]
    one = subprocess.run([sys.executable, *args, "--out", str(tmp_path / "one")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                          *args, "--out", str(tmp_path / "two")], env=env, capture_output=True, text=True, timeout=300)
    assert two.returncode == 0, two.stderr
    assert two.stdout.count("wrote embeddings.npz") == 1  # only rank 0 writes and reports
    assert two.stderr.count("skipped 1 of 16 images") == 1
    with np.load(tmp_path / "one" / "embeddings.npz") as a, np.load(tmp_path / "two" / "embeddings.npz") as b:
        assert sorted(a.files) == sorted(b.files)
        assert len(a["paths"]) == 15 and list(a["paths"]) == list(b["paths"])
        for name in a.files:
            if a[name].dtype.kind in "fc":
                np.testing.assert_allclose(b[name], a[name], atol=1e-6, rtol=0, err_msg=name)
            else:
                assert np.array_equal(a[name], b[name]), name
    assert (tmp_path / "two" / "images.csv").read_text() == (tmp_path / "one" / "images.csv").read_text()


@pytest.mark.slow
def test_two_processes_fill_and_then_read_the_cache(model_and_data: tuple[Path, Path], tmp_path: Path) -> None:
    model, data = model_and_data
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "QT_QPA_PLATFORM": "offscreen",
           "VIT_EXPLORER_CACHE": str(tmp_path / "cache")}
    run = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "vit_explorer",
           "probe", str(model), "--data", str(data), "--batch-size", "4"]
    first = subprocess.run([*run, "--out", str(tmp_path / "a")], env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    from vit_explorer.explore.store import FeatureStore

    (folder,) = (tmp_path / "cache").iterdir()  # one feature store, a shard written by each rank
    assert [s.name for s in FeatureStore.open(folder).shards] == ["r0-00000", "r1-00001"]
    again = subprocess.run([*run, "--out", str(tmp_path / "b")], env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert '"from_cache": true' in (tmp_path / "b" / "summary.json").read_text()
    assert (tmp_path / "a" / "probe.csv").read_text() == (tmp_path / "b" / "probe.csv").read_text()


@pytest.mark.slow
def test_two_processes_write_their_shards_of_the_one_process_store(model_and_data: tuple[Path, Path],
                                                                  tmp_path: Path) -> None:
    """embed --store under torchrun: each rank writes its own shard; the store holds one process's arrays."""
    from vit_explorer.explore.store import FeatureStore

    model, data = model_and_data
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "QT_QPA_PLATFORM": "offscreen",
           "VIT_EXPLORER_CACHE": str(tmp_path / "cache")}
    args = ["-m", "vit_explorer", "embed", str(model), "--data", str(data), "--batch-size", "3",
            "--store-tokens", "cls,mean,patch"]
    one = subprocess.run([sys.executable, *args, "--store", str(tmp_path / "one"), "--out", str(tmp_path / "o1")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *args,
                          "--store", str(tmp_path / "two"), "--out", str(tmp_path / "o2")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert two.returncode == 0, two.stderr
    assert two.stdout.count("wrote the feature store") == 1  # only rank 0 reports
    a, b = FeatureStore.open(tmp_path / "one"), FeatureStore.open(tmp_path / "two")
    assert len(a.shards) == 1 and [s.name for s in b.shards] == ["r0-00000", "r1-00001"]
    assert len(a) == 15 and a.paths() == b.paths() and a.skipped == b.skipped and len(a.skipped) == 1
    np.testing.assert_array_equal(a.labels(), b.labels())
    np.testing.assert_array_equal(a.predicted(), b.predicted())
    for state in a.states:
        for kind in a.kinds:
            np.testing.assert_allclose(b.tokens(state, kind), a.tokens(state, kind), atol=1e-6, rtol=0)
    assert (tmp_path / "o1" / "images.csv").read_text() == (tmp_path / "o2" / "images.csv").read_text()
