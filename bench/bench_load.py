"""Opening a large checkpoint: load time and peak memory against timm and transformers, in one run.

The DINOv2-L/14 shape (304M parameters, 518x518 position table) with random weights, written once to a
temporary folder in timm's hub layout and in Hugging Face's `save_pretrained` layout, each as float32 and as
bfloat16 safetensors. Each (layout, dtype, loader) then runs in a fresh process: the libraries are imported
first, then the timed load, then one forward pass at --image-size (224 by default: 518x518 takes minutes on a
small shared CPU), and the child's peak resident memory (`ru_maxrss`) is reported. Loaders:

- ours: `vit_explorer.load(folder)`: a memory map of the file, the stored dtype kept (bf16 runs in bf16);
- timm-on-meta: `timm.create_model(name)` on the meta device, then `load_state_dict(assign=True)` from the
  file read by `safetensors.torch.load_file` (which maps it), for timm's layout;
- transformers: `Dinov2Model.from_pretrained(folder, dtype="auto")`, for HF's layout (it keeps the stored dtype).

Ratios are ours / the reference on the same file in the same run; the targets are peak <= 1.05x and
load <= 1.2x. Each child also checks that the model's parameters are in the file's dtype.

    .venv/bin/python bench/bench_load.py [--image-size 224] [--threads N] [--keep DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NAME = "vit_large_patch14_dinov2"  # timm's DINOv2-L/14
HF = dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, image_size=518, patch_size=14)
DTYPES = ("float32", "bfloat16")
REFERENCE = {"timm": "timm-on-meta", "hf": "transformers"}


def write_checkpoints(root: Path) -> None:
    """Random weights written once to root/{timm,hf}-{float32,bfloat16}."""
    import timm
    import torch
    from timm.models._hub import save_for_hf
    from transformers import Dinov2Config, Dinov2Model

    torch.manual_seed(0)
    model = timm.create_model(NAME, pretrained=False).eval()
    for dtype in DTYPES:
        save_for_hf(model.to(getattr(torch, dtype)), str(root / f"timm-{dtype}"), safe_serialization=True)
    del model
    hf = Dinov2Model(Dinov2Config(**HF)).eval()
    for dtype in DTYPES:
        hf.to(getattr(torch, dtype)).save_pretrained(root / f"hf-{dtype}")


def measure(loader: str, layout: str, dtype: str, folder: Path, image_size: int, threads: int | None) -> dict:
    """One load and one forward in this (fresh) process."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    if loader == "ours":
        from vit_explorer.checkpoints import load
    elif loader == "timm-on-meta":
        import timm
        from safetensors.torch import load_file
    else:
        from transformers import Dinov2Model
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start = time.perf_counter()
    if loader == "ours":
        model = load(folder).model
    elif loader == "timm-on-meta":
        with torch.device("meta"):
            model = timm.create_model(NAME, pretrained=False, dynamic_img_size=True)
        model.load_state_dict(load_file(str(folder / "model.safetensors")), assign=True)
        model.eval()
    else:
        model = Dinov2Model.from_pretrained(folder, dtype="auto").eval()
    seconds = time.perf_counter() - start
    after_load = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    stored = getattr(torch, dtype)
    kept = all(p.dtype == stored for p in model.parameters())
    x = torch.randn(1, 3, image_size, image_size, dtype=stored)
    start = time.perf_counter()
    with torch.inference_mode():
        model(x)
    forward = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return {"loader": loader, "layout": layout, "dtype": dtype, "load_s": seconds, "forward_s": forward,
            "before_mib": before, "after_load_mib": after_load, "peak_mib": peak, "kept_dtype": kept}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--keep", default=None, help="write (or reuse) the checkpoints here instead of a temp folder")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--one", nargs=4, default=None, help=argparse.SUPPRESS)  # internal: loader layout dtype dir
    parser.add_argument("--write", default=None, help=argparse.SUPPRESS)  # internal: write the checkpoints there
    args = parser.parse_args()
    if args.write:
        write_checkpoints(Path(args.write))
        return
    if args.one:
        loader, layout, dtype, folder = args.one
        print(json.dumps(measure(loader, layout, dtype, Path(folder), args.image_size, args.threads)))
        return

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.keep or tmp)
        folders = {(lay, dt): root / f"{lay}-{dt}" for lay in REFERENCE for dt in DTYPES}
        if not all((folder / "model.safetensors").exists() for folder in folders.values()):
            # in a process of its own: a child inherits its parent's peak (ru_maxrss) when forked
            print("writing the checkpoints…", file=sys.stderr)
            subprocess.run([sys.executable, __file__, "--write", str(root)], check=True)
        rows = []
        for (layout, dtype), folder in folders.items():
            for loader in ("ours", REFERENCE[layout]):
                command = [sys.executable, __file__, "--image-size", str(args.image_size), "--one", loader, layout,
                           dtype, str(folder)] + (["--threads", str(args.threads)] if args.threads else [])
                out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
                row = json.loads(out.strip().splitlines()[-1])
                row["file_mib"] = (folder / "model.safetensors").stat().st_size / 2**20
                rows.append(row)
                print(f"{layout:5} {dtype:9} {loader:13} load {row['load_s']:6.2f} s  forward {row['forward_s']:6.2f} s"
                      f"  peak {row['peak_mib']:7.0f} MiB  (file {row['file_mib']:.0f} MiB, before load "
                      f"{row['before_mib']:.0f} MiB, dtype kept: {row['kept_dtype']})", file=sys.stderr)
    print(f"\n| layout | dtype | file MiB | ours load s | {'/'.join(REFERENCE.values())} load s | load ratio | "
          "load + forward ratio | ours peak MiB | reference peak MiB | peak ratio | dtype kept |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for layout, dtype in folders:
        ours, ref = (next(r for r in rows if (r["loader"], r["layout"], r["dtype"]) == (who, layout, dtype))
                     for who in ("ours", REFERENCE[layout]))
        print(f"| {layout} | {dtype} | {ours['file_mib']:.0f} | {ours['load_s']:.2f} | {ref['load_s']:.2f} "
              f"({REFERENCE[layout]}) | {ours['load_s'] / ref['load_s']:.2f} | "
              f"{(ours['load_s'] + ours['forward_s']) / (ref['load_s'] + ref['forward_s']):.2f} | "
              f"{ours['peak_mib']:.0f} | "
              f"{ref['peak_mib']:.0f} | {ours['peak_mib'] / ref['peak_mib']:.3f} | "
              f"{ours['kept_dtype']} / {ref['kept_dtype']} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
