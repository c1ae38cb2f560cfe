"""The default recipe on a small real data set of small images, against classical baselines on the same
split: scikit-learn's handwritten digits (1,797 8x8 grey images, 10 classes), upscaled to the classroom
model's 32x32 and written as an ImageFolder (train/ and val/, a stratified quarter held out), then

- `vit-explorer train --dataset FOLDER` with its defaults (the classroom preset, 120 s on one thread),
- logistic regression and an RBF support-vector machine on the original 64 pixels of the same images.

    python bench/bench_digits.py [--seeds 0 1 2] [--budget 120] [--json] [-- EXTRA TRAIN FLAGS]

Needs scikit-learn for the data set and the baselines: `pip install -e '.[bench]'`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from vit_explorer.commands.train import add_arguments, build
from vit_explorer.training import events as ev
from vit_explorer.training.trainer import train

SIZE = 32


def write_folder(root: Path, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Write the digits as root/{train,val}/<digit>/<index>.png; returns the 64-pixel (x, y) of both splits."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    index = np.arange(len(digits.target))
    train_idx, val_idx = train_test_split(index, test_size=0.25, stratify=digits.target, random_state=seed)
    for split, idx in (("train", train_idx), ("val", val_idx)):
        for i in idx:
            folder = root / split / str(digits.target[i])
            folder.mkdir(parents=True, exist_ok=True)
            grey = (digits.images[i] * (255 / 16)).round().astype(np.uint8)  # 0..16 -> 0..255
            Image.fromarray(grey).resize((SIZE, SIZE), Image.Resampling.BILINEAR).convert("RGB").save(
                folder / f"{i}.png")
    x = digits.data / 16.0
    return x[train_idx], digits.target[train_idx], x[val_idx], digits.target[val_idx]


def baselines(x_train: np.ndarray, y_train: np.ndarray, x_val: np.ndarray, y_val: np.ndarray) -> dict[str, float]:
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import SVC

    models = {"logistic regression": LogisticRegression(max_iter=5000), "SVM (RBF)": SVC(gamma="scale")}
    return {name: float(m.fit(x_train, y_train).score(x_val, y_val)) for name, m in models.items()}


def vit(folder: Path, seed: int, budget: float, extra: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    add_arguments(parser, "train")
    args = parser.parse_args(["--dataset", str(folder), "--seed", str(seed), "--time-budget", str(budget),
                              "--no-state", "--out", str(folder / "unused"), *extra])
    config, data, recipe = build(args)
    finished = next(e for e in train(config, data, recipe, None, device="cpu") if isinstance(e, ev.Finished))
    assert finished.val_accuracy is not None
    return {"seed": seed, "steps": finished.step, "train_s": round(finished.elapsed_s, 1),
            "val_accuracy": round(finished.val_accuracy, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--budget", type=float, default=120.0, help="seconds of training per run")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("extra", nargs="*", help="more `vit-explorer train` flags (after --)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "digits"
        split = write_folder(root)
        classical = baselines(*split)
        runs = [vit(root, seed, args.budget, args.extra) for seed in args.seeds]
    result = {"train_images": len(split[1]), "val_images": len(split[3]), "budget_s": args.budget,
              "flags": args.extra, "vit": runs, "vit_mean": round(statistics.mean(r["val_accuracy"] for r in runs), 4),
              "baselines": {k: round(v, 4) for k, v in classical.items()}}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"digits: {result['train_images']} training, {result['val_images']} validation images (same split for all)")
    for r in runs:
        print(f"  ViT (classroom, defaults{' ' + ' '.join(args.extra) if args.extra else ''}) seed {r['seed']}: "
              f"{r['val_accuracy']:.2%} after {r['steps']} steps, {r['train_s']:.0f} s")
    print(f"  ViT mean {result['vit_mean']:.2%}")
    for name, acc in classical.items():
        print(f"  {name} on the 64 pixels: {acc:.2%}")


if __name__ == "__main__":
    main()
