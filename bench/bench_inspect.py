"""Benchmark `vit-explorer inspect` and one interactive update, against timm's plain forward.

On ViT-S/16 and ViT-B/16 (random weights, timm's and ours sharing one state dict), on the CPU:
- one interactive update, what the app runs when a mask click changes the input (the unmasked
  baseline is cached, as the app caches it): `explore.forward.run_forward` from the PIL image with the
  default views' needs (the Attention view's layer keeps its maps), then the Attention view's figure;
- timm's plain forward at batch 1 on the preprocessed tensor. The update is reported as a ratio to
  it (target <= 1.2);
- inspect (ViT-S/16): the whole headless report (load the native checkpoint, one forward with the
  captures the report needs, every analysis, every PNG), in-process and as a fresh process.

Timings of the update and of timm's forward are interleaved and the medians reported.

    .venv/bin/python bench/bench_inspect.py [--models vit-s16 vit-b16] [--repeats 15] [--threads N] [--clock cpu]

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
from functools import partial
from pathlib import Path

import numpy as np
import timm
import torch
from PIL import Image

from vit_explorer.checkpoints import LoadedModel
from vit_explorer.checkpoints.native import save_native
from vit_explorer.checkpoints.preprocess import Preprocess
from vit_explorer.cli import main as cli_main
from vit_explorer.explore import attention
from vit_explorer.explore.forward import Inputs, Needs, run_forward
from vit_explorer.models import VisionTransformer, preset

TIMM = {"vit-s16": "vit_small_patch16_224", "vit-b16": "vit_base_patch16_224"}


def update_inputs(loaded: LoadedModel, image: Image.Image) -> Inputs:
    """A mask click's inputs: one patch masked, the Attention view on the last layer ('one head')."""
    cfg = loaded.config
    mask = np.zeros(cfg.grid_size, bool)
    mask[3, 4] = True
    heads = np.ones((cfg.depth, cfg.num_heads), np.float32)
    return Inputs(loaded, image, cfg.image_size, mask, heads, needs=Needs(maps=frozenset({cfg.depth - 1})))


def interactive_update(inputs: Inputs, baseline: np.ndarray) -> np.ndarray:
    result = run_forward(inputs, baseline)
    query = attention.query_for(result.layout, inputs.loaded.config.pool)
    attention.heads_figure(result, "one head", inputs.loaded.config.depth - 1, 0, query)
    return result.probs


def timed(fn: Callable[[], object], iters: int, clock: Callable[[], float]) -> float:
    start = clock()
    for _ in range(iters):
        fn()
    return (clock() - start) / iters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(TIMM), choices=list(TIMM))
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

    print(f"torch {torch.__version__}, timm {timm.__version__}, CPU threads {torch.get_num_threads()}, batch 1, "
          f"fp32, {args.clock} clock")
    image = Image.fromarray((np.random.default_rng(0).random((256, 256, 3)) * 255).astype(np.uint8))
    for name in args.models:
        reference = timm.create_model(TIMM[name], pretrained=False).eval()
        ours = VisionTransformer(preset(name)).eval()
        ours.load_state_dict(reference.state_dict(), strict=True)
        loaded = LoadedModel(ours, ours.config, [f"class {i}" for i in range(1000)], Preprocess((224, 224)))
        inputs = update_inputs(loaded, image)
        x = loaded.preprocess(image)
        with torch.inference_mode():
            baseline = reference(x).softmax(-1)[0].numpy()
            unmasked = run_forward(Inputs(loaded, image, (224, 224), np.zeros((14, 14), bool), inputs.head_mask))
            diff = float(np.abs(unmasked.probs - baseline).max())  # and warm-up
            times: dict[str, list[float]] = {"timm forward": [], "interactive update": []}
            pair = [("timm forward", partial(reference, x)),
                    ("interactive update", partial(interactive_update, inputs, baseline))]
            for r in range(args.repeats):
                for label, fn in pair if r % 2 == 0 else pair[::-1]:
                    times[label].append(timed(fn, args.iters, clock))
        medians = {k: statistics.median(v) for k, v in times.items()}
        ratio = medians["interactive update"] / medians["timm forward"]
        print(f"{name}: timm forward {medians['timm forward'] * 1e3:7.1f} ms, interactive update "
              f"{medians['interactive update'] * 1e3:7.1f} ms, ratio {ratio:.2f}x (target <= 1.2x); "
              f"max |prob diff| unmasked {diff:.1e}")

    ours = VisionTransformer(preset("vit-s16")).eval()
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

    print(f"  inspect, in-process      {statistics.median(in_process):8.2f} s    (median of 3)")
    print(f"  inspect, fresh process   {cold:8.2f} s    (imports, Qt start, load, report)")


if __name__ == "__main__":
    main()
