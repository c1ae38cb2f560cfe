"""The modern families from Hugging Face transformers (DINOv2 with and without registers and with
SwiGLU, CLIP and SigLIP towers alone and inside their two-tower models, ViTMAE's encoder, BEiT), tiny
and random, saved with `save_pretrained` and loaded through our loaders: the embedded tokens, every
hidden state, every attention map and the logits or pooled features equal transformers' (eager
attention, float32, max |diff| <= 1e-4) at the built size and at a rectangular one (HF's
interpolate_pos_encoding). DINOv2 and the CLIP and SigLIP towers convert back to HF (`convert --to hf`)
with the same outputs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from vit_explorer.checkpoints import CheckpointError, convert, load

from .conftest import LABELS, assert_close, randomize

TINY = dict(hidden_size=48, num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=8)
SIZES = [(32, 32), (24, 48)]


def _dinov2(**extra: Any) -> torch.nn.Module:
    from transformers import Dinov2Config, Dinov2Model

    return Dinov2Model(Dinov2Config(**TINY, mlp_ratio=2, layerscale_value=0.5, **extra))


def _dinov2_reg() -> torch.nn.Module:
    from transformers import Dinov2WithRegistersConfig, Dinov2WithRegistersModel

    return Dinov2WithRegistersModel(Dinov2WithRegistersConfig(**TINY, mlp_ratio=2, num_register_tokens=4))


def _dinov2_classifier(registers: bool) -> torch.nn.Module:
    """transformers' fine-tuned DINOv2 classifiers: a linear head over [CLS] beside the mean of the patches."""
    import transformers

    kind = "Dinov2WithRegisters" if registers else "Dinov2"
    config = getattr(transformers, f"{kind}Config")(**TINY, mlp_ratio=2, layerscale_value=0.5,
                                                    id2label=dict(enumerate(LABELS)))
    return getattr(transformers, f"{kind}ForImageClassification")(config)


def _clip() -> torch.nn.Module:
    from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

    return CLIPVisionModelWithProjection(CLIPVisionConfig(**TINY, intermediate_size=96, projection_dim=16))


def _clip_model() -> torch.nn.Module:
    from transformers import CLIPConfig, CLIPModel

    text = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=99)
    vision = dict(**TINY, intermediate_size=96, hidden_act="gelu")
    return CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=16))


def _siglip() -> torch.nn.Module:
    from transformers import SiglipVisionConfig, SiglipVisionModel

    return SiglipVisionModel(SiglipVisionConfig(**TINY, intermediate_size=96))


def _siglip_model() -> torch.nn.Module:
    from transformers import SiglipConfig, SiglipModel

    text = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=99)
    return SiglipModel(SiglipConfig(text_config=text, vision_config=dict(**TINY, intermediate_size=96)))


def _mae() -> torch.nn.Module:
    from transformers import ViTMAEConfig, ViTMAEModel

    return ViTMAEModel(ViTMAEConfig(**TINY, intermediate_size=96, mask_ratio=0.0))


def _mae_pretraining() -> torch.nn.Module:
    """What the hub holds for MAE (facebook/vit-mae-base): the encoder and its decoder; we read the encoder."""
    from transformers import ViTMAEConfig, ViTMAEForPreTraining

    return ViTMAEForPreTraining(ViTMAEConfig(**TINY, intermediate_size=96, mask_ratio=0.0, decoder_hidden_size=32,
                                             decoder_num_hidden_layers=1, decoder_num_attention_heads=2,
                                             decoder_intermediate_size=64))


def _beit() -> torch.nn.Module:
    from transformers import BeitConfig, BeitForImageClassification

    return BeitForImageClassification(BeitConfig(**TINY, intermediate_size=96, use_relative_position_bias=True,
                                                 id2label=dict(enumerate(LABELS))))


