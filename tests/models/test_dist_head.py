"""dist_head=False: a distillation token without its classifier (HF DeiTForImageClassification).
The token still takes part in attention; the logits are the [CLS] head's alone."""

from __future__ import annotations

import json

import pytest
import torch

from vit_explorer.models import ConfigError, VisionTransformer, ViTConfig, count_parameters

TINY = dict(image_size=(16, 24), patch_size=4, num_classes=5, embed_dim=16, depth=2, num_heads=2,
            prefix_tokens="cls+dist")


def randomized(model: VisionTransformer) -> VisionTransformer:
    """Perturb every parameter (biases and LayerNorm start at constants) so a wrong head shows."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return model.eval()


@pytest.mark.parametrize("num_classes", [5, 0])
def test_parameter_count_drops_exactly_the_distillation_head(num_classes: int) -> None:
    two = ViTConfig(**{**TINY, "num_classes": num_classes})
    one = two.replace(dist_head=False)
    model = VisionTransformer(one)
    assert not hasattr(model, "head_dist")
    assert one.estimate_parameters() == count_parameters(model)
    assert two.estimate_parameters() - one.estimate_parameters() == 16 * num_classes + num_classes
    assert "dist_token" in dict(model.named_parameters())  # the token stays


def test_logits_are_the_cls_head_and_the_backbone_is_unchanged() -> None:
    two = randomized(VisionTransformer(ViTConfig(**TINY)))
    one = VisionTransformer(two.config.replace(dist_head=False)).eval()
    state = {k: v for k, v in two.state_dict().items() if not k.startswith("head_dist.")}
    one.load_state_dict(state)  # strict: every key of the single-head model is present
    x = torch.randn(2, 3, 16, 24)
    with torch.no_grad():
        ref = two.forward_intermediates(x, capture=("hidden_states", "pre_logits"))
        out = one.forward_intermediates(x, capture=("hidden_states", "pre_logits"))
        plain = one(x)
    assert set(out["head_logits"]) == {"cls"}
    assert torch.equal(out["logits"], out["head_logits"]["cls"])
    assert torch.equal(plain, out["logits"])
    assert torch.equal(out["logits"], ref["head_logits"]["cls"])
    assert not torch.allclose(ref["logits"], ref["head_logits"]["cls"])  # the two-head model averages
    for ours, theirs in zip(out["hidden_states"], ref["hidden_states"], strict=True):
        assert torch.equal(ours, theirs)
    assert out["layout"].prefix_names == ("cls", "dist")


def test_dist_head_false_needs_a_distillation_token() -> None:
    with pytest.raises(ConfigError, match="dist_head=False .* needs prefix_tokens='cls\\+dist'"):
        ViTConfig(**{**TINY, "prefix_tokens": "cls"}, dist_head=False)


def test_json_round_trip_and_older_configs_default_to_two_heads() -> None:
    cfg = ViTConfig(**TINY, dist_head=False)
    assert ViTConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    older = {k: v for k, v in cfg.to_dict().items() if k != "dist_head"}  # saved before the field existed
    assert ViTConfig.from_dict(older).dist_head is True
