"""The device a run trains on, and the memory a training step needs, checked before anything is allocated."""

from __future__ import annotations

import torch

from ..data.datasets import available_memory, human_bytes
from ..models import ViTConfig

BYTES = 4  # float32 activations and weights (bf16 autocast halves some, but not the optimizer's)


def device_memory(dev: torch.device) -> int | None:
    """Bytes free for a run on `dev`; None where it cannot be told."""
    if dev.type == "cuda":
        return torch.cuda.mem_get_info(dev)[0]
    return available_memory() if dev.type == "cpu" else None


def largest_activation(config: ViTConfig, batch: int) -> tuple[int, str]:
    """Bytes of the largest tensor one training forward makes at `batch` images per process, and what it is."""
    h, w = config.image_size
    tokens = config.num_patches + config.num_prefix_tokens
    hidden = int(config.embed_dim * config.mlp_ratio)
    candidates = [
        (batch * config.num_heads * tokens * tokens * BYTES,
         f"one attention map (batch {batch} x {config.num_heads} heads x {tokens:,}^2 tokens)"),
        (batch * tokens * hidden * BYTES, f"the MLP's hidden layer (batch {batch} x {tokens:,} tokens x {hidden})"),
        (batch * 3 * h * w * BYTES, f"the input (batch {batch} x 3 x {h} x {w})"),
    ]
    if config.stem != "patchify":
        channels, stride = config.conv_stem_plan()[0]
        candidates.append((batch * channels * (h // stride) * (w // stride) * BYTES,
                           f"the convolutional stem's first layer (batch {batch} x {channels} x {h // stride} x "
                           f"{w // stride})"))
    return max(candidates)


def check_training_memory(config: ViTConfig, batch: int, dev: torch.device) -> None:
    """Refuse a model and batch whose weights (with gradients and AdamW moments) and largest activation
    alone exceed the memory free on `dev`: such a run can only fail, after a long wait or a crash."""
    free = device_memory(dev)
    if free is None:
        return
    weights = 4 * BYTES * config.estimate_parameters()  # weights, gradients, two AdamW moments
    activation, what = largest_activation(config, batch)
    if weights + activation > free:
        h, w = config.image_size
        raise ValueError(f"training at image size {h}x{w} needs {human_bytes(activation)} for {what} plus "
                         f"{human_bytes(weights)} for the weights and optimizer, more than the {human_bytes(free)} "
                         f"free on {dev}; use a smaller --image-size or --batch-size")
