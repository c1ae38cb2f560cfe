"""The paths a GPU run takes by default, proven equal to the plain ones on the CPU: torch.compile against
eager, bf16 autocast against float32 (within tolerance), in-memory batches against the loader, the
sync-free masked loss against boolean indexing; and the "auto" choices that pick them."""

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from vit_explorer.data.datasets import TrainingData, to_device
from vit_explorer.data.folder import ImageSet
from vit_explorer.training import events as ev
from vit_explorer.training.batches import Batches
from vit_explorer.training.device import COMPILE_MIN_STEPS, GRAPH_PARAMETERS, compile_mode, use_bf16
from vit_explorer.training.losses import masked_cross_entropy
from vit_explorer.training.recipe import Recipe
from vit_explorer.training.trainer import train

from .conftest import tiny_config

CPU, CUDA = torch.device("cpu"), torch.device("cuda")  # a device object needs no GPU: only its type is read


def _run(data: TrainingData, **recipe: object) -> list[ev.Event]:
    values = {"steps": 4, "batch_size": 32, "lr": 3e-3, "log_every": 1, "save_state": False, **recipe}
    config = tiny_config(num_classes=data.num_classes)
    events = list(train(config, data, Recipe(**values), device="cpu"))  # type: ignore[arg-type]
    assert isinstance(events[-1], ev.Finished), events[-1]
    return events


def _losses(data: TrainingData, **recipe: object) -> list[float]:
    return [e.loss for e in _run(data, **recipe) if isinstance(e, ev.Step)]


@pytest.mark.slow  # compiling forward and backward takes tens of seconds on a CPU
def test_compiled_training_follows_eager(colour_data: TrainingData) -> None:
    eager = _losses(colour_data, compile="off")
    events = _run(colour_data, compile="default")
    assert any(isinstance(e, ev.Notice) and "torch.compile" in e.message for e in events)
    compiled = [e.loss for e in events if isinstance(e, ev.Step)]
    assert len(compiled) == len(eager) == 4
    assert compiled == pytest.approx(eager, rel=1e-4)


def test_bf16_autocast_stays_within_tolerance_of_fp32(colour_data: TrainingData) -> None:
    fp32 = _losses(colour_data, precision="fp32")
    bf16 = _losses(colour_data, precision="bf16")
    assert bf16 != fp32  # the autocast really ran
    assert bf16 == pytest.approx(fp32, rel=3e-2)


def test_auto_precision_is_bf16_on_a_gpu_only() -> None:
    assert not use_bf16(Recipe(), CPU)
    assert use_bf16(Recipe(precision="bf16"), CPU)
    assert not use_bf16(Recipe(precision="fp32"), CUDA)


def test_in_memory_batches_equal_the_loader_path(tiny_data: TrainingData) -> None:
    """Indexing a resident set (what a GPU run does with a built-in set) serves what the DataLoader did,
    from the start of an epoch and from inside one (a resumed run)."""
    batches = Batches(tiny_data, 32, seed=3, rank=0, world=1)
    for epoch, start in ((0, 0), (1, 0), (2, 5)):
        batches.sampler.set_epoch(epoch)
        order = list(batches.sampler)
        chunks = [order[i * 32:(i + 1) * 32] for i in range(start, batches.steps_per_epoch)]
        loader = DataLoader(tiny_data.train, batch_sampler=chunks, collate_fn=lambda b: b, num_workers=0)
        served = list(batches.epoch(epoch, start))
        assert len(served) == len(chunks) == batches.steps_per_epoch - start
        for ours, theirs in zip(served, loader, strict=True):
            assert torch.equal(ours.images, theirs.images) and torch.equal(ours.labels, theirs.labels)


def test_a_resident_copy_trains_like_the_host_one(tiny_data: TrainingData) -> None:
    """The same run on the set as loaded and on its `to(device)` copy (the CPU here) gives the same losses."""
    moved = replace(tiny_data, train=tiny_data.train.to(CPU), val=tiny_data.val.to(CPU))
    assert _losses(moved) == _losses(tiny_data)
    assert to_device(tiny_data.train.images, CPU) is tiny_data.train.images


def test_masked_loss_equals_the_indexed_one() -> None:
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 16, 512, generator=g)
    targets = torch.randint(0, 512, (3, 16), generator=g)
    mask = torch.rand(3, 16, generator=g) < 0.4
    loss, correct, count = masked_cross_entropy(logits, targets, mask)
    assert loss.item() == pytest.approx(F.cross_entropy(logits[mask], targets[mask]).item(), rel=1e-6)
    assert correct.item() == (logits[mask].argmax(-1) == targets[mask]).sum().item()
    assert count.item() == mask.sum().item()


def test_auto_compiles_long_classification_runs_on_a_gpu(tiny_data: TrainingData) -> None:
    long = Recipe(steps=COMPILE_MIN_STEPS)
    small = 300_000
    assert compile_mode(long, CUDA, tiny_data, small, False, long.steps) == "reduce-overhead"  # CUDA graphs
    assert compile_mode(long, CUDA, tiny_data, GRAPH_PARAMETERS + 1, False, long.steps) == "default"
    assert compile_mode(long, CUDA, tiny_data, small, True, long.steps) == "default"  # DDP: no CUDA graphs
    files = replace(tiny_data, train=_Files())
    assert compile_mode(long, CUDA, files, small, False, long.steps) == "default"  # batches may shrink
    assert compile_mode(long, CPU, tiny_data, small, False, long.steps) is None
    assert compile_mode(Recipe(steps=100), CUDA, tiny_data, small, False, 100) is None  # would not repay it
    assert compile_mode(Recipe(), CUDA, tiny_data, small, False, None) is None  # 120 s: too short
    assert compile_mode(Recipe(time_budget=600.0), CUDA, tiny_data, small, False, None) == "reduce-overhead"
    mpp = Recipe(steps=COMPILE_MIN_STEPS, task="mpp")
    assert compile_mode(mpp, CUDA, tiny_data, small, False, mpp.steps) is None
    assert compile_mode(Recipe(steps=5, compile="max-autotune"), CPU, tiny_data, small, False, 5) == "max-autotune"
    assert compile_mode(Recipe(compile="off"), CUDA, tiny_data, small, False, COMPILE_MIN_STEPS) is None


def test_recipes_saved_with_boolean_compile_and_amp_still_load() -> None:
    old = Recipe.from_dict({"steps": 5, "compile": True, "amp": False})
    assert (old.compile, old.precision) == ("default", "fp32")
    assert (Recipe.from_dict({"steps": 5, "compile": False, "amp": True}).compile, "auto") == ("off", "auto")


class _Files(ImageSet):
    """Stands for file-backed images (an ImageFolder): not held in memory."""

    def __len__(self) -> int:
        return 64


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("augment", [False, True])
def test_a_gpu_step_never_waits_for_the_device(tiny_data: TrainingData, augment: bool,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """With CUDA's sync debug mode on "error", a synchronising call inside a step raises; the run must reach
    its end (the log steps read the window, outside the steps)."""
    from vit_explorer.training import trainer

    optimize = trainer._optimize

    def strict(*args: object) -> object:
        torch.cuda.set_sync_debug_mode("error")
        try:
            return optimize(*args)  # type: ignore[arg-type]
        finally:
            torch.cuda.set_sync_debug_mode("default")

    monkeypatch.setattr(trainer, "_optimize", strict)
    data = replace(tiny_data, augment=augment)
    events = list(train(tiny_config(), data, Recipe(steps=6, batch_size=32, save_state=False), device="cuda"))
    assert isinstance(events[-1], ev.Finished), events[-1]
