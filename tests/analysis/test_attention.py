import math

import pytest
import torch

from vit_explorer.analysis.attention import (
    attention_map,
    class_attention_maps,
    class_rollout,
    mean_attention_distance,
    rollout,
)
from vit_explorer.models import VisionTransformer

from .conftest import make_model


def _capture(model: VisionTransformer, images: torch.Tensor) -> dict:
    with torch.no_grad():
        return model.forward_intermediates(images, capture=("attentions", "class_attentions"))


def _default_query(layout) -> int:
    return 0 if layout.num_prefix_tokens else layout.token_index(1, 2)


def vit_explain_rollout(attentions, discard_ratio, head_fusion, query, num_prefix, grid):
    """jacobgil/vit-explain `rollout`, with its bugs fixed: rows renormalised with keepdim, the
    discard applied to every image (not only the first), the query's own entry protected instead
    of flat index 0, and any query / prefix count / grid instead of [CLS] + a square grid."""
    maps = []
    for b in range(attentions[0].shape[0]):
        result = torch.eye(attentions[0].size(-1))
        for attention in attentions:
            attention = attention[b:b + 1]
            if head_fusion == "mean":
                attention_heads_fused = attention.mean(axis=1)
            elif head_fusion == "max":
                attention_heads_fused = attention.max(axis=1)[0]
            else:
                attention_heads_fused = attention.min(axis=1)[0]
            attention_heads_fused = attention_heads_fused.clone()
            flat = attention_heads_fused.view(attention_heads_fused.size(0), -1)
            _, indices = flat.topk(int(flat.size(-1) * discard_ratio), -1, False)
            own = query * attention.size(-1) + query
            indices = indices[indices != own]
            flat[0, indices] = 0
            eye = torch.eye(attention_heads_fused.size(-1))
            a = (attention_heads_fused + 1.0 * eye) / 2
            a = a / a.sum(dim=-1, keepdim=True)
            result = torch.matmul(a, result)
        maps.append(result[0, query, num_prefix:].reshape(grid))
    return torch.stack(maps)


def test_attention_map_against_loops(model: VisionTransformer, images: torch.Tensor) -> None:
    out = _capture(model, images)
    layout = out["layout"]
    gh, gw = layout.grid
    k = layout.num_prefix_tokens
    a = out["attentions"][1]  # (B, H, T, T)
    query = _default_query(layout)
    for head in (None, 1):
        got = attention_map(a, layout, query, head)
        assert got.shape == (images.shape[0], gh, gw)
        for b in range(images.shape[0]):
            for r in range(gh):
                for c in range(gw):
                    heads = range(a.shape[1]) if head is None else [head]
                    want = sum(float(a[b, h, query, k + r * gw + c]) for h in heads) / len(heads)
                    assert float(got[b, r, c]) == pytest.approx(want, abs=1e-6)


def test_attention_map_from_selected_rows(model: VisionTransformer, images: torch.Tensor) -> None:
    layout = model.layout()
    query = layout.token_index(2, 1)
    with torch.no_grad():
        full = model.forward_intermediates(images, capture=("attentions",))["attentions"][0]
        rows = full[:, :, [0, query]]  # the rows a caller keeps of the pattern
    torch.testing.assert_close(attention_map(rows, layout, query, rows=[0, query]), attention_map(full, layout, query),
                               atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("head_fusion", ["mean", "max", "min"])
@pytest.mark.parametrize("discard_ratio", [0.0, 0.5, 0.9])
def test_rollout_equals_fixed_vit_explain(model: VisionTransformer, images: torch.Tensor, head_fusion: str,
                                          discard_ratio: float) -> None:
    out = _capture(model, images)
    layout = out["layout"]
    query = _default_query(layout)
    got = rollout(out["attentions"], layout, head_fusion=head_fusion, discard_ratio=discard_ratio, query=query)
    want = vit_explain_rollout(out["attentions"], discard_ratio, head_fusion, query, layout.num_prefix_tokens,
                               layout.grid)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)


