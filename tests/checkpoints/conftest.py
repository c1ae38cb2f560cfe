"""Tiny random-weight reference models (timm, transformers) saved in their real on-disk formats."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

TOL = 1e-4  # float32 parity with the reference implementations


def assert_close(ours: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    assert ours.shape == ref.shape, f"{what}: shape {tuple(ours.shape)} vs {tuple(ref.shape)}"
    diff = (ours - ref).abs().max().item()
    assert diff < TOL, f"{what}: max |diff| {diff:.2e}"


def assert_matches_hf(ours: dict[str, Any], ref: Any, depth: int) -> None:
    """Our captures against a transformers output with hidden states and (eager) attentions."""
    assert_close(ours["logits"], ref.logits, "logits")
    assert len(ref.hidden_states) == depth + 1 and len(ref.attentions) == depth
    assert_close(ours["embedded"], ref.hidden_states[0], "embeddings")
    for i in range(depth):
        assert_close(ours["hidden_states"][i], ref.hidden_states[i + 1], f"hidden state {i}")
        assert_close(ours["attentions"][i], ref.attentions[i], f"attention {i}")


def assert_same_model(again: Any, loaded: Any, x: torch.Tensor) -> None:
    """Two loads of one checkpoint: the weights bit for bit, the outputs within float32 rounding (a
    tensor that is a view of a file need not be 64-byte aligned, and the CPU then takes other kernels)."""
    ours, theirs = again.model.state_dict(), loaded.model.state_dict()
    assert ours.keys() == theirs.keys()
    for name, tensor in ours.items():
        assert tensor.dtype == theirs[name].dtype and torch.equal(tensor, theirs[name]), name
    with torch.no_grad():
        torch.testing.assert_close(again.model(x), loaded.model(x))


LABELS = ["cat", "dog", "bird", "fish", "frog", "horse", "ship"]


def randomize(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Perturb every parameter (timm and HF init biases, LayerScale and talking heads to constants,
    which would let a wrong mapping pass); returns the model in eval mode."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.1)
    return model.eval()


# name, create_model kwargs; num_heads given explicitly differs from the name's (saved in model_args)
TIMM_CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "vit": ("vit_tiny_patch16_224", dict(embed_dim=48, depth=2, num_heads=2, dynamic_img_size=True)),
    "deit_distilled": ("deit_tiny_distilled_patch16_224", dict(embed_dim=48, depth=2, dynamic_img_size=True)),
    "cait": ("cait_xxs24_224", dict(embed_dim=48, depth=2)),
}


def build_timm(case: str, img_size: tuple[int, int] = (32, 32), seed: int = 0) -> torch.nn.Module:
    import timm

    name, kwargs = TIMM_CASES[case]
    model = timm.create_model(name, pretrained=False, img_size=img_size, patch_size=8, num_classes=len(LABELS),
                              **kwargs)
    return randomize(model, seed)


def save_timm_hub(model: torch.nn.Module, folder: Path) -> Path:
    """timm's own hub layout: config.json (architecture, model_args, pretrained_cfg) + model.safetensors."""
    from timm.models._hub import save_for_hf

    h, w = model.patch_embed.img_size
    save_for_hf(model, str(folder), safe_serialization=True,
                data_config={"input_size": (3, h, w), "crop_pct": 0.875, "interpolation": "bicubic"})
    return folder


@pytest.fixture(scope="session")
def timm_hub(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[torch.nn.Module, Path]]:
    """case -> (reference timm model, its hub-layout folder); built once per session."""
    cache: dict[str, tuple[torch.nn.Module, Path]] = {}

    def get(case: str) -> tuple[torch.nn.Module, Path]:
        if case not in cache:
            model = build_timm(case)
            cache[case] = (model, save_timm_hub(model, tmp_path_factory.mktemp(f"timm_{case}")))
        return cache[case]

    return get


def build_hf(kind: str, seed: int = 0, **overrides: Any) -> torch.nn.Module:
    """A tiny transformers ViT ('vit') or distilled DeiT ('deit') classifier with eager attention."""
    from transformers import DeiTConfig, DeiTForImageClassificationWithTeacher, ViTConfig, ViTForImageClassification

    args = dict(hidden_size=48, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96, image_size=32,
                patch_size=8, id2label=dict(enumerate(LABELS)), label2id={n: i for i, n in enumerate(LABELS)},
                attn_implementation="eager", **overrides)
    if kind == "vit":
        model = ViTForImageClassification(ViTConfig(**args))
    else:
        model = DeiTForImageClassificationWithTeacher(DeiTConfig(**args))
    return randomize(model, seed)


@pytest.fixture(scope="session")
def hf_folder(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[torch.nn.Module, Path]]:
    """kind -> (reference transformers model, its save_pretrained folder); built once per session."""
    cache: dict[str, tuple[torch.nn.Module, Path]] = {}

    def get(kind: str) -> tuple[torch.nn.Module, Path]:
        if kind not in cache:
            model = build_hf(kind)
            folder = tmp_path_factory.mktemp(f"hf_{kind}")
            model.save_pretrained(folder)
            cache[kind] = (model, folder)
        return cache[kind]

    return get


@pytest.fixture(scope="session")
def timm_build() -> Callable[..., torch.nn.Module]:
    return build_timm


@pytest.fixture(scope="session")
def timm_names() -> dict[str, str]:
    """case -> timm model name"""
    return {case: name for case, (name, _) in TIMM_CASES.items()}
