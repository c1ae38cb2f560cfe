"""Bad flags to `vit-explorer train`: each is refused with one line naming the flag and the problem,
exit code 2, no traceback, nothing written, within seconds. The corpus is a list so it is easy to
count and to grow; the Recipe and load_data corpora below are what the app's training reaches."""

from pathlib import Path

import pytest
import torch

from vit_explorer.data.datasets import DataError, load_data
from vit_explorer.training.recipe import Recipe, RecipeError

from .conftest import TINY, assert_refused, run_train

NO_GPU = not torch.cuda.is_available()

# (extra flags, fragments the one error line must hold); each runs with TINY and a fresh --out
FLAGS: list[tuple[list[str], tuple[str, ...]]] = [
    # devices
    (["--device", "foo"], ("--device", "not a device")),
    (["--device", "meta"], ("--device", "cannot train on meta")),
    (["--device", "xla"], ("--device", "cannot train on xla")),
    (["--device", "vulkan"], ("--device", "cannot train on vulkan")),
    (["--device", "cuda:x"], ("--device", "not a device")),
    (["--device", "cpu:abc"], ("--device", "not a device")),
    (["--device", "cuda:99"], ("--device", "cuda:99")),
    (["--device", "gpu"], ("--device", "not a device")),
    *([(["--device", "cuda"], ("--device", "no CUDA GPU")), (["--device", "cuda:0"], ("--device", "no CUDA GPU"))]
      if NO_GPU else []),
    # floats: NaN, infinities, negatives, out of range
    (["--lr", "nan"], ("--lr", "got nan")),
    (["--lr", "inf"], ("--lr", "got inf")),
    (["--lr=-inf"], ("--lr", "got -inf")),
    (["--lr", "0"], ("--lr", "got 0.0")),
    (["--lr", "-0.001"], ("--lr", "got -0.001")),
    (["--lr", "1e999"], ("--lr", "got inf")),
    (["--warmup", "nan"], ("--warmup", "got nan")),
    (["--warmup", "1"], ("--warmup", "[0, 1)")),
    (["--warmup", "-0.1"], ("--warmup", "got -0.1")),
    (["--weight-decay", "-1"], ("--weight-decay", "got -1.0")),
    (["--weight-decay", "nan"], ("--weight-decay", "got nan")),
    (["--weight-decay", "inf"], ("--weight-decay", "got inf")),
    (["--label-smoothing", "5"], ("--label-smoothing", "[0, 1)", "got 5.0")),
    (["--label-smoothing", "-0.1"], ("--label-smoothing", "got -0.1")),
    (["--label-smoothing", "1"], ("--label-smoothing", "got 1.0")),
    (["--label-smoothing", "nan"], ("--label-smoothing", "got nan")),
    (["--grad-clip", "nan"], ("--grad-clip", "got nan")),
    (["--grad-clip", "-1"], ("--grad-clip", "got -1.0")),
    (["--grad-clip", "inf"], ("--grad-clip", "got inf")),
    (["--mask-ratio", "0"], ("--mask-ratio", "(0, 1)")),
    (["--mask-ratio", "1"], ("--mask-ratio", "got 1.0")),
    (["--mask-ratio", "nan"], ("--mask-ratio", "got nan")),
    (["--distill-alpha", "2"], ("--distill-alpha", "[0, 1]")),
    (["--distill-alpha", "nan"], ("--distill-alpha", "got nan")),
    (["--distill-tau", "0"], ("--distill-tau", "got 0.0")),
    (["--distill-tau", "-1"], ("--distill-tau", "got -1.0")),
    (["--distill-tau", "inf"], ("--distill-tau", "got inf")),
    (["--checkpoint-every", "-1"], ("--checkpoint-every", "got -1.0")),
    (["--checkpoint-every", "nan"], ("--checkpoint-every", "got nan")),
    (["--checkpoint-every", "inf"], ("--checkpoint-every", "got inf")),
    # how long: absurd, infinite, negative
    (["--epochs", "0"], ("--epochs", "got 0.0")),
    (["--epochs", "-1"], ("--epochs", "got -1.0")),
    (["--epochs", "nan"], ("--epochs", "got nan")),
    (["--epochs", "inf"], ("--epochs", "got inf")),
    (["--epochs", "1e300"], ("--epochs", "(0, 100000]")),
    (["--time-budget", "inf"], ("--time-budget", "got inf")),
    (["--time-budget", "nan"], ("--time-budget", "got nan")),
    (["--time-budget", "0"], ("--time-budget", "got 0.0")),
    (["--time-budget", "-5"], ("--time-budget", "got -5.0")),
    (["--time-budget", "1e9"], ("--time-budget", "604800")),
    (["--steps", "0"], ("--steps", "got 0")),
    (["--steps", "-1"], ("--steps", "got -1")),
    (["--steps", "1000000000"], ("--steps", "100000000")),
    (["--steps", str(10**40)], ("--steps", "100000000")),
    (["--epochs", "100000", "--train-size", "2000", "--batch-size", "1"], ("--epochs", "200,000,000 steps")),
    # whole numbers
    (["--batch-size", "0"], ("--batch-size", "got 0")),
    (["--batch-size", "-8"], ("--batch-size", "got -8")),
    (["--batch-size", "1000000"], ("--batch-size", "65536")),
    (["--batch-size", "128"], ("fewer than one batch", "--batch-size")),
    (["--seed", "-1"], ("--seed", "got -1")),
    (["--seed", str(2**31)], ("--seed", "2147483647")),
    (["--seed", str(2**64)], ("--seed", "got 18446744073709551616")),
    (["--teacher-steps", "0"], ("--teacher-steps", "got 0")),
    (["--teacher-steps", "10000000"], ("--teacher-steps", "1000000")),
    (["--train-size", "0"], ("--train-size", "got 0")),
    (["--train-size", "-1"], ("--train-size", "got -1")),
    (["--train-size", "1000000000"], ("--train-size", "1,000,000", "got 1000000000")),
    (["--val-size", "0"], ("--val-size", "got 0")),
    (["--val-size", "10000000"], ("--val-size", "got 10000000")),
    # model size: the memory of the largest activation, and the config's own checks
    (["--image-size", "1024"], ("image size 1024x1024", "attention map", "--image-size or --batch-size")),
    (["--image-size", "4096"], ("--image-size 4096", "patches")),
    (["--image-size", "1000000"], ("--image-size 1000000",)),
    (["--image-size", "0"], ("--image-size 0", "image_size must hold integers from 1")),
    (["--image-size", "-4"], ("--image-size -4", "image_size must hold integers from 1")),
    (["--image-size", "7"], ("--image-size 7", "multiple of patch_size")),
    (["--image-size", "1024", "--batch-size", "1"], ("image size 1024x1024", "batch 1")),
    (["--preset", "nope"], ("--preset nope", "unknown preset")),
    # flags argparse refuses: one line too, not thirty lines of usage
    (["--steps", "abc"], ("argument --steps", "invalid int value")),
    (["--steps", "1.5"], ("argument --steps", "'1.5'")),
    (["--lr", "fast"], ("argument --lr", "invalid float value")),
    (["--image-size", "16.0"], ("argument --image-size",)),
    (["--batch-size", "0x10"], ("argument --batch-size",)),
    (["--task", "segment"], ("argument --task", "invalid choice")),
    (["--distill", "maybe"], ("argument --distill", "invalid choice")),
    (["--pos-embed", "spiral"], ("argument --pos-embed", "invalid choice")),
    (["--stem", "resnet"], ("argument --stem", "invalid choice")),
    (["--steps", "2", "--epochs", "1"], ("argument --epochs", "not allowed with argument --steps")),
    (["--time-budget", "2", "--epochs", "1"], ("argument --epochs", "not allowed with argument --time-budget")),
    (["--seed"], ("argument --seed", "expected one argument")),
    # combinations
    (["--distill", "hard"], ("--teacher", "distillation")),
    (["--distill", "soft", "--teacher", "cnn", "--task", "mpp"], ("--distill", "classification only")),
    (["--distill", "soft", "--teacher", " "], ("--teacher", "got ' '")),
]