def test_rollout_treats_every_image_of_a_batch_alike(model: VisionTransformer, images: torch.Tensor) -> None:
    out = _capture(model, images)
    layout = out["layout"]
    query = _default_query(layout)
    batch = rollout(out["attentions"], layout, discard_ratio=0.7, query=query)
    for b in range(images.shape[0]):
        single = rollout([a[b:b + 1] for a in out["attentions"]], layout, discard_ratio=0.7, query=query)
        torch.testing.assert_close(batch[b:b + 1], single)


def test_rollout_needs_all_rows_and_a_query_without_cls() -> None:
    model = make_model("gap")
    images = torch.randn(1, 3, *model.config.image_size)
    with torch.no_grad():
        partial = [a[:, :, [0]] for a in model.forward_intermediates(images, capture=("attentions",))["attentions"]]
    with pytest.raises(ValueError, match="needs all rows"):
        rollout(partial, model.layout(), query=0)
    with pytest.raises(ValueError, match="no \\[CLS\\]"):
        rollout(_capture(model, images)["attentions"], model.layout())


def test_mean_attention_distance_against_loops(model: VisionTransformer, images: torch.Tensor) -> None:
    out = _capture(model, images)
    layout = out["layout"]
    gh, gw = layout.grid
    k = layout.num_prefix_tokens
    p = layout.patch_size
    got = mean_attention_distance(out["attentions"], layout)
    assert got.shape == (len(out["attentions"]), model.config.num_heads)
    for layer, a in enumerate(out["attentions"]):
        for h in range(a.shape[1]):
            total = 0.0
            for b in range(a.shape[0]):
                for q in range(gh * gw):
                    weights = [float(a[b, h, k + q, k + t]) for t in range(gh * gw)]
                    qr, qc = divmod(q, gw)
                    keys = [divmod(t, gw) for t in range(gh * gw)]
                    dist = [math.hypot((qr - tr) * p, (qc - tc) * p) for tr, tc in keys]
                    total += sum(w * d for w, d in zip(weights, dist, strict=True)) / sum(weights)
            assert float(got[layer, h]) == pytest.approx(total / (a.shape[0] * gh * gw), rel=1e-5)


def test_uniform_attention_distance_is_the_mean_pairwise_distance() -> None:
    from vit_explorer.models.config import TokenLayout

    layout = TokenLayout(("cls",), (1, 3), 10)
    uniform = torch.full((1, 1, 4, 4), 0.25)
    # patches at x = 0, 10, 20: mean distance over all ordered pairs (self included) = (0+10+20+10+0+10+20+10+0)/9
    assert float(mean_attention_distance([uniform], layout)[0, 0]) == pytest.approx(80 / 9)


def test_cait_class_attention_maps_and_rollout() -> None:
    model = make_model("cait")
    images = torch.randn(2, 3, *model.config.image_size)
    out = _capture(model, images)
    layout = out["layout"]
    gh, gw = layout.grid
    n = gh * gw
    maps = class_attention_maps(out["class_attentions"], layout)
    assert maps.shape == (2, 2, model.config.num_heads, gh, gw)
    for j, a in enumerate(out["class_attentions"]):
        assert float(maps[1, j, 1, gh - 1, gw - 1]) == pytest.approx(float(a[1, 1, 0, n]))
        assert float(maps[0, j, 0, 0, 0]) == pytest.approx(float(a[0, 0, 0, 1]))

    # reference: full (1+N) x (1+N) rollout matrices; [CLS] sits out the self-attention blocks
    got = class_rollout(out["class_attentions"], out["attentions"], layout)
    for b in range(2):
        result = torch.eye(1 + n)
        for a in out["attentions"]:
            step = torch.eye(1 + n)
            step[1:, 1:] = (a[b].mean(0) + torch.eye(n)) / 2
            step[1:, 1:] /= step[1:, 1:].sum(-1, keepdim=True)
            result = step @ result
        for a in out["class_attentions"]:
            step = torch.eye(1 + n)
            step[0] = a[b].mean(0)[0] + torch.eye(1 + n)[0]
            step[0] /= step[0].sum()
            result = step @ result
        torch.testing.assert_close(got[b], result[0, 1:].reshape(gh, gw), atol=1e-6, rtol=1e-5)
