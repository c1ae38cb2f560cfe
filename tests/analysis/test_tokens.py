import math

import pytest
import torch

from vit_explorer.analysis.tokens import cls_dist_similarity, patch_cls_similarity

from .conftest import make_model


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    dot = sum(float(x) * float(y) for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(float(x) ** 2 for x in a) * sum(float(y) ** 2 for y in b))


def test_cls_dist_similarity_against_loops() -> None:
    model = make_model("cls+dist")
    with torch.no_grad():
        out = model.forward_intermediates(torch.randn(2, 3, *model.config.image_size), capture="all")
    states = [out["embedded"], *out["hidden_states"]]
    got = cls_dist_similarity(states, out["layout"])
    assert got.shape == (2, len(states))
    for b in range(2):
        for i, s in enumerate(states):
            assert float(got[b, i]) == pytest.approx(_cos(s[b, 0], s[b, 1]), abs=1e-5)


@pytest.mark.parametrize("layout_name", ["cls", "gap"])
def test_cls_dist_needs_a_distillation_token(layout_name: str) -> None:
    model = make_model(layout_name)
    with pytest.raises(ValueError, match=r"has no \[(CLS|DIST)\] token"):
        cls_dist_similarity([torch.zeros(1, model.layout().num_tokens, 64)], model.layout())


@pytest.mark.parametrize("layout_name", ["cls", "cls+dist", "cait"])
def test_patch_cls_similarity_against_loops(layout_name: str) -> None:
    model = make_model(layout_name)
    with torch.no_grad():
        out = model.forward_intermediates(torch.randn(2, 3, *model.config.image_size), capture="all")
    layout = out["layout"]
    state = out["hidden_states"][-1]
    cls = out["class_tokens"][-1][:, 0] if layout_name == "cait" else None
    got = patch_cls_similarity(state, layout, cls)
    gh, gw = layout.grid
    k = layout.num_prefix_tokens
    for b in range(2):
        ref = state[b, 0] if cls is None else cls[b]
        for r in range(gh):
            for c in range(gw):
                assert float(got[b, r, c]) == pytest.approx(_cos(state[b, k + r * gw + c], ref), abs=1e-5)
