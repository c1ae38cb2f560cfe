"""`convert`: native folders reload to the same model; HF folders load in transformers'
`from_pretrained` with every key used and give the same logits; what HF cannot express is refused."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vit_explorer.checkpoints import CheckpointError, convert, load

from .conftest import assert_same_model

TOL = 1e-4


def hf_class(name: str):
    import transformers

    return getattr(transformers, name)


@pytest.mark.parametrize("source", ["hf:vit", "hf:deit", "timm:vit", "timm:deit_distilled"])
def test_convert_to_hf_gives_the_same_logits_in_transformers(source: str, hf_folder, timm_hub,
                                                             tmp_path: Path) -> None:
    kind, case = source.split(":")
    folder = (hf_folder if kind == "hf" else timm_hub)(case)[1]
    loaded = load(folder)
    out = convert(loaded, to="hf", out_dir=tmp_path / "hf")
    expected = "DeiTForImageClassificationWithTeacher" if loaded.config.distilled else "ViTForImageClassification"
    model, info = hf_class(expected).from_pretrained(out, output_loading_info=True, attn_implementation="eager")
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert model.config.id2label == dict(enumerate(loaded.labels))
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert (model.eval()(x).logits - loaded.model(x)).abs().max() < TOL
    # and our own loader reads the written folder back
    again = load(out)
    with torch.no_grad():
        assert (again.model(x) - loaded.model(x)).abs().max() < TOL


def test_hf_round_trip_keeps_the_preprocessing(hf_folder, tmp_path: Path) -> None:
    """An HF source's preprocessing survives conversion: transformers' processor for the written
    folder gives the pixels our loader gives for the source."""
    from transformers import AutoImageProcessor

    loaded = load(hf_folder("deit")[1])
    out = convert(loaded, to="hf", out_dir=tmp_path / "hf")
    processor = AutoImageProcessor.from_pretrained(out)
    image = Image.fromarray(np.random.default_rng(1).integers(0, 256, (50, 70, 3), dtype=np.uint8))
    theirs = processor(images=image, return_tensors="pt")["pixel_values"]
    assert (loaded.preprocess(image) - theirs).abs().max() < 1e-5


def test_convert_cait_to_hf_is_refused(timm_hub, tmp_path: Path) -> None:
    loaded = load(timm_hub("cait")[1])
    with pytest.raises(CheckpointError, match="cannot be written in the Hugging Face .*CaiT"):
        convert(loaded, to="hf", out_dir=tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_convert_to_native_round_trip(timm_hub, tmp_path: Path) -> None:
    loaded = load(timm_hub("cait")[1])
    out = convert(loaded, to="native", out_dir=tmp_path / "native")
    again = load(out)
    assert again.kind == "native"
    assert again.labels == loaded.labels and again.preprocessing == loaded.preprocessing
    assert again.config == loaded.config
    assert_same_model(again, loaded, torch.randn(1, 3, 32, 32))
    # a native .safetensors file next to its vit_explorer.json loads too
    file_loaded = load(out / "model.safetensors")
    assert file_loaded.kind == "native" and file_loaded.config == loaded.config


def test_loading_imports_neither_transformers_nor_timm(hf_folder, timm_hub) -> None:
    hf_dir, timm_dir = hf_folder("deit")[1], timm_hub("cait")[1]
    code = textwrap.dedent(f"""
        import sys
        from vit_explorer.checkpoints import load
        for source in ({str(hf_dir)!r}, {str(timm_dir)!r}):
            load(source)
        heavy = sorted(m for m in ("transformers", "timm") if m in sys.modules)
        assert not heavy, heavy
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
