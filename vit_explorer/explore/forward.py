"""The forward pass every view shares, run in a worker: one call that computes what the views on
screen draw (`Needs`) and nothing more.

Attention costs layers x heads x tokens^2: only the blocks whose maps a view draws keep their
(1, heads, T, T) probabilities; rollout keeps each block's attention fused over heads (1, T, T);
the mean attention distance and the query's per-block maps are reduced as the blocks run. Other
blocks use the fused attention kernel. On a GPU the kept maps are stored in half precision.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch
from PIL import Image

from ..analysis.attention import attention_distance, fuse_heads
from ..analysis.tokens import cls_dist_similarity, patch_cls_similarity
from ..checkpoints import LoadedModel
from ..checkpoints.memory import check_run
from ..models import TokenLayout
from ..models.hooks import HookFn


@dataclass(frozen=True)
class Needs:
    """What the views draw from a forward pass.

    maps: the blocks whose full attention maps are kept (None: every block);
    fusion: keep every block's attention fused over heads this way, for rollout (None: no rollout);
    distance: measure each block's mean attention distance per head;
    query_rows: keep each block's attention of these query rows (averaged over them), per head;
    tokens: the token states kept whole, by index (None: all). State 0 is the embedded input, state i the output
        of block i - 1 (blocks are counted from 0, as everywhere in the app).
    """

    maps: frozenset[int] | None = frozenset()
    fusion: str | None = None
    distance: bool = False
    query_rows: tuple[int, ...] = ()
    tokens: frozenset[int] | None = frozenset()

    def covered_by(self, other: Needs) -> bool:
        """Whether a pass computed for `other` holds everything these needs ask for."""
        maps_ok = other.maps is None or (self.maps is not None and self.maps <= other.maps)
        tokens_ok = other.tokens is None or (self.tokens is not None and self.tokens <= other.tokens)
        rows_ok = not self.query_rows or self.query_rows == other.query_rows
        return maps_ok and tokens_ok and rows_ok and (self.fusion is None or self.fusion == other.fusion) and (
            not self.distance or other.distance)

    def union(self, other: Needs) -> Needs:
        """What two views need together (a rollout fusion or query rows of both: the first's)."""
        maps = None if self.maps is None or other.maps is None else self.maps | other.maps
        tokens = None if self.tokens is None or other.tokens is None else self.tokens | other.tokens
        return Needs(maps, self.fusion or other.fusion, self.distance or other.distance,
                     self.query_rows or other.query_rows, tokens)

    def explicit_blocks(self, depth: int) -> frozenset[int]:
        """The blocks that must form their attention probabilities (the rest use the fused kernel)."""
        if self.maps is None or self.fusion is not None or self.distance or self.query_rows:
            return frozenset(range(depth))
        return frozenset(b for b in self.maps if b < depth)


EVERYTHING = Needs(maps=None, fusion="mean", distance=True, tokens=None)
STATE_AXIS = "after block (input: the embedded tokens)"  # the x axis of curves over the token states


@dataclass(frozen=True)
class Inputs:
    """Everything that decides a forward pass (a snapshot: workers never read the live session)."""

    loaded: LoadedModel
    image: Image.Image
    size: tuple[int, int]  # (H, W) fed to the model
    mask: np.ndarray  # (gh, gw) bool, True = [MASK]
    head_mask: np.ndarray  # (layers, heads) float, 1 keep / 0 drop
    model_id: int = 0  # changes whenever the model or its weights change
    image_id: int = 0  # changes whenever the image changes
    needs: Needs = EVERYTHING  # what to compute beyond the prediction
    hooks: tuple[tuple[str, HookFn], ...] = ()  # per-pass edits at named hook sites (a feature steered), in order

    @classmethod
    def unmasked(cls, loaded: LoadedModel, image: Image.Image, size: tuple[int, int], needs: Needs = EVERYTHING
                 ) -> Inputs:
        """The image at `size` with no patch masked and every head on (the size checked against the model)."""
        cfg = loaded.config
        grid = loaded.model.check_image_size(*size)
        return cls(loaded, image, (int(size[0]), int(size[1])), np.zeros(grid, bool),
                   np.ones((cfg.num_blocks, cfg.num_heads), np.float32), needs=needs)

    @property
    def masked(self) -> bool:
        return bool(self.mask.any()) or bool((self.head_mask < 1).any()) or bool(self.hooks)

    def same_pass(self, other: Inputs) -> bool:
        """Whether both feed the model the same thing (the needs aside)."""
        return (self.loaded is other.loaded and self.model_id == other.model_id and self.image_id == other.image_id
                and tuple(self.size) == tuple(other.size) and np.array_equal(self.mask, other.mask)
                and np.array_equal(self.head_mask, other.head_mask) and self.hooks == other.hooks)


@dataclass
class ForwardResult:
    inputs: Inputs
    layout: TokenLayout
    display: np.ndarray  # (H, W, 3) uint8: the image as the model sees it, de-normalised
    logits: torch.Tensor  # (classes,) on the CPU (DeiT: the average of both heads; no classifier: the embedding the
    # model returns, CLIP's projection or the pooled features)
    probs: np.ndarray  # (classes,) softmax of the logits
    head_probs: dict[str, np.ndarray]  # per head ('cls', 'dist' or 'gap')
    baseline_probs: np.ndarray | None  # without any mask or head mask (None when nothing is masked)
    maps: dict[int, torch.Tensor]  # block -> (1, heads, T, T) attention probabilities, for the blocks asked for
    fused: list[torch.Tensor] | None  # per block (1, T, T) attention fused over heads (needs.fusion), for rollout
    distance: np.ndarray | None  # (blocks, heads) mean attention distance in pixels
    query_maps: list[torch.Tensor] | None  # per block (1, heads, T): attention of needs.query_rows (their mean)
    class_attentions: list[torch.Tensor]  # CaiT: per class-attention block (1, heads, 1, 1 + N)
    with_pos: torch.Tensor  # (1, T, D) tokens after adding the position embedding, on the CPU
    norms: np.ndarray  # (depth + 1, T) each token's L2 norm: the embedded input, then after each block
    tokens: dict[int, torch.Tensor]  # state index -> (1, T, D) token states kept (needs.tokens), on the CPU
    features: np.ndarray  # (D,) what the head reads: the pooled (final-normed) features (DINOv2 classifiers: 2D)
    cls_dist: np.ndarray | None = None  # DeiT: cosine of [CLS] and distillation token, input then each block
    cls_patch: np.ndarray | None = None  # mean cosine of [CLS] with the patch tokens, input then each block
    seconds: float = 0.0
    pixels: torch.Tensor | None = None  # (1, 3, H, W) the preprocessed image, on the model's device

    @property
    def num_classes(self) -> int:
        return int(self.probs.shape[0])

    def _repr_png_(self) -> bytes:
        """Inline in Jupyter: the image as the model saw it and the top-5 prediction."""
        from .figures import ImagesFigure
        from .notebook import png
        from .prediction import prediction_figure

        image = ImagesFigure("", (self.display,), ("the image as the model sees it",), self.layout.grid)
        return png(image, prediction_figure(self, min(5, self.num_classes)))

    @property
    def depth(self) -> int:
        """Number of self-attention blocks."""
        return self.inputs.loaded.config.depth


def check_size(loaded: LoadedModel, size: tuple[int, int], needs: Needs = EVERYTHING) -> None:
    """Refuse (BudgetError, a ValueError) an input size whose forward pass would exceed the budget of one
    interactive pass (patches, multiply-adds, memory free), before anything runs; ConfigError (a ValueError)
    for a size that is not a multiple of the patch size."""
    h, w = int(size[0]), int(size[1])
    loaded.model.check_image_size(h, w)
    check_run(loaded.config, loaded.device, loaded.source or "the model", (h, w), captures=needs.maps is None,
              loaded=True)


def check_inputs(inputs: Inputs) -> None:
    """TypeError or ValueError naming the argument of `inputs` that no forward pass can take: an image that is
    not a PIL image, a mask or head mask of the wrong shape or with values other than 0 and 1 (a head mask: a
    share from 0 to 1), query rows outside the tokens; then the budget of the input size (`check_size`)."""
    if not isinstance(inputs.image, Image.Image):
        raise TypeError(f"image must be a PIL.Image.Image, got {type(inputs.image).__name__}")
    cfg, size = inputs.loaded.config, inputs.size
    if len(size) != 2 or not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in size):
        raise TypeError(f"size must be (H, W) in whole pixels, got {size!r}")
    grid = inputs.loaded.model.check_image_size(int(size[0]), int(size[1]))
    _check_array("mask", inputs.mask, grid, "a bool per patch, True = [MASK]")
    if inputs.mask.dtype != np.bool_ and not np.isin(inputs.mask, (0, 1)).all():
        raise ValueError("mask must hold only True/False (or 1/0) per patch, got other values")
    heads = (cfg.num_blocks, cfg.num_heads)
    _check_array("head_mask", inputs.head_mask, heads, "1 keeps a head, 0 drops it")
    values = inputs.head_mask.astype(np.float64)
    if not (np.isfinite(values).all() and (values >= 0).all() and (values <= 1).all()):
        raise ValueError("head_mask values must be finite and from 0 (drop the head) to 1 (keep it), got "
                         f"{values[~((values >= 0) & (values <= 1))][:3].tolist()}")
    tokens = inputs.loaded.model.layout((int(size[0]), int(size[1]))).num_tokens
    if any(not 0 <= r < tokens for r in inputs.needs.query_rows):
        raise ValueError(f"needs.query_rows must be token indices from 0 to {tokens - 1}, got "
                         f"{list(inputs.needs.query_rows)}")
    check_size(inputs.loaded, size, inputs.needs)


