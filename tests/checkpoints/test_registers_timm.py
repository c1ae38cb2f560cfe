"""Issue 29's norms against timm: the residual-stream norms of every token at every state that the outlier
diagnosis computes (through hook_embedded and each block's hook_resid_post) equal the norms of timm's block outputs
on the same weights, for a ViT and a DINOv2 with registers (whose registers are prefix tokens, never patches); and
the entropy the diagnosis reports is that of timm's own attention probabilities."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from vit_explorer.analysis import registers as R
from vit_explorer.checkpoints import load
from vit_explorer.explore import dataset as D
from vit_explorer.explore import registers as X

from .conftest import build_timm, save_timm_hub
from .test_families_timm import build


def _timm_states(model: torch.nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    """timm's embedded tokens (the first block's input) and each block's output."""
    seen: list[torch.Tensor] = []
    hooks = [model.blocks[0].register_forward_pre_hook(lambda m, args: seen.append(args[0]))]
    hooks += [block.register_forward_hook(lambda m, args, out: seen.append(out)) for block in model.blocks]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in hooks:
            h.remove()
    return seen


@pytest.mark.parametrize("case", ["vit", "dinov2_reg"])
def test_norms_equal_timms_block_outputs(case: str, tmp_path) -> None:
    ref = build_timm(case) if case == "vit" else build(case)
    loaded = load(save_timm_hub(ref, tmp_path / "hub"))
    h, w = ref.patch_embed.img_size
    x = torch.randn(3, 3, h, w, generator=torch.Generator().manual_seed(0))
    expected = [s.norm(dim=-1) for s in _timm_states(ref, x)]  # (B, T) per state
    _, cache = loaded.model.run_with_cache(x, names_filter=lambda n: n == "hook_embedded" or
                                           n.endswith("hook_resid_post"))
    ours = [R.token_norms(cache["hook_embedded"])] + [
        R.token_norms(cache[f"blocks.{i}.hook_resid_post"]) for i in range(loaded.config.depth)]
    assert len(ours) == len(expected) == loaded.config.depth + 1
    for a, b in zip(ours, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_the_diagnosis_keeps_registers_out_of_the_patches(tmp_path) -> None:
    ref = build("dinov2_reg")
    loaded = load(save_timm_hub(ref, tmp_path / "hub"))
    rng = np.random.default_rng(0)
    (tmp_path / "img").mkdir()
    for i in range(4):
        Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(tmp_path / "img" / f"{i}.png")
    d = X.diagnose(loaded, D.open_source(str(tmp_path / "img")), batch_size=4)
    layout = loaded.model.layout(loaded.preprocessing.size)
    assert d.prefix_names == layout.prefix_names and len(layout.registers) == 4
    assert d.norms.shape == (4, loaded.config.depth + 1, layout.num_patches)
    assert d.prefix_norms.shape[2] == layout.num_prefix_tokens == 5
