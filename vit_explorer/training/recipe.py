"""The training recipe: one typed dataclass of hyperparameters, recorded in every checkpoint.

Every value is checked on construction (type and range), so the CLI, the app and a resumed
training state all get the same messages; a `RecipeError` names the field.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from ..errors import UserError

TASKS = ("classify", "mpp")
DISTILL = (None, "hard", "soft")
COMPILE = ("auto", "off", "default", "reduce-overhead", "max-autotune")  # "auto": see trainer._compile_mode
PRECISION = ("auto", "bf16", "fp32")  # "auto": bf16 autocast on a CUDA GPU, float32 elsewhere
AUGMENT = ("auto", "crop+flip", "crop", "none")  # "auto": the data set's own (none for the built-in sets)
ATTENTION_INIT = ("mimetic", "model")  # see init.py; "model": the model's own (timm-style) random init
MAX_STEPS = 100_000_000  # a hundred million optimizer steps: weeks on the largest preset
MAX_EPOCHS = 100_000.0
MAX_TIME_BUDGET = 7 * 24 * 3600.0  # a week of training, in seconds
MAX_BATCH = 65_536
MAX_SEED = 2**31 - 1  # seeds are multiplied (seed * 1000 + rank, seed * 1_000_003 + chunk) and must stay int64
INF = math.inf

# field: (whole number?, low, high, interval); "[)" means low <= value < high. None is allowed only for
# steps, epochs, time_budget (whichever sizes the run).
RANGES: dict[str, tuple[bool, float, float, str]] = {
    "steps": (True, 1, MAX_STEPS, "[]"),
    "epochs": (False, 0, MAX_EPOCHS, "(]"),
    "time_budget": (False, 0, MAX_TIME_BUDGET, "(]"),
    "batch_size": (True, 1, MAX_BATCH, "[]"),
    "lr": (False, 0, INF, "()"),
    "min_lr_ratio": (False, 0, 1, "[]"),
    "warmup": (False, 0, 1, "[)"),
    "weight_decay": (False, 0, INF, "[)"),
    "label_smoothing": (False, 0, 1, "[)"),
    "grad_clip": (False, 0, INF, "[)"),
    "seed": (True, 0, MAX_SEED, "[]"),
    "log_every": (True, 1, INF, "[)"),
    "eval_every": (False, 0, 1, "(]"),
    "snapshot_every": (True, 1, INF, "[)"),
    "checkpoint_every": (False, 0, INF, "[)"),
    "mask_ratio": (False, 0, 1, "()"),
    "teacher_steps": (True, 1, 1_000_000, "[]"),
    "distill_alpha": (False, 0, 1, "[]"),
    "distill_tau": (False, 0, 1_000, "(]"),
}
SIZED_BY = ("steps", "epochs", "time_budget")
FLAGS = ("save_state",)
CHOICES = {"compile": COMPILE, "precision": PRECISION, "task": TASKS, "attention_init": ATTENTION_INIT,
           "augment": AUGMENT}


class RecipeError(UserError, ValueError):
    """A recipe value of the wrong type or out of range; `field` names it, `problem` says what is allowed."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field} {problem}")
        self.field = field
        self.problem = problem


