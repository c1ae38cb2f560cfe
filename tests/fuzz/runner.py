"""Run one corpus case through the CLI in this process and judge the outcome (shared by the in-process
tests and the memory-limited subprocess)."""

from __future__ import annotations

import contextlib
import io
import os
import time
from dataclasses import dataclass
from pathlib import Path

from corpus import Case, Kit


@dataclass
class Outcome:
    status: int
    out: str
    err: str
    seconds: float


def run(argv: list[str]) -> Outcome:
    from vit_explorer.cli import main

    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as exit_:  # argparse
            status = exit_.code if isinstance(exit_.code, int) else 1
    return Outcome(status, out.getvalue(), err.getvalue(), time.perf_counter() - start)


def snapshot(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under root (links not followed) with its type, size and modification time."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder, name)
            info = path.lstat()
            found[str(path.relative_to(root))] = (info.st_mode, info.st_size, info.st_mtime_ns)
    return found


def judge(case: Case, valid: Path, root: Path, seconds_allowed: float = 60.0) -> list[str]:
    """Make the case in `root`, run it, and list what is wrong with the outcome ([] = a clear refusal)."""
    kit = Kit(valid, root)
    argv, fragments = case.make(kit)
    before = snapshot(root)
    outcome = run(argv)
    problems = []
    # a progress bar (tqdm: lines redrawn with carriage returns) may come before a refusal that needs the features
    lines = [line for line in outcome.err.strip().split("\n") if "\r" not in line]
    prefix = f"vit-explorer {argv[0]}: error: "
    if outcome.status != 2:
        problems.append(f"exit status {outcome.status}, not 2")
    if len(lines) != 1 or not lines[0].startswith(prefix):
        problems.append(f"stderr is not one '{prefix}...' line: {outcome.err[-2000:]!r}")
    elif missing := [f for f in fragments if f not in lines[0]]:
        problems.append(f"the message lacks {missing}: {lines[0][:600]!r}")
    if "Traceback" in outcome.err:
        problems.append("a traceback")
    if outcome.out:
        problems.append(f"stdout: {outcome.out[:200]!r}")
    if outcome.seconds > seconds_allowed:
        problems.append(f"took {outcome.seconds:.1f} s")
    if (root / "PWNED").exists():
        problems.append("a pickle ran code")
    if (after := snapshot(root)) != before:
        changed = sorted(set(after.items()) ^ set(before.items()))[:5]
        problems.append(f"files were written or lost: {changed}")
    return problems
