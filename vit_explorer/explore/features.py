"""What the patch features show, the pictures the self-supervised papers made famous:

- the first three principal components of a layer's patch tokens as colours over the image, with an
  optional background removal by the first component, over several images on one shared basis (DINOv2,
  Figure 1);
- [CLS]'s attention in the last block, head by head, keeping the patches that hold a chosen share of its
  attention (DINO, Figure 1);
- each token's norm through the layers: the few patches that turn into high-norm outliers, and the
  registers that take that role instead (Darcet et al., "Vision Transformers Need Registers");
- patch correspondence: the patches of a second image most like a chosen patch of the first (cosine of a
  layer's tokens);
- for a model without a classifier, the embedding it returns and the nearest of a set of images.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ..analysis import knn
from ..data.images import sample_images
from .figures import BarsFigure, ImagesFigure, LinesFigure, MapsFigure, state_ticks
from .forward import STATE_AXIS, ForwardResult


def patch_tokens(result: ForwardResult, state: int) -> torch.Tensor:
    """(N, D) patch tokens of a state the forward pass kept (state 0: the embedded input; state i: the output of
    block i - 1, blocks counted from 0 as everywhere in the app)."""
    if state not in result.tokens:
        raise ValueError(f"the tokens after block {state} were not kept in this forward pass")
    return result.tokens[state][0, result.layout.num_prefix_tokens:].float()


# ---------------------------------------------------------------------------- PCA as colour
PCA_COMPANIONS = 3  # bundled samples run beside the image for a shared PCA basis


def same_image(name: str, other: str) -> bool:
    """Whether two image names are the same picture for the views that set an image beside others: matched by
    file stem, so "chelsea.png" and "/photos/chelsea.jpg" are the same."""
    return Path(name).stem == Path(other).stem


def pca_companions(image_name: str) -> list[Path]:
    """The bundled samples whose PCA colours are shown beside an image's (one basis): the first few that are
    not the image itself."""
    return [p for p in sample_images() if not same_image(str(p), image_name)][:PCA_COMPANIONS]


@dataclass(frozen=True)
class PCAColours:
    colours: tuple[np.ndarray, ...]  # per image (gh, gw, 3) in 0..1 (background black)
    foreground: tuple[np.ndarray, ...]  # per image (gh, gw) bool
    explained: np.ndarray  # (3,) share of the (foreground) variance each colour component explains


def pca_colours(token_sets: Sequence[torch.Tensor], grids: Sequence[tuple[int, int]], remove_background: bool
                ) -> PCAColours:
    """The first three principal components of the patch tokens of several images, on one basis, as RGB.

    token_sets: (N_i, D) per image. With remove_background, the first component over all patches splits
    foreground from background (its sign chosen so that the smaller side is the foreground, as the objects
    of a picture usually are) and the three colours come from a second PCA of the foreground patches only.
    """
    tokens = torch.cat([t.float() for t in token_sets])  # (sum N, D)
    keep = torch.isfinite(tokens).all(dim=1)  # a patch with NaN or infinity is left black
    if int(keep.sum()) < 3:
        raise ValueError(f"only {int(keep.sum())} of {len(tokens)} patch tokens are finite numbers (the model "
                         "gives NaN or infinity): there are no principal components to show")
    if remove_background:
        first = _components(tokens[keep], 1)[0][:, 0]  # scores of the finite patches on the first component
        side = first > 0
        if side.sum() > len(side) / 2:
            side = ~side
        if side.sum() >= 3:  # else nothing stands out: keep every finite patch
            keep = keep.clone()
            keep[keep.clone()] = side
    projected, explained = _components(tokens[keep], 3)
    rgb = torch.zeros(len(tokens), 3)
    lo, hi = projected.min(dim=0).values, projected.max(dim=0).values  # (3,)
    rgb[keep] = (projected - lo) / (hi - lo).clamp_min(1e-12)
    colours, masks, start = [], [], 0
    for tokens_i, (gh, gw) in zip(token_sets, grids, strict=True):
        n = len(tokens_i)
        colours.append(rgb[start:start + n].reshape(gh, gw, 3).numpy())
        masks.append(keep[start:start + n].reshape(gh, gw).numpy())
        start += n
    return PCAColours(tuple(colours), tuple(masks), explained.numpy())


def _components(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores of x (M, D) on its first k principal components (M, k) (zeros where x has fewer), and each
    component's share of the variance (k,)."""
    centred = x - x.mean(dim=0, keepdim=True)
    _, s, vh = torch.linalg.svd(centred, full_matrices=False)
    found = min(k, vh.shape[0])
    scores = F.pad(centred @ vh[:found].T, (0, k - found))  # (M, k)
    share = F.pad((s[:found] ** 2) / (s**2).sum().clamp_min(1e-30), (0, k - found))
    return scores, share


