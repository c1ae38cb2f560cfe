"""Large models: weights keep their stored dtype (a bf16 or fp16 safetensors file runs in bf16 / fp16 on the
CPU, as torch runs it), read by memory map (the parameters are views of the file; a fused q/k/v is the only new
copy), or are upcast on request; the memory check counts the dtype; the views get float32 copies of what they
draw."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from vit_explorer.checkpoints import CheckpointError, load
from vit_explorer.checkpoints.weights import _MAPS

from .conftest import assert_close, randomize, save_timm_hub

LOW = [torch.bfloat16, torch.float16]


def low_tolerance(ref: torch.Tensor) -> float:
    """A few roundings of the 8-bit (bf16) mantissa at the output's scale: the same arithmetic in another order."""
    return 4 * 2.0**-8 * max(1.0, float(ref.float().abs().max()))


def mapped(t: torch.Tensor) -> bool:
    """Whether a tensor's bytes lie in a memory-mapped weights file."""
    ptr = t.data_ptr()
    return any(ref() is not None and base <= ptr < base + length for base, length, ref in _MAPS)


def timm_tiny(dtype: torch.dtype) -> torch.nn.Module:
    import timm

    model = timm.create_model("vit_small_patch14_dinov2", pretrained=False, embed_dim=48, depth=2, num_heads=2,
                              img_size=32, patch_size=8, dynamic_img_size=True)
    return randomize(model).to(dtype)


def hf_tiny(dtype: torch.dtype) -> torch.nn.Module:
    from transformers import Dinov2Config, Dinov2Model

    model = randomize(Dinov2Model(Dinov2Config(hidden_size=48, num_hidden_layers=2, num_attention_heads=2,
                                               image_size=32, patch_size=8, mlp_ratio=2, layerscale_value=0.5)))
    model.set_attn_implementation("eager")
    return model.to(dtype)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_a_low_precision_timm_checkpoint_stays_in_its_dtype(tmp_path: Path, dtype: torch.dtype) -> None:
    model = timm_tiny(dtype)
    loaded = load(save_timm_hub(model, tmp_path / "hub"))
    assert loaded.dtype == dtype and {p.dtype for p in loaded.model.parameters()} == {dtype}
    assert loaded.details["dtype"] == loaded.details["stored_dtype"] == str(dtype).removeprefix("torch.")
    assert all(mapped(p) for p in loaded.model.parameters())  # views of the file: no copy was made
    x = torch.randn(2, 3, 24, 48)
    with torch.no_grad():
        ref, ours = model(x.to(dtype)), loaded.model.forward_intermediates(x, capture="all")
    assert ours["logits"].dtype == dtype and ours["attentions"][0].dtype == dtype
    assert (ours["logits"].float() - ref.float()).abs().max() <= low_tolerance(ref)
    upcast = load(tmp_path / "hub", dtype="float32")
    assert upcast.dtype == torch.float32 and upcast.details["stored_dtype"] == str(dtype).removeprefix("torch.")
    with torch.no_grad():
        assert_close(upcast.model(x), model.float()(x), "upcast logits against timm in float32")


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_a_low_precision_hf_checkpoint_stays_in_its_dtype(tmp_path: Path, dtype: torch.dtype) -> None:
    model = hf_tiny(dtype)
    model.save_pretrained(tmp_path / "hf")
    loaded = load(tmp_path / "hf")
    assert loaded.dtype == dtype and {p.dtype for p in loaded.model.parameters()} == {dtype}
    params = dict(loaded.model.named_parameters())
    # q, k and v are fused into new tensors; everything else is a view of the file
    assert all(mapped(p) != name.endswith(("attn.qkv.weight", "attn.qkv.bias")) for name, p in params.items())
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        ref = model(x.to(dtype), output_hidden_states=True)
        ours = loaded.model.forward_intermediates(x, capture="all")
    assert ours["logits"].dtype == dtype
    assert (ours["logits"].float() - ref.pooler_output.float()).abs().max() <= low_tolerance(ref.pooler_output)
    for i in range(2):
        want = ref.hidden_states[i + 1]
        assert (ours["hidden_states"][i].float() - want.float()).abs().max() <= low_tolerance(want), i
    upcast = load(tmp_path / "hf", dtype="float32")
    with torch.no_grad():
        assert_close(upcast.model(x), model.float()(x).pooler_output, "upcast features against transformers")


