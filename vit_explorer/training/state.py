"""training_state.pt: what --resume continues from, read as hostile until checked.

`read_state` loads it with `torch.load(weights_only=True)` (tensors, numbers, strings and containers
only; nothing runs) and checks every field's type and range into a typed `TrainingState`; the
`check_*` functions compare the saved weights, optimizer and random states with the rebuilt run
before they are loaded. Every error is one line that names the file and the field.
"""

from __future__ import annotations

import math
import pickle
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..checkpoints.errors import CheckpointError
from ..checkpoints.native import CONFIG_NAME, check_state_dict, read_json
from ..data.datasets import DataError, available_memory, check_spec, human_bytes
from ..errors import UserError
from ..models import ViTConfig
from .recipe import MAX_STEPS, Recipe, RecipeError

STATE_NAME = "training_state.pt"
MAX_DESCRIPTION_BYTES = 64 * 2**20  # vit_explorer.json holds a config, labels and a loss history
# optimizer settings that change the maths; a saved state must agree with the run's (the rest follow the machine)
OPTIMIZER_MATHS = ("weight_decay", "betas", "eps", "amsgrad", "maximize", "decoupled_weight_decay")


class StateError(UserError, ValueError):
    """A training state (or its run folder) that cannot be resumed; the message names the file and field."""


@dataclass
class TrainingState:
    """A checked training_state.pt."""

    path: Path
    config: ViTConfig
    recipe: Recipe
    data: dict[str, Any]  # load_data's keyword arguments
    step: int
    elapsed: float  # seconds of training so far
    model: dict[str, torch.Tensor]
    optimizer: dict[str, Any]  # AdamW's state_dict (checked against the run by check_optimizer)
    rng: dict[str, torch.Tensor]  # "torch" (the CPU generator), "generator" (crops and masks), maybe "cuda"
    history: list[list[float]]  # [step, loss, accuracy] of every Step event
    mpp_head: dict[str, torch.Tensor] | None
    teacher: dict[str, torch.Tensor] | None  # the built-in CNN teacher's weights

    def fail(self, field: str, problem: str) -> StateError:
        return StateError(f"{self.path}: field '{field}' {problem}")


def read_state(out: Path) -> TrainingState:
    """The checked training state saved in `out`, or a StateError naming the file and the field."""
    path = Path(out) / STATE_NAME
    if not path.exists():
        raise StateError(f"{path}: no training state to resume from (was the run started with this --out?)")
    if not path.is_file():
        raise StateError(f"{path}: not a regular file")
    available = available_memory()
    if available is not None and path.stat().st_size > available:
        raise StateError(f"{path}: {human_bytes(path.stat().st_size)}, more than the {human_bytes(available)} of "
                         "memory available to read it")
    return _parse(_load(path), path)


def _load(path: Path) -> Any:
    try:
        with warnings.catch_warnings():  # torch warns about pickle protocols on stderr; the error says enough
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        # torch's message advises retrying with weights_only=False, i.e. running the file's code: never pass it on
        named = re.search(r"GLOBAL (\S+)", str(error))
        opcode = re.search(r"Unsupported operand (\d+)", str(error))
        detail = (f"it names {named.group(1)}, which a training state never holds" if named else
                  f"its pickle uses opcode {opcode.group(1)}, which torch.save never writes" if opcode else
                  "it holds objects other than tensors, numbers, strings and containers")
        raise StateError(f"{path}: not a training state vit-explorer wrote ({detail}); nothing in it was run") \
            from None
    except Exception as error:  # noqa: BLE001 - a truncated or corrupt archive raises any of many types
        first = str(error).strip().split(". ")[0].splitlines()[0][:200] if str(error).strip() else ""
        raise StateError(f"{path}: cannot read the training state, the file is truncated or corrupt "
                         f"({type(error).__name__}{': ' + first if first else ''})") from None


