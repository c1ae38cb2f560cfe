"""Our preprocessing equals the sources' own: timm's create_transform(resolve_data_config(...)) and
transformers' ViT/DeiT image processors, on non-square noise images (the hardest case for resamplers)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vit_explorer.checkpoints.hf_format import preprocess_from_hf
from vit_explorer.checkpoints.preprocess import Preprocess
from vit_explorer.checkpoints.schemas import timm_preprocess

TOL = 1e-5
SIZES_WH = [(45, 67), (80, 50), (33, 33), (131, 200)]


def noise_images() -> list[Image.Image]:
    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for w, h in SIZES_WH]


def assert_close(ours: torch.Tensor, ref: torch.Tensor) -> None:
    assert ours.shape == ref.shape, f"shape {tuple(ours.shape)} vs {tuple(ref.shape)}"
    assert (ours - ref).abs().max().item() < TOL


TIMM_CFGS = {
    "square": dict(input_size=(3, 32, 32), crop_pct=0.875, interpolation="bicubic"),
    "bilinear-0.9-half": dict(input_size=(3, 32, 32), crop_pct=0.9, interpolation="bilinear",
                              mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5)),
    "rectangular": dict(input_size=(3, 24, 40), crop_pct=0.9, interpolation="bicubic"),
    "squash": dict(input_size=(3, 32, 32), crop_pct=0.95, crop_mode="squash", interpolation="bicubic"),
    "full": dict(input_size=(3, 28, 28), crop_pct=1.0, interpolation="bicubic"),
}


@pytest.mark.parametrize("name", TIMM_CFGS)
def test_timm_transform_parity(name: str) -> None:
    from timm.data import create_transform, resolve_data_config

    cfg = TIMM_CFGS[name]
    theirs = create_transform(**resolve_data_config(pretrained_cfg=cfg))
    ours = timm_preprocess(cfg)
    for image in noise_images():
        assert_close(ours(image), theirs(image)[None])


def test_with_size_matches_timm_at_another_size() -> None:
    """Changing the input size keeps the recipe: timm's transform for the new size, rectangular too."""
    from timm.data import create_transform, resolve_data_config

    cfg = TIMM_CFGS["square"]
    for size in [(48, 48), (24, 40)]:
        theirs = create_transform(**resolve_data_config(pretrained_cfg={**cfg, "input_size": (3, *size)}))
        ours = timm_preprocess(cfg).with_size(size)
        for image in noise_images():
            assert_close(ours(image), theirs(image)[None])


HF_PROCESSORS = {
    "vit-default": ("vit", "ViTImageProcessor", dict(size={"height": 32, "width": 32})),
    "vit-rect-bicubic": ("vit", "ViTImageProcessor", dict(size={"height": 24, "width": 40}, resample=3,
                                                          image_mean=[0.485, 0.456, 0.406],
                                                          image_std=[0.229, 0.224, 0.225])),
    "deit-crop": ("deit", "DeiTImageProcessor", dict(size={"height": 37, "width": 37},
                                                     crop_size={"height": 32, "width": 32})),
    "deit-shortest-edge": ("deit", "DeiTImageProcessor", dict(size={"shortest_edge": 36},
                                                              crop_size={"height": 32, "width": 32})),
}


@pytest.mark.parametrize("name", HF_PROCESSORS)
def test_hf_image_processor_parity(name: str, tmp_path: Path) -> None:
    import transformers  # AutoImageProcessor gives these (torchvision) classes for such configs

    model_type, cls_name, kwargs = HF_PROCESSORS[name]
    processor = getattr(transformers, cls_name)(**kwargs)
    processor.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "preprocessor_config.json").read_text())["image_processor_type"] == cls_name
    ours = preprocess_from_hf(tmp_path, model_type, (32, 32))
    for image in noise_images():
        theirs = processor(images=image, return_tensors="pt")["pixel_values"]
        assert_close(ours(image), theirs)


def test_legacy_feature_extractor_config(tmp_path: Path) -> None:
    """Old hub configs (e.g. facebook/deit-*) give sizes as ints; transformers reads them as squares."""
    from transformers import AutoImageProcessor

    legacy = {"feature_extractor_type": "DeiTFeatureExtractor", "do_resize": True, "size": 37, "resample": 3,
              "do_center_crop": True, "crop_size": 32, "do_normalize": True,
              "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]}
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(legacy))
    processor = AutoImageProcessor.from_pretrained(tmp_path)
    ours = preprocess_from_hf(tmp_path, "deit", (32, 32))
    for image in noise_images():
        assert_close(ours(image), processor(images=image, return_tensors="pt")["pixel_values"])


def test_backends_differ_so_the_choice_matters() -> None:
    """PIL and torch resamplers disagree by whole grey levels: the parity above is not vacuous."""
    image = noise_images()[0]
    pil = Preprocess((32, 32), interpolation="bicubic", backend="pil")
    tensor = Preprocess((32, 32), interpolation="bicubic", backend="tensor")
    assert (pil(image) - tensor(image)).abs().max().item() > 1e-3


def test_preprocess_round_trips_through_dict() -> None:
    pre = timm_preprocess(TIMM_CFGS["rectangular"])
    assert Preprocess.from_dict(json.loads(json.dumps(pre.to_dict()))) == pre