def _check_array(name: str, value: object, shape: tuple[int, int], meaning: str) -> None:
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{name} must be a numpy array ({meaning}), got {type(value).__name__}")
    if value.shape != tuple(shape):
        raise ValueError(f"{name} has shape {value.shape}; this model and input size take {tuple(shape)} ({meaning})")
    if not (value.dtype == np.bool_ or np.issubdtype(value.dtype, np.number)):
        raise TypeError(f"{name} must hold numbers ({meaning}), got dtype {value.dtype}")


def nonfinite_outputs(logits: torch.Tensor, where: str) -> str | None:
    """A warning when a forward pass gave NaN or infinite outputs (logits, or pooled features without a
    classifier), as `nonfinite_warning` gives one for the weights; None when all are finite."""
    finite = torch.isfinite(logits)
    if bool(finite.all()):
        return None
    nan = int(torch.isnan(logits).sum())
    return (f"{where}: the forward pass gave NaN or infinite outputs ({nan:,} NaN, {int((~finite).sum()) - nan:,} "
            f"infinite of {logits.numel():,}), so its predictions and pictures cannot be trusted; the weights or the "
            "config make values overflow (check them, or try another input size)")


def pixels_for(inputs: Inputs) -> torch.Tensor:
    """The image preprocessed as the source does it, at the chosen size: (1, 3, H, W)."""
    pre = inputs.loaded.preprocessing.with_size(inputs.size)
    return pre(inputs.image).to(inputs.loaded.device)


