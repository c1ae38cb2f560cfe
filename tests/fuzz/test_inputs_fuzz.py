"""Hostile inputs to a model run, by surface ("library/...", "config/...", "inspect/...", "predict/...", "app/..."):
input sizes past the budget, presets too large for the memory free, a RoPE base that makes every output NaN,
weights that overflow, and the arguments the views pass. Each is refused (or warned about) with a message naming
the argument or field and the way out, before anything runs. Presets too large run in a child whose address space
is limited; the app's cases drive the main window headless, the ones that could allocate under an address-space
limit in this process (lifted after the case)."""

from __future__ import annotations

import dataclasses
import gc
import importlib.util
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

import vit_explorer
from vit_explorer.checkpoints import CheckpointError, LoadedModel, Preprocess, load, save_native
from vit_explorer.checkpoints.memory import MAX_PATCHES, BudgetError
from vit_explorer.cli import main
from vit_explorer.explore.attention import query_for
from vit_explorer.explore.forward import Inputs, run_forward
from vit_explorer.models import ConfigError, VisionTransformer, ViTConfig, preset
from vit_explorer.paths import BUNDLED_MODEL

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("gui_conftest_for_fuzz", ROOT / "tests" / "gui" / "conftest.py")
gui = importlib.util.module_from_spec(_spec)  # the GUI tests' helpers (tests/ is not a package)
_spec.loader.exec_module(gui)
_settings = gui._settings  # the recent-sources list stays out of the user's settings here too
address_space = gui.address_space
_spec = importlib.util.spec_from_file_location("budget_tests_for_fuzz", ROOT / "tests" / "explore" / "test_budget.py")
budget = importlib.util.module_from_spec(_spec)  # a preset built in a memory-limited child
_spec.loader.exec_module(budget)


def child_build(name: str, **options: object) -> str:
    """"ErrorType: message" of building the preset in a memory-limited child, or "built"."""
    outcome = budget.build_in_limited_child(name, **options)
    return f"{outcome['error']}: {outcome['message']}" if "error" in outcome else "built"

PATCHES = f"more than the {MAX_PATCHES:,}"
OVERFLOW = "the forward pass gave NaN or infinite outputs"


@dataclass
class Kit:
    tmp: Path
    qtbot: Any = None


@dataclass(frozen=True)
class Case:
    name: str  # "surface/what"
    run: Callable[[Kit], None]  # asserts what the surface must do


# ---------------------------------------------------------------------------- helpers
def refused(error: type[BaseException], *fragments: str) -> Callable[[Callable[[], object]], None]:
    def check(call: Callable[[], object]) -> None:
        with pytest.raises(error) as info:
            call()
        assert all(f in str(info.value) for f in fragments), str(info.value)
    return check


def tiny_inputs(**change: Any) -> Inputs:
    model = VisionTransformer(preset("classroom-tiny")).eval()
    loaded = LoadedModel(model, model.config, [str(i) for i in range(10)], Preprocess((32, 32)), "tiny", "built")
    base = Inputs(loaded, Image.new("RGB", (32, 32)), (32, 32), np.zeros((8, 8), bool), np.ones((2, 2), np.float32))
    return dataclasses.replace(base, **change)


