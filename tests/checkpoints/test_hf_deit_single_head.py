"""HF DeiTForImageClassification (a distillation token, one classifier on [CLS]) loads exactly as
dist_head=False: transformers' logits, embeddings, hidden states and attention maps (eager) at the
native 32x32 and at 24x48 (interpolate_pos_encoding=True), from safetensors and pytorch_model.bin;
`convert(to='hf')` writes a DeiTForImageClassification that transformers loads to the same logits
(and to='native' keeps dist_head=False)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from vit_explorer.checkpoints import CheckpointError, convert, load

from .conftest import LABELS, assert_close, assert_matches_hf, randomize


@pytest.fixture(scope="module")
def deit_folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, dict[str, Path]]:
    """A tiny random DeiTForImageClassification (every parameter perturbed, so biases and LayerNorm
    are not at their constant init) saved as safetensors and as pytorch_model.bin."""
    from transformers import DeiTConfig, DeiTForImageClassification

    config = DeiTConfig(hidden_size=48, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96,
                        image_size=32, patch_size=8, id2label=dict(enumerate(LABELS)),
                        label2id={n: i for i, n in enumerate(LABELS)}, attn_implementation="eager")
    model = randomize(DeiTForImageClassification(config), seed=3)
    folders = {fmt: tmp_path_factory.mktemp(f"hf_deit_single_{fmt}") for fmt in ("safetensors", "bin")}
    model.save_pretrained(folders["safetensors"])
    # transformers 5 writes only safetensors; the older pytorch_model.bin is torch.save of the same state
    (folders["bin"] / "config.json").write_text((folders["safetensors"] / "config.json").read_text())
    torch.save(load_file(folders["safetensors"] / "model.safetensors"), folders["bin"] / "pytorch_model.bin")
    return model, folders


@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
@pytest.mark.parametrize("size", [(32, 32), (24, 48)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_single_head_deit_parity(deit_folders, fmt: str, size: tuple[int, int]) -> None:
    model, folders = deit_folders
    loaded = load(folders[fmt])
    assert loaded.kind == "hf" and loaded.details["architecture"] == "DeiTForImageClassification"
    assert loaded.details["weights"].endswith("model.safetensors" if fmt == "safetensors" else "pytorch_model.bin")
    assert loaded.config.prefix_tokens == "cls+dist" and not loaded.config.dist_head
    assert not hasattr(loaded.model, "head_dist")
    assert loaded.labels == LABELS
    x = torch.randn(2, 3, *size)
    with torch.no_grad():
        ref = model(x, output_hidden_states=True, output_attentions=True, interpolate_pos_encoding=size != (32, 32))
        ours = loaded.model.forward_intermediates(x, capture="all")
    assert set(ours["head_logits"]) == {"cls"}
    assert_matches_hf(ours, ref, depth=2)


def test_convert_writes_deit_for_image_classification(deit_folders, tmp_path: Path) -> None:
    from transformers import DeiTForImageClassification

    _, folders = deit_folders
    loaded = load(folders["safetensors"])
    out = convert(loaded, to="hf", out_dir=tmp_path / "hf")
    again, info = DeiTForImageClassification.from_pretrained(out, output_loading_info=True,
                                                             attn_implementation="eager")
    assert again.config.architectures == ["DeiTForImageClassification"]
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert "classifier.weight" in load_file(out / "model.safetensors")
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert_close(again.eval()(x).logits, loaded.model(x), "transformers after convert")
        assert_close(load(out).model(x), loaded.model(x), "our loader after convert")
    native = load(convert(loaded, to="native", out_dir=tmp_path / "native"))
    assert not native.config.dist_head
    with torch.no_grad():
        assert_close(native.model(x), loaded.model(x), "native folder")


def test_architecture_decides_the_heads(deit_folders, tmp_path: Path,
                                        hf_folder: Callable[[str], tuple[torch.nn.Module, Path]]) -> None:
    """A teacher checkpoint that lost its distillation classifier is reported, not read as a
    single-head model; without `architectures` the weights decide."""
    import json

    _, teacher = hf_folder("deit")
    state = {k: v for k, v in load_file(teacher / "model.safetensors").items()
             if not k.startswith("distillation_classifier.")}
    torch.save(state, tmp_path / "pytorch_model.bin")
    (tmp_path / "config.json").write_text((teacher / "config.json").read_text())
    with pytest.raises(CheckpointError, match="head_dist"):
        load(tmp_path)
    config = json.loads((teacher / "config.json").read_text())
    del config["architectures"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert not load(tmp_path).config.dist_head
