"""A lesson as one web page: its steps and captions, each step's image as the model sees it, the weights of every
model it uses and a forward pass in plain JavaScript (web/forward.js), in one HTML file that opens from file://
with no network. The page mirrors its state in its URL fragment (`#step=6&mask=10,11,12&off=1:0`, steps counted
from 1, patches in raster order, heads as layer:head) and, for tests, as JSON in `document.body.dataset.state`.

A model a lesson builds from a preset has random weights: the export builds it with `seed` (torch's generator
seeded in a forked state), so the same lesson exports to the same page, and the page's numbers are those weights'.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from ..analysis.pe import pe_similarity
from ..checkpoints import LoadedModel
from ..data.images import open_image, sample_images
from ..models import ViTConfig
from .lesson_states import StepState, lesson_states
from .lessons import Lesson, LessonError, Model, read_lesson

WEB = Path(__file__).with_name("web")
MAX_PARAMETERS = 4_000_000  # of one model: 16 MB of float32, about 21 MB in the page
MAX_PAGE_BYTES = 64 * 2**20  # the weights and images of one page, before base64
TOP_K = 5  # classes in the prediction, as the app's Prediction view shows them
STEMS = ("patchify", "conv")
MLPS = ("gelu", "gelu_tanh", "quick_gelu")
POOLS = ("cls", "gap")


@dataclass(frozen=True)
class Exported:
    """What `export_lesson` wrote."""

    path: Path
    bytes: int
    models: tuple[str, ...]  # their names in the page
    steps: int
    seed: int


def unsupported(config: ViTConfig) -> list[str]:
    """What of a model the page's forward pass does not compute (empty: it computes all of it)."""
    problems = []
    if config.stem not in STEMS:
        problems.append(f"the {config.stem} stem (the page has {', '.join(STEMS)})")
    if config.mlp not in MLPS or config.mlp_norm:
        problems.append(f"the {config.mlp} MLP" + (" with a norm" if config.mlp_norm else ""))
    if config.pool not in POOLS or config.proj_dim:
        problems.append(f"the {config.pool} pooling" + (" with a projection" if config.proj_dim else ""))
    if config.norm != "layernorm" or config.embed_norm:
        problems.append(f"the {config.norm} norm" + (" on the patch embeddings" if config.embed_norm else ""))
    if config.pos_embed in ("rope", "learned+rope", "rel_bias", "rope_dinov3", "learned+rope_xy"):
        problems.append(f"the {config.pos_embed} position scheme (the page adds position embeddings only)")
    if not config.qkv_bias or not config.k_bias or not config.proj_bias:
        problems.append("attention without (all of) its biases")
    return problems


def check_size(config: ViTConfig, where: str) -> None:
    """LessonError when a model is too large for a page (its size and the limit in the message)."""
    count = config.estimate_parameters()
    if count > MAX_PARAMETERS:
        raise LessonError(f"{where}: {count:,} parameters ({count * 4 / 2**20:,.1f} MiB as float32); a web page holds "
                          f"models of at most {MAX_PARAMETERS:,} parameters (the classroom models have about 320,000)")


def _tensor_blob(tensors: dict[str, np.ndarray]) -> dict[str, Any]:
    """Named float32 arrays as one base64 blob and an index name -> [offset, shape] (in floats)."""
    index, parts, offset = {}, [], 0
    for name, array in tensors.items():
        values = np.ascontiguousarray(array, dtype="<f4")
        index[name] = [offset, list(values.shape)]
        parts.append(values.tobytes())
        offset += values.size
    return {"tensors": index, "blob": base64.b64encode(b"".join(parts)).decode("ascii")}


