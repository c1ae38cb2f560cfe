"""The one device resolver: the device a model runs (or trains) on, from a user's string, refused with a message
when it cannot work here."""

from __future__ import annotations

import os

import torch

from .errors import CheckpointError

DEVICES = "cpu, cuda, cuda:N or mps"


class DeviceError(CheckpointError, ValueError):
    """A device that does not exist here or cannot do the work; the message says which ones can."""


def preferred_device() -> torch.device:
    """This process's GPU when there is one (torchrun's LOCAL_RANK, else cuda:0), else the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")


def resolve_device(text: str | torch.device | None, *, default: str = "cpu", use: str = "run") -> torch.device:
    """'cpu', 'cuda', 'cuda:1', 'mps' as a torch.device that exists on this machine; None (or '') gives `default`
    ('cpu', or 'auto': `preferred_device()`). `use` says what the device is for in a refusal ('train')."""
    if not text:
        return preferred_device() if default == "auto" else torch.device(default)
    text = str(text)
    try:
        device = torch.device(text)
    except (RuntimeError, TypeError, ValueError):
        raise DeviceError(f"device {text[:40]!r} is not a device; use {DEVICES}") from None
    if device.type == "cpu":
        return device
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(f"device {text!r}: no CUDA GPU is available here; use --device cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise DeviceError(f"device {text!r}: there are only {torch.cuda.device_count()} CUDA GPU(s), "
                                  f"cuda:0 to cuda:{torch.cuda.device_count() - 1}")
        return device
    if device.type == "mps":
        if not torch.backends.mps.is_available():
            raise DeviceError(f"device {text!r}: Apple's MPS is not available here; use --device cpu")
        return device
    why = " (it holds no data, so there is nothing to compute)" if device.type == "meta" else ""
    raise DeviceError(f"device {text!r}: cannot {use} on {device.type}{why}; use {DEVICES}")