def _tower(model: torch.nn.Module) -> torch.nn.Module:
    """The image encoder that hidden states and attentions come from."""
    for name in ("vision_model", "beit", "vit"):
        if hasattr(model, name):
            return getattr(model, name)
    return model


def _features(model: torch.nn.Module, out: Any) -> torch.Tensor:
    """What our model's logits are for each reference: pooled, projected or classified."""
    if hasattr(out, "logits"):
        return out.logits
    if hasattr(out, "image_embeds"):
        return out.image_embeds
    if hasattr(model, "visual_projection"):  # CLIPModel: the projected pooled image tower output
        return model.visual_projection(out.pooler_output)
    if getattr(out, "pooler_output", None) is not None:
        return out.pooler_output
    return out.last_hidden_state[:, 0]  # ViTMAEModel: the normed [CLS]


CASES: dict[str, Callable[[], torch.nn.Module]] = {
    "dinov2": _dinov2, "dinov2_swiglu": lambda: _dinov2(use_swiglu_ffn=True), "dinov2_reg": _dinov2_reg,
    "clip": _clip, "clip_model": _clip_model, "siglip": _siglip, "siglip_model": _siglip_model, "mae": _mae,
    "mae_pretraining": _mae_pretraining, "beit": _beit,
}
CASES.update(dinov2_classifier=lambda: _dinov2_classifier(False),
             dinov2_reg_classifier=lambda: _dinov2_classifier(True))


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory):
    cache: dict[str, tuple[torch.nn.Module, Path]] = {}

    def get(case: str) -> tuple[torch.nn.Module, Path]:
        if case not in cache:
            torch.manual_seed(0)
            model = randomize(CASES[case]())
            model.set_attn_implementation("eager")
            folder = tmp_path_factory.mktemp(case)
            model.save_pretrained(folder)
            cache[case] = model, folder
        return cache[case]

    return get


