"""`vit-explorer sae SOURCE --data D --state S --tokens patch|cls --kind topk|batchtopk|matryoshka --k K
--expansion E [--out DIR] [--limit N] [--steps N] [--resume]`: a sparse autoencoder on one token state.

`--out DIR` holds sae.safetensors (W_enc (d, m), b_enc (m), W_dec (m, d), b_dec (d)), metrics.json (kind, k, state,
tokens, fvu, l0, dead_fraction, logit_recovered, and more: the cross-entropies, the ground truth's best AP per factor
for the SAE, PCA and k-means on built-in data), features.csv (feature, frequency, effect, and on built-in data
best_factor, ap), curves.csv, curves.png and l0.png (loss, FVU and L0 per step), steering.png (one image's prediction
with the feature that moves predictions most ablated), for patch tokens the feature browser's figures
(feature_F.png: the top-activating patches of the features that move the prediction most; feature_maps.png; their
histograms.png), checkpoint.pt (what --resume reads) and store/ (the tokens, a feature store; `--store DIR` names
another). features.csv's `effect`: the mean L1 change of the probabilities when the feature is ablated (on 32
images).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..analysis import sae as S
from ..checkpoints.arguments import add_model_arguments, load_options
from ..checkpoints.files import write_atomic
from ..data import synthetic
from ..explore import dataset as D
from ..explore import sae as E
from ..explore.figures import LinesFigure
from ..jobs import tqdm_job
from . import Render
from .dataset import write_csv

BROWSE = 500  # images whose patches the feature browser's figures draw from
EFFECT_IMAGES = 32  # images each feature is ablated on to rank features by how much they move the prediction
SHOWN = 8  # features drawn under --out


def add_arguments(p: argparse.ArgumentParser, name: str = "sae") -> None:
    """The `sae` command's arguments."""
    p.add_argument("source", help="hub id, folder or checkpoint file")
    p.add_argument("--data", required=True, help="an image folder, a built-in set (shapes, where) or a CIFAR folder")
    p.add_argument("--state", type=int, required=True,
                   help="token state (0 the embedded input, i the output of block i - 1)")
    p.add_argument("--tokens", choices=E.TOKEN_KINDS, default="patch", help="patch tokens or the [CLS] (default patch)")
    p.add_argument("--kind", choices=S.KINDS, default="topk", help="the sparse autoencoder (default topk)")
    p.add_argument("--k", type=int, default=16, help="active features per token (default 16)")
    p.add_argument("--expansion", type=int, default=8, help="features per input dimension (default 8)")
    p.add_argument("--out", required=True, help="the folder for the weights, metrics, features and curves")
    p.add_argument("--limit", type=int, default=None, help="a seeded, stratified sample of this many images")
    p.add_argument("--steps", type=int, default=None, help="training steps (default: --epochs passes)")
    p.add_argument("--epochs", type=float, default=1.0, help="passes over the tokens when --steps is not given")
    p.add_argument("--batch-size", type=int, default=1024, help="tokens per step (default 1024)")
    p.add_argument("--lr", type=float, default=1e-3, help="Adam's learning rate (default 1e-3)")
    p.add_argument("--resume", action="store_true", help="continue from checkpoint.pt in --out")
    p.add_argument("--store", default=None,
                   help="the feature store the tokens are read from, embedding there first what it lacks (default: "
                        "OUT/store; an existing store made with `embed --store` must hold --state and --tokens)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sample, the shuffle and the weights")
    add_model_arguments(p)


def _check(args: argparse.Namespace) -> None:
    for flag, value, low in (("--k", args.k, 1), ("--expansion", args.expansion, 1), ("--batch-size", args.batch_size,
                                                                                        1)):
        if value < low:
            raise ValueError(f"argument {flag}: must be at least {low}, got {value}")
    if args.steps is not None and args.steps < 1:
        raise ValueError(f"argument --steps: must be at least 1, got {args.steps}")
    if not args.epochs > 0:
        raise ValueError(f"argument --epochs: must be > 0, got {args.epochs}")
    if not args.lr > 0:
        raise ValueError(f"argument --lr: must be > 0, got {args.lr}")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"argument --out: {args.out} exists and is not a folder; choose a folder")
    if (out / "checkpoint.pt").exists() and not args.resume:
        raise ValueError(f"argument --out: {args.out} holds a checkpoint.pt; add --resume to continue it or choose "
                         "another folder")


