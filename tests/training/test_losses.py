import math

import torch

from vit_explorer.training import losses


def _log_softmax(row: list[float]) -> list[float]:
    m = max(row)
    z = math.log(sum(math.exp(v - m) for v in row)) + m
    return [v - z for v in row]


def test_hard_distillation_by_hand() -> None:
    cls = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.5, 0.0]])
    dist = torch.tensor([[0.0, 1.0, 0.0], [1.0, -1.0, 3.0]])
    teacher = torch.tensor([[0.1, 0.9, 0.0], [5.0, 0.0, 1.0]])  # argmax: 1, 0
    y = torch.tensor([0, 2])
    ce_cls = -(_log_softmax([2.0, 0.0, -1.0])[0] + _log_softmax([0.5, 0.5, 0.0])[2]) / 2
    ce_dist = -(_log_softmax([0.0, 1.0, 0.0])[1] + _log_softmax([1.0, -1.0, 3.0])[0]) / 2
    got = losses.hard_distillation_loss(cls, dist, teacher, y)
    assert math.isclose(got.item(), 0.5 * ce_cls + 0.5 * ce_dist, rel_tol=1e-6)


def test_soft_distillation_by_hand() -> None:
    cls = torch.tensor([[1.0, 2.0, 0.5]])
    dist = torch.tensor([[0.3, -0.2, 1.5]])
    teacher = torch.tensor([[2.0, 0.0, 1.0]])
    y = torch.tensor([1])
    alpha, tau = 0.3, 2.0
    ce = -_log_softmax([1.0, 2.0, 0.5])[1]
    p_t = [math.exp(v) for v in _log_softmax([v / tau for v in teacher[0].tolist()])]
    log_s = _log_softmax([v / tau for v in dist[0].tolist()])
    kl = sum(p * (math.log(p) - ls) for p, ls in zip(p_t, log_s, strict=True))
    expected = (1 - alpha) * ce + alpha * tau**2 * kl
    got = losses.soft_distillation_loss(cls, dist, teacher, y, alpha=alpha, tau=tau)
    assert math.isclose(got.item(), expected, rel_tol=1e-6)


def test_mpp_targets_against_a_loop() -> None:
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (2, 3, 8, 12), generator=g, dtype=torch.int64).to(torch.uint8)
    images[0, :, :4, :4] = 255  # a white patch: the top bin (7, 7, 7) = 511
    p = 4
    got = losses.mpp_targets(images, p)
    assert got.shape == (2, 6)
    for b in range(2):
        for i in range(2):
            for j in range(3):
                mean = [sum(images[b, c, i * p + u, j * p + v].item() for u in range(p) for v in range(p))
                        / (p * p * 255) for c in range(3)]
                bins = [min(int(m * 8), 7) for m in mean]
                assert got[b, i * 3 + j].item() == bins[0] * 64 + bins[1] * 8 + bins[2]
    assert got[0, 0].item() == 511


def test_random_patch_mask_counts() -> None:
    mask = losses.random_patch_mask(5, 64, 0.5, torch.Generator().manual_seed(1))
    assert mask.shape == (5, 64) and (mask.sum(1) == 32).all()
    assert not torch.equal(mask[0], mask[1])
