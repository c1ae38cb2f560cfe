"""`vit-explorer`: no arguments (or a SOURCE) opens the app; subcommands run headless.

Heavy imports happen inside each command so that opening the app starts fast. Every problem with
the input (a flag, a file, a checkpoint) ends the command with one line on stderr,
`vit-explorer COMMAND: error: ...`, and exit status 2; warnings about what was loaded (NaN
weights) are lines `vit-explorer COMMAND: warning: ...`. `predict --json` prints strict JSON:
a NaN or infinite logit or probability is written as null.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from .commands import COMMANDS


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (argparse prints the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        from .text import shown

        # argparse quotes the value given: one line, bounded (a 5,000-digit --target)
        print(f"{self.prog}: error: {shown(message, 600)} (see {self.prog} --help)", file=sys.stderr)
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
    parser = _Parser(prog="vit-explorer")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS.values():
        command.load().add_arguments(sub.add_parser(command.name, help=command.help), command.name)
    return parser


def _render(figure: Any, path: Path, size: tuple[int, int]) -> Any:
    """The app's compositions draw every command's figures (imported only by a command that draws)."""
    from .gui.figures import render_png

    return render_png(figure, path, size)


def _check_flags(args: argparse.Namespace) -> str | None:
    """What is wrong with the flags of predict, inspect or convert (before anything is loaded), or None."""
    from .checkpoints.devices import resolve_device
    from .checkpoints.errors import CheckpointError
    from .checkpoints.preprocess import MAX_SIDE

    if getattr(args, "top_k", 1) < 1:
        return f"argument --top-k: must be at least 1, got {args.top_k}"
    if getattr(args, "device", None) == "":
        return "argument --device: it is empty; use cpu, cuda, cuda:N or mps (or leave it out for the default)"
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
    from .checkpoints.errors import CheckpointWarning
    from .errors import UserError

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
        command = COMMANDS[args.command]
        if command.model_flags and (problem := _check_flags(args)):
            return fail(problem)
        return int(command.load().run(args, _render if command.draws else None))
    except BrokenPipeError:  # the reader went away (`| head`): nothing to say, and nowhere to say it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 141
    except (UserError, OSError, ValueError) as error:  # the message alone, never the class's name
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
