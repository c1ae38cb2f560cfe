"""vit-explorer: open up Vision Transformers (ViT, DeiT, CaiT) layer by layer.

`import vit_explorer` is cheap (no torch); `vit_explorer.load` imports what it needs on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    import torch

    from .checkpoints.loaded import LoadedModel


def load(source: str, *, device: str | None = None, dtype: str | torch.dtype | None = None,
         arch: str | None = None) -> LoadedModel:
    """Load a hub id (HF or `timm/...`), a local folder or a file into a `LoadedModel`.

    `device` ('cpu', 'cuda', 'cuda:1', 'mps'; default the CPU); `dtype` ('float32', 'bfloat16', 'float16',
    'float64'; default the weights' own, so a bf16 checkpoint runs in bf16) as `--dtype` gives it; `arch` names the
    timm architecture of a bare weights file (e.g. "vit_small_patch16_224").
    """
    from .checkpoints import load as _load

    return _load(source, device=device, dtype=dtype, arch=arch)


def explain(images: Any, methods: Any, targets: Any = None, *, model: LoadedModel, **options: Any) -> Any:
    """Every method's relevance maps of a batch of images (PIL images or a (B, 3, H, W) tensor), a target per image
    (class index or label; None: the top class), with their faithfulness records: `explore.ranking.Batch`."""
    from .explore.ranking import explain as _explain

    return _explain(images, methods, targets, model=model, **options)


def __getattr__(name: str) -> Any:
    if name == "LoadedModel":
        from .checkpoints.loaded import LoadedModel

        return LoadedModel
    raise AttributeError(name)
