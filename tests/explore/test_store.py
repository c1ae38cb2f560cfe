"""The feature store: what it holds equals the model's own tokens; streamed probes, CKA and PCA equal the in-memory
ones; two ranks (simulated) and one process, an interrupted run resumed and one run, hold the same arrays; another
model or preprocessing is refused by name; hostile manifests and arrays are refused before anything is mapped."""

from __future__ import annotations

import copy
import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from vit_explorer.analysis import probes as P
from vit_explorer.errors import Cancelled
from vit_explorer.explore import dataset as D
from vit_explorer.explore import dataset_analysis as A
from vit_explorer.explore import store as S
from vit_explorer.explore import store_analysis as SA
from vit_explorer.explore.build import build_loaded
from vit_explorer.jobs import Job
from vit_explorer.models import preset

KINDS = ("cls", "mean", "patch")


@pytest.fixture(scope="module")
def loaded():
    return build_loaded(preset("classroom-tiny", image_size=(16, 16)), device="cpu")


@pytest.fixture(scope="module")
def source() -> D.DatasetSource:
    return D.open_source("shapes", limit=48, val_fraction=0.25)


@pytest.fixture(scope="module")
def stored(loaded, source, tmp_path_factory: pytest.TempPathFactory) -> S.FeatureStore:
    return S.write_store(loaded, source, tmp_path_factory.mktemp("s") / "store", kinds=KINDS, batch_size=10)


@pytest.fixture(scope="module")
def features(loaded, source) -> D.Features:
    return D.extract(loaded, source, batch_size=10)


def assert_same_store(a: S.FeatureStore, b: S.FeatureStore) -> None:
    assert a.paths() == b.paths() and a.states == b.states and a.kinds == b.kinds
    np.testing.assert_array_equal(a.labels(), b.labels())
    np.testing.assert_array_equal(a.predicted(), b.predicted())
    for state in a.states:
        for kind in a.kinds:
            np.testing.assert_allclose(a.tokens(state, kind), b.tokens(state, kind), atol=1e-6, rtol=0)


def test_the_store_holds_the_models_tokens(loaded, source, stored, features) -> None:
    assert len(stored) == len(source) and stored.complete and stored.states == [0, 1, 2]
    assert isinstance(stored.tokens(1, "cls"), np.memmap)  # one shard: mapped, not read
    for state in stored.states:
        np.testing.assert_allclose(stored.tokens(state, "cls"), features.cls[state], atol=1e-6, rtol=0)
        np.testing.assert_allclose(stored.tokens(state, "mean"), features.mean[state], atol=1e-6, rtol=0)
    np.testing.assert_allclose(stored.pooled(), features.pooled, atol=1e-6, rtol=0)
    np.testing.assert_array_equal(stored.predicted(), features.predicted)
    assert stored.paths() == source.paths
    pixels = torch.cat([D.dataset_preprocessing(loaded)(source.image(i)) for i in (0, 7)])
    with torch.inference_mode():
        hidden = loaded.model.forward_intermediates(pixels, capture=("hidden_states",))["hidden_states"][1]
    p = loaded.config.num_prefix_tokens
    patch = stored.tokens(2, "patch").reshape(len(source), stored.patches, -1)  # image-major rows
    np.testing.assert_allclose(patch[[0, 7]], hidden[:, p:].numpy(), atol=1e-6, rtol=0)
    batches = list(stored.iter_tokens(2, "patch", 100))
    assert [len(b) for b in batches[:-1]] == [100] * (len(batches) - 1)
    np.testing.assert_array_equal(np.concatenate(batches), stored.tokens(2, "patch"))
    reopened = S.FeatureStore.open(stored.path)
    assert reopened.manifest == stored.manifest and reopened.manifest["model"]["hash"] == D.model_hash(loaded)
    assert [x["id"] for x in reopened.manifest["images"]] == D.image_ids(source)


