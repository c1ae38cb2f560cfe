"""Opening a large checkpoint: load time and peak memory against timm and transformers, in one run.

The DINOv2-L/14 shape (304M parameters, 518x518 position table) with random weights, written once to a
temporary folder in timm's hub layout and in Hugging Face's `save_pretrained` layout, each as float32 and as
bfloat16 safetensors. Each (layout, dtype, loader) then runs in a fresh process: the libraries are imported
first, then the timed load, then one forward pass at --image-size (518 by default, the issue's shape), and the
child's peak resident memory (`ru_maxrss`) is reported. Loaders:

- ours: `vit_explorer.load(folder)`: a memory map of the file, the stored dtype kept (bf16 runs in bf16);
- timm-on-meta: `timm.create_model(name)` on the meta device, then `load_state_dict(assign=True)` from the
  file read by `safetensors.torch.load_file`, and the computed buffers (in no file) made again on the CPU by
  timm's `reinit_non_persistent_buffers`, for timm's layout;
- transformers: `Dinov2Model.from_pretrained(folder, dtype="auto")`, for HF's layout (it keeps the stored dtype).

Ratios are ours / the reference on the same file in the same run; the targets are peak <= 1.05x and
load <= 1.2x. Each child also checks that the model's parameters are in the file's dtype.

Each child starts with the file in the page cache (it is read once before each child): otherwise whichever
loader ran first would read it from disk for the other. With --cold, the file's pages are dropped from the
page cache before each child instead (`posix_fadvise` DONTNEED, no root needed), so the load reads from disk
what it touches: ours reads every weight at load (the NaN check), the references at their first forward
pass, so there "load + forward" is the figure to compare.

With --giant, the DINOv3 7B shape instead (timm's `vit_7b_patch16_dinov3`, 6.7e9 parameters) as 12.5 GiB of
bfloat16 safetensors in timm's layout, written tensor by tensor (the whole model is never in memory), ours
against timm-on-meta: whether a 7B model opens on a 24 GiB machine, and at what peak.

    .venv/bin/python bench/bench_load.py [--image-size 518] [--threads N] [--keep DIR] [--json OUT] [--cold]
                                         [--giant]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NAME = "vit_large_patch14_dinov2"  # timm's DINOv2-L/14
GIANT = "vit_7b_patch16_dinov3"  # timm's DINOv3 7B
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


def write_giant(folder: Path) -> None:
    """DINOv3 7B's random bf16 weights in timm's hub layout, one tensor at a time (the model is built on meta)."""
    import timm
    import torch
    from timm.models._hub import save_config_for_hf

    with torch.device("meta"):
        model = timm.create_model(GIANT, pretrained=False)
    shapes = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = 2 * math.prod(shape)
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    folder.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(0)
    with open(folder / "model.safetensors.part", "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        for name, shape in shapes.items():
            ones = name.endswith(("norm.weight", "norm1.weight", "norm2.weight")) or ".gamma" in name
            t = torch.ones(shape) if ones else torch.randn(shape, generator=generator) * 0.02
            f.write(t.to(torch.bfloat16).view(torch.int16).numpy().tobytes())
    save_config_for_hf(model, str(folder / "config.json"))
    (folder / "model.safetensors.part").rename(folder / "model.safetensors")


def warm(path: Path) -> None:
    """Read the file once, so the next reader finds it in the page cache."""
    with open(path, "rb") as f:
        while f.read(64 * 2**20):
            pass


def evict(path: Path) -> None:
    """Drop the file's clean pages from the page cache, so the next reader reads it from disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


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
        from timm.models._manipulate import reinit_non_persistent_buffers
    else:
        from transformers import Dinov2Model
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start = time.perf_counter()
    if loader == "ours":
        model = load(folder).model
    elif loader == "timm-on-meta":
        with torch.device("meta"):
            name = json.loads((folder / "config.json").read_text())["architecture"]
            model = timm.create_model(name, pretrained=False, dynamic_img_size=True)
        model.load_state_dict(load_file(str(folder / "model.safetensors")), assign=True)
        for module in model.modules():  # computed buffers (DINOv3's RoPE periods) are in no file: timm's recipe
            for key, buffer in module._buffers.items():
                if buffer is not None and buffer.is_meta:
                    module._buffers[key] = torch.empty_like(buffer, device="cpu")
        reinit_non_persistent_buffers(model)
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
    parser.add_argument("--image-size", type=int, default=518)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--keep", default=None, help="write (or reuse) the checkpoints here instead of a temp folder")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--cold", action="store_true", help="drop each file from the page cache before each load")
    parser.add_argument("--giant", action="store_true", help="DINOv3 7B in bf16 from timm's layout instead")
    parser.add_argument("--one", nargs=4, default=None, help=argparse.SUPPRESS)  # internal: loader layout dtype dir
    parser.add_argument("--write", default=None, help=argparse.SUPPRESS)  # internal: write the checkpoints there
    args = parser.parse_args()
    if args.write:
        (write_giant if args.giant else write_checkpoints)(Path(args.write))
        return
    if args.one:
        loader, layout, dtype, folder = args.one
        print(json.dumps(measure(loader, layout, dtype, Path(folder), args.image_size, args.threads)))
        return

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.keep or tmp)
        folders = ({("timm", "bfloat16"): root / "timm-7b-bfloat16"} if args.giant else
                   {(lay, dt): root / f"{lay}-{dt}" for lay in REFERENCE for dt in DTYPES})
        if not all((folder / "model.safetensors").exists() for folder in folders.values()):
            # in a process of its own: a child inherits its parent's peak (ru_maxrss) when forked
            print("writing the checkpoints…", file=sys.stderr)
            target = folders["timm", "bfloat16"] if args.giant else root
            subprocess.run([sys.executable, __file__, "--write", str(target)] + ["--giant"] * args.giant, check=True)
        rows = []
        for (layout, dtype), folder in folders.items():
            for loader in ("ours", REFERENCE[layout]):
                command = [sys.executable, __file__, "--image-size", str(args.image_size), "--one", loader, layout,
                           dtype, str(folder)] + (["--threads", str(args.threads)] if args.threads else [])
                (evict if args.cold else warm)(folder / "model.safetensors")
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
