"""`vit-explorer export-lesson LESSON.json --out lesson.html`: a lesson as one self-contained web page
(explore/web_lesson.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..explore.lessons import LessonError
from . import Render


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("lesson", help="a lesson file (.json), e.g. resources/lessons/vit-basics.json")
    parser.add_argument("--out", required=True, help="the HTML file to write")
    parser.add_argument("--seed", type=int, default=0, help="the seed of the models the lesson builds from presets "
                        "(untrained; default 0: the same lesson always exports the same page)")


def run(args: argparse.Namespace, render: Render | None) -> int:
    from ..explore.web_lesson import export_lesson

    out = Path(args.out)  # a file there is replaced, as a page exported again should be
    if out.is_dir() or not out.parent.is_dir():
        raise LessonError(f"{out}: not a file in an existing folder")
    page = export_lesson(args.lesson, out, seed=args.seed)
    print(f"wrote {page.path} ({page.bytes:,} bytes): {page.steps} steps, models {', '.join(page.models)} "
          f"(presets built with seed {page.seed})")
    return 0