def test_streamed_probes_equal_the_in_memory_ones(stored, features) -> None:
    curves = SA.probe_curves(stored, "mean", batch_size=7)  # batches that straddle the split
    train, val = np.flatnonzero(features.source.split == 0), np.flatnonzero(features.source.split == 1)
    y = features.source.labels
    np.testing.assert_array_equal(curves.val, val)
    for n, state in enumerate(curves.states):
        x = features.mean[int(state)]
        knn = P.knn_predict(x[train], y[train], x[val], num_classes=10)
        np.testing.assert_array_equal(SA.knn_store(stored, int(state), "mean", train, val, y, 10, batch_size=7), knn)
        assert curves.knn[n] == P.accuracy(knn, y[val])
        ridge = P.linear_predict(x[train], y[train], x[val], model=P.RIDGE)  # scikit-learn, in memory
        np.testing.assert_array_equal(SA.ridge_store(stored, int(state), "mean", train, val, y, 10, batch_size=7),
                                      ridge)
        assert curves.linear[n] == P.accuracy(ridge, y[val])
    assert curves.linear_model == P.RIDGE


def test_the_streamed_ridge_equals_scikit_learns_within_1e_6() -> None:
    from sklearn.linear_model import RidgeClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(0)
    for classes in (2, 5):
        x = (rng.normal(size=(700, 24)) * 3 + 10).astype(np.float32)
        x[:, 3] = 7.25  # a constant feature: the scaler keeps its scale 1
        y = rng.integers(0, classes, 700)
        test = (rng.normal(size=(50, 24)) * 3 + 10).astype(np.float32)
        stream = P.RidgeStream(24, classes)
        for start in range(0, 700, 64):
            stream.update(x[start:start + 64], y[start:start + 64])
        fit = stream.fit()
        reference = make_pipeline(StandardScaler(), RidgeClassifier(alpha=1.0)).fit(x.astype(np.float64), y)
        scores = fit.decision(test)
        np.testing.assert_allclose(scores[:, 1] if classes == 2 else scores,
                                   reference.decision_function(test.astype(np.float64)), atol=1e-6, rtol=0)
        np.testing.assert_array_equal(fit.predict(test), reference.predict(test.astype(np.float64)))


@pytest.mark.parametrize("minibatch", [None, 8])
def test_streamed_cka_equals_the_in_memory_one(stored, features, minibatch) -> None:
    for kind in ("cls", "mean"):
        np.testing.assert_allclose(SA.cka(stored, None, kind, minibatch=minibatch),
                                   A.cka_states(features, None, kind, minibatch=minibatch), atol=1e-6, rtol=0)
    np.testing.assert_allclose(SA.cka(stored, stored, "cls", kind_b="mean", kernel="rbf", minibatch=minibatch),
                               A.cka_states(features, features, "cls", tokens_b="mean", kernel="rbf",
                                            minibatch=minibatch), atol=1e-6, rtol=0)


def test_streamed_pca_and_nearest_neighbours(stored, features) -> None:
    np.testing.assert_allclose(SA.pca(stored, 2, "mean", batch_size=9), A.project(features.mean[2]), atol=1e-6,
                               rtol=0)
    query = features.mean[2][[3, 30]]
    found = SA.nearest_images(stored, 2, "mean", query, 4, batch_size=9)
    assert found.index[:, 0].tolist() == [3, 30]  # each image is its own nearest
    patches = stored.tokens(1, "patch")
    hits, image, patch = SA.nearest_patches(stored, 1, patches[[5, 40]], 3, batch_size=11)
    assert (image[:, 0] * stored.patches + patch[:, 0]).tolist() == [5, 40]
    assert hits.index.shape == (2, 3)


def test_two_ranks_write_the_one_process_arrays(loaded, source, stored, tmp_path: Path, monkeypatch) -> None:
    """Rank 0 then rank 1 of two (simulated: the broadcast hands rank 0's plan to rank 1), each its own shard."""
    import torch.distributed as dist

    sent: list[Any] = []

    def broadcast(values: list[Any], src: int) -> None:
        if sent:
            values[:] = sent
        else:
            sent.extend(values)

    monkeypatch.setattr(dist, "broadcast_object_list", broadcast)
    monkeypatch.setattr(dist, "all_gather_object", lambda out, value: out.__setitem__(slice(None), [""] * len(out)))
    for rank in (0, 1):
        monkeypatch.setattr(D, "rank_and_world", lambda rank=rank: (rank, 2))
        S.write_store(loaded, source, tmp_path / "two", kinds=KINDS, batch_size=7)
    monkeypatch.undo()
    two = S.FeatureStore.open(tmp_path / "two")
    assert [s.name for s in two.shards] == ["r0-00000", "r1-00001"] and two.complete
    assert_same_store(two, stored)


