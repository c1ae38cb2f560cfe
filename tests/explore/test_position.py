"""The Position view's comparison: every family's model against every scheme."""

from __future__ import annotations

import pytest
import torch

from vit_explorer.explore import position
from vit_explorer.models import VisionTransformer, preset
from vit_explorer.models.position import SCHEMES

FAMILIES = ["vit-s16", "deit-s-distilled", "cait-xxs24", "dinov2-s14-reg4", "clip-b16", "siglip-b16", "mae-b16",
            "deit3-s16", "beit-b16", "eva02-ti14"]


def small(name: str) -> VisionTransformer:
    """The family's structure at a toy width and a 2×3 grid."""
    patch = preset(name).patch_size
    cfg = preset(name, embed_dim=32, num_heads=2, depth=2, image_size=(2 * patch, 3 * patch))
    torch.manual_seed(0)
    return VisionTransformer(cfg)


@pytest.mark.parametrize("name", FAMILIES)
def test_every_scheme_can_be_compared_with_every_family(name: str) -> None:
    model = small(name)
    for scheme in SCHEMES:
        sim = position.scheme_similarity(model, scheme, (2, 3))
        assert sim.scheme == scheme
        if SCHEMES[scheme].additive:
            assert sim.patches is not None and sim.patches.shape == (2, 3, 2, 3)


def test_cait_compared_schemes_stay_patch_only() -> None:
    """CaiT's [CLS] joins after the position embedding by design: a compared scheme does not call it missing."""
    model = small("cait-xxs24")
    for scheme in ("learned", "sincos_2d"):
        sim = position.scheme_similarity(model, scheme, (2, 3))
        assert "has no position embedding" not in sim.note and not sim.prefix
