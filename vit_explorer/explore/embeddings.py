"""What the Embeddings pictures show: the patch-embedding filters (their principal components for a
patchify stem, the first convolution's filters for a convolutional one), the Conv2d = Unfold + Linear
check, the dropout demonstration, and how alike the tokens become through the layers."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..analysis.dropout import DropoutDemo, dropout_demo
from ..analysis.patch_embed import embedding_components, unfold_difference
from ..models import VisionTransformer
from .figures import ZERO_NOTE, LinesFigure, TilesFigure, state_ticks
from .forward import STATE_AXIS, ForwardResult, pixels_for

COMPONENTS = 28  # the ViT paper shows the first 28 principal components (and we show 28 conv filters)


@dataclass(frozen=True)
class Filters:
    """The stem's filters as RGB tiles: principal components (patchify) or the first 3x3 conv's filters."""

    tiles: np.ndarray  # (k, h, w, 3)
    variance: np.ndarray | None  # (k,) share of the filters' variance each component explains; None: conv filters
    zero: bool = False  # the stem's weights are all zero (untrained): the tiles show nothing
    layer: str = "the convolutional stem's first 3×3 convolution"  # where conv filters come from

    def figure(self) -> TilesFigure:
        note = ZERO_NOTE if self.zero else ""
        if self.variance is not None:
            share = "" if self.zero else f" ({float(self.variance.sum()):.0%} of the variance)"
            return TilesFigure(f"Patch-embedding filters: first {len(self.tiles)} principal components{share}",
                               self.tiles, note=note)
        return TilesFigure(f"{len(self.tiles)} filters of {self.layer}", self.tiles, note=note)


@dataclass(frozen=True)
class EmbeddingFacts:
    model_id: int  # the session's id of the model these facts describe
    filters: Filters | None  # None when the input is not RGB
    unfold_max_diff: float | None  # max |Conv2d - Unfold+Linear|; None for a convolutional stem
    dropout: DropoutDemo
    tokens: dict[str, np.ndarray]  # token-similarity curves: input, then after each block
    stem: str = "patchify"  # the model's stem (ViTConfig.stem)

    def tokens_figure(self) -> LinesFigure:
        states = len(next(iter(self.tokens.values())))
        x = np.arange(states, dtype=np.float64) - 1  # -1: the embedded input
        return LinesFigure("Token similarity through the layers", x, self.tokens, STATE_AXIS,
                           "cosine similarity", state_ticks(states))


@torch.inference_mode()
def filters(model: VisionTransformer) -> Filters | None:
    """The stem's filters as pictures; None for inputs that are not RGB."""
    if model.config.in_chans != 3:
        return None
    first = next(m for m in model.patch_embed.modules() if isinstance(m, nn.Conv2d)).weight  # (C_out, 3, k, k)
    zero = not torch.count_nonzero(first)
    if model.config.stem == "patchify":
        components, share = embedding_components(model, COMPONENTS)
        return Filters(components.float().cpu().numpy(), share.float().cpu().numpy(), zero)
    tiles = first[:COMPONENTS].permute(0, 2, 3, 1).float().cpu().numpy()
    if model.config.stem == "hybrid":  # weight-standardised when it runs: shown as stored (each tile is scaled alone)
        return Filters(tiles, None, zero, "the hybrid stem's ResNet 7×7 convolution")
    return Filters(tiles, None, zero)


def token_curves(result: ForwardResult) -> dict[str, np.ndarray]:
    """The token-similarity curves the forward pass measured, by their legend names."""
    tokens = {}
    if result.cls_patch is not None:
        tokens["cos([CLS], patch), mean over patches"] = result.cls_patch
    if result.cls_dist is not None:
        tokens["cos([CLS], [DIST])"] = result.cls_dist
    return tokens


def embedding_facts(result: ForwardResult, p: float, previous: EmbeddingFacts | None = None) -> EmbeddingFacts:
    """Everything the Embeddings view shows (run in a worker); the filters of `previous` (same model)
    are reused, as they do not depend on the image."""
    model = result.inputs.loaded.model
    same_model = previous is not None and previous.model_id == result.inputs.model_id
    stem_filters = previous.filters if same_model and previous is not None else filters(model)
    diff = None
    if model.config.stem == "patchify":
        with torch.inference_mode():
            diff = unfold_difference(model, pixels_for(result.inputs))
    return EmbeddingFacts(result.inputs.model_id, stem_filters, diff, dropout_demo(result.with_pos, p),
                          token_curves(result), model.config.stem)