def test_the_memory_check_counts_the_dtype(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Room for the bf16 model but not for its float32 copy: the bf16 load goes ahead, the upcast is refused."""
    from vit_explorer.checkpoints import memory

    folder = save_timm_hub(timm_tiny(torch.bfloat16), tmp_path / "hub")
    config = load(folder).config
    bf16 = memory.estimate_bytes(config, parameters=False) + 2 * config.estimate_parameters()
    monkeypatch.setattr(memory, "available_bytes", lambda device: bf16 + config.estimate_parameters())
    assert load(folder).dtype == torch.bfloat16
    with pytest.raises(CheckpointError, match=r"parameters in float32\) on 1 image"):
        load(folder, dtype="float32")


def test_an_unknown_dtype_is_named(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="'int8' is not a dtype vit-explorer runs in; choose one of float32"):
        load(tmp_path, dtype="int8")


def test_the_views_draw_float32_copies(tmp_path: Path) -> None:
    from PIL import Image

    from vit_explorer.explore.forward import Inputs, Needs, run_forward

    loaded = load(save_timm_hub(timm_tiny(torch.bfloat16), tmp_path / "hub"))
    cfg = loaded.config
    image = Image.fromarray((np.random.default_rng(0).random((32, 32, 3)) * 255).astype(np.uint8))
    heads = np.ones((cfg.depth, cfg.num_heads), np.float32)
    heads[1, 0] = 0
    mask = np.zeros(cfg.grid_size, bool)
    mask[0, 0] = True
    result = run_forward(Inputs(loaded, image, cfg.image_size, mask, heads, needs=Needs(fusion="mean", distance=True)))
    assert result.logits.dtype == torch.float32 and result.features.dtype == np.float32
    assert all(m.dtype == torch.float32 for m in result.maps.values())
    assert all(t.dtype == torch.float32 for t in result.tokens.values()) and result.with_pos.dtype == torch.float32
    assert loaded.dtype == torch.bfloat16  # the model itself was not converted


def test_released_pages_leave_memory(tmp_path: Path) -> None:
    """A mapped tensor's pages are resident once read, and gone once released (what keeps a fused q/k/v or an
    upcast from holding the originals beside the new copies); the values are still the file's if read again."""
    import resource

    from safetensors.torch import save_file

    from vit_explorer.checkpoints.weights import read_safetensors, release

    def resident() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()

    big = torch.arange(32 * 2**20, dtype=torch.float32).reshape(-1, 1024)  # 128 MiB
    save_file({"big": big}, str(tmp_path / "w.safetensors"))
    mapped_big = read_safetensors(tmp_path / "w.safetensors")["big"]
    before = resident()
    assert float(mapped_big[-1, -1]) == float(big[-1, -1]) and mapped_big.sum() > 0  # every page read
    touched = resident()
    release(mapped_big)
    after = resident()
    assert touched - before > 100 * 2**20 and touched - after > 100 * 2**20, (before, touched, after)
    assert torch.equal(mapped_big[:4], big[:4])


def test_the_library_load_takes_dtype_as_the_cli_does() -> None:
    """`vit_explorer.load(source, dtype=...)`, as the README documents, is the CLI's --dtype: one code path."""
    import argparse

    import vit_explorer
    from vit_explorer.checkpoints.arguments import add_model_arguments, load_options
    from vit_explorer.paths import BUNDLED_MODEL

    parser = argparse.ArgumentParser()
    add_model_arguments(parser)
    options = load_options(parser.parse_args(["--dtype", "float64"]))
    ours = vit_explorer.load(str(BUNDLED_MODEL), dtype="float64")
    cli = load(str(BUNDLED_MODEL), **options)
    assert ours.dtype == cli.dtype == torch.float64
    assert all(p.dtype == torch.float64 for p in ours.model.parameters())
    pixels = torch.rand(1, 3, *ours.config.image_size, dtype=torch.float64)
    with torch.inference_mode():
        assert torch.equal(ours.model(pixels), cli.model(pixels))
    assert vit_explorer.load(str(BUNDLED_MODEL)).dtype == torch.float32  # the weights' own
