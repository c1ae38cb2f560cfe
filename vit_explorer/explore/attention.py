"""What the attention pictures show, for the app's Attention view and the report alike.

The query: a patch the user picked, or by default what the classifier reads — the [CLS] token
(the first prefix token), or, for a model whose head reads the mean of the patch tokens (GAP) and
for CaiT's self-attention blocks (which have no [CLS]), the mean over the patch tokens as queries.
Rollout follows the same rule; CaiT's default rollout goes from [CLS] through its class-attention
blocks first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..analysis import attention as attn
from ..models import TokenLayout, pooling
from ..models.config import POOLS
from .figures import MapsFigure, ScatterFigure
from .forward import ForwardResult, Needs

MODES = ("one head", "all heads", "mean of heads", "rollout", "mean attention distance", "class attention (CaiT)")
CLASS_ATTENTION = "class attention (CaiT)"


@dataclass(frozen=True)
class Query:
    """The query rows of one picture: their token indices (averaged when several) and a name."""

    rows: tuple[int, ...]
    name: str
    class_attention: bool = False  # CaiT's default: [CLS] through its class-attention blocks

    @property
    def default(self) -> bool:
        return len(self.rows) != 1 or self.class_attention


def query_for(layout: TokenLayout, pool: str, patch: tuple[int, int] | None = None) -> Query:
    """The chosen patch (row, col) if it lies on this grid, else the classifier's query. ValueError for a
    `pool` that is not one of the config's or a patch that is not two whole numbers from 0."""
    if pool not in POOLS:
        raise ValueError(f"pool must be one of {POOLS}, got {pool!r}")
    if patch is not None and not (len(patch) == 2 and all(
            isinstance(i, (int, np.integer)) and not isinstance(i, bool) and i >= 0 for i in patch)):
        raise ValueError(f"patch must be (row, col), whole numbers from 0, got {patch!r}")
    if patch is not None and patch[0] < layout.grid[0] and patch[1] < layout.grid[1]:
        index = layout.token_index(*patch)
        return Query((index,), f"patch ({patch[0]}, {patch[1]})")
    rows = pooling.POOLS[pool].query_rows(layout)
    if rows == (0,):  # the head reads [CLS] (beside the mean of the patches too)
        return Query(rows, f"[{layout.prefix_names[0].upper()}]")
    return Query(rows, "mean of the patch tokens", class_attention=layout.class_attn)


def needs_for(mode: str, layer: int, fusion: str) -> Needs:
    """What the forward pass must compute for the Attention view in this mode (ValueError for a mode not in
    MODES, a negative layer or a fusion not in HEAD_FUSIONS)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or layer < 0:
        raise ValueError(f"layer must be a block index from 0, got {layer!r}")
    if fusion not in attn.HEAD_FUSIONS:
        raise ValueError(f"fusion must be one of {attn.HEAD_FUSIONS}, got {fusion!r}")
    if mode == "rollout":
        return Needs(fusion=fusion)
    if mode == "mean attention distance":
        return Needs(distance=True)
    if mode == CLASS_ATTENTION:
        return Needs()  # class attention is always kept (one row per head)
    return Needs(maps=frozenset({layer}))


def attention_grid(result: ForwardResult, layer: int, query: Query) -> np.ndarray:
    """(heads, gh, gw): the query's attention to every patch in one self-attention block."""
    if layer not in result.maps:
        raise ValueError(f"the attention maps of block {layer} were not computed in this forward pass")
    probs = result.maps[layer][0].float()  # (heads, T, T)
    received = probs[:, list(query.rows)].mean(dim=1)  # (heads, T)
    return attn.to_grid(received, result.layout).numpy()


def layer_maps(result: ForwardResult, query: Query) -> np.ndarray:
    """(layers, gh, gw): the query's attention in every block, averaged over heads (from the maps the
    forward pass reduced for these query rows)."""
    if result.query_maps is None or result.inputs.needs.query_rows != query.rows:
        raise ValueError(f"the per-block attention of {query.name} was not computed in this forward pass")
    return np.stack([attn.to_grid(q[0].float().mean(dim=0), result.layout).numpy() for q in result.query_maps])


def class_attention_grid(result: ForwardResult) -> np.ndarray:
    """CaiT: (blocks, heads, gh, gw) attention of [CLS] to each patch in each class-attention block."""
    return attn.class_attention_maps(result.class_attentions, result.layout)[0].numpy()


def rollout_map(result: ForwardResult, query: Query, discard_ratio: float) -> np.ndarray:
    """(gh, gw) attention rollout from the query (CaiT's default: through class attention first), from the
    attention the forward pass fused over heads (`Needs.fusion`)."""
    if result.fused is None:
        raise ValueError("rollout needs the attention fused over heads: this forward pass did not keep it")
    fused = [f.float() for f in result.fused]
    if query.class_attention and result.class_attentions:
        class_fused = [attn.fuse_heads(a, result.inputs.needs.fusion or "mean") for a in result.class_attentions]
        return attn.class_rollout_fused(class_fused, fused, result.layout, discard_ratio=discard_ratio)[0].numpy()
    return attn.rollout_fused(fused, result.layout, discard_ratio=discard_ratio, query=list(query.rows))[0].numpy()


def mean_distance(result: ForwardResult) -> np.ndarray:
    """(blocks, heads) mean attention distance in pixels (ViT paper Fig. 7, right)."""
    if result.distance is None:
        raise ValueError("the mean attention distance was not measured in this forward pass")
    return result.distance


