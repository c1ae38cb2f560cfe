"""What the trainer reports, as plain dataclasses; the CLI prints them, the app draws them."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from torch import nn


@dataclass
class Started:
    total_steps: int | None  # None when the run is sized by a time budget
    steps_per_epoch: int
    start_step: int  # > 0 when resumed
    device: str
    world_size: int
    num_parameters: int
    time_budget: float | None


@dataclass
class Step:
    step: int  # optimizer steps done
    epoch: float
    loss: float  # mean over the steps since the previous Step event
    accuracy: float  # the same window; MPP: accuracy on corrupted patches
    lr: float
    images_per_s: float
    eta_s: float | None
    elapsed_s: float  # training time (validation, saving and pauses not counted)


@dataclass
class Validation:
    step: int
    loss: float
    accuracy: float


@dataclass
class PESnapshot:
    step: int
    similarity: np.ndarray  # (gh, gw, gh, gw): cosine of patch PE (i, j) with every patch PE


@dataclass
class AttentionHealth:
    """Attention health on one fixed training image at a logged step (training/health.py)."""

    step: int
    entropy: np.ndarray  # (blocks,) nats, mean over heads and queries; uniform attention: max_entropy
    max_entropy: float  # log T
    max_norm: np.ndarray  # (blocks,) the largest token norm of each block's output
    cls_attention: np.ndarray  # (gh, gw) the last block's [CLS] attention to the patches, mean over heads


@dataclass
class CheckpointSaved:
    step: int
    path: Path


@dataclass
class Notice:
    message: str  # something the user should know (a skipped image, a teacher's accuracy)


@dataclass
class Finished:
    step: int
    reason: str  # "completed", "time budget" or "stopped"
    elapsed_s: float
    val_loss: float | None
    val_accuracy: float | None
    path: Path | None  # the native checkpoint folder, if one was written
    model: nn.Module = field(repr=False)  # the trained VisionTransformer (eval mode)


@dataclass
class Error:
    step: int
    message: str  # why training stopped (NaN/Inf loss, out of memory); the last checkpoint is kept


Event = Started | Step | Validation | PESnapshot | AttentionHealth | CheckpointSaved | Notice | Finished | Error


class Control:
    """Lets a consumer on another thread stop or pause a running trainer."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._running = threading.Event()
        self._running.set()

    def stop(self) -> None:
        self._stop.set()
        self._running.set()

    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    def wait_while_paused(self) -> None:
        while not self._running.wait(timeout=0.1):  # a timed wait keeps Ctrl+C responsive
            pass
