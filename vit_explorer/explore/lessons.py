"""Lessons: a guided sequence of steps through what the app shows, each putting the app in a state (model,
image, view, masks, layer) and saying in a caption what to look at. Lessons are JSON files a teacher can
write; `read_lesson` validates one completely before the first step runs, with errors naming the file,
the step and the field.

A lesson file:

    {"format": "vit-explorer-lesson", "version": 1, "title": "...",
     "models": {"name": "bundled:classroom-patchify" | "path/relative/to/the/lesson" | "hub/id", ...},
     "steps": [{"title": "...", "caption": "...", "figure": "ViT paper, Fig. 7",
                "model": "name" | "preset:classroom" (built with random weights) , "options": {config fields},
                "image": "sample:circle" | "path", "size": [H, W] | "native", "view": "Attention",
                "attention": {"mode": "one head", "layer": 0, "head": 0, "heads": [0, 3]},
                "query": [row, col] | null,
                "mask": "none" | {"random": 0.3, "seed": 0} | [[row, col], ...], "heads_off": [[layer, head], ...],
                "compare": "name", "panels": ["similarity"], "input": "mask" | "query" | "draw", "hover": true,
                "expand": ["blocks", "blocks.0"], "target": "star" | 3}, ...]}

`panels` names the parts of a multi-panel view the step shows (PANELS; default all of them), `input` what a
click on the image does (default "mask"), `hover` shows the patch readout under the image in presentation
mode, `expand` opens the Parameters tree down to a row, and `target` is the class (label or index) the Explain
view explains.

Every field of a step but title and caption is optional: what a step does not set stays as it was, except
what is on screen (view panels, the heads shown, input mode, hover readout), which each step sets.
"""

from __future__ import annotations

import json
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..checkpoints.errors import CheckpointError
from ..checkpoints.files import parse_json, read_bounded
from ..errors import UserError
from ..models import PRESETS, ConfigError, ViTConfig
from ..paths import BUNDLED, LESSONS
from .attention import MODES
from .views import VIEWS as VIEW_TABLE

FORMAT, VERSION = "vit-explorer-lesson", 1
# the app's views by title, in its tab order, and the panels a step can show alone (explore.views's table)
VIEWS = tuple(v.title for v in VIEW_TABLE.values())
PANELS = {v.title: v.panels for v in VIEW_TABLE.values() if v.panels}
MAIN_PANELS = {v.title: v.main_panels for v in VIEW_TABLE.values() if v.main_panels}
INPUT_MODES = ("mask", "query", "draw")  # what a click on the image does
MAX_BYTES = 1_000_000  # a lesson is text: a larger file is not one
MAX_STEPS = 200
MAX_MODELS = 100  # named models of one lesson
MAX_TEXT = 2000  # characters of a caption
MAX_QUOTE = 60  # characters of a lesson's own text quoted in a message (a title may be 2000; a bad field any length)
MAX_PATH_QUOTE = 300  # characters of a path quoted in a message
MAX_PATH = 4096  # characters of a lesson file's path (Linux's PATH_MAX)


class LessonError(UserError, ValueError):
    """A lesson file that cannot run; the message names the file, the step and the field."""


@dataclass(frozen=True)
class Model:
    """Where a step's model comes from: a source vit-explorer loads, or a preset built with random weights."""

    source: str | None = None
    preset: str | None = None
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """The same model in two steps has the same key (it is loaded or built once)."""
        return json.dumps([self.source, self.preset, self.options], sort_keys=True)

    def config(self) -> ViTConfig:
        assert self.preset is not None
        return ViTConfig(**{**PRESETS[self.preset], **self.options})


@dataclass(frozen=True)
class Step:
    title: str
    caption: str
    figure: str = ""  # the figure of the articles or papers this step shows
    model: Model | None = None
    image: str | None = None  # a file, or "sample:NAME" for a bundled sample
    size: tuple[int, int] | str | None = None  # (H, W), "native", or None: unchanged
    view: str | None = None
    mode: str | None = None  # the Attention view's mode
    layer: int | None = None
    head: int | None = None
    heads: tuple[int, ...] | None = None  # the heads "all heads" shows side by side (None: all); set by every step
    query: tuple[int, int] | None | str = "keep"  # (row, col), None for the default query, "keep"
    mask: str | float | tuple[tuple[int, int], ...] | None = None  # "none", a random share, patches, None: unchanged
    mask_seed: int = 0
    heads_off: tuple[tuple[int, int], ...] | None = None  # None: unchanged; () switches every head on
    compare: Model | None = None  # a second model side by side
    panels: tuple[str, ...] | None = None  # the view's panels shown (None: all)
    input_mode: str = "mask"
    hover: bool = False
    expand: tuple[str, ...] = ()  # a row of the Parameters tree to open, by its names from the stage down
    target: int | str | None = None  # the Explain view's class, by index or label (None: unchanged)


