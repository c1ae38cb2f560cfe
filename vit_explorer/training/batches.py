"""Batches for training (seeded sampler order, resumable inside an epoch) and the validation pass."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler

from ..data.datasets import TrainingData, normalize
from ..data.folder import Batch
from . import losses
from .recipe import Recipe


def _identity(batch: Any) -> Any:
    return batch


class Batches:
    """Batches of an epoch in the seeded sampler order, from a position inside the epoch."""

    def __init__(self, data: TrainingData, batch: int, seed: int, rank: int, world: int) -> None:
        self.sampler: DistributedSampler[int] = DistributedSampler(data.train, num_replicas=world, rank=rank,
                                                                   shuffle=True, seed=seed, drop_last=True)
        self.dataset = data.train
        self.batch = batch
        self.steps_per_epoch = len(self.sampler) // batch
        self.workers = 0 if hasattr(data.train, "images") else min(4, os.cpu_count() or 1)

    def epoch(self, epoch: int, start: int) -> Iterator[Batch]:
        self.sampler.set_epoch(epoch)
        order = list(self.sampler)
        chunks = [order[i * self.batch:(i + 1) * self.batch] for i in range(start, self.steps_per_epoch)]
        # its own generator: a DataLoader otherwise draws its worker seed from the global RNG (dropout's)
        return iter(DataLoader(self.dataset, batch_sampler=chunks, collate_fn=_identity, num_workers=self.workers,
                               generator=torch.Generator().manual_seed(epoch)))


@torch.no_grad()
def evaluate(forward: Callable[..., torch.Tensor], data: TrainingData, recipe: Recipe, dev: torch.device, rank: int,
             world: int, mpp: tuple[int, float] | None = None) -> tuple[float, float]:
    """(mean loss, accuracy) on the validation set, summed over processes. mpp = (patch size, ratio)."""
    sampler: DistributedSampler[int] = DistributedSampler(data.val, num_replicas=world, rank=rank, shuffle=False,
                                                          drop_last=False)
    loader = DataLoader(data.val, sampler=sampler, batch_size=max(1, recipe.batch_size // world),
                        collate_fn=_identity, num_workers=0, generator=torch.Generator())
    gen = torch.Generator().manual_seed(recipe.seed + 2)  # the same masks at every validation
    totals = torch.zeros(3, dtype=torch.float64)  # loss sum, correct, count
    for images, labels, _ in loader:
        if not len(labels):
            continue
        x = normalize(images.to(dev), data.preprocessing)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda" and recipe.amp):
            if mpp is None:
                logits = forward(x).float()
                y = labels.to(dev)
            else:
                mask = losses.random_patch_mask(len(labels), x.shape[2] * x.shape[3] // mpp[0] ** 2, mpp[1], gen)
                logits = forward(x, mask.to(dev), gen).float()[mask.to(dev)]  # (M, 512)
                y = losses.mpp_targets(images, mpp[0])[mask].to(dev)
        totals += torch.tensor([F.cross_entropy(logits, y, reduction="sum").item(),
                                (logits.argmax(-1) == y).sum().item(), y.numel()], dtype=torch.float64)
    if world > 1:
        reduced = totals.to(dev)
        dist.all_reduce(reduced)
        totals = reduced.cpu()
    count = max(totals[2].item(), 1.0)
    return totals[0].item() / count, totals[1].item() / count
