"""The GPU benchmark in one prepared run: training and inference throughput of vit-explorer against timm
(eager and compiled) and transformers, measured in the same process, as ratios, with MFU for training.

    python bench/gpu.py [--json OUT]            # on a CUDA GPU: the full cases, bf16 autocast, about 5 minutes
    python bench/gpu.py --reduced [--json OUT]  # anywhere (the CPU): the same code on tiny shapes, fp32, seconds

Cases (full form, targets from the project's issue):
- train ViT-B/16, 224 px, batch 128: ours vs timm eager and compiled, the same step for both (bf16 autocast,
  cross-entropy, AdamW, fused on CUDA); MFU against the GPU's dense bf16 peak (--peak-tflops, 989 for an
  H200/H100 SXM)                                                                  target >= 1.0x timm compiled
- infer ViT-B/16, batch 256: ours vs timm eager/compiled                         target >= 1.0x timm compiled
- latency ViT-B/16, batch 1, fp32: ours vs transformers (SDPA)                    target <= transformers
- train ViT-Ti/4 at 32 px, batch 512 (the classroom shape): ours compiled with CUDA graphs vs timm with CUDA graphs
- train CaiT-XXS24, 224 px: ours vs timm                                          target >= 1.2x timm
- one interactive update (the app's forward pass with the default views' captures) vs a plain forward <= 1.3x
- a full activation-patching sweep, ViT-S/16 residual stream at every block x token (12 x 197 patched runs) in
  batches of 256, vs as many plain batched forwards                                 target <= 1.3x
- one attention-gradient map vs timm's forward + backward of the same logit                       <= 1.3x
- the ten-step perturbation curve vs timm's forward of the same ten images                       <= 1.3x

The reduced form (--reduced, and the default without CUDA) runs each case on tiny models for a few steps
in fp32 without compiling, so a test can run this file unchanged on a machine without a GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from vit_explorer.checkpoints import LoadedModel, Preprocess
from vit_explorer.explore.forward import Inputs, Needs, run_forward
from vit_explorer.models import VisionTransformer, ViTConfig, preset


@dataclass(frozen=True)
class Shape:
    """One benchmark's model and batch, in its full (GPU) and reduced (anywhere) form."""

    preset: str
    timm_name: str
    image: int
    batch: int
    overrides: dict[str, Any] = field(default_factory=dict)


FULL = {
    "train vit-b16": Shape("vit-b16", "vit_base_patch16_224", 224, 128),
    "infer vit-b16": Shape("vit-b16", "vit_base_patch16_224", 224, 256),
    "latency vit-b16": Shape("vit-b16", "vit_base_patch16_224", 224, 1),
    "train vit-ti4-32": Shape("vit-ti4-32", "vit_tiny_patch16_224", 32, 512, {"patch_size": 4, "num_classes": 10}),
    "train cait-xxs24": Shape("cait-xxs24", "cait_xxs24_224", 224, 128),
    "update vit-b16": Shape("vit-b16", "vit_base_patch16_224", 224, 1),
    "sweep vit-s16": Shape("vit-s16", "vit_small_patch16_224", 224, 256),
    "explain map vit-b16": Shape("vit-b16", "vit_base_patch16_224", 224, 1),
    "explain curve vit-b16": Shape("vit-b16", "vit_base_patch16_224", 224, 10),
}
REDUCED = {name: Shape(s.preset, s.timm_name, 32, min(s.batch, 8),
                       {"patch_size": 8, "embed_dim": 64, "depth": 2, "num_heads": 2, "num_classes": 10,
                        **({"class_attn_depth": 1} if "cait" in s.preset else {})})
           for name, s in FULL.items()}


def our_config(shape: Shape) -> ViTConfig:
    return preset(shape.preset, image_size=shape.image, **shape.overrides)


def timm_model(shape: Shape, config: ViTConfig) -> torch.nn.Module:
    import timm

    args = dict(img_size=shape.image, patch_size=config.patch_size, embed_dim=config.embed_dim, depth=config.depth,
                num_heads=config.num_heads, num_classes=config.num_classes)
    if config.class_attn_depth:
        args["depth_token_only"] = config.class_attn_depth
    return timm.create_model(shape.timm_name, pretrained=False, **args)


def rate(step: Callable[[], object], images: int, steps: int, warmup: int, sync: Callable[[], None]) -> float:
    """Images per second of `step`, timed after warm-up (the median of single-step timings)."""
    for _ in range(warmup):
        step()
    sync()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    return images / statistics.median(times)


