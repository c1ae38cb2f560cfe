"""Outlier diagnosis over a dataset, register neurons, and test-time registers on the live model (issue 29).

One pass per batch, through the named hook sites only: `hook_embedded` and each `blocks.{i}.hook_resid_post` give
the token norms of every state (0 = the embedded input, i = the output of block i - 1) and the massive
activations; each `blocks.{i}.mlp.hook_post` the MLP hidden units at the patches (where register neurons live);
with `attention`, each `blocks.{i}.attn.hook_pattern` the entropy per head and the [CLS] attention the outliers of
that block's input receive. The finder (analysis/registers.py, the paper's `find_register_neurons`) then needs no
second pass: each batch adds, for every state, each unit's mean activation at that state's outliers.

An untrained model shows no outliers (share 0, `outlier_state` None) and near-uniform attention (entropy near
log T); registers a model already has (DINOv2-reg, DINOv3) are prefix tokens, never counted among the patches,
and their norms are shown beside the patches' as the reference.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..analysis import registers as R
from ..checkpoints import LoadedModel
from ..jobs import Job
from ..models import TokenLayout
from ..models.hooks import HookPoint
from . import dataset as D
from .figures import BarsFigure, Figure, ImagesFigure, LinesFigure, MapsFigure, state_ticks

DEFAULT_IMAGES = 500  # the paper's N for the finder
MAX_BATCH_BYTES = 256 * 2**20  # the MLP activations one batch keeps for the finder
MIN_SHARE = 1e-3  # a state has outliers when at least this share of its patch tokens are


@dataclass
class Diagnosis:
    """The outlier diagnosis of a model over a dataset; arrays over states S = depth + 1 and blocks L = depth."""

    images: int
    grid: tuple[int, int]
    prefix_names: tuple[str, ...]
    ratio: float
    threshold: float | None
    norms: np.ndarray  # (n, S, N) float32 every patch token's norm
    prefix_norms: np.ndarray  # (n, S, P) the prefix tokens' ([CLS], registers)
    outliers: np.ndarray  # (n, S, N) bool
    massive_max: np.ndarray  # (S,) the largest |activation| over the dataset
    massive_median: np.ndarray  # (S,) the mean over images of the median |activation|
    massive_dim: np.ndarray  # (S,) the feature dimension of the largest
    massive_per_dim: np.ndarray  # (S, D) the largest |activation| per dimension
    scores: np.ndarray  # (S, L, H) summed over images: each unit's mean |activation| at the outliers of
    # `detect_state` (the other states' rows stay 0)
    images_with_outliers: np.ndarray  # (S,)
    position_mean: np.ndarray | None = None  # (S, N, D) the mean patch feature per grid cell: what images share
    positional_share: np.ndarray | None = None  # (S,) the share of patch-token variance position_mean explains
    entropy: np.ndarray | None = None  # (L, heads) nats, mean over images and queries
    max_entropy: float | None = None  # log T
    cls_share: np.ndarray | None = None  # (L,) [CLS] attention to the outliers of the block's input
    token_share: np.ndarray | None = None  # (L,) their share of the tokens: what uniform attention gives
    skipped: list[str] = field(default_factory=list)
    detect_state: int = -1  # the state whose outliers the finder reads (-1: the last, the paper's default)

    @property
    def outlier_share(self) -> np.ndarray:
        """(S,) the share of patch tokens that are outliers at each state."""
        return self.outliers.mean(axis=(0, 2)) if self.outliers.size else np.zeros(self.outliers.shape[1])

    @property
    def outlier_map(self) -> np.ndarray:
        """(S, gh, gw) how often each patch position is an outlier: where they sit on the image."""
        return self.outliers.mean(axis=0).reshape(self.outliers.shape[1], *self.grid)

    @property
    def outlier_state(self) -> int | None:
        """The first state with at least half the largest outlier share (and MIN_SHARE), or None: the outliers
        appear after the MLP of block outlier_state - 1."""
        share = self.outlier_share
        if share.max(initial=0.0) < MIN_SHARE:
            return None
        return int(np.flatnonzero(share >= max(share.max() / 2, MIN_SHARE))[0])

    def neuron_scores(self) -> np.ndarray:
        """(blocks, H): each unit's mean |activation| at the outliers of `detect_state`, averaged over the images that
        have any there (the paper's `find_register_neurons`: every block, not only those before the outliers)."""
        s = self.detect_state % self.scores.shape[0]
        images = int(self.images_with_outliers[s])
        if not images:
            return np.zeros((0, self.scores.shape[2]), np.float32)
        return self.scores[s] / images

    def neurons(self, top: int = 20) -> list[tuple[int, int, float]]:
        """The register neurons (block, unit, score), best first; [] without outliers."""
        scores = self.neuron_scores()
        return R.rank_neurons(torch.from_numpy(scores), top) if scores.size else []

    def to_json(self, top: int = 20) -> dict[str, Any]:
        """The command's --json object (issue 29's contract) and a few more keys."""
        states = [{"state": s, "outlier_share": float(self.outlier_share[s]), "max_norm": float(self.norms[:, s].max()),
                   "median_norm": float(np.median(self.norms[:, s]))} for s in range(self.norms.shape[1])]
        return {"states": states, "neurons": [{"block": b, "unit": u, "score": v} for b, u, v in self.neurons(top)],
                "outlier_state": self.outlier_state, "images": self.images, "rule": self.rule()}

    def rule(self) -> str:
        if self.threshold is not None:
            return f"norm > {self.threshold:g}"
        return f"norm > {self.ratio:g} x the image's median patch norm"


def _batch_size(loaded: LoadedModel, requested: int) -> int:
    """At most `requested`, and few enough that one batch's MLP activations fit MAX_BATCH_BYTES."""
    cfg = loaded.config
    layout = loaded.model.layout(loaded.preprocessing.size)
    hidden = int(cfg.embed_dim * cfg.mlp_ratio)
    per_image = layout.num_patches * hidden * cfg.depth * 4
    return max(1, min(requested, MAX_BATCH_BYTES // max(per_image, 1)))


class _Batch:
    """The hooks of one pass and what they keep. They read only, and only the pass of the thread that made them: a
    pass another worker runs on the same model meanwhile is not counted."""

    def __init__(self, layout: Any, depth: int, ratio: float, threshold: float | None, attention: bool,
                 statistics: bool = True) -> None:
        self.thread = threading.get_ident()
        self.statistics = statistics
        self.p, self.n = layout.num_prefix_tokens, layout.num_patches
        self.cls = 0 if "cls" in layout.prefix_names and not layout.class_attn else None
        self.ratio, self.threshold = ratio, threshold
        self.norms: list[torch.Tensor] = []  # per state (B, T)
        self.cell_sums: list[torch.Tensor] = []  # per state (N, D) the patch tokens summed over the images
        self.square_sums: list[torch.Tensor] = []  # per state () their squared norms summed
        self.masks: list[torch.Tensor] = []  # per state (B, N)
        self.massive: list[dict[str, torch.Tensor]] = []
        self.acts: list[torch.Tensor] = []  # per block (B, N, H)
        self.entropy: list[torch.Tensor] = []  # per block (B, heads)
        self.cls_share: list[torch.Tensor] = []  # per block (B,)
        self.hooks: list[tuple[str, Callable[[torch.Tensor, HookPoint], None]]] = [("hook_embedded", self.state)]
        for i in range(depth):
            self.hooks.append((f"blocks.{i}.mlp.hook_post", self.mlp))
            self.hooks.append((f"blocks.{i}.hook_resid_post", self.state))
            if attention:
                self.hooks.append((f"blocks.{i}.attn.hook_pattern", self.pattern))

    def ours(self) -> bool:
        return threading.get_ident() == self.thread

    def state(self, x: torch.Tensor, hook: HookPoint) -> None:
        if not self.ours():
            return
        norms = R.token_norms(x)  # (B, T)
        self.norms.append(norms)
        self.masks.append(R.outlier_mask(norms[:, self.p:], ratio=self.ratio, threshold=self.threshold))
        if self.statistics:
            patches = x[:, self.p:].float()  # (B, N, D)
            self.cell_sums.append(patches.sum(dim=0))  # (N, D)
            self.square_sums.append(patches.square().sum())
            self.massive.append(R.massive_activations(x))

    def mlp(self, hidden: torch.Tensor, hook: HookPoint) -> None:
        if not self.ours():
            return
        self.acts.append(hidden[:, -self.n:].float())

    def pattern(self, probs: torch.Tensor, hook: HookPoint) -> None:  # the block's input is the last state seen
        if not self.ours():
            return
        self.entropy.append(R.attention_entropy(probs))
        if self.cls is not None:
            keys = torch.zeros(probs.shape[0], probs.shape[-1], dtype=torch.bool, device=probs.device)
            keys[:, self.p:] = self.masks[-1]
            self.cls_share.append(R.cls_share(probs, keys, self.cls))


def diagnose(loaded: LoadedModel, source: D.DatasetSource, *, ratio: float = R.DEFAULT_RATIO,
             threshold: float | None = None, attention: bool = True, statistics: bool = True,
             detect_state: int = -1, batch_size: int = 32, job: Job | None = None) -> Diagnosis:
    """The outlier diagnosis of `loaded` over every image of `source` (see the module doc); `attention=False`
    skips entropy and [CLS] shares (the blocks then keep the fused attention kernel), `statistics=False` the massive
    activations and the positional artifact (their arrays are then empty): together, the finder alone. `job` hears
    the share of images done and stops between batches when cancelled."""
    job = job if job is not None else Job()
    model, cfg = loaded.model, loaded.config
    if not -(cfg.depth + 1) <= detect_state <= cfg.depth:
        raise ValueError(f"detect_state {detect_state} is not a state of this model (0..{cfg.depth}, -1 the last)")
    layout = model.layout(loaded.preprocessing.size)
    depth, s_count = cfg.depth, cfg.depth + 1
    batch_size = _batch_size(loaded, batch_size)
    keep: dict[str, list[np.ndarray]] = {}
    sums: torch.Tensor | None = None
    cells: torch.Tensor | None = None  # (S, N, D)
    squares = torch.zeros(s_count, dtype=torch.float64, device=loaded.device)
    with_outliers = np.zeros(s_count, np.int64)
    skipped: list[str] = []
    done = 0
    for kept, pixels, bad in D._batches(source, loaded, batch_size, job, np.arange(len(source))):
        skipped += bad
        done += len(kept) + len(bad)
        if pixels is not None:
            batch = _Batch(layout, depth, ratio, threshold, attention, statistics)
            with torch.inference_mode(), model.hooks(batch.hooks):
                model(pixels.to(loaded.device, model.dtype))
            masks = torch.stack(batch.masks)  # (S, B, N)
            sums = _add_sums(sums, masks, batch.acts, detect_state % s_count)
            if statistics:
                cells = torch.stack(batch.cell_sums) if cells is None else cells + torch.stack(batch.cell_sums)
                squares = squares + torch.stack(batch.square_sums).double()
            with_outliers += masks.any(dim=-1).sum(dim=-1).cpu().numpy()
            _keep(keep, batch)
        job.progress(done / max(len(source), 1), f"{done} of {len(source)} images")
    if not keep:
        first = skipped[0] if skipped else "the dataset is empty"
        raise ValueError(f"{source.name}: none of the {len(source)} images can be read (the first: {first})")
    diagnosis = _assemble(keep, sums, with_outliers, layout, ratio, threshold, skipped)
    diagnosis.detect_state = detect_state % s_count
    if cells is not None:
        diagnosis.position_mean, diagnosis.positional_share = positional_artifact(cells, squares, diagnosis.images)
    return diagnosis


def positional_artifact(cells: torch.Tensor, squares: torch.Tensor, n: int) -> tuple[np.ndarray, np.ndarray]:
    """cells (S, N, D) the patch tokens summed per grid cell over n images, squares (S,) their squared norms summed
    -> the mean patch feature per cell (S, N, D) and the share of the patch tokens' total variance (about the mean
    over every patch and image) that the per-cell means explain (S,): 1 when every image is the same, near 0 when
    nothing is shared by position."""
    cell_mean = cells.double() / n  # (S, N, D)
    grand = cell_mean.mean(dim=1, keepdim=True)  # (S, 1, D)
    count = n * cells.shape[1]
    total = squares.double() - count * grand.squeeze(1).square().sum(dim=-1)  # (S,) sum of squares about the mean
    between = n * (cell_mean - grand).square().sum(dim=(1, 2))  # (S,)
    share = (between / total.clamp_min(1e-30)).clamp(0.0, 1.0)
    return cell_mean.float().cpu().numpy(), share.cpu().numpy()


def _add_sums(sums: torch.Tensor | None, masks: torch.Tensor, acts: list[torch.Tensor], state: int) -> torch.Tensor:
    """sums (S, L, H) plus this batch's part at `state`: every block's units' mean |activation| at that state's
    outliers, summed over the images."""
    if sums is None:
        sums = torch.zeros(masks.shape[0], len(acts), acts[0].shape[-1] if acts else 0, device=masks.device)
    if bool(masks[state].any()):
        weights = R.outlier_weights(masks[state:state + 1])  # (1, B, N)
        for block, act in enumerate(acts):
            sums[state, block] += R.register_neuron_sums(weights, act)[0]
    return sums


def _keep(keep: dict[str, list[np.ndarray]], batch: _Batch) -> None:
    p = batch.p
    arrays = {"norms": torch.stack([n[:, p:] for n in batch.norms], 1), "prefix": torch.stack(
        [n[:, :p] for n in batch.norms], 1), "outliers": torch.stack(batch.masks, 1)}
    if batch.massive:
        arrays.update({"m_max": torch.stack([m["max"] for m in batch.massive], 1),
                       "m_median": torch.stack([m["median"] for m in batch.massive], 1),
                       "m_dim": torch.stack([m["dim"] for m in batch.massive], 1),
                       "m_per_dim": torch.stack([m["per_dim"] for m in batch.massive], 1).amax(dim=0, keepdim=True)})
    if batch.entropy:
        arrays["entropy"] = torch.stack(batch.entropy, 1)  # (B, L, heads)
    if batch.cls_share:
        arrays["cls_share"] = torch.stack(batch.cls_share, 1)  # (B, L)
    for name, value in arrays.items():
        keep.setdefault(name, []).append(value.cpu().numpy())


def _assemble(keep: dict[str, list[np.ndarray]], sums: torch.Tensor | None, with_outliers: np.ndarray, layout: Any,
              ratio: float, threshold: float | None, skipped: list[str]) -> Diagnosis:
    j = {name: np.concatenate(values) for name, values in keep.items()}
    outliers = j["outliers"]  # (n, S, N)
    n, states = outliers.shape[:2]
    if "m_max" not in j:  # statistics=False: none measured
        j.update(m_max=np.full((n, states), np.nan, np.float32), m_median=np.full((n, states), np.nan, np.float32),
                 m_dim=np.full((n, states), -1), m_per_dim=np.zeros((1, states, 0), np.float32))
    m_max = j["m_max"]  # (n, S)
    best = np.nan_to_num(m_max, nan=0.0).argmax(axis=0)
    entropy = j["entropy"].mean(axis=0) if "entropy" in j else None
    cls_share = token_share = None
    if "cls_share" in j:
        cls_share = j["cls_share"].mean(axis=0)
        token_share = outliers[:, :-1].sum(axis=2).mean(axis=0) / layout.num_tokens  # block i reads state i
    assert sums is not None
    return Diagnosis(
        images=n, grid=layout.grid, prefix_names=layout.prefix_names, ratio=ratio, threshold=threshold,
        norms=j["norms"], prefix_norms=j["prefix"], outliers=outliers, massive_max=m_max.max(axis=0),
        massive_median=j["m_median"].mean(axis=0), massive_dim=j["m_dim"][best, np.arange(m_max.shape[1])],
        massive_per_dim=j["m_per_dim"].max(axis=0), scores=sums.cpu().numpy(), images_with_outliers=with_outliers,
        entropy=entropy, max_entropy=R.max_entropy(layout.num_tokens) if entropy is not None else None,
        cls_share=cls_share, token_share=token_share, skipped=skipped)


# ---------------------------------------------------------------------- test-time registers on the live model
def check_neurons(loaded: LoadedModel, neurons: Sequence[tuple[int, int]]) -> None:
    """Every (block, unit) names a self-attention block's MLP hidden unit of this model."""
    cfg = loaded.config
    fc2 = loaded.model.get_submodule("blocks.0.mlp.fc2") if cfg.depth else None
    hidden = int(fc2.in_features) if isinstance(fc2, torch.nn.Linear) else 0
    for block, unit in neurons:
        if not 0 <= block < cfg.depth:
            raise ValueError(f"--test-time-registers {block}:{unit}: block {block} is not one of 0..{cfg.depth - 1}")
        if not 0 <= unit < hidden:
            raise ValueError(f"--test-time-registers {block}:{unit}: unit {unit} is not one of 0..{hidden - 1} "
                             "(the MLP's hidden units)")


def with_registers(loaded: LoadedModel, pixels: torch.Tensor, neurons: Sequence[tuple[int, int]], *,
                   mode: str = "zero", k: int = 1, register_value: R.RegisterValue = None,
                   capture: Sequence[str] = ()) -> dict[str, Any]:
    """One pass with k test-time registers fed by `neurons` (the paper's `activate_on_registers` at each block's
    `mlp.hook_post`): forward_intermediates' dict, whose layout names the registers."""
    check_neurons(loaded, neurons)
    model = loaded.model
    with model.test_time_registers(k):
        layout = model.layout((pixels.shape[2], pixels.shape[3]))
        registers = layout.registers[-k:]
        hooks = R.register_hooks(neurons, layout.num_patches, registers, mode, register_value)
        with model.hooks(hooks):
            return model.forward_intermediates(pixels, capture=tuple(capture))


# ---------------------------------------------------------------------- the app's live toggle
@dataclass(frozen=True)
class Shifted:
    """The live model beside itself with test-time registers (the Prediction view's right-hand side)."""

    neurons: tuple[tuple[int, int], ...]  # (block, unit) moved into the registers
    mode: str  # what the patches keep: zero / mean / unchanged
    k: int  # test-time registers added
    probs: np.ndarray  # (classes,) the shifted model's softmax (the original's is the result's)
    norms: np.ndarray  # (S, N) the shifted model's patch-token norms per state
    original_norms: np.ndarray  # (S, N) the original's


def registers_title(k: int) -> str:
    """The shifted side's title."""
    return f"with {k} test-time register{'s' * (k > 1)}"


def state_site(state: int) -> str:
    """The hook site of a state (0: the embedded input, i: the output of block i - 1)."""
    return "hook_embedded" if state == 0 else f"blocks.{state - 1}.hook_resid_post"


def cached_pass(inputs: Any, sites: Sequence[str], neurons: Sequence[tuple[int, int]] | None = None, *,
                mode: str = "zero", k: int = 1) -> tuple[torch.Tensor, dict[str, torch.Tensor], TokenLayout]:
    """One pass of the result's image (unmasked, all heads on, as `predict` runs it), with k test-time registers
    fed by `neurons` unless None: the logits, the values at `sites` (batch 1) and the pass's token layout (in a
    worker)."""
    from .forward import pixels_for

    loaded = inputs.loaded
    model = loaded.model
    pixels = pixels_for(inputs)
    size = (pixels.shape[2], pixels.shape[3])
    cache: dict[str, torch.Tensor] = {}

    def keep(x: torch.Tensor, hook: HookPoint) -> None:
        cache[hook.name] = x.detach()

    hooks = [(site, keep) for site in sites]
    with torch.inference_mode():
        if neurons is None:
            with model.hooks(hooks):
                logits = model(pixels)
            return logits, cache, model.layout(size)
        check_neurons(loaded, neurons)
        with model.test_time_registers(k):
            layout = model.layout(size)
            moving = R.register_hooks(neurons, layout.num_patches, layout.registers[-k:], mode, None)
            with model.hooks(list(moving) + hooks):
                logits = model(pixels)
        return logits, cache, layout


def shifted_attention(inputs: Any, neurons: Sequence[tuple[int, int]], *, mode: str, k: int, layer: int,
                      patch: tuple[int, int] | None) -> tuple[np.ndarray, np.ndarray]:
    """The query's attention to every patch in self-attention block `layer`, (heads, gh, gw) each, of the original
    and the shifted model (the query: the chosen patch, else the classifier's, in each pass's own layout)."""
    from ..analysis.attention import to_grid
    from .attention import query_for

    site = f"blocks.{layer}.attn.hook_pattern"
    sides = []
    for moved in (None, neurons):
        _, cache, layout = cached_pass(inputs, (site,), moved, mode=mode, k=k)
        rows = list(query_for(layout, inputs.loaded.config.pool, patch).rows)
        probs = cache[site][0].float()  # (heads, T, T)
        sides.append(to_grid(probs[:, rows].mean(dim=1), layout).numpy())
    return sides[0], sides[1]


def attention_beside(maps: tuple[np.ndarray, np.ndarray], view_mode: str, head: int, heads: tuple[int, ...] | None,
                     k: int, where: str, display: np.ndarray | None, grid: tuple[int, int],
                     opacity: float) -> MapsFigure:
    """The Attention view's maps (one head, the mean of heads, or the heads shown) of the original above or
    beside the shifted model's, on one scale: the original's outliers' attention moves to the registers."""
    chosen: list[tuple[np.ndarray, tuple[str, ...]]] = []
    for side in maps:  # (heads, gh, gw)
        if view_mode == "one head":
            h = min(head, len(side) - 1)
            chosen.append((side[h:h + 1], (f"head {h}",)))
        elif view_mode == "mean of heads":
            chosen.append((side.mean(0, keepdims=True), ("mean of heads",)))
        else:
            shown = [h for h in (heads or range(len(side))) if 0 <= h < len(side)] or list(range(len(side)))
            chosen.append((side[shown], tuple(f"head {h}" for h in shown)))
    names = ("original", registers_title(k))
    titles = tuple(f"{name} · {t}" for (_, ts), name in zip(chosen, names, strict=True) for t in ts)
    per_side = len(chosen[0][0])
    placed = "left, and right" if per_side == 1 else "first row, and second row"
    return MapsFigure(f"{where} · the original ({placed.split(', and ')[0]}) and {registers_title(k)} "
                      f"({placed.split(', and ')[1]}), one scale", np.concatenate([m for m, _ in chosen]), titles,
                      display, grid, opacity=opacity, columns=2 if per_side == 1 else per_side)


def norms_beside(s: Shifted, grid: tuple[int, int], display: np.ndarray | None) -> tuple[LinesFigure, MapsFigure]:
    """The Features view's token norms of both models: the largest and median patch norm per state, and the last
    state's patch norms as two maps on one scale (random weights: no outliers to move)."""
    states = s.norms.shape[0]
    x = np.arange(states, dtype=float) - 1
    series = {}
    for name, norms in (("original", s.original_norms), ("registers", s.norms)):
        series[f"largest, {name}"] = norms.max(axis=1)
        series[f"median, {name}"] = np.median(norms, axis=1)
    lines = LinesFigure(f"Patch-token norms, {registers_title(s.k)}", x, series, "after block", "L2 norm",
                        state_ticks(states))
    maps = np.stack([s.original_norms[-1].reshape(grid), s.norms[-1].reshape(grid)])
    figure = MapsFigure(f"after block {states - 2}, {len(s.neurons)} neurons moved", maps,
                        ("original", registers_title(s.k)), display, grid, colorbar_label="L2 norm", cmap="viridis",
                        opacity=0.75, columns=2)
    return lines, figure


def shifted_tokens(inputs: Any, neurons: Sequence[tuple[int, int]], *, mode: str, k: int, state: int
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, D) the patch tokens at `state` of the original and of the shifted model."""
    site = state_site(state)
    sides = []
    for moved in (None, neurons):
        _, cache, layout = cached_pass(inputs, (site,), moved, mode=mode, k=k)
        sides.append(cache[site][0, -layout.num_patches:].float())
    return sides[0], sides[1]


def pca_beside(inputs: Any, display: np.ndarray, tokens: tuple[torch.Tensor, torch.Tensor], grid: tuple[int, int],
               k: int, state: int, background: bool) -> ImagesFigure:
    """The image and the PCA colours of both models' patch tokens on one basis (DINOv2's picture): outliers,
    which take a colour of their own, fade with the registers."""
    from .features import _upsample, pca_colours

    pca = pca_colours(list(tokens), [grid, grid], background)
    size = display.shape[:2]
    where = "embedded input" if state == 0 else f"after block {state - 1}"
    share = ", ".join(f"{v:.0%}" for v in pca.explained)
    return ImagesFigure(f"First three principal components of the patch tokens ({where}), one basis for both "
                        f"models; {share} of the variance", (display, *(_upsample(c, size) for c in pca.colours)),
                        ("image", "original", registers_title(k)), grid)


def attention_entropy(inputs: Any) -> tuple[np.ndarray, float]:
    """The image's attention entropy per block and head (blocks, heads), nats, the mean over queries, from each
    block's `attn.hook_pattern`, and the uniform maximum log T."""
    depth = inputs.loaded.config.depth
    sites = [f"blocks.{i}.attn.hook_pattern" for i in range(depth)]
    _, cache, layout = cached_pass(inputs, sites)
    entropy = torch.stack([R.attention_entropy(cache[s])[0] for s in sites])  # (blocks, heads)
    return entropy.cpu().numpy(), R.max_entropy(layout.num_tokens)


def entropy_figure(entropy: np.ndarray, top: float) -> MapsFigure:
    """Blocks (rows) x heads (columns), nats, on 0..log T: uniform attention (a random model's) is the top of the
    bar, a collapsing head goes to 0 (Zhai et al. 2023)."""
    return MapsFigure("", entropy[None], ("attention entropy · rows: blocks, columns: heads",), None, entropy.shape,
                      colorbar_label=f"nats (uniform: log T = {top:.2f})", cmap="viridis", levels=(0.0, top))


def default_neurons(loaded: LoadedModel, top: int = 4) -> list[tuple[int, int]]:
    """The finder's `top` register neurons over the bundled sample images (the toggle's default)."""
    from ..paths import SAMPLES

    return [(b, u) for b, u, _ in diagnose(loaded, D.open_source(str(SAMPLES)), batch_size=8).neurons(top)]


def shifted(inputs: Any, neurons: Sequence[tuple[int, int]], *, mode: str = "zero", k: int = 1) -> Shifted:
    """The pass of the result's image (unmasked, all heads on, as `predict` runs it) with and without k test-time
    registers fed by `neurons` (in a worker)."""
    sites = [state_site(s) for s in range(inputs.loaded.config.depth + 1)]
    sides = []
    for moved in (None, neurons):
        logits, cache, layout = cached_pass(inputs, sites, moved, mode=mode, k=k)
        norms = np.stack([R.token_norms(cache[s][:, -layout.num_patches:])[0].cpu().numpy() for s in sites])
        sides.append((logits, norms))  # norms (S, N)
    return Shifted(tuple(neurons), mode, k, sides[1][0][0].float().softmax(-1).cpu().numpy(), sides[1][1],
                   sides[0][1])


def shifted_figures(result: Any, s: Shifted, top_k: int) -> tuple[BarsFigure, LinesFigure]:
    """The original's top classes as bars with the shifted model's probabilities as markers beside each bar, and
    the largest patch norm per state of both: registers take the outliers' norm away (a random model has none to
    take)."""
    from .prediction import prediction_figure, top_classes

    order = top_classes(result, top_k)
    base = prediction_figure(result, top_k)
    title = f"original · {s.k} register{'s' * (s.k > 1)}, {s.mode}"
    bars = BarsFigure(title, base.labels, base.values, xlabel="probability",
                      highlight=0, markers={"test-time registers": s.probs[order].astype(np.float64)},
                      value_range=(0.0, 1.0))
    states = s.norms.shape[0]
    x = np.arange(states, dtype=float) - 1
    lines = LinesFigure("Largest patch-token norm (random weights: no outliers to move)", x,
                        {"original": s.original_norms.max(axis=1), "test-time registers": s.norms.max(axis=1)},
                        "after block", "L2 norm", state_ticks(states))
    return bars, lines


def shift_text(result: Any, s: Shifted) -> str:
    """The change in the prediction, in a sentence."""
    label = result.inputs.loaded.label
    top, new = int(result.probs.argmax()), int(s.probs.argmax())
    moved = ", ".join(f"{b}:{u}" for b, u in s.neurons[:6]) + ("…" if len(s.neurons) > 6 else "") or "no neurons"
    text = (f"With {s.k} test-time register{'s' * (s.k > 1)} ({moved}): "
            f"'{label(top)}' {result.probs[top]:.1%} → {s.probs[top]:.1%}.")
    if new != top:
        text += f" The top class changed to '{label(new)}' ({s.probs[new]:.1%})."
    if not s.neurons:
        text += " The finder found no register neurons over the samples (no outliers; a random model has none)."
    return text


# ---------------------------------------------------------------------- figures (the command's and the app's)
def figures(d: Diagnosis, top: int = 20) -> dict[str, tuple[Figure, tuple[int, int]]]:
    """The diagnosis's figures by file name, each with its size: drawn by the app's compositions."""
    states = d.norms.shape[1]
    x = np.arange(states, dtype=float) - 1  # state_ticks' x: -1 the input, then block b's output at b
    median = np.median(d.norms, axis=(0, 2))
    out: dict[str, tuple[Figure, tuple[int, int]]] = {
        "outlier_share.png": (LinesFigure("High-norm patch tokens per state (an untrained model has none)", x,
                                          {"outlier share": d.outlier_share}, "after block", "share of patches",
                                          state_ticks(states), y_range=(0.0, 1.0)), (900, 500)),
        "norms.png": (LinesFigure("Patch-token norms per state (random weights: max near the median)", x,
                                  {"max": d.norms.max(axis=(0, 2)), "median": median,
                                   **{f"[{n.upper()}]": d.prefix_norms[:, :, i].mean(axis=0)
                                      for i, n in enumerate(d.prefix_names[:6])}},
                                  "after block", "L2 norm", state_ticks(states)), (900, 500)),
        "massive.png": (LinesFigure("Massive activations (Sun et al. 2024): largest |activation| vs the median "
                                    "(random weights: a few x)", x,
                                    {"largest": d.massive_max, "median": d.massive_median}, "after block",
                                    "|activation|", state_ticks(states)), (900, 500))}
    if d.positional_share is not None:
        out["positional.png"] = (LinesFigure("Positional artifact: patch-token variance the mean per grid cell "
                                             "explains (random weights: near 0)", x, {"share": d.positional_share},
                                             "after block", "share of variance", state_ticks(states),
                                             y_range=(0.0, 1.0)), (900, 500))
    neurons = d.neurons(top)
    if neurons:
        s = d.outlier_state or 0
        out["neurons.png"] = (BarsFigure(f"Register neurons: mean |activation| at the outliers of state "
                                         f"{d.detect_state} (they appear at state {s}; random: none)",
                                         tuple(f"block {b} unit {u}" for b, u, _ in neurons),
                                         np.asarray([v for *_, v in neurons]), "mean activation", "{:.2f}"),
                              (900, 600))
        best = d.neuron_scores().max(axis=1)  # (blocks,)
        out["neurons_by_block.png"] = (BarsFigure(f"The strongest unit of each block (the outliers appear after "
                                                  f"block {s - 1})" if s else "The strongest unit of each block",
                                                  tuple(f"block {b}" for b in range(len(best))), best,
                                                  "mean activation", "{:.2f}", highlight=int(best.argmax())),
                                       (900, 500))
    if d.outlier_state is not None:
        s = d.outlier_state
        out["outlier_map.png"] = (MapsFigure("", d.outlier_map[s:s + 1], (f"where the outliers sit (state {s})",),
                                             None, d.grid, colorbar_label="share of images"), (600, 600))
    if d.entropy is not None and d.max_entropy is not None:
        blocks = np.arange(d.entropy.shape[0], dtype=float)
        series = {f"head {h}": d.entropy[:, h] for h in range(min(d.entropy.shape[1], 16))}
        series["uniform (log T)"] = np.full(len(blocks), d.max_entropy)
        out["entropy.png"] = (LinesFigure("Attention entropy per head (nats; uniform attention: log T)", blocks,
                                          series, "block", "entropy (nats)"), (900, 500))
    return out


def sample_diagnosis(loaded: LoadedModel) -> tuple[Figure, Figure]:
    """The Features view's figures: the diagnosis over the bundled sample images (a dataset's is the command's):
    the norms per state, then the register neurons, or, where no state has outliers, their share (zero)."""
    from ..paths import SAMPLES

    d = diagnose(loaded, D.open_source(str(SAMPLES)), batch_size=8)
    drawn = figures(d)
    second = drawn["neurons.png"] if "neurons.png" in drawn else drawn["outlier_share.png"]
    return drawn["norms.png"][0], second[0]
