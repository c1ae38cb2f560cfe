"""The register-neuron finder's cost (issue 29): `explore.registers.diagnose` over N images (500, the paper's N)
against N plain forwards of the same model, the same decode, preprocessing and batches, in the same run
(alternating rounds, best of each). Goal: at most 1.2x.

- finder: `attention=False, statistics=False`, what finding the neurons needs (token norms at every state, every
  block's MLP hidden units at the patches, one pass: the fused attention kernel stays);
- full: the whole diagnosis (attention entropy and [CLS] shares: every block forms its attention explicitly; the
  massive activations; the positional artifact), for reference.

Models: the bundled classroom model and ViT-S/16 (timm's, random weights: speed does not depend on them).

    python bench/bench_registers.py [--images 500] [--batch-size 32] [--rounds 2] [--models classroom,vit_s] [--json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vit_explorer.checkpoints import LoadedModel, load
from vit_explorer.explore import dataset as D
from vit_explorer.explore import registers as X
from vit_explorer.jobs import Job
from vit_explorer.paths import BUNDLED


def write_images(root: Path, n: int, side: int = 256) -> Path:
    from PIL import Image

    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        pixels = rng.integers(0, 256, (side // 8, side // 8, 3), dtype=np.uint8)
        Image.fromarray(np.kron(pixels, np.ones((8, 8, 1), np.uint8))).save(root / f"{i:05d}.jpg", quality=90)
    return root


def vit_s(folder: Path) -> LoadedModel:
    import timm
    from timm.models._hub import save_for_hf

    torch.manual_seed(0)
    model = timm.create_model("vit_small_patch16_224", pretrained=False, num_classes=10).eval()
    save_for_hf(model, str(folder), safe_serialization=True,
                data_config={"input_size": (3, 224, 224), "crop_pct": 0.875, "interpolation": "bicubic"})
    return load(folder, device="cpu")


def plain(loaded: LoadedModel, source: D.DatasetSource, batch: int) -> float:
    """The same decode, preprocessing and batches, then the model with no hooks: seconds."""
    start = time.perf_counter()
    with torch.inference_mode():
        for _, pixels, _ in D._batches(source, loaded, batch, Job(), np.arange(len(source))):
            if pixels is not None:
                loaded.model(pixels)
    return time.perf_counter() - start


def finder(loaded: LoadedModel, source: D.DatasetSource, batch: int, attention: bool) -> float:
    start = time.perf_counter()
    X.diagnose(loaded, source, attention=attention, statistics=attention, batch_size=batch)
    return time.perf_counter() - start


def bench(name: str, loaded: LoadedModel, source: D.DatasetSource, batch: int, rounds: int) -> dict[str, Any]:
    batch = X._batch_size(loaded, batch)  # the finder's own cap, for both
    times: dict[str, list[float]] = {"plain": [], "finder": [], "full": []}
    for _ in range(rounds):
        times["plain"].append(plain(loaded, source, batch))
        times["finder"].append(finder(loaded, source, batch, attention=False))
        times["full"].append(finder(loaded, source, batch, attention=True))
    best = {k: min(v) for k, v in times.items()}
    return {"model": name, "images": len(source), "batch_size": batch, "threads": torch.get_num_threads(),
            **{f"{k}_s": round(v, 3) for k, v in best.items()},
            "finder_ratio": round(best["finder"] / best["plain"], 3),
            "full_ratio": round(best["full"] / best["plain"], 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--models", default="classroom,vit_s")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        source = D.open_source(str(write_images(Path(tmp) / "images", args.images)))
        rows = []
        for name in args.models.split(","):
            loaded = load(BUNDLED["classroom"], device="cpu") if name == "classroom" else vit_s(Path(tmp) / name)
            rows.append(bench(name, loaded, source, args.batch_size, args.rounds))
            if not args.json:
                r = rows[-1]
                print(f"{name}: {r['images']} images, batch {r['batch_size']}, {r['threads']} threads: plain "
                      f"{r['plain_s']:.2f} s, finder {r['finder_s']:.2f} s ({r['finder_ratio']:.2f}x), with "
                      f"attention {r['full_s']:.2f} s ({r['full_ratio']:.2f}x)")
    if args.json:
        print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
