"""`vit-explorer predict SOURCE IMAGE`, `inspect SOURCE --out DIR` and `convert SOURCE --to {native,hf} --out DIR`:
the commands that open one model and show, report or rewrite it."""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..checkpoints.arguments import add_model_arguments
from . import Render


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    if name == "inspect":
        from .. import report

        report.add_arguments(parser)
        return
    parser.add_argument("source", help="hub id (HF or timm/...), folder or checkpoint file" if name == "predict"
                        else "hub id, folder or checkpoint file")
    if name == "predict":
        parser.add_argument("image", help="image file")
        parser.add_argument("--top-k", type=int, default=5, help="how many classes to print (default 5)")
        parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
        from .registers import add_predict_arguments

        add_predict_arguments(parser)
        add_model_arguments(parser)
    else:
        parser.add_argument("--to", choices=("native", "hf"), required=True)
        parser.add_argument("--out", required=True, help="output folder")
        add_model_arguments(parser, device=False)


def run(args: argparse.Namespace, render: Render | None) -> int:
    if args.command == "predict":
        return _predict(args)
    if args.command == "inspect":
        assert render is not None
        return _inspect(args, render)
    return _convert(args)


def _loading(command: str, after: float = 3.0) -> Callable[[float, str], None]:
    """A load's progress on stderr, once it has taken more than `after` seconds (a large model's)."""
    start = time.perf_counter()

    def say(fraction: float, stage: str) -> None:
        if time.perf_counter() - start > after:
            print(f"vit-explorer {command}: loading: {stage} ({fraction:.0%})", file=sys.stderr)

    return say


def _predict(args: argparse.Namespace) -> int:
    import torch

    from ..checkpoints import CheckpointWarning, load
    from ..checkpoints.arguments import load_options
    from ..data.images import open_image
    from ..explore.figures import json_number
    from ..explore.forward import nonfinite_outputs

    image = open_image(args.image)  # before the (slower) load: a bad image fails at once
    loaded = load(args.source, **load_options(args), progress=_loading("predict"))
    if not loaded.config.num_classes:
        raise ValueError(f"{args.source}: this model has no classifier head (num_classes=0), nothing to predict")
    pixels = loaded.preprocess(image)
    with torch.inference_mode():
        logits = _logits(args, loaded, pixels)[0].float().cpu()
    if (warning := nonfinite_outputs(logits, args.source)) is not None and not loaded.warnings:
        warnings.warn(warning, CheckpointWarning, stacklevel=1)  # NaN weights were warned about on loading
    rows = loaded.top_k(logits, args.top_k)
    if args.json:
        top = [{**row, "prob": json_number(row["prob"])} for row in rows]
        result = {"source": args.source, "image": args.image, "top_k": top,
                  "logits": [json_number(v) for v in logits.tolist()]}
        print(json.dumps(result, allow_nan=False))
    else:
        from ..text import shown

        names = [shown(r["label"]) for r in rows]  # a label from a file: one line, bounded (--json keeps it whole)
        width = max(map(len, names))
        for r, name in zip(rows, names, strict=True):
            print(f"{r['prob'] * 100:6.2f}%  {name:<{width}}  (class {r['index']})")
    return 0


def _logits(args: argparse.Namespace, loaded: Any, pixels: Any) -> Any:
    """The model's logits; with --test-time-registers, those of the model with one test-time register fed by those
    neurons (Jiang et al. 2025's activate_on_registers at the named hook sites)."""
    if args.test_time_registers is None:
        return loaded.model(pixels)
    from ..analysis.registers import parse_neurons
    from ..explore.registers import with_registers

    neurons = parse_neurons(args.test_time_registers)
    return with_registers(loaded, pixels, neurons, mode=args.register_mode)["logits"]


def _inspect(args: argparse.Namespace, render: Render) -> int:
    from .. import report
    from ..checkpoints import load
    from ..checkpoints.arguments import load_options
    from ..jobs import tqdm_job

    resolution = report.parse_resolution(args.resolution) if args.resolution else None
    report.check_out(Path(args.out), args.overwrite)  # before the (slower) load: a folder in the way fails at once
    loaded = load(args.source, **load_options(args), progress=_loading("inspect"))
    image, image_info = report.choose_image(args.image)
    built = report.build_report(loaded, image=image, image_info=image_info, resolution=resolution, top_k=args.top_k)
    with tqdm_job("inspect: figures", total=len(built.figures), unit="figure") as job:
        report.write_report(built, args.out, render, job, overwrite=args.overwrite)
    print(f"wrote summary.json, params.csv and {len(built.figures)} figures to {args.out} (the model ran in "
          f"{str(loaded.dtype).removeprefix('torch.')})")
    return 0


def _convert(args: argparse.Namespace) -> int:
    from ..checkpoints import convert, load
    from ..checkpoints.arguments import load_options

    loaded = load(args.source, device="cpu", **load_options(args), progress=_loading("convert"))
    path = convert(loaded, to=args.to, out_dir=args.out)
    print(f"wrote {args.to} checkpoint to {path}")
    return 0
