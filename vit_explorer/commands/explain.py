"""`vit-explorer explain SOURCE IMAGE`: relevance maps of one image with their faithfulness, headless.

`--json` prints, for one method, one object {"source", "image", "method", "target": {"index", "label", "head"},
"grid": [rows, cols], "relevance": [[...]], "faithfulness": {"positive_auc", "negative_auc", "deletion_auc",
"insertion_auc", "baseline", "curves": {"positive": [...], "negative": [...], "deletion": [...], "insertion": [...],
"deletion_fractions": [...]}}} and for several {"methods": [...]}; `--out` writes each map and the ranking,
the curves as PNGs, and relevance.csv (one row per method, ranked). An LRP method's object (attnlrp, cp-lrp) also
has "conservation": {"target", "input", "absorbed"} (the target's value, the input's total relevance, their gap).

`explain SOURCE --data D [--limit N]` (instead of IMAGE) ranks the methods over a dataset (`explore.ranking`): `--json`
prints {"source", "data", "images", "targets", "baseline", "confidence", "ranking": [{"method", "<score>": {"mean",
"low", "high"}, ...}], "random", "no_better_than_random": [...]}; `--out` writes ranking.csv (method, each score's
mean / low / high, images) and a bar figure per score (ranking_<score>.png). Every ranking has the seeded
random-attribution row (method "random", each image's map seeded --seed + its place); a method whose interval of
negative - positive AUC reaches random's is marked no better than random.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Callable
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
    add_parameter_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--out", default=None,
                        help="folder for the PNGs and relevance.csv (with --data: ranking.csv) (new or empty)")
    add_model_arguments(parser)


def _pixels(flag: str) -> Callable[[str], tuple[int, int]]:
    """An argparse type: 'N' (a square) or 'HxW', whole pixels of at least 1."""
    def parse(text: str) -> tuple[int, int]:
        parts = text.lower().split("x")
        if len(parts) not in (1, 2) or not all(re.fullmatch(r"[0-9]{1,5}", p) for p in parts) or \
                any(int(p) < 1 for p in parts):
            raise argparse.ArgumentTypeError(f"{text!r}: give N or HxW, whole pixels of at least 1 (e.g. 16 or 32x16)")
        return (int(parts[0]), int(parts[-1]))

    parse.__name__ = flag  # argparse names the type in its message
    return parse


def _whole(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not re.fullmatch(r"-?[0-9]{1,9}", text) or not low <= int(text) <= high:
            raise argparse.ArgumentTypeError(f"{text!r}: a whole number from {low} to {high}")
        return int(text)

    return parse


def _number(high: float, said: str) -> Callable[[str], float]:
    """An argparse type: a finite number from 0 to `high`; `said` what it is, in the refusal."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and 0 <= value <= high):
            raise argparse.ArgumentTypeError(f"{text!r}: {said}")
        return value

    return parse


