"""`vit-explorer inspect`: a headless report of a checkpoint's learned structure as PNG, CSV and JSON.

Qt-free: `build_report` asks the view layer (`vit_explorer.explore`) for the same figures the app
shows, from the same forward pass; `write_report` writes the numbers and hands each figure to a
`render` function (the CLI passes the app's `gui.figures.render_png`, so the pictures are drawn by the
same compositions as the app's views).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from .analysis.params import ParameterTable
from .analysis.pe import PESimilarity
from .checkpoints.arguments import add_model_arguments
from .checkpoints.errors import CheckpointWarning
from .checkpoints.files import write_folder
from .checkpoints.loaded import LoadedModel
from .data.images import open_image, sample_images
from .explore import attention, embeddings, features, position, relevance
from .explore.figures import Figure, SimilarityFigure, TilesFigure, small_multiples_shape
from .explore.forward import ForwardResult, Inputs, Needs, check_size, nonfinite_outputs, run_forward
from .explore.prediction import prediction_figure
from .explore.tables import ModelTables, model_tables
from .jobs import Job

Render = Callable[[Figure, Path, tuple[int, int]], object]  # (figure, PNG path, (width, height))
REPORT_SUFFIXES = (".json", ".csv", ".png")  # what a report folder holds (summary.json, params.csv, figures)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", help="hub id (HF or timm/...), folder or checkpoint file")
    parser.add_argument("--image", default=None,
                        help="image to run through the model (default: a bundled sample, else a synthetic image)")
    parser.add_argument("--resolution", default=None, metavar="HxW",
                        help="input size, e.g. 384x384 or 224x320 (learned PEs are resampled); default: the model's")
    parser.add_argument("--out", required=True,
                        help="output folder for summary.json, params.csv and the PNGs: new or empty, or an earlier "
                             "report with --overwrite")
    parser.add_argument("--overwrite", action="store_true", help="replace the report already in --out")
    parser.add_argument("--top-k", type=int, default=5, help="classes listed in summary.json (default 5)")
    add_model_arguments(parser)


def parse_resolution(text: str) -> tuple[int, int]:
    """'384' or '224x320' -> (H, W)."""
    match = re.fullmatch(r"\s*(\d+)\s*(?:[xX×]\s*(\d+))?\s*", text)
    if not match:
        raise ValueError(f"--resolution {text!r}: expected HxW, e.g. 384x384")
    h = int(match.group(1))
    w = int(match.group(2) or h)
    if h < 1 or w < 1:
        raise ValueError(f"--resolution {text!r}: both sides must be positive")
    return h, w


# ---------------------------------------------------------------------------- inputs
def synthetic_image(size: tuple[int, int] = (256, 256)) -> Image.Image:
    """A neutral, deterministic test picture: soft colour gradients and a disc, no real object."""
    h, w = size
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    y, x = y / max(h - 1, 1), x / max(w - 1, 1)
    disc = ((x - 0.62) ** 2 + (y - 0.4) ** 2 < 0.04).astype(np.float32)
    rgb = np.stack([0.35 + 0.4 * x, 0.45 + 0.3 * y, 0.6 - 0.3 * x * y], axis=-1)
    rgb = rgb * (1 - disc[..., None]) + disc[..., None] * np.array([0.85, 0.35, 0.2], dtype=np.float32)
    return Image.fromarray(np.round(rgb * 255).astype(np.uint8), "RGB")


def choose_image(path: str | None) -> tuple[Image.Image, dict[str, str]]:
    """The given image, else the first bundled sample, else the synthetic picture; and which it was."""
    if path is not None:
        return open_image(path), {"kind": "file", "path": str(path)}
    samples = sample_images()
    if samples:
        return open_image(samples[0]), {"kind": "bundled sample", "path": str(samples[0])}
    return synthetic_image(), {"kind": "synthetic", "path": ""}


# ---------------------------------------------------------------------------- the report
Figures = dict[str, tuple[Figure, tuple[int, int]]]  # PNG name -> (figure, (width, height))


@dataclass
class Report:
    summary: dict[str, Any]
    params: ParameterTable
    figures: Figures


def forward_for_report(loaded: LoadedModel, image: Image.Image, size: tuple[int, int], needs: Needs
                       ) -> ForwardResult:
    """The forward pass the app runs for the same model, image and input size, without masks."""
    return run_forward(Inputs.unmasked(loaded, image, size, needs))




def build_report(loaded: LoadedModel, *, image: Image.Image, image_info: dict[str, str],
                 resolution: tuple[int, int] | None = None, top_k: int = 5) -> Report:
    """Every figure and number of the report for one model and image (nothing written yet)."""
    size = resolution or loaded.preprocessing.size
    cfg = loaded.config
    check_size(loaded, size, Needs())  # before anything runs: a size whose pass would exceed the budget is refused
    query = attention.query_for(loaded.model.layout(size), cfg.pool)
    # reduced as the blocks run: the query's per-layer maps, rollout (mean over heads), distances; kept: the last
    # block's maps and tokens (the [CLS] heads and the PCA of the patch features)
    needs = Needs(maps=frozenset({cfg.depth - 1}), fusion="mean", distance=True, query_rows=query.rows,
                  tokens=frozenset({cfg.depth}))
    result = forward_for_report(loaded, image, size, needs)
    nonfinite = None if loaded.warnings else nonfinite_outputs(result.logits, loaded.source or "the model")
    if nonfinite is not None:  # NaN weights were warned about on loading
        warnings.warn(nonfinite, CheckpointWarning, stacklevel=2)
    tables = model_tables(loaded.model, result.inputs.size)
    sim = position.similarity(loaded.model, result.layout.grid)
    facts = embeddings.embedding_facts(result, 0.1)
    figures: Figures = {"parameters.png": (tables.params_figure(), (900, 560))}
    figures.update(_position_figures(loaded, sim, result.layout.grid))
    if facts.filters is not None:
        name = "patch_embedding_components.png" if facts.filters.variance is not None else "conv_stem_filters.png"
        figures[name] = (facts.filters.figure(), (900, 640))
    figures.update(_attention_figures(result, query))
    figures.update(_relevance_figures(result))
    if facts.tokens:
        figures["token_similarity.png"] = (facts.tokens_figure(), (900, 600))
    feature_figures, pca_images, skipped = _feature_figures(loaded, result, image_info)
    figures.update(feature_figures)
    top_rows = loaded.top_k(result.logits, top_k) if cfg.num_classes else []  # no classifier: nothing to rank
    if top_rows:
        title = f"Top-{len(top_rows)} classes ({image_info['kind']} image)"
        figures["prediction.png"] = (prediction_figure(result, top_k, title), (900, 160 + 70 * len(top_rows)))
    summary = _summary(loaded, result, tables, sim.scheme, sim.note, facts, query, image_info, top_rows)
    summary["pca_images"] = pca_images
    summary["warnings"] += [nonfinite] if nonfinite else []
    summary["warnings"] += [f"{name} not written: {why}" for name, why in skipped.items()]
    summary["figures"] = {name: list(size) for name, (_, size) in figures.items()}
    summary["figure_notes"] = {name: figure.note for name, (figure, _) in figures.items()  # e.g. an all-zero table
                               if isinstance(figure, (SimilarityFigure, TilesFigure)) and figure.note}
    return Report(summary, tables.params, figures)


def _position_figures(loaded: LoadedModel, sim: PESimilarity, grid: tuple[int, int]) -> Figures:
    """The PE similarity grid and the prefix tokens' PEs; for schemes inside attention, their own picture."""
    figures: Figures = {}
    mosaic_height = int(np.clip(880 * (grid[0] / grid[1]) ** 2, 260, 1200))  # the mosaic's aspect
    if sim.patches is not None:
        figures["pe_similarity.png"] = (position.pe_figure(sim, position.title(loaded.model, grid)),
                                        (1000, mosaic_height + 480))
    inside = position.attention_scheme_figure(loaded.model, grid)
    if inside is not None:
        name = "relative_position_bias.png" if loaded.config.pos_embed == "rel_bias" else "rope_similarity.png"
        figures[name] = (inside, (1000, mosaic_height + 120))
    return figures