@dataclass
class _Reductions:
    """What the attention hook keeps of each block's probabilities, as the blocks run."""

    needs: Needs
    layout: TokenLayout
    store: torch.dtype  # float16 on a GPU, float32 on the CPU
    maps: dict[int, torch.Tensor] = field(default_factory=dict)
    fused: list[torch.Tensor] = field(default_factory=list)
    distance: list[torch.Tensor] = field(default_factory=list)
    query_maps: list[torch.Tensor] = field(default_factory=list)

    def at(self, block: int) -> HookFn:
        """The hook on block's attn.hook_pattern that keeps what the views need of it."""
        return lambda probs, site: self(block, probs)

    def __call__(self, block: int, probs: torch.Tensor) -> None:  # probs: (1, heads, T, T)
        needs = self.needs
        if needs.maps is None or block in needs.maps:
            self.maps[block] = probs.to(self.store)
        if needs.fusion is not None:
            self.fused.append(fuse_heads(probs, needs.fusion).to(self.store))  # (1, T, T)
        if needs.distance:
            self.distance.append(attention_distance(probs, self.layout))  # (heads,)
        if needs.query_rows:
            self.query_maps.append(probs[:, :, list(needs.query_rows)].mean(dim=2).to(self.store))  # (1, heads, T)


def run_forward(inputs: Inputs, baseline: np.ndarray | None = None, previous: ForwardResult | None = None
                ) -> ForwardResult:
    """Run the model with the masks, computing what `inputs.needs` asks for; also the unmasked
    baseline if something is masked and no baseline is given. Inputs no pass can take, or whose pass would
    exceed the budget, are refused first (`check_inputs`). previous: an earlier result (the session's last), whose
    preprocessed image is reused when it is of the same image object at the same size by the same model (a mask
    click or a head toggle changes neither)."""
    start = time.perf_counter()
    check_inputs(inputs)
    loaded, needs = inputs.loaded, inputs.needs
    model = loaded.model
    reused = previous if previous is not None and previous.inputs.image is inputs.image and (
        previous.inputs.loaded is loaded and previous.inputs.model_id == inputs.model_id
        and tuple(previous.inputs.size) == tuple(inputs.size)) else None
    pixels = reused.pixels if reused is not None and reused.pixels is not None else pixels_for(inputs)  # (1, 3, H, W)
    device = pixels.device
    mask = torch.from_numpy(inputs.mask.reshape(-1)).to(device) if inputs.mask.any() else None
    head_mask = None
    if (inputs.head_mask < 1).any():
        head_mask = torch.from_numpy(inputs.head_mask.astype(np.float32)).to(device)
    layout = model.layout((int(pixels.shape[-2]), int(pixels.shape[-1])))
    reduce = _Reductions(needs, layout, torch.float16 if device.type == "cuda" else torch.float32)
    capture = ["hidden_states", "with_pos", "embedded", "pre_logits"] + (
        ["class_attentions"] if loaded.config.class_attn_depth else [])
    explicit = needs.explicit_blocks(loaded.config.depth)
    hooks = list(inputs.hooks) + [(f"blocks.{i}.attn.hook_pattern", reduce.at(i)) for i in explicit]
    with torch.inference_mode():
        with model.hooks(hooks):
            out = model.forward_intermediates(pixels, mask=mask, head_mask=head_mask, capture=capture)
        if inputs.masked and baseline is None:
            baseline = model(pixels)[0].float().softmax(-1).cpu().numpy()
    logits = out["logits"][0].float().cpu()
    states = [out["embedded"]] + out["hidden_states"]  # (1, T, D) each
    kept = range(len(states)) if needs.tokens is None else sorted(i for i in needs.tokens if i < len(states))
    cls_dist = cls_patch = None
    if "dist" in layout.prefix_names:  # DeiT: how alike [CLS] and the distillation token become
        cls_dist = cls_dist_similarity(states, layout)[0].cpu().numpy()
    if "cls" in layout.prefix_names:  # every state at once: (states, gh, gw) -> (states,)
        cls_patch = patch_cls_similarity(torch.cat(states), layout).flatten(1).mean(1).double().cpu().numpy()
    return ForwardResult(
        inputs=inputs, layout=layout, logits=logits, pixels=pixels,
        display=reused.display if reused is not None and reused.pixels is pixels else loaded.preprocessing.to_image(
            pixels),
        probs=logits.softmax(-1).numpy(),
        head_probs={k: v[0].float().softmax(-1).cpu().numpy() for k, v in out["head_logits"].items()},
        baseline_probs=baseline if inputs.masked else None,
        maps={block: m.cpu() for block, m in reduce.maps.items()},
        fused=[f.cpu() for f in reduce.fused] if needs.fusion is not None else None,
        distance=torch.stack(reduce.distance).cpu().numpy() if needs.distance else None,
        query_maps=[q.cpu() for q in reduce.query_maps] if needs.query_rows else None,
        class_attentions=[a.float().cpu() for a in out.get("class_attentions", [])],
        with_pos=out["with_pos"].float().cpu(),
        norms=torch.stack([s[0].float().norm(dim=-1) for s in states]).cpu().numpy(),
        tokens={i: states[i].float().cpu() for i in kept}, features=out["pre_logits"][0].float().cpu().numpy(),
        cls_dist=cls_dist, cls_patch=cls_patch,
        seconds=time.perf_counter() - start,
    )
