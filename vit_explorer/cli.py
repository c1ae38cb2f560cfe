"""`vit-explorer`: no arguments (or a SOURCE) opens the app; subcommands run headless.

Heavy imports happen inside each command so that opening the app starts fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

COMMANDS = ("predict", "inspect", "train", "convert")


def _app_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vit-explorer",
        description="Open the vit-explorer app. Headless commands: " + ", ".join(COMMANDS)
        + " (run 'vit-explorer COMMAND --help').",
    )
    parser.add_argument("source", nargs="?", help="hub id, folder or file to open (default: the bundled model)")
    return parser


def _command_parser() -> argparse.ArgumentParser:
    from . import report
    from .training import command as train_command

    parser = argparse.ArgumentParser(prog="vit-explorer")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("predict", help="classify an image and print the top-k classes")
    p.add_argument("source", help="hub id (HF or timm/...), folder or checkpoint file")
    p.add_argument("image", help="image file")
    p.add_argument("--top-k", type=int, default=5, help="how many classes to print (default 5)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1, ... (default: the CPU)")
    p.add_argument("--arch", default=None, help="timm model name for a bare weights file, e.g. vit_small_patch16_224")

    p = sub.add_parser("inspect", help="write a report (PNG/CSV/JSON) of a checkpoint's learned structure")
    report.add_arguments(p)

    p = sub.add_parser("train", help="train a model (also under torchrun for several GPUs)")
    train_command.add_arguments(p)

    p = sub.add_parser("convert", help="write a checkpoint in the native or the Hugging Face format")
    p.add_argument("source", help="hub id, folder or checkpoint file")
    p.add_argument("--to", choices=("native", "hf"), required=True)
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--arch", default=None, help="timm model name for a bare weights file, e.g. vit_small_patch16_224")
    return parser


def _predict(args: argparse.Namespace) -> int:
    import torch

    from .checkpoints import load
    from .data.images import open_image

    if args.top_k < 1:
        raise SystemExit("vit-explorer predict: --top-k must be at least 1")
    loaded = load(args.source, device=args.device, arch=args.arch)
    if not loaded.config.num_classes:
        raise ValueError(f"{args.source}: this model has no classifier head (num_classes=0), nothing to predict")
    pixels = loaded.preprocess(open_image(args.image))
    with torch.inference_mode():
        logits = loaded.model(pixels)[0].float().cpu()
    rows = loaded.top_k(logits, args.top_k)
    if args.json:
        print(json.dumps({"source": args.source, "image": args.image, "top_k": rows, "logits": logits.tolist()}))
    else:
        width = max(len(r["label"]) for r in rows)
        for r in rows:
            print(f"{r['prob'] * 100:6.2f}%  {r['label']:<{width}}  (class {r['index']})")
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from . import report
    from .checkpoints import load
    from .gui.figures import render_png  # the app's compositions draw the report's figures

    if args.top_k < 1:
        raise ValueError("--top-k must be at least 1")
    resolution = report.parse_resolution(args.resolution) if args.resolution else None
    loaded = load(args.source, device=args.device, arch=args.arch)
    image, image_info = report.choose_image(args.image)
    built = report.build_report(loaded, image=image, image_info=image_info, resolution=resolution, top_k=args.top_k)
    report.write_report(built, args.out, render_png, progress=True)
    print(f"wrote summary.json, params.csv and {len(built.figures)} figures to {args.out}")
    return 0


def _convert(args: argparse.Namespace) -> int:
    from .checkpoints import convert, load

    loaded = load(args.source, device="cpu", arch=args.arch)
    path = convert(loaded, to=args.to, out_dir=args.out)
    print(f"wrote {args.to} checkpoint to {path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        args = _app_parser().parse_args(argv)
        from .gui.app import run_app

        return run_app(args.source)

    args = _command_parser().parse_args(argv)
    from .checkpoints.errors import CheckpointError
    from .models.config import ConfigError

    try:
        if args.command == "predict":
            return _predict(args)
        if args.command == "convert":
            return _convert(args)
        if args.command == "inspect":
            return _inspect(args)
        from .training import command as train_command

        return train_command.run(args)
    except (CheckpointError, ConfigError, OSError, ValueError) as error:
        print(f"vit-explorer {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"vit-explorer {args.command}: interrupted", file=sys.stderr)
        return 130
