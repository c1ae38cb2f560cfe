"""I-JEPA (transformers `ijepa`: IJepaModel and IJepaForImageClassification), tiny and random, saved with
`save_pretrained`: no [CLS], a learned position table of the patches only (resampled, without antialiasing, for
other sizes), features the mean of the normed patch tokens. The embedded tokens, every hidden state, every
attention map and the features or logits equal transformers' (eager, float32, max |diff| <= 1e-4) at the built
size and at a rectangular one; the preset's parameter count is transformers' ViT-H/14."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from vit_explorer.checkpoints import load

from .conftest import LABELS, assert_close, randomize

TINY = dict(hidden_size=48, num_hidden_layers=2, num_attention_heads=2, intermediate_size=96, image_size=32,
            patch_size=8)
SIZES = [(32, 32), (24, 48)]


@pytest.fixture(scope="module", params=["IJepaModel", "IJepaForImageClassification"])
def saved(request, tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Path]:
    import transformers

    torch.manual_seed(0)
    config = transformers.IJepaConfig(**TINY, id2label=dict(enumerate(LABELS)))
    model = randomize(getattr(transformers, request.param)(config))
    model.set_attn_implementation("eager")
    folder = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(folder)
    return model, folder


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_ijepa_parity(saved, size: tuple[int, int]) -> None:
    model, folder = saved
    loaded = load(folder)
    classifier = hasattr(model, "classifier")
    assert loaded.kind == "hf" and loaded.config.num_prefix_tokens == 0 and loaded.config.pool == "gap"
    assert loaded.labels == (LABELS if classifier else [])
    x = torch.randn(2, 3, *size)
    with torch.no_grad():
        out = model(x, output_hidden_states=True, output_attentions=True,
                    interpolate_pos_encoding=size != (32, 32))
        backbone = model.ijepa(x, interpolate_pos_encoding=size != (32, 32)) if classifier else out
        ours = loaded.model.forward_intermediates(x, capture="all")
    assert_close(ours["logits"], out.logits if classifier else out.last_hidden_state.mean(1), "logits or features")
    assert_close(ours["pre_logits"], backbone.last_hidden_state.mean(1), "features")
    assert len(out.hidden_states) == 3 and len(out.attentions) == 2
    assert_close(ours["embedded"], out.hidden_states[0], "embedded tokens")
    for i in range(2):
        assert_close(ours["hidden_states"][i], out.hidden_states[i + 1], f"hidden state {i}")
        assert_close(ours["attentions"][i], out.attentions[i], f"attention {i}")


def test_ijepa_preset_has_transformers_parameter_count() -> None:
    """ijepa-h14 is facebook/ijepa_vith14_1k's IJepaModel: ViT-H/14 at 224 px without [CLS]."""
    from transformers import IJepaConfig, IJepaModel

    from vit_explorer.models import VisionTransformer, count_parameters, preset

    with torch.device("meta"):
        hf = IJepaModel(IJepaConfig(hidden_size=1280, num_hidden_layers=32, num_attention_heads=16,
                                    intermediate_size=5120, image_size=224, patch_size=14))
        ours = VisionTransformer(preset("ijepa-h14"))
    assert count_parameters(ours) == preset("ijepa-h14").estimate_parameters() == count_parameters(hf)
