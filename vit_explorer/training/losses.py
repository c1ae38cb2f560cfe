"""Losses: DeiT distillation through the distillation token, and the ViT paper's masked patch
prediction (MPP) targets."""

from __future__ import annotations

import torch
import torch.nn.functional as F

MPP_BITS = 3  # bits per colour channel: 8 levels, 512 classes
MPP_CLASSES = (2**MPP_BITS) ** 3


def hard_distillation_loss(cls_logits: torch.Tensor, dist_logits: torch.Tensor, teacher_logits: torch.Tensor,
                           targets: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    """DeiT hard distillation: 1/2 CE(class head, y) + 1/2 CE(distillation head, teacher's argmax)."""
    teacher_labels = teacher_logits.argmax(dim=-1)  # (B,)
    return 0.5 * F.cross_entropy(cls_logits, targets, label_smoothing=label_smoothing) \
        + 0.5 * F.cross_entropy(dist_logits, teacher_labels)


def soft_distillation_loss(cls_logits: torch.Tensor, dist_logits: torch.Tensor, teacher_logits: torch.Tensor,
                           targets: torch.Tensor, alpha: float, tau: float, label_smoothing: float = 0.0
                           ) -> torch.Tensor:
    """DeiT soft distillation: (1 - a) CE(class head, y) + a tau^2 KL(softmax(t/tau) || softmax(s_dist/tau)).

    The KL is summed over classes and averaged over the batch, as the paper writes it (DeiT's code
    divides by the number of logits instead, i.e. by the class count as well).
    """
    kl = F.kl_div(F.log_softmax(dist_logits / tau, dim=-1), F.log_softmax(teacher_logits / tau, dim=-1),
                  reduction="batchmean", log_target=True)
    return (1 - alpha) * F.cross_entropy(cls_logits, targets, label_smoothing=label_smoothing) \
        + alpha * tau**2 * kl


def mpp_targets(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    """The 3-bit mean colour class (0..511) of every patch: uint8 (B, 3, H, W) -> (B, N), raster order.

    Each channel's mean over the patch (in [0, 1]) is cut into 8 equal bins; class = r*64 + g*8 + b.
    """
    mean = F.avg_pool2d(images.float() / 255.0, patch_size)  # (B, 3, gh, gw)
    levels = 2**MPP_BITS
    bins = (mean * levels).floor().clamp(0, levels - 1).long()  # (B, 3, gh, gw)
    classes = bins[:, 0] * levels * levels + bins[:, 1] * levels + bins[:, 2]  # (B, gh, gw)
    return classes.flatten(1)  # (B, N)


def masked_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(mean cross entropy, correct, count) over the masked tokens: logits (B, N, C), targets and mask (B, N).

    Weighted by the mask rather than indexed with it: boolean indexing needs the count on the host, which
    makes the host wait for the device in every step.
    """
    weight = mask.to(logits.dtype)
    count = weight.sum()
    ce = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view_as(weight)  # (B, N)
    correct = ((logits.detach().argmax(-1) == targets) & mask).sum()
    return (ce * weight).sum() / count, correct, count


def random_patch_mask(batch: int, num_patches: int, ratio: float, generator: torch.Generator) -> torch.Tensor:
    """(B, N) bool with exactly round(ratio * N) patches chosen per image."""
    k = max(1, round(ratio * num_patches))
    order = torch.rand(batch, num_patches, generator=generator).argsort(dim=1)  # (B, N)
    mask = torch.zeros(batch, num_patches, dtype=torch.bool)
    mask.scatter_(1, order[:, :k], True)
    return mask