def _parse(raw: Any, path: Path) -> TrainingState:
    if not isinstance(raw, dict):
        raise StateError(f"{path}: not a training state (it holds {type(raw).__name__}, not a dict of named fields)")
    missing = [k for k in ("config", "recipe", "data", "step", "elapsed", "model", "optimizer", "rng") if k not in raw]
    if missing:
        raise StateError(f"{path}: field '{missing[0]}' is missing (a training state has config, recipe, data, "
                         "step, elapsed, model, optimizer and rng)")

    def fail(field: str, problem: str) -> StateError:
        return StateError(f"{path}: field '{field}' {problem}")

    config_dict = _dict(raw["config"], "config", fail)
    try:
        config = ViTConfig.from_dict(config_dict)
    except (ValueError, TypeError, ArithmeticError) as error:  # ConfigError, or a value of the wrong type
        raise fail("config", f"is not a valid model config: {error}") from None
    try:
        recipe = Recipe.from_dict(_dict(raw["recipe"], "recipe", fail))
    except RecipeError as error:
        raise fail(f"recipe.{error.field}", error.problem) from None
    try:
        data = check_spec(raw["data"])
    except DataError as error:
        raise fail(f"data.{error.field}" if error.field != "data" else "data", error.problem) from None
    if list(data["image_size"]) != list(config.image_size):
        raise fail("data.image_size", f"is {list(data['image_size'])} but the model in field 'config' takes "
                                      f"{list(config.image_size)}")
    step, elapsed = raw["step"], raw["elapsed"]
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEPS:
        raise fail("step", f"must be a whole number from 0 to {MAX_STEPS}, got {step!r}")
    if isinstance(elapsed, bool) or not isinstance(elapsed, (int, float)) or not 0 <= elapsed < math.inf:
        raise fail("elapsed", f"must be a finite number of seconds >= 0, got {elapsed!r}")
    return TrainingState(path, config, recipe, data, step, float(elapsed), _tensors(raw["model"], "model", fail),
                         _optimizer(raw["optimizer"], fail), _rng(raw["rng"], fail),
                         _history(raw.get("history", []), fail),
                         _tensors(raw["mpp_head"], "mpp_head", fail) if "mpp_head" in raw else None,
                         _tensors(raw["teacher"], "teacher", fail) if "teacher" in raw else None)


def _dict(value: Any, field: str, fail: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise fail(field, f"must be a dict with names for keys, got {type(value).__name__}")
    return value


def _tensors(value: Any, field: str, fail: Any) -> dict[str, torch.Tensor]:
    if not _dict(value, field, fail) or not all(isinstance(v, torch.Tensor) for v in value.values()):
        raise fail(field, "must map parameter names to tensors")
    return value


def _optimizer(value: Any, fail: Any) -> dict[str, Any]:
    groups, state = _dict(value, "optimizer", fail).get("param_groups"), value.get("state")
    if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
        raise fail("optimizer.param_groups", "must be a list of dicts")
    if not isinstance(state, dict) or not all(isinstance(v, dict) for v in state.values()):
        raise fail("optimizer.state", "must map parameter numbers to dicts")
    return value


def _rng(value: Any, fail: Any) -> dict[str, torch.Tensor]:
    for name in ("torch", "generator"):
        if name not in _dict(value, "rng", fail):
            raise fail(f"rng.{name}", "is missing")
    for name, state in value.items():
        if name != "cuda":  # a CUDA state is checked where it is used, on a GPU
            try:
                torch.Generator().set_state(state)  # a scratch generator: the check changes nothing
            except (RuntimeError, TypeError):
                size = f"{state.numel()} {state.dtype}" if isinstance(state, torch.Tensor) else type(state).__name__
                raise fail(f"rng.{name}", f"is not a random-number state (got {size}; expected "
                                          f"{torch.get_rng_state().numel()} uint8 of a valid mt19937 state)") from None
    return value


def _history(value: Any, fail: Any) -> list[list[float]]:
    def row_ok(row: Any) -> bool:
        return isinstance(row, (list, tuple)) and len(row) == 3 and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in row)

    if not isinstance(value, list) or len(value) > MAX_STEPS or not all(row_ok(row) for row in value):
        raise fail("history", "must be a list of [step, loss, accuracy] rows of finite numbers")
    return [list(row) for row in value]