def pca_figure(results: Sequence[ForwardResult], names: Sequence[str], state: int, remove_background: bool
               ) -> ImagesFigure:
    """Each image and its patch features' first three principal components as RGB, on a shared basis."""
    pca = pca_colours([patch_tokens(r, state) for r in results], [r.layout.grid for r in results], remove_background)
    images: list[np.ndarray] = []
    titles: list[str] = []
    for result, name, colours in zip(results, names, pca.colours, strict=True):
        h, w = result.display.shape[:2]
        images += [result.display, _upsample(colours, (h, w))]
        titles += [name, "its PCA colours"]
    where = "embedded input" if state == 0 else f"after block {state - 1}"
    kept, total = sum(int(f.sum()) for f in pca.foreground), sum(f.size for f in pca.foreground)
    background = f", background removed by the first component ({kept} of {total} patches kept)" \
        if remove_background else ""
    share = ", ".join(f"{v:.0%}" for v in pca.explained)
    return ImagesFigure(f"First three principal components of the patch tokens ({where}{background}) as red, "
                        f"green, blue; {share} of the variance", tuple(images), tuple(titles),
                        results[0].layout.grid)


def _upsample(colours: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """(gh, gw, 3) in 0..1 -> (H, W, 3) uint8, each patch a block of its colour."""
    gh, gw = colours.shape[:2]
    rows = (np.arange(size[0]) * gh // size[0])[:, None]
    cols = (np.arange(size[1]) * gw // size[1])[None, :]
    return np.round(colours[rows, cols] * 255).astype(np.uint8)


# ---------------------------------------------------------------------------- [CLS] attention per head
def keep_mass(maps: np.ndarray, share: float) -> np.ndarray:
    """Each map (k, gh, gw) with only its largest entries that together hold `share` of its mass (DINO)."""
    if not 0 < share <= 1:
        raise ValueError(f"the share of attention to keep must be in (0, 1], got {share}")
    flat = maps.reshape(len(maps), -1)
    order = np.argsort(-flat, axis=1)
    sorted_values = np.take_along_axis(flat, order, axis=1)
    cumulative = np.cumsum(sorted_values, axis=1) / np.maximum(flat.sum(axis=1, keepdims=True), 1e-12)
    keep_sorted = np.concatenate([np.ones((len(flat), 1), bool), cumulative[:, :-1] < share], axis=1)
    keep = np.zeros_like(flat, dtype=bool)
    np.put_along_axis(keep, order, keep_sorted, axis=1)
    return np.where(keep, flat, 0.0).reshape(maps.shape)


def cls_heads_figure(result: ForwardResult, share: float = 0.6) -> MapsFigure:
    """[CLS]'s attention to the patches in the last block, one map per head, thresholded to keep `share` of it."""
    layout = result.layout
    if not layout.num_prefix_tokens or layout.prefix_names[0] != "cls":
        raise ValueError("this model has no [CLS] token in its blocks")
    last = result.depth - 1
    if last not in result.maps:
        raise ValueError("the last block's attention maps were not kept in this forward pass")
    probs = result.maps[last][0].float()  # (heads, T, T)
    maps = probs[:, 0, layout.num_prefix_tokens:].reshape(-1, *layout.grid).numpy()  # (heads, gh, gw)
    kept = keep_mass(maps, share)
    titles = tuple(f"head {h}" for h in range(len(kept)))
    return MapsFigure(f"[CLS] attention in the last block, per head, keeping {share:.0%} of its mass (DINO)", kept,
                      titles, result.display, layout.grid, scale="each", colorbar_label="share of the head's maximum",
                      opacity=0.8)


# ---------------------------------------------------------------------------- token norms and registers
@dataclass(frozen=True)
class Outliers:
    state: int  # the state whose patch norms are shown (0: the embedded input, i: after block i - 1)
    patch_norms: np.ndarray  # (gh, gw)
    outliers: np.ndarray  # (gh, gw) bool: more than `factor` times the median patch norm
    first_state: np.ndarray  # (gh, gw) int: the first state in which each patch became an outlier (-1: never)
    register_norms: dict[str, float]


def outliers(result: ForwardResult, state: int, factor: float = 2.0) -> Outliers:
    """Which patches have high-norm tokens at a state, and from which state on each patch is an outlier."""
    layout = result.layout
    norms = result.norms[:, layout.num_prefix_tokens:]  # (states, N)
    median = np.median(norms, axis=1, keepdims=True)
    high = norms > factor * median  # (states, N)
    first = np.where(high.any(axis=0), high.argmax(axis=0), -1)
    registers = {layout.prefix_names[i]: float(result.norms[state, i]) for i in layout.registers}
    return Outliers(state, norms[state].reshape(layout.grid), high[state].reshape(layout.grid),
                    first.reshape(layout.grid), registers)


def norms_figure(result: ForwardResult) -> LinesFigure:
    """Token norms through the layers: the median and the largest patch, [CLS] and every register."""
    layout = result.layout
    norms = result.norms  # (states, T)
    patches = norms[:, layout.num_prefix_tokens:]
    series = {"median patch": np.median(patches, axis=1), "largest patch": patches.max(axis=1)}
    for i, name in enumerate(layout.prefix_names):
        series[f"[{name.upper()}]"] = norms[:, i]
    return LinesFigure("Token norms through the layers (high-norm outliers; registers take their role)",
                       np.arange(len(norms), dtype=np.float64) - 1, series, STATE_AXIS, "L2 norm",
                       state_ticks(len(norms)))


def outliers_figure(result: ForwardResult, state: int, factor: float = 2.0) -> MapsFigure:
    found = outliers(result, state, factor)
    registers = ", ".join(f"[{k.upper()}] {v:.1f}" for k, v in found.register_norms.items())
    where = f"after block {state - 1}" if state else "at the input"
    title = f"patch token norms {where} · {int(found.outliers.sum())} outliers (> {factor:g}× the median)"
    if found.outliers.any():  # where they are born (Darcet et al.: in the middle of the network)
        born = int(found.first_state[found.outliers].min())
        title += f", the first after block {born - 1}" if born else ", the first already at the input"
    if registers:
        title += f" · {registers}"
    return MapsFigure("", found.patch_norms[None], (title,), result.display, result.layout.grid,
                      colorbar_label="L2 norm", cmap="viridis", opacity=0.75)


# ---------------------------------------------------------------------------- correspondence and neighbours
def correspondence(tokens_a: torch.Tensor, tokens_b: torch.Tensor, patch: int, grid_b: tuple[int, int]
                   ) -> np.ndarray:
    """(gh, gw) cosine similarity of patch `patch` of image A with every patch of image B."""
    sim = F.cosine_similarity(tokens_a[patch][None].float(), tokens_b.float(), dim=-1)  # (N_b,)
    return sim.reshape(grid_b).numpy()


def correspondence_figure(a: ForwardResult, b: ForwardResult, state: int, patch: tuple[int, int],
                          names: tuple[str, str]) -> ImagesFigure:
    """Image A with the chosen patch outlined, image B tinted by how like that patch each of its patches is
    (red: alike, blue: opposite), its best match outlined."""
    if not (0 <= patch[0] < a.layout.grid[0] and 0 <= patch[1] < a.layout.grid[1]):
        raise ValueError(f"patch {patch} is outside the {a.layout.grid[0]}×{a.layout.grid[1]} grid of {names[0]}")
    index = patch[0] * a.layout.grid[1] + patch[1]
    sim = correspondence(patch_tokens(a, state), patch_tokens(b, state), index, b.layout.grid)
    row, col = np.unravel_index(int(np.argmax(sim)), sim.shape)
    best = (int(row), int(col))
    shown_a = _outline(a.display, a.layout.grid, patch)
    shown_b = _outline(_tint(b.display, sim, b.layout.grid), b.layout.grid, best)
    where = f"tokens after block {state - 1}" if state else "embedded tokens"
    return ImagesFigure(f"Patch correspondence ({where}, cosine similarity)", (shown_a, shown_b),
                        (f"{names[0]}: patch {patch}", f"{names[1]}: most alike at {best} ({sim[best]:.2f})"))


def _tint(rgb: np.ndarray, sim: np.ndarray, grid: tuple[int, int]) -> np.ndarray:
    """The photo blended with a blue-white-red colour per patch for similarities in -1..1."""
    h, w = rgb.shape[:2]
    s = np.clip(sim, -1, 1)[(np.arange(h) * grid[0] // h)[:, None], (np.arange(w) * grid[1] // w)[None, :]]
    red, blue = np.array([215.0, 48, 39]), np.array([49.0, 54, 149])
    white = np.array([247.0, 247, 247])
    colour = np.where(s[..., None] >= 0, white + s[..., None] * (red - white), white - s[..., None] * (blue - white))
    return np.round(0.45 * rgb + 0.55 * colour).astype(np.uint8)


def _outline(rgb: np.ndarray, grid: tuple[int, int], patch: tuple[int, int]) -> np.ndarray:
    """The photo with a patch framed in yellow."""
    out = rgb.copy()
    h, w = rgb.shape[:2]
    top, bottom = patch[0] * h // grid[0], (patch[0] + 1) * h // grid[0] - 1
    left, right = patch[1] * w // grid[1], (patch[1] + 1) * w // grid[1] - 1
    yellow = np.array([255, 215, 0], np.uint8)
    out[top, left:right + 1] = out[bottom, left:right + 1] = yellow
    out[top:bottom + 1, left] = out[top:bottom + 1, right] = yellow
    return out


def nearest(features: np.ndarray, others: Sequence[np.ndarray], names: Sequence[str], k: int = 5) -> BarsFigure:
    """The k images whose pooled features are most like `features` (cosine, analysis.knn), most alike first."""
    found = knn.search(np.stack([np.asarray(o, dtype=np.float32).reshape(-1) for o in others]),
                       np.asarray(features, dtype=np.float32).reshape(1, -1), k)
    return BarsFigure("Nearest images by pooled features (cosine similarity)", tuple(names[i] for i in found.index[0]),
                      found.similarity[0], xlabel="cosine similarity", value_format="{:.3f}", value_range=(-1.0, 1.0))


def embedding_figure(result: ForwardResult, k: int = 8) -> BarsFigure:
    """The embedding a model without classifier returns (its output: CLIP's projection to the joint image-text
    space where it has one, else the pooled features), its k largest components by magnitude."""
    embedding = result.logits.float().numpy()
    order = np.argsort(-np.abs(embedding))[:k]
    what = "Image embedding, projected to the joint space" if result.inputs.loaded.config.proj_dim else \
        "Pooled embedding"
    title = f"{what} ({len(embedding)} numbers): the {len(order)} largest"
    return BarsFigure(title, tuple(f"dim {i}" for i in order), embedding[order].astype(np.float64), xlabel="value",
                      value_format="{:+.3g}")
