"""The feature store: embedding into it against timm, a probe's peak memory streamed against in memory, FAISS
against brute force.

1. Embed throughput: `explore.store.write_store` over a folder of JPEGs (decode, the model's preprocessing, every
   token state's [CLS] and patch mean written to the memory-mapped shards) against the same decode and
   preprocessing followed by timm's `forward_features` on the same weights, images and batch size, in the same run
   (alternating rounds, best of each). ViT-S/16, random weights (no network here).
2. Peak memory of the probes (k-NN and the ridge linear probe) over N stored features of width D (a synthetic store
   of 10 classes, `store.write_arrays`): `store_analysis.probe_curves` reading the store streamed, against the
   in-memory path (the arrays read whole, then `probes.knn_probe` and the RIDGE `linear_predict`, as
   `dataset_analysis.probe_curves` runs them), each in a child process whose peak resident memory the kernel
   reports (VmHWM), with a third child's baseline (the imports, the manifest, the labels).
3. k-NN search over N x D: FAISS's exact IndexFlatIP against the brute force (faiss hidden), Q queries, k = 20;
   the top-k compared.

    python bench/bench_store.py [--images 64] [--rounds 2] [--probe-rows 100000] [--knn-rows 100000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from bench_embed import timm_model, timm_pass, write_images

from vit_explorer.checkpoints import load
from vit_explorer.explore import dataset as D
from vit_explorer.explore import store as S

WIDTH = 384


def embed(images: int, batch: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        root = write_images(Path(tmp) / "images", images)
        ref = timm_model(Path(tmp) / "model")
        loaded = load(str(Path(tmp) / "model"))
        source = D.open_source(str(root))
        ours, theirs = [], []
        for n in range(rounds):
            start = time.perf_counter()
            store = S.write_store(loaded, source, Path(tmp) / f"store{n}", batch_size=batch)
            ours.append(time.perf_counter() - start)
            theirs.append(timm_pass(ref, loaded, source, batch))
        held = {"states": len(store.states), "kinds": store.kinds,
                "bytes": sum(f.stat().st_size for f in store.path.rglob("*") if f.is_file())}
    return {"model": "vit_small_patch16_224", "weights": "random", "images": images, "batch_size": batch,
            "threads": torch.get_num_threads(), "ours_img_s": images / min(ours),
            "timm_forward_features_img_s": images / min(theirs), "ratio": min(theirs) / min(ours), "rounds": rounds,
            "store": held}


def synthetic(path: Path, rows: int, width: int, val_share: float) -> S.FeatureStore:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, rows)
    centres = rng.normal(size=(10, width)).astype(np.float32)
    x = np.empty((rows, width), np.float32)
    for start in range(0, rows, 10_000):
        stop = min(rows, start + 10_000)
        x[start:stop] = centres[labels[start:stop]] + 2 * rng.normal(size=(stop - start, width)).astype(np.float32)
    split = (rng.random(rows) < val_share).astype(np.int8)
    return S.write_arrays(path, {(0, "mean"): x}, labels=labels, split=split, label_names=[f"c{i}" for i in range(10)])


CHILD = """
import json, sys, time
import numpy as np
from vit_explorer.analysis import probes as P
from vit_explorer.explore import store as S, store_analysis as SA
store = S.FeatureStore.open(sys.argv[1])
start = time.perf_counter()
if sys.argv[2] == "baseline":  # the imports, the manifest and the labels: what both paths hold before they work
    store.labels(), store.split()
    knn = linear = float("nan")
elif sys.argv[2] == "streamed":
    curves = SA.probe_curves(store, "mean")
    knn, linear = float(curves.knn[0]), float(curves.linear[0])
else:
    x, y, split = np.array(store.tokens(0, "mean")), store.labels(), store.split()
    train, val = np.flatnonzero(split == 0), np.flatnonzero(split == 1)
    knn = P.knn_probe(x[train], y[train], x[val], y[val], num_classes=10).accuracy
    linear = P.accuracy(P.linear_predict(x[train], y[train], x[val], model=P.RIDGE), y[val])
# VmHWM: this process image's own peak (ru_maxrss would carry the parent's peak over the fork and exec)
peak = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"knn": knn if knn == knn else None, "linear": linear if linear == linear else None,
                  "seconds": time.perf_counter() - start, "peak_rss_bytes": peak}))
"""


def probe_memory(rows: int, width: int, val_share: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        store = synthetic(Path(tmp) / "store", rows, width, val_share)
        out: dict[str, Any] = {"rows": rows, "width": width, "validation": int(store.split().sum()),
                               "stored_bytes": rows * width * 4}
        for how in ("baseline", "streamed", "in_memory"):
            done = subprocess.run([sys.executable, "-c", CHILD, str(store.path), how], check=True,
                                  capture_output=True, text=True)
            out[how] = json.loads(done.stdout)
    base = out["baseline"]["peak_rss_bytes"]
    out["memory_ratio_above_baseline"] = ((out["streamed"]["peak_rss_bytes"] - base)
                                          / (out["in_memory"]["peak_rss_bytes"] - base))
    out["accuracies_equal"] = (out["streamed"]["knn"] == out["in_memory"]["knn"]
                               and out["streamed"]["linear"] == out["in_memory"]["linear"])
    out["memory_ratio"] = out["streamed"]["peak_rss_bytes"] / out["in_memory"]["peak_rss_bytes"]
    return out


def knn_speed(rows: int, width: int, queries: int) -> dict[str, Any]:
    from vit_explorer.analysis import knn as K

    rng = np.random.default_rng(1)
    database = rng.normal(size=(rows, width)).astype(np.float32)
    q = rng.normal(size=(queries, width)).astype(np.float32)
    start = time.perf_counter()
    fast = K.search(database, q, 20)
    faiss_s = time.perf_counter() - start
    faiss = sys.modules.pop("faiss")
    sys.modules["faiss"] = None  # type: ignore[assignment]  # `import faiss` now fails: the brute force runs
    try:
        start = time.perf_counter()
        slow = K.search(database, q, 20)
        brute_s = time.perf_counter() - start
    finally:
        sys.modules["faiss"] = faiss
    return {"rows": rows, "width": width, "queries": queries, "k": 20, "faiss_method": fast.method,
            "brute_method": slow.method, "faiss_s": faiss_s, "brute_s": brute_s, "speedup": brute_s / faiss_s,
            "same_top_k_share": float((fast.index == slow.index).mean()),
            "max_similarity_difference": float(np.abs(fast.similarity - slow.similarity).max())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=64, help="0: skip the embed throughput")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--probe-rows", type=int, default=100_000, help="0: skip the probe's peak memory")
    parser.add_argument("--val-share", type=float, default=0.05)
    parser.add_argument("--knn-rows", type=int, default=100_000, help="0: skip FAISS against brute force")
    parser.add_argument("--queries", type=int, default=1000)
    args = parser.parse_args()
    out: dict[str, Any] = {}
    if args.images:
        out["embed"] = embed(args.images, args.batch_size, args.rounds)
    if args.probe_rows:
        out["probe_memory"] = probe_memory(args.probe_rows, WIDTH, args.val_share)
    if args.knn_rows:
        out["knn"] = knn_speed(args.knn_rows, WIDTH, args.queries)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