def model_payload(loaded: LoadedModel, grids: set[tuple[int, int]], name: str, built: bool = False
                  ) -> dict[str, Any]:
    """One model as the page reads it: the config fields its forward pass uses, its labels, its weights (state
    dict names; the position embedding as the model computes it for each grid, `pos_embed@GHxGW`) and, per grid,
    the position-embedding similarity of the patches (analysis.pe, as the app draws it). `built`: from a preset
    (untrained, seeded), which the page says."""
    cfg, model = loaded.config, loaded.model
    problems = unsupported(cfg)
    if problems:
        raise LessonError(f"the model {name!r}: the web page cannot run {'; '.join(problems)}")
    check_size(cfg, f"the model {name!r}")
    tensors = {key: value.detach().float().cpu().numpy() for key, value in model.state_dict().items()
               if value.is_floating_point() and not key.startswith("pos_embed")}
    tensors["mask_token"] = model.mask_token.detach().float().cpu().numpy().reshape(-1)
    similarity, notes = {}, {}
    with torch.no_grad():
        for grid in sorted(grids):
            pe = model.position_embedding(grid)
            if pe is not None:
                tensors[f"pos_embed@{grid[0]}x{grid[1]}"] = pe.float().cpu().numpy()
            pe_sim = pe_similarity(model, grid)
            key = f"{grid[0]}x{grid[1]}"
            notes[key] = pe_sim.note
            if pe_sim.patches is not None:
                similarity[key] = np.round(pe_sim.patches.reshape(-1).astype(np.float64), 4).tolist()
    bn_eps = next((m.eps for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)), 1e-5)
    pre = loaded.preprocessing
    config = {
        "embed_dim": cfg.embed_dim, "num_heads": cfg.num_heads, "depth": cfg.depth, "mlp_ratio": cfg.mlp_ratio,
        "class_attn_depth": cfg.class_attn_depth, "class_attn_mlp_ratio": cfg.class_attn_mlp_ratio,
        "patch_size": cfg.patch_size, "in_chans": cfg.in_chans, "stem": cfg.stem,
        "conv_stem": [list(step) for step in cfg.conv_stem_plan()] if cfg.stem == "conv" else [],
        "bn_eps": bn_eps, "prefix_names": list(cfg.prefix_names), "pool": cfg.pool, "fc_norm": cfg.fc_norm,
        "pooled_dim": cfg.embed_dim, "num_classes": cfg.num_classes, "dist_head": bool(cfg.distilled and
                                                                                       cfg.dist_head),
        "layer_norm_eps": cfg.layer_norm_eps, "mlp": cfg.mlp, "talking_heads": cfg.talking_heads,
        "pre_norm": cfg.pre_norm, "has_pos_embed": cfg.pos_embed != "none", "pos_embed": cfg.pos_embed,
        "layer_scale": cfg.layer_scale_init is not None, "mean": list(pre.mean), "std": list(pre.std),
    }
    labels = [loaded.label(i) for i in range(cfg.num_classes)]
    return {"name": name, "built": built, "config": config, "labels": labels, "pe_similarity": similarity,
            "pe_notes": notes, "parameters": sum(p.numel() for p in model.parameters()), **_tensor_blob(tensors)}


def model_name(lesson: Lesson, model: Model) -> str:
    """A model as the page names it: the lesson's own name for it, else its source's last part or its preset."""
    for name, source in lesson.models.items():
        if model.source == source:
            return name
    if model.source is not None:
        return Path(model.source).name or model.source
    options = ", ".join(f"{k}={v}" for k, v in sorted(model.options.items()))
    return f"preset:{model.preset}" + (f" ({options})" if options else "")


