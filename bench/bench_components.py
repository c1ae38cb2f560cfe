"""The Components view's costs on the CPU: the logit decomposition against the app's interactive update, and a
full layers x positions patching sweep.

1. ViT-B/16 at 224 px, one image: `explore.components.decomposition` (one forward pass recording each head's
   and each MLP's output, then the readout's linear algebra) against `explore.forward.run_forward`, the
   session's interactive update (with the captures of the default views: the last block's attention maps), the
   two interleaved within each repeat; target: decomposition <= 1.3x the update.
2. ViT-S/16 at 224 px: the residual-stream sweep over every block x token (12 x 197 patched runs) in batches,
   and PLAIN_BATCHES batches of patched runs against as many plain batched forwards, interleaved (their ratio
   is the cost of patching itself).

    .venv/bin/python bench/bench_components.py [--threads N] [--repeats R] [--batch B] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from PIL import Image

from vit_explorer.analysis.components import patched_logits
from vit_explorer.checkpoints import LoadedModel, Preprocess
from vit_explorer.explore.components import corrupted_inputs, decomposition, record_runs, run_masks, run_sweep
from vit_explorer.explore.forward import Inputs, Needs, pixels_for, run_forward
from vit_explorer.models import VisionTransformer, preset


def inputs_for(name: str, size: int = 224) -> Inputs:
    """A random-weight preset as a LoadedModel, a random image, nothing masked; the default views' needs."""
    torch.manual_seed(0)
    config = preset(name, image_size=size)
    model = VisionTransformer(config).eval()
    loaded = LoadedModel(model, config, [str(i) for i in range(config.num_classes)], Preprocess(config.image_size))
    image = Image.fromarray((np.random.default_rng(0).random((size, size, 3)) * 255).astype(np.uint8))
    return Inputs(loaded, image, config.image_size, np.zeros(config.grid_size, bool),
                  np.ones((config.depth + config.class_attn_depth, config.num_heads), np.float32),
                  needs=Needs(maps=frozenset({config.depth - 1})))


def decomposition_vs_update(repeats: int) -> dict[str, float]:
    inputs = inputs_for("vit-b16")
    runs = {"update": lambda: run_forward(inputs), "decomposition": lambda: decomposition(inputs)}
    for fn in runs.values():  # warm-up
        fn()
    times: dict[str, list[float]] = {k: [] for k in runs}
    for r in range(repeats):
        for key in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
            start = time.perf_counter()
            runs[key]()
            times[key].append(time.perf_counter() - start)
    ratio = statistics.median(d / u for d, u in zip(times["decomposition"], times["update"], strict=True))
    return {"update": statistics.median(times["update"]), "decomposition": statistics.median(times["decomposition"]),
            "ratio": ratio}


PLAIN_BATCHES = 4  # patched and plain batches timed in turn for the comparison


def sweep_time(batch: int, quick: bool) -> dict[str, float]:
    clean = inputs_for("vit-s16")
    corrupted = corrupted_inputs(clean, "mask")
    cfg = clean.loaded.config
    layers = [0, cfg.depth - 1] if quick else None
    start = time.perf_counter()
    result = run_sweep(clean, corrupted, "resid", layers=layers, batch=batch)
    seconds = time.perf_counter() - start
    n_runs = result.raw.numel()
    model = clean.loaded.model
    x = torch.randn(batch, 3, 224, 224)
    batches = -(-n_runs // batch)
    # one batch of patched runs against one plain batched forward, interleaved: the overhead of patching
    # itself, which a shared machine's drifting load would hide in two separate totals
    runs = record_runs(clean, corrupted, "resid")
    mask, _ = run_masks(corrupted)
    pixels = pixels_for(corrupted)
    layer = cfg.depth // 2
    ratios, plain = [], []
    with torch.inference_mode():
        for _ in range(PLAIN_BATCHES):
            start = time.perf_counter()
            patched_logits(model, pixels, runs.source, "resid", [layer] * batch, [[p] for p in range(batch)],
                           mask=mask)
            patched = time.perf_counter() - start
            start = time.perf_counter()
            model(x)
            plain.append(time.perf_counter() - start)
            ratios.append(patched / plain[-1])
    return {"runs": n_runs, "layers": len(result.layers), "positions": len(result.columns), "seconds": seconds,
            "plain": statistics.median(plain) * batches, "batch_ratio": statistics.median(ratios)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--batch", type=int, default=64, help="patched runs per forward pass in the sweep")
    parser.add_argument("--quick", action="store_true", help="3 repeats; the sweep over 2 blocks only")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    repeats = 3 if args.quick else args.repeats
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU fp32")
    d = decomposition_vs_update(repeats)
    print(f"ViT-B/16 224 px: interactive update {d['update'] * 1e3:.1f} ms, decomposition "
          f"{d['decomposition'] * 1e3:.1f} ms, ratio {d['ratio']:.3f} (target <= 1.3)", flush=True)
    s = sweep_time(args.batch, args.quick)
    print(f"ViT-S/16 224 px: resid sweep over {s['layers']} blocks x {s['positions']} tokens = {s['runs']} patched "
          f"runs in batches of {args.batch}: {s['seconds']:.1f} s ({s['seconds'] / s['runs'] * 1e3:.1f} ms a run); "
          f"as many plain batched forwards (from {PLAIN_BATCHES} timed): {s['plain']:.1f} s; one patched batch / one "
          f"plain batch, interleaved: {s['batch_ratio']:.3f}")


if __name__ == "__main__":
    main()
