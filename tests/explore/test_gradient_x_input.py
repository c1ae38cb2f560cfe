"""gradient-x-input, the method a newcomer adds as one record: the input times the target's gradient, summed per
patch, equals captum's InputXGradient through timm's own ViT-S/16 and DeiT-S distilled on the same weights; it is
offered (CLI, app) but not in the default selection."""

from __future__ import annotations

from pathlib import Path

import pytest

from vit_explorer.explore import relevance as rel

from ..checkpoints.conftest import save_timm_hub
from .test_relevance_references import _close, _session, _timm


@pytest.mark.parametrize("name", ["vit_small_patch16_224", "deit_small_distilled_patch16_224"])
def test_gradient_x_input_equals_captum(name: str, tmp_path: Path) -> None:
    from captum.attr import InputXGradient

    model = _timm(name)
    save_timm_hub(model, tmp_path)
    session = _session(tmp_path)
    ours = rel.relevance_map(session, "gradient-x-input")
    pixels = session.scorer.pixels.detach().clone()
    attribution = InputXGradient(model).attribute(pixels, target=2)  # timm averages DeiT's two heads at inference
    gh, gw = ours.shape
    ref = attribution.reshape(1, 3, gh, 16, gw, 16).sum(dim=(1, 3, 5))[0].detach().numpy()
    _close(ours, ref)
    assert "gradient-x-input" in rel.supported(session.config)
    assert "gradient-x-input" not in rel.supported(session.config, default=True)
