"""How many CPU threads a training run uses, for `vit-explorer train` and the app's Training view alike.

torch's default (one thread per core) trains a classroom model slower the busier the machine: on a 2-core PC
with other work running, one thread made 10-16x more steps than two (167 vs 16 in 20 s), because every step
of a small model waits for the slowest of its threads; on the same PC idle, two threads made 1.7x the steps of
one. So `auto` measures a few steps at each count from 1 to MAX_AUTO on the machine as it is and takes the
fastest (the fewest threads within TIE of it): the default of `vit-explorer train` (one process). The app's
Training view takes one thread (DEFAULT), leaving the other cores to the window; a number is taken as given. The
choice is said when the run starts. On a GPU the threads are left as they are.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch
from torch import nn

from ..errors import UserError
from ..models import VisionTransformer, ViTConfig

DEFAULT = 1  # threads of a CPU run unless told otherwise (the app's; the train command's is "auto")
ENV = "VIT_EXPLORER_THREADS"  # the setting of the app and the command alike: a number or "auto"
MAX_AUTO = 4  # `auto` tries 1 .. min(cores, MAX_AUTO)
TIE = 0.10  # counts within this share of the fastest tie: the fewest threads win (they leave the rest free)
AUTO_STEPS = 4  # timed steps per count and round (after one untimed), on a copy of the model
AUTO_ROUNDS = 3  # rounds the counts take turns in, each count's best kept
MAX_THREADS = 256


class ThreadsError(UserError, ValueError):
    """A thread setting that is neither a whole number from 1 nor 'auto'."""


def parse(value: str) -> int | str:
    """A setting as given on the command line or in VIT_EXPLORER_THREADS: "auto" or a whole number from 1."""
    text = value.strip().lower()
    if text == "auto":
        return "auto"
    if text.isdigit() and 1 <= int(text) <= MAX_THREADS:
        return int(text)
    raise ThreadsError(f"{value[:40]!r} is not a number of threads from 1 to {MAX_THREADS} or 'auto'")


def setting(given: str | None = None, default: int | str = DEFAULT) -> int | str:
    """The setting in force: `given` (--threads), else VIT_EXPLORER_THREADS, else `default`."""
    for value, where in ((given, "--threads"), (os.environ.get(ENV), ENV)):
        if value:
            try:
                return parse(value)
            except ThreadsError as error:
                raise ThreadsError(f"{where}: {error}") from None
    return default


@dataclass(frozen=True)
class Choice:
    threads: int | None  # None: left as they are (a GPU run)
    reason: str  # said when the run starts
    measured: dict[int, float]  # steps/s per thread count, when `auto` measured them


def measure(config: ViTConfig, batch_size: int, counts: list[int], steps: int = AUTO_STEPS,
            rounds: int = AUTO_ROUNDS) -> dict[int, float]:
    """Training steps per second on the CPU at each thread count: forward, backward and an AdamW step of a fresh
    copy of the model on random images of the run's size (the run's own model and data are not touched). The
    counts take turns for `rounds` rounds and each keeps its best: a moment's load falls on one turn, not on a
    count (one pass of four steps each once took one thread on an idle machine, where two made 1.4x the steps)."""
    model = VisionTransformer(config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    images = torch.randn(batch_size, config.in_chans, *config.image_size)  # (B, C, H, W)
    labels = torch.randint(0, max(config.num_classes, 1), (batch_size,))
    loss_fn = nn.CrossEntropyLoss()
    before = torch.get_num_threads()
    rates: dict[int, float] = {}
    try:
        for _ in range(rounds):
            for count in counts:
                torch.set_num_threads(count)
                for step in range(steps + 1):
                    if step == 1:  # the first step of a turn warms its threads up
                        start = time.perf_counter()
                    optimizer.zero_grad(set_to_none=True)
                    out = model(images)
                    loss = loss_fn(out, labels) if config.num_classes else out.float().pow(2).mean()
                    loss.backward()
                    optimizer.step()
                rates[count] = max(rates.get(count, 0.0), steps / max(time.perf_counter() - start, 1e-9))
    finally:
        torch.set_num_threads(before)
    return rates


def choose(given: str | None, config: ViTConfig, batch_size: int, device: torch.device | str,
           default: int | str = DEFAULT) -> Choice:
    """The threads a run on `device` uses, and why (ThreadsError for a bad setting); `default`: the setting when
    neither --threads nor VIT_EXPLORER_THREADS gives one."""
    if torch.device(device).type != "cpu":
        return Choice(None, "", {})
    wanted = setting(given, default)
    if isinstance(wanted, int):
        source = "--threads" if given else ENV if os.environ.get(ENV) else ""
        why = f"{source} {wanted}" if source else (
            "the default on a CPU: a small model trains fastest on one thread, the more so on a busy machine; "
            "--threads N, or auto to measure")
        return Choice(wanted, f"training on {wanted} CPU thread{'s' * (wanted > 1)} ({why})", {})
    counts = list(range(1, min(os.cpu_count() or 1, MAX_AUTO) + 1))
    rates = measure(config, batch_size, counts)
    fastest = max(rates.values())
    best = min(count for count, rate in rates.items() if rate >= (1 - TIE) * fastest)
    said = ", ".join(f"{count}: {rate:.1f}" for count, rate in rates.items())
    source = "--threads auto" if given else f"{ENV} auto" if os.environ.get(ENV) else "auto, the default"
    return Choice(best, f"training on {best} CPU thread{'s' * (best > 1)} ({source}: the fastest measured here, "
                        f"steps/s {said}; --threads N to fix it)", rates)


def apply(choice: Choice) -> None:
    """Set torch's threads for the run (in the thread that trains: each keeps its own)."""
    if choice.threads is not None:
        torch.set_num_threads(choice.threads)