def run(args: argparse.Namespace, render: Render | None) -> int:
    from safetensors.torch import save_file

    from ..checkpoints import load

    assert render is not None
    _check(args)
    source = D.open_source(args.data, limit=args.limit, seed=args.seed)
    loaded = load(args.source, **load_options(args))
    E.check_state(loaded, args.state)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tqdm_job("sae", total=100) as job:
        x, kept = E.store_tokens(loaded, source, args.store or out / "store", args.state, args.tokens,
                                 job=job.part(0, 0.2, "tokens"))  # (images * t, d), memory-mapped
        x3 = x.reshape(len(kept), -1, x.shape[-1])  # (images, t, d)
        d = x.shape[1]
        steps = args.steps or max(1, math.ceil(args.epochs * len(x) / args.batch_size))
        torch.manual_seed(args.seed)
        sae = S.SAE(d, args.expansion * d, args.k, args.kind)
        log = E.fit(sae, x, steps=steps, batch_size=args.batch_size, lr=args.lr, seed=args.seed,
                    device=loaded.device, checkpoint=out / "checkpoint.pt", job=job.part(0.2, 0.8, "training"))
        stats, frequency = E.measure(sae, x)
        ce = E.logit_recovered(loaded, source.subset(np.asarray(kept)), sae, args.state, args.tokens,
                               job=job.part(0.8, 0.9, "logit recovered"))
        truth = _ground_truth(loaded, source, kept, args, sae, x, job) if source.name in synthetic.VARIANTS else None
        job.progress(0.97, "features' effects")
        browse = source.subset(np.asarray(kept[:BROWSE]))
        pixels = next(p for _, p, _ in D._batches(browse, loaded, EFFECT_IMAGES, job.part(0.97, 0.98),
                                                  np.arange(len(browse))) if p is not None)
        effect = E.effects(loaded, pixels.to(loaded.device, loaded.dtype), sae, args.state, np.arange(sae.width))
    weights = {k: v.detach().cpu().contiguous() for k, v in sae.state_dict().items() if k != "threshold"}
    write_atomic(out / "sae.safetensors", lambda tmp: save_file(weights, tmp))
    metrics: dict[str, Any] = {"kind": args.kind, "k": args.k, "state": args.state, "tokens": args.tokens,
                               **{k: float(v) for k, v in stats.items()}, **ce, "width": sae.width, "steps": log.step,
                               "images": len(kept), "token_count": len(x), "source": str(args.source),
                               "data": source.name}
    if args.kind == "batchtopk":  # what its codes in evaluation keep (open_sae reads it back)
        metrics["threshold"] = float(sae.threshold)
    header = ["feature", "frequency", "effect"]
    rows = [[f, float(frequency[f]), float(effect[f])] for f in range(sae.width)]
    labels: dict[int, str] = {}
    if truth is not None:
        names, ap, prevalence = truth
        best = ap["sae"].argmax(0)
        header += ["best_factor", "ap"]
        rows = [r + [names[best[f]], float(ap["sae"][best[f], f])] for f, r in enumerate(rows)]
        labels = {f: f"best: {names[best[f]]}, AP {ap['sae'][best[f], f]:.2f}" for f in range(sae.width)}
        metrics["ground_truth"] = {n: {"prevalence": prevalence[i], **{d: float(a[i].max()) for d, a in ap.items()}}
                                   for i, n in enumerate(names)}
    write_csv(out / "features.csv", header, rows)
    shown = E.order(frequency, effect, by="effect")[:SHOWN]
    if args.tokens == "patch":
        grid = loaded.model.layout().grid
        z = E.codes(sae, x3[:BROWSE].reshape(-1, x3.shape[-1]))
        for name, (figure, size) in E.browser_figures(source, kept[:BROWSE], z, grid, shown, labels).items():
            render(figure, out / name, size)
    render(E.steering_figure(loaded, pixels[:1].to(loaded.device, loaded.dtype), sae, args.state, int(shown[0]), 0.0),
           out / "steering.png", (900, 500))
    write_csv(out / "curves.csv", ["step", "loss", "fvu", "l0"],
              [[i + 1, a, b, c] for i, (a, b, c) in enumerate(zip(log.loss, log.fvu, log.l0, strict=True))])
    _plot(log, out, render)
    metrics = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()}
    write_atomic(out / "metrics.json", lambda tmp: Path(tmp).write_text(json.dumps(metrics, indent=2) + "\n"))
    print(f"fvu {metrics['fvu']:.4f}  l0 {metrics['l0']:.2f}  dead {metrics['dead_fraction']:.2%}  "
          f"logit recovered {metrics['logit_recovered']}")
    if truth is not None:
        for name, row in metrics["ground_truth"].items():
            print(f"{name:28s} AP sae {row['sae']:.3f}  pca {row['pca']:.3f}  kmeans {row['kmeans']:.3f}  "
                  f"(prevalence {row['prevalence']:.3f})")
    return 0


def _ground_truth(loaded: Any, source: D.DatasetSource, kept: list[int], args: argparse.Namespace, sae: S.SAE,
                  x: np.ndarray, job: Any) -> tuple[list[str], dict[str, np.ndarray], list[float]]:
    rows = E.sample(len(x), seed=args.seed)
    targets = {k: v[rows] for k, v in E.factors(loaded, source, kept, args.tokens, seed=args.seed).items()}
    prevalence = [float(v.mean()) for v in targets.values()]
    job.progress(0.92, "baselines")
    sampled = x[rows]
    dictionaries = {"sae": E.codes(sae, sampled), **E.baselines(sampled, sae.width, seed=args.seed)}
    job.progress(0.95, "ground truth")
    return list(targets), E.ground_truth(dictionaries, targets), prevalence


def _plot(log: E.Training, out: Path, render: Render) -> None:
    """The training curves: loss and FVU in curves.png, L0 in l0.png (the app's figure compositions)."""
    x = np.arange(1, len(log.loss) + 1, dtype=float)
    render(LinesFigure("Sparse autoencoder training: loss and fraction of variance unexplained", x,
                       {"loss": np.asarray(log.loss), "FVU": np.asarray(log.fvu)}, "step", "value"),
           out / "curves.png", (900, 500))
    render(LinesFigure("Active features per token (L0)", x, {"L0": np.asarray(log.l0)}, "step", "features"),
           out / "l0.png", (900, 500))
