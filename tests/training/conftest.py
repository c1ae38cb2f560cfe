"""Tiny models and datasets so that every training test runs in seconds on two CPU cores."""

from dataclasses import replace

import pytest
import torch

from vit_explorer.data.datasets import TensorImages, TrainingData, load_data
from vit_explorer.models import ViTConfig
from vit_explorer.models.presets import preset


def tiny_config(**overrides: object) -> ViTConfig:
    return preset("classroom-tiny", **{"image_size": 16, "embed_dim": 32, "depth": 1, "num_heads": 2, **overrides})


@pytest.fixture(scope="session")
def colour_data() -> TrainingData:
    """An easy 4-class set (each class a colour plus noise): the loss must fall within a few steps."""
    g = torch.Generator().manual_seed(0)
    labels = torch.arange(256) % 4
    palette = torch.tensor([[230, 30, 30], [30, 230, 30], [30, 30, 230], [230, 230, 30]], dtype=torch.float32)
    images = palette[labels].view(-1, 3, 1, 1) + 40 * torch.randn(256, 3, 16, 16, generator=g)
    images = images.clamp(0, 255).to(torch.uint8)
    base = load_data("shapes", image_size=(16, 16), train_size=1, val_size=1)
    return replace(base, train=TensorImages(images[:192], labels[:192]), val=TensorImages(images[192:], labels[192:]),
                   labels=["red", "green", "blue", "yellow"])


@pytest.fixture(scope="session")
def tiny_data() -> TrainingData:
    return load_data("shapes", image_size=(16, 16), seed=0, train_size=256, val_size=64)
