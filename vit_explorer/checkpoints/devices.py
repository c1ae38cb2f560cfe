"""The device a model runs on, from a user's string, refused with a message when it cannot work."""

from __future__ import annotations

import torch

from .errors import CheckpointError

DEVICES = "cpu, cuda, cuda:N or mps"


def resolve_device(text: str | None) -> torch.device:
    """'cpu', 'cuda', 'cuda:1', 'mps' (None = the CPU) as a torch.device that exists on this machine."""
    if text is None:
        return torch.device("cpu")
    try:
        device = torch.device(text)
    except (RuntimeError, TypeError, ValueError):
        raise CheckpointError(f"device {text[:40]!r} is not a device; use {DEVICES}") from None
    if device.type == "cpu":
        return device
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise CheckpointError(f"device {text!r}: no CUDA GPU is available here; use --device cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise CheckpointError(f"device {text!r}: there are only {torch.cuda.device_count()} CUDA GPU(s), "
                                  f"cuda:0 to cuda:{torch.cuda.device_count() - 1}")
        return device
    if device.type == "mps":
        if not torch.backends.mps.is_available():
            raise CheckpointError(f"device {text!r}: Apple's MPS is not available here; use --device cpu")
        return device
    why = "it holds no data, so there is nothing to compute" if device.type == "meta" else "it is not supported"
    raise CheckpointError(f"device {text!r}: {why}; use {DEVICES}")