def add_parameter_arguments(parser: argparse.ArgumentParser) -> None:
    """The methods' parameters (rel.Options), the random baseline's seed and the sanity check."""
    defaults = rel.Options()
    group = parser.add_argument_group("method parameters (defaults: the methods as published)")
    group.add_argument("--ig-steps", type=_whole(1, 10_000), default=defaults.ig_steps, metavar="N",
                       help=f"integrated gradients: points along the path (default {defaults.ig_steps})")
    group.add_argument("--ig-baseline", choices=rel.IG_BASELINES, default=defaults.ig_baseline,
                       help="integrated gradients: where the path starts: a zero image, the image blurred, uniform "
                            "noise, or [MASK] in every patch embedding (per-patch map only) (default zero)")
    group.add_argument("--gradcam-block", type=_whole(-1_000, 1_000), default=None, metavar="B",
                       help="Grad-CAM: the block whose normed input it reads, 0 first (default the last)")
    group.add_argument("--smoothgrad", type=_whole(0, 1000), default=0, metavar="N",
                       help="SmoothGrad: average each gradient method over N noisy copies of the image (default 0: "
                            "off)")
    group.add_argument("--smoothgrad-sigma", type=_number(10, "a share of the input's range from 0 to 10 (e.g. 0.15)"),
                       default=None, metavar="S",
                       help="SmoothGrad: the noise's standard deviation, a share of the input's range (default "
                            f"{defaults.smoothgrad_sigma})")
    group.add_argument("--occlusion-window", type=_pixels("--occlusion-window"), default=None, metavar="N|HxW",
                       help="occlusion: the occluded window in pixels, captum's sliding_window_shapes (default one "
                            "patch)")
    group.add_argument("--occlusion-stride", type=_pixels("--occlusion-stride"), default=None, metavar="N|HxW",
                       help="occlusion: the window's step in pixels, captum's strides (default the window)")
    group.add_argument("--attnlrp-gamma", type=_number(100, "a number from 0 (LRP-0) to 100 (e.g. 0.25)"),
                       default=defaults.attnlrp_gamma, metavar="G",
                       help="AttnLRP and CP-LRP: the gamma rule on every linear layer type (fc1, fc2, proj) with this "
                            "gamma (default 0: LRP-0, as LXT)")
    group.add_argument("--pixels", action="store_true",
                       help="also the pixel-level maps of the gradient methods that have them (integrated gradients, "
                            "gradient x input): JSON 'pixel_relevance', <method>_pixels.png")
    parser.add_argument("--sanity", action="store_true",
                        help="cascading randomisation (Adebayo et al. 2018): each map again with the parameters drawn "
                             "anew from the head down, block by block, on a copy of the model; JSON 'sanity', "
                             "sanity.csv and sanity_<method>.png")
    group.add_argument("--seed", type=_whole(0, 2**31 - 1), default=0,
                       help="seed of every random draw: ROAD's and SmoothGrad's noise, the noise baseline, the random "
                            "map (default 0)")


def options(args: argparse.Namespace) -> rel.Options:
    """The methods' parameters the flags set."""
    if args.smoothgrad_sigma is not None and not args.smoothgrad:
        raise ValueError("argument --smoothgrad-sigma: SmoothGrad is off; give --smoothgrad N too")
    if args.occlusion_stride is not None and args.occlusion_window is None:
        raise ValueError("argument --occlusion-stride: give --occlusion-window too (the default window is one patch)")
    return rel.Options(ig_steps=args.ig_steps, ig_baseline=args.ig_baseline, gradcam_block=args.gradcam_block,
                       smoothgrad=args.smoothgrad,
                       smoothgrad_sigma=rel.Options().smoothgrad_sigma if args.smoothgrad_sigma is None else
                       args.smoothgrad_sigma,
                       occlusion_window=args.occlusion_window, occlusion_stride=args.occlusion_stride,
                       pixels=args.pixels, seed=args.seed, attnlrp_gamma=args.attnlrp_gamma)


def run(args: argparse.Namespace, render: Render | None) -> int:
    from .. import report
    from ..checkpoints import load
    from ..data.images import open_image
    from ..explore.forward import Inputs
    from ..jobs import tqdm_job

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
        for flag, given in (("--sanity", args.sanity), ("--pixels", args.pixels)):
            if given:
                raise ValueError(f"argument {flag}: one image's maps only, not with --data")
        return _run_data(args, render)
    chosen = options(args)
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
    baseline_row = [] if any(rel.METHODS[m].baseline for m in methods) else ["random"]  # every ranking has one
    ranking = rel.explain(inputs, [*methods, *baseline_row], target, args.baseline, options=chosen)
    explanations = [e for e in ranking if e.method in methods]  # the maps asked for (JSON, CSV, PNGs)
    for e in explanations:
        if e.note:
            print(f"vit-explorer explain: warning: {e.method}: {e.note}", file=sys.stderr)
    if args.sanity:
        from ..explore import sanity

        with tqdm_job("sanity check", disable=not sys.stderr.isatty()) as job:
            sanity.check(rel.prepare(inputs, target, args.baseline, chosen), explanations, job=job)
    if out is not None:
        assert render is not None  # a command that draws is given the renderer
        write(explanations, ranking, out, render)
    if args.json:
        objects = [rel.to_json(args.source, args.image, e) for e in explanations]
        print(json.dumps(objects[0] if len(objects) == 1 else {"methods": objects}, allow_nan=False))
    else:
        print(f"target: {explanations[0].target.title}")
        for rank, e in enumerate(rel.ranked(ranking), start=1):
            print(f"{rank}. {e.method:<24} {rel.summary_text(e, ranking)}")
        for e in explanations if args.sanity else []:
            steps = " · ".join(f"{s.randomised_from} {s.spearman:.2f}/{s.ssim:.2f}" for s in e.sanity or [])
            print(f"sanity {e.method} (Spearman/SSIM to the trained map, randomised from): {steps}")
    if out is not None and not args.json:
        print(f"wrote relevance.csv and the figures to {out}")
    return 0


