"""Teachers for DeiT distillation: any model `vit_explorer.load` opens, or a small built-in CNN
(DeiT's point is that a convnet teacher helps a ViT student most)."""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from ..checkpoints.preprocess import Preprocess
from ..data.datasets import TrainingData, normalize, random_crop_flip, to_device
from .batches import Batches, evaluate
from .events import Event, Notice
from .recipe import Recipe


class SmallCNN(nn.Module):
    """Three conv-BN-ReLU stages (the last two with stride 2), global average pooling, a linear head."""

    def __init__(self, num_classes: int, width: int = 32) -> None:
        super().__init__()

        def stage(c_in: int, c_out: int, stride: int) -> nn.Sequential:
            return nn.Sequential(nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), nn.BatchNorm2d(c_out),
                                 nn.ReLU(inplace=True))

        self.features = nn.Sequential(stage(3, width, 1), stage(width, 2 * width, 2), stage(2 * width, 4 * width, 2),
                                      stage(4 * width, 4 * width, 1))
        self.head = nn.Linear(4 * width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))  # (B, classes)


class Teacher(nn.Module):
    """Runs a teacher on the student's batches: undo the student's normalisation, resize to the
    teacher's input size, apply the teacher's normalisation. Always in eval mode, no gradients."""

    def __init__(self, model: nn.Module, student: Preprocess, teacher: Preprocess) -> None:
        super().__init__()
        self.model = model.eval()
        self.student = student
        self.teacher = teacher
        self.model.requires_grad_(False)

    def train(self, mode: bool = True) -> Teacher:
        return super().train(False)  # a teacher never leaves eval mode

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dev = x.device
        # copied without waiting for the device: the teacher runs inside every training step
        s_mean, s_std, t_mean, t_std = (to_device(torch.tensor(v).view(1, 3, 1, 1), dev) for v in (
            self.student.mean, self.student.std, self.teacher.mean, self.teacher.std))
        pixels = x * s_std + s_mean  # (B, 3, H, W) in [0, 1]
        if tuple(pixels.shape[2:]) != tuple(self.teacher.size):
            pixels = F.interpolate(pixels, size=self.teacher.size, mode="bilinear", antialias=True,
                                   align_corners=False)
        return self.model((pixels - t_mean) / t_std).float()  # (B, classes)


def train_cnn_teacher(data: TrainingData, recipe: Recipe, dev: torch.device) -> Iterator[Event | SmallCNN]:
    """Train the built-in CNN teacher on full batches (every process identically); yields notices, then it."""
    yield Notice(f"training the built-in CNN teacher for {recipe.teacher_steps} steps")
    torch.manual_seed(recipe.seed + 17)
    cnn = SmallCNN(data.num_classes).to(dev)
    opt = torch.optim.AdamW(cnn.parameters(), lr=2e-3, weight_decay=0.05)
    batches = Batches(data, min(recipe.batch_size, len(data.train)), recipe.seed + 17, 0, 1)
    gen = torch.Generator().manual_seed(recipe.seed + 17)
    it, epoch = batches.epoch(0, 0), 0
    for step in range(recipe.teacher_steps):
        try:
            images, labels, _ = next(it)
        except StopIteration:
            epoch += 1
            it = batches.epoch(epoch, 0)
            images, labels, _ = next(it)
        if data.augment:
            images = random_crop_flip(images, gen)
        for group in opt.param_groups:
            group["lr"] = 2e-3 * 0.5 * (1 + math.cos(math.pi * step / recipe.teacher_steps))
        loss = F.cross_entropy(cnn(normalize(images.to(dev), data.preprocessing)), labels.to(dev))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    _, acc = evaluate(lambda x: cnn(x), data, recipe, dev, 0, 1)
    yield Notice(f"CNN teacher: validation accuracy {acc:.1%}")
    yield cnn.eval()
