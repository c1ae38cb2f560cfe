"""Training steps per second of `vit-explorer train`'s defaults with the CPU threads it chooses (its default, auto,
and --threads auto again: two measurements), against 1 and 2 threads, on the machine as it is and with BUSY
processes spinning beside it. The chosen setting should be within 10 % of the faster of 1 and 2 threads in both
(issue 27).

    python bench/bench_threads.py [--steps 40] [--rounds 3] [--busy 2] [--json]

Each round trains every setting once, in turn, so a change in the machine's load falls on all of them alike; the
rate is the median over rounds of steps / training seconds as the trainer counts them. The load average is
recorded with the numbers: "quiet" is only as quiet as the machine is.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
from typing import Any

import torch

from vit_explorer.commands.train import add_arguments, build
from vit_explorer.training import events as ev
from vit_explorer.training import threads
from vit_explorer.training.trainer import train

WITHIN = 0.10


def _spin() -> None:
    while True:
        pass


def run_args(steps: int) -> tuple[Any, Any, Any]:
    """(config, data, recipe) of `vit-explorer train --steps STEPS` on the CPU, its defaults otherwise."""
    parser = argparse.ArgumentParser()
    add_arguments(parser, "train")
    return build(parser.parse_args(["--steps", str(steps), "--no-state", "--out", "unused", "--device", "cpu"]))


def rate(count: int, run: tuple[Any, Any, Any]) -> float:
    """Steps per second of the run at `count` threads."""
    config, data, recipe = run
    torch.set_num_threads(count)
    for event in train(config, data, recipe, None, device="cpu"):
        if isinstance(event, ev.Finished):
            return event.step / max(event.elapsed_s, 1e-9)
        if isinstance(event, ev.Error):
            raise RuntimeError(event.message)
    raise RuntimeError("training ended without a Finished event")


def chosen(setting: str | None, run: tuple[Any, Any, Any]) -> int:
    """The threads the train command takes with this --threads (None: its default, auto in one process)."""
    config, _, recipe = run
    choice = threads.choose(setting, config, recipe.batch_size, "cpu", default="auto")
    assert choice.threads is not None
    return choice.threads


def condition(busy: int, run: tuple[Any, Any, Any], rounds: int) -> dict[str, Any]:
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(busy)]
    for process in spinners:
        process.start()
    try:
        picks = {"default": chosen(None, run), "auto": chosen("auto", run)}
        counts = sorted({1, 2, *picks.values()})
        measured: dict[int, list[float]] = {count: [] for count in counts}
        for _ in range(rounds):
            for count in counts:
                measured[count].append(rate(count, run))
        load = os.getloadavg()[0]
    finally:
        for process in spinners:
            process.terminate()
            process.join()
    rates = {count: statistics.median(values) for count, values in measured.items()}
    faster = max(rates[1], rates[2])
    return {"busy_processes": busy, "load_average_1min": round(load, 2), "steps_per_s": {
        str(count): round(value, 2) for count, value in rates.items()},
        "chosen": picks, "within": {name: rates[count] >= (1 - WITHIN) * faster for name, count in picks.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--busy", type=int, default=2, help="spinning processes in the busy condition")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    run = run_args(args.steps)
    results = [condition(0, run, args.rounds), condition(args.busy, run, args.rounds)]
    if args.json:
        print(json.dumps({"cores": os.cpu_count(), "steps": args.steps, "rounds": args.rounds, "conditions": results},
                         indent=2))
        return
    for r in results:
        where = f"with {r['busy_processes']} busy processes" if r["busy_processes"] else "as it is"
        said = ", ".join(f"{count} thread(s) {value:.2f}" for count, value in r["steps_per_s"].items())
        picks = ", ".join(f"{name} -> {count} ({'within' if r['within'][name] else 'NOT within'} 10 % of the faster "
                          "of 1 and 2)" for name, count in r["chosen"].items())
        print(f"{where} (load {r['load_average_1min']}): steps/s {said}; chosen: {picks}")


if __name__ == "__main__":
    main()
