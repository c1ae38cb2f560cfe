"""The training recipe: one typed dataclass of hyperparameters, recorded in every checkpoint."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

TASKS = ("classify", "mpp")
DISTILL = (None, "hard", "soft")


@dataclass
class Recipe:
    # how long: the first of steps / epochs / time_budget that is set (none: time_budget = 120 s)
    steps: int | None = None
    epochs: float | None = None
    time_budget: float | None = None  # seconds of training (validation and saving not counted)
    batch_size: int = 64  # global batch (split over the processes under torchrun)
    lr: float = 1.5e-3  # peak learning rate after warm-up (best of 1e-3, 1.5e-3, 3e-3 on the classroom model)
    min_lr_ratio: float = 0.02  # the cosine decays to lr * min_lr_ratio
    warmup: float = 0.06  # warm-up as a fraction of the run
    weight_decay: float = 0.05  # AdamW; not applied to biases, norms, tokens, position tables
    label_smoothing: float = 0.1
    grad_clip: float = 1.0  # max gradient norm; 0 = no clipping
    seed: int = 0
    log_every: int = 10  # steps between Step events (and NaN checks)
    eval_every: float = 0.25  # validate at each multiple of this fraction of the run, and at the end
    snapshot_every: int = 25  # steps between PE-similarity snapshots
    checkpoint_every: float = 60.0  # seconds between checkpoints (also at each validation and the end)
    save_state: bool = True  # write training_state.pt (needed by --resume)
    compile: bool = False  # torch.compile the model (CUDA)
    amp: bool = True  # bf16 autocast on CUDA
    task: str = "classify"  # "classify" or "mpp" (masked patch prediction)
    mask_ratio: float = 0.5  # MPP: fraction of patches corrupted (80% [MASK], 10% random, 10% kept)
    distill: str | None = None  # None, "hard" or "soft" (DeiT; needs prefix_tokens='cls+dist')
    teacher: str | None = None  # a source vit_explorer.load opens, or "cnn" (a small CNN trained first)
    teacher_steps: int = 400  # steps to train the built-in CNN teacher
    distill_alpha: float = 0.5  # soft: weight of the KL term
    distill_tau: float = 1.0  # soft: temperature

    def __post_init__(self) -> None:
        def need(ok: bool, message: str) -> None:
            if not ok:
                raise ValueError(message)

        need(sum(x is not None for x in (self.steps, self.epochs, self.time_budget)) <= 1,
             "give only one of steps, epochs and time budget")
        if self.steps is None and self.epochs is None and self.time_budget is None:
            self.time_budget = 120.0
        need(self.steps is None or self.steps >= 1, f"steps must be at least 1, got {self.steps}")
        need(self.epochs is None or self.epochs > 0, f"epochs must be > 0, got {self.epochs}")
        need(self.time_budget is None or self.time_budget > 0, f"time budget must be > 0, got {self.time_budget}")
        need(self.batch_size >= 1, f"batch size must be at least 1, got {self.batch_size}")
        need(self.lr > 0 and math.isfinite(self.lr), f"learning rate must be > 0, got {self.lr}")
        need(0 <= self.warmup < 1, f"warm-up fraction must be in [0, 1), got {self.warmup}")
        need(0 < self.eval_every <= 1, f"eval_every must be in (0, 1], got {self.eval_every}")
        need(self.log_every >= 1 and self.snapshot_every >= 1, "log_every and snapshot_every must be >= 1")
        need(self.task in TASKS, f"task must be one of {TASKS}, got {self.task!r}")
        need(self.distill in DISTILL, f"distillation must be 'hard', 'soft' or none, got {self.distill!r}")
        need(self.distill is None or self.teacher is not None, "distillation needs a teacher (a source or 'cnn')")
        need(self.distill is None or self.task == "classify", "distillation applies to classification only")
        need(0 < self.mask_ratio < 1, f"mask ratio must be in (0, 1), got {self.mask_ratio}")
        need(self.distill_tau > 0 and 0 <= self.distill_alpha <= 1, "need tau > 0 and 0 <= alpha <= 1")

    def lr_at(self, progress: float) -> float:
        """Linear warm-up to `lr`, then cosine decay to lr * min_lr_ratio; progress in [0, 1]."""
        progress = min(max(progress, 0.0), 1.0)
        if progress < self.warmup:
            return self.lr * progress / self.warmup
        t = (progress - self.warmup) / (1 - self.warmup)
        floor = self.lr * self.min_lr_ratio
        return floor + (self.lr - floor) * 0.5 * (1 + math.cos(math.pi * t))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Recipe:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})
