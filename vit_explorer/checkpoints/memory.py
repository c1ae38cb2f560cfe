"""How much memory a model needs, checked against what the machine has, before anything is built.

The estimate is the float32 parameters plus the largest activation of one forward pass at the
requested size: the attention scores and probabilities of one block, (B, heads, T, T) twice,
or the MLP's hidden activations, whichever is larger, plus a few copies of the token stream.
With `captures` every block's attention and hidden states are kept, as the report and the app do.
"""

from __future__ import annotations

import resource

import torch

from ..models import ViTConfig
from .errors import CheckpointError
from .files import size_text

FLOAT = 4  # bytes; the model runs in float32


def estimate_bytes(config: ViTConfig, image_size: tuple[int, int] | None = None, batch: int = 1,
                   captures: bool = False, parameters: bool = True) -> int:
    """Bytes of the parameters (unless `parameters` is False: already in memory) plus the peak
    activations of a forward pass on `batch` images of `image_size` (default: the model's own)."""
    h, w = image_size or config.image_size
    tokens = (h // config.patch_size) * (w // config.patch_size) + config.num_prefix_tokens
    attention = batch * config.num_heads * tokens * tokens * FLOAT
    mlp = batch * tokens * int(config.embed_dim * max(config.mlp_ratio, 1.0)) * FLOAT
    stream = batch * tokens * config.embed_dim * FLOAT
    peak = max(2 * attention, mlp) + 4 * stream
    if captures:
        peak += config.depth * (attention + stream)
    return (config.estimate_parameters() * FLOAT if parameters else 0) + peak


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


def check_fits(needed: int, device: torch.device, what: str, where: str) -> None:
    """CheckpointError when `needed` bytes exceed the free memory on `device`."""
    free = available_bytes(device)
    if free is not None and needed > free:
        raise CheckpointError(f"{where}: {what} needs about {size_text(needed)}, but only {size_text(free)} of "
                              f"memory is free on {device}; use a smaller model or input size, or another device")


def check_model_fits(config: ViTConfig, device: torch.device, where: str, image_size: tuple[int, int] | None = None,
                     batch: int = 1, captures: bool = False, loaded: bool = False, extra: int = 0) -> None:
    """Refuse a model whose parameters (unless `loaded` there already) and activations at `image_size`,
    plus `extra` bytes, would not fit on `device`."""
    h, w = image_size or config.image_size
    needed = estimate_bytes(config, image_size, batch, captures, parameters=not loaded) + extra
    what = (f"this model ({config.estimate_parameters():,} parameters) on {batch} image(s) of {h}x{w}"
            + (" with every attention map kept" if captures else ""))
    check_fits(needed, device, what, where)
