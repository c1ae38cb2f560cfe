"""What a run can expect: its length from the pace of its first steps, and the validation accuracy that
measured runs of the same model on the same data reached, with where each figure was measured.

Accuracy depends on the steps a run makes (a time budget buys fewer on a busy or slower machine), so the
figures are kept by steps and a run is compared with the measured run nearest to its own length.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..models import ViTConfig, preset


@dataclass(frozen=True)
class Measured:
    """One measured run of `vit-explorer train`'s default recipe (or the Training view's)."""

    preset: str  # the model: this preset (num_classes aside)
    dataset: str  # the built-in data set
    steps: int
    accuracy: float  # validation accuracy at the end of the run
    where: str  # how and where it was measured


# the Training view's default run (scripts/training_demo.py, bench/README.md): 60 s on one thread (the app leaves
# the other core to the window) of a quiet 2-core CPU, load average 0.8-1.1
DEMO = Measured("classroom-conv", "shapes", 725, 0.8205,
                "a 60 s run in this view on a quiet 2-core CPU, scripts/training_demo.py")
MEASURED: tuple[Measured, ...] = (
    DEMO,
    # bench/README.md, `bench_classroom.py --steps N`: the steps an idle 2-core CPU makes in 120 s (or, --app,
    # about what one thread makes in 60 s), seed 0 or the lowest of seeds 0-2
    Measured("classroom-conv", "shapes", 600, 0.784, "600 steps as this view trains, bench/bench_classroom.py --app"),
    Measured("classroom-conv", "shapes", 1950, 0.9865, "120 s on an idle 2-core CPU, bench/bench_classroom.py"),
    Measured("classroom", "shapes", 2100, 0.902, "120 s on an idle 2-core CPU, the lowest of 3 seeds, "
             "bench/bench_classroom.py"),
)


def measured_for(config: ViTConfig, dataset: str, steps: int) -> Measured | None:
    """The measured run of this model (its preset's config, any number of classes) on `dataset` nearest in
    steps to a run of `steps`; None when none was measured."""
    same = [m for m in MEASURED if m.dataset == dataset
            and preset(m.preset, num_classes=config.num_classes) == config]
    return min(same, key=lambda m: abs(m.steps - steps), default=None)


def pace(first: tuple[int, float], last: tuple[int, float]) -> float | None:
    """Steps per second of training between two (step, training seconds) points; None before there are two."""
    steps, seconds = last[0] - first[0], last[1] - first[1]
    return steps / seconds if steps > 0 and seconds > 0 else None


def estimate(config: ViTConfig, dataset: str, rate: float, done: tuple[int, float], total_steps: int | None,
             budget: float | None) -> str:
    """One or two sentences: how long the run takes at `rate` steps/s (after `done` = (step, seconds)), and the
    validation accuracy to expect from the measured run nearest to its length."""
    step, elapsed = done
    if total_steps is not None:
        steps = total_steps
        left = max(total_steps - step, 0) / rate
        length = (f"{rate:.1f} steps/s here: {total_steps:,} steps take about {elapsed + left:.0f} s "
                  f"({left:.0f} s left).")
    else:
        assert budget is not None, "a run is sized by steps or by a time budget"
        steps = round(step + rate * max(budget - elapsed, 0.0))
        length = f"{rate:.1f} steps/s here: about {steps:,} steps in the {budget:.0f} s budget."
    ref = measured_for(config, dataset, steps)
    if ref is None:
        return f"{length} No measured run of this model on {dataset} to say what accuracy to expect."
    fewer = " This run makes fewer steps, so expect less." if steps < 0.8 * ref.steps else ""
    more = " This run makes more steps, so expect as much or more." if steps > 1.25 * ref.steps else ""
    return (f"{length} Measured: {ref.accuracy:.0%} validation accuracy after {ref.steps:,} steps "
            f"({ref.where}).{fewer}{more}")
