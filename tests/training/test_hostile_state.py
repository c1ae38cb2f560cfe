"""`vit-explorer train --resume` of a folder whose training_state.pt or vit_explorer.json was tampered
with: each is refused with one line naming the file and the field, exit code 2, no traceback,
nothing run (malicious pickles), the folder left as it was, and never PyTorch's advice to load the
file the unsafe way."""

import io
import json
import os
import pickle
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from vit_explorer.checkpoints.native import CONFIG_NAME
from vit_explorer.training.state import STATE_NAME

from .conftest import TINY, assert_refused, run_train, snapshot

Mutation = Callable[[dict[str, Any]], Any]


@pytest.fixture(scope="session")
def saved_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished two-step run: the folder every case below tampers with a copy of."""
    from vit_explorer.cli import main

    out = tmp_path_factory.mktemp("saved") / "run"
    assert main(["train", *TINY, "--steps", "2", "--out", str(out)]) == 0
    return out


def _set(path: str, value: object) -> Mutation:
    """Set state[a][b]... = value (the path's parts separated by '/'); the mutated state."""
    def mutate(state: dict[str, Any]) -> Any:
        *parents, last = path.split("/")
        node = state
        for part in parents:
            node = node[int(part) if isinstance(node, list) else part]
        node[int(last) if isinstance(node, list) else last] = value
        return state
    return mutate


def _drop(path: str) -> Mutation:
    def mutate(state: dict[str, Any]) -> Any:
        *parents, last = path.split("/")
        node = state
        for part in parents:
            node = node[part]
        del node[int(last) if isinstance(node, list) else last]
        return state
    return mutate


def _first_param_state(change: Callable[[dict[str, Any]], None]) -> Mutation:
    def mutate(state: dict[str, Any]) -> Any:
        change(next(iter(state["optimizer"]["state"].values())))
        return state
    return mutate


def _weight(change: Callable[[dict[str, torch.Tensor]], None]) -> Mutation:
    def mutate(state: dict[str, Any]) -> Any:
        change(state["model"])
        return state
    return mutate


# (id, mutation of the loaded state, fragments of the error line besides the file name)
STATES: list[tuple[str, Mutation, tuple[str, ...]]] = [
    ("a list", lambda s: [s], ("not a training state", "list")),
    ("a tensor", lambda s: torch.zeros(3), ("not a training state", "Tensor")),
    ("None", lambda s: None, ("not a training state",)),
    ("a number", lambda s: 5, ("not a training state", "int")),
    *[(f"no {key}", _drop(key), (f"'{key}'", "missing"))
      for key in ("config", "recipe", "data", "step", "elapsed", "model", "optimizer", "rng")],
    ("config a string", _set("config", "vit-b16"), ("'config'", "dict")),
    ("config unknown key", _set("config/colour", "red"), ("'config'", "colour")),
    ("config depth 0", _set("config/depth", 0), ("'config'",)),
    ("config embed_dim 0", _set("config/embed_dim", 0), ("'config'",)),
    ("config image_size a string", _set("config/image_size", "big"), ("'config'",)),
    ("config wider than the description", _set("config/embed_dim", 128), ("'config.embed_dim'", "different models")),
    ("config wider, no description", _set("config/embed_dim", 128), ("'model'", "mis-shaped")),
    ("recipe a list", _set("recipe", [1]), ("'recipe'", "dict")),
    ("recipe lr NaN", _set("recipe/lr", float("nan")), ("'recipe.lr'", "got nan")),
    ("recipe lr a string", _set("recipe/lr", "fast"), ("'recipe.lr'", "got 'fast'")),
    ("recipe steps negative", _set("recipe/steps", -2), ("'recipe.steps'",)),
    ("recipe steps a float", _set("recipe/steps", 2.5), ("'recipe.steps'",)),
    ("recipe batch 0", _set("recipe/batch_size", 0), ("'recipe.batch_size'",)),
    ("recipe label smoothing 5", _set("recipe/label_smoothing", 5.0), ("'recipe.label_smoothing'",)),
    ("recipe task", _set("recipe/task", "dream"), ("'recipe.task'",)),
    ("recipe save_state a string", _set("recipe/save_state", "yes"), ("'recipe.save_state'",)),
    ("recipe seed huge", _set("recipe/seed", 2**70), ("'recipe.seed'",)),
    ("recipe time budget forever", lambda s: _set("recipe/time_budget", 1e12)(_set("recipe/steps", None)(s)),
     ("'recipe.time_budget'",)),
    ("data a string", _set("data", "shapes"), ("'data'", "dict")),
    ("data without dataset", _drop("data/dataset"), ("'data.dataset'", "missing")),
    ("data dataset a number", _set("data/dataset", 7), ("'data.dataset'",)),
    ("data image size one number", _set("data/image_size", [16]), ("'data.image_size'",)),
    ("data image size 0", _set("data/image_size", [16, 0]), ("'data.image_size'",)),
    ("data train size a billion", _set("data/train_size", 10**9), ("'data.train_size'",)),
    ("data train size negative", _set("data/train_size", -5), ("'data.train_size'",)),
    ("data unknown key", _set("data/workers", 64), ("'data.workers'",)),
    ("data seed a string", _set("data/seed", "0"), ("'data.seed'",)),
    ("data folder that is not there", _set("data/dataset", "/nonexistent/images"), ("'data'", "no such folder")),
    ("data folder that is a file", _set("data/dataset", "/dev/null"), ("'data'", "not a folder")),
    ("step negative", _set("step", -1), ("'step'",)),
    ("step a string", _set("step", "2"), ("'step'",)),
    ("step a float", _set("step", 2.5), ("'step'",)),
    ("step True", _set("step", True), ("'step'",)),
    ("step huge", _set("step", 10**20), ("'step'",)),
    ("elapsed NaN", _set("elapsed", float("nan")), ("'elapsed'",)),
    ("elapsed infinite", _set("elapsed", float("inf")), ("'elapsed'",)),
    ("elapsed negative", _set("elapsed", -3.0), ("'elapsed'",)),
    ("elapsed a string", _set("elapsed", "1s"), ("'elapsed'",)),
    ("model a list", _set("model", [1, 2]), ("'model'",)),
    ("model empty", _set("model", {}), ("'model'",)),
    ("model values not tensors", _weight(lambda m: m.update({k: 1.0 for k in m})), ("'model'", "tensors")),
    ("model missing a weight", _weight(lambda m: m.pop(next(iter(m)))), ("'model'", "missing")),
    ("model extra weight", _weight(lambda m: m.update({"blocks.9.extra": torch.zeros(2)})), ("'model'", "unexpected")),
    ("model weight mis-shaped", _weight(lambda m: m.update({k: torch.zeros(3) for k in list(m)[:1]})),
     ("'model'", "mis-shaped")),
    ("optimizer a list", _set("optimizer", []), ("'optimizer'",)),
    ("optimizer without groups", _drop("optimizer/param_groups"), ("'optimizer.param_groups'",)),
    ("optimizer one group", lambda s: _set("optimizer/param_groups", s["optimizer"]["param_groups"][:1])(s),
     ("'optimizer.param_groups'", "1 groups")),
    ("optimizer group params short", lambda s: _set("optimizer/param_groups/0/params",
                                                    s["optimizer"]["param_groups"][0]["params"][:1])(s),
     ("'optimizer.param_groups[0].params'",)),
    ("optimizer weight decay changed", _set("optimizer/param_groups/0/weight_decay", -5.0),
     ("'optimizer.param_groups[0].weight_decay'", "-5.0")),
    ("optimizer betas changed", _set("optimizer/param_groups/0/betas", (2.0, 0.5)),
     ("'optimizer.param_groups[0].betas'",)),
    ("optimizer eps a string", _set("optimizer/param_groups/1/eps", "tiny"), ("'optimizer.param_groups[1].eps'",)),
    ("optimizer state a list", _set("optimizer/state", [1]), ("'optimizer.state'",)),
    ("optimizer state for no parameter", _set("optimizer/state/999", {}), ("'optimizer.state'", "999")),
    ("optimizer moment mis-shaped", _first_param_state(lambda e: e.update(exp_avg=torch.zeros(7))),
     ("exp_avg'", "shape")),
    ("optimizer moment missing", _first_param_state(lambda e: e.pop("exp_avg_sq")), ("exp_avg_sq'",)),
    ("optimizer step a string", _first_param_state(lambda e: e.update(step="2")), ("step'",)),
    ("optimizer step NaN", _first_param_state(lambda e: e.update(step=torch.tensor(float("nan")))), ("step'",)),
    ("rng a list", _set("rng", [1]), ("'rng'",)),
    ("rng without torch", _drop("rng/torch"), ("'rng.torch'", "missing")),
    ("rng without generator", _drop("rng/generator"), ("'rng.generator'", "missing")),
    ("rng torch too short", _set("rng/torch", torch.zeros(100, dtype=torch.uint8)), ("'rng.torch'", "100")),
    ("rng torch floats", _set("rng/torch", torch.zeros(5056)), ("'rng.torch'",)),
    ("rng generator zeros", _set("rng/generator", torch.zeros(5056, dtype=torch.uint8)), ("'rng.generator'",)),
    ("rng generator a string", _set("rng/generator", "seed"), ("'rng.generator'",)),
    ("history a dict", _set("history", {}), ("'history'",)),
    ("history rows short", _set("history", [[1, 2.0]]), ("'history'",)),
    ("history NaN", _set("history", [[1, float("nan"), 0.5]]), ("'history'",)),
    ("history strings", _set("history", [["1", "2", "3"]]), ("'history'",)),
    ("teacher not tensors", _set("teacher", {"w": 1}), ("'teacher'",)),
    ("mpp head a list", _set("mpp_head", [1]), ("'mpp_head'",)),
]


def _copy(saved_run: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(saved_run, out)
    return out


def _resume_refused(out: Path, capsys: pytest.CaptureFixture[str], name: str, *fragments: str) -> None:
    before = snapshot(out)
    outcome = run_train(["--resume", "--out", str(out)], capsys)
    assert_refused(outcome, str(out), name, *fragments)
    assert "weights_only" not in outcome.err and snapshot(out) == before


@pytest.mark.parametrize("case,mutate,fragments", STATES, ids=[s[0] for s in STATES])
def test_tampered_training_state_is_named(case: str, mutate: Mutation, fragments: tuple[str, ...], saved_run: Path,
                                          tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _copy(saved_run, tmp_path)
    state = torch.load(out / STATE_NAME, weights_only=True)
    torch.save(mutate(state), out / STATE_NAME)
    if "no description" in case:
        (out / CONFIG_NAME).unlink()
    _resume_refused(out, capsys, STATE_NAME, *fragments)


class Payload:
    def __init__(self, call: Callable[..., object], *args: object) -> None:
        self.call, self.args = call, args

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return self.call, self.args


def _zip_with(data_pkl: bytes) -> bytes:
    """A torch.save archive whose data.pkl is `data_pkl`."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("archive/data.pkl", data_pkl)
        archive.writestr("archive/version", "3\n")
    return buffer.getvalue()


def _files(marker: Path) -> list[tuple[str, Callable[[Path], object]]]:
    """(id, write a hostile training_state.pt at the path): payloads that would create `marker`, and wrecks."""
    touch = Payload(os.system, f"touch {marker}")
    return [
        ("torch.save of os.system", lambda p: torch.save({"config": touch}, p)),
        ("torch.save of builtins.open", lambda p: torch.save({"step": Payload(open, str(marker), "w")}, p)),
        ("torch.save of eval", lambda p: torch.save([Payload(eval, f"open({str(marker)!r}, 'w')")], p)),
        ("torch.save of exec, protocol 4", lambda p: torch.save(Payload(exec, "1"), p, pickle_protocol=4)),
        ("raw pickle of os.system", lambda p: p.write_bytes(pickle.dumps({"model": touch}, 2))),
        ("raw pickle, protocol 5", lambda p: p.write_bytes(pickle.dumps(touch, 5))),
        ("zip with a payload", lambda p: p.write_bytes(_zip_with(pickle.dumps(touch, 2)))),
        ("zip with subprocess", lambda p: p.write_bytes(_zip_with(
            pickle.dumps(Payload(__import__("subprocess").call, ["touch", str(marker)]), 2)))),
        ("garbage", lambda p: p.write_bytes(b"not a torch file")),
        ("empty", lambda p: p.write_bytes(b"")),
        ("truncated", lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])),
        ("zip without data.pkl", lambda p: p.write_bytes(_zip_with(b"")[:-30])),
        ("a folder", lambda p: (p.unlink(), p.mkdir())),
        ("a FIFO", lambda p: (p.unlink(), os.mkfifo(p))),
        ("a link to /dev/zero", lambda p: (p.unlink(), p.symlink_to("/dev/zero"))),
        ("a link to nowhere", lambda p: (p.unlink(), p.symlink_to(p.parent / "nowhere"))),
    ]


FILE_IDS = [case for case, _ in _files(Path("/x"))]


@pytest.mark.parametrize("case", FILE_IDS)
def test_hostile_training_state_file_never_runs(case: str, saved_run: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = _copy(saved_run, tmp_path)
    marker = tmp_path / "pwned"
    dict(_files(marker))[case](out / STATE_NAME)
    _resume_refused(out, capsys, STATE_NAME)
    assert not marker.exists()


def _nested(depth: int) -> str:
    return '{"config": ' + "[" * depth + "]" * depth + "}"


# (id, new vit_explorer.json text or a function that makes the file, fragments)
DESCRIPTIONS: list[tuple[str, str | Callable[[Path], object], tuple[str, ...]]] = [
    ("not JSON", "{config:", ("'config'", "not valid JSON")),
    ("a list", "[1, 2]", ("'config'", "JSON object")),
    ("config missing", '{"format": "vit-explorer"}', ("'config'",)),
    ("config a string", '{"config": "vit-b16"}', ("'config'",)),
    ("config unknown key", '{"config": {"colour": 1}}', ("'config'", "colour")),
    ("nested a million deep", _nested(1_000_000), ("'config'",)),
    ("binary", lambda p: p.write_bytes(b"\xff\xfe\x00garbage"), ("'config'",)),
    ("a folder", lambda p: (p.unlink(), p.mkdir()), ("not a regular file",)),
    ("a link to /dev/zero", lambda p: (p.unlink(), p.symlink_to("/dev/zero")), ("not a regular file",)),
    ("a FIFO", lambda p: (p.unlink(), os.mkfifo(p)), ("not a regular file",)),
    ("too large", lambda p: os.truncate(p, 65 * 2**20), ("larger than a description can be",)),
]


def _other_model(path: Path) -> None:
    meta = json.loads(path.read_text())
    meta["config"]["depth"] = 7
    path.write_text(json.dumps(meta))


DESCRIPTIONS.append(("describes another model", _other_model, ("'config.depth'", "7", "different models")))


@pytest.mark.parametrize("case,contents,fragments", DESCRIPTIONS, ids=[d[0] for d in DESCRIPTIONS])
def test_tampered_description_is_named_on_resume(case: str, contents: str | Callable[[Path], object],
                                                 fragments: tuple[str, ...], saved_run: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = _copy(saved_run, tmp_path)
    path = out / CONFIG_NAME
    if isinstance(contents, str):
        path.write_text(contents)
    else:
        contents(path)
    _resume_refused(out, capsys, CONFIG_NAME, *fragments)


def test_an_untouched_run_resumes(saved_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _copy(saved_run, tmp_path)
    outcome = run_train(["--resume", "--out", str(out)], capsys)
    assert outcome.code == 0 and "after 2 steps" in outcome.out
