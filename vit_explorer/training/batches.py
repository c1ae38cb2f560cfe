"""Batches for training (seeded sampler order, resumable inside an epoch) and the validation pass."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler

from ..data.datasets import TensorImages, TrainingData, normalize, to_device
from ..data.folder import Batch, FolderImages
from . import losses
from .device import autocast
from .recipe import Recipe


def _identity(batch: Any) -> Any:
    return batch


class Batches:
    """Batches of an epoch in the seeded sampler order, from a position inside the epoch.

    In-memory images (the built-in sets, CIFAR) are indexed where they lie, on the GPU when the run moved
    them there (device.resident): one index copy per epoch, none per step. Files are decoded by worker
    processes that live as long as the run, into pinned memory on a GPU run, a few batches ahead.
    """

    def __init__(self, data: TrainingData, batch: int, seed: int, rank: int, world: int, pin_memory: bool = False
                 ) -> None:
        self.sampler: DistributedSampler[int] = DistributedSampler(data.train, num_replicas=world, rank=rank,
                                                                   shuffle=True, seed=seed, drop_last=True)
        self.dataset = data.train
        self.batch = batch
        self.seed = seed
        self.pin_memory = pin_memory
        self.steps_per_epoch = len(self.sampler) // batch
        self.chunks: list[list[int]] = []  # the batches of indices the file loader serves next
        self.loader: DataLoader[Batch] | None = None

    def epoch(self, epoch: int, start: int) -> Iterator[Batch]:
        self.sampler.set_epoch(epoch)
        order = list(self.sampler)
        if isinstance(self.dataset, TensorImages):
            return self._indexed(self.dataset, order, start)
        self.chunks[:] = [order[i * self.batch:(i + 1) * self.batch] for i in range(start, self.steps_per_epoch)]
        return iter(self._files())

    def _files(self) -> DataLoader[Batch]:
        """The loader of file-backed images, made once: its workers serve every epoch (reading `chunks`)."""
        if self.loader is None:
            # images kept after their first decoding are served faster by this process than through workers
            kept = isinstance(self.dataset, FolderImages) and self.dataset.kept is not None
            workers = 0 if kept else min(4, os.cpu_count() or 1)
            # its own generator: a DataLoader otherwise draws its worker seed from the global RNG (dropout's)
            self.loader = DataLoader(self.dataset, batch_sampler=self.chunks, collate_fn=_identity,
                                     num_workers=workers, pin_memory=self.pin_memory,
                                     persistent_workers=workers > 0, prefetch_factor=4 if workers else None,
                                     generator=torch.Generator().manual_seed(self.seed))
        return self.loader

    def _indexed(self, images: TensorImages, order: list[int], start: int) -> Iterator[Batch]:
        index = to_device(torch.tensor(order, dtype=torch.int64), images.images.device)
        for i in range(start, self.steps_per_epoch):
            yield images.__getitems__(index[i * self.batch:(i + 1) * self.batch])


@torch.no_grad()
def evaluate(forward: Callable[..., torch.Tensor], data: TrainingData, recipe: Recipe, dev: torch.device, rank: int,
             world: int, mpp: tuple[int, float] | None = None) -> tuple[float, float]:
    """(mean loss, accuracy) on the validation set, summed over processes. mpp = (patch size, ratio)."""
    sampler: DistributedSampler[int] = DistributedSampler(data.val, num_replicas=world, rank=rank, shuffle=False,
                                                          drop_last=False)
    loader = DataLoader(data.val, sampler=sampler, batch_size=max(1, recipe.batch_size // world),
                        collate_fn=_identity, num_workers=0, generator=torch.Generator())
    gen = torch.Generator().manual_seed(recipe.seed + 2)  # the same masks at every validation
    totals = torch.zeros(3, dtype=torch.float64, device=dev)  # loss sum, correct, count: read once, at the end
    for images, labels, _ in loader:
        if not len(labels):
            continue
        x = normalize(to_device(images, dev), data.preprocessing)
        y = to_device(labels, dev)
        with autocast(recipe, dev):
            if mpp is None:
                logits = forward(x).float()
            else:
                mask = to_device(losses.random_patch_mask(len(labels), x.shape[2] * x.shape[3] // mpp[0] ** 2,
                                                          mpp[1], gen), dev)
                logits = forward(x, mask, gen).float()[mask]  # (M, classes)
                y = to_device(losses.mpp_targets(images, mpp[0]), dev)[mask]
        totals[0] += F.cross_entropy(logits, y, reduction="sum").double()
        totals[1] += (logits.argmax(-1) == y).sum()
        totals[2] += y.numel()
    if world > 1:
        dist.all_reduce(totals)
    loss_sum, correct, count = totals.tolist()
    return loss_sum / max(count, 1.0), correct / max(count, 1.0)