@dataclass
class Recipe:
    # how long: the first of steps / epochs / time_budget that is set (none: time_budget = 120 s)
    steps: int | None = None
    epochs: float | None = None
    time_budget: float | None = None  # seconds of training (validation and saving not counted)
    batch_size: int = 32  # global batch (split over the processes under torchrun); on one CPU thread 32 costs
    # per image what 64 does and makes twice the steps: 70-78 % against 67 % for the classroom model in 120 s
    lr: float = 1.5e-3  # peak learning rate after warm-up (best of 1e-3, 1.5e-3, 3e-3 on the classroom model)
    min_lr_ratio: float = 0.02  # the cosine decays to lr * min_lr_ratio
    # warm-up as a fraction of the run: 0.2 rather than 0.06 took the patchify classroom model at 2,100 steps (what
    # 120 s give on an idle 2-core CPU) from 81.0 % to 90.2-91.9 % on seeds 0-2 (0.15: 90.15-90.85 %); a higher
    # peak lr (2e-3) with it fell to 51 % (bench/README.md): the short warm-up was the unstable part
    warmup: float = 0.2
    weight_decay: float = 0.05  # AdamW; not applied to biases, norms, tokens, position tables
    label_smoothing: float = 0.1
    grad_clip: float = 1.0  # max gradient norm; 0 = no clipping
    seed: int = 0
    # random crops (padding H/8) and horizontal flips of the training batches: "auto" is the data set's own
    # choice (none for the built-in sets, both for CIFAR and image folders); "crop" for images flips change
    augment: str = "auto"
    attention_init: str = "mimetic"  # how a model trained from scratch starts its attention: "mimetic" or "model"
    log_every: int = 10  # steps between Step events (and NaN checks)
    eval_every: float = 0.25  # validate at each multiple of this fraction of the run, and at the end
    snapshot_every: int = 25  # steps between PE-similarity snapshots
    checkpoint_every: float = 60.0  # seconds between checkpoints (also at each validation and the end)
    save_state: bool = True  # write training_state.pt (needed by --resume)
    compile: str = "auto"  # torch.compile mode, "off", or "auto" (on a CUDA GPU, for runs long enough to repay it)
    precision: str = "auto"  # "bf16" autocast, "fp32", or "auto" (bf16 on a CUDA GPU, fp32 elsewhere)
    task: str = "classify"  # "classify" or "mpp" (masked patch prediction)
    mask_ratio: float = 0.5  # MPP: fraction of patches corrupted (80% [MASK], 10% random, 10% kept)
    distill: str | None = None  # None, "hard" or "soft" (DeiT; needs prefix_tokens='cls+dist')
    teacher: str | None = None  # a source vit_explorer.load opens, or "cnn" (a small CNN trained first)
    teacher_steps: int = 400  # steps to train the built-in CNN teacher
    distill_alpha: float = 0.5  # soft: weight of the KL term
    distill_tau: float = 1.0  # soft: temperature

    def __post_init__(self) -> None:
        given = [name for name in SIZED_BY if getattr(self, name) is not None]
        if len(given) > 1:
            raise RecipeError(given[1], f"cannot go with {given[0]}: give only one of steps, epochs and time_budget")
        if self.steps is None and self.epochs is None and self.time_budget is None:
            self.time_budget = 120.0
        for name, rule in RANGES.items():
            value = getattr(self, name)
            if value is not None or name not in SIZED_BY:
                setattr(self, name, _number(name, value, *rule))
        for name in FLAGS:
            if not isinstance(getattr(self, name), bool):
                raise RecipeError(name, f"must be true or false, got {getattr(self, name)!r}")
        for name, allowed in CHOICES.items():
            if not isinstance(getattr(self, name), str) or getattr(self, name) not in allowed:
                raise RecipeError(name, f"must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        if self.distill not in DISTILL:
            raise RecipeError("distill", f"must be 'hard', 'soft' or none, got {self.distill!r}")
        if self.teacher is not None and not (isinstance(self.teacher, str) and self.teacher.strip()):
            raise RecipeError("teacher", f"must be a source vit-explorer opens or 'cnn', got {self.teacher!r}")
        if self.distill is not None and self.teacher is None:
            raise RecipeError("teacher", "is needed for distillation (a source vit-explorer opens, or 'cnn')")
        if self.distill is not None and self.task != "classify":
            raise RecipeError("distill", "applies to classification only, not to task 'mpp'")

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
        values = {k: v for k, v in data.items() if k in names}
        # recipes saved before compile and precision had modes: compile true/false, amp true/false
        if isinstance(values.get("compile"), bool):
            values["compile"] = "default" if values["compile"] else "off"
        if "precision" not in values and isinstance(data.get("amp"), bool):
            values["precision"] = "auto" if data["amp"] else "fp32"
        return cls(**values)


def _number(name: str, value: Any, whole: bool, low: float, high: float, interval: str) -> int | float:
    """`value` as an int (whole) or a float, or a RecipeError saying what is allowed."""
    bounds = ", ".join(str(int(b)) if math.isfinite(b) and b == int(b) else str(b) for b in (low, high))
    problem = f"must be {'a whole number' if whole else 'a number'} in {interval[0]}{bounds}{interval[1]}, got "
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)):
        raise RecipeError(name, problem + shown)
    try:
        number = int(value) if whole else float(value)
    except OverflowError:  # an int too large for a float
        raise RecipeError(name, problem + shown) from None
    above = number > low if interval[0] == "(" else number >= low
    below = number < high if interval[1] == ")" else number <= high
    if not (above and below and math.isfinite(number)):
        raise RecipeError(name, problem + shown)
    return number
