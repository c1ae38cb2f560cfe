"""Sample images for the app: built-in dataset images drawn at 128 px, and two larger synthetic
scenes. `python -m vit_explorer.data.samples DIR` writes them (resources/samples/ ships them)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from . import synthetic

SAMPLE_CLASSES = ("circle", "ring", "square", "triangle", "plus", "star", "crescent", "half-disc")


def dataset_samples(size: int = 128, seed: int = 0) -> dict[str, Image.Image]:
    """One image per class in SAMPLE_CLASSES, drawn by the built-in generator at `size` pixels."""
    images, labels = synthetic.generate(synthetic.CHUNK, seed=seed, size=size, split="val")
    out = {}
    for name in SAMPLE_CLASSES:
        k = int((labels == synthetic.SHAPES.index(name)).nonzero()[0])
        out[name] = Image.fromarray(images[k].permute(1, 2, 0).numpy())
    return out


def where_sample(cell: str = "top right", size: int = 128, seed: int = 0) -> Image.Image:
    """One image of the built-in "where" set whose shape sits in `cell` of the 3x3 grid (its label): the
    task that a model without position embeddings cannot learn."""
    images, labels = synthetic.generate(synthetic.CHUNK, seed=seed, size=size, variant="where", split="val")
    k = int((labels == synthetic.WHERE.index(cell)).nonzero()[0])
    return Image.fromarray(images[k].permute(1, 2, 0).numpy())


def hills_scene(size: int = 224) -> Image.Image:
    """A sky gradient, a sun and two rows of hills: a natural-looking picture with large smooth regions."""
    y, x = np.mgrid[0:size, 0:size].astype(np.float32) / size
    sky = np.stack([0.95 - 0.5 * y, 0.6 - 0.2 * y, 0.3 + 0.5 * y], -1)
    sun = np.hypot(x - 0.7, y - 0.3) < 0.1
    img = np.where(sun[..., None], np.array([1.0, 0.85, 0.3]), sky)
    far = y > 0.55 + 0.06 * np.sin(7 * x + 1.0)
    near = y > 0.72 + 0.08 * np.sin(4 * x + 2.5)
    img = np.where(far[..., None], np.array([0.35, 0.5, 0.3]) * (1.1 - 0.3 * y[..., None]), img)
    img = np.where(near[..., None], np.array([0.2, 0.4, 0.15]) * (1.2 - 0.3 * y[..., None]), img)
    noise = np.random.default_rng(0).normal(0, 0.015, img.shape)
    return Image.fromarray((np.clip(img + noise, 0, 1) * 255).astype(np.uint8))


def shapes_scene(size: int = 224) -> Image.Image:
    """Several dataset shapes on one textured table-top: which one does the classifier pick?"""
    g = torch.Generator().manual_seed(3)
    y, x = np.mgrid[0:size, 0:size].astype(np.float32)
    wood = 0.55 + 0.08 * np.sin(x / 9 + 3 * np.sin(y / 37)) + 0.03 * np.sin(x / 2.3)
    img = np.stack([wood, wood * 0.75, wood * 0.5], -1)
    for name, (cx, cy, r, colour) in {"circle": (60, 60, 34, (0.9, 0.2, 0.2)), "star": (165, 70, 42, (0.95, 0.85, 0.2)),
                                      "triangle": (70, 165, 40, (0.2, 0.4, 0.9)),
                                      "plus": (165, 165, 36, (0.1, 0.6, 0.3))}.items():
        theta = float(torch.rand(1, generator=g)) * 2 * math.pi
        dx, dy = (x + 0.5 - cx) / r, (y + 0.5 - cy) / r
        u = math.cos(theta) * dx + math.sin(theta) * dy
        v = -math.sin(theta) * dx + math.cos(theta) * dy
        sdf = synthetic.SDF[name](torch.from_numpy(u), torch.from_numpy(v)).numpy()
        alpha = np.clip(0.5 - sdf * r, 0, 1)[..., None]
        img = img * (1 - alpha) + np.array(colour) * alpha
    return Image.fromarray((np.clip(img, 0, 1) * 255).astype(np.uint8))


def write_samples(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    images = {**dataset_samples(), "scene-hills": hills_scene(), "scene-shapes": shapes_scene(),
              "where-corner": where_sample()}
    paths = []
    for name, image in images.items():
        path = folder / f"{name}.png"
        image.save(path, optimize=True)
        paths.append(path)
    return paths


if __name__ == "__main__":
    for p in write_samples(Path(sys.argv[1] if len(sys.argv) > 1 else "resources/samples")):
        print(p)
