"""`vit-explorer components SOURCE IMAGE` (the target logit's parts) and `vit-explorer patch SOURCE CLEAN
CORRUPTED` (an activation-patching sweep): their arguments and run functions."""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from ..analysis.components import SITES
from ..checkpoints.arguments import add_model_arguments, load_options
from ..explore.components import corrupted_inputs, decomposition, decomposition_json, part_label, run_sweep, sweep_json
from . import Render


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    add_model_arguments(parser)


def add_arguments(p: argparse.ArgumentParser, name: str) -> None:
    if name == "patch":
        _patch_arguments(p)
        return
    p.add_argument("source", help="hub id (HF or timm/...), folder or checkpoint file")
    p.add_argument("image", help="image file")
    p.add_argument("--target", type=int, default=None,
                   help="class index (default: the top class; a model without a classifier: a feature index, "
                        "default the largest feature)")
    p.add_argument("--reference", default=None, metavar="IMAGE",
                   help="a model without a classifier: decompose the cosine with this image's embedding")
    _common(p)


def _patch_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", help="hub id (HF or timm/...), folder or checkpoint file")
    p.add_argument("clean", help="the clean image file")
    p.add_argument("corrupted", help="the corrupted run: another image file, 'mask' (the clean image with every "
                                     "patch [MASK], or those of --masked) or 'heads' (the clean image with every "
                                     "head off, or those of --heads-off)")
    p.add_argument("--component", choices=SITES, default="resid",
                   help="what to patch: the residual stream, the attention or MLP output (layers x positions), or "
                        "each head's output (layers x heads); default resid")
    p.add_argument("--target", type=int, default=None, help="class index (default: the clean run's top class)")
    p.add_argument("--foil", type=int, default=None,
                   help="the class the logit difference is taken against (default: the corrupted run's top other "
                        "class)")
    p.add_argument("--masked", default=None, metavar="I,J,...",
                   help="with 'mask': the patches (0-based, raster order)")
    p.add_argument("--heads-off", default=None, metavar="L:H,...",
                   help="with 'heads': the (block:head) pairs to turn off")
    p.add_argument("--positions", default=None, metavar="I,J,...",
                   help="token indices to sweep (resid/attn/mlp) or to patch each head at (head); default all")
    p.add_argument("--batch", type=int, default=32, help="patched runs per forward pass (default 32)")
    _common(p)


def _ints(text: str, flag: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"argument {flag}: expected comma-separated integers, got {text!r}") from None


def _inputs(loaded: Any, image: Any) -> Any:
    from ..explore.forward import Inputs

    return Inputs.unmasked(loaded, image, loaded.preprocessing.native_size(image.height, image.width))


def run(args: argparse.Namespace, render: Render | None) -> int:
    from ..checkpoints import load
    from ..data.images import open_image

    if args.command == "components":
        image = open_image(args.image)
        reference = open_image(args.reference) if args.reference else None
        loaded = load(args.source, **load_options(args))
        inputs = _inputs(loaded, image)
        ref = None
        if reference is not None:
            if loaded.config.num_classes:
                raise ValueError("argument --reference: this model has a classifier; give --target instead")
            from ..explore.relevance import embed_image

            ref = embed_image(loaded, reference)
        d = decomposition(inputs, args.target, ref)
        if args.json:
            print(json.dumps(decomposition_json(d), allow_nan=False))
            return 0
        print(f"target {d.target}: {d.kind} {d.logit:.6g} = parts {d.total - d.bias:.6g} + bias {d.bias:.6g}")
        for p in sorted(d.parts, key=lambda p: -abs(p.value)):
            print(f"{p.value:+12.6f}  {part_label(p.name, p.layer, p.head)}")
        return 0

    if args.batch < 1:
        raise ValueError(f"argument --batch: must be at least 1, got {args.batch}")
    clean_image = open_image(args.clean)
    other = None if args.corrupted in ("mask", "heads") else open_image(args.corrupted)
    loaded = load(args.source, **load_options(args))
    clean = _inputs(loaded, clean_image)
    if other is not None:
        corrupted = corrupted_inputs(clean, "image", image=other, image_id=1)
    elif args.corrupted == "mask":
        mask = None
        if args.masked:
            mask = np.zeros(clean.mask.size, dtype=bool)
            picked = _ints(args.masked, "--masked")
            bad = [i for i in picked if not 0 <= i < mask.size]
            if bad:
                raise ValueError(f"argument --masked: patches {bad} out of range 0 .. {mask.size - 1}")
            mask[picked] = True
            mask = mask.reshape(clean.mask.shape)
        corrupted = corrupted_inputs(clean, "mask", mask=mask)
    else:
        heads = None
        if args.heads_off:
            heads = np.ones_like(clean.head_mask)
            for pair in args.heads_off.split(","):
                try:
                    layer, head = (int(v) for v in pair.split(":"))
                    heads[layer, head] = 0
                except (ValueError, IndexError):
                    raise ValueError(f"argument --heads-off: {pair!r} is not BLOCK:HEAD within "
                                     f"{heads.shape[0]} blocks x {heads.shape[1]} heads") from None
        corrupted = corrupted_inputs(clean, "heads", head_mask=heads)
    positions = _ints(args.positions, "--positions") if args.positions else None
    result = run_sweep(clean, corrupted, args.component, target=args.target, foil=args.foil, positions=positions,
                       batch=args.batch)
    if args.json:
        print(json.dumps(sweep_json(result), allow_nan=False))
        return 0
    print(f"{args.component}: target {result.target} minus foil {result.foil}; clean {result.clean:.4g}, corrupted "
          f"{result.corrupted:.4g}; normalised effect per layer (rows) and {result.axis} (columns)")
    for layer, row in zip(result.layers, result.effects.tolist(), strict=True):
        print(f"block {layer:3d}: " + " ".join(f"{v:5.2f}" for v in row))
    return 0
