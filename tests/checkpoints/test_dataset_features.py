"""Dataset features (explore.dataset) equal timm's `forward_intermediates` and transformers' `hidden_states` on the
same random weights, read from an image folder through the model's own preprocessing, for every token layout:
[CLS]; [CLS] + distillation; registers; GAP without [CLS]; CaiT's late [CLS]."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vit_explorer.checkpoints import load
from vit_explorer.explore import dataset as D

from .conftest import build_hf, randomize, save_timm_hub

TINY = dict(embed_dim=48, depth=2, num_heads=2, img_size=32, patch_size=8, num_classes=3)
TIMM = {
    "vit": ("vit_tiny_patch16_224", {}),
    "deit_distilled": ("deit_tiny_distilled_patch16_224", {}),
    "registers": ("vit_small_patch14_reg4_dinov2", {}),
    "gap": ("vit_tiny_patch16_224", dict(class_token=False, global_pool="avg")),
    "cait": ("cait_xxs24_224", {}),
}


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two classes of three 40x36 images each, and one corrupt file that must be skipped and reported."""
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for c in ("a", "b"):
        (root / c).mkdir()
        for i in range(3):
            Image.fromarray(rng.integers(0, 256, (36, 40, 3), dtype=np.uint8)).save(root / c / f"{i}.png")
    (root / "b" / "broken.png").write_bytes(b"not a png")
    return root


def check(ours: np.ndarray, ref: torch.Tensor, what: str, tol: float = 1e-4) -> None:
    ref_np = ref.detach().float().numpy()
    assert ours.shape == ref_np.shape, f"{what}: {ours.shape} vs {ref_np.shape}"
    assert np.abs(ours - ref_np).max() < tol, f"{what}: max |diff| {np.abs(ours - ref_np).max():.2e}"


def reference_pixels(loaded, source: D.DatasetSource) -> torch.Tensor:
    return torch.cat([loaded.preprocess(source.image(i)) for i in range(len(source))])


@pytest.mark.parametrize("case", list(TIMM))
def test_features_equal_timm_forward_intermediates(case: str, images: Path, tmp_path: Path) -> None:
    import timm

    name, kwargs = TIMM[case]
    ref = randomize(timm.create_model(name, pretrained=False, **{**TINY, **kwargs}))
    loaded = load(str(save_timm_hub(ref, tmp_path / case)))
    source = D.open_source(str(images), val_fraction=0.34)
    features = D.extract(loaded, source, batch_size=4)
    assert len(features.skipped) == 1 and "broken.png" in features.skipped[0]
    assert len(features) == 6 and "broken" not in " ".join(features.source.paths)
    x = reference_pixels(loaded, features.source)
    with torch.no_grad():
        inter = ref.forward_intermediates(x, norm=False, output_fmt="NLC", intermediates_only=True,
                                          **({} if case == "cait" else {"return_prefix_tokens": True}))
        tokens = ref.forward_features(x)
        # DeiT distilled: timm's pre-logits average both tokens; the pooled output is what the [CLS] head reads
        pooled = tokens[:, 0] if case == "deit_distilled" else ref.forward_head(tokens, pre_logits=True)
    depth = TINY["depth"]
    assert len(inter) == depth
    for i, out in enumerate(inter, start=1):
        patches, prefix = out if isinstance(out, tuple) else (out, None)
        check(features.mean[i], patches.mean(dim=1), f"mean of the patch tokens, state {i}")
        if case in ("gap", "cait"):
            assert i not in features.cls  # no [CLS] among the token states
        else:
            check(features.cls[i], prefix[:, 0], f"[CLS], state {i}")
    check(features.pooled, pooled, "pooled output")
    assert sorted(features.mean) == list(range(depth + 1))


@pytest.mark.parametrize("kind", ["vit", "deit"])
def test_features_equal_transformers_hidden_states(kind: str, images: Path, tmp_path: Path) -> None:
    ref = build_hf(kind)
    ref.save_pretrained(tmp_path)
    loaded = load(str(tmp_path))
    features = D.extract(loaded, D.open_source(str(images)), batch_size=5, distance=True)
    x = reference_pixels(loaded, features.source)
    backbone = ref.vit if kind == "vit" else ref.deit
    with torch.no_grad():
        out = backbone(x, output_hidden_states=True, output_attentions=True)
    prefix = 1 if kind == "vit" else 2
    assert len(out.hidden_states) == features.depth + 1
    for i, hidden in enumerate(out.hidden_states):
        check(features.cls[i], hidden[:, 0], f"[CLS], state {i}")
        check(features.mean[i], hidden[:, prefix:].mean(dim=1), f"mean of the patch tokens, state {i}")
        norms = hidden[:, prefix:].norm(dim=-1)
        check(features.norm_max[:, i], norms.max(dim=1).values, f"largest patch norm, state {i}")
        sampled = hidden[:, prefix:][torch.arange(len(x))[:, None], torch.from_numpy(features.patch_index).long()]
        # stored in half precision: within float16 rounding (2^-11 of the largest value) of the float32 states
        scale = float(sampled.abs().max())
        check(features.patches[:, i].astype(np.float32), sampled, f"sampled patches, state {i}", scale * 2**-10)
    check(features.pooled, out.last_hidden_state[:, 0], "pooled output")
    # mean attention distance per image, block and head from transformers' attention maps
    from vit_explorer.analysis.attention import attention_distance

    layout = loaded.model.layout(loaded.preprocessing.size)
    for b, attn in enumerate(out.attentions):
        ref_d = torch.stack([attention_distance(attn[n:n + 1], layout) for n in range(len(x))])
        check(features.distance[:, b], ref_d, f"attention distance, block {b}")
