import copy

import pytest
import torch
import torch.nn.functional as F

from vit_explorer.analysis.heads import head_importance, pruning_curve
from vit_explorer.models import VisionTransformer

from .conftest import make_model


def _without_heads(model: VisionTransformer, heads: dict[int, list[int]]) -> VisionTransformer:
    """A copy whose output projections ignore the given heads: an independent way to mask them."""
    pruned = copy.deepcopy(model)
    blocks = list(pruned.blocks) + list(pruned.class_blocks)
    hd = model.config.head_dim
    with torch.no_grad():
        for layer, hs in heads.items():
            for h in hs:
                blocks[layer].attn.proj.weight[:, h * hd:(h + 1) * hd] = 0
    return pruned


@pytest.mark.parametrize("metric", ["prob", "loss"])
def test_head_importance_against_pruned_copies(layout_name: str, metric: str) -> None:
    model = make_model(layout_name)
    images = torch.randn(2, 3, *model.config.image_size)
    targets = torch.tensor([3, 7])
    got = head_importance(model, images, targets, metric=metric)
    layers = model.config.depth + model.config.class_attn_depth
    assert got.shape == (layers, model.config.num_heads)

    def score(m: VisionTransformer) -> float:
        with torch.no_grad():
            logits = m(images)
        if metric == "prob":
            return float(sum(logits[b].softmax(-1)[targets[b]] for b in range(2)) / 2)
        return -float(F.cross_entropy(logits, targets))

    base = score(model)
    for layer in range(layers):
        for h in range(model.config.num_heads):
            assert float(got[layer, h]) == pytest.approx(base - score(_without_heads(model, {layer: [h]})), abs=1e-5)


def test_pruning_curve() -> None:
    model = make_model("cls", num_heads=4)
    images = torch.randn(2, 3, *model.config.image_size)
    importance = torch.tensor([[0.3, 0.1, 0.2, 0.0], [0.0, 0.1, 0.2, 0.3]])
    curve = pruning_curve(model, images, importance)
    assert curve.shape == (2, 5)
    with torch.no_grad():
        targets = model(images).argmax(-1)

    def prob(m: VisionTransformer) -> float:
        with torch.no_grad():
            return float(m(images).softmax(-1).gather(1, targets[:, None]).mean())

    assert float(curve[0, 0]) == pytest.approx(prob(model), abs=1e-6)
    assert float(curve[0, 2]) == pytest.approx(prob(_without_heads(model, {0: [3, 1]})), abs=1e-6)
    assert float(curve[1, 4]) == pytest.approx(prob(_without_heads(model, {1: [0, 1, 2, 3]})), abs=1e-6)