# ---------------------------------------------------------------------------- the pictures
def _masked(result: ForwardResult) -> np.ndarray | None:
    return result.inputs.mask if result.inputs.mask.any() else None


def heads_figure(result: ForwardResult, mode: str, layer: int, head: int, query: Query, *,
                 image: bool = True, opacity: float = 0.6, heads: tuple[int, ...] | None = None) -> MapsFigure:
    """'one head', 'all heads', 'mean of heads' of a self-attention block, or CaiT's class attention
    of a class-attention block (`layer` counts from the first class-attention block then); `heads` chooses
    the heads 'all heads' and class attention show side by side (None: every head)."""
    if mode == CLASS_ATTENTION:
        if not result.class_attentions:
            raise ValueError("this model has no class-attention blocks (CaiT only)")
        block = min(layer, len(result.class_attentions) - 1)
        maps = class_attention_grid(result)[block]  # (heads, gh, gw)
        where, who = f"class-attention block {block}", "query [CLS]"
        off = result.inputs.head_mask[result.depth + block] < 1  # (heads,) switched off in the Heads view
    else:
        layer = min(layer, result.depth - 1)
        maps = attention_grid(result, layer, query)
        where, who = f"layer {layer}", f"query {query.name}"
        off = result.inputs.head_mask[layer] < 1
    marks = [" (off)" if o else "" for o in off]
    titles: tuple[str, ...]  # a switched-off head still attends; its output is dropped
    if mode == "one head":
        head = min(head, len(maps) - 1)
        maps, titles, heading = maps[head:head + 1], (f"{where} · head {head}{marks[head]} · {who}",), ""
    elif mode == "mean of heads":
        n_off = f" ({int(off.sum())} off)" if off.any() else ""
        maps, titles, heading = maps.mean(0, keepdims=True), (f"{where} · mean of heads{n_off} · {who}",), ""
    else:
        shown = [h for h in (heads or range(len(maps))) if 0 <= h < len(maps)] or list(range(len(maps)))
        of = f" · {len(shown)} of {len(maps)} heads" if len(shown) < len(maps) else ""
        titles, heading = tuple(f"head {h}{marks[h]}" for h in shown), f"{where} · {who}{of}"
        maps = maps[shown]
    if len(maps) == 1:
        heading = ""
    return MapsFigure(heading, maps, titles, result.display if image else None, result.layout.grid,
                      masked=_masked(result), opacity=opacity)


def layers_figure(result: ForwardResult, query: Query) -> MapsFigure:
    """Small multiples: the query's attention in every block (mean over heads), each on its own scale."""
    maps = layer_maps(result, query)
    titles = tuple(f"layer {i} (max {float(m.max()):.1%})" for i, m in enumerate(maps))
    return MapsFigure(f"Attention of {query.name} per layer (mean over heads, each layer scaled to its maximum)",
                      maps, titles, result.display, result.layout.grid, colorbar_label="share of the panel's maximum",
                      scale="each", masked=_masked(result), opacity=0.75)


def class_attention_figure(result: ForwardResult) -> MapsFigure:
    """CaiT: [CLS]'s class attention in every class-attention block (mean over heads)."""
    maps = class_attention_grid(result).mean(axis=1)  # (blocks, gh, gw)
    titles = tuple(f"class-attention block {i} (max {float(m.max()):.1%})" for i, m in enumerate(maps))
    return MapsFigure("Class attention of [CLS] per class-attention block (mean over heads, each scaled to its "
                      "maximum)", maps, titles, result.display, result.layout.grid,
                      colorbar_label="share of the panel's maximum", scale="each", masked=_masked(result), opacity=0.75)


def rollout_figure(result: ForwardResult, query: Query, discard_ratio: float = 0.0, *, image: bool = True,
                   opacity: float = 0.7) -> MapsFigure:
    rolled = rollout_map(result, query, discard_ratio)
    route = " through class attention" if query.class_attention and result.class_attentions else ""
    fusion = result.inputs.needs.fusion
    title = f"attention rollout from {query.name}{route} · {fusion} over heads · discard {discard_ratio:.2f}"
    return MapsFigure("", rolled[None], (title,), result.display if image else None, result.layout.grid,
                      colorbar_label="rollout weight", masked=_masked(result), opacity=opacity)


def uniform_distance(layout: TokenLayout) -> float:
    """The mean attention distance in pixels if every patch attended to all patches alike: the level between
    local heads (below) and global ones (near it)."""
    return float(attn.patch_distances(layout).mean())


def distance_figure(distance: np.ndarray, layout: TokenLayout) -> ScatterFigure:
    """distance: (blocks, heads) from `mean_distance`, one point per head against depth, on an axis from 0 with
    the distance of uniform attention over this layout's patches drawn to read them against."""
    blocks, heads = distance.shape
    uniform = uniform_distance(layout)
    return ScatterFigure("Mean attention distance per head", np.repeat(np.arange(blocks), heads).astype(np.float64),
                         distance.reshape(-1).astype(np.float64),
                         tuple(f"head {h}" for _ in range(blocks) for h in range(heads)) if heads <= 20 else None,
                         "layer (network depth)", "mean attention distance (pixels)", jitter=0.6,
                         reference=(uniform, f"uniform attention ({uniform:.1f} px)"), y_from_zero=True)
