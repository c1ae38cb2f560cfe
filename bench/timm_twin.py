"""timm's VisionTransformer carrying one of our models' weights: the reference a bench compares with.

Our stem (patchify or convolutional) becomes timm's patch projection, so a model with the convolutional stem (the
bundled classroom model) is compared with timm's forward of the same model, not of a patchify twin. Used by
bench/bench_explain.py and scripts/gui_latency.py (which put this folder on sys.path).
"""

from __future__ import annotations

import copy

import torch

from vit_explorer.models import VisionTransformer


def timm_twin(model: VisionTransformer) -> torch.nn.Module:
    """timm's VisionTransformer with `model`'s weights, its stem as the patch projection (eval mode). Covers the
    plain ViT family ([CLS] or average pooling, learned 1D position embedding, pre-norm); `same_logits` checks it."""
    from timm.models.vision_transformer import VisionTransformer as TimmViT

    cfg = model.config
    cls = cfg.prefix_tokens != "none"
    twin = TimmViT(img_size=cfg.image_size, patch_size=cfg.patch_size, in_chans=cfg.in_chans,
                   num_classes=cfg.num_classes, embed_dim=cfg.embed_dim, depth=cfg.depth, num_heads=cfg.num_heads,
                   mlp_ratio=cfg.mlp_ratio, qkv_bias=cfg.qkv_bias, pre_norm=cfg.pre_norm, class_token=cls,
                   global_pool="token" if cls else "avg")
    twin.patch_embed.proj = copy.deepcopy(model.patch_embed)
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("patch_embed.")}
    missing, unexpected = twin.load_state_dict(state, strict=False)
    assert not unexpected and all(k.startswith("patch_embed.") for k in missing), (missing, unexpected)
    return twin.eval()


def same_logits(model: VisionTransformer, twin: torch.nn.Module, pixels: torch.Tensor, atol: float = 1e-3
                ) -> float:
    """The largest difference of both models' logits on `pixels` (B, C, H, W); AssertionError beyond `atol`."""
    with torch.no_grad():
        diff = float((twin(pixels) - model(pixels)).abs().max())
    assert diff <= atol, f"timm's twin is not the same model: logits differ by {diff:.2e}"
    return diff