def write(explanations: list[rel.Explanation], ranking: list[rel.Explanation], out: Path, render: Render) -> None:
    """Each map as <method>.png (and <method>_pixels.png), the ranking (with its random row), the curves, and
    relevance.csv; with the sanity check sanity.csv and sanity_<method>.png; into a new folder."""
    from ..checkpoints.files import write_folder

    def fill(folder: Path) -> None:
        for e in explanations:
            render(rel.map_figure(e), folder / f"{e.method}.png", (700, 640))
            if e.pixels is not None:
                render(rel.pixel_figure(e), folder / f"{e.method}_pixels.png", (700, 640))
        render(rel.ranking_figure(ranking), folder / "ranking.png", (300 + 300 * min(len(ranking), 4),
                                                                     360 * ((len(ranking) + 3) // 4) + 120))
        render(rel.perturbation_figure(explanations), folder / "perturbation.png", (900, 560))
        render(rel.deletion_figure(explanations), folder / "deletion_insertion.png", (900, 560))
        _write_csv(folder / "relevance.csv", rel.csv_rows(explanations))
        if any(e.sanity for e in explanations):
            from ..explore import sanity
            from ..explore.figures import small_multiples_shape

            _write_csv(folder / "sanity.csv", sanity.csv_rows(explanations))
            for e in explanations:
                if e.sanity:
                    rows, columns = small_multiples_shape(len(e.sanity) + 1)  # a long strip: folded
                    render(sanity.strip_figure(e, columns=columns), folder / f"sanity_{e.method}.png",
                           (300 * columns + 150, 300 * rows + 120))

    write_folder(out, fill, replace=False)


def _write_csv(path: Path, rows: list[dict[str, object]]) -> None:
    from .dataset import write_csv

    write_csv(path, list(rows[0]), [list(row.values()) for row in rows])


def _run_data(args: argparse.Namespace, render: Render | None) -> int:
    """`explain SOURCE --data D`: every method over the dataset's images, ranked with bootstrap intervals."""
    from .. import report
    from ..checkpoints import load
    from ..checkpoints.files import write_folder
    from ..explore import dataset as D
    from ..explore import ranking
    from ..jobs import tqdm_job
    from .dataset import write_csv

    chosen = options(args)
    source = D.open_source(args.data, limit=args.limit)  # before the (slower) load: a bad --data fails at once
    out = Path(args.out) if args.out else None
    if out is not None:
        report.check_out(out, overwrite=False)
    loaded = load(args.source, **load_options(args))
    methods = args.method or rel.supported(loaded.config, default=True)
    for name in methods:
        rel.check_method(name, loaded.config)
    with tqdm_job(f"explain {len(source):,} images") as job:
        result = ranking.rank_dataset(loaded, source, methods, baseline=args.baseline, options=chosen, job=job)
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
              f"means with {ranking.CONFIDENCE:.0%} bootstrap intervals; 'random' is a seeded random map per image")
        print("\n".join(ranking.summary_lines(result)))
        if out is not None:
            print(f"wrote ranking.csv and {len(result.columns)} figures to {out}")
    return 0
