"""`vit-explorer inspect`: a headless report of a checkpoint's learned structure as PNG, CSV and JSON.

The figures come from `vit_explorer.gui.figures`, the drawing code the app uses; it is imported
inside `write_report` so that importing this module never loads Qt.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from tqdm import tqdm

from .analysis import attention as attn
from .analysis.params import ParameterTable, flops_per_stage, parameter_table
from .analysis.patch_embed import embedding_components, unfold_difference
from .analysis.pe import pe_similarity
from .analysis.tokens import cls_dist_similarity
from .checkpoints.loaded import LoadedModel
from .data.images import open_image, sample_images

COMPONENTS = 28  # the ViT paper shows the first 28 principal components


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", help="hub id (HF or timm/...), folder or checkpoint file")
    parser.add_argument("--image", default=None,
                        help="image to run through the model (default: a bundled sample, else a synthetic image)")
    parser.add_argument("--resolution", default=None, metavar="HxW",
                        help="input size, e.g. 384x384 or 224x320 (learned PEs are resampled); default: the model's")
    parser.add_argument("--out", required=True, help="output folder for summary.json, params.csv and the PNGs")
    parser.add_argument("--top-k", type=int, default=5, help="classes listed in summary.json (default 5)")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1, ... (default: the CPU)")
    parser.add_argument("--arch", default=None,
                        help="timm model name for a bare weights file, e.g. vit_small_patch16_224")


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


def run(args: argparse.Namespace) -> int:
    from .checkpoints import load

    if args.top_k < 1:
        raise ValueError("--top-k must be at least 1")
    resolution = parse_resolution(args.resolution) if args.resolution else None
    loaded = load(args.source, device=args.device, arch=args.arch)
    image, image_info = choose_image(args.image)
    summary = write_report(loaded, args.out, image=image, image_info=image_info, resolution=resolution,
                           top_k=args.top_k, progress=True)
    print(f"wrote summary.json, params.csv and {len(summary['figures'])} figures to {args.out}")
    return 0


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
def write_report(loaded: LoadedModel, out_dir: str | Path, *, image: Image.Image, image_info: dict[str, str],
                 resolution: tuple[int, int] | None = None, top_k: int = 5, progress: bool = False
                 ) -> dict[str, Any]:
    """Write summary.json, params.csv and the PNG figures for one model and image; return the summary."""
    from .gui import figures  # Qt only here, so `import vit_explorer.report` stays Qt-free

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model, cfg = loaded.model, loaded.config
    preprocessing = loaded.preprocessing if resolution is None else loaded.preprocessing.with_size(resolution)
    model.check_image_size(*preprocessing.size)
    steps = tqdm(total=11, desc="inspect", unit="step", file=sys.stderr, disable=not progress)

    started: list[str] = []

    def stage(what: str) -> None:
        """Count the stage that just ended and name the one that starts."""
        if started:
            steps.update(1)
        started.append(what)
        steps.set_postfix_str(what)

    stage("forward pass")

    pixels = preprocessing(image).to(loaded.device)
    rgb = preprocessing.to_image(pixels)
    with torch.inference_mode():
        result = model.forward_intermediates(
            pixels, capture=("embedded", "hidden_states", "attentions", "class_tokens", "class_attentions"))
    layout = result["layout"]
    top_rows = []
    if cfg.num_classes:  # without a classifier the "logits" are pooled features: nothing to rank
        top_rows = loaded.top_k(result["logits"][0], top_k)
    attentions = [a.float().cpu() for a in result["attentions"]]
    stage("parameter table")

    table = parameter_table(model)
    _write_params_csv(out / "params.csv", table)
    stage("position embeddings")

    figures_written: dict[str, list[int]] = {}  # file name -> [width, height] in pixels
    size_single = (900, 760)

    def save(name: str, draw: Callable[[Any], object], size: tuple[int, int] = size_single) -> None:
        figures.render_png(draw, out / name, size)
        figures_written[name] = list(size)

    grid = layout.grid
    grid_text = f"{grid[0]}x{grid[1]} patches of {layout.patch_size} px"

    # 1. position embeddings
    sim = pe_similarity(model, grid)
    if sim.patches is not None:
        save("pe_similarity.png", lambda lay: figures.draw_similarity_grid(
            lay, sim.patches, title=f"Position embedding similarity ({cfg.pos_embed}, {grid_text})"),
            (1000, int(np.clip(880 * (grid[0] / grid[1]) ** 2, 260, 1200)) + 120))  # the mosaic's aspect
    if sim.prefix:
        def draw_prefix(lay: Any) -> None:
            for name, values in sim.prefix.items():
                figures.draw_heatmap(lay, values, title=f"[{name.upper()}] PE vs each patch PE",
                                     cmap=figures.SIMILARITY_CMAP, levels=(-1, 1),
                                     colorbar_label="cosine similarity", grid=grid, xlabel="patch column",
                                     ylabel="patch row")
        save("pe_prefix_similarity.png", draw_prefix, (700 * len(sim.prefix), 600))
    stage("patch embedding")

    # 2. patch-embedding filters
    components_info: dict[str, Any] = {}
    if cfg.stem == "patchify":
        components, share = embedding_components(model, COMPONENTS)
        components_info = {"explained_variance": [round(float(s), 6) for s in share],
                           "conv_vs_unfold_max_abs_difference": unfold_difference(model, pixels)}
        if cfg.in_chans == 3:
            save("patch_embedding_components.png", lambda lay: figures.draw_rgb_tiles(
                lay, components.cpu().numpy(),
                title=f"Patch-embedding filters: first {len(share)} principal components "
                      f"({float(share.sum()):.0%} of the variance)", columns=7), (900, 640))
    stage("attention per layer")

    # 3. attention of the first prefix token ([CLS]) per layer, or of the centre patch without one
    query = 0 if layout.num_prefix_tokens else layout.token_index(grid[0] // 2, grid[1] // 2)
    query_name = f"[{layout.prefix_names[0].upper()}]" if layout.num_prefix_tokens else \
        f"patch ({grid[0] // 2}, {grid[1] // 2})"
    maps = torch.cat([attn.attention_map(a, layout, query) for a in attentions])  # (layers, gh, gw)
    save("attention_layers.png", lambda lay: _small_multiples(
        figures, lay, rgb, maps, f"Attention of {query_name} per layer (mean over heads, each layer scaled "
        "to its maximum)", "layer"), _multiples_size(len(maps)))
    stage("rollout")

    # 4. rollout
    if layout.class_attn and result.get("class_attentions"):
        class_attentions = [a.float().cpu() for a in result["class_attentions"]]
        rolled = attn.class_rollout(class_attentions, attentions, layout)[0]
        rollout_title = "Attention rollout from [CLS] (class attention, then self-attention)"
    else:
        rolled = attn.rollout(attentions, layout, query=query)[0]
        rollout_title = f"Attention rollout from {query_name}"
    save("rollout.png", lambda lay: figures.draw_image(
        lay, rgb, title=rollout_title, grid=grid, overlay=rolled.numpy() * 100, overlay_alpha=0.7,
        overlay_label="rollout weight (% of the query)"), size_single)
    stage("attention distance")

    # 5. mean attention distance
    distance = attn.mean_attention_distance(attentions, layout)  # (layers, heads)
    layers_x = np.repeat(np.arange(1, distance.shape[0] + 1), distance.shape[1])
    heads = [f"head {h}" for h in range(distance.shape[1])] * distance.shape[0]
    save("attention_distance.png", lambda lay: figures.draw_scatter(
        lay, layers_x, distance.numpy().reshape(-1), groups=heads if distance.shape[1] <= 20 else None,
        title="Mean attention distance per head", xlabel="layer (network depth)",
        ylabel="mean attention distance (pixels)", jitter=0.6), (1000, 650))
    stage("token similarity")

    # 6. DeiT: [CLS] vs distillation token through the layers
    cls_dist = None
    if "dist" in layout.prefix_names:
        states = [result["embedded"], *result["hidden_states"]]
        cls_dist = cls_dist_similarity(states, layout)[0].cpu().numpy()
        save("cls_dist_similarity.png", lambda lay: figures.draw_lines(
            lay, np.arange(len(cls_dist)), {"cos([CLS], [DIST])": cls_dist},
            title="[CLS] vs distillation token", xlabel="layer (0 = embeddings)", ylabel="cosine similarity"),
            (900, 600))
    stage("class attention")

    # 7. CaiT: class attention of each class-attention block
    if result.get("class_attentions"):
        ca = attn.class_attention_maps(result["class_attentions"], layout)[0].float().cpu()  # (blocks, heads, gh, gw)
        ca = ca.mean(dim=1)
        save("class_attention.png", lambda lay: _small_multiples(
            figures, lay, rgb, ca, "Class attention of [CLS] per class-attention block (mean over heads)",
            "class-attention block"), _multiples_size(len(ca)))
    stage("prediction")

    # 8. prediction
    if top_rows:
        save("prediction.png", lambda lay: figures.draw_bars(
            lay, [r["label"] for r in top_rows], [r["prob"] for r in top_rows],
            title=f"Top-{len(top_rows)} classes ({image_info['kind']} image)", highlight=0, xlabel="probability"),
            (900, 120 + 70 * len(top_rows)))
    stage("summary")

    summary = {
        "source": loaded.source,
        "kind": loaded.kind,
        "details": loaded.details,
        "architecture": cfg.to_dict(),
        "input_size": list(preprocessing.size),
        "token_layout": {"prefix_tokens": list(layout.prefix_names), "grid": list(grid),
                         "patch_size": layout.patch_size, "num_tokens": layout.num_tokens,
                         "class_attention": layout.class_attn},
        "parameters": {"total": table.total, "by_stage": table.by_stage(),
                       "by_layer": [{"stage": s, "layer": layer, "count": n} for s, layer, n in table.by_layer()]},
        "flops": flops_per_stage(cfg, preprocessing.size),
        "image": image_info,
        "top_k": top_rows,
        "position_embedding": {"scheme": sim.scheme, "note": sim.note},
        "patch_embedding": components_info,
        "mean_attention_distance_px": [[round(float(v), 3) for v in row] for row in distance],
        "figures": figures_written,
    }
    if cls_dist is not None:
        summary["cls_dist_similarity"] = [round(float(v), 6) for v in cls_dist]
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    steps.update(1)
    steps.close()
    return summary


def _write_params_csv(path: Path, table: ParameterTable) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["stage", "layer", "name", "shape", "count", "share"])
        for r in table.rows:
            writer.writerow([r.stage, r.layer, r.name, "x".join(map(str, r.shape)), r.count,
                             f"{table.share(r.count):.6f}"])
        writer.writerow(["total", "", "", "", table.total, "1.000000"])


def _columns(n: int) -> int:
    return min(n, 4 if n <= 12 else 6)


def _multiples_size(n: int) -> tuple[int, int]:
    cols = _columns(n)
    rows = -(-n // cols)
    return max(900, 290 * cols + 110), 300 * rows + 50


def _small_multiples(figures: Any, layout: Any, rgb: np.ndarray, maps: torch.Tensor, title: str, what: str) -> None:
    """One overlay per map, each scaled to its own maximum (named in its title, so a flat map is
    not mistaken for a peaked one), and one colour bar for all of them in the last column."""
    cols = _columns(len(maps))
    rows = -(-len(maps) // cols)
    figures.add_title(layout, title, colspan=cols + 1)
    overlay = None
    for i, m in enumerate(maps):
        if i % cols == 0:
            layout.nextRow()
        peak = float(m.max())
        _, _, overlay = figures.draw_image(
            layout, rgb, title=f"{what} {i + 1} (max {peak:.1%})", overlay=(m / peak if peak > 0 else m).numpy(),
            overlay_alpha=0.75, overlay_levels=(0.0, 1.0), colorbar=False, axes=False)
    figures.draw_colorbar(layout, overlay, levels=(0.0, 1.0), cmap="inferno", label="share of the panel's maximum",
                          row=1, col=cols, rowspan=rows)  # row 0 is the title
