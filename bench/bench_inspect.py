"""Benchmark `vit-explorer inspect` and one interactive update, against timm's plain forward.

On ViT-S/16 (random weights, timm's and ours sharing one state dict), on the CPU:
- inspect: the whole headless report without an image (load the native checkpoint, one forward
  with captures, every analysis, every PNG), in-process and as a fresh `vit-explorer` process;
- one interactive update, what the app runs when the image, mask or heads change: a forward pass
  with captures, attention rollout and the PE similarity grid, batch 1;
- timm's plain forward at batch 1. The update is reported as a ratio to it (target <= 1.3).

Timings of the update and of timm's forward are interleaved and the medians reported.

    .venv/bin/python bench/bench_inspect.py [--repeats 15] [--threads N] [--clock cpu]

Without --image, inspect uses the first bundled sample image (resources/samples), as the CLI does.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import timm
import torch

from vit_explorer.analysis.attention import rollout
from vit_explorer.analysis.pe import pe_similarity
from vit_explorer.checkpoints.native import save_native
from vit_explorer.checkpoints.preprocess import Preprocess
from vit_explorer.cli import main as cli_main
from vit_explorer.explore.forward import CAPTURE  # what the app's forward pass captures
from vit_explorer.models import VisionTransformer, preset


def interactive_update(model: VisionTransformer, x: torch.Tensor) -> torch.Tensor:
    out = model.forward_intermediates(x, capture=CAPTURE)
    rollout(out["attentions"], out["layout"])
    pe_similarity(model)
    return out["logits"].softmax(-1)


def timed(fn: Callable[[], object], iters: int, clock: Callable[[], float]) -> float:
    start = clock()
    for _ in range(iters):
        fn()
    return (clock() - start) / iters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=15, help="timed repeats of update and timm forward")
    parser.add_argument("--iters", type=int, default=4, help="calls per timed repeat")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="cpu: this process's CPU time for the update/forward ratio, steadier on a busy machine "
                             "(use with --threads 1, where CPU time is the time one core spends)")
    args = parser.parse_args()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    if args.threads:
        torch.set_num_threads(args.threads)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

    reference = timm.create_model("vit_small_patch16_224", pretrained=False).eval()
    ours = VisionTransformer(preset("vit-s16")).eval()
    ours.load_state_dict(reference.state_dict(), strict=True)
    x = torch.randn(1, 3, 224, 224)
    print(f"torch {torch.__version__}, timm {timm.__version__}, CPU threads {torch.get_num_threads()}, "
          f"ViT-S/16, batch 1, fp32, {args.clock} clock")

    with torch.inference_mode():
        diff = (reference(x).softmax(-1) - interactive_update(ours, x)).abs().max().item()  # and warm-up
        reference(x)
        times: dict[str, list[float]] = {"timm forward": [], "interactive update": []}
        for r in range(args.repeats):
            pair = [("timm forward", lambda: reference(x)), ("interactive update", lambda: interactive_update(ours, x))]
            for name, fn in pair if r % 2 == 0 else pair[::-1]:
                times[name].append(timed(fn, args.iters, clock))
    medians = {k: statistics.median(v) for k, v in times.items()}

    with tempfile.TemporaryDirectory() as tmp:
        source = save_native(Path(tmp) / "vit-s16", ours, [f"class {i}" for i in range(1000)], Preprocess((224, 224)))
        inspect_args = ["inspect", str(source), "--out", str(Path(tmp) / "report")]
        cli_main(inspect_args)  # warm-up: first Qt start, font cache
        in_process = []
        for _ in range(3):
            start = time.perf_counter()
            cli_main(inspect_args)
            in_process.append(time.perf_counter() - start)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "vit_explorer", "inspect", str(source), "--out",
                        str(Path(tmp) / "report2")], check=True, capture_output=True)
        cold = time.perf_counter() - start

    print(f"  timm forward             {medians['timm forward'] * 1e3:8.1f} ms")
    print(f"  interactive update       {medians['interactive update'] * 1e3:8.1f} ms   "
          f"ratio {medians['interactive update'] / medians['timm forward']:.2f}x (target <= 1.3x); "
          f"max |prob diff| {diff:.1e}")
    print(f"  inspect, in-process      {statistics.median(in_process):8.2f} s    (median of 3)")
    print(f"  inspect, fresh process   {cold:8.2f} s    (imports, Qt start, load, report)")


if __name__ == "__main__":
    main()
