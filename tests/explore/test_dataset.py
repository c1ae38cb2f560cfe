"""The dataset source (folders, flat, train/val, built-in, --limit), bad images skipped, the feature cache
(reopened without a forward pass, recomputed when a file changes, read back safely), progress and cancel, and the
analyses over the features (probes per state and CKA equal the pure functions on the same arrays)."""

from __future__ import annotations

import copy
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vit_explorer.analysis import cka as C
from vit_explorer.analysis import probes as P
from vit_explorer.errors import Cancelled
from vit_explorer.explore import dataset as D
from vit_explorer.explore import dataset_analysis as A
from vit_explorer.explore import store as S
from vit_explorer.explore.build import build_loaded
from vit_explorer.jobs import Job
from vit_explorer.models import preset


@pytest.fixture(scope="module")
def loaded():
    return build_loaded(preset("classroom-tiny", image_size=(16, 16)), device="cpu")


def write_images(root: Path, counts: dict[str, int], size: tuple[int, int] = (20, 24), seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    for name, n in counts.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(root / name / f"{i:03d}.png")
    return root


def test_class_folders_labels_split_and_relative_paths(tmp_path: Path) -> None:
    root = write_images(tmp_path / "d", {"cat": 10, "dog": 5})
    src = D.open_source(str(root), val_fraction=0.2, seed=3)
    assert src.label_names == ["cat", "dog"] and len(src) == 15
    assert src.paths[0] == "cat/000.png" and all(not Path(p).is_absolute() for p in src.paths)
    assert [int(((src.labels == c) & (src.split == 1)).sum()) for c in (0, 1)] == [2, 1]
    np.testing.assert_array_equal(D.open_source(str(root), val_fraction=0.2, seed=3).split, src.split)  # seeded


def test_train_val_folders_are_the_split(tmp_path: Path) -> None:
    write_images(tmp_path / "d" / "train", {"a": 3, "b": 3})
    write_images(tmp_path / "d" / "val", {"a": 1, "b": 2}, seed=1)
    src = D.open_source(str(tmp_path / "d"))
    assert src.split.tolist() == [0] * 6 + [1] * 3
    assert src.paths[-1] == "val/b/001.png"


def test_flat_folder_is_unlabelled(tmp_path: Path) -> None:
    root = tmp_path / "flat"
    root.mkdir()
    for i in range(4):
        Image.new("RGB", (16, 16), (i * 40, 0, 0)).save(root / f"{i}.jpg")
    src = D.open_source(str(root))
    assert not src.labelled and (src.labels == -1).all() and len(src) == 4
    assert "unlabelled" in src.notes[0]


def test_limit_is_a_seeded_stratified_sample() -> None:
    labels = np.repeat(np.arange(4), [50, 30, 15, 5])
    picked = D.stratified_sample(labels, 20, seed=1)
    assert np.bincount(labels[picked]).tolist() == [10, 6, 3, 1]
    np.testing.assert_array_equal(picked, D.stratified_sample(labels, 20, seed=1))
    assert not np.array_equal(picked, D.stratified_sample(labels, 20, seed=2))
    src = D.open_source("shapes", limit=40)
    assert len(src) == 40 and src.pixels is not None and src.pixels.shape[0] == 40


def test_bad_arguments_are_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--limit"):
        D.open_source("shapes", limit=0)
    with pytest.raises(ValueError, match="--data .*no such folder"):
        D.open_source(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no images"):
        D.open_source(str(tmp_path / "empty"))


def test_unreadable_images_are_skipped_with_a_count(tmp_path: Path, loaded) -> None:
    root = write_images(tmp_path / "d", {"a": 3, "b": 3})
    (root / "a" / "zz_truncated.png").write_bytes((root / "a" / "000.png").read_bytes()[:40])
    (root / "b" / "zz_text.png").write_text("hello")
    features = D.extract(loaded, D.open_source(str(root)), batch_size=3)
    assert len(features) == 6 and len(features.skipped) == 2
    assert any("zz_truncated.png" in m for m in features.skipped)
    assert all("zz_" not in p for p in features.source.paths)
    everything_bad = tmp_path / "bad"
    (everything_bad / "a").mkdir(parents=True)
    (everything_bad / "a" / "x.png").write_text("no")
    with pytest.raises(ValueError, match="none of the 1 images"):
        D.extract(loaded, D.open_source(str(everything_bad)))


def test_progress_and_cancel(loaded) -> None:
    src = D.open_source("shapes", limit=30)
    seen: list[float] = []
    D.extract(loaded, src, batch_size=8, job=Job(lambda share, what: seen.append(share)))
    assert seen == [8 / 30, 16 / 30, 24 / 30, 30 / 30]
    cancel = threading.Event()

    def stop_after_first(share: float, what: str) -> None:
        cancel.set()

    with pytest.raises(Cancelled):
        D.extract(loaded, src, batch_size=8, job=Job(stop_after_first, cancel))


def test_cache_reopens_without_extracting_and_embeds_a_changed_file(tmp_path: Path, loaded, monkeypatch) -> None:
    """The cache is a feature store per model and recipe: a second run extracts nothing, a changed file is embedded
    (known by its content), the others read back."""
    root = write_images(tmp_path / "d", {"a": 4, "b": 4})
    cache = tmp_path / "cache"
    first = D.features_for(loaded, D.open_source(str(root)), cache=cache, distance=True)
    assert not first.from_cache and [p.name for p in cache.iterdir()] == [first.key]
    assert (cache / first.key / "manifest.json").is_file()

    def no_extract(*args, **kwargs):
        raise AssertionError("the cache should have answered")

    monkeypatch.setattr(D, "batch_arrays", no_extract)
    again = D.features_for(loaded, D.open_source(str(root)), cache=cache, distance=True)
    assert again.from_cache and again.key == first.key
    for state in first.states:
        np.testing.assert_array_equal(again.mean[state], first.mean[state])
        np.testing.assert_array_equal(again.cls[state], first.cls[state])
    for name in ("distance", "patches", "patch_index", "norm_mean", "prefix_norms", "pooled", "predicted"):
        np.testing.assert_array_equal(getattr(again, name), getattr(first, name))
    assert again.source.paths == first.source.paths and again.source.label_names == ["a", "b"]
    monkeypatch.undo()
    Image.new("RGB", (20, 24), (255, 0, 0)).save(root / "a" / "001.png")  # same name, other pixels
    changed = D.features_for(loaded, D.open_source(str(root)), cache=cache, distance=True)
    assert not changed.from_cache and changed.key == first.key
    assert not np.array_equal(changed.mean[1][1], first.mean[1][1])
    np.testing.assert_array_equal(changed.mean[1][[0, 2, 3]], first.mean[1][[0, 2, 3]])
    assert len(S.FeatureStore.open(cache / first.key)) == 9  # the changed file joined; the old one stays
    other_weights = copy.deepcopy(loaded)
    with torch.no_grad():
        next(other_weights.model.parameters()).view(-1)[0] += 1e-3  # one weight changed
    assert D.cache_folder(other_weights, cache, D.open_source(str(root)), patches=4, distance=True,
                          seed=0).name != changed.key


def test_the_cache_equals_extraction_and_refuses_a_damaged_store(tmp_path: Path, loaded) -> None:
    src = D.open_source("shapes", limit=12)
    cached = D.features_for(loaded, src, cache=tmp_path / "cache", batch_size=5)
    direct = D.extract(loaded, src, batch_size=5)
    for state in direct.states:
        np.testing.assert_allclose(cached.mean[state], direct.mean[state], atol=1e-6, rtol=0)
        np.testing.assert_allclose(cached.cls[state], direct.cls[state], atol=1e-6, rtol=0)
    np.testing.assert_allclose(cached.norm_max, direct.norm_max, atol=1e-5, rtol=0)
    np.testing.assert_array_equal(cached.patch_index, direct.patch_index)  # one sample per image, whichever path
    np.testing.assert_allclose(cached.patches.astype(np.float32), direct.patches.astype(np.float32), atol=1e-2)
    np.testing.assert_array_equal(cached.predicted, direct.predicted)
    manifest = tmp_path / "cache" / cached.key / "manifest.json"
    manifest.write_text('{"format": "vit-explorer-store", "version": 1}')
    with pytest.raises(ValueError, match=f"{manifest}: missing"):
        D.features_for(loaded, src, cache=tmp_path / "cache")


def test_probe_curves_and_cka_equal_the_pure_functions(loaded) -> None:
    f = D.extract(loaded, D.open_source("shapes", limit=120, val_fraction=0.25))
    curves = A.probe_curves(f, "mean")
    train, val = np.flatnonzero(f.source.split == 0), np.flatnonzero(f.source.split == 1)
    y = f.source.labels
    for n, state in enumerate(curves.states):
        x = f.mean[int(state)]
        assert curves.knn[n] == P.knn_probe(x[train], y[train], x[val], y[val]).accuracy
        assert curves.linear[n] == P.linear_probe(x[train], y[train], x[val], y[val]).accuracy
    assert curves.confusion.sum() == len(val) and curves.best_state in curves.states
    m = A.cka_states(f, None, "mean")
    assert m.shape == (f.depth + 1, f.depth + 1)
    np.testing.assert_allclose(np.diag(m), 1.0)
    assert m[1, 2] == pytest.approx(C.cka(f.mean[1], f.mean[2]))
    mini = A.cka_states(f, f, "mean", minibatch=40)  # two models' code path, the same model twice
    np.testing.assert_allclose(np.diag(mini), 1.0, atol=1e-9)
    top, shares = A.cka_drivers(f, 1, 2, tokens="mean", k=5)
    assert len(top) == 5 and (np.diff(shares) <= 0).all()


def test_projections_are_seeded(loaded) -> None:
    f = D.extract(loaded, D.open_source("shapes", limit=60))
    x = f.mean[f.depth]
    pca = A.project(x, "pca")
    centred = x - x.mean(0)
    assert np.allclose(np.abs(pca), np.abs(centred @ np.linalg.svd(centred, full_matrices=False)[2][:2].T),
                       atol=1e-4)
    np.testing.assert_array_equal(A.project(x, "tsne", seed=1), A.project(x, "tsne", seed=1))
    with pytest.raises(ValueError, match="projection must be"):
        A.project(x, "mds")


@pytest.mark.slow  # umap-learn compiles its numba kernels on first use (about 30 s)
def test_umap_is_seeded() -> None:
    x = np.random.default_rng(0).normal(size=(60, 8))
    np.testing.assert_array_equal(A.project(x, "umap", seed=0), A.project(x, "umap", seed=0))


def test_distance_and_norm_summaries(loaded) -> None:
    f = D.extract(loaded, D.open_source("shapes", limit=20), distance=True)
    d = A.distance_summary(f)
    assert d.mean.shape == (loaded.config.depth, loaded.config.num_heads) and d.images == 20
    np.testing.assert_allclose(d.mean, f.distance.mean(0))
    norms = A.norm_summary(f)
    assert norms.patch_mean.shape == (f.depth + 1,) and set(norms.prefix) == {"cls"}
    assert (norms.patch_max >= norms.patch_mean).all()


def test_cifar_folder_keeps_its_own_test_split(tmp_path: Path, loaded) -> None:
    import pickle

    rng = np.random.default_rng(0)
    for name, n in [(f"data_batch_{i}", 4) for i in range(1, 6)] + [("test_batch", 3)]:
        data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        with open(tmp_path / name, "wb") as f:
            pickle.dump({b"data": data, b"labels": [int(v) for v in rng.integers(0, 10, n)]}, f)
    with open(tmp_path / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": [f"c{i}".encode() for i in range(10)]}, f)
    src = D.open_source(str(tmp_path))
    assert len(src) == 23 and src.split.tolist() == [0] * 20 + [1] * 3
    assert src.paths[0] == "train/00000" and src.paths[-1] == "test/00002" and src.label_names[0] == "c0"
    np.testing.assert_array_equal(np.asarray(src.image(0)), src.pixels[0].permute(1, 2, 0).numpy())
    assert len(D.extract(loaded, src)) == 23


def test_a_naflex_model_runs_a_dataset_of_mixed_shapes_at_one_size(tmp_path: Path, loaded) -> None:
    """SigLIP 2's NaFlex gives each image its own grid; a batch of a landscape and a portrait image needs one, so
    the dataset runs every image at the model's square input, with the features of that fixed recipe."""
    import dataclasses

    naflex = copy.copy(loaded)
    naflex.preprocessing = dataclasses.replace(loaded.preprocessing, max_patches=16,
                                               patch_size=loaded.config.patch_size)
    assert naflex.preprocessing(Image.new("RGB", (40, 20))).shape[-2:] != (16, 16)  # its own grid, one image
    root = write_images(tmp_path / "wide", {"a": 2}, size=(20, 40))
    write_images(root, {"b": 2}, size=(40, 20), seed=1)
    features = D.extract(naflex, D.open_source(str(root)), batch_size=4)
    fixed = copy.copy(loaded)
    fixed.preprocessing = naflex.preprocessing.with_size((16, 16))
    again = D.extract(fixed, D.open_source(str(root)), batch_size=4)
    assert len(features) == 4 and not features.skipped
    np.testing.assert_array_equal(features.mean[2], again.mean[2])
    np.testing.assert_array_equal(features.pooled, again.pooled)
