"""The trainer: `train(...)` is a generator of events (see events.py) that the CLI and the app
consume. The consumer stops it with `Control.stop()` (a checkpoint is written first) or by
closing the generator, and pauses it with `Control.pause()`.

A run is one `RunState` (the model, optimizer, generators, counters and the window of steps since
the last report) set up once and then advanced by small named steps: `_setup`, `_optimize` (one
optimizer step), `_log` (close the window: NaN check, report, maybe validate and save),
`_validate`, `_snapshot` and `_save`. `train` reads top to bottom as the loop that calls them.
Around it: memory.py checks the device and the memory a step needs, device.py chooses the GPU paths
(bf16, torch.compile, data kept on the device), init.py starts attention mimetically, state.py reads and
checks a saved run, checkpoint.py writes one so that a kill at any moment never mixes two runs.

Determinism: the model is initialised from `recipe.seed`; epoch e visits the training set in the
order of `DistributedSampler(seed=recipe.seed).set_epoch(e)` (the same permutation for any number
of processes), and crops and masks come from one generator whose state is saved. A run sized in
steps or epochs therefore resumes exactly; a time-budget run sets its learning rate from the
training time spent, so it adapts to the machine's speed (and is not bit-reproducible).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ..analysis.pe import pe_similarity
from ..checkpoints.devices import resolve_device
from ..data.datasets import TrainingData, normalize, random_crop_flip, to_device
from ..data.folder import Batch
from ..models import VisionTransformer, ViTConfig
from . import losses
from .batches import Batches, evaluate
from .checkpoint import remove_leftovers, write_checkpoint
from .device import autocast, compile_mode, resident
from .events import CheckpointSaved, Control, Error, Event, Finished, Notice, PESnapshot, Started, Step, Validation
from .health import attention_health
from .init import mimetic_init
from .memory import check_training_memory
from .recipe import MAX_STEPS, Recipe
from .state import STATE_NAME, TrainingState, check_description, check_module, check_optimizer, read_state
from .teacher import SmallCNN, Teacher, train_cnn_teacher

__all__ = ["STATE_NAME", "RunState", "TrainStep", "train"]  # STATE_NAME: the training state's file name


class TrainStep(nn.Module):
    """What one training forward computes, as a module so DistributedDataParallel can wrap it:
    the logits of each head, or (MPP) 512-way colour logits for every patch token."""

    def __init__(self, model: VisionTransformer, mpp_head: nn.Linear | None) -> None:
        super().__init__()
        self.model = model
        self.mpp_head = mpp_head

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                generator: torch.Generator | None = None) -> dict[str, torch.Tensor] | torch.Tensor:
        if self.mpp_head is None:
            return self.model.forward_intermediates(x)["head_logits"]
        out = self.model.forward_intermediates(x, mask=mask, mask_mode="bert", capture=("hidden_states",),
                                               generator=generator)
        tokens = self.model.norm(out["hidden_states"][-1])[:, self.model.config.num_prefix_tokens:]  # (B, N, D)
        return self.mpp_head(tokens)  # (B, N, 512)


@dataclass
class RunState:
    """One run: what `_setup` builds, and the counters the steps advance."""

    config: ViTConfig
    data: TrainingData
    recipe: Recipe
    out: Path | None  # the native checkpoint folder; None keeps nothing on disk
    dev: torch.device
    distributed: bool
    rank: int
    world: int
    model: VisionTransformer
    mpp_head: nn.Linear | None  # the masked-patch-prediction head (task "mpp")
    teacher: Teacher | None  # the distillation teacher
    net: TrainStep  # model (+ MPP head) as one module: what validation runs for MPP
    run_net: Callable[..., Any]  # net, wrapped by DistributedDataParallel and torch.compile when asked
    optimizer: torch.optim.Optimizer
    batches: Batches
    gen: torch.Generator  # crops and masks (saved, so a resume draws the same ones)
    total: int | None  # steps of the run; None when it is sized by a time budget
    budget: float | None  # seconds of training when total is None
    start_step: int  # > 0 when resumed
    step: int  # optimizer steps done
    elapsed: float  # seconds of training (validation, saving and pauses not counted)
    history: list[list[float]] = field(default_factory=list)  # [step, loss, accuracy] of every Step event
    val: tuple[float, float] | None = None  # the last validation's (loss, accuracy)
    saved_step: int | None = None  # the step of the last checkpoint written (or resumed from)
    next_eval: float = 0.0  # the progress at which to validate next
    last_save: float = 0.0  # time.monotonic() of the last checkpoint
    epoch: int = -1  # the epoch `batch_iter` serves
    batch_iter: Iterator[Batch] | None = None
    lr: float = 0.0  # the learning rate of the last step
    clock: float = 0.0  # training time as last agreed at the top of the loop
    # (3,) loss sum, correct, count since the last Step event; on the device, so a step never waits for it
    window: torch.Tensor = field(default_factory=lambda: torch.zeros(3, dtype=torch.float64))
    window_images: int = 0
    window_start: float = 0.0  # time.perf_counter() when the window's training time began
    probe: torch.Tensor | None = None  # (1, 3, H, W) the first training image, normalised: attention health's

    @property
    def modules(self) -> list[nn.Module]:
        return [self.model] + ([self.mpp_head] if self.mpp_head is not None else [])

    @property
    def mpp(self) -> tuple[int, float] | None:
        """(patch size, mask ratio) for masked patch prediction, else None."""
        return (self.config.patch_size, self.recipe.mask_ratio) if self.mpp_head is not None else None

    def progress(self, clock: float) -> float:
        """The fraction of the run done after `self.step` steps and `clock` seconds of training."""
        if self.total is not None:
            return self.step / self.total
        assert self.budget is not None, "a run is sized by steps or by a time budget"
        return clock / self.budget

    def eta(self) -> float:
        """Seconds of training left: at the pace so far (a sized run), or what the budget has left (a timed one)."""
        if self.total is not None:
            return (self.total - self.step) * self.elapsed / max(self.step - self.start_step, 1)
        assert self.budget is not None, "a run is sized by steps or by a time budget"
        return max(self.budget - self.elapsed, 0.0)


def train(config: ViTConfig, data: TrainingData, recipe: Recipe, out: str | os.PathLike[str] | None = None, *,
          resume: bool = False, init: str | None = None, control: Control | None = None,
          device: str | None = None) -> Iterator[Event]:
    """Train a VisionTransformer(config) on `data` with `recipe`, yielding events.

    out: the native checkpoint folder (with training_state.pt for --resume); None keeps nothing on disk.
    resume: continue from `out`'s training state (config and recipe must be the saved ones).
    init: a checkpoint (any source vit_explorer.load opens) whose matching weights start the run.
    Under torch.distributed (torchrun) it trains with DistributedDataParallel; only rank 0 writes.
    """
    control = control or Control()
    run = yield from _setup(config, data, recipe, out, resume, init, device)
    yield Started(run.total, run.batches.steps_per_epoch, run.step, str(run.dev), run.world,
                  sum(p.numel() for m in run.modules for p in m.parameters()), run.budget)
    yield from _snapshot(run)
    run.model.train()
    run.lr = recipe.lr_at(run.progress(run.elapsed))
    run.window_start = time.perf_counter()
    while True:
        stop, progress = _agree(run, control)
        if progress >= 1.0 or stop:
            reason = "stopped" if stop and progress < 1.0 else ("time budget" if run.budget else "completed")
            break
        if control.paused:
            paused_at = time.perf_counter()
            control.wait_while_paused()
            run.window_start += time.perf_counter() - paused_at  # a pause is not training time
            continue
        images, labels, skipped = _next_batch(run)
        for message in skipped:
            yield Notice(f"skipped an unreadable image: {message}")
        _set_lr(run, recipe.lr_at(progress))
        if len(labels) and (error := _optimize(run, images, labels)):
            yield Error(run.step, error)
            return
        run.step += 1
        # a step-sized run ends on a step count every process knows; a timed one stops at the loop top
        if run.step % recipe.log_every == 0 or (run.total is not None and run.step >= run.total):
            if error := (yield from _log(run)):
                yield Error(run.step, error)
                return
        if run.step % recipe.snapshot_every == 0:
            yield from _snapshot(run)
    yield from _finish(run, reason)


def _setup(config: ViTConfig, data: TrainingData, recipe: Recipe, out: str | os.PathLike[str] | None, resume: bool,
           init: str | None, device: str | None) -> Generator[Event, None, RunState]:
    """Check the setup, build (or restore) model, teacher and optimizer; yields notices, returns the run."""
    out_dir = Path(out) if out is not None else None
    distributed = dist.is_available() and dist.is_initialized()
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    dev = resolve_device(device, default="auto", use="train")
    _check_setup(config, data, recipe, world)
    check_training_memory(config, recipe.batch_size // world, dev)
    data = resident(data, dev)
    batches, total = _length(data, recipe, rank, world, dev)
    state = _saved_run(out_dir, config) if resume and out_dir is not None else None
    model, mpp_head = yield from _model(config, recipe, init, state, dev)
    # a recipe that distills names its teacher (Recipe checks it)
    teacher = (yield from _teacher(data, recipe, recipe.teacher, dev, state)) if recipe.distill and recipe.teacher \
        else None
    net = TrainStep(model, mpp_head)
    optimizer = torch.optim.AdamW(_param_groups(net, recipe.weight_decay), lr=recipe.lr, betas=(0.9, 0.999),
                                  fused=dev.type == "cuda")
    run = RunState(config, data, recipe, out_dir, dev, distributed, rank, world, model, mpp_head, teacher, net, net,
                   optimizer, batches, torch.Generator().manual_seed(recipe.seed * 1000 + 1 + rank), total,
                   recipe.time_budget if total is None else None, 0, 0, 0.0)
    if state is not None:
        _restore(run, state)
    mode = compile_mode(recipe, dev, data, sum(p.numel() for p in net.parameters()), distributed, total)
    run.run_net = _wrap(run, mode)
    if mode is not None:
        yield Notice(f"compiling the model (torch.compile, mode {mode}): the first steps take longer")
    run.next_eval = (math.floor(run.progress(run.elapsed) / recipe.eval_every) + 1) * recipe.eval_every
    run.window = torch.zeros(3, dtype=torch.float64, device=dev)
    if out_dir is not None and rank == 0:
        yield from _prepare_folder(out_dir)
    run.last_save = time.monotonic()
    return run


def _length(data: TrainingData, recipe: Recipe, rank: int, world: int, dev: torch.device
            ) -> tuple[Batches, int | None]:
    """This process's batches, and the run's length in steps (None when a time budget sizes it)."""
    batches = Batches(data, recipe.batch_size // world, recipe.seed, rank, world, pin_memory=dev.type == "cuda")
    if batches.steps_per_epoch < 1:
        raise ValueError(f"the training set has {len(data.train)} images, fewer than one batch of "
                         f"{recipe.batch_size}; use a smaller --batch-size")
    total = recipe.steps if recipe.steps is not None else (
        math.ceil(recipe.epochs * batches.steps_per_epoch) if recipe.epochs is not None else None)
    if total is not None and total > MAX_STEPS:
        raise ValueError(f"--epochs {recipe.epochs:g} makes {total:,} steps of {batches.steps_per_epoch:,} per "
                         f"epoch, more than {MAX_STEPS:,}; use fewer --epochs")
    return batches, total


def _model(config: ViTConfig, recipe: Recipe, init: str | None, state: TrainingState | None, dev: torch.device
           ) -> Generator[Event, None, tuple[VisionTransformer, nn.Linear | None]]:
    """The model (seeded, or started from `init`'s weights) and the MPP head, on the device."""
    torch.manual_seed(recipe.seed)
    model = VisionTransformer(config)
    if recipe.attention_init == "mimetic":
        mimetic_init(model, torch.Generator().manual_seed(recipe.seed))
    mpp_head = nn.Linear(config.embed_dim, losses.MPP_CLASSES) if recipe.task == "mpp" else None
    if init and state is None:
        skipped = _init_from(model, init)
        yield Notice(f"started from {init}" + (f"; not taken from it: {', '.join(skipped)}" if skipped else ""))
    model.to(dev)
    if mpp_head is not None:
        mpp_head.to(dev)
    return model, mpp_head


def _saved_run(out: Path, config: ViTConfig) -> TrainingState:
    """The checked training state to resume from, which must hold this config (and agree with the folder's)."""
    state = read_state(out)
    if state.config != config:  # compare as configs: defaults may grow
        raise ValueError(f"{out}: the saved run has a different model config; resume with the saved one")
    check_description(state)
    return state


def _prepare_folder(out: Path) -> Iterator[Event]:
    """Make sure `out` can be written, and remove what interrupted checkpoint writes left in it."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ValueError(f"{out}: cannot create the output folder ({error.strerror or error})") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise ValueError(f"{out}: the output folder is not writable; choose another --out")
    removed = remove_leftovers(out)
    if removed:
        yield Notice(f"removed what an interrupted checkpoint write left in {out}: {', '.join(removed)}")


def _check_setup(config: ViTConfig, data: TrainingData, recipe: Recipe, world: int) -> None:
    """Refuse a model, dataset and recipe that do not go together."""
    if recipe.batch_size % world:
        raise ValueError(f"batch size {recipe.batch_size} does not split over {world} processes")
    if config.num_classes != data.num_classes and recipe.task == "classify":
        raise ValueError(f"the model has {config.num_classes} classes but the dataset {data.num_classes}")
    if recipe.distill and not (config.distilled and config.dist_head):
        raise ValueError("distillation trains through a distillation token and its head: "
                         "use prefix_tokens='cls+dist' with dist_head=True")


def _init_from(model: VisionTransformer, source: str) -> list[str]:
    """Copy the weights of a checkpoint whose names and shapes match; the names that did not."""
    from ..checkpoints import load

    state = load(source, device="cpu").model.state_dict()
    own = model.state_dict()
    usable = {k: v for k, v in state.items() if k in own and own[k].shape == v.shape}
    model.load_state_dict(usable, strict=False)
    return sorted(set(own) - set(usable))


def _teacher(data: TrainingData, recipe: Recipe, source: str, dev: torch.device, state: TrainingState | None
             ) -> Generator[Event, None, Teacher]:
    """The distillation teacher: the saved or a freshly trained CNN, or a checkpoint that `load` opens."""
    if source == "cnn":
        cnn = SmallCNN(data.num_classes).to(dev)
        if state is not None and state.teacher is not None:
            cnn.load_state_dict(check_module(state, "teacher", cnn))
        else:
            for item in train_cnn_teacher(data, recipe, dev):
                if isinstance(item, SmallCNN):
                    cnn = item
                else:
                    yield item
        return Teacher(cnn, data.preprocessing, data.preprocessing)
    from ..checkpoints import load

    loaded = load(source, device=str(dev))
    if len(loaded.labels) != data.num_classes:
        raise ValueError(f"teacher {source} has {len(loaded.labels)} classes; "
                         f"the dataset has {data.num_classes}")
    return Teacher(loaded.model, data.preprocessing, loaded.preprocessing)


def _param_groups(net: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups: no decay for biases, norms, tokens and position tables (1-D or named so, BEiT's relative
    position bias tables included, as in timm)."""
    decay, no_decay = [], []
    for name, p in net.named_parameters():
        if not p.requires_grad:
            continue
        if p.ndim <= 1 or name.endswith("_token") or "pos_embed" in name or \
                name.endswith("relative_position_bias_table"):
            no_decay.append(p)
        else:
            decay.append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _restore(run: RunState, state: TrainingState) -> None:
    """Continue from a checked training state: weights, optimizer, counters and random states."""
    run.model.load_state_dict(check_module(state, "model", run.model))
    if run.mpp_head is not None:
        run.mpp_head.load_state_dict(check_module(state, "mpp_head", run.mpp_head))
    check_optimizer(state, run.optimizer)
    settings = [{k: v for k, v in group.items() if k != "params"} for group in run.optimizer.param_groups]
    run.optimizer.load_state_dict(state.optimizer)
    for group, ours in zip(run.optimizer.param_groups, settings, strict=True):
        group.update(ours)  # equal maths (checked); fused/foreach/capturable follow this machine, not the saved one
    run.step, run.elapsed = state.step, state.elapsed
    run.start_step = run.saved_step = run.step
    run.history = state.history
    torch.set_rng_state(state.rng["torch"])
    if run.rank == 0:
        run.gen.set_state(state.rng["generator"])
    else:  # only rank 0's generator is saved; the others restart theirs from the step
        run.gen.manual_seed(run.recipe.seed * 1000 + 1 + run.rank + 7919 * run.step)
    if run.dev.type == "cuda" and "cuda" in state.rng:
        try:
            torch.cuda.set_rng_state(state.rng["cuda"], run.dev)
        except (RuntimeError, TypeError):
            raise state.fail("rng.cuda", "is not a CUDA random-number state for this GPU") from None


def _wrap(run: RunState, mode: str | None) -> Callable[..., Any]:
    """What the training step calls: the net, under DDP with torchrun, compiled in `mode` (None: eager)."""
    wrapped: nn.Module = run.net
    if run.distributed:
        wrapped = nn.parallel.DistributedDataParallel(
            run.net, device_ids=[run.dev.index] if run.dev.type == "cuda" else None,
            find_unused_parameters=run.mpp_head is not None)
    return torch.compile(wrapped, mode=mode) if mode is not None else wrapped


def _agree(run: RunState, control: Control) -> tuple[bool, float]:
    """(stop?, progress) as rank 0 sees them: every process must agree on stopping and (time budget) on the
    learning rate."""
    stop = control.stopped
    clock = run.elapsed + time.perf_counter() - run.window_start
    if run.distributed:
        flags = torch.tensor([float(stop), clock], dtype=torch.float64, device=run.dev)
        dist.broadcast(flags, 0)
        stop, clock = bool(flags[0].item()), float(flags[1].item())
    run.clock = clock
    return stop, run.progress(clock)


def _next_batch(run: RunState) -> Batch:
    """The next training batch, starting a new epoch (or the resumed one, mid-way) when due."""
    spe = run.batches.steps_per_epoch
    if run.batch_iter is None or run.step // spe != run.epoch:
        run.epoch = run.step // spe
        run.batch_iter = run.batches.epoch(run.epoch, run.step % spe)
    return next(run.batch_iter)


def _set_lr(run: RunState, lr: float) -> None:
    run.lr = lr
    for group in run.optimizer.param_groups:
        group["lr"] = lr


def _optimize(run: RunState, images: torch.Tensor, labels: torch.Tensor) -> str | None:
    """One optimizer step on a batch, added to the window; a message if the device ran out of memory.

    Nothing here waits for the device (no .item(), no blocking copy, no boolean indexing): on a GPU the
    host queues step after step, and `_log` reads the window once per log_every steps."""
    recipe, dev = run.recipe, run.dev
    images = to_device(images, dev)
    augment = recipe.augment if recipe.augment != "auto" else "crop+flip" if run.data.augment else "none"
    if augment != "none":
        images = random_crop_flip(images, run.gen, flip=augment == "crop+flip")
    x = normalize(images, run.data.preprocessing)
    if run.probe is None:
        run.probe = x[:1].detach().clone()
    y = to_device(labels, dev)
    mask = None
    if run.mpp is not None:
        mask = to_device(losses.random_patch_mask(len(labels), run.config.num_patches, recipe.mask_ratio, run.gen),
                         dev)
        y = losses.mpp_targets(images, run.config.patch_size)  # (B, N)
    try:
        with autocast(recipe, dev):
            loss, correct, count = _forward_loss(run, x, y, mask)
        run.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if recipe.grad_clip > 0:
            nn.utils.clip_grad_norm_(list(run.net.parameters()), recipe.grad_clip)
        run.optimizer.step()
    except (MemoryError, RuntimeError) as error:
        # CUDA's OutOfMemoryError, or the CPU allocator's failure: a plain RuntimeError, told by its message
        out_of_memory = isinstance(error, (MemoryError, torch.cuda.OutOfMemoryError))
        if not out_of_memory and "can't allocate memory" not in str(error):
            raise
        return (f"out of memory at batch size {recipe.batch_size} ({recipe.batch_size // run.world} per "
                f"process) on {dev}; try --batch-size {max(1, recipe.batch_size // 2)}")
    run.window[0] += loss.detach().double() * count
    run.window[1] += correct
    run.window[2] += count
    run.window_images += len(labels) * run.world
    return None


def _forward_loss(run: RunState, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor | None
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, correct predictions, predictions counted) of one training forward, as device tensors: MPP on
    the corrupted patches, or classification (distilled when there is a teacher), accuracy from the heads'
    averaged logits."""
    recipe = run.recipe
    if mask is not None:
        return losses.masked_cross_entropy(run.run_net(x, mask, run.gen).float(), y, mask)  # (B, N, 512), (B, N)
    heads = {k: v.float() for k, v in run.run_net(x).items()}
    logits = torch.stack(list(heads.values())).mean(0)  # (B, classes)
    if run.teacher is None:
        loss = torch.stack([F.cross_entropy(h, y, label_smoothing=recipe.label_smoothing)
                            for h in heads.values()]).mean()
    elif recipe.distill == "hard":
        loss = losses.hard_distillation_loss(heads["cls"], heads["dist"], run.teacher(x), y, recipe.label_smoothing)
    else:
        loss = losses.soft_distillation_loss(heads["cls"], heads["dist"], run.teacher(x), y, recipe.distill_alpha,
                                             recipe.distill_tau, recipe.label_smoothing)
    return loss, (logits.detach().argmax(-1) == y).sum(), torch.full((), y.numel(), device=y.device)


def _log(run: RunState) -> Generator[Event, None, str | None]:
    """Close the window of steps since the last Step event: sync, NaN check, report, maybe validate and
    save. Returns why training must stop (a NaN loss), else None."""
    totals = run.window.clone()
    if run.distributed:
        dist.all_reduce(totals)
    loss_sum, correct, count = totals.tolist()  # waits for the device: the window's time is now real
    span = time.perf_counter() - run.window_start
    run.elapsed += span
    if run.distributed:  # rank 0's clock decides, so every process validates at the same steps
        clock = torch.tensor([run.elapsed], dtype=torch.float64, device=run.dev)
        dist.broadcast(clock, 0)
        run.elapsed = float(clock.item())
    if not math.isfinite(loss_sum):
        kept = (f"the last good checkpoint (step {run.saved_step}) in {run.out} is kept"
                if run.saved_step is not None else "no checkpoint was written")
        return (f"the loss became {'NaN' if math.isnan(loss_sum) else 'infinite'} by step {run.step} "
                f"(learning rate {run.lr:.3g}); training stopped and {kept}. "
                "Try a lower --lr or a smaller --batch-size.")
    if count:
        run.history.append([run.step, loss_sum / count, correct / count])
        yield Step(run.step, run.step / run.batches.steps_per_epoch, loss_sum / count, correct / count, run.lr,
                   run.window_images / max(span, 1e-9), run.eta(), run.elapsed)
        if run.probe is not None:
            yield attention_health(run.model, run.step, run.probe)
    run.window.zero_()
    run.window_images = 0
    # checkpoints only after a finite-loss check, so a saved checkpoint is always a good one
    progress, every = run.progress(run.elapsed), run.recipe.eval_every
    if progress >= run.next_eval and progress < 1.0:
        run.next_eval = (math.floor(progress / every) + 1) * every
        yield from _validate(run)
        if error := (yield from _save(run)):
            return error
    elif time.monotonic() - run.last_save >= run.recipe.checkpoint_every and progress < 1.0:
        if error := (yield from _save(run)):
            return error
    run.window_start = time.perf_counter()  # validation and saving are not training time
    return None


def _validate(run: RunState) -> Iterator[Event]:
    run.model.eval()
    forward = run.net if run.mpp is not None else run.model
    run.val = evaluate(forward, run.data, run.recipe, run.dev, run.rank, run.world, run.mpp)
    run.model.train()
    yield Validation(run.step, *run.val)


def _snapshot(run: RunState) -> Iterator[Event]:
    with torch.no_grad():
        sim = pe_similarity(run.model).patches  # (gh, gw, gh, gw), None without an additive PE
    if sim is not None:
        yield PESnapshot(run.step, sim)


def _save(run: RunState) -> Generator[Event, None, str | None]:
    """Write the checkpoint (rank 0): the native model folder and the training state for --resume.
    Returns why training must stop (the files cannot be written), else None."""
    run.last_save = time.monotonic()
    if run.rank != 0 or run.out is None:
        return None
    metrics = {"val_loss": run.val[0], "val_accuracy": run.val[1]} if run.val else {}
    extra = {"training": {"data": run.data.spec, "step": run.step, "epoch": run.step / run.batches.steps_per_epoch,
                          "recipe": run.recipe.to_dict(), "elapsed_s": run.elapsed, **metrics,
                          "history": run.history}}
    try:
        write_checkpoint(run.out, run.model, run.data.labels, run.data.preprocessing, extra,
                         _state_blob(run) if run.recipe.save_state else None, replaces_run=run.saved_step is None)
    except OSError as error:
        if run.saved_step is None:
            kept = "nothing was written and the folder is as it was. Free some space or choose another --out"
        else:
            kept = (f"its checkpoint of step {run.saved_step} is kept. Free some space, then "
                    + ("continue with --resume" if run.recipe.save_state else "train again"))
        return (f"cannot write the checkpoint of step {run.step} to {run.out} ({error.strerror or error}); "
                f"training stopped and {kept}")
    run.saved_step = run.step
    yield CheckpointSaved(run.step, run.out)
    return None


def _state_blob(run: RunState) -> dict[str, Any]:
    """What training_state.pt holds: enough to continue the run exactly."""
    rng = {"torch": torch.get_rng_state(), "generator": run.gen.get_state()}
    if run.dev.type == "cuda":
        rng["cuda"] = torch.cuda.get_rng_state(run.dev)
    blob = {"config": run.config.to_dict(), "recipe": run.recipe.to_dict(), "data": run.data.spec, "step": run.step,
            "elapsed": run.elapsed, "model": run.model.state_dict(), "optimizer": run.optimizer.state_dict(),
            "rng": rng, "history": run.history}
    if run.mpp_head is not None:
        blob["mpp_head"] = run.mpp_head.state_dict()
    if run.teacher is not None and isinstance(run.teacher.model, SmallCNN):
        blob["teacher"] = run.teacher.model.state_dict()
    return blob


def _finish(run: RunState, reason: str) -> Iterator[Event]:
    """Report the steps since the last Step event, then a final snapshot, validation and checkpoint."""
    if run.window_images:  # steps since the last Step event (a timed or stopped run)
        if error := (yield from _log(run)):
            yield Error(run.step, error)
            return
    else:
        run.elapsed = max(run.elapsed, run.clock)
    yield from _snapshot(run)
    yield from _validate(run)
    if error := (yield from _save(run)):
        yield Error(run.step, error)
        return
    run.model.eval()
    yield Finished(run.step, reason, run.elapsed, run.val[0] if run.val else None, run.val[1] if run.val else None,
                   run.out if run.out is not None and run.rank == 0 else None, run.model)
