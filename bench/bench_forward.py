"""Benchmark our forward pass against timm's on the same weights.

For each model and batch size, times timm's forward, our fast path (`model(x)`, fused SDPA) and
our capture path (`forward_intermediates(x, capture='all')`, explicit softmax, every attention map
kept). The three runs are interleaved within each repeat so that drifting machine load hits them
alike; the table reports median times over repeats and the median of the per-repeat ratios.
fp32 on CPU; bf16 on CUDA when a GPU is present.

    .venv/bin/python bench/bench_forward.py            # ViT-S/16 and ViT-B/16, batch 1 and 64
    .venv/bin/python bench/bench_forward.py --quick    # ViT-S/16, batch 1 and 8, fewer repeats
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import timm
import torch

from vit_explorer.models import VisionTransformer, preset

MODELS = {"vit-s16": "vit_small_patch16_224", "vit-b16": "vit_base_patch16_224"}


def build_pair(name: str, device: torch.device, dtype: torch.dtype) -> tuple[torch.nn.Module, VisionTransformer]:
    """timm's model with random weights, and ours loaded from its state dict (keys match one to one)."""
    reference = timm.create_model(MODELS[name], pretrained=False)
    ours = VisionTransformer(preset(name))
    ours.load_state_dict(reference.state_dict(), strict=True)
    return reference.to(device, dtype).eval(), ours.to(device, dtype).eval()


def time_once(fn: Callable[[], object], iters: int, device: torch.device, clock: str) -> float:
    """Mean seconds per call over iters calls: wall time, or this process's CPU time (CPU runs only),
    which a busy shared machine disturbs far less."""
    now = time.process_time if clock == "cpu" and device.type == "cpu" else time.perf_counter
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = now()
    for _ in range(iters):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (now() - start) / iters


def bench_case(name: str, batch: int, device: torch.device, dtype: torch.dtype, repeats: int,
               iters: int, clock: str) -> dict[str, float]:
    reference, ours = build_pair(name, device, dtype)
    x = torch.randn(batch, 3, 224, 224, device=device, dtype=dtype)
    runs: dict[str, Callable[[], object]] = {
        "timm": lambda: reference(x),
        "fast": lambda: ours(x),
        "capture": lambda: ours.forward_intermediates(x, capture="all"),
    }
    with torch.inference_mode():
        diff = (reference(x).float() - ours(x).float()).abs().max().item()
        for fn in runs.values():  # warm-up: allocator, kernels, lazy init
            fn()
        times: dict[str, list[float]] = {key: [] for key in runs}
        for r in range(repeats):
            # rotate the order each repeat so no variant always runs first after a pause
            order = list(runs)[r % len(runs):] + list(runs)[:r % len(runs)]
            for key in order:
                times[key].append(time_once(runs[key], iters, device, clock))
    result = {key: statistics.median(values) for key, values in times.items()}
    # ratios of runs from the same repeat (seconds apart) cancel most of the drift in machine load
    result["fast/timm"] = statistics.median(f / t for f, t in zip(times["fast"], times["timm"], strict=True))
    result["capture/fast"] = statistics.median(c / f for c, f in zip(times["capture"], times["fast"], strict=True))
    result["max_abs_diff"] = diff
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="ViT-S/16 only, batch 1 and 8, fewer repeats")
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), help="models to run")
    parser.add_argument("--batches", nargs="+", type=int, help="batch sizes")
    parser.add_argument("--repeats", type=int,
                        help="timed repeats per variant (default: more for small batches; median reported)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="CPU runs: wall time, or process CPU time (steadier on a busy machine)")
    args = parser.parse_args()
    models = args.models or (["vit-s16"] if args.quick else ["vit-s16", "vit-b16"])
    batches = args.batches or ([1, 8] if args.quick else [1, 64])
    if args.threads:
        torch.set_num_threads(args.threads)

    setups = [(torch.device("cpu"), torch.float32)]
    if torch.cuda.is_available():
        setups.append((torch.device("cuda"), torch.bfloat16))
    cuda = f"CUDA: {torch.cuda.get_device_name()}" if torch.cuda.is_available() else "no CUDA: bf16 runs skipped"
    print(f"torch {torch.__version__}, timm {timm.__version__}, CPU threads {torch.get_num_threads()}, "
          f"CPU clock {args.clock}, {cuda}")
    header = (f"{'model':8} {'device':5} {'dtype':9} {'batch':>5} {'timm ms':>9} {'fast ms':>9} {'capture ms':>10} "
              f"{'fast/timm':>9} {'capture/fast':>12} {'max|diff|':>9}")
    print(header)
    print("-" * len(header))
    for device, dtype in setups:
        for name in models:
            for batch in batches:
                # CPU: one call per timing, alternating variants call by call, many repeats for short calls;
                # CUDA: several calls per timing so that launch and synchronisation costs average out
                repeats = args.repeats or max(3 if args.quick else 5, (16 if args.quick else 48) // batch)
                iters = 1 if device.type == "cpu" else max(5, 64 // batch)
                r = bench_case(name, batch, device, dtype, repeats, iters, args.clock)
                print(f"{name:8} {device.type:5} {str(dtype).removeprefix('torch.'):9} {batch:5d} "
                      f"{r['timm'] * 1e3:9.1f} {r['fast'] * 1e3:9.1f} {r['capture'] * 1e3:10.1f} "
                      f"{r['fast/timm']:9.3f} {r['capture/fast']:12.3f} {r['max_abs_diff']:9.1e}",
                      flush=True)
    print("targets: fast/timm <= 1.05, capture/fast <= 1.15")


if __name__ == "__main__":
    main()
