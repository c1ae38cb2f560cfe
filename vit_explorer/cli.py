"""`vit-explorer`: no arguments (or a SOURCE) opens the app; subcommands run headless.

Heavy imports happen inside each command so that opening the app starts fast. Every problem with
the input (a flag, a file, a checkpoint) ends the command with one line on stderr,
`vit-explorer COMMAND: error: ...`, and exit status 2; warnings about what was loaded (NaN
weights) are lines `vit-explorer COMMAND: warning: ...`. `predict --json` prints strict JSON:
a NaN or infinite logit or probability is written as null.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

COMMANDS = ("predict", "inspect", "train", "convert", "explain", "components", "patch", "embed", "probe", "cka",
            "registers")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (argparse prints the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def _app_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="vit-explorer",
        description="Open the vit-explorer app. Headless commands: " + ", ".join(COMMANDS)
        + " (run 'vit-explorer COMMAND --help').",
    )
    parser.add_argument("source", nargs="?", help="hub id, folder or file to open (default: the bundled model)")
    # no choices here: naming them would import torch before the window paints; the loader checks the name
    parser.add_argument("--dtype", default=None, help="run the models opened in this dtype, e.g. float32 to upcast "
                        "bf16/fp16 weights (default: the weights' own)")
    return parser


def _command_parser() -> argparse.ArgumentParser:
    from . import explain, report
    from .checkpoints.arguments import add_model_arguments
    from .explore import components_command, dataset_command, registers_command
    from .training import command as train_command

    parser = _Parser(prog="vit-explorer")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("predict", help="classify an image and print the top-k classes")
    p.add_argument("source", help="hub id (HF or timm/...), folder or checkpoint file")
    p.add_argument("image", help="image file")
    p.add_argument("--top-k", type=int, default=5, help="how many classes to print (default 5)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    registers_command.add_predict_arguments(p)
    add_model_arguments(p)

    p = sub.add_parser("inspect", help="write a report (PNG/CSV/JSON) of a checkpoint's learned structure")
    report.add_arguments(p)

    p = sub.add_parser("train", help="train a model (also under torchrun for several GPUs)")
    train_command.add_arguments(p)

    p = sub.add_parser("convert", help="write a checkpoint in the native or the Hugging Face format")
    p.add_argument("source", help="hub id, folder or checkpoint file")
    p.add_argument("--to", choices=("native", "hf"), required=True)
    p.add_argument("--out", required=True, help="output folder")
    add_model_arguments(p, device=False)

    explain.add_arguments(sub.add_parser("explain", help="relevance maps of an image, each with its faithfulness"))
    components_command.add_arguments(sub)

    for name in dataset_command.COMMANDS:
        dataset_command.add_arguments(sub.add_parser(name, help=dataset_command.HELP[name]), name)
    registers_command.add_arguments(sub)
    return parser


def _check_flags(args: argparse.Namespace) -> str | None:
    """What is wrong with the flags of predict, inspect or convert (before anything is loaded), or None."""
    from .checkpoints.devices import resolve_device
    from .checkpoints.errors import CheckpointError
    from .checkpoints.preprocess import MAX_SIDE

    if getattr(args, "top_k", 1) < 1:
        return f"argument --top-k: must be at least 1, got {args.top_k}"
    try:
        resolve_device(getattr(args, "device", None))
    except CheckpointError as error:
        return f"argument --device: {error}"
    if getattr(args, "resolution", None):
        from .report import parse_resolution

        try:
            h, w = parse_resolution(args.resolution)
        except ValueError as error:
            return f"argument --resolution: {error}"
        if max(h, w) > MAX_SIDE:
            return f"argument --resolution: {h}x{w} has a side over {MAX_SIDE} pixels"
    return None


def _loading(command: str, after: float = 3.0) -> Callable[[float, str], None]:
    """A load's progress on stderr, once it has taken more than `after` seconds (a large model's)."""
    import time

    start = time.perf_counter()

    def say(fraction: float, stage: str) -> None:
        if time.perf_counter() - start > after:
            print(f"vit-explorer {command}: loading: {stage} ({fraction:.0%})", file=sys.stderr)

    return say


def _predict(args: argparse.Namespace) -> int:
    import torch

    from .checkpoints import CheckpointWarning, load
    from .checkpoints.arguments import load_options
    from .data.images import open_image
    from .explore.figures import json_number
    from .explore.forward import nonfinite_outputs

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
        width = max(len(r["label"]) for r in rows)
        for r in rows:
            print(f"{r['prob'] * 100:6.2f}%  {r['label']:<{width}}  (class {r['index']})")
    return 0


def _logits(args: argparse.Namespace, loaded: Any, pixels: Any) -> Any:
    """The model's logits; with --test-time-registers, those of the model with one test-time register."""
    if args.test_time_registers is None:
        return loaded.model(pixels)
    from .analysis.registers import parse_neurons
    from .explore.registers import with_registers

    neurons = parse_neurons(args.test_time_registers)
    return with_registers(loaded, pixels, neurons, mode=args.register_mode)["logits"]