def _attention_figures(result: ForwardResult, query: attention.Query) -> Figures:
    maps = attention.layers_figure(result, query)
    figures: Figures = {"attention_layers.png": (maps, _multiples_size(len(maps.maps))),
                        "rollout.png": (attention.rollout_figure(result, query), (900, 760)),
                        "attention_distance.png": (attention.distance_figure(attention.mean_distance(result),
                                                                             result.layout), (1000, 650))}
    if result.class_attentions:
        ca = attention.class_attention_figure(result)
        figures["class_attention.png"] = (ca, _multiples_size(len(ca.maps)))
    return figures


def _relevance_figures(result: ForwardResult) -> Figures:
    """The top class's class-specific maps side by side (their faithfulness is `vit-explorer explain`'s)."""
    cfg = result.inputs.loaded.config
    if not relevance.has_classifier(cfg):
        return {}
    methods = [name for name in relevance.supported(cfg) if relevance.METHODS[name].report]
    top = relevance.Target(index=int(result.probs.argmax()))
    explained = relevance.explain(result.inputs, methods, top, measure=False)
    return {"relevance.png": (relevance.ranking_figure(explained), _multiples_size(len(methods)))}


def _feature_figures(loaded: LoadedModel, result: ForwardResult, image_info: dict[str, str]
                     ) -> tuple[Figures, list[str], dict[str, str]]:
    """PCA of the last block's patch tokens over the image and up to three bundled samples (one basis), the
    last block's [CLS] attention per head, token norms; the embedding of a model without classifier. Also the
    names of the images in the PCA and the figures that could not be drawn, with why (NaN features)."""
    others = features.pca_companions(image_info.get("path") or image_info["kind"])
    tokens_only = Needs(tokens=frozenset({loaded.config.depth}))  # the PCA uses only the last block's tokens
    results = [result] + [forward_for_report(loaded, open_image(p), result.inputs.size, tokens_only)
                          for p in others]
    names = [Path(image_info["path"]).stem if image_info.get("path") else image_info["kind"]] + [p.stem for p in others]
    figures: Figures = {
        "token_norms.png": (features.norms_figure(result), (1000, 600)),
        "token_norm_map.png": (features.outliers_figure(result, loaded.config.depth), (800, 700)),
    }
    skipped = {}
    try:
        figures["pca_features.png"] = (features.pca_figure(results, names, loaded.config.depth, False),
                                       (700, 300 * len(results) + 90))  # one row per image: photo, colours
    except ValueError as e:  # no finite patch tokens
        skipped["pca_features.png"] = str(e)
        names = []
    if result.layout.num_prefix_tokens and result.layout.prefix_names[0] == "cls":
        heads = features.cls_heads_figure(result)
        figures["cls_attention_heads.png"] = (heads, _multiples_size(len(heads.maps)))
    if not loaded.config.num_classes:
        figures["embedding.png"] = (features.embedding_figure(result), (900, 600))
    return figures, names, skipped