def test_an_interrupted_run_resumes_to_the_same_arrays(loaded, source, stored, tmp_path: Path) -> None:
    cancel = threading.Event()
    with pytest.raises(Cancelled):
        S.write_store(loaded, source, tmp_path / "s", kinds=KINDS, batch_size=10,
                      job=Job(lambda share, what: cancel.set(), cancel))
    half = S.FeatureStore.open(tmp_path / "s")
    assert not half.complete and 0 < len(half) < len(source)
    S.write_store(loaded, source, tmp_path / "s", batch_size=10)  # the store's own states and kinds
    assert_same_store(S.FeatureStore.open(tmp_path / "s"), stored)


def test_new_images_are_appended_and_known_ones_kept(loaded, source, tmp_path: Path) -> None:
    first = source.subset(np.arange(20))
    S.write_store(loaded, first, tmp_path / "s", batch_size=8)
    grown = S.write_store(loaded, source, tmp_path / "s", batch_size=8)
    assert len(grown) == len(source) and len(grown.shards) == 2
    assert grown.paths() == first.paths + [p for p in source.paths if p not in set(first.paths)]
    again = S.write_store(loaded, source, tmp_path / "s", batch_size=8)
    assert len(again.shards) == 2  # nothing new


def test_another_model_or_preprocessing_is_refused_by_name(loaded, source, stored, tmp_path: Path) -> None:
    other = copy.deepcopy(loaded)
    with torch.no_grad():
        next(other.model.parameters()).view(-1)[0] += 1e-3
    with pytest.raises(S.StoreError, match=f"{stored.path}.*another model.*the model"):
        S.write_store(other, source, stored.path)
    resized = copy.deepcopy(loaded)
    resized.preprocessing = resized.preprocessing.with_size((32, 32))
    with pytest.raises(S.StoreError, match="the preprocessing"):
        S.write_store(resized, source, stored.path)
    with pytest.raises(S.StoreError, match="token kinds"):
        S.write_store(loaded, source, stored.path, kinds=("mean",))
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "notes.txt").write_text("mine")
    with pytest.raises(S.StoreError, match="not empty and not a feature store"):
        S.write_store(loaded, source, tmp_path / "x")


def copy_store(stored: S.FeatureStore, to: Path) -> Path:
    import shutil

    shutil.copytree(stored.path, to)
    return to


def edit_manifest(path: Path, change) -> None:
    data = json.loads((path / S.MANIFEST).read_text())
    change(data)
    (path / S.MANIFEST).write_text(json.dumps(data))


@pytest.mark.parametrize("change, message", [
    (lambda m: m.update(format="other"), "not a vit-explorer feature store"),
    (lambda m: m.update(version=99), "version 99"),
    (lambda m: m.update(width=10**9), "width"),
    (lambda m: m.update(width="64"), "width"),
    (lambda m: m.update(kinds=["cls", "evil"]), "kinds"),
    (lambda m: m["shards"][0].update(stop=10**12), "stop"),
    (lambda m: m["shards"][0].update(name="../../etc"), "name"),
    (lambda m: m["images"][0].update(id="0" * 32) or m["images"][1].update(id="0" * 32), "unique"),
    (lambda m: m["images"][0].update(label=10**6), "label"),
    (lambda m: m.update(images=m["images"][:-1]), "stop"),
    (lambda m: m.pop("model"), "missing model"),
    (lambda m: m.update(grid=[3, 3]), "grid"),
    (lambda m: m.update(grid=["a" * 100, 10**9]), "grid"),
    (lambda m: m.update(depth=-1), "depth"),
    (lambda m: m.update(sample={"patches": "4", "seed": 0}), "sample.patches"),
    (lambda m: m.update(prefix_names=[1]), "prefix_names"),
    (lambda m: m.update(images=[7]), "images"),
    (lambda m: m.update(kinds=[["cls"]]), "kinds"),
    (lambda m: m.update(states=[0, True]), "states"),
])
def test_hostile_manifests_are_refused(stored, tmp_path: Path, change, message) -> None:
    path = copy_store(stored, tmp_path / "s")
    edit_manifest(path, change)
    with pytest.raises(S.StoreError, match=message):
        S.FeatureStore.open(path)


