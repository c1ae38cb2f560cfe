"""Peak memory of one interactive update against a plain forward, at the DINOv2-L shape.

ViT-L (24 blocks, 16 heads, D 1024) with 14-pixel patches at 518x518: 37x37 patches + [CLS] = 1,370
tokens. Each measurement runs in a fresh process (peak resident set size, `ru_maxrss`), with random
weights, batch 1, on the CPU:

- plain forward: `model(pixels)`, what timm's forward does;
- interactive update, the app's default views: the forward pass of `explore.forward.run_forward` with
  the maps of one block kept (the Attention view's layer), [CLS] and token similarities, and the unmasked
  baseline it computes after a mask click;
- interactive update with rollout (every block's attention fused over heads) and with the mean
  attention distance: the Attention view's other modes;
- capture-all, for reference: `forward_intermediates(capture="all")`, every block's (1, 16, 1370, 1370)
  probabilities kept (what the app did before captures on demand).

The ratios to the plain forward are printed; the target for the default update is <= 1.5x.

    .venv/bin/python bench/bench_memory.py [--image-size 518] [--patch 14] [--threads N] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

CASES = ("plain forward", "interactive update", "update with rollout", "update with distances", "capture-all")


def measure(case: str, image_size: int, patch: int, threads: int | None) -> dict[str, float]:
    """Run one case in this process and return its peak RSS (MiB) and seconds."""
    import time

    import numpy as np
    import torch
    from PIL import Image

    from vit_explorer.checkpoints import LoadedModel, Preprocess
    from vit_explorer.explore.forward import Inputs, Needs, run_forward
    from vit_explorer.models import VisionTransformer, preset

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    config = preset("vit-l16", patch_size=patch, image_size=image_size)
    model = VisionTransformer(config).eval()
    pre = Preprocess((image_size, image_size))
    image = Image.fromarray((np.random.default_rng(0).random((image_size, image_size, 3)) * 255).astype(np.uint8))
    loaded = LoadedModel(model, config, [str(i) for i in range(config.num_classes)], pre)
    grid = config.grid_size
    mask = np.zeros(grid, bool)
    mask[grid[0] // 2, grid[1] // 2] = True  # a mask click: the update also runs the unmasked baseline
    heads = np.ones((config.depth, config.num_heads), np.float32)
    needs = {"interactive update": Needs(maps=frozenset({config.depth - 1})),
             "update with rollout": Needs(fusion="mean"), "update with distances": Needs(distance=True)}
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    with torch.inference_mode():
        if case == "plain forward":
            model(pre(image))
        elif case == "capture-all":
            model.forward_intermediates(pre(image), capture="all")
        else:
            run_forward(Inputs(loaded, image, (image_size, image_size), mask, heads, needs=needs[case]))
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {"peak_mib": peak / 1024, "before_mib": before / 1024, "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image-size", type=int, default=518)
    parser.add_argument("--patch", type=int, default=14)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=CASES)
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: measure one case
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.image_size, args.patch, args.threads)))
        return
    tokens = (args.image_size // args.patch) ** 2 + 1
    print(f"ViT-L/{args.patch} at {args.image_size}x{args.image_size}: {tokens} tokens, 24 blocks, 16 heads; "
          "peak RSS of a fresh process per case")
    results = {}
    for case in args.cases:
        command = [sys.executable, __file__, "--one", case, "--image-size", str(args.image_size), "--patch",
                   str(args.patch)] + (["--threads", str(args.threads)] if args.threads else [])
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        results[case] = json.loads(done.stdout.strip().splitlines()[-1])
    plain = results.get("plain forward", {}).get("peak_mib")
    for case, r in results.items():
        ratio = f"{r['peak_mib'] / plain:5.2f}x" if plain else "  -  "
        print(f"  {case:24s} peak {r['peak_mib']:8.0f} MiB  {ratio} the plain forward   {r['seconds']:6.1f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"tokens": tokens, "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