@dataclass(frozen=True)
class Lesson:
    title: str
    steps: tuple[Step, ...]
    path: Path
    models: dict[str, str] = field(default_factory=dict)  # the lesson's names of its models -> their sources


def bundled_lessons() -> list[Path]:
    """The lessons shipped in resources/lessons, by name."""
    return sorted(LESSONS.glob("*.json")) if LESSONS.is_dir() else []


def excerpt(text: str, limit: int = MAX_QUOTE) -> str:
    """The first `limit` characters of `text` (and its length, when cut): a message quotes an excerpt of a file's
    text, never all of it (an unbreakable 150,000-character line in a label costs gigabytes)."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def quoted(value: Any, limit: int = MAX_QUOTE) -> str:
    """A value from a lesson as a message quotes it: its repr, cut to about `limit` characters."""
    if isinstance(value, str):
        return repr(value[:limit]) + (f"… ({len(value):,} characters)" if len(value) > limit else "")
    if isinstance(value, int) and value.bit_length() > 3 * limit:  # repr of a 5,000-digit integer raises ValueError
        return f"an integer of about {value.bit_length() * 0.30103:,.0f} digits"
    return excerpt(repr(value), limit)


def _where(path: str | Path) -> str:
    """A path as messages name it: NUL bytes shown, at most MAX_PATH_QUOTE characters."""
    return excerpt(str(path).replace("\0", "\\0"), MAX_PATH_QUOTE)


def read_lesson(path: str | Path) -> Lesson:
    """Read and validate a lesson file (every step, before any runs). Raises only LessonError."""
    path = Path(path)
    if "\0" in str(path) or len(str(path)) > MAX_PATH:  # os.open would raise ValueError; a message would quote it
        raise LessonError(f"{_where(path)}: not a lesson file name (a NUL byte, or more than {MAX_PATH:,} "
                          "characters); choose the file again")
    try:
        data = parse_json(read_bounded(path, MAX_BYTES, "lesson", LessonError), str(path))
    except CheckpointError as error:  # not UTF-8, not JSON, nested too deep, an integer of 5,000 digits
        raise LessonError(str(error)) from None
    return parse_lesson(data, path)


def parse_lesson(data: Any, path: Path) -> Lesson:
    where = _where(path)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise LessonError(f"{where}: not a vit-explorer lesson (expected an object with \"format\": \"{FORMAT}\")")
    version = data.get("version")
    if type(version) is not int or version != VERSION:  # true and 1.0 equal 1 in Python: not a version number
        raise LessonError(f"{where}: version: {quoted(version)} is not supported (this app reads {VERSION}, a whole "
                          "number)")
    _known(data, {"format", "version", "title", "models", "steps"}, where)
    title = _text(data.get("title"), f"{where}: title")
    models = data.get("models", {})
    if not isinstance(models, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in models.items()):
        raise LessonError(f"{where}: models: expected an object of names and sources (strings)")
    if len(models) > MAX_MODELS:
        raise LessonError(f"{where}: models: {len(models):,} names; a lesson may name at most {MAX_MODELS}")
    named = {name: _source(value, path, f"{where}: models: {quoted(name)}") for name, value in models.items()}
    steps = data.get("steps")
    if not isinstance(steps, list) or not 1 <= len(steps) <= MAX_STEPS:
        raise LessonError(f"{where}: steps: expected a list of 1 to {MAX_STEPS} steps")
    return Lesson(title, tuple(_step(s, i, named, path) for i, s in enumerate(steps)), path, named)


STEP_KEYS = {"title", "caption", "figure", "model", "options", "image", "size", "view", "attention", "query", "mask",
             "heads_off", "compare", "panels", "input", "hover", "expand", "target"}


def _known(data: dict[str, Any], keys: set[str], where: str) -> None:
    unknown = sorted(set(data) - keys)
    if unknown:
        names = ", ".join(quoted(key) for key in unknown[:5])
        if unknown[5:]:
            names += f" and {len(unknown) - 5:,} more"
        raise LessonError(f"{where}: unknown keys {names}; expected {sorted(keys)}")


def _step(raw: Any, index: int, named: dict[str, str], path: Path) -> Step:
    if not isinstance(raw, dict):
        raise LessonError(f"{_where(path)}: step {index + 1}: expected an object")
    title = raw.get("title")
    where = f"{_where(path)}: step {index + 1}" + (f" ({quoted(title)})" if isinstance(title, str) else "")
    _known(raw, STEP_KEYS, where)
    attention = raw.get("attention", {})
    if not isinstance(attention, dict) or set(attention) - {"mode", "layer", "head", "heads"}:
        raise LessonError(f"{where}: attention: expected an object with mode, layer, head and/or heads")
    heads = attention.get("heads")
    if heads is not None and (not isinstance(heads, list) or not 1 <= len(heads) <= 64
                              or any(_count(h, f"{where}: attention.heads") is None for h in heads)):
        raise LessonError(f"{where}: attention.heads: expected a list of 1 to 64 head numbers")
    mode = attention.get("mode")
    if mode is not None and (not isinstance(mode, str) or mode not in MODES):
        raise LessonError(f"{where}: attention.mode: {quoted(mode)} is not one of {MODES}")
    view = raw.get("view")
    if view is not None and (not isinstance(view, str) or view not in VIEWS):
        raise LessonError(f"{where}: view: {quoted(view)} is not one of {VIEWS}")
    mask, seed = _mask(raw.get("mask"), f"{where}: mask")
    input_mode = raw.get("input", "mask")
    if input_mode not in INPUT_MODES:
        raise LessonError(f"{where}: input: {_excerpt(input_mode)} is not one of {INPUT_MODES}")
    hover = raw.get("hover", False)
    if not isinstance(hover, bool):
        raise LessonError(f"{where}: hover: expected true or false")
    return Step(
        title=_text(raw.get("title"), f"{where}: title"),
        caption=_text(raw.get("caption"), f"{where}: caption"),
        figure=_text(raw.get("figure", ""), f"{where}: figure", allow_empty=True),
        model=_model(raw.get("model"), raw.get("options"), named, path, f"{where}: model"),
        image=_image(raw.get("image"), path, f"{where}: image"),
        size=_size(raw.get("size"), f"{where}: size"),
        view=view, mode=mode,
        layer=_count(attention.get("layer"), f"{where}: attention.layer"),
        head=_count(attention.get("head"), f"{where}: attention.head"),
        heads=tuple(heads) if heads is not None else None,
        query=_query(raw.get("query", "keep"), f"{where}: query"),
        mask=mask, mask_seed=seed,
        heads_off=_pairs(raw.get("heads_off"), f"{where}: heads_off"),
        compare=_model(raw.get("compare"), None, named, path, f"{where}: compare"),
        panels=_panels(raw.get("panels"), view, f"{where}: panels"),
        input_mode=input_mode, hover=hover,
        expand=_names(raw.get("expand", []), f"{where}: expand"),
        target=_target(raw.get("target"), f"{where}: target"),
    )


def _target(value: Any, where: str) -> int | str | None:
    """A class by index (a whole number from 0, `_count`'s error otherwise) or by label (text), or None."""
    return _text(value, where) if isinstance(value, str) else _count(value, where)


def _excerpt(value: Any) -> str:
    """A value quoted in a message: its first characters only (a lesson can hold anything)."""
    text = repr(value) if isinstance(value, str | int | float | bool) or value is None else type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def _names(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) > 8 or not all(isinstance(v, str) and 0 < len(v) <= 200
                                                                  for v in value):
        raise LessonError(f"{where}: expected a list of up to 8 names")
    return tuple(value)


def _panels(value: Any, view: str | None, where: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if view not in PANELS:
        raise LessonError(f"{where}: only the views {sorted(PANELS)} have panels (this step's view: {view})")
    names = _names(value, where)
    unknown = [name for name in names if name not in PANELS[view]]
    missing = [name for name in MAIN_PANELS.get(view, ()) if name not in names]
    if unknown or missing or not names:
        raise LessonError(f"{where}: {view} has the panels {list(PANELS[view])}"
                          + (f", always {list(MAIN_PANELS[view])}" if view in MAIN_PANELS else "")
                          + f"; not {[_excerpt(n) for n in unknown] or names}")
    return names


def _text(value: Any, where: str, allow_empty: bool = False) -> str:
    if not isinstance(value, str) or (not value.strip() and not allow_empty):
        raise LessonError(f"{where}: expected text")
    if len(value) > MAX_TEXT:
        raise LessonError(f"{where}: {len(value):,} characters; at most {MAX_TEXT} fit on a slide")
    return value


def _count(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if type(value) is not int or not 0 <= value < 10_000:
        raise LessonError(f"{where}: expected a whole number from 0 to 9999, got {quoted(value)}")
    return value


def _source(value: str, path: Path, where: str) -> str:
    """A bundled model ("bundled:NAME"), a path relative to the lesson, or a hub id (left as it is)."""
    if value.startswith("bundled:"):
        name = value.removeprefix("bundled:")
        if name not in BUNDLED:
            raise LessonError(f"{where}: no bundled model {quoted(name)}; bundled: {sorted(BUNDLED)}")
        if not (BUNDLED[name] / "vit_explorer.json").is_file():
            raise LessonError(f"{where}: the bundled model {name!r} is missing from {BUNDLED[name]} (an incomplete "
                              "installation: reinstall vit-explorer, or see resources/README.md to train it)")
        return str(BUNDLED[name])
    local, _ = _local(path, value, where)
    return str(local) if local is not None else value


def _local(path: Path, value: str, where: str) -> tuple[Path | None, str]:
    """`value` as a path relative to the lesson, and what it is: (None, "missing") when nothing is there."""
    if "\0" in value:
        raise LessonError(f"{where}: {quoted(value)}: a path cannot hold a NUL byte")
    local = (path.parent / value)
    try:
        local = local.resolve()
        mode = local.stat().st_mode
    except FileNotFoundError:
        return None, "missing"
    except OSError as error:  # a name too long, no permission
        raise LessonError(f"{where}: {quoted(value)}: cannot be opened ({error.strerror})") from None
    except RuntimeError:  # resolve() in a loop of links
        raise LessonError(f"{where}: {quoted(value)}: a loop of symbolic links") from None
    kind = "a regular file" if stat.S_ISREG(mode) else "a folder" if stat.S_ISDIR(mode) else "not a regular file"
    return local, kind


def _model(value: Any, options: Any, named: dict[str, str], path: Path, where: str) -> Model | None:
    if value is None:
        if options is not None:
            raise LessonError(f"{where}: options need a model (\"preset:NAME\")")
        return None
    if not isinstance(value, str):
        raise LessonError(f"{where}: expected a model name, \"bundled:NAME\", \"preset:NAME\" or a source, got "
                          f"{quoted(value)}")
    if value.startswith("preset:"):
        preset = value.removeprefix("preset:")
        if preset not in PRESETS:
            raise LessonError(f"{where}: no preset {quoted(preset)}; presets: {sorted(PRESETS)}")
        if options is not None and not isinstance(options, dict):
            raise LessonError(f"{where}: options: expected an object of model config fields")
        model = Model(preset=preset, options=dict(options or {}))
        try:
            model.config()
        except (ConfigError, TypeError, ValueError, OverflowError) as error:  # TypeError: an unknown field
            raise LessonError(f"{where}: options: {excerpt(str(error), 300)}") from None
        return model
    if options is not None:
        raise LessonError(f"{where}: options apply to a preset (\"preset:NAME\") only")
    return Model(source=named.get(value) or _source(value, path, where))


def _image(value: Any, path: Path, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise LessonError(f"{where}: expected \"sample:NAME\" or an image path")
    if value.startswith("sample:"):
        from ..data.images import sample_images

        names = [p.stem for p in sample_images()]
        if value.removeprefix("sample:") not in names:
            raise LessonError(f"{where}: no bundled sample {quoted(value.removeprefix('sample:'))}; samples: {names}")
        return value
    local, kind = _local(path, value, where)
    if local is None:
        raise LessonError(f"{where}: {_where(path.parent / value)}: no such image file")
    if kind != "a regular file":
        raise LessonError(f"{where}: {_where(local)}: {kind}, not an image file")
    return str(local)


def _size(value: Any, where: str) -> tuple[int, int] | str | None:
    if value is None:
        return None
    if value == "native":
        return "native"
    if (isinstance(value, list) and len(value) == 2 and all(type(v) is int and 1 <= v <= 4096 for v in value)):
        return (value[0], value[1])
    raise LessonError(f"{where}: expected [height, width] in pixels (1 to 4096) or \"native\"")


def _query(value: Any, where: str) -> tuple[int, int] | None | str:
    if value is None:
        return None
    if value == "keep":
        return "keep"
    pair = _pairs([value], where)
    assert pair is not None
    return pair[0]


def _pairs(value: Any, where: str) -> tuple[tuple[int, int], ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(
            isinstance(p, list) and len(p) == 2 and all(type(v) is int and 0 <= v < 10_000 for v in p) for p in value):
        raise LessonError(f"{where}: expected a list of [row, col] (or [layer, head]) pairs of whole numbers")
    return tuple((p[0], p[1]) for p in value)


def _mask(value: Any, where: str) -> tuple[str | float | tuple[tuple[int, int], ...] | None, int]:
    if value is None or value == "none":
        return value, 0
    if isinstance(value, dict) and set(value) <= {"random", "seed"} and "random" in value:
        share, seed = value["random"], value.get("seed", 0)
        if not (isinstance(share, (int, float)) and not isinstance(share, bool) and 0 <= share <= 1):
            raise LessonError(f"{where}: random: expected a share of the patches from 0 to 1")
        if type(seed) is not int:
            raise LessonError(f"{where}: seed: expected a whole number")
        return float(share), seed
    pairs = _pairs(value, where)
    return pairs, 0
