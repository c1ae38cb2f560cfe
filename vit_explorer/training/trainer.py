"""The trainer: `train(...)` is a generator of events (see events.py) that the CLI and the app
consume. The consumer stops it with `Control.stop()` (a checkpoint is written first) or by
closing the generator, and pauses it with `Control.pause()`.

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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler

from ..analysis.pe import pe_similarity
from ..checkpoints.native import save_native, write_atomic
from ..data.datasets import TrainingData, normalize, random_crop_flip
from ..models import VisionTransformer, ViTConfig
from . import losses
from .events import CheckpointSaved, Control, Error, Event, Finished, Notice, PESnapshot, Started, Step, Validation
from .recipe import Recipe
from .teacher import SmallCNN, Teacher

STATE_NAME = "training_state.pt"


def pick_device(device: str | None = None) -> torch.device:
    """The requested device, else this process's GPU under torchrun, else cuda:0, else the CPU."""
    if device:
        return torch.device(device)
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")


def load_state(out: Path) -> dict[str, Any]:
    """The training state saved in `out` (for --resume), with a clear error when there is none."""
    path = Path(out) / STATE_NAME
    if not path.is_file():
        raise ValueError(f"{path}: no training state to resume from (was the run started with this --out?)")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - any unpickling failure means the file is unusable
        raise ValueError(f"{path}: cannot read the training state ({error})") from None


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


