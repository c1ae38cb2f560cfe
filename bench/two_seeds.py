"""Two experiments with the dataset analyses, each saved as a small figure under bench/figures/ (the README
shows them):

1. Two classroom models trained the same way from different seeds (`vit-explorer train`, a short time budget
   each): linear CKA of the [CLS] of every state of one against every state of the other, on built-in images
   neither saw in training; the diagonal (same depth) should stand out.
2. The probe curves of the bundled classroom model (resources/classroom) on the built-in shapes: k-NN and linear
   accuracy per token state should rise with depth.

    python bench/two_seeds.py [--budget 120] [--image-size 16] [--images 1000] [--out bench/figures]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from vit_explorer.checkpoints import load
from vit_explorer.cli import main as cli
from vit_explorer.explore import dataset as D
from vit_explorer.explore import dataset_analysis as A
from vit_explorer.explore.figures import MapsFigure
from vit_explorer.paths import BUNDLED_MODEL


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=120.0, help="training seconds per seed (default 120)")
    parser.add_argument("--image-size", type=int, default=16,
                        help="input side of the two models (default 16: a 4x4 grid, four times cheaper than 32)")
    parser.add_argument("--images", type=int, default=1000, help="built-in images analysed (default 1000)")
    parser.add_argument("--seeds", type=int, nargs=2, default=(0, 1))
    parser.add_argument("--out", default="bench/figures")
    args = parser.parse_args()
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from vit_explorer.gui.figures import render_png

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, object] = {"budget_s": args.budget, "image_size": args.image_size, "images": args.images,
                                  "seeds": list(args.seeds)}
    with tempfile.TemporaryDirectory() as tmp:
        runs, accuracies = [], []
        for seed in args.seeds:
            run = Path(tmp) / f"seed{seed}"
            code = cli(["train", "--preset", "classroom", "--dataset", "shapes", "--time-budget", str(args.budget),
                        "--image-size", str(args.image_size), "--batch-size", "64", "--seed", str(seed),
                        "--train-size", "10000", "--val-size", "500", "--out", str(run)])
            if code:
                return code
            runs.append(load(str(run)))
            training = json.loads((run / "vit_explorer.json").read_text())["training"]
            accuracies.append({"steps": training["step"], "val_accuracy": round(training["val_accuracy"], 4)})
        # images the models did not train on: the built-in set's validation split, drawn with another seed
        source = D.open_source("shapes", limit=args.images, seed=99)
        a, b = (D.extract(model, source) for model in runs)
        probes = [A.probe_curves(f, "cls") for f in (a, b)]
    matrices = {}
    for tokens in ("cls", "mean"):
        matrix = matrices[tokens] = A.cka_states(a, b, tokens)
        inner = matrix[1:, 1:]  # state 0's [CLS] is the same for every image: CKA 0 with everything
        results[f"cka_{tokens}"] = {
            "matrix": matrix.round(4).tolist(), "diagonal": np.diag(matrix).round(4).tolist(),
            "diagonal_mean_after_input": round(float(np.diag(inner).mean()), 4),
            "off_diagonal_mean_after_input": round(float(inner[~np.eye(len(inner), dtype=bool)].mean()), 4)}
    results["final_linear_probe_cls"] = [round(float(p.linear[-1]), 4) for p in probes]
    results["train_validation_accuracy"] = accuracies
    figure = MapsFigure(f"Linear CKA between two classroom models, seed {args.seeds[0]} (rows) x seed "
                        f"{args.seeds[1]}; state 0 = input", np.stack([matrices["cls"], matrices["mean"]]),
                        ("[CLS]", "mean of the patch tokens"), None, matrices["cls"].shape, colorbar_label="CKA",
                        cmap="viridis", levels=(0.0, 1.0))
    render_png(figure, out / "two_seed_cka.png", (760, 420))

    bundled = load(str(BUNDLED_MODEL))
    features = D.extract(bundled, D.open_source("shapes", limit=args.images, seed=0))
    curves = [A.probe_curves(features, kind) for kind in ("cls", "mean")]
    results["bundled_probe"] = {c.tokens: {"knn": c.knn.round(4).tolist(), "linear": c.linear.round(4).tolist()}
                                for c in curves}
    render_png(A.probe_figure(curves, features.depth, "Bundled classroom model: probes per state"),
               out / "bundled_probe.png", (620, 420))
    (out / "two_seeds.json").write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
