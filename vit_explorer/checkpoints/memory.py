"""The budget of a model run, checked before anything is built or run, whatever asks (a file load, a
preset built in a lesson or the builder, a new input size in the app, a lesson step or `inspect
--resolution`): the patches of one forward pass, its multiply-adds, and its memory against what is free.

Patches and multiply-adds are bounded so that one interactive pass ends in seconds; a model's own input
size is always within them (the bounds are at least what the config itself asks for). The memory
estimate is the parameters in the dtype they run in (float32 unless the weights are kept in bf16 / fp16)
plus the largest activation of one forward pass at the requested size (counted in float32): the attention
scores and probabilities of one block, (B, heads, T, T) twice, or the MLP's hidden activations, whichever
is larger, plus a few copies of the token stream.
With `captures` every block's attention and hidden states are kept, as the report and the app do.
"""

from __future__ import annotations

import resource
from collections.abc import Callable

import torch

from ..analysis.params import flops_per_stage
from ..models import ViTConfig
from .errors import CheckpointError
from .files import size_text

FLOAT = 4  # bytes of a float32 number: activations are counted so, and parameters unless said otherwise
MAX_PATCHES = 16_384  # one forward pass at another input size: a 128x128 grid (or the model's own, if larger)
# multiply-adds of one interactive forward pass at another input size (or the model's own, if more): a few
# seconds on a CPU, on a GPU about a hundred times as much
MAX_MULTIPLY_ADDS = {"cpu": 200 * 10**9, "gpu": 20 * 10**12}
WAY_OUT = "use a smaller model or input size, or another device"
WayOut = str | Callable[[], str]  # the way out a refusal names, or what works it out (only when refused)


class BudgetError(CheckpointError, ValueError):
    """A model run refused before it starts (too many patches, multiply-adds or bytes); the message says
    what it needs, what there is, and the way out."""


