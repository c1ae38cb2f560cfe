"""One budget for a model run, checked before anything is built or run: a preset too large for the memory free
(in a child whose address space is limited), an input size with too many patches or multiply-adds for one
interactive pass (in the library, `inspect --resolution`), each refused with what it needs and the way out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vit_explorer.checkpoints import load
from vit_explorer.checkpoints.memory import MAX_PATCHES, BudgetError
from vit_explorer.explore.forward import Inputs, check_size, run_forward
from vit_explorer.paths import BUNDLED_MODEL

ROOT = Path(__file__).resolve().parents[2]
# builds a preset where the address space allows 2 GiB beyond what importing torch maps; prints the outcome
CHILD = """
import json, os, resource, sys
import torch
from vit_explorer.explore.build import build_loaded
from vit_explorer.models import preset
with open("/proc/self/statm") as f:
    mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
resource.setrlimit(resource.RLIMIT_AS, (mapped + 2 * 2**30, resource.RLIM_INFINITY))
try:
    build_loaded(preset(sys.argv[1], **json.loads(sys.argv[2])), "cpu")
    print(json.dumps({"built": True}))
except BaseException as error:
    print(json.dumps({"error": type(error).__name__, "message": str(error)}))
"""


def build_in_limited_child(name: str, **options: object) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", CHILD, name, json.dumps(options)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("name", "options"), [("dinov2-g14", {}), ("vit-l16", {"depth": 200})],
                         ids=["dinov2-g14", "vit-l16-depth-200"])
def test_a_preset_that_does_not_fit_is_refused_before_it_is_built(name: str, options: dict[str, object]) -> None:
    outcome = build_in_limited_child(name, **options)
    assert outcome.get("error") == "BudgetError", outcome
    message = str(outcome["message"])
    assert "needs about" in message and "GiB" in message and "free on cpu" in message
    assert "smaller model" in message  # the way out


def test_a_preset_that_fits_is_built_in_the_same_limits() -> None:
    assert build_in_limited_child("classroom-tiny") == {"built": True}


@pytest.fixture(scope="module")
def classroom():
    return load(str(BUNDLED_MODEL), device="cpu")


def inputs_at(loaded, size: tuple[int, int]) -> Inputs:
    p = loaded.config.patch_size
    heads = np.ones((loaded.config.depth, loaded.config.num_heads), np.float32)
    return Inputs(loaded, Image.new("RGB", (size[1], size[0]), (128, 128, 128)), size,
                  np.zeros((size[0] // p, size[1] // p), bool), heads)


@pytest.mark.parametrize(("size", "said"), [((4096, 4096), f"more than the {MAX_PATCHES:,}"),
                                            ((1024, 1024), f"more than the {MAX_PATCHES:,}"),
                                            ((512, 512), "G multiply-adds")], ids=["4096", "1024", "512"])
def test_an_input_size_over_the_budget_is_refused_before_the_forward_pass(classroom, size, said: str) -> None:
    with pytest.raises(BudgetError, match=said) as refused:
        run_forward(inputs_at(classroom, size))
    assert "use an input of at most" in str(refused.value)  # the way out, with the size that runs
    with pytest.raises(BudgetError, match=said):
        check_size(classroom, size)


def test_the_largest_size_the_message_offers_runs(classroom) -> None:
    with pytest.raises(BudgetError) as refused:
        check_size(classroom, (1024, 1024))
    side = int(str(refused.value).split("at most ")[1].split("x")[0])
    check_size(classroom, (side, side))  # within the budget
    with pytest.raises(BudgetError):
        check_size(classroom, (side + classroom.config.patch_size, side + classroom.config.patch_size))


def test_the_model_s_own_size_and_a_larger_one_within_the_budget_run(classroom) -> None:
    assert run_forward(inputs_at(classroom, (32, 32))).probs.shape == (10,)
    check_size(classroom, (128, 128))


@pytest.mark.parametrize("resolution", ["2048x2048", "1024x1024"])
def test_inspect_refuses_a_resolution_over_the_budget(tmp_path: Path, capsys, resolution: str) -> None:
    from vit_explorer.cli import main

    out = tmp_path / "report"
    assert main(["inspect", str(BUNDLED_MODEL), "--resolution", resolution, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"more than the {MAX_PATCHES:,}" in err and "use an input of at most" in err
    assert not out.exists()