def _param_groups(modules: list[nn.Module], weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups: no decay for biases, norms, tokens and position tables (1-D or named so)."""
    decay, no_decay = [], []
    for module in modules:
        for name, p in module.named_parameters():
            if not p.requires_grad:
                continue
            if p.ndim <= 1 or name.endswith("_token") or "pos_embed" in name:
                no_decay.append(p)
            else:
                decay.append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _identity(batch: Any) -> Any:
    return batch


class _Batches:
    """Batches of an epoch in the seeded sampler order, from a position inside the epoch."""

    def __init__(self, data: TrainingData, batch: int, seed: int, rank: int, world: int) -> None:
        self.sampler = DistributedSampler(data.train, num_replicas=world, rank=rank, shuffle=True, seed=seed,
                                          drop_last=True)
        self.dataset = data.train
        self.batch = batch
        self.steps_per_epoch = len(self.sampler) // batch
        self.workers = 0 if hasattr(data.train, "images") else min(4, os.cpu_count() or 1)

    def epoch(self, epoch: int, start: int) -> Iterator[Any]:
        self.sampler.set_epoch(epoch)
        order = list(self.sampler)
        chunks = [order[i * self.batch:(i + 1) * self.batch] for i in range(start, self.steps_per_epoch)]
        # its own generator: a DataLoader otherwise draws its worker seed from the global RNG (dropout's)
        return iter(DataLoader(self.dataset, batch_sampler=chunks, collate_fn=_identity, num_workers=self.workers,
                               generator=torch.Generator().manual_seed(epoch)))


def _train_cnn_teacher(data: TrainingData, recipe: Recipe, dev: torch.device) -> Iterator[Event | SmallCNN]:
    """Train the built-in CNN teacher on full batches (every process identically); yields notices, then it."""
    yield Notice(f"training the built-in CNN teacher for {recipe.teacher_steps} steps")
    torch.manual_seed(recipe.seed + 17)
    cnn = SmallCNN(data.num_classes).to(dev)
    opt = torch.optim.AdamW(cnn.parameters(), lr=2e-3, weight_decay=0.05)
    batches = _Batches(data, min(recipe.batch_size, len(data.train)), recipe.seed + 17, 0, 1)
    gen = torch.Generator().manual_seed(recipe.seed + 17)
    it, epoch = batches.epoch(0, 0), 0
    for step in range(recipe.teacher_steps):
        try:
            images, labels, _ = next(it)
        except StopIteration:
            epoch += 1
            it = batches.epoch(epoch, 0)
            images, labels, _ = next(it)
        if data.augment:
            images = random_crop_flip(images, gen)
        for group in opt.param_groups:
            group["lr"] = 2e-3 * 0.5 * (1 + math.cos(math.pi * step / recipe.teacher_steps))
        loss = F.cross_entropy(cnn(normalize(images.to(dev), data.preprocessing)), labels.to(dev))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    _, acc = _evaluate(lambda x: cnn(x), data, recipe, dev, 0, 1)
    yield Notice(f"CNN teacher: validation accuracy {acc:.1%}")
    yield cnn.eval()


@torch.no_grad()
def _evaluate(forward: Any, data: TrainingData, recipe: Recipe, dev: torch.device, rank: int, world: int,
              mpp: tuple[int, float] | None = None) -> tuple[float, float]:
    """(mean loss, accuracy) on the validation set, summed over processes. mpp = (patch size, ratio)."""
    sampler = DistributedSampler(data.val, num_replicas=world, rank=rank, shuffle=False, drop_last=False)
    loader = DataLoader(data.val, sampler=sampler, batch_size=max(1, recipe.batch_size // world),
                        collate_fn=_identity, num_workers=0, generator=torch.Generator())
    gen = torch.Generator().manual_seed(recipe.seed + 2)  # the same masks at every validation
    totals = torch.zeros(3, dtype=torch.float64)  # loss sum, correct, count
    for images, labels, _ in loader:
        if not len(labels):
            continue
        x = normalize(images.to(dev), data.preprocessing)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda" and recipe.amp):
            if mpp is None:
                logits = forward(x).float()
                y = labels.to(dev)
            else:
                mask = losses.random_patch_mask(len(labels), x.shape[2] * x.shape[3] // mpp[0] ** 2, mpp[1], gen)
                logits = forward(x, mask.to(dev), gen).float()[mask.to(dev)]  # (M, 512)
                y = losses.mpp_targets(images, mpp[0])[mask].to(dev)
        totals += torch.tensor([F.cross_entropy(logits, y, reduction="sum").item(),
                                (logits.argmax(-1) == y).sum().item(), y.numel()], dtype=torch.float64)
    if world > 1:
        reduced = totals.to(dev)
        dist.all_reduce(reduced)
        totals = reduced.cpu()
    count = max(totals[2].item(), 1.0)
    return totals[0].item() / count, totals[1].item() / count


def _init_from(model: VisionTransformer, source: str) -> list[str]:
    """Copy the weights of a checkpoint whose names and shapes match; the names that did not."""
    from ..checkpoints import load

    state = load(source, device="cpu").model.state_dict()
    own = model.state_dict()
    usable = {k: v for k, v in state.items() if k in own and own[k].shape == v.shape}
    model.load_state_dict(usable, strict=False)
    return sorted(set(own) - set(usable))


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
    out_dir = Path(out) if out is not None else None
    distributed = dist.is_available() and dist.is_initialized()
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    dev = pick_device(device)
    if recipe.batch_size % world:
        raise ValueError(f"batch size {recipe.batch_size} does not split over {world} processes")
    if config.num_classes != data.num_classes and recipe.task == "classify":
        raise ValueError(f"the model has {config.num_classes} classes but the dataset {data.num_classes}")
    if recipe.distill and not (config.distilled and config.dist_head):
        raise ValueError("distillation trains through a distillation token and its head: "
                         "use prefix_tokens='cls+dist' with dist_head=True")
    local_batch = recipe.batch_size // world
    batches = _Batches(data, local_batch, recipe.seed, rank, world)
    spe = batches.steps_per_epoch
    if spe < 1:
        raise ValueError(f"the training set has {len(data.train)} images, fewer than one batch of "
                         f"{recipe.batch_size}; use a smaller --batch-size")
    state = load_state(out_dir) if resume and out_dir is not None else None
    if state is not None and ViTConfig.from_dict(state["config"]) != config:  # compare as configs: defaults may grow
        raise ValueError(f"{out_dir}: the saved run has a different model config; resume with the saved one")

    torch.manual_seed(recipe.seed)
    model = VisionTransformer(config)
    mpp_head = nn.Linear(config.embed_dim, losses.MPP_CLASSES) if recipe.task == "mpp" else None
    if init and state is None:
        skipped = _init_from(model, init)
        yield Notice(f"started from {init}" + (f"; not taken from it: {', '.join(skipped)}" if skipped else ""))
    model.to(dev)
    if mpp_head is not None:
        mpp_head.to(dev)

    teacher: Teacher | None = None
    if recipe.distill:
        if recipe.teacher == "cnn":
            cnn = SmallCNN(data.num_classes).to(dev)
            if state is not None and "teacher" in state:
                cnn.load_state_dict(state["teacher"])
            else:
                for item in _train_cnn_teacher(data, recipe, dev):
                    if isinstance(item, SmallCNN):
                        cnn = item
                    else:
                        yield item
            teacher = Teacher(cnn, data.preprocessing, data.preprocessing)
        else:
            from ..checkpoints import load

            loaded = load(recipe.teacher, device=str(dev))
            if len(loaded.labels) != data.num_classes:
                raise ValueError(f"teacher {recipe.teacher} has {len(loaded.labels)} classes; "
                                 f"the dataset has {data.num_classes}")
            teacher = Teacher(loaded.model, data.preprocessing, loaded.preprocessing)

    net = TrainStep(model, mpp_head)
    modules = [model] + ([mpp_head] if mpp_head is not None else [])
    optimizer = torch.optim.AdamW(_param_groups(modules, recipe.weight_decay), lr=recipe.lr, betas=(0.9, 0.999),
                                  fused=dev.type == "cuda")
    gen = torch.Generator().manual_seed(recipe.seed * 1000 + 1 + rank)  # crops and masks
    step, elapsed = 0, 0.0
    history: list[list[float]] = []  # [step, loss, accuracy] of every Step event: the loss curve
    if state is not None:
        model.load_state_dict(state["model"])
        if mpp_head is not None:
            mpp_head.load_state_dict(state["mpp_head"])
        optimizer.load_state_dict(state["optimizer"])
        step, elapsed = int(state["step"]), float(state["elapsed"])
        history = [list(row) for row in state.get("history", [])]
        torch.set_rng_state(state["rng"]["torch"])
        if rank == 0:
            gen.set_state(state["rng"]["generator"])
        else:  # only rank 0's generator is saved; the others restart theirs from the step
            gen.manual_seed(recipe.seed * 1000 + 1 + rank + 7919 * step)
        if dev.type == "cuda" and "cuda" in state["rng"]:
            torch.cuda.set_rng_state(state["rng"]["cuda"], dev)

    run_net: nn.Module = net
    if distributed:
        run_net = nn.parallel.DistributedDataParallel(net, device_ids=[dev.index] if dev.type == "cuda" else None,
                                                      find_unused_parameters=mpp_head is not None)
    if recipe.compile:
        run_net = torch.compile(run_net)

    total = recipe.steps if recipe.steps is not None else (
        math.ceil(recipe.epochs * spe) if recipe.epochs is not None else None)
    budget = recipe.time_budget if total is None else None

    def progress(step: int, elapsed: float) -> float:
        return step / total if total is not None else elapsed / budget

    mpp = (config.patch_size, recipe.mask_ratio) if mpp_head is not None else None
    amp = dev.type == "cuda" and recipe.amp
    yield Started(total, spe, step, str(dev), world, sum(p.numel() for m in modules for p in m.parameters()),
                  budget)

    val: tuple[float, float] | None = None
    next_eval = (math.floor(progress(step, elapsed) / recipe.eval_every) + 1) * recipe.eval_every
    last_save = time.monotonic()
    saved_step = step if state is not None else None
    window = torch.zeros(3, dtype=torch.float64, device=dev)  # loss sum, correct, count since the last Step
    window_images = 0

    def save() -> Iterator[Event]:
        nonlocal last_save, saved_step
        last_save = time.monotonic()
        if rank != 0 or out_dir is None:
            return
        metrics = {"val_loss": val[0], "val_accuracy": val[1]} if val else {}
        if recipe.save_state:
            rng = {"torch": torch.get_rng_state(), "generator": gen.get_state()}
            if dev.type == "cuda":
                rng["cuda"] = torch.cuda.get_rng_state(dev)
            blob = {"config": config.to_dict(), "recipe": recipe.to_dict(), "data": data.spec, "step": step,
                    "elapsed": elapsed, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "rng": rng, "history": history}
            if mpp_head is not None:
                blob["mpp_head"] = mpp_head.state_dict()
            if teacher is not None and isinstance(teacher.model, SmallCNN):
                blob["teacher"] = teacher.model.state_dict()
            write_atomic(out_dir / STATE_NAME, lambda tmp: torch.save(blob, tmp))
        extra = {"training": {"data": data.spec, "step": step, "epoch": step / spe, "recipe": recipe.to_dict(),
                              "elapsed_s": elapsed, **metrics, "history": history}}
        save_native(out_dir, model, data.labels, data.preprocessing, extra)
        saved_step = step
        yield CheckpointSaved(step, out_dir)

    def validate() -> Iterator[Event]:
        nonlocal val
        model.eval()
        fwd = net if mpp is not None else model
        val = _evaluate(fwd, data, recipe, dev, rank, world, mpp)
        model.train()
        yield Validation(step, *val)

    def snapshot() -> Iterator[Event]:
        with torch.no_grad():
            sim = pe_similarity(model).patches  # (gh, gw, gh, gw), None without an additive PE
        if sim is not None:
            yield PESnapshot(step, sim)

    def log() -> Iterator[Event]:
        """Close the window of steps since the last Step event: sync, NaN check, report, maybe validate/save."""
        nonlocal elapsed, window_start, window_images, next_eval, nan_message
        totals = window.clone()
        if distributed:
            dist.all_reduce(totals)
        loss_sum, correct, count = totals.tolist()  # waits for the device: the window's time is now real
        span = time.perf_counter() - window_start
        elapsed += span
        if distributed:  # rank 0's clock decides, so every process validates at the same steps
            clock = torch.tensor([elapsed], dtype=torch.float64, device=dev)
            dist.broadcast(clock, 0)
            elapsed = float(clock.item())
        if not math.isfinite(loss_sum):
            kept = (f"the last good checkpoint (step {saved_step}) in {out_dir} is kept"
                    if saved_step is not None else "no checkpoint was written")
            nan_message = (f"the loss became {'NaN' if math.isnan(loss_sum) else 'infinite'} by step {step} "
                           f"(learning rate {lr:.3g}); training stopped and {kept}. "
                           "Try a lower --lr or a smaller --batch-size.")
            return
        if count:
            if total is not None:
                eta = (total - step) * elapsed / max(step - (int(state["step"]) if state else 0), 1)
            else:
                eta = max(budget - elapsed, 0.0)
            history.append([step, loss_sum / count, correct / count])
            yield Step(step, step / spe, loss_sum / count, correct / count, lr, window_images / max(span, 1e-9),
                       eta, elapsed)
        window.zero_()
        window_images = 0
        # checkpoints only after a finite-loss check, so a saved checkpoint is always a good one
        if progress(step, elapsed) >= next_eval and progress(step, elapsed) < 1.0:
            next_eval = (math.floor(progress(step, elapsed) / recipe.eval_every) + 1) * recipe.eval_every
            yield from validate()
            yield from save()
        elif time.monotonic() - last_save >= recipe.checkpoint_every and progress(step, elapsed) < 1.0:
            yield from save()
        window_start = time.perf_counter()  # validation and saving are not training time

    yield from snapshot()
    model.train()
    epoch, it = step // spe, batches.epoch(step // spe, step % spe)
    reason = "completed"
    nan_message: str | None = None
    lr = recipe.lr_at(progress(step, elapsed))
    window_start = time.perf_counter()
    while True:
        # every process must agree on stopping and (time budget) on the learning rate: rank 0 decides
        stop = control.stopped
        clock = elapsed + time.perf_counter() - window_start
        if distributed:
            flags = torch.tensor([float(stop), clock], dtype=torch.float64, device=dev)
            dist.broadcast(flags, 0)
            stop, clock = bool(flags[0].item()), float(flags[1].item())
        p = progress(step, clock)
        if p >= 1.0 or stop:
            reason = "stopped" if stop and p < 1.0 else ("time budget" if budget else "completed")
            break
        if control.paused:
            paused_at = time.perf_counter()
            control.wait_while_paused()
            window_start += time.perf_counter() - paused_at  # a pause is not training time
            continue

        if step // spe != epoch:
            epoch = step // spe
            it = batches.epoch(epoch, 0)
        images, labels, skipped = next(it)
        for message in skipped:
            yield Notice(f"skipped an unreadable image: {message}")
        lr = recipe.lr_at(p)
        for group in optimizer.param_groups:
            group["lr"] = lr
        if len(labels):
            if data.augment:
                images = random_crop_flip(images, gen)
            x = normalize(images.to(dev, non_blocking=True), data.preprocessing)
            y = labels.to(dev, non_blocking=True)
            mask = None
            if mpp is not None:
                mask = losses.random_patch_mask(len(labels), config.num_patches, recipe.mask_ratio, gen)
                y = losses.mpp_targets(images, config.patch_size).to(dev)  # (B, N)
            try:
                with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
                    out = run_net(x, None if mask is None else mask.to(dev), gen)
                    if mpp is not None:
                        logits = out.float()[mask.to(dev)]  # (M, 512), corrupted patches only
                        y = y[mask.to(dev)]
                        loss = F.cross_entropy(logits, y)
                    else:
                        heads = {k: v.float() for k, v in out.items()}
                        logits = sum(heads.values()) / len(heads)
                        if teacher is not None:
                            t_logits = teacher(x)
                            if recipe.distill == "hard":
                                loss = losses.hard_distillation_loss(heads["cls"], heads["dist"], t_logits, y,
                                                                     recipe.label_smoothing)
                            else:
                                loss = losses.soft_distillation_loss(heads["cls"], heads["dist"], t_logits, y,
                                                                     recipe.distill_alpha, recipe.distill_tau,
                                                                     recipe.label_smoothing)
                        else:
                            loss = sum(F.cross_entropy(h, y, label_smoothing=recipe.label_smoothing)
                                       for h in heads.values()) / len(heads)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if recipe.grad_clip > 0:
                    nn.utils.clip_grad_norm_([p for m in modules for p in m.parameters()], recipe.grad_clip)
                optimizer.step()
            except torch.cuda.OutOfMemoryError:
                yield Error(step, f"CUDA out of memory at batch size {recipe.batch_size} ({local_batch} per process) "
                                  f"on {dev}; try --batch-size {max(1, recipe.batch_size // 2)}")
                return
            window += torch.stack([loss.detach().double() * y.numel(),
                                   (logits.detach().argmax(-1) == y).sum().double(),
                                   torch.tensor(float(y.numel()), dtype=torch.float64, device=dev)])
            window_images += len(labels) * world
        step += 1

        # a step-sized run ends on a step count every process knows; a timed one stops at the loop top
        if step % recipe.log_every == 0 or (total is not None and step >= total):
            yield from log()
            if nan_message:
                yield Error(step, nan_message)
                return
        if step % recipe.snapshot_every == 0:
            yield from snapshot()

    if window_images:  # steps since the last Step event (a timed or stopped run)
        yield from log()
        if nan_message:
            yield Error(step, nan_message)
            return
    else:
        elapsed = max(elapsed, clock)
    yield from snapshot()
    yield from validate()
    yield from save()
    model.eval()
    yield Finished(step, reason, elapsed, val[0] if val else None, val[1] if val else None,
                   out_dir if out_dir is not None and rank == 0 else None, model)
