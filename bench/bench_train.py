"""Training throughput (images/s) of vit-explorer's trainer against a plain timm training loop on
the same model shape, in the same run.

CPU (fp32): the classroom preset and ViT-Ti/4 at 32 px. CUDA (bf16 autocast, fused AdamW), when
a GPU is present: ViT-B/16 at 224 with batch 128 and ViT-Ti/4 at 32 px with batch 512.

    python bench/bench_train.py [--steps N] [--rounds R] [--threads T] [--json]

Both loops do the same work per step: uint8 batch -> normalise -> forward -> label-smoothed cross
entropy -> backward -> gradient clipping -> AdamW step. Throughput is timed after warm-up steps,
in alternating rounds; each loop's best round is reported.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

import torch
import torch.nn.functional as F

from vit_explorer.data.datasets import TensorImages, load_data, normalize
from vit_explorer.models.presets import preset
from vit_explorer.training import events as ev
from vit_explorer.training.recipe import Recipe
from vit_explorer.training.trainer import train

CASES = {  # name: (preset, image size, batch size, device)
    "classroom cpu fp32": ("classroom", 32, 128, "cpu"),
    "vit-ti4-32 cpu fp32": ("vit-ti4-32", 32, 128, "cpu"),
    "vit-b16-224 cuda bf16": ("vit-b16", 224, 128, "cuda"),
    "vit-ti4-32 cuda bf16": ("vit-ti4-32", 32, 512, "cuda"),
}


def _data(size: int, n: int, classes: int):
    base = load_data("shapes", image_size=(32, 32), train_size=1, val_size=1)
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n, 3, size, size), generator=g, dtype=torch.uint8)
    labels = torch.randint(0, classes, (n,), generator=g)
    pre = base.preprocessing.with_size((size, size))
    return replace(base, train=TensorImages(images, labels), val=TensorImages(images[:8], labels[:8]),
                   preprocessing=pre, labels=[str(i) for i in range(classes)])


def ours(config, data, batch: int, steps: int, warmup: int, device: str) -> float:
    recipe = Recipe(steps=warmup + steps, batch_size=batch, log_every=1, eval_every=1.0, snapshot_every=10**9,
                    checkpoint_every=1e9)
    rates = [e for e in train(config, data, recipe, device=device) if isinstance(e, ev.Step)]
    timed = rates[warmup:]
    return sum(batch for _ in timed) / sum(batch / e.images_per_s for e in timed)


def timm_loop(config, data, batch: int, steps: int, warmup: int, device: str) -> float:
    import timm

    h = config.image_size[0]
    model = timm.create_model("vit_base_patch16_224", pretrained=False, img_size=h, patch_size=config.patch_size,
                              embed_dim=config.embed_dim, depth=config.depth, num_heads=config.num_heads,
                              mlp_ratio=config.mlp_ratio, num_classes=config.num_classes).to(device)
    model.train()
    cuda = device == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, fused=cuda)
    n = len(data.train)
    elapsed = 0.0
    for step in range(warmup + steps):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        idx = torch.randint(0, n, (batch,)).tolist()
        images, labels, _ = data.train.__getitems__(idx)
        x = normalize(images.to(device), data.preprocessing)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
            loss = F.cross_entropy(model(x).float(), labels.to(device), label_smoothing=0.1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if cuda:
            torch.cuda.synchronize()
        if step >= warmup:
            elapsed += time.perf_counter() - t0
    return batch * steps / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per case")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per case; the best counts")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads on the CPU")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = []
    for name, (preset_name, size, batch, device) in CASES.items():
        if device == "cuda" and not torch.cuda.is_available():
            rows.append({"case": name, "skipped": "no CUDA device"})
            continue
        config = preset(preset_name, image_size=size, num_classes=10)
        data = _data(size, max(4 * batch, 512), 10)
        # alternate the two loops and keep each one's best round: a busy machine slows rounds, not code
        theirs = mine = 0.0
        for _ in range(args.rounds):
            theirs = max(theirs, timm_loop(config, data, batch, args.steps, args.warmup, device))
            mine = max(mine, ours(config, data, batch, args.steps, args.warmup, device))
        rows.append({"case": name, "batch": batch, "ours_img_s": round(mine, 1), "timm_img_s": round(theirs, 1),
                     "ratio": round(mine / theirs, 3)})
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    for r in rows:
        if "skipped" in r:
            print(f"{r['case']:<24} skipped: {r['skipped']}")
        else:
            print(f"{r['case']:<24} batch {r['batch']:>4}  ours {r['ours_img_s']:>9.1f} img/s  "
                  f"timm {r['timm_img_s']:>9.1f} img/s  ratio {r['ratio']:.3f}")


if __name__ == "__main__":
    main()
