"""`vit-explorer embed | probe | cka SOURCE --data D --out DIR`: the dataset analyses headless, each writing CSV,
PNG figures (drawn by the app's compositions: the CLI passes `gui.figures.render_png`) and a JSON summary.

- embed: embeddings.npz with `paths` (relative to D), `labels`, `label_names`, `split` (0 train, 1 validation),
  per state i `cls_<i>` (models with a [CLS] in their token states) and `mean_<i>` (N, D), plus `pooled` and
  `predicted`; images.csv; the projector and token-norm figures.
- probe: probe.csv with columns state,tokens,knn,linear (validation accuracies in 0..1); confusion.csv at the
  best state; the probe curves and the confusion matrix.
- cka: cka.csv with a header state,<j>,... and one row per state i of the first model; the heatmap.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..analysis import knn as K
from ..analysis import probes as P
from ..checkpoints import LoadedModel
from ..checkpoints.arguments import add_model_arguments, load_options
from ..checkpoints.files import write_atomic
from ..explore import dataset as D
from ..explore import dataset_analysis as A
from ..explore import store as S
from ..explore import store_analysis as SA
from ..explore.attention import distance_figure
from ..explore.figures import Figure, json_number
from ..jobs import tqdm_job
from ..text import shown
from . import Render

THRESHOLD = 0.5  # cka --threshold's default
MIN_THRESHOLD, MAX_THRESHOLD = 1e-3, 1e3  # beyond, every RBF similarity rounds to 0 or to 1 (1e300 overflowed)


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    parser.add_argument("source", help="hub id, folder or checkpoint file")
    if command == "cka":
        parser.add_argument("source_b", nargs="?", help="a second model to compare with (same images)")
        parser.add_argument("--store-b", default=None, help="with --store and a second model: its feature store")
    parser.add_argument("--data", required=True,
                        help="an image folder (one sub-folder per class, or flat and unlabelled; train/ and val/ "
                             "sub-folders are the split), a built-in set (shapes, where) or a CIFAR folder")
    parser.add_argument("--out", required=True, help="output folder (created; files in it are replaced)")
    parser.add_argument("--limit", type=int, help="a seeded, stratified sample of this many images")
    parser.add_argument("--val-fraction", type=float, default=0.2,
                        help="share of each class held out for validation (default 0.2)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sample, the split and the probes")
    parser.add_argument("--batch-size", type=int, default=64, help="images per forward pass (default 64)")
    add_model_arguments(parser)
    parser.add_argument("--cache", default=None,
                        help=f"feature cache folder (default {D.default_cache()}; VIT_EXPLORER_CACHE sets it)")
    parser.add_argument("--no-cache", action="store_true", help="always extract, never read or write the cache")
    parser.add_argument("--store", default=None,
                        help="a feature store folder: embed writes the tokens there (new images appended, an "
                             "interrupted run resumed; under torchrun each process its shards); probe and cka embed "
                             "what it lacks, then read it streaming, in bounded memory")
    parser.add_argument("--store-tokens", default=None,
                        help="token kinds the store keeps, from cls, mean, patch (default cls,mean; mean alone without "
                             "a [CLS]); patch keeps every patch token of every chosen state")
    parser.add_argument("--store-states", default=None,
                        help="token states the store keeps, e.g. 0,6,12 (default all: 0 the embedded input, i the "
                             "output of block i - 1)")
    if command == "embed":
        parser.add_argument("--projection", choices=A.PROJECTIONS, default="pca",
                            help="2-D projection drawn (default pca; tsne and umap are seeded)")
        parser.add_argument("--attention-distance", action="store_true",
                            help="also measure the mean attention distance per head over the dataset (slower: "
                                 "every block forms its attention explicitly)")
    if command == "cka":
        parser.add_argument("--tokens", choices=("cls", "mean"), default=None,
                            help="compare the [CLS] token or the mean of the patch tokens (default: cls where "
                                 "both models have one)")
        parser.add_argument("--kernel", choices=("linear", "rbf"), default="linear")
        parser.add_argument("--threshold", type=float, default=None,
                            help=f"--kernel rbf: the bandwidth as a fraction of the median distance, {MIN_THRESHOLD:g} "
                                 f"to {MAX_THRESHOLD:g} (default {THRESHOLD})")
        parser.add_argument("--debiased", action="store_true", help="the debiased (unbiased HSIC) estimator")
        parser.add_argument("--minibatch", type=int, default=None,
                            help="minibatch CKA with this many images per batch (default: exact up to "
                                 f"{A.EXACT_CKA_IMAGES} images, batches of {A.MINIBATCH} beyond)")


def _check(args: argparse.Namespace) -> None:
    if args.batch_size < 1:
        raise ValueError(f"argument --batch-size: must be at least 1, got {args.batch_size}")
    if not 0 < args.val_fraction < 1:
        raise ValueError(f"argument --val-fraction: must be between 0 and 1, got {args.val_fraction}")
    if args.limit is not None and args.limit < 1:
        raise ValueError(f"argument --limit: must be at least 1, got {args.limit}")
    if getattr(args, "minibatch", None) is not None and args.minibatch < 4:
        raise ValueError(f"argument --minibatch: must be at least 4 images, got {args.minibatch}")
    if args.command == "cka":
        if args.threshold is not None and args.kernel != "rbf":
            raise ValueError("argument --threshold: the RBF bandwidth; only with --kernel rbf")
        if args.threshold is None:
            args.threshold = THRESHOLD
        if not MIN_THRESHOLD <= args.threshold <= MAX_THRESHOLD:  # NaN too
            raise ValueError(f"argument --threshold: the RBF bandwidth as a fraction of the median distance, from "
                             f"{MIN_THRESHOLD:g} to {MAX_THRESHOLD:g}; got {args.threshold:g}")
    if (args.store_tokens or args.store_states) and not args.store:
        raise ValueError("argument --store-tokens/--store-states: they say what a feature store keeps; give --store")
    if args.command == "cka" and args.source_b and args.store and not args.store_b:
        raise ValueError("argument --store-b: with --store, the second model's features go into a store of their own")
    if args.command == "cka" and args.store_b and not (args.store and args.source_b):
        raise ValueError("argument --store-b: the second model's store; give a second model and --store")
    if args.store:
        args.store_tokens = _listed(args.store_tokens, "--store-tokens", str)
        args.store_states = _listed(args.store_states, "--store-states", int)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"argument --out: {out} exists and is not a folder; choose a folder")


def _listed(text: str | None, flag: str, kind: type) -> list[Any] | None:
    """A comma-separated flag's values (None: the default; 'all' for the states)."""
    if text is None or (kind is int and text.strip() == "all"):
        return None
    try:
        values = [kind(v.strip()) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"argument {flag}: a comma-separated list, got {shown(text)}") from None
    if not values:
        raise ValueError(f"argument {flag}: give at least one value")
    return values


