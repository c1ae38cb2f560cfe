"""Tiny models with every token layout the analyses must handle, all on a non-square grid."""

from __future__ import annotations

import pytest
import torch

from vit_explorer.models import VisionTransformer, preset

# name -> ViTConfig overrides of 'classroom-tiny' (patch 4): 0, 1, 2 prefix tokens and CaiT's late [CLS]
LAYOUTS = {
    "cls": dict(image_size=(16, 24)),
    "cls+dist": dict(image_size=(24, 16), prefix_tokens="cls+dist"),
    "gap": dict(image_size=(16, 24), prefix_tokens="none", pool="gap"),
    "cait": dict(image_size=(16, 24), pos_embed_prefix=False, class_attn_depth=2, talking_heads=True,
                 layer_scale_init=0.5),
}


def make_model(layout: str, **overrides) -> VisionTransformer:
    torch.manual_seed(0)
    model = VisionTransformer(preset("classroom-tiny", **{**LAYOUTS[layout], **overrides})).eval()
    with torch.no_grad():  # spread the learned tokens and tables so similarities are not all ~0
        for name, p in model.named_parameters():
            if name in ("cls_token", "dist_token") or name.startswith("pos_embed"):
                p.normal_()
    return model


@pytest.fixture(params=list(LAYOUTS))
def layout_name(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def model(layout_name: str) -> VisionTransformer:
    return make_model(layout_name)


@pytest.fixture
def images(model: VisionTransformer) -> torch.Tensor:
    return torch.randn(3, 3, *model.config.image_size)