def hf_run(model: torch.nn.Module, x: torch.Tensor, case: str) -> dict[str, Any]:
    kwargs: dict[str, Any] = dict(output_hidden_states=True, output_attentions=True)
    if x.shape[-2:] != (32, 32) and case != "beit":  # BEiT's relative bias follows any size by itself
        kwargs["interpolate_pos_encoding"] = True
    if case.startswith("mae"):  # no random masking: with mask ratio 0 and ordered noise every patch stays in place
        kwargs["noise"] = torch.arange(x.shape[-2] * x.shape[-1] // 64, dtype=torch.float32).expand(len(x), -1)
    tower = _tower(model)
    with torch.no_grad():
        out = (tower if case in ("clip_model", "siglip_model", "mae_pretraining") else model)(x, **kwargs)
        features = _features(model, out)
    return dict(features=features, hidden=out.hidden_states, attn=out.attentions)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("case", list(CASES))
def test_hf_family_parity(saved, case: str, size: tuple[int, int]) -> None:
    model, folder = saved(case)
    loaded = load(folder)
    assert loaded.kind == "hf"
    x = torch.randn(2, 3, *size)
    ref = hf_run(model, x, case)
    with torch.no_grad():
        ours = loaded.model.forward_intermediates(x, capture="all")
    assert_close(ours["logits"], ref["features"], "logits or features")
    assert len(ref["hidden"]) == 3 and len(ref["attn"]) == 2
    assert_close(ours["embedded"], ref["hidden"][0], "embedded tokens")
    for i in range(2):
        assert_close(ours["hidden_states"][i], ref["hidden"][i + 1], f"hidden state {i}")
        assert_close(ours["attentions"][i], ref["attn"][i], f"attention {i}")


def test_hf_preprocessing_defaults_and_labels(saved) -> None:
    """Without preprocessor_config.json: each processor's defaults at the model's size."""
    assert load(saved("dinov2")[1]).preprocessing.mean == pytest.approx((0.485, 0.456, 0.406))
    assert load(saved("clip")[1]).preprocessing.mean == pytest.approx((0.48145466, 0.4578275, 0.40821073))
    assert load(saved("siglip")[1]).preprocessing.mean == pytest.approx((0.5, 0.5, 0.5))
    beit = load(saved("beit")[1])
    assert beit.labels == LABELS and beit.config.pos_embed == "rel_bias"
    classifier = load(saved("dinov2_reg_classifier")[1])
    assert classifier.labels == LABELS and classifier.config.pool == "cls+mean" and classifier.config.reg_tokens == 4


@pytest.mark.parametrize("case", ["dinov2", "dinov2_swiglu", "dinov2_reg", "clip", "clip_model", "siglip",
                                  "siglip_model", "dinov2_classifier", "dinov2_reg_classifier"])
def test_converts_back_to_hf(saved, tmp_path: Path, case: str) -> None:
    """DINOv2 and the CLIP and SigLIP image towers (also those read from a two-tower model) write the
    transformers class whose outputs, loaded back by transformers, are ours."""
    import json

    import transformers

    _, folder = saved(case)
    loaded = load(folder)
    convert(loaded, "hf", tmp_path / "out")
    architecture = json.loads((tmp_path / "out" / "config.json").read_text())["architectures"][0]
    again = getattr(transformers, architecture).from_pretrained(tmp_path / "out").eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        out = again(x)
        ref = out.image_embeds if case.startswith("clip") else out.logits if case.endswith("classifier") else \
            out.pooler_output
        assert_close(ref, loaded.model(x), "features after convert --to hf")


def test_timm_dinov2_with_registers_converts_to_hf(tmp_path: Path) -> None:
    """timm's registers model has no [CLS] position row; HF's gets a zero one, which is the same model."""
    import timm
    from transformers import AutoModel

    from .conftest import save_timm_hub

    model = randomize(timm.create_model("vit_small_patch14_reg4_dinov2", embed_dim=48, depth=2, num_heads=2,
                                        img_size=32, patch_size=8))
    loaded = load(save_timm_hub(model, tmp_path / "timm"))
    convert(loaded, "hf", tmp_path / "hf")
    again = AutoModel.from_pretrained(tmp_path / "hf").eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert_close(again(x).pooler_output, model(x), "features")


def test_what_hf_cannot_hold_is_refused_with_reasons(saved, tmp_path: Path) -> None:
    loaded = load(saved("beit")[1])
    with pytest.raises(CheckpointError, match=r"cannot be written in the Hugging Face format as \w+ .*: it has "
                                              r"pool='gap'; position embedding 'rel_bias'.*fc_norm.*without a bias"):
        convert(loaded, "hf", tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("model_type", ["swin", "convnext"])
def test_unknown_model_type_is_named_with_the_supported_ones(tmp_path: Path, model_type: str) -> None:
    import json

    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type}))
    with pytest.raises(CheckpointError, match=rf"model_type '{model_type}' is not supported; vit-explorer reads "
                                              r"Hugging Face vit, deit, vit_mae, dinov2, .*beit"):
        load(tmp_path)


def test_dinov2_classifier_preset_has_transformers_parameter_count() -> None:
    """The dinov2-s14-in1k preset is Dinov2ForImageClassification at ViT-S/14, 224 px, 1000 classes (HF's
    unused [MASK] token aside)."""
    from transformers import Dinov2Config, Dinov2ForImageClassification

    from vit_explorer.models import VisionTransformer, count_parameters, preset

    with torch.device("meta"):
        hf = Dinov2ForImageClassification(Dinov2Config(hidden_size=384, num_hidden_layers=12, num_attention_heads=6,
                                                       image_size=224, patch_size=14, num_labels=1000))
        ours = VisionTransformer(preset("dinov2-s14-in1k"))
    expected = sum(p.numel() for n, p in hf.named_parameters() if n != "dinov2.embeddings.mask_token")
    assert count_parameters(ours) == preset("dinov2-s14-in1k").estimate_parameters() == expected
