"""The command-line options of every command that opens a model (--device, --arch, --dtype), declared once,
and the keyword arguments of `load` they give."""

from __future__ import annotations

import argparse
from typing import Any

from .build import DTYPES


def add_model_arguments(parser: argparse.ArgumentParser, *, device: bool = True) -> None:
    """--device (unless the command always runs on the CPU), --arch and --dtype."""
    if device:
        parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1, ... (default: the CPU)")
    parser.add_argument("--arch", default=None,
                        help="timm model name for a bare weights file, e.g. vit_small_patch16_224")
    parser.add_argument("--dtype", choices=tuple(DTYPES), default=None,
                        help="run in this dtype, e.g. float32 to upcast bf16/fp16 weights (default: the weights' own)")


def load_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of `load` that `add_model_arguments`' options give."""
    options = {"arch": args.arch, "dtype": args.dtype}
    if hasattr(args, "device"):
        options["device"] = args.device
    return options
