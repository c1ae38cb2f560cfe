"""`vit-explorer explain SOURCE IMAGE`: relevance maps of one image with their faithfulness, headless.

`--json` prints, for one method, one object {"source", "image", "method", "target": {"index", "label", "head"},
"grid": [rows, cols], "relevance": [[...]], "faithfulness": {"positive_auc", "negative_auc", "deletion_auc",
"insertion_auc", "baseline", "curves": {"positive": [...], "negative": [...], "deletion": [...], "insertion": [...],
"deletion_fractions": [...]}}} and for several {"methods": [...]}; `--out` writes each map and the ranking,
the curves as PNGs, and relevance.csv (one row per method, ranked).

`explain SOURCE --data D [--limit N]` (instead of IMAGE) ranks the methods over a dataset (`explore.ranking`): `--json`
prints {"source", "data", "images", "targets", "baseline", "confidence", "ranking": [{"method", "<score>": {"mean",
"low", "high"}, ...}]}; `--out` writes ranking.csv (method, each score's mean / low / high, images) and a bar figure
per score (ranking_<score>.png).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

from ..checkpoints.arguments import add_model_arguments, load_options
from ..explore import relevance as rel
from . import Render


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("source", help="hub id (HF or timm/...), folder or checkpoint file")
    parser.add_argument("image", nargs="?", default=None, help="image file (or --data)")
    parser.add_argument("--data", default=None, metavar="D",
                        help="rank the methods over a dataset instead of one image: a built-in set (shapes, where), "
                             "an image folder or a CIFAR folder; writes ranking.csv with --out")
    parser.add_argument("--limit", type=int, default=None, metavar="N",
                        help="with --data: a seeded, stratified sample of N images")
    parser.add_argument("--method", action="extend", nargs="+", choices=list(rel.METHODS), default=None,
                        help="one or more methods (default: the default ones this model supports)")
    parser.add_argument("--target", default=None, metavar="INDEX|LABEL",
                        help="the class to explain, by index or label (default: the top class)")
    parser.add_argument("--head", choices=rel.HEADS, default="average",
                        help="DeiT distilled: explain the average of both heads, the class head or the distillation "
                             "head (default average)")
    parser.add_argument("--reference", default=None, metavar="IMAGE",
                        help="a model without a classifier: the image whose embedding the similarity is taken to "
                             "(default: the same image unmasked)")
    parser.add_argument("--baseline", choices=rel.BASELINES, default="zero",
                        help="what a removed patch becomes: zero in the normalised input, the [MASK] token, or a "
                             "blur (default zero)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--out", default=None,
                        help="folder for the PNGs and relevance.csv (with --data: ranking.csv) (new or empty)")
    add_model_arguments(parser)


def run(args: argparse.Namespace, render: Render | None) -> int:
    from .. import report
    from ..checkpoints import load
    from ..data.images import open_image
    from ..explore.forward import Inputs

    if args.out is not None and not args.out.strip():
        raise ValueError("argument --out: empty; give the folder to write the maps into (or leave --out out)")
    if args.method and (twice := sorted({m for m in args.method if args.method.count(m) > 1})):
        raise ValueError(f"argument --method: {', '.join(twice)} given more than once; name each method once")
    if (args.image is None) == (args.data is None):
        raise ValueError("give exactly one of IMAGE (one image's maps) or --data D (the methods ranked over a "
                         "dataset)" + (", not both" if args.image is not None else ""))
    if args.limit is not None and args.data is None:
        raise ValueError("argument --limit: only with --data (it samples the dataset's images)")
    if args.data is not None:
        for flag, given in (("--target", args.target), ("--reference", args.reference)):
            if given is not None:
                raise ValueError(f"argument {flag}: not with --data (each image explains its label or top class)")
        return _run_data(args, render)
    image = open_image(args.image)  # before the (slower) load: a bad image fails at once
    reference = open_image(args.reference) if args.reference else None
    out = Path(args.out) if args.out else None
    if out is not None:
        report.check_out(out, overwrite=False)
    loaded = load(args.source, **load_options(args))
    cfg = loaded.config
    if reference is not None and rel.has_classifier(cfg):
        raise ValueError("argument --reference: this model has a classifier, so there is no similarity to take; "
                         "give --target instead")
    methods = args.method or rel.supported(cfg, default=True)
    for name in methods:
        rel.check_method(name, cfg)  # before anything runs
    inputs = Inputs.unmasked(loaded, image, loaded.preprocessing.native_size(image.height, image.width))
    target = rel.Target(args.target, args.head, reference)
    explanations = rel.explain(inputs, methods, target, args.baseline)
    for e in explanations:
        if e.note:
            print(f"vit-explorer explain: warning: {e.method}: {e.note}", file=sys.stderr)
    if out is not None:
        assert render is not None  # a command that draws is given the renderer
        write(explanations, out, render)
    if args.json:
        objects = [rel.to_json(args.source, args.image, e) for e in explanations]
        print(json.dumps(objects[0] if len(objects) == 1 else {"methods": objects}, allow_nan=False))
    else:
        print(f"target: {explanations[0].target.title}")
        for row, e in zip(rel.csv_rows(explanations), rel.ranked(explanations), strict=True):
            print(f"{row['rank']}. {e.method:<24} {rel.summary_text(e)}")
    if out is not None and not args.json:
        print(f"wrote relevance.csv and {len(explanations) + 3} figures to {out}")
    return 0


def write(explanations: list[rel.Explanation], out: Path, render: Render) -> None:
    """Each map as <method>.png, the ranking, the curves, and relevance.csv, into a new folder."""
    from ..checkpoints.files import write_folder

    def fill(folder: Path) -> None:
        for e in explanations:
            render(rel.map_figure(e), folder / f"{e.method}.png", (700, 640))
        render(rel.ranking_figure(explanations), folder / "ranking.png", (300 + 300 * min(len(explanations), 4),
                                                                          360 * ((len(explanations) + 3) // 4) + 120))
        render(rel.perturbation_figure(explanations), folder / "perturbation.png", (900, 560))
        render(rel.deletion_figure(explanations), folder / "deletion_insertion.png", (900, 560))
        rows = rel.csv_rows(explanations)
        with open(folder / "relevance.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)

    write_folder(out, fill, replace=False)


def _run_data(args: argparse.Namespace, render: Render | None) -> int:
    """`explain SOURCE --data D`: every method over the dataset's images, ranked with bootstrap intervals."""
    from .. import report
    from ..checkpoints import load
    from ..checkpoints.files import write_folder
    from ..explore import dataset as D
    from ..explore import ranking
    from ..jobs import tqdm_job
    from .dataset import write_csv

    source = D.open_source(args.data, limit=args.limit)  # before the (slower) load: a bad --data fails at once
    out = Path(args.out) if args.out else None
    if out is not None:
        report.check_out(out, overwrite=False)
    loaded = load(args.source, **load_options(args))
    methods = args.method or rel.supported(loaded.config, default=True)
    for name in methods:
        rel.check_method(name, loaded.config)
    with tqdm_job(f"explain {len(source):,} images") as job:
        result = ranking.rank_dataset(loaded, source, methods, baseline=args.baseline, job=job)
    for message in result.skipped:
        print(f"vit-explorer explain: skipped {message}", file=sys.stderr)
    if out is not None:
        assert render is not None  # a command that draws is given the renderer

        def fill(folder: Path) -> None:
            header, rows = ranking.csv_rows(result)
            write_csv(folder / "ranking.csv", header, rows)
            for name, figure in ranking.figures(result).items():
                render(figure, folder / f"ranking_{name}.png", (760, 160 + 48 * len(result.methods)))

        write_folder(out, fill, replace=False)
    if args.json:
        print(json.dumps(ranking.to_json(args.source, result), allow_nan=False))
    else:
        print(f"{result.images} images of {args.data}; target: {result.targets}; {args.baseline} baseline; "
              f"means with {ranking.CONFIDENCE:.0%} bootstrap intervals")
        print("\n".join(ranking.summary_lines(result)))
        if out is not None:
            print(f"wrote ranking.csv and {len(result.columns)} figures to {out}")
    return 0
