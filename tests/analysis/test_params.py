import re

import pytest
import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from vit_explorer.analysis.params import flops_per_stage, parameter_table
from vit_explorer.models import VisionTransformer, count_parameters, preset

from .conftest import make_model


def test_table_adds_up(model: VisionTransformer) -> None:
    table = parameter_table(model)
    assert table.total == count_parameters(model)
    assert sum(table.by_stage().values()) == table.total
    assert sum(n for _, _, n in table.by_layer()) == table.total
    assert {r.name for r in table.rows} == {name for name, _ in model.named_parameters()}
    for r in table.rows:
        assert r.count == dict(model.named_parameters())[r.name].numel()
    assert abs(sum(table.share(n) for n in table.by_stage().values()) - 1) < 1e-12


def test_vit_b16_embedding_stage_as_in_the_seed_article() -> None:
    with torch.device("meta"):
        model = VisionTransformer(preset("vit-b16"))
    table = parameter_table(model)
    layers = {layer: n for stage, layer, n in table.by_layer() if stage == "embeddings"}
    assert layers == {"patch embedding": 590_592, "[CLS] token": 768, "position embedding": 151_296}
    assert list(layers) == ["patch embedding", "[CLS] token", "position embedding"]
    assert table.total == 86_567_656
    assert sum(n for s, layer, n in table.by_layer() if layer.startswith("block ")) == 12 * 7_087_872


class _Capture(nn.Module):
    """Calls the model through a module so the flop counter names its submodules by path."""

    def __init__(self, vit: VisionTransformer) -> None:
        super().__init__()
        self.vit = vit

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with sdpa_kernel(SDPBackend.MATH):  # attention as matmuls the counter sees (it skips the fused CPU kernel)
            return self.vit(x)


@pytest.mark.parametrize("overrides", [{}, {"stem": "conv"}, {"image_size": (24, 32)}])
def test_flops_match_torch_flop_counter(layout_name: str, overrides: dict) -> None:
    model = make_model(layout_name, **overrides)
    image_size = overrides.get("image_size", model.config.image_size)
    with FlopCounterMode(display=False) as counter:
        _Capture(model)(torch.zeros(1, 3, *image_size))
    counts = {k: sum(v.values()) for k, v in counter.get_flop_counts().items()}

    def modules(pattern: str) -> int:
        return sum(n for k, n in counts.items() if re.fullmatch(rf"_Capture\.vit\.{pattern}", k))

    ours = flops_per_stage(model.config, image_size)
    assert ours["embeddings"] == modules("patch_embed")
    assert ours["encoder"] == modules(r"blocks\.\d+") > 0
    assert ours.get("class attention", 0) == modules(r"class_blocks\.\d+")
    assert ours["head"] == modules("head") + modules("head_dist")
    assert sum(ours.values()) == counts["Global"]