def _inspect(args: argparse.Namespace) -> int:
    from . import report
    from .checkpoints import load
    from .checkpoints.arguments import load_options
    from .gui.figures import render_png  # the app's compositions draw the report's figures

    resolution = report.parse_resolution(args.resolution) if args.resolution else None
    report.check_out(Path(args.out), args.overwrite)  # before the (slower) load: a folder in the way fails at once
    loaded = load(args.source, **load_options(args), progress=_loading("inspect"))
    image, image_info = report.choose_image(args.image)
    built = report.build_report(loaded, image=image, image_info=image_info, resolution=resolution, top_k=args.top_k)
    report.write_report(built, args.out, render_png, progress=True, overwrite=args.overwrite)
    print(f"wrote summary.json, params.csv and {len(built.figures)} figures to {args.out} (the model ran in "
          f"{str(loaded.dtype).removeprefix('torch.')})")
    return 0


def _convert(args: argparse.Namespace) -> int:
    from .checkpoints import convert, load
    from .checkpoints.arguments import load_options

    loaded = load(args.source, device="cpu", **load_options(args), progress=_loading("convert"))
    path = convert(loaded, to=args.to, out_dir=args.out)
    print(f"wrote {args.to} checkpoint to {path}")
    return 0


def _out_of_memory(error: BaseException) -> bool:
    text = str(error)
    return isinstance(error, MemoryError) or "out of memory" in text or "can't allocate memory" in text


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        args = _app_parser().parse_args(argv)
        from .gui.app import run_app

        return run_app(args.source, args.dtype)

    args, unknown = _command_parser().parse_known_args(argv)
    from .checkpoints.errors import CheckpointError, CheckpointWarning
    from .models.config import ConfigError

    def fail(message: Any) -> int:
        # one line, whatever a library put into the message
        print(f"vit-explorer {args.command}: error: {' '.join(str(message).split())}", file=sys.stderr)
        return 2

    def warn(message: Any, category: type[Warning], *rest: Any, **kwargs: Any) -> None:
        if issubclass(category, CheckpointWarning):
            print(f"vit-explorer {args.command}: warning: {' '.join(str(message).split())}", file=sys.stderr)
        else:
            default_warning(message, category, *rest, **kwargs)

    default_warning = warnings.showwarning
    warnings.showwarning = warn
    try:
        if unknown:  # argparse would name the top-level program, not the command
            return fail(f"unrecognized arguments: {' '.join(unknown)} (see vit-explorer {args.command} --help)")
        if args.command != "train" and (problem := _check_flags(args)):
            return fail(problem)
        if args.command == "predict":
            return _predict(args)
        if args.command == "convert":
            return _convert(args)
        if args.command == "inspect":
            return _inspect(args)
        if args.command == "explain":
            from . import explain

            return explain.run(args)
        if args.command in ("components", "patch"):
            from .explore import components_command

            return components_command.run(args)
        if args.command == "registers":
            from .explore import registers_command
            from .gui.figures import render_png  # the app's compositions draw the figures

            return registers_command.run(args, render_png)
        if args.command in ("embed", "probe", "cka"):
            from .explore import dataset_command
            from .gui.figures import render_png  # the app's compositions draw the figures

            return dataset_command.run(args, render_png)
        from .training import command as train_command

        return train_command.run(args)
    except BrokenPipeError:  # the reader went away (`| head`): nothing to say, and nowhere to say it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 141
    except (CheckpointError, ConfigError, OSError, ValueError) as error:
        return fail(error)
    except (MemoryError, RuntimeError) as error:
        if not _out_of_memory(error):
            raise
        return fail(f"out of memory ({error}); use a smaller model, input size or batch, or another device")
    except KeyboardInterrupt:
        print(f"vit-explorer {args.command}: interrupted", file=sys.stderr)
        return 130
    finally:
        warnings.showwarning = default_warning
