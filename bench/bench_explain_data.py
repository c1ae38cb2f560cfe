"""The dataset ranking's speed: `explain SOURCE --data shapes` (explore.ranking.rank_dataset) on the bundled classroom
model, in images per second, for each default method alone and for all of them together (each ranking with the random
baseline row it always has), beside the same model's forward + backward on the same images in the same run (the cost
one gradient map cannot go below). The images go 16 at a time: each method on the whole batch, the curves and ROAD of
every image in stacked passes.

    python bench/bench_explain_data.py [--images 32] [--device cpu|cuda] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from vit_explorer import load
from vit_explorer.explore import dataset as D
from vit_explorer.explore import ranking
from vit_explorer.explore import relevance as rel
from vit_explorer.paths import BUNDLED_MODEL


def forward_backward_rate(loaded, source: D.DatasetSource) -> float:
    """Images per second of one forward and backward of the top logit, one image at a time, as the maps run."""
    pre = D.dataset_preprocessing(loaded)
    pixels = torch.cat([pre(source.image(i)) for i in range(len(source))]).to(loaded.device)
    start = time.perf_counter()
    for i in range(len(source)):
        x = pixels[i:i + 1].clone().requires_grad_(True)
        loaded.model(x).max().backward()
    return len(source) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=32)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    loaded = load(str(BUNDLED_MODEL), device=args.device)
    source = D.open_source("shapes", limit=args.images)
    methods = rel.supported(loaded.config, default=True)
    results = {"device": args.device, "images": len(source),
               "forward_backward_images_per_s": forward_backward_rate(loaded, source), "methods": {}}
    for chosen in [[m] for m in methods] + [methods]:
        start = time.perf_counter()
        ranking.rank_dataset(loaded, source, chosen)
        rate = len(source) / (time.perf_counter() - start)
        name = chosen[0] if len(chosen) == 1 else "all defaults"
        results["methods"][name] = rate
        print(f"{name:<24} {rate:8.2f} images/s (each image: the maps, their curves and ROAD, with the random row)")
    print(f"{'forward + backward':<24} {results['forward_backward_images_per_s']:8.2f} images/s")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
