"""Dataset analyses: speed of feature extraction against timm, and the peak memory of minibatch CKA.

1. Extraction over an image folder: `explore.dataset.extract` (decode, the model's own preprocessing, every
   token state's [CLS], patch mean, sampled patches and norms) against the same decode and preprocessing followed
   by timm's `forward_features` on the same weights, the same images and batch size, in the same run (alternating
   rounds, best of each). Random weights (no network here): speed does not depend on them.
2. `vit-explorer cka` of all 13 x 13 state pairs of ViT-S/16 (random weights) over N images with minibatch CKA, in
   a child process whose peak resident memory is read from the kernel (ru_maxrss).

    python bench/bench_embed.py [--images 256] [--batch-size 32] [--rounds 2] [--cka-images 2000] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from vit_explorer.checkpoints import load
from vit_explorer.explore import dataset as D

ARCH = "vit_small_patch16_224"


def write_images(root: Path, n: int, classes: int = 4, side: int = 256) -> Path:
    rng = np.random.default_rng(0)
    for i in range(n):
        folder = root / f"class{i % classes}"
        folder.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (side // 8, side // 8, 3), dtype=np.uint8)  # blocks: JPEG-like content
        Image.fromarray(np.kron(pixels, np.ones((8, 8, 1), np.uint8))).save(folder / f"{i:05d}.jpg", quality=90)
    return root


def timm_model(folder: Path) -> torch.nn.Module:
    import timm
    from timm.models._hub import save_for_hf

    torch.manual_seed(0)
    model = timm.create_model(ARCH, pretrained=False, num_classes=4).eval()
    save_for_hf(model, str(folder), safe_serialization=True,
                data_config={"input_size": (3, 224, 224), "crop_pct": 0.875, "interpolation": "bicubic"})
    return model


def timm_pass(model: torch.nn.Module, loaded: Any, source: D.DatasetSource, batch: int) -> float:
    """The same decode and preprocessing, then timm's forward_features per batch: seconds."""
    start = time.perf_counter()
    with torch.inference_mode():
        for s in range(0, len(source), batch):
            x = torch.cat([loaded.preprocessing(source.image(i)) for i in range(s, min(s + batch, len(source)))])
            model.forward_features(x)
    return time.perf_counter() - start


def extraction(images: int, batch: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        root = write_images(Path(tmp) / "images", images)
        ref = timm_model(Path(tmp) / "model")
        loaded = load(str(Path(tmp) / "model"))
        source = D.open_source(str(root))
        ours, theirs = [], []
        for _ in range(rounds):
            start = time.perf_counter()
            D.extract(loaded, source, batch_size=batch)
            ours.append(time.perf_counter() - start)
            theirs.append(timm_pass(ref, loaded, source, batch))
    return {"model": ARCH, "weights": "random", "images": images, "batch_size": batch,
            "threads": torch.get_num_threads(), "ours_img_s": images / min(ours),
            "timm_forward_features_img_s": images / min(theirs), "ratio": min(theirs) / min(ours), "rounds": rounds}


def cka_memory(images: int, batch: int, minibatch: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        timm_model(Path(tmp) / "model")
        root = write_images(Path(tmp) / "images", images, classes=10, side=224)
        env = {**os.environ, "VIT_EXPLORER_CACHE": str(Path(tmp) / "cache"), "QT_QPA_PLATFORM": "offscreen"}
        command = [sys.executable, "-m", "vit_explorer", "cka", str(Path(tmp) / "model"), "--data", str(root),
                   "--out", str(Path(tmp) / "out"), "--batch-size", str(batch), "--minibatch", str(minibatch),
                   "--no-cache"]
        start = time.perf_counter()
        subprocess.run(command, check=True, env=env, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        seconds = time.perf_counter() - start
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # kilobytes on Linux
        summary = json.loads((Path(tmp) / "out" / "summary.json").read_text())
    return {"model": ARCH, "weights": "random", "images": images, "states": summary["states"],
            "pairs": summary["states"] ** 2, "tokens": summary["tokens_compared"], "minibatch": summary["minibatch"],
            "batch_size": batch, "peak_rss_bytes": peak, "peak_rss_gb": peak / 1e9, "seconds": seconds}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=256, help="0: skip the extraction speed measurement")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cka-images", type=int, default=2000, help="0: skip the CKA memory measurement")
    parser.add_argument("--minibatch", type=int, default=500)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out: dict[str, Any] = {}
    if args.images:
        out["extraction"] = extraction(args.images, args.batch_size, args.rounds)
    if args.cka_images:
        out["cka_memory"] = cka_memory(args.cka_images, args.batch_size, args.minibatch)
    if args.json:
        print(json.dumps(out, indent=1))
    elif "extraction" in out:
        e = out["extraction"]
        print(f"extraction, {e['model']} (random weights), {e['images']} images, batch {e['batch_size']}: ours "
              f"{e['ours_img_s']:.1f} img/s, timm forward_features {e['timm_forward_features_img_s']:.1f} img/s, "
              f"ratio {e['ratio']:.3f}")
    if "cka_memory" in out and not args.json:
        c = out["cka_memory"]
        print(f"cka, {c['pairs']} state pairs over {c['images']} images (minibatch {c['minibatch']}): peak "
              f"{c['peak_rss_gb']:.2f} GB resident, {c['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