def test_hostile_arrays_and_files_are_refused(stored, tmp_path: Path) -> None:
    path = copy_store(stored, tmp_path / "s")
    shard = path / stored.shards[0].name
    np.save(shard / "s1_cls.npy", np.zeros((3, stored.width), np.float32))  # another shape than the manifest's
    with pytest.raises(S.StoreError, match="s1_cls.npy.*the manifest implies"):
        S.FeatureStore.open(path).tokens(1, "cls")
    np.save(shard / "s1_mean.npy", np.array([{"a": 1}] * 48, dtype=object), allow_pickle=True)  # a pickle
    with pytest.raises(S.StoreError, match="s1_mean.npy"):
        S.FeatureStore.open(path).tokens(1, "mean")
    (shard / "s2_cls.npy").unlink()
    os.mkfifo(shard / "s2_cls.npy")  # a pipe would block a reader
    with pytest.raises(S.StoreError, match="s2_cls.npy"):
        S.FeatureStore.open(path).tokens(2, "cls")
    (shard / S.SHARD_STATUS).write_text(json.dumps({"next": 10**9, "rows": 0, "skipped": []}))
    with pytest.raises(S.StoreError, match="next"):
        S.FeatureStore.open(path)
    (path / S.MANIFEST).unlink()
    os.mkfifo(path / S.MANIFEST)
    with pytest.raises(S.StoreError, match="manifest"):
        S.FeatureStore.open(path)
    with pytest.raises(S.StoreError, match="no feature store"):
        S.FeatureStore.open(tmp_path / "missing")


def test_a_store_of_arrays_reads_back(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x, patch = rng.normal(size=(30, 8)).astype(np.float32), rng.normal(size=(30 * 4, 8)).astype(np.float32)
    labels, split = rng.integers(0, 3, 30), (np.arange(30) % 4 == 0).astype(np.int8)
    store = S.write_arrays(tmp_path / "a", {(5, "mean"): x, (5, "patch"): patch}, labels=labels, split=split,
                           label_names=["a", "b", "c"], grid=(2, 2))
    assert store.states == [5] and store.kinds == ["mean", "patch"] and store.patches == 4
    np.testing.assert_array_equal(store.tokens(5, "mean"), x)
    np.testing.assert_array_equal(np.concatenate(list(store.iter_tokens(5, "patch", 17))), patch)
    np.testing.assert_array_equal(store.labels(), labels)
    with pytest.raises(S.StoreError, match="no 'cls' tokens"):
        store.tokens(5, "cls")
    with pytest.raises(S.StoreError, match="no token state 4"):
        store.tokens(4, "mean")


def test_the_apps_nearest_images_are_the_cosine_top_k() -> None:
    from vit_explorer.explore.features import nearest

    rng = np.random.default_rng(3)
    query, others = rng.normal(size=16), [rng.normal(size=16) for _ in range(9)]
    cos = [float(query @ o / np.linalg.norm(query) / np.linalg.norm(o)) for o in others]
    figure = nearest(query, others, [f"img{i}" for i in range(9)], k=4)
    order = np.argsort(cos)[::-1][:4]
    assert list(figure.labels) == [f"img{i}" for i in order]
    np.testing.assert_allclose(figure.values, np.asarray(cos)[order], atol=1e-6)


def test_a_second_writer_waits_for_the_first(loaded, source, tmp_path: Path) -> None:
    """Two runs filling one store (one cache) take turns: the second waits on the lock, then finds nothing to do."""
    import fcntl

    path = tmp_path / "s"
    path.mkdir()
    holder = os.open(path / S.LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(holder, fcntl.LOCK_EX)
    done: list[S.FeatureStore] = []
    writer = threading.Thread(target=lambda: done.append(S.write_store(loaded, source, path, batch_size=16)))
    writer.start()
    writer.join(1.0)
    assert writer.is_alive() and not (path / S.MANIFEST).exists()  # waiting, nothing written
    os.close(holder)
    writer.join(60)
    assert done and len(done[0]) == len(source)
