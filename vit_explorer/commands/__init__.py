"""The CLI's headless commands as records (the one table `vit-explorer` reads): each command's name, its help line,
the module of this package that holds its `add_arguments(parser, name)` and `run(args[, render])`, and whether it
draws figures (its `run` then takes the app's renderer, which the CLI imports only for it). Importing this package
is cheap: a command's module is imported when it runs."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

Render = Callable[[Any, Path, tuple[int, int]], Any]  # (figure, PNG path, size): the app's compositions draw it


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    module: str  # vit_explorer.commands.<module>
    draws: bool = False  # writes figures: run(args, render)
    model_flags: bool = True  # takes the model options checked before anything loads (--device, --resolution, ...)

    def load(self) -> ModuleType:
        return importlib.import_module(f"{__name__}.{self.module}")


COMMANDS: dict[str, Command] = {c.name: c for c in (
    Command("predict", "classify an image and print the top-k classes", "model"),
    Command("inspect", "write a report (PNG/CSV/JSON) of a checkpoint's learned structure", "model", draws=True),
    Command("train", "train a model (also under torchrun for several GPUs)", "train", model_flags=False),
    Command("convert", "write a checkpoint in the native or the Hugging Face format", "model"),
    Command("explain", "relevance maps of an image, each with its faithfulness", "explain", draws=True),
    Command("components", "the target logit as the sum of the embedding's, each head's and each MLP's parts "
            "(direct logit attribution)", "components"),
    Command("patch", "patch a clean run's activations into a corrupted run, swept over layers x positions (or "
            "layers x heads)", "components"),
    Command("embed", "write every image's features per token state (embeddings.npz, images.csv, projector figures)",
            "dataset", draws=True),
    Command("probe", "k-NN and linear probe accuracy per token state on a dataset (probe.csv, figures)", "dataset",
            draws=True),
    Command("cka", "CKA between the token states of a model, or of two models, on a dataset (cka.csv, heatmap)",
            "dataset", draws=True),
    Command("registers", "high-norm (outlier) tokens per state over a dataset, the MLP neurons that write them, "
            "attention entropy", "registers", draws=True),
    Command("sae", "train a sparse autoencoder on one token state (weights, metrics, features, curves)", "sae",
            draws=True),
    Command("export-lesson", "write a lesson as one web page that runs its models in the browser, offline", "lesson"),
)}