def classroom_at(size: tuple[int, int]) -> Inputs:
    loaded = load(str(BUNDLED_MODEL), device="cpu")
    grid = (size[0] // 4, size[1] // 4)
    return Inputs(loaded, Image.new("RGB", (32, 32)), size, np.zeros(grid, bool), np.ones((4, 4), np.float32))


def rope_folder(tmp: Path, theta: float) -> Path:
    model = VisionTransformer(preset("classroom-tiny", pos_embed="rope")).eval()
    folder = save_native(tmp / "rope", model, [str(i) for i in range(10)], Preprocess((32, 32)))
    meta_path = next(p for p in folder.iterdir() if p.suffix == ".json")
    meta = json.loads(meta_path.read_text())
    meta["config"]["rope_theta"] = theta
    meta_path.write_text(json.dumps(meta))
    return folder


def overflowing(tmp: Path) -> Path:
    model = VisionTransformer(preset("classroom-tiny")).eval()
    with torch.no_grad():  # finite weights whose products overflow float32
        model.norm.weight.fill_(1e30)
        model.head.weight.fill_(1e30)
    return save_native(tmp / "overflow", model, [str(i) for i in range(10)], Preprocess((32, 32)))


def grey_png(tmp: Path) -> Path:
    Image.new("RGB", (32, 32), (90, 120, 150)).save(tmp / "grey.png")
    return tmp / "grey.png"


def cli(argv: list[str]) -> tuple[int, str]:
    """Exit code and stderr of the CLI in this process."""
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue()


def inspect_refuses(resolution: str) -> Callable[[Kit], None]:
    def run(kit: Kit) -> None:
        code, err = cli(["inspect", str(BUNDLED_MODEL), "--resolution", resolution, "--out", str(kit.tmp / "r")])
        assert code == 2 and PATCHES in err and "use an input of at most" in err, err
        assert not (kit.tmp / "r").exists()
    return run


def inspect_warns(kit: Kit) -> None:
    code, err = cli(["inspect", str(overflowing(kit.tmp)), "--image", str(grey_png(kit.tmp)), "--out",
                     str(kit.tmp / "r")])
    assert code == 0 and OVERFLOW in err, err
    assert any(OVERFLOW in w for w in json.loads((kit.tmp / "r" / "summary.json").read_text())["warnings"])


def predict_warns(kit: Kit) -> None:
    code, err = cli(["predict", str(overflowing(kit.tmp)), str(grey_png(kit.tmp)), "--json"])
    assert code == 0 and "vit-explorer predict: warning:" in err and OVERFLOW in err, err


# ---------------------------------------------------------------------------- the app
def with_window(source: str | None, then: Callable[[Any, Kit], None]) -> Callable[[Kit], None]:
    def run(kit: Kit) -> None:
        win = gui.open_window(kit.qtbot, source)
        try:
            then(win, kit)
        finally:
            win.close()
    return run


def tiny_source(kit: Kit) -> str:
    return str(gui.save_tiny(kit.tmp / "tiny"))


def app_size(size: tuple[int, int], said: str, bundled: bool = False) -> Callable[[Kit], None]:
    def then(win: Any, kit: Kit) -> None:
        before = win.session.size
        with address_space():
            win.image_panel.height_box.setValue(size[0])
            win.image_panel.width_box.setValue(size[1])
            win.image_panel.apply_size()
            assert said in win.banner.text() and "use an input of at most" in win.banner.text(), win.banner.text()
            assert win.session.size == before and not win.session.working()
    return lambda kit: with_window(None if bundled else tiny_source(kit), then)(kit)


def app_lesson(step: dict[str, Any], *said: str) -> Callable[[Kit], None]:
    def then(win: Any, kit: Kit) -> None:
        path = kit.tmp / "lesson.json"
        path.write_text(json.dumps({"format": "vit-explorer-lesson", "version": 1, "title": "hostile",
                                    "steps": [{"title": "one", "caption": "a step", **step}]}))
        loaded, size = win.session.loaded, win.session.size
        with address_space():
            with kit.qtbot.waitSignal(win.session.error, timeout=30000):
                win.open_lesson(str(path))
            kit.qtbot.waitUntil(lambda: all(s in win.banner.text() for s in said), timeout=30000)
            assert win.session.loaded is loaded and win.session.size == size
    return lambda kit: with_window(tiny_source(kit), then)(kit)


def app_builder(name: str, **options: Any) -> Callable[[Kit], None]:
    def then(win: Any, kit: Kit) -> None:
        builder, loaded = win.views["Model builder"], win.session.loaded
        builder.set_config(preset(name, **options))
        with address_space():
            with kit.qtbot.waitSignal(win.session.error, timeout=30000):
                builder.build()
        assert "could not build the model" in win.banner.text() and "needs about" in win.banner.text()
        assert win.session.loaded is loaded
    return lambda kit: with_window(tiny_source(kit), then)(kit)


def app_overflow(kit: Kit) -> None:
    def then(win: Any, kit: Kit) -> None:
        kit.qtbot.waitUntil(lambda: OVERFLOW in win.banner.text(), timeout=10000)
    with_window(str(overflowing(kit.tmp)), then)(kit)


# ---------------------------------------------------------------------------- the cases
CASES = [
    Case("library/head-mask-nan", lambda k: refused(ValueError, "head_mask")(
        lambda: run_forward(tiny_inputs(head_mask=np.full((2, 2), np.nan, np.float32))))),
    Case("library/head-mask-negative", lambda k: refused(ValueError, "head_mask")(
        lambda: run_forward(tiny_inputs(head_mask=np.full((2, 2), -0.5, np.float32))))),
    Case("library/head-mask-wrong-shape", lambda k: refused(ValueError, "head_mask", "(2, 2)")(
        lambda: run_forward(tiny_inputs(head_mask=np.ones((12, 12), np.float32))))),
    Case("library/patch-mask-nan", lambda k: refused(ValueError, "mask")(
        lambda: run_forward(tiny_inputs(mask=np.full((8, 8), np.nan))))),
    Case("library/patch-mask-wrong-shape", lambda k: refused(ValueError, "mask", "(8, 8)")(
        lambda: run_forward(tiny_inputs(mask=np.zeros((4, 4), bool))))),
    Case("library/image-none", lambda k: refused(TypeError, "image")(
        lambda: run_forward(tiny_inputs(image=None)))),
    Case("library/query-negative-patch", lambda k: refused(ValueError, "patch")(
        lambda: query_for(tiny_inputs().loaded.model.layout((32, 32)), "cls", (-1, -1)))),
    Case("library/query-unknown-pool", lambda k: refused(ValueError, "pool")(
        lambda: query_for(tiny_inputs().loaded.model.layout((32, 32)), "max", None))),
    Case("library/size-4096-classroom", lambda k: refused(BudgetError, PATCHES)(
        lambda: run_forward(classroom_at((4096, 4096))))),
    Case("library/size-1024-classroom", lambda k: refused(BudgetError, PATCHES)(
        lambda: run_forward(classroom_at((1024, 1024))))),
    Case("library/size-512-classroom-multiply-adds", lambda k: refused(BudgetError, "G multiply-adds")(
        lambda: run_forward(classroom_at((512, 512))))),
    Case("library/size-256-classroom-runs", lambda k: run_forward(classroom_at((256, 256)))),
    Case("library/preset-dinov2-g14-limited", lambda k: _needs_about(child_build("dinov2-g14"))),
    Case("library/preset-vit-l16-depth-200-limited", lambda k: _needs_about(child_build("vit-l16", depth=200))),
    Case("config/rope-theta-1e-300", lambda k: refused(ConfigError, "rope_theta")(
        lambda: ViTConfig(pos_embed="rope", rope_theta=1e-300))),
    Case("config/rope-theta-0.5", lambda k: refused(ConfigError, "rope_theta")(
        lambda: ViTConfig(pos_embed="rope", rope_theta=0.5))),
    Case("config/rope-theta-1-accepted", lambda k: ViTConfig(pos_embed="rope", rope_theta=1.0)),
    Case("config/rope-theta-1e-300-saved-folder", lambda k: refused((CheckpointError, ConfigError), "rope_theta")(
        lambda: vit_explorer.load(str(rope_folder(k.tmp, 1e-300)), device="cpu"))),
    Case("inspect/resolution-2048", inspect_refuses("2048x2048")),
    Case("inspect/resolution-1024", inspect_refuses("1024x1024")),
    Case("inspect/nan-outputs-warned", inspect_warns),
    Case("predict/nan-outputs-warned", predict_warns),
    Case("app/size-4096", app_size((4096, 4096), PATCHES)),
    Case("app/size-1024", app_size((1024, 1024), PATCHES)),
    Case("app/size-512-bundled-multiply-adds", app_size((512, 512), "G multiply-adds", bundled=True)),
    Case("app/lesson-step-size-4096", app_lesson({"size": [4096, 4096]}, "lesson step 1:", PATCHES)),
    Case("app/lesson-preset-vit-l16-depth-200", app_lesson({"model": "preset:vit-l16", "options": {"depth": 200}},
                                                          "needs about", "GiB of memory is free")),
    Case("app/lesson-preset-dinov2-g14", app_lesson({"model": "preset:dinov2-g14"}, "needs about")),
    Case("app/builder-dinov2-g14", app_builder("dinov2-g14")),
    Case("app/builder-vit-l16-depth-200", app_builder("vit-l16", depth=200)),
    Case("app/nan-outputs-warned", app_overflow),
]


def _needs_about(message: str) -> None:
    assert message.startswith("BudgetError: ") and "needs about" in message and "smaller model" in message, message


@pytest.fixture(scope="module", autouse=True)
def _gc_back_on() -> Iterator[None]:
    """The app hands garbage collection to its GUI timer (gui/app.py); the tests after these get it back."""
    yield
    gc.unfreeze()
    gc.collect()
    gc.enable()


def test_the_names_are_unique_and_by_surface() -> None:
    assert len({c.name for c in CASES}) == len(CASES)
    assert {c.name.split("/")[0] for c in CASES} == {"library", "config", "inspect", "predict", "app"}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_input(case: Case, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    kit = Kit(tmp_path, request.getfixturevalue("qtbot") if case.name.startswith("app/") else None)
    case.run(kit)