def write_report(report: Report, out_dir: str | Path, render: Render, job: Job | None = None,
                 overwrite: bool = False) -> dict[str, Any]:
    """Write summary.json, params.csv and every figure through `render` (the job hears of each); return the summary.

    The report is written whole or not at all: into a temporary sibling folder renamed to `out_dir`
    at the end, never through a link. `out_dir` must be new or empty, or (with `overwrite`) hold an
    earlier report, which is replaced only once the new one is complete."""
    out = Path(out_dir)
    replace = check_out(out, overwrite)

    def fill(folder: Path) -> None:
        _write_params_csv(folder / "params.csv", report.params)
        work = job or Job()
        for done, (name, (figure, size)) in enumerate(report.figures.items(), start=1):
            work.check()
            render(figure, folder / name, size)
            work.progress(done / len(report.figures), name)
        (folder / "summary.json").write_text(json.dumps(report.summary, indent=2))

    write_folder(out, fill, replace=replace)
    return report.summary


def check_out(out: Path, overwrite: bool) -> bool:
    """Whether `out` holds a report to replace; a ValueError (naming it) for a folder a report may not go to."""
    if not out.exists() or (out.is_dir() and not out.is_symlink() and not any(out.iterdir())):
        return False
    if not out.is_dir():
        raise ValueError(f"--out {out}: is a file, not a folder; choose an empty or new folder")
    if not overwrite:
        raise ValueError(f"--out {out}: is not empty; give --overwrite to replace the report in it, or choose an "
                         "empty or new folder")
    if out.is_symlink():
        raise ValueError(f"--out {out}: is a link; give the folder it points to, or a new one")
    for entry in os.scandir(out):
        if entry.is_dir(follow_symlinks=False) or not entry.name.endswith(REPORT_SUFFIXES):
            raise ValueError(f"--out {out}: holds {entry.name}, which inspect does not write; --overwrite replaces "
                             "only a folder that holds a report, so choose an empty or new folder")
    return True


