"""Captured attention: a hook at a pattern site makes the output come from the explicit probabilities (so their
gradient is the real one), with the fused path's numbers; every family, CaiT's class attention, the MAP pool (PE's
over every token) and AIMv2's query pool too."""

from __future__ import annotations

import pytest
import torch

from .test_families import FAMILY_PRESETS, IMAGE, tiny

CAPTURE = ["attentions", "class_attentions", "pool_attention"]
VARIANTS = {"aimv2-l14-query": ("aimv2-l14", dict(pool="query", num_classes=5))}  # AIMv2 with its classifier's pool


def _probs(out: dict) -> list[torch.Tensor]:
    pool = [out["pool_attention"]] if out.get("pool_attention") is not None else []
    return list(out["attentions"]) + list(out.get("class_attentions", [])) + pool


@pytest.mark.parametrize("name", FAMILY_PRESETS + ["cait-xxs24", "deit-s-distilled"] + list(VARIANTS))
def test_grad_path_equals_fused_and_its_probabilities_carry_the_gradient(name: str) -> None:
    preset_name, extra = VARIANTS.get(name, (name, {}))
    model = tiny(preset_name, **extra)
    x = torch.randn(2, 3, *IMAGE)
    fused_x = x.clone().requires_grad_(True)
    fused = model(fused_x)
    (fused_grad,) = torch.autograd.grad(fused[:, 0].sum(), fused_x)
    grad_x = x.clone().requires_grad_(True)
    out = model.forward_intermediates(grad_x, capture=CAPTURE)
    torch.testing.assert_close(out["logits"], fused.detach(), atol=1e-5, rtol=0)
    probs = _probs(out)
    expected = model.config.depth + model.config.class_attn_depth + (model.config.pool in ("map", "query"))
    assert len(probs) == expected and all(p.requires_grad for p in probs)
    *prob_grads, input_grad = torch.autograd.grad(out["logits"][:, 0].sum(), probs + [grad_x])
    torch.testing.assert_close(input_grad, fused_grad, atol=1e-5, rtol=1e-4)  # the same function, the same gradient
    assert all(bool(g.abs().sum() > 0) for g in prob_grads)  # in the graph: a capture beside it would get none