def check_module(state: TrainingState, field: str, module: nn.Module) -> dict[str, torch.Tensor]:
    """The saved tensors of `field`, which must have the module's names and shapes."""
    tensors: dict[str, torch.Tensor] | None = getattr(state, field)
    if tensors is None:
        raise state.fail(field, "is missing (this run needs it)")
    try:
        check_state_dict(module, tensors, f"{state.path}: field '{field}'")
    except CheckpointError as error:
        raise StateError(str(error)) from None
    return tensors


def check_optimizer(state: TrainingState, optimizer: torch.optim.Optimizer) -> None:
    """The saved AdamW state must cover this run's parameters, with their shapes and the recipe's settings."""
    groups, ours = state.optimizer["param_groups"], optimizer.param_groups
    if len(groups) != len(ours):
        raise state.fail("optimizer.param_groups", f"has {len(groups)} groups; this run has {len(ours)}")
    params: dict[int, torch.Tensor] = {}
    for i, (group, our) in enumerate(zip(groups, ours, strict=True)):
        ids = group.get("params")
        if not isinstance(ids, list) or len(ids) != len(our["params"]) or not all(type(k) is int for k in ids):
            raise state.fail(f"optimizer.param_groups[{i}].params", f"must list {len(our['params'])} parameter "
                                                                    "numbers, as this model has")
        params.update(zip(ids, our["params"], strict=True))
        for key in OPTIMIZER_MATHS:
            saved, wanted = group.get(key, our.get(key)), our.get(key)
            if (list(saved) if isinstance(saved, tuple) else saved) != (
                    list(wanted) if isinstance(wanted, tuple) else wanted):
                raise state.fail(f"optimizer.param_groups[{i}].{key}", f"is {saved!r}; the recipe gives {wanted!r}")
    for key, entry in state.optimizer["state"].items():
        if key not in params:
            raise state.fail("optimizer.state", f"has an entry for parameter {key!r}, which no group lists")
        for name in ("exp_avg", "exp_avg_sq", *(("max_exp_avg_sq",) if groups[0].get("amsgrad") else ())):
            moment = entry.get(name)
            if not (isinstance(moment, torch.Tensor) and moment.is_floating_point()
                    and moment.shape == params[key].shape):
                raise state.fail(f"optimizer.state[{key}].{name}", f"must be a float tensor of shape "
                                                                   f"{tuple(params[key].shape)}")
        count = entry.get("step")
        if not (isinstance(count, torch.Tensor) and count.numel() == 1 and count.is_floating_point()
                and 0 <= count.item() <= MAX_STEPS):
            raise state.fail(f"optimizer.state[{key}].step", f"must be a one-number float tensor counting steps, "
                                                             f"got {count!r}")


def check_description(state: TrainingState) -> None:
    """The run's vit_explorer.json, if there is one, must describe the model the training state holds
    (a folder this trainer wrote always agrees: see checkpoint.py)."""
    path = state.path.parent / CONFIG_NAME
    if not path.exists():
        return
    if not path.is_file():
        raise StateError(f"{path}: not a regular file; remove it to resume from {STATE_NAME}")
    if path.stat().st_size > MAX_DESCRIPTION_BYTES:
        raise StateError(f"{path}: larger than a description can be ({human_bytes(MAX_DESCRIPTION_BYTES)}); remove "
                         f"it to resume from {STATE_NAME}")
    try:
        meta = read_json(path)
        if not isinstance(meta.get("config"), dict):
            raise ValueError("missing, or not a dict")
        config = ViTConfig.from_dict(meta["config"])
    except (CheckpointError, ValueError, TypeError, ArithmeticError, RecursionError) as error:
        problem = str(error).removeprefix(f"{path}: ")
        raise StateError(f"{path}: field 'config' cannot be read ({problem}); remove the file to resume from "
                         f"{STATE_NAME}") from None
    if config != state.config:
        ours, theirs = config.to_dict(), state.config.to_dict()
        key = next((k for k in ours if ours[k] != theirs.get(k)), "")
        raise StateError(f"{path}: field 'config.{key}' is {ours[key]!r} but {STATE_NAME} has {theirs.get(key)!r}; "
                         f"the two describe different models: remove {path.name} to resume from {STATE_NAME}")