def _summary(loaded: LoadedModel, result: ForwardResult, tables: ModelTables, scheme: str, note: str,
             facts: embeddings.EmbeddingFacts, query: attention.Query, image_info: dict[str, str],
             top_rows: list[dict[str, Any]]) -> dict[str, Any]:
    layout = result.layout
    table = tables.params
    distance = attention.mean_distance(result)
    summary: dict[str, Any] = {
        "source": loaded.source,
        "kind": loaded.kind,
        "dtype": str(loaded.dtype).removeprefix("torch."),  # what the model ran in (bf16 weights stay bf16)
        "warnings": list(loaded.warnings),
        "details": loaded.details,
        "architecture": loaded.config.to_dict(),
        "input_size": list(result.inputs.size),
        "token_layout": {"prefix_tokens": list(layout.prefix_names), "grid": list(layout.grid),
                         "patch_size": layout.patch_size, "num_tokens": layout.num_tokens,
                         "class_attention": layout.class_attn},
        "parameters": {"total": table.total, "by_stage": table.by_stage(),
                       "by_layer": [{"stage": s, "layer": layer, "count": n} for s, layer, n in table.by_layer()]},
        **tables.summary(),
        "image": image_info,
        "top_k": top_rows,
        "attention_query": query.name,
        "position_embedding": {"scheme": scheme, "description": position.describe(loaded.model, layout.grid),
                               "note": note},
        "patch_embedding": {},
        "mean_attention_distance_px": [[round(float(v), 3) for v in row] for row in distance],
    }
    if facts.filters is not None and facts.filters.variance is not None:
        summary["patch_embedding"] = {"explained_variance": [round(float(s), 6) for s in facts.filters.variance],
                                      "conv_vs_unfold_max_abs_difference": facts.unfold_max_diff}
    summary["token_similarity"] = {name: [round(float(v), 6) for v in curve] for name, curve in facts.tokens.items()}
    return summary


def _write_params_csv(path: Path, table: ParameterTable) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["stage", "layer", "name", "shape", "count", "share"])
        for r in table.rows:
            writer.writerow([r.stage, r.layer, r.name, "x".join(map(str, r.shape)), r.count,
                             f"{table.share(r.count):.6f}"])
        writer.writerow(["total", "", "", "", table.total, "1.000000"])


def _multiples_size(n: int) -> tuple[int, int]:
    """Export size of n small multiples, laid out as the composition lays them out, with heading and colour bar."""
    rows, cols = small_multiples_shape(n)
    return max(900, 290 * cols + 110), 300 * rows + 50