@pytest.mark.parametrize("flags,fragments", FLAGS, ids=[" ".join(f) for f, _ in FLAGS])
def test_bad_flag_is_refused_in_one_line(flags: list[str], fragments: tuple[str, ...], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    outcome = run_train([*TINY, "--steps", "1", *flags, "--out", str(out)] if not _sized(flags)
                        else [*TINY, *flags, "--out", str(out)], capsys)
    assert_refused(outcome, *fragments)
    assert not out.exists()  # nothing written


def _sized(flags: list[str]) -> bool:
    return any(f in flags for f in ("--steps", "--epochs", "--time-budget"))


# places --out cannot be: each refused before any data is drawn
def test_bad_out_folders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("keep me")
    for out, fragment in ((a_file, "is a file, not a folder"), (Path("/dev/null"), "is a file, not a folder")):
        assert_refused(run_train([*TINY, "--steps", "1", "--out", str(out)], capsys), "--out", fragment)
    assert a_file.read_text() == "keep me"


# Recipe values the app (or a script) may pass: each a RecipeError naming the field
RECIPES: list[tuple[dict[str, object], str]] = [
    ({"steps": 1.5}, "steps"), ({"steps": True}, "steps"), ({"steps": "10"}, "steps"), ({"epochs": "2"}, "epochs"),
    ({"time_budget": float("nan")}, "time_budget"), ({"batch_size": None}, "batch_size"),
    ({"batch_size": 32.0}, "batch_size"), ({"lr": "0.001"}, "lr"), ({"lr": None}, "lr"), ({"lr": 10**400}, "lr"),
    ({"min_lr_ratio": 2.0}, "min_lr_ratio"), ({"min_lr_ratio": -0.5}, "min_lr_ratio"), ({"seed": 1.0}, "seed"),
    ({"log_every": 0}, "log_every"), ({"log_every": 2.5}, "log_every"), ({"eval_every": 0.0}, "eval_every"),
    ({"eval_every": 1.5}, "eval_every"), ({"snapshot_every": -3}, "snapshot_every"),
    ({"save_state": "yes"}, "save_state"), ({"compile": 1}, "compile"), ({"compile": True}, "compile"),
    ({"compile": "fast"}, "compile"), ({"precision": None}, "precision"), ({"precision": "fp16"}, "precision"),
    ({"task": None}, "task"), ({"task": "Classify"}, "task"), ({"distill": True}, "distill"),
    ({"teacher": 5}, "teacher"), ({"teacher": ""}, "teacher"), ({"steps": 3, "time_budget": 4.0}, "time_budget"),
    ({"grad_clip": [1.0]}, "grad_clip"), ({"label_smoothing": complex(0.1, 0)}, "label_smoothing"),
]


@pytest.mark.parametrize("values,field", RECIPES, ids=[repr(v) for v, _ in RECIPES])
def test_bad_recipe_names_the_field(values: dict[str, object], field: str) -> None:
    with pytest.raises(RecipeError) as caught:
        Recipe(**values)
    assert caught.value.field == field and str(caught.value).startswith(field)


# load_data arguments (from the app's form, or a saved run's spec): each a DataError naming the field
DATA: list[tuple[dict[str, object], str]] = [
    ({"image_size": (0, 16)}, "image_size"), ({"image_size": (16,)}, "image_size"),
    ({"image_size": (16.0, 16.0)}, "image_size"), ({"image_size": "16"}, "image_size"),
    ({"image_size": (10**6, 10**6)}, "image_size"), ({"seed": -1}, "seed"), ({"seed": "0"}, "seed"),
    ({"train_size": 0}, "train_size"), ({"train_size": 10**9}, "train_size"), ({"train_size": 2.5}, "train_size"),
    ({"val_size": -4}, "val_size"), ({"val_size": True}, "val_size"), ({"val_fraction": 0.0}, "val_fraction"),
    ({"val_fraction": 1.0}, "val_fraction"), ({"val_fraction": float("nan")}, "val_fraction"),
    ({"dataset": 5}, "dataset"), ({"dataset": ""}, "dataset"),
]


@pytest.mark.parametrize("values,field", DATA, ids=[repr(v) for v, _ in DATA])
def test_bad_data_arguments_name_the_field(values: dict[str, object], field: str) -> None:
    with pytest.raises(DataError) as caught:
        load_data(**{"dataset": "shapes", "image_size": (16, 16), "train_size": 4, "val_size": 2, **values})
    assert caught.value.field == field


def test_built_in_data_larger_than_memory_is_refused_before_drawing() -> None:
    with pytest.raises(ValueError, match="more than the .* of memory available; use a smaller"):
        load_data("shapes", image_size=(16_384, 16_384), train_size=1_000_000, val_size=1_000_000)
