"""The pooling heads as one table (as position.SCHEMES is for position embeddings): how each pool turns the final
tokens into the vector the head reads, which tokens that reads (for attention, relevance and the logit's parts),
its width, and why a method has no rule for it. A new pool is one record here plus its tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from .config import TokenLayout, ViTConfig
    from .vit import VisionTransformer

FIRST, MEAN, LATENT = "first", "mean", "latent"  # the first token ([CLS]), the mean of the patches, a latent query


@dataclass(frozen=True)
class Pool:
    name: str  # the value of ViTConfig.pool
    label: str  # what it is, in words
    parts: tuple[str, ...]  # what the pooled vector is made of, in order: FIRST, MEAN (concatenated) or LATENT
    lrp: str | None = None  # why Chefer et al. 2021's LRP has no rule for it (None: it has)

    @property
    def latent(self) -> bool:
        """An attention pool: a learned query attends over the tokens (its module is `attn_pool`)."""
        return LATENT in self.parts

    @property
    def halves(self) -> bool:
        """The pooled vector is parts side by side ([CLS] beside the mean): a head's weights split between them."""
        return len(self.parts) > 1

    @property
    def reads_first(self) -> bool:
        """The head reads the first token ([CLS]) itself."""
        return FIRST in self.parts

    def width(self, embed_dim: int) -> int:
        """The width of the pooled vector: D per part."""
        return embed_dim * len(self.parts)

    def module(self, config: ViTConfig) -> nn.Module | None:
        """The pool's own module (an attention pool), or None."""
        from .blocks import AttentionPool, QueryPool

        return {"map": AttentionPool, "query": QueryPool}[self.name](config) if self.latent else None

    def start(self, config: ViTConfig, layout: TokenLayout) -> int:
        """The first token an attention pool reads: 0 with `pool_prefix` (PE's over every token), else the patches."""
        return 0 if config.pool_prefix else layout.num_prefix_tokens

    def __call__(self, model: VisionTransformer, x: torch.Tensor, layout: TokenLayout) -> torch.Tensor:
        """Normed final tokens (B, T, D) -> the pooled vector (B, width)."""
        if self.latent:
            pooled: torch.Tensor = model.attn_pool(x[:, self.start(model.config, layout):])
            return pooled
        out: torch.Tensor = model.fc_norm(self.concat(x, layout))  # an identity but on a mean alone (timm's fc_norm)
        return out

    def concat(self, x: torch.Tensor, layout: TokenLayout) -> torch.Tensor:
        """A pool of parts ([CLS], the mean of the patches): normed final tokens (B, T, D) -> the parts side by side
        (B, width), what fc_norm reads."""
        k = layout.num_prefix_tokens
        halves = {FIRST: lambda: x[:, 0], MEAN: lambda: x[:, k:].mean(dim=1)}  # (B, D) each, patch tokens only
        return torch.cat([halves[part]() for part in self.parts], dim=-1)

    def query_rows(self, layout: TokenLayout) -> tuple[int, ...]:
        """The tokens whose attention shows what the head reads: [CLS] where it reads [CLS] (beside the mean too),
        else every patch."""
        if self.reads_first and layout.num_prefix_tokens:
            return (0,)
        return tuple(range(layout.num_prefix_tokens, layout.num_tokens))


_NO_LRP = "has no LRP rule in Chefer et al. 2021; use attention-gradient, which covers it"
POOLS: dict[str, Pool] = {p.name: p for p in (
    Pool("cls", "the [CLS] token", (FIRST,)),
    Pool("gap", "the mean of the patch tokens", (MEAN,)),
    Pool("map", "an attention pool (MAP): a learned latent query", (LATENT,),
         lrp=f"the attention-pool (MAP) head {_NO_LRP}"),
    Pool("query", "AIMv2's query pool: the learned query as it is", (LATENT,),
         lrp=f"the query-pool (AIMv2) head {_NO_LRP}"),
    Pool("cls+mean", "[CLS] beside the mean of the patch tokens (transformers' DINOv2 classifiers)", (FIRST, MEAN)),
)}