def _store(loaded: LoadedModel, source: D.DatasetSource, args: argparse.Namespace, folder: str, what: str
           ) -> S.FeatureStore | None:
    """The feature store `folder` holding the images of `source` (embedded where it lacks them); None on the ranks
    other than 0 under torchrun, which write their shards and nothing else."""
    rank = D.rank_and_world()[0]
    with tqdm_job(what, total=len(source), unit="image", disable=rank != 0) as job:
        store = S.write_store(loaded, source, Path(folder).expanduser(), states=args.store_states,
                              kinds=args.store_tokens, batch_size=args.batch_size,
                              distance=True if getattr(args, "attention_distance", False) else None, job=job)
    if rank != 0:
        return None
    for message in store.skipped[:20]:  # read from the store's files: bounded, one line
        print(f"vit-explorer: warning: skipped {shown(message)}", file=sys.stderr)
    if store.skipped:
        print(f"vit-explorer: warning: {len(store.skipped)} images in the store could not be read", file=sys.stderr)
    return store


def _store_summary(args: argparse.Namespace, store: S.FeatureStore, loaded: LoadedModel) -> dict[str, Any]:
    split = store.split()
    return {"source": args.source, "data": args.data, "images": len(store), "skipped": len(store.skipped),
            "train": int((split == 0).sum()), "validation": int((split == 1).sum()),
            "classes": store.manifest["data"]["label_names"], "depth": loaded.config.depth,
            "states": len(store.states), "tokens": store.kinds, "seed": args.seed, "limit": args.limit,
            "val_fraction": args.val_fraction, "preprocessing": loaded.preprocessing.to_dict(),
            "from_cache": store.embedded == 0,
            "notes": [], "store": {"path": str(store.path), "states": store.states, "kinds": store.kinds,
                                   "shards": len(store.shards), "images": len(store),
                                   "embedded": store.embedded}}