def estimate_bytes(config: ViTConfig, image_size: tuple[int, int] | None = None, batch: int = 1,
                   captures: bool = False, parameters: bool = True, parameter_bytes: int = FLOAT) -> int:
    """Bytes of the parameters, `parameter_bytes` each (unless `parameters` is False: already in memory), plus
    the peak activations of a forward pass on `batch` images of `image_size` (default: the model's own)."""
    h, w = image_size or config.image_size
    tokens = (h // config.patch_size) * (w // config.patch_size) + config.num_prefix_tokens
    attention = batch * config.num_heads * tokens * tokens * FLOAT
    mlp = batch * tokens * int(config.embed_dim * max(config.mlp_ratio, 1.0)) * FLOAT
    stream = batch * tokens * config.embed_dim * FLOAT
    peak = max(2 * attention, mlp) + 4 * stream
    if captures:
        peak += config.depth * (attention + stream)
    return (config.estimate_parameters() * parameter_bytes if parameters else 0) + peak


def available_bytes(device: torch.device) -> int | None:
    """Free memory on `device` (for the CPU also within this process's address-space limit), or None
    where it cannot be told."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type != "cpu":
        return None
    free = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    free = int(line.split()[1]) * 1024
    except OSError:
        free = None
    limit, _ = resource.getrlimit(resource.RLIMIT_AS)
    if limit != resource.RLIM_INFINITY:
        headroom = max(limit - _address_space(), 0)
        free = headroom if free is None else min(free, headroom)
    return free


def _address_space() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def check_fits(needed: int, device: torch.device, what: str, where: str, way_out: WayOut = WAY_OUT) -> None:
    """BudgetError when `needed` bytes exceed the free memory on `device`."""
    free = available_bytes(device)
    if free is not None and needed > free:
        raise BudgetError(f"{where}: {what} needs about {size_text(needed)}, but only {size_text(free)} of "
                          f"memory is free on {device}; {way_out() if callable(way_out) else way_out}")


def check_model_fits(config: ViTConfig, device: torch.device, where: str, image_size: tuple[int, int] | None = None,
                     batch: int = 1, captures: bool = False, loaded: bool = False, extra: int = 0,
                     way_out: WayOut = WAY_OUT, dtype: torch.dtype = torch.float32) -> None:
    """Refuse a model whose parameters in `dtype` (unless `loaded` there already) and activations at
    `image_size`, plus `extra` bytes, would not fit on `device`."""
    h, w = image_size or config.image_size
    itemsize = dtype.itemsize
    needed = extra + estimate_bytes(config, image_size, batch, captures, parameters=not loaded,
                                    parameter_bytes=itemsize)
    what = (f"this model ({config.estimate_parameters():,} parameters in {str(dtype).removeprefix('torch.')}) on "
            f"{batch} image(s) of {h}x{w}" + (" with every attention map kept" if captures else ""))
    check_fits(needed, device, what, where, way_out)


def multiply_adds(config: ViTConfig, image_size: tuple[int, int] | None = None) -> int:
    """Multiply-adds of one forward pass on one image of `image_size` (default: the model's own)."""
    return sum(flops_per_stage(config, image_size).values()) // 2


def run_limits(config: ViTConfig, device: torch.device) -> tuple[int, int]:
    """(patches, multiply-adds) one forward pass of this model may take on `device`: the interactive bounds,
    or what the model's own input size takes where that is more."""
    budget = MAX_MULTIPLY_ADDS["cpu" if device.type == "cpu" else "gpu"]
    return max(MAX_PATCHES, config.num_patches), max(budget, multiply_adds(config))


def check_run(config: ViTConfig, device: torch.device, where: str, image_size: tuple[int, int] | None = None, *,
              captures: bool = False, loaded: bool = False) -> None:
    """Refuse, before anything is built or run, one forward pass at `image_size` (default: the model's own)
    whose patches or multiply-adds exceed `run_limits`, or whose memory (with the parameters unless `loaded`)
    exceeds what is free on `device`. The message says the largest square input that would run."""
    h, w = image_size or config.image_size
    p = config.patch_size
    patches, macs = (h // p) * (w // p), multiply_adds(config, (h, w))
    max_patches, max_macs = run_limits(config, device)
    if patches > max_patches:
        raise BudgetError(f"{where}: an input of {h}x{w} is {patches:,} patches of {p}x{p} pixels, more than the "
                          f"{max_patches:,} one forward pass may take; {_way_out(config, device, captures, loaded)}")
    if macs > max_macs:
        raise BudgetError(f"{where}: one forward pass at {h}x{w} needs about {macs / 1e9:,.1f} G multiply-adds, "
                          f"more than the {max_macs / 1e9:,.0f} G one interactive pass may take on {device}; "
                          f"{_way_out(config, device, captures, loaded)}")
    check_model_fits(config, device, where, (h, w), captures=captures, loaded=loaded,
                     way_out=lambda: _way_out(config, device, captures, loaded))  # worked out only when refused


def _way_out(config: ViTConfig, device: torch.device, captures: bool, loaded: bool) -> str:
    """The largest square input that runs within the budget, or, if none does, a smaller model."""
    p = config.patch_size
    max_patches, max_macs = run_limits(config, device)
    free = available_bytes(device)

    def runs(side: int) -> bool:
        size = (side * p, side * p)
        return (side * side <= max_patches and multiply_adds(config, size) <= max_macs
                and (free is None or estimate_bytes(config, size, captures=captures, parameters=not loaded) <= free))

    side = 0
    while side < 256 and runs(side + 1):  # 256 x 256 patches: the most a config may have (ViTConfig)
        side += 1
    gpu = ", or run it on the GPU" if device.type == "cpu" and torch.cuda.is_available() else ""
    if not side:
        return f"use a smaller model (fewer blocks, a narrower embed_dim){gpu}"
    return f"use an input of at most {side * p}x{side * p} (a multiple of the patch size {p}){gpu}"