def materialize(model: Model, seed: int) -> LoadedModel:
    """A step's model on the CPU: loaded from its source, or built from its preset with `seed` (deterministic)."""
    if model.source is not None:
        from ..checkpoints import load

        return load(model.source, device="cpu", dtype="float32")
    from .build import build_loaded

    check_size(model.config(), f"preset:{model.preset}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build_loaded(model.config(), device="cpu")


def open_step_image(name: str) -> Image.Image:
    """"sample:NAME" (a bundled sample) or an image path, as the app's image panel opens them."""
    if name.startswith("sample:"):
        paths = [p for p in sample_images() if p.stem == name.removeprefix("sample:")]
        if not paths:
            raise LessonError(f"no bundled sample {name.removeprefix('sample:')!r}")
        name = str(paths[0])
    return open_image(name)


def page_data(lesson: Lesson, seed: int = 0,
              loaded_for: Callable[[Model], LoadedModel] | None = None) -> tuple[dict[str, Any], list[StepState],
                                                                                dict[str, LoadedModel]]:
    """The page's data (lesson, models, images, steps), each step's resolved state and the models by key."""
    models: dict[str, LoadedModel] = {}
    named: dict[str, Model] = {}  # by key, in the order the lesson first uses them

    def get(model: Model) -> LoadedModel:
        if model.key not in models:
            models[model.key] = (loaded_for or (lambda m: materialize(m, seed)))(model)
            named[model.key] = model
        return models[model.key]

    images: dict[str, Image.Image] = {}

    def picture(name: str) -> Image.Image:
        if name not in images:
            images[name] = open_step_image(name)
        return images[name]

    states = lesson_states(lesson, get, picture)
    for step in lesson.steps:  # a model only compared is materialized too
        if step.compare is not None:
            get(step.compare)
    keys = list(models)
    names: list[str] = []
    for key in keys:
        name = model_name(lesson, named[key])
        names.append(name if name not in names else f"{name} ({len(names) + 1})")
    grids: dict[str, set[tuple[int, int]]] = {key: set() for key in keys}
    pixels: dict[str, dict[str, Any]] = {}
    steps = []
    for step, state in zip(lesson.steps, states, strict=True):
        assert state.model is not None and state.image is not None  # lesson_states: every step names both
        used = [state.model] + ([state.compare] if state.compare is not None else [])
        image_ids = []
        for model in used:
            loaded = get(model)
            grid = loaded.model.check_image_size(*state.size)
            grids[model.key].add(grid)
            image_id = f"{keys.index(model.key)}:{state.image}:{state.size[0]}x{state.size[1]}"
            if image_id not in pixels:
                values = loaded.preprocessing.with_size(state.size)(picture(state.image))[0]  # (3, H, W)
                pixels[image_id] = {"height": state.size[0], "width": state.size[1],
                                    **_tensor_blob({"pixels": values.float().numpy()})}
            image_ids.append(image_id)
        gw = state.mask.shape[1]
        steps.append({
            "title": step.title, "caption": step.caption, "figure": step.figure, "view": step.view,
            "input": step.input_mode,
            "model": keys.index(state.model.key), "image": image_ids[0],
            "compare": keys.index(state.compare.key) if state.compare is not None else None,
            "compare_image": image_ids[1] if state.compare is not None else None,
            "mask": [int(i) for i in np.flatnonzero(state.mask.reshape(-1))],
            "off": [[int(layer), int(head)] for layer, head in np.argwhere(state.head_mask < 1)],
            "mode": state.mode, "layer": state.layer, "head": state.head,
            "heads": list(state.heads) if state.heads else None,
            "query": None if state.query is None else int(state.query[0] * gw + state.query[1]),
        })
    payloads = [model_payload(models[key], grids[key], name, named[key].preset is not None)
                for key, name in zip(keys, names, strict=True)]
    size = sum(len(p["blob"]) for p in payloads) * 3 // 4
    if size > MAX_PAGE_BYTES:
        raise LessonError(f"{lesson.path}: the models of this lesson hold {size / 2**20:,.1f} MiB of weights; a page "
                          f"holds at most {MAX_PAGE_BYTES / 2**20:,.0f} MiB")
    data = {"title": lesson.title, "seed": seed, "top_k": TOP_K, "models": payloads, "images": pixels,
            "steps": steps}
    return data, states, models


def script_json(value: Any) -> str:
    """JSON that is safe inside a <script> element: no '<', '>' or '&' (a caption holding '</script>' or '<!--'
    cannot end or change the element), no line separators."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                         ("\u2029", "\\u2029")):
        text = text.replace(char, escape)
    return text


def render_page(data: dict[str, Any]) -> str:
    """The HTML of the page: the template with its style, scripts and data inline."""
    template = (WEB / "page.html").read_text(encoding="utf-8")
    parts = {name: (WEB / name).read_text(encoding="utf-8") for name in ("page.css", "forward.js", "page.js")}
    for name, text in parts.items():
        if "</" in text:  # our own files: a closing tag would end the element early
            raise AssertionError(f"{name} holds '</'")
    return (template.replace("{{title}}", html.escape(data["title"]))
            .replace("/*{{page.css}}*/", parts["page.css"])
            .replace("/*{{forward.js}}*/", parts["forward.js"])
            .replace("/*{{page.js}}*/", parts["page.js"])
            .replace("{{data}}", script_json(data)))


def export_lesson(lesson: str | Path | Lesson, out: str | Path, *, seed: int = 0) -> Exported:
    """Write `lesson` (a file or a read Lesson) as one self-contained HTML file at `out`."""
    read = lesson if isinstance(lesson, Lesson) else read_lesson(lesson)
    data, _, _ = page_data(read, seed)
    text = render_page(data)
    out = Path(out)
    out.write_text(text, encoding="utf-8")
    return Exported(out, len(text.encode("utf-8")), tuple(m["name"] for m in data["models"]), len(data["steps"]),
                    seed)