def _features(loaded: LoadedModel, source: D.DatasetSource, args: argparse.Namespace, what: str,
              distance: bool = False) -> D.Features | None:
    """The features (None on the ranks other than 0 under torchrun, which write nothing)."""
    cache = None if args.no_cache else Path(args.cache).expanduser() if args.cache else D.default_cache()
    with tqdm_job(what, total=len(source), unit="image", disable=D.rank_and_world()[0] != 0) as job:
        features = D.features_across(loaded, source, batch_size=args.batch_size, distance=distance, seed=args.seed,
                                     cache=cache, job=job)
    if features is None:
        return None
    for message in features.skipped[:20]:  # from the cache's store files too: bounded, one line
        print(f"vit-explorer: warning: skipped {shown(message)}", file=sys.stderr)
    if features.skipped:
        print(f"vit-explorer: warning: skipped {len(features.skipped)} of {len(source)} images that cannot be read",
              file=sys.stderr)
    return features


def write_csv(path: Path, header: list[str], rows: list[list[Any]]) -> None:
    """A CSV file of a header and rows, written whole or not at all (a temporary file, then a rename)."""
    def write(tmp: str) -> None:
        with open(tmp, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(header)
            writer.writerows(rows)

    write_atomic(path, write)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            json.dump(data, f, indent=2, allow_nan=False, default=lambda v: None)
            f.write("\n")

    write_atomic(path, write)


def _summary(args: argparse.Namespace, features: D.Features, loaded: LoadedModel) -> dict[str, Any]:
    src = features.source
    return {"source": args.source, "data": args.data, "images": len(features), "skipped": len(features.skipped),
            "train": int((src.split == 0).sum()), "validation": int((src.split == 1).sum()),
            "classes": src.label_names, "depth": features.depth, "states": features.depth + 1,
            "tokens": (["cls"] if features.cls else []) + ["mean"], "seed": args.seed, "limit": args.limit,
            "val_fraction": args.val_fraction, "preprocessing": loaded.preprocessing.to_dict(),
            "from_cache": features.from_cache, "notes": src.notes}


def _figures(out: Path, render: Render, figures: dict[str, tuple[Figure, tuple[int, int]]]) -> list[str]:
    for name, (figure, size) in figures.items():
        render(figure, out / name, size)
    return sorted(figures)


def run(args: argparse.Namespace, render: Render | None) -> int:
    """Run `args.command` (embed, probe or cka). Under torchrun (as `train` runs) every process extracts a shard
    of the images on its own GPU (or the CPU, with gloo) and rank 0 alone writes."""
    assert render is not None  # a command that draws is given the renderer
    from .train import setup_distributed

    _check(args)
    distributed = setup_distributed()
    try:
        rank, _ = D.rank_and_world()
        if distributed and args.device in (None, "cuda") and torch.cuda.is_available():
            args.device = f"cuda:{os.environ.get('LOCAL_RANK', '0')}"  # each rank its own GPU
        return _run(args, render, rank)
    finally:
        if distributed:
            import torch.distributed as dist

            dist.destroy_process_group()


def _run(args: argparse.Namespace, render: Render, rank: int) -> int:
    from ..checkpoints import load

    out = Path(args.out)
    source = D.open_source(args.data, limit=args.limit, seed=args.seed, val_fraction=args.val_fraction)
    _check_source(args, source)
    for note in source.notes if rank == 0 else ():
        print(f"vit-explorer {args.command}: {note}", file=sys.stderr)
    loaded = load(args.source, **load_options(args))
    if args.command == "embed":
        return _embed(args, loaded, source, out, render)
    if args.command == "probe":
        return _probe(args, loaded, source, out, render)
    return _cka(args, loaded, source, out, render)


def _check_source(args: argparse.Namespace, source: D.DatasetSource) -> None:
    """What the images rule out before any model runs: probes without labels, CKA or a t-SNE/UMAP of too few."""
    if args.command == "probe" and not source.labelled:
        raise ValueError(f"--data {shown(args.data)}: the images have no labels; probes need one sub-folder per class")
    if args.command == "cka" and len(source) < A.MIN_CKA_IMAGES:
        raise ValueError(f"--data {shown(args.data)}: CKA of {len(source)} image(s) says nothing (with 2 it is 1.0 "
                         f"for any features); it needs at least {A.MIN_CKA_IMAGES} (use more images or a larger "
                         "--limit)")
    if args.command == "embed" and args.projection != "pca" and len(source) < A.MIN_NEIGHBOURS:
        raise ValueError(f"--projection {args.projection}: {args.projection.upper()} needs at least "
                         f"{A.MIN_NEIGHBOURS} images, --data {shown(args.data)} has {len(source)}; use --projection "
                         "pca or more images")


def _embed_store(args: argparse.Namespace, loaded: LoadedModel, source: D.DatasetSource, out: Path,
                 render: Render) -> int:
    """embed --store: the tokens go into the store; --out gets images.csv, the projection and summary.json."""
    store = _store(loaded, source, args, args.store, "embed")
    if store is None:
        return 0
    names = store.manifest["data"]["label_names"]
    labels, split, predicted = store.labels(), store.split(), store.predicted()
    figures: dict[str, tuple[Figure, tuple[int, int]]] = {}
    kinds = [k for k in ("cls", "mean") if k in store.kinds]
    if kinds and len(store) >= 3:  # the projector of the last state stored, streamed for PCA
        last = max(store.states)
        points = SA.pca(store, last, kinds[0]) if args.projection == "pca" else \
            A.project(np.asarray(store.tokens(last, kinds[0])), args.projection, seed=args.seed)
        write_csv(out / "projection.csv", ["index", "x", "y"],
                  [[i, float(x), float(y)] for i, (x, y) in enumerate(points)])
        groups = [names[lab] for lab in labels] if names and (labels >= 0).all() else None
        kind = "[CLS]" if kinds[0] == "cls" else "mean of the patch tokens"
        figures["projection.png"] = (A.projection_figure(points, groups, f"{args.projection.upper()} of the {kind} "
                                                                         f"at state {last} ({len(store):,} images)"),
                                     (900, 800))
    write_csv(out / "images.csv", ["index", "path", "label", "label_name", "split", "predicted"],
              [[i, p, int(lab), names[lab] if 0 <= lab < len(names) else "", int(s), int(pred)]
               for i, (p, lab, s, pred) in enumerate(zip(store.paths(), labels, split, predicted, strict=True))])
    summary = _store_summary(args, store, loaded)
    summary["figures"] = _figures(out, render, figures)
    summary["projection"] = args.projection
    _write_json(out / "summary.json", summary)
    print(f"wrote the feature store {store.path} ({len(store):,} images, {len(store.states)} states, "
          f"{', '.join(store.kinds)}; {len(store.shards)} shard(s)), images.csv and {len(figures)} figures to {out}")
    return 0


def _embed(args: argparse.Namespace, loaded: LoadedModel, source: D.DatasetSource, out: Path, render: Render) -> int:
    if args.store:
        return _embed_store(args, loaded, source, out, render)
    f = _features(loaded, source, args, "embed", distance=args.attention_distance)
    if f is None:
        return 0
    src = f.source
    last = (f.cls or f.mean)[f.depth]
    points = A.project(last, args.projection, seed=args.seed)  # first: a projection refused leaves no file half done
    arrays: dict[str, np.ndarray] = {"paths": np.asarray(src.paths, dtype=str), "labels": src.labels,
                                     "label_names": np.asarray(src.label_names, dtype=str), "split": src.split,
                                     "pooled": f.pooled, "predicted": f.predicted}
    arrays.update({f"cls_{i}": v for i, v in f.cls.items()})
    arrays.update({f"mean_{i}": v for i, v in f.mean.items()})

    def write(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)  # type: ignore[arg-type]

    write_atomic(out / "embeddings.npz", write)
    names = src.label_names
    write_csv(out / "images.csv", ["index", "path", "label", "label_name", "split", "predicted"],
               [[i, p, int(lab), names[lab] if 0 <= lab < len(names) else "", int(s), int(pred)]
                for i, (p, lab, s, pred) in enumerate(zip(src.paths, src.labels, src.split, f.predicted, strict=True))])
    write_csv(out / "projection.csv", ["index", "x", "y"],
               [[i, float(x), float(y)] for i, (x, y) in enumerate(points)])
    groups = [names[lab] for lab in src.labels] if src.labelled else None
    kind = "[CLS]" if f.cls else "mean of the patch tokens"
    figures: dict[str, tuple[Figure, tuple[int, int]]] = {
        "projection.png": (A.projection_figure(points, groups, f"{args.projection.upper()} of the {kind} after the "
                                                               f"last block ({len(f):,} images)"), (900, 800)),
        "norms.png": (A.norms_figure(A.norm_summary(f), f.depth), (900, 600)),
    }
    summary = _summary(args, f, loaded)
    if f.distance is not None:
        dist = A.distance_summary(f)
        layout = loaded.model.layout(loaded.preprocessing.size)
        figures["attention_distance.png"] = (distance_figure(dist.mean, layout), (900, 600))
        figures["attention_distance_spread.png"] = (A.distance_spread_figure(dist), (900, 600))
        write_csv(out / "attention_distance.csv", ["block", "head", "mean_px", "std_px", "nearest_image"],
                   [[b, h, float(dist.mean[b, h]), float(dist.std[b, h]), src.paths[dist.nearest[b, h]]]
                    for b in range(dist.mean.shape[0]) for h in range(dist.mean.shape[1])])
    summary["figures"] = _figures(out, render, figures)
    summary["projection"] = args.projection
    _write_json(out / "summary.json", summary)
    print(f"wrote embeddings.npz ({len(f):,} images, {f.depth + 1} states), images.csv and "
          f"{len(figures)} figures to {out}")
    return 0


def _probe(args: argparse.Namespace, loaded: LoadedModel, source: D.DatasetSource, out: Path, render: Render) -> int:
    if args.store:
        store = _store(loaded, source, args, args.store, "probe")
        if store is None:
            return 0
        kinds = [k for k in ("cls", "mean") if k in store.kinds]
        if not kinds:
            raise S.StoreError(f"--store {shown(args.store)}: holds no cls or mean tokens for the probes (it holds "
                               f"{', '.join(store.kinds)}); use another store")
        curves = [SA.probe_curves(store, kind, seed=args.seed) for kind in kinds]
        summary = _store_summary(args, store, loaded)
        print("vit-explorer probe: note: over a feature store the linear probe is the streamed closed-form "
              f"{P.RIDGE}", file=sys.stderr)
    else:
        f = _features(loaded, source, args, "probe")
        if f is None:
            return 0
        curves = [A.probe_curves(f, kind, seed=args.seed) for kind in (["cls"] if f.cls else []) + ["mean"]]
        summary = _summary(args, f, loaded)
        if curves[0].linear_model != P.LOGISTIC:
            print(f"vit-explorer probe: note: the linear probe is a {curves[0].linear_model}: logistic regression on "
                  f"{len(f.source.label_names):,} classes would take minutes (above {P.MAX_LOGISTIC_WORK:,} training "
                  "images x features x classes)", file=sys.stderr)
    if curves[0].knn_method not in (K.FLAT, K.BRUTE):
        print(f"vit-explorer probe: note: the k-NN probe's neighbours come from an approximate index: "
              f"{curves[0].knn_method}", file=sys.stderr)
    rows = [[int(s), c.tokens, json_number(k), json_number(lin)]
            for c in curves for s, k, lin in zip(c.states, c.knn, c.linear, strict=True)]
    write_csv(out / "probe.csv", ["state", "tokens", "knn", "linear"], rows)
    best = max(curves, key=lambda c: float(np.nanmax(c.linear)))
    names = best.label_names
    write_csv(out / "confusion.csv", ["true", *names],
               [[names[i], *map(int, row)] for i, row in enumerate(best.confusion)])
    figures: dict[str, tuple[Figure, tuple[int, int]]] = {
        "probe.png": (A.probe_figure(curves, loaded.config.depth), (900, 600)),
        "confusion.png": (A.confusion_figure(best), (800, 750)),
    }
    summary.update(knn={"k": 20, "temperature": 0.07, "metric": "cosine", "index": best.knn_method},
                   linear={"model": best.linear_model},
                   best={"tokens": best.tokens, "state": best.best_state,
                         "linear": json_number(best.linear[list(best.states).index(best.best_state)])},
                   curves={c.tokens: {"knn": [json_number(v) for v in c.knn],
                                      "linear": [json_number(v) for v in c.linear]} for c in curves})
    summary["figures"] = _figures(out, render, figures)
    _write_json(out / "summary.json", summary)
    print(f"wrote probe.csv ({len(rows)} rows; best linear {summary['best']['linear']:.3f} at state "
          f"{best.best_state}, {best.tokens}) and {len(figures)} figures to {out}")
    return 0


def _cka(args: argparse.Namespace, loaded: LoadedModel, source: D.DatasetSource, out: Path, render: Render) -> int:
    from ..checkpoints import load

    loaded_b = load(args.source_b, **load_options(args)) if args.source_b else None  # before any work
    if args.store:
        sa = _store(loaded, source, args, args.store, "cka: model A" if args.source_b else "cka")
        sb = None if loaded_b is None else _store(loaded_b, source, args, args.store_b, "cka: model B")
        if sa is None:
            return 0
        tokens = args.tokens or ("cls" if "cls" in sa.kinds and (sb is None or "cls" in sb.kinds) else "mean")
        matrix = SA.cka(sa, sb, tokens, kernel=args.kernel, threshold=args.threshold, debiased=args.debiased,
                        minibatch=args.minibatch)
        images, states_a, states_b = len(sa), sa.states, (sb or sa).states
        summary = _store_summary(args, sa, loaded)
    else:
        fa = _features(loaded, source, args, "cka: model A" if args.source_b else "cka")
        fb = None if loaded_b is None else _features(loaded_b, source, args, "cka: model B")
        if fa is None:
            return 0
        if fb is not None and fa.source.paths != fb.source.paths:
            keep = sorted(set(fa.source.paths) & set(fb.source.paths))
            raise ValueError(f"the two models could read different images ({len(fa)} and {len(fb)}; {len(keep)} in "
                             "both); fix or remove the unreadable ones")
        tokens = args.tokens or ("cls" if fa.cls and (fb is None or fb.cls) else "mean")
        for name, features in (("A", fa), ("B", fb)) if fb is not None else (("", fa),):
            if still := A.constant_states(features, tokens):
                model = f" of model {name}" if name else ""
                print(f"vit-explorer cka: warning: state{'s' if len(still) > 1 else ''} {', '.join(map(str, still))}"
                      f"{model} do{'es' if len(still) == 1 else ''} not vary over the {len(features):,} images (the "
                      "same features for each: identical images or a collapsed model); CKA with a constant state is "
                      "0 by convention", file=sys.stderr)
        matrix = A.cka_states(fa, fb, tokens, kernel=args.kernel, threshold=args.threshold, debiased=args.debiased,
                              minibatch=args.minibatch)
        images, states_a, states_b = len(fa), list(fa.states), list((fb or fa).states)
        summary = _summary(args, fa, loaded)
    minibatch = args.minibatch or (A.MINIBATCH if images > A.EXACT_CKA_IMAGES else None)
    write_csv(out / "cka.csv", ["state", *map(str, states_b)],
              [[state, *(float(v) for v in row)] for state, row in zip(states_a, matrix, strict=True)])
    what = f"{args.kernel} CKA{' (debiased)' if args.debiased and not minibatch else ''}"
    if minibatch:
        what = f"minibatch {args.kernel} CKA ({minibatch} images per batch)"
    title = (f"{what} of the {'[CLS]' if tokens == 'cls' else 'mean patch token'}: "
             + (f"{args.source} states (rows) x {args.source_b} states" if args.source_b else "state x state")
             + " (0 = input)")
    figures: dict[str, tuple[Figure, tuple[int, int]]] = {"cka.png": (A.cka_figure(matrix, title), (850, 800))}
    summary.update(source_b=args.source_b, tokens_compared=tokens, kernel=args.kernel, debiased=args.debiased,
                   threshold=args.threshold if args.kernel == "rbf" else None, minibatch=minibatch,
                   diagonal=[float(matrix[i, i]) for i in range(min(matrix.shape))],
                   matrix=[[float(v) for v in row] for row in matrix])
    summary["figures"] = _figures(out, render, figures)
    _write_json(out / "summary.json", summary)
    print(f"wrote cka.csv ({matrix.shape[0]} x {matrix.shape[1]} states, {tokens}) and the heatmap to {out}")
    return 0