def train_step(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, amp: bool) -> Callable[[], object]:
    fused = x.device.type == "cuda"
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=fused)

    def step() -> None:
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=amp):
            loss = F.cross_entropy(model(x).float(), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def infer_step(model: torch.nn.Module, x: torch.Tensor, amp: bool) -> Callable[[], object]:
    def step() -> None:
        with torch.inference_mode(), torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=amp):
            model(x)

    return step


def hf_model(config: ViTConfig) -> torch.nn.Module:
    from transformers import ViTConfig as HFConfig
    from transformers import ViTForImageClassification

    hf = HFConfig(hidden_size=config.embed_dim, num_hidden_layers=config.depth, num_attention_heads=config.num_heads,
                  intermediate_size=int(config.embed_dim * config.mlp_ratio), image_size=config.image_size[0],
                  patch_size=config.patch_size, num_labels=config.num_classes, attn_implementation="sdpa")
    return ViTForImageClassification(hf)


def run_case(name: str, shape: Shape, device: torch.device, full: bool, steps: int, warmup: int) -> dict[str, Any]:
    """Measure one case; returns the rates (images/s) by contender, the ratios and the target's verdict."""
    config = our_config(shape)
    amp = full and device.type == "cuda"
    compiled = full and device.type == "cuda"  # compiling costs minutes on a CPU and is only timed on the GPU
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape.batch, 3, shape.image, shape.image, generator=g).to(device)
    y = torch.randint(0, config.num_classes, (shape.batch,), generator=g).to(device)
    ours = VisionTransformer(config).to(device)
    theirs = timm_model(shape, config).to(device)
    rates: dict[str, float] = {}
    kind = name.split()[0]
    mode = "reduce-overhead" if "vit-ti4" in name else "default"  # CUDA graphs for the small static model

    def measure(label: str, model: torch.nn.Module, compile_it: bool = False) -> None:
        net = torch.compile(model, mode=mode) if compile_it else model
        step = train_step(net, x, y, amp) if kind == "train" else infer_step(net.eval(), x, amp)
        rates[label] = rate(step, shape.batch, steps, warmup, sync)

    if kind in ("train", "infer"):
        measure("ours", ours)
        measure("timm", theirs)
        if compiled:
            measure("ours compiled", ours, True)
            measure("timm compiled", theirs, True)
    elif kind == "latency":
        measure("ours", ours.eval())
        measure("transformers sdpa", hf_model(config).to(device).eval())
    elif kind == "explain":
        rates.update(_explain_rates(name, ours.eval(), theirs.eval(), config, shape, steps, warmup, sync))
    else:  # the interactive update, or a patching sweep: the app's forward passes against plain ones
        loaded = LoadedModel(ours.eval(), config, [str(i) for i in range(config.num_classes)],
                             Preprocess(config.image_size))
        image = _image(shape.image)
        grid = config.grid_size
        inputs = Inputs(loaded, image, config.image_size, np.zeros(grid, bool),
                        np.ones((config.depth + config.class_attn_depth, config.num_heads), np.float32),
                        needs=Needs(maps=frozenset({config.depth - 1})))
        if kind == "sweep":
            from vit_explorer.explore.components import corrupted_inputs, run_sweep

            corrupted = corrupted_inputs(inputs, "mask")
            runs = config.depth * inputs.loaded.model.layout(config.image_size).num_tokens

            def sweep() -> None:
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
                    run_sweep(inputs, corrupted, "resid", batch=shape.batch)

            rates["plain forward"] = rate(infer_step(ours, x, amp), shape.batch, steps, warmup, sync)
            rates["patched runs"] = rate(sweep, runs, max(1, steps // 10), 1, sync)
        else:
            pixels = loaded.preprocess(image)
            rates["plain forward"] = rate(infer_step(ours, pixels, False), 1, steps, warmup, sync)
            rates["interactive update"] = rate(lambda: run_forward(inputs), 1, steps, warmup, sync)
    return {"case": name, "batch": shape.batch, "image": shape.image,
            "rates": {k: round(v, 1) for k, v in rates.items()}, **_verdict(name, rates, config, shape)}


def _explain_rates(name: str, ours: VisionTransformer, theirs: torch.nn.Module, config: ViTConfig, shape: Shape,
                   steps: int, warmup: int, sync: Callable[[], None]) -> dict[str, float]:
    """Issue 16: an attention-gradient map against timm's forward + backward of the logit (batch 1), or the ten-step
    perturbation curve against timm's forward of the same ten perturbed images; rates in images per second."""
    from vit_explorer.analysis import faithfulness as faith
    from vit_explorer.explore import relevance as rel

    loaded = LoadedModel(ours, config, [str(i) for i in range(config.num_classes)], Preprocess(config.image_size))
    inputs = Inputs(loaded, _image(shape.image), config.image_size, np.zeros(config.grid_size, bool),
                    np.ones((config.depth, config.num_heads), np.float32))
    session = rel.prepare(inputs, rel.Target(index=1))
    pixels = session.scorer.pixels

    def backward() -> None:
        theirs.zero_grad(set_to_none=True)
        theirs(pixels)[0, 1].backward()

    if "map" in name:
        return {"attention-gradient map": rate(lambda: rel.relevance_map(session, "attention-gradient"), 1, steps,
                                               warmup, sync),
                "timm fwd+bwd": rate(backward, 1, steps, warmup, sync)}
    masks = faith.perturbation_masks(rel.relevance_map(session, "rollout"), positive=True)  # (10, N)
    batch = session.scorer.batch(torch.from_numpy(masks).to(pixels.device))[0].contiguous()
    return {"perturbation curve": rate(lambda: list(faith.scores(session.scorer.scores, masks, rel.BATCH)),
                                       shape.batch, steps, warmup, sync),
            "timm forward": rate(infer_step(theirs, batch, False), shape.batch, steps, warmup, sync)}


def _verdict(name: str, rates: dict[str, float], config: ViTConfig, shape: Shape) -> dict[str, Any]:
    ours = rates.get("ours compiled", rates.get("ours", 0.0))
    if name.startswith("sweep"):
        ratio = rates["plain forward"] / rates["patched runs"]  # time per run: patched / plain, same batches
        return {"ratio": round(ratio, 3), "target": "sweep <= 1.3x plain batched forwards", "met": ratio <= 1.3}
    if name.startswith("explain"):
        mine, reference = list(rates.values())
        ratio = reference / mine  # time ratio: ours / timm's
        return {"ratio": round(ratio, 3), "target": "<= 1.3x timm's time", "met": ratio <= 1.3}
    if name.startswith("update"):
        ratio = rates["plain forward"] / rates["interactive update"]  # time ratio: update / plain
        return {"ratio": round(ratio, 3), "target": "update <= 1.3x a plain forward", "met": ratio <= 1.3}
    if name.startswith("latency"):
        ratio = ours / rates["transformers sdpa"]
        return {"ratio": round(ratio, 3), "target": ">= 1.0x transformers (latency <=)", "met": ratio >= 1.0}
    reference = rates.get("timm compiled", rates["timm"])
    ratio = ours / reference
    need = 1.2 if "cait" in name else 1.0
    verdict = {"ratio": round(ratio, 3), "target": f">= {need}x timm{' compiled' if 'timm compiled' in rates else ''}",
               "met": ratio >= need}
    if name.startswith("train"):
        from vit_explorer.analysis.params import flops_per_stage

        flops = sum(flops_per_stage(config, config.image_size).values()) * 3  # forward + backward
        verdict["tflops_per_s"] = round(ours * flops / 1e12, 2)
    return verdict


def _image(size: int) -> Any:
    from PIL import Image

    return Image.fromarray((np.random.default_rng(0).random((size, size, 3)) * 255).astype(np.uint8))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reduced", action="store_true", help="tiny shapes, fp32, no compiling (any machine)")
    parser.add_argument("--cases", nargs="*", default=list(FULL), choices=list(FULL))
    parser.add_argument("--steps", type=int, default=None, help="timed steps per contender (default 20; reduced 3)")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak of the GPU, for MFU")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    cuda = torch.cuda.is_available()
    full = cuda and not args.reduced
    device = torch.device("cuda" if cuda else "cpu")
    steps = args.steps or (20 if full else 3)
    shapes = FULL if full else REDUCED
    torch.manual_seed(0)
    print(f"{'full' if full else 'reduced'} form on {torch.cuda.get_device_name() if cuda else 'the CPU'}, "
          f"torch {torch.__version__}, {'bf16 autocast' if full else 'fp32'}")
    rows = []
    for name in args.cases:
        row = run_case(name, shapes[name], device, full, steps, warmup=5 if full else 1)
        if full and "tflops_per_s" in row:
            row["mfu"] = round(row["tflops_per_s"] / args.peak_tflops, 3)
        rows.append(row)
        rates = "  ".join(f"{k} {v:,.1f}" for k, v in row["rates"].items())
        verdict = ("met" if row["met"] else "MISSED") if full else "not the target's shape in the reduced form"
        print(f"  {name:18s} {rates}   ratio {row['ratio']:.3f} ({row['target']}: {verdict})"
              + (f"  MFU {row['mfu']:.0%}" if "mfu" in row else ""), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"form": "full" if full else "reduced", "device": str(device), "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
