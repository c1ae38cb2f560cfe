"""Two experiments with the dataset analyses, each saved as a small figure under bench/figures/ (the README
shows them):

1. Two classroom models trained the same way from different seeds (`vit-explorer train`, a short time budget
   each): linear CKA of the [CLS] of every state of one against every state of the other, on built-in images
   neither saw in training; the diagonal (same depth) should stand out.
2. The probe curves of the bundled classroom model (resources/classroom) on the built-in shapes: k-NN and linear
   accuracy per token state should rise with depth.

    python bench/two_seeds.py [--budget 60] [--images 1000] [--out bench/figures]
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
from vit_explorer.paths import BUNDLED_MODEL


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=60.0, help="training seconds per seed (default 60)")
    parser.add_argument("--images", type=int, default=1000, help="built-in images analysed (default 1000)")
    parser.add_argument("--seeds", type=int, nargs=2, default=(0, 1))
    parser.add_argument("--out", default="bench/figures")
    args = parser.parse_args()
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from vit_explorer.gui.figures import render_png

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, object] = {"budget_s": args.budget, "images": args.images, "seeds": list(args.seeds)}
    with tempfile.TemporaryDirectory() as tmp:
        runs = []
        for seed in args.seeds:
            run = Path(tmp) / f"seed{seed}"
            code = cli(["train", "--preset", "classroom", "--dataset", "shapes", "--time-budget", str(args.budget),
                        "--seed", str(seed), "--train-size", "5000", "--out", str(run)])
            if code:
                return code
            runs.append(load(str(run)))
        # images the models did not train on: the built-in set's validation split, drawn with another seed
        source = D.open_source("shapes", limit=args.images, seed=99)
        a, b = (D.extract(model, source) for model in runs)
        matrix = A.cka_states(a, b, "cls")
        probes = [A.probe_curves(f, "cls") for f in (a, b)]
    results["cka"] = matrix.round(4).tolist()
    results["diagonal"] = [round(float(matrix[i, i]), 4) for i in range(len(matrix))]
    inner = matrix[1:, 1:]  # state 0's [CLS] is the same for every image: CKA 0 with everything
    results["diagonal_mean_after_input"] = round(float(np.diag(inner).mean()), 4)
    results["off_diagonal_mean_after_input"] = round(float(inner[~np.eye(len(inner), dtype=bool)].mean()), 4)
    results["final_linear_probe"] = [round(float(p.linear[-1]), 4) for p in probes]
    render_png(A.cka_figure(matrix, f"[CLS] CKA: seed {args.seeds[0]} (rows) x seed {args.seeds[1]} states"),
               out / "two_seed_cka.png", (520, 470))

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
