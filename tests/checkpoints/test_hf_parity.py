"""Hugging Face ViT and distilled DeiT `save_pretrained` folders loaded through our loaders give
transformers' numbers (eager attention): logits, embeddings, hidden states, attention maps, at the
native 32x32 and at 24x48 (HF `interpolate_pos_encoding=True`: bicubic without antialias)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from vit_explorer.checkpoints import load

from .conftest import assert_close, assert_matches_hf


@pytest.mark.parametrize("kind", ["vit", "deit"])
@pytest.mark.parametrize("size", [(32, 32), (24, 48)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_hf_folder_parity(hf_folder, kind: str, size: tuple[int, int]) -> None:
    model, folder = hf_folder(kind)
    loaded = load(folder)
    assert loaded.kind == "hf"
    assert loaded.config.layer_norm_eps == 1e-12
    assert loaded.config.distilled == (kind == "deit")
    x = torch.randn(2, 3, *size)
    with torch.no_grad():
        ref = model(x, output_hidden_states=True, output_attentions=True,
                    interpolate_pos_encoding=size != (32, 32))
        ours = loaded.model.forward_intermediates(x, capture="all")
    assert_matches_hf(ours, ref, depth=2)
    if kind == "deit":
        assert_close(ours["head_logits"]["cls"], ref.cls_logits, "class head")
        assert_close(ours["head_logits"]["dist"], ref.distillation_logits, "distillation head")


@pytest.mark.parametrize("kind", ["vit", "deit"])
def test_hf_labels_details_and_default_preprocessing(hf_folder, kind: str) -> None:
    model, folder = hf_folder(kind)
    loaded = load(folder)
    assert loaded.labels == [model.config.id2label[i] for i in range(7)]
    assert loaded.details["architecture"] == model.config.architectures[0]
    # no preprocessor_config.json: transformers' defaults for the model type, at the model's size
    pre = loaded.preprocessing
    assert pre.size == (32, 32) and pre.backend == "tensor"
    assert (pre.interpolation, pre.crop) == (("bilinear", False) if kind == "vit" else ("bicubic", True))


def test_hf_pytorch_bin_folder(hf_folder, tmp_path: Path) -> None:
    """The older save format: pytorch_model.bin (read with weights_only=True) instead of safetensors."""
    model, folder = hf_folder("vit")
    (tmp_path / "config.json").write_text((folder / "config.json").read_text())
    torch.save(load_file(folder / "model.safetensors"), tmp_path / "pytorch_model.bin")
    loaded = load(tmp_path)
    assert loaded.details["weights"].endswith("pytorch_model.bin")
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        assert_close(loaded.model(x), model(x).logits, "logits")


def test_hf_base_model_without_head(tmp_path: Path) -> None:
    """A bare ViTModel: no classifier (num_classes 0), the pooler is dropped, features match."""
    from transformers import ViTConfig, ViTModel

    from_hf = ViTModel(ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                                 image_size=32, patch_size=8)).eval()
    from_hf.save_pretrained(tmp_path)
    loaded = load(tmp_path)
    assert loaded.config.num_classes == 0 and loaded.labels == []
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        assert_close(loaded.model(x), from_hf(x).last_hidden_state[:, 0], "normed [CLS]")
