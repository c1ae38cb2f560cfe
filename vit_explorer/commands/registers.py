"""`vit-explorer registers SOURCE --data D [--limit N] [--json] [--out DIR]`: the outlier diagnosis and the register
neurons headless (issue 29), and the `--test-time-registers` flags `predict` takes.

`--json` prints `{"states": [{"state", "outlier_share", "max_norm", "median_norm"}], "neurons": [{"block", "unit",
"score"}], "outlier_state"}` (neurons best first; state 0 the embedded input, state i the output of block i - 1;
blocks from 0) and a few more keys (images, rule). `--out DIR` writes states.csv, neurons.csv, entropy.csv,
registers.json and the figures (outlier share and norms per state, the neurons by block, where the outliers sit,
attention entropy per head).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ..analysis import registers as R
from ..checkpoints.arguments import add_model_arguments, load_options
from ..checkpoints.files import write_atomic
from ..explore import dataset as D
from ..explore.figures import json_number
from ..explore.registers import DEFAULT_IMAGES, Diagnosis, diagnose, figures
from ..jobs import tqdm_job
from . import Render
from .dataset import write_csv

HELP = "high-norm (outlier) tokens per state over a dataset, the MLP neurons that write them, attention entropy"


def add_arguments(p: argparse.ArgumentParser, name: str = "registers") -> None:
    """The `registers` command's arguments."""
    p.add_argument("source", help="hub id, folder or checkpoint file")
    p.add_argument("--data", required=True, help="an image folder, a built-in set (shapes, where) or a CIFAR folder")
    p.add_argument("--limit", type=int, default=DEFAULT_IMAGES,
                   help=f"a seeded, stratified sample of this many images (default {DEFAULT_IMAGES}, the paper's N)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--out", default=None, help="also write CSV, JSON and figures to this folder")
    p.add_argument("--ratio", type=float, default=R.DEFAULT_RATIO,
                   help=f"an outlier's norm exceeds this many times its image's median patch norm (default "
                        f"{R.DEFAULT_RATIO:g})")
    p.add_argument("--threshold", type=float, default=None,
                   help="an absolute norm cut instead (Darcet et al. cut DINOv2 ViT-g at 150)")
    p.add_argument("--top", type=int, default=20, help="neurons listed (default 20)")
    p.add_argument("--detect-state", type=int, default=-1,
                   help="the state whose outliers the finder reads (default -1, the last: the paper's)")
    p.add_argument("--no-attention", action="store_true",
                   help="skip entropy and [CLS] shares (the attention then stays on the fused kernel: faster)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sample")
    p.add_argument("--batch-size", type=int, default=32, help="images per forward pass (default 32)")
    add_model_arguments(p)


def add_predict_arguments(parser: argparse.ArgumentParser) -> None:
    """predict's flags for a test-time register."""
    parser.add_argument("--test-time-registers", default=None, metavar="BLOCK:UNIT[,...]",
                        help="predict with one test-time register fed by these MLP neurons (Jiang et al. 2025)")
    parser.add_argument("--register-mode", choices=R.REGISTER_MODES, default="zero",
                        help="what the patches keep of the moved activations (default zero)")


def _check(args: argparse.Namespace) -> None:
    if args.limit < 1:
        raise ValueError(f"argument --limit: must be at least 1, got {args.limit}")
    if args.batch_size < 1:
        raise ValueError(f"argument --batch-size: must be at least 1, got {args.batch_size}")
    if args.ratio <= 1:
        raise ValueError(f"argument --ratio: must be > 1, got {args.ratio}")
    if args.threshold is not None and args.threshold <= 0:
        raise ValueError(f"argument --threshold: must be > 0, got {args.threshold}")
    if not 1 <= args.top <= 10000:
        raise ValueError(f"argument --top: must be 1..10000, got {args.top}")
    if args.out is not None and Path(args.out).exists() and not Path(args.out).is_dir():
        raise ValueError(f"argument --out: {args.out} exists and is not a folder; choose a folder")


def run(args: argparse.Namespace, render: Render | None) -> int:
    from ..checkpoints import load

    assert render is not None
    _check(args)
    source = D.open_source(args.data, limit=args.limit, seed=args.seed)
    loaded = load(args.source, **load_options(args))
    with tqdm_job("registers", total=len(source), unit="image") as job:
        diagnosis = diagnose(loaded, source, ratio=args.ratio, threshold=args.threshold,
                             attention=not args.no_attention, detect_state=args.detect_state,
                             batch_size=args.batch_size, job=job)
    for message in diagnosis.skipped[:20]:
        print(f"vit-explorer registers: warning: skipped {message}", file=sys.stderr)
    result = _strict(diagnosis.to_json(args.top))
    if args.out is not None:
        write(diagnosis, Path(args.out), render, result, args.top)
    if args.json:
        print(json.dumps(result, allow_nan=False))
    else:
        _table(diagnosis, args.top)
    return 0


def _strict(value: Any) -> Any:
    """JSON with NaN and infinities as null."""
    if isinstance(value, float):
        return json_number(value)
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strict(v) for v in value]
    return value


def _table(d: Diagnosis, top: int) -> None:
    s = d.outlier_state
    where = "none (an untrained model's picture)" if s is None else \
        f"state {s} (after the MLP of block {s - 1})" if s else "state 0 (the embedded input)"
    print(f"{d.images} images; outliers: {d.rule()}; they appear at {where}")
    print("state  outliers  max norm  median norm  max |activation|")
    for i in range(d.norms.shape[1]):
        print(f"{i:5d}  {d.outlier_share[i]:8.2%}  {d.norms[:, i].max():8.2f}  {np.median(d.norms[:, i]):11.2f}  "
              f"{d.massive_max[i]:10.2f}")
    for block, unit, score in d.neurons(top):
        print(f"neuron {block}:{unit}  score {score:.3f}")


def write(d: Diagnosis, out: Path, render: Render, result: dict[str, Any], top: int) -> None:
    """The CSVs, registers.json and the figures."""
    out.mkdir(parents=True, exist_ok=True)
    cls = d.cls_share if d.cls_share is not None else None
    rows = []
    positional = d.positional_share if d.positional_share is not None else np.full(d.norms.shape[1], np.nan)
    for s in range(d.norms.shape[1]):
        block = s if cls is not None and s < len(cls) else None  # block s reads state s
        rows.append([s, float(d.outlier_share[s]), float(d.norms[:, s].max()), float(np.median(d.norms[:, s])),
                     float(d.massive_max[s]), float(d.massive_median[s]), int(d.massive_dim[s]),
                     "" if block is None or cls is None else float(cls[block]), float(positional[s])])
    write_csv(out / "states.csv", ["state", "outlier_share", "max_norm", "median_norm", "massive_max",
                                    "massive_median", "massive_dim", "cls_share_received", "positional_share"], rows)
    write_csv(out / "neurons.csv", ["block", "unit", "score"], [list(n) for n in d.neurons(top)])
    if d.entropy is not None:
        write_csv(out / "entropy.csv", ["block", "head", "entropy", "max_entropy"],
                   [[b, h, float(d.entropy[b, h]), d.max_entropy] for b in range(d.entropy.shape[0])
                    for h in range(d.entropy.shape[1])])
    write_atomic(out / "registers.json", lambda tmp: Path(tmp).write_text(json.dumps(result, indent=2) + "\n"))
    for name, (figure, size) in figures(d, top).items():
        render(figure, out / name, size)
