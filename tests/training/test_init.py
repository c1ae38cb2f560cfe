"""Mimetic attention init: the products it aims at, only the attention matrices touched, attention no
longer uniform at step 0, and the trainer using it by default (and not with attention_init='model')."""

import torch

from vit_explorer.models import VisionTransformer
from vit_explorer.models.presets import preset
from vit_explorer.training.init import QK, VO, mimetic_init
from vit_explorer.training.recipe import Recipe
from vit_explorer.training.trainer import _model


def _pair() -> tuple[VisionTransformer, VisionTransformer]:
    torch.manual_seed(0)
    plain = VisionTransformer(preset("classroom"))
    mimetic = VisionTransformer(preset("classroom"))
    mimetic.load_state_dict(plain.state_dict())
    mimetic_init(mimetic, torch.Generator().manual_seed(0))
    return plain, mimetic


def test_products_are_near_the_identity_with_the_signs_of_trained_vits() -> None:
    _, model = _pair()
    d, heads, hd = 96, 4, 24
    for block in model.blocks:
        w = block.attn.qkv.weight
        for h in range(heads):
            wq, wk = w[h * hd:(h + 1) * hd], w[d + h * hd:d + (h + 1) * hd]  # (hd, D) each
            qk = wq.T @ wk  # (D, D), rank hd
            assert torch.linalg.matrix_rank(qk) == hd
            # the best rank-hd part of a1 Z + b1 I: its trace is positive, near b1 * hd and more
            assert 0.5 * QK[1] * hd < qk.trace() < 3 * QK[1] * hd
        vo = block.attn.proj.weight @ w[2 * d:]  # W_proj W_v: (D, D), full rank
        assert torch.diagonal(vo).mean() < -0.5 * VO[1]
        off = vo - torch.diag(torch.diagonal(vo))
        assert off.abs().mean() < VO[0]  # the random part is a2 Z / sqrt(D): small entries


def test_only_attention_matrices_change() -> None:
    plain, mimetic = _pair()
    changed = {k for k, v in plain.state_dict().items() if not torch.equal(v, mimetic.state_dict()[k])}
    assert changed == {f"blocks.{i}.attn.{m}.weight" for i in range(4) for m in ("qkv", "proj")}


def test_attention_is_selective_from_the_start() -> None:
    """Uniform attention over 65 tokens has entropy ln 65 = 4.17; mimetic heads start far below it."""
    x = torch.randn(4, 3, 32, 32)

    def entropy(model: VisionTransformer) -> float:
        with torch.no_grad():
            maps = model.forward_intermediates(x, capture=("attentions",))["attentions"][0]  # (B, H, T, T)
        return float(-(maps * maps.clamp_min(1e-12).log()).sum(-1).mean())

    plain, mimetic = _pair()
    assert entropy(plain) > 4.0
    assert entropy(mimetic) < 3.0


def test_the_trainer_starts_from_it_unless_told_otherwise() -> None:
    config = preset("classroom-tiny")
    models = {}
    for init in ("mimetic", "model"):
        gen = _model(config, Recipe(steps=1, attention_init=init), None, None, torch.device("cpu"))
        try:
            next(gen)
        except StopIteration as done:
            models[init] = done.value[0]
    torch.manual_seed(0)
    assert torch.equal(models["model"].blocks[0].attn.qkv.weight, VisionTransformer(config).blocks[0].attn.qkv.weight)
    assert Recipe().attention_init == "mimetic"
    assert not torch.equal(models["mimetic"].blocks[0].attn.qkv.weight, models["model"].blocks[0].attn.qkv.weight)
