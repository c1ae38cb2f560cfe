"""Why the model decides: class-specific relevance maps for every family, each with its faithfulness measured,
for the app's Explain view, `vit-explorer explain` and the report alike.

`METHODS` is the one table of methods (like position.SCHEMES): each record holds its name, its function, what it
needs, for a model the reason it does not apply (None where it does), and its flags (in the default selection of
the app and the CLI, in the report); a new method is one record and its function here. A `Target` chooses what
is explained: a class (default the top one) of a head (DeiT: the class head, the distillation head or their
average), or, for a model without a classifier, the cosine similarity of its pooled embedding to a reference
embedding (another image, or by default the same image unmasked). The [MASK] patches and heads switched off of
the `Inputs` apply to every pass, as everywhere; work runs on the model's device and reports to, and is
cancelled through, a `Job`.
"""

from __future__ import annotations

import copy
import math
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from ..analysis import attention as attn
from ..analysis import attnlrp, lrp
from ..analysis import faithfulness as faith
from ..analysis import relevance as rel
from ..checkpoints import LoadedModel
from ..jobs import Job
from ..models import TokenLayout, VisionTransformer, ViTConfig, pooling
from ..models.blocks import Block
from ..models.hooks import HookPoint
from ..text import quoted
from .attention import query_for
from .figures import LinesFigure, MapsFigure, json_number
from .forward import Inputs, check_inputs, pixels_for

BASELINES = ("zero", "mask", "blur")
IG_BASELINES = ("zero", "blur", "mask", "noise")  # integrated gradients' start: see Options
HEADS = ("average", "cls", "dist")  # DeiT distilled: the mean of both heads (what it predicts), or one of them
BATCH = 10  # perturbed images per forward pass
ROWS = 64  # rows per forward pass when the passes of a batch of images are stacked


# ---------------------------------------------------------------------------- the methods' records
def has_classifier(config: ViTConfig) -> bool:
    """A classifier head (its outputs are class logits), not pooled features or a projection to a joint space."""
    return bool(config.num_classes) and not config.proj_dim


def _lrp_refusal(config: ViTConfig) -> str | None:
    if config.class_attn_depth or config.talking_heads:
        return ("CaiT's class attention and talking heads have no LRP rules in Chefer et al. 2021; use "
                "attention-gradient, which covers them")
    return pooling.POOLS[config.pool].lrp


@dataclass(frozen=True)
class Method:
    name: str
    compute: Callable[[Scorer, ViTConfig, Job], torch.Tensor]  # the (gh, gw) map, its own raw values
    label: str
    short: str  # in a small map's title
    needs: str  # what it needs from the model, in words
    reference: str  # the paper or library whose definition it follows
    refusal: Callable[[ViTConfig], str | None] = field(default=lambda config: None)
    gradient: bool = True  # takes the target's gradient
    default: bool = True  # in the default selection (the Explain view's, `vit-explorer explain`'s)
    report: bool = False  # drawn in `vit-explorer inspect`'s report (one pass each, no faithfulness)
    conserves: bool = False  # an LRP whose map sums to the target less what biases absorb: reported beside it
    pixel_level: bool = False  # computes (H, W) pixel attributions (summed over channels), summed per patch
    baseline: bool = False  # not an explanation: the random row every ranking is compared with

    def reason(self, config: ViTConfig) -> str | None:
        """Why this method does not apply to a model of this config (None: it does)."""
        return self.refusal(config)


def check_method(name: str, config: ViTConfig) -> Method:
    """The method by name; ValueError naming the choices, or saying why it does not apply to this model."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; choose from {', '.join(METHODS)}")
    reason = METHODS[name].reason(config)
    if reason is not None:
        raise ValueError(f"method {name!r} does not apply to this model: {reason}")
    return METHODS[name]


def supported(config: ViTConfig, *, default: bool = False) -> list[str]:
    """The methods that apply to a model of this config (`default`: only those of the default selection)."""
    return [name for name, m in METHODS.items() if m.reason(config) is None and (m.default or not default)]


# ---------------------------------------------------------------------------- targets
@dataclass(frozen=True)
class Target:
    """What to explain. index: a class index or label (None: the top class); head: for DeiT distilled
    'average', 'cls' or 'dist'; reference: for a model without a classifier, the image whose embedding the
    similarity is taken to (None: the same image without its masks)."""

    index: int | str | None = None
    head: str = "average"
    reference: Image.Image | None = None


@dataclass(frozen=True)
class Resolved:
    """A target made concrete for one model and image."""

    kind: str  # 'class' or 'similarity'
    index: int | None  # the class (None for a similarity)
    label: str
    head: str  # the head whose output is explained ('cls', 'dist', 'average', 'gap', 'map'; 'embedding')
    title: str  # says what is explained, for every figure's title
    reference: torch.Tensor | None = None  # (D,) unit-length reference embedding of a similarity; a batch: (B, D)
    indices: tuple[int, ...] = ()  # a batch of images (`batch_target`): each image's class (): `index` for every row

    def row(self, i: int) -> Resolved:
        """Image i's own target of a batch's (a single target: itself)."""
        if self.reference is not None and self.reference.ndim == 2:
            return replace(self, reference=self.reference[i])
        return replace(self, index=self.indices[i], indices=()) if self.indices else self

    def rows(self, images: Sequence[int]) -> Resolved:
        """The target of passes whose row r is of image images[r] (a single target: itself)."""
        if self.reference is not None and self.reference.ndim == 2:
            return replace(self, reference=self.reference[list(images)])
        return replace(self, indices=tuple(self.indices[i] for i in images)) if self.indices else self


def batch_target(targets: Sequence[Resolved]) -> Resolved:
    """One target for a batch of images, each explaining its own (all of one kind and head): a pass's rows are
    image-major (each image's rows together), and each row is scored for its image's class or reference."""
    first = targets[0]
    if any((t.kind, t.head) != (first.kind, first.head) for t in targets):
        raise ValueError("a batch's targets must all be of one kind and head")
    if first.kind == "similarity":
        references = [t.reference for t in targets if t.reference is not None]
        assert len(references) == len(targets)
        return replace(first, title="each image's similarity", reference=torch.stack(references))
    return replace(first, index=None, label="", title="each image's class",
                   indices=tuple(int(t.index) for t in targets if t.index is not None))


def _head_outputs(out: dict[str, Any], head: str) -> torch.Tensor:
    if head in ("cls", "dist") and len(out["head_logits"]) > 1:
        return out["head_logits"][head]
    return out["logits"]


def _forward(model: VisionTransformer, pixels: torch.Tensor, mask: torch.Tensor | None,
             head_mask: torch.Tensor | None, **kwargs: Any) -> dict[str, Any]:
    return model.forward_intermediates(pixels, mask=mask, head_mask=head_mask, **kwargs)


def resolve_target(loaded: LoadedModel, target: Target, run: Callable[[], dict[str, Any]],
                   unmasked: Callable[[], torch.Tensor]) -> Resolved:
    """The class (by index or label; default the top one of the chosen head: `run()` gives the model's outputs on
    the inputs) or the similarity's reference (`unmasked()`: the embedding of the same image without masks)."""
    cfg = loaded.config
    distilled = cfg.distilled and cfg.dist_head
    if target.head not in HEADS:
        raise ValueError(f"head must be one of {HEADS}, got {target.head!r}")
    if target.head != "average" and not distilled:
        raise ValueError(f"head {target.head!r}: this model has one head; only DeiT distilled has 'cls' and 'dist'")
    if not has_classifier(cfg):
        if target.index is not None:
            raise ValueError("this model has no classifier (its outputs are embeddings): no class to choose; its "
                             "target is the similarity to a reference embedding")
        if target.reference is not None:
            ref, named = embed_image(loaded, target.reference), "the reference image"
        else:
            ref, named = unmasked(), "the same image unmasked"
        return Resolved("similarity", None, f"similarity to {named}", "embedding",
                        f"cosine similarity of the pooled embedding to {named}", F.normalize(ref.float(), dim=-1))
    head = target.head if distilled else cfg.pool
    index = target.index
    if index is None:
        index = int(_head_outputs(run(), head)[0].argmax())
    elif isinstance(index, str):
        if re.fullmatch(r"-?[0-9]{1,9}", index):  # ASCII digits only: int() takes '²' and 5,000 digits badly
            index = int(index)
        elif index in loaded.labels:
            index = loaded.labels.index(index)
        else:
            raise ValueError(f"target {quoted(index)} is neither a class index nor one of this model's labels "
                             f"(classes 0 to {cfg.num_classes - 1}, e.g. "
                             f"{', '.join(quoted(n) for n in loaded.labels[:3])})")
    if not 0 <= index < cfg.num_classes:
        raise ValueError(f"target class {index} out of range: this model has classes 0 to {cfg.num_classes - 1}")
    label = loaded.label(index)
    where = {"average": "average of both heads", "cls": "class head", "dist": "distillation head"}.get(head, "")
    title = f"class {index} {quoted(label)}" + (f" ({where})" if distilled else "")  # a label from a file: bounded
    return Resolved("class", index, label, head, title)


def embed_image(loaded: LoadedModel, image: Image.Image) -> torch.Tensor:
    """(D,) the model's output for an image (an embedding model's: what a reference image is compared by)."""
    pixels = loaded.preprocess(image).to(loaded.device)
    with torch.inference_mode():
        return loaded.model(pixels)[0].float()


def _per_row(resolved: Resolved, values: torch.Tensor) -> torch.Tensor:
    """(k,) each row's entry of (k, C) values: the target's class, or a batch's image's class for its rows (a pass's
    rows image-major)."""
    if not resolved.indices:
        return values[:, resolved.index]
    per_image = torch.tensor(resolved.indices, device=values.device)
    classes = per_image.repeat_interleave(values.shape[0] // len(per_image))  # (k,)
    return values.gather(1, classes[:, None])[:, 0]


def _similarity(embedding: torch.Tensor, resolved: Resolved) -> torch.Tensor:
    """(k,) each row of (k, E) (unit-length) embeddings dotted with its reference (a batch's: its image's)."""
    reference = resolved.reference
    assert reference is not None
    reference = reference.to(embedding)
    if reference.ndim == 1:
        return embedding @ reference
    return (embedding * reference.repeat_interleave(embedding.shape[0] // reference.shape[0], dim=0)).sum(dim=-1)


def target_logit(out: dict[str, Any], resolved: Resolved) -> torch.Tensor:
    """(k,) what the gradient methods differentiate: the class's logit, or the similarity."""
    if resolved.kind == "similarity":
        return _similarity(F.normalize(rel.widened(out["logits"]), dim=-1), resolved)
    return _per_row(resolved, rel.widened(_head_outputs(out, resolved.head)))


def target_score(out: dict[str, Any], resolved: Resolved) -> torch.Tensor:
    """(k,) what perturbation measures: the class's probability (softmax of the head), or the similarity."""
    if resolved.kind == "similarity":
        return target_logit(out, resolved)
    return _per_row(resolved, rel.widened(_head_outputs(out, resolved.head)).softmax(dim=-1))


# ---------------------------------------------------------------------------- removal of patches
def blur(pixels: torch.Tensor, sigma: float) -> torch.Tensor:
    """A Gaussian blur (reflected borders) of (B, C, H, W), sigma in pixels."""
    radius = max(1, int(math.ceil(3 * sigma)))
    x = torch.arange(-radius, radius + 1, dtype=pixels.dtype, device=pixels.device)
    kernel = torch.exp(-x**2 / (2 * sigma**2))
    kernel = kernel / kernel.sum()
    c = pixels.shape[1]
    pad = min(radius, pixels.shape[-1] - 1, pixels.shape[-2] - 1)
    out = F.pad(pixels, (pad, pad, pad, pad), mode="reflect") if pad else pixels
    out = F.pad(out, (radius - pad,) * 4, mode="replicate") if radius > pad else out
    out = F.conv2d(out, kernel.view(1, 1, 1, -1).expand(c, 1, 1, -1), groups=c)
    return F.conv2d(out, kernel.view(1, 1, -1, 1).expand(c, 1, -1, 1), groups=c)


@dataclass(frozen=True)
class Options:
    """What a user sets of the methods; the defaults are the methods as they always were.

    ig_steps, ig_baseline: integrated gradients' points (Gauss-Legendre, captum's) and its start: 'zero' (0 in the
    normalised input), 'blur' (the image blurred as the faithfulness baseline blurs it), 'noise' (uniform noise over
    the input's range, black to white, seeded) or 'mask' (every patch embedding the [MASK] token: the path runs in the
    patch embeddings, so its map is per patch only). gradcam_block: the block whose normed input Grad-CAM reads
    (None: the last). smoothgrad: SmoothGrad's samples (Smilkov et al. 2017) over every gradient method (0: off),
    each the map of the image plus Gaussian noise of standard deviation smoothgrad_sigma times the input's range
    (max - min), their mean the map. occlusion_window / occlusion_stride: (height, width) in pixels, captum's
    Occlusion's sliding_window_shapes and strides (None: one patch, window = stride). pixels: the pixel-level maps
    (summed over the channels) of the methods that have them, beside the per-patch ones. seed: of every random
    draw (the noise baseline, SmoothGrad, the random map). attnlrp_gamma: AttnLRP's and CP-LRP's gamma rule on
    every linear layer type the rule covers (attnlrp.GAMMA_LAYERS; 0: LRP-0, the default)."""

    ig_steps: int = 50
    ig_baseline: str = "zero"
    gradcam_block: int | None = None
    smoothgrad: int = 0
    smoothgrad_sigma: float = 0.15
    occlusion_window: tuple[int, int] | None = None
    occlusion_stride: tuple[int, int] | None = None
    pixels: bool = False
    seed: int = 0
    attnlrp_gamma: float = 0.0

    def check(self, config: ViTConfig, size: tuple[int, int], baseline: str = "zero") -> None:
        """ValueError naming the CLI flag for a setting this model and input size (H, W) cannot take."""
        if not 1 <= self.ig_steps <= 10_000:
            raise ValueError(f"argument --ig-steps: between 1 and 10000 points, got {self.ig_steps}")
        if self.ig_baseline not in IG_BASELINES:
            raise ValueError(f"argument --ig-baseline: one of {', '.join(IG_BASELINES)}, got {self.ig_baseline!r}")
        blocks = config.depth  # the self-attention blocks (CaiT: its class blocks come after them)
        if self.gradcam_block is not None and not 0 <= self.gradcam_block < blocks:
            raise ValueError(f"argument --gradcam-block: block {self.gradcam_block} does not exist; this model has "
                             f"blocks 0 to {blocks - 1}")
        if not (math.isfinite(self.attnlrp_gamma) and self.attnlrp_gamma >= 0):
            raise ValueError(f"AttnLRP's gamma: a number of at least 0 (0: LRP-0), got {self.attnlrp_gamma}")
        if not 0 <= self.smoothgrad <= 1000:
            raise ValueError(f"argument --smoothgrad: between 0 (off) and 1000 samples, got {self.smoothgrad}")
        if not (math.isfinite(self.smoothgrad_sigma) and 0 <= self.smoothgrad_sigma <= 10):
            raise ValueError("argument --smoothgrad-sigma: a share of the input's range between 0 and 10, got "
                             f"{self.smoothgrad_sigma}")
        window = self.occlusion_window or (config.patch_size, config.patch_size)
        stride = self.occlusion_stride or window
        for flag, pair in (("--occlusion-window", window), ("--occlusion-stride", stride)):
            if len(pair) != 2 or any(v < 1 for v in pair):
                raise ValueError(f"argument {flag}: two whole numbers of pixels (height, width), at least 1; got "
                                 f"{pair}")
        if window[0] > size[0] or window[1] > size[1]:
            raise ValueError(f"argument --occlusion-window: {window[0]}x{window[1]} pixels exceeds the input, "
                             f"{size[0]}x{size[1]}")
        if stride[0] > window[0] or stride[1] > window[1]:
            raise ValueError(f"argument --occlusion-stride: {stride[0]}x{stride[1]} is larger than the window, "
                             f"{window[0]}x{window[1]}: pixels between the windows would never be occluded")
        p = config.patch_size
        if baseline == "mask" and any(v % p for v in (*window, *stride)):
            raise ValueError(f"argument --occlusion-window / --occlusion-stride: the [MASK] baseline replaces whole "
                             f"patches, so window and stride must be multiples of the patch size, {p} pixels; "
                             "choose --baseline zero or blur for other windows")


@dataclass
class Scorer:
    """One image's passes with patches removed by a baseline: 'zero' sets their pixels to 0 in the normalised
    input, 'blur' to a Gaussian blur of the image (sigma = half a patch), 'mask' puts the [MASK] token in
    their place. The user's [MASK] patches and head mask apply to every pass. A batch of images (B rows of pixels,
    a `batch_target`) makes each pass's rows image-major; image i's random draws are seeded with seeds[i]."""

    model: VisionTransformer
    pixels: torch.Tensor  # (B, 3, H, W): one image, or a batch
    layout: TokenLayout
    mask: torch.Tensor | None  # (N,) bool: the user's [MASK] patches
    head_mask: torch.Tensor | None
    resolved: Resolved
    baseline: str = "zero"
    options: Options = field(default_factory=Options)
    bounds: tuple[torch.Tensor, torch.Tensor] | None = None  # (3,) each: black and white in the normalised input
    seeds: tuple[int, ...] = ()  # each image's seed (): options.seed for every one

    def __post_init__(self) -> None:
        if self.baseline not in BASELINES:
            raise ValueError(f"baseline must be one of {BASELINES}, got {self.baseline!r}")
        self.filler = blur(self.pixels, self.layout.patch_size / 2) if self.baseline == "blur" else \
            torch.zeros_like(self.pixels)

    @property
    def images(self) -> int:
        return int(self.pixels.shape[0])

    def seed(self, i: int = 0) -> int:
        """Image i's seed of its random draws (the noise baseline, SmoothGrad, ROAD, the random map)."""
        return self.seeds[i] if self.seeds else self.options.seed

    def row(self, i: int) -> Scorer:
        """Image i of a batch, alone (one image: itself)."""
        if self.images == 1 and not self.resolved.indices and not self.seeds:
            return self
        return replace(self, pixels=self.pixels[i:i + 1], resolved=self.resolved.row(i), seeds=(self.seed(i),))

    def batch(self, removed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """removed (k, N) bool -> the (B k, 3, H, W) pixels and (B k, N) [MASK] mask those passes take (each image
        with every removal, image-major)."""
        k, b = removed.shape[0], self.images
        user = self.mask if self.mask is not None else torch.zeros_like(removed[0])
        if self.baseline == "mask":
            return self.pixels.repeat_interleave(k, dim=0), (removed | user).repeat(b, 1)
        p = self.layout.patch_size
        grid = removed.reshape(1, k, 1, *self.layout.grid).repeat_interleave(p, 3).repeat_interleave(p, 4)
        pixels = torch.where(grid, self.filler[:, None], self.pixels[:, None]).flatten(0, 1)  # (B k, 3, H, W)
        return pixels, (user.expand(b * k, -1) if self.mask is not None else None)

    def pixel_batch(self, removed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """removed (k, H, W) bool pixels -> the passes' pixels and [MASK] mask (the 'mask' baseline: the patches
        wholly removed), each image with every removal, image-major."""
        k, b = removed.shape[0], self.images
        if self.baseline == "mask":
            p, (gh, gw) = self.layout.patch_size, self.layout.grid
            return self.batch(removed.reshape(k, gh, p, gw, p).all(dim=4).all(dim=2).reshape(k, gh * gw))
        pixels = torch.where(removed[None, :, None], self.filler[:, None], self.pixels[:, None]).flatten(0, 1)
        return pixels, (self.mask.expand(b * k, -1) if self.mask is not None else None)

    def score(self, pixels: torch.Tensor, mask: torch.Tensor | None, images: Sequence[int] | None = None
              ) -> np.ndarray:
        """The target's score (k,) for a batch of passes' (k, 3, H, W) pixels and (k, N) [MASK] mask; `images`: each
        row's image of a batch (None: the rows image-major, each image's together)."""
        resolved = self.resolved if images is None else self.resolved.rows(images)
        with torch.inference_mode():
            out = _forward(self.model, pixels, mask, self.head_mask)
            return target_score(out, resolved).double().cpu().numpy()

    def scores(self, removed: np.ndarray) -> np.ndarray:
        """(k, N) bool removal masks -> (k,) the target's score for each."""
        return self.score(*self.batch(torch.from_numpy(removed).to(self.pixels.device)))


# ---------------------------------------------------------------------------- the methods
def _readout(layout: TokenLayout, config: ViTConfig, head: str) -> list[int]:
    """The tokens the target's head reads: [CLS] (DeiT: [CLS], the distillation token or both), or every patch."""
    rows = list(pooling.POOLS[config.pool].query_rows(layout))
    if rows == [0] and "dist" in layout.prefix_names:
        return {"dist": [1], "average": [0, 1]}.get(head, [0])
    return rows


def attention_sites(model: VisionTransformer) -> list[str]:
    """Every attention pattern the explained output reads, in forward order: each block's, CaiT's class
    attention's, the attention pool's."""
    sites = [f"{stack}.{i}.attn.hook_pattern" for stack in ("blocks", "class_blocks")
             for i in range(len(getattr(model, stack)))]
    return sites + [name for name in ("attn_pool.hook_pattern",) if name in model.hook_dict]


def _grad_pass(scorer: Scorer, sites: Sequence[str] = ()) -> tuple[dict[str, Any], list[torch.Tensor],
                                                                    list[torch.Tensor], dict[str, torch.Tensor]]:
    """One pass with every attention map in the output's graph (a hook at each pattern site forms it explicitly and
    computes the output from it); (outputs, maps, d target / d map, the values at `sites`); for a head over [CLS]
    beside the mean of the patches, last the pooled vector and its gradient."""
    model = scorer.model
    patterns = attention_sites(model)
    cache: dict[str, torch.Tensor] = {}

    def keep(x: torch.Tensor, hook: HookPoint) -> None:
        cache[hook.name] = x

    with torch.enable_grad(), model.hooks([(name, keep) for name in dict.fromkeys([*patterns, *sites])]):
        out = _forward(model, scorer.pixels, scorer.mask, scorer.head_mask, capture=["pre_logits"])
        maps = [cache[name] for name in patterns]
        if pooling.POOLS[model.config.pool].halves:
            maps.append(out["pre_logits"])
        # a map the output does not depend on (a hook cut its branch off) has a zero gradient
        grads = list(torch.autograd.grad(target_logit(out, scorer.resolved).sum(), maps, allow_unused=True,
                                         materialize_grads=True))
    return out, maps, grads, cache


def halves_readout(pooled: torch.Tensor, gradient: torch.Tensor, layout: TokenLayout) -> torch.Tensor:
    """DINOv2's classifier reads [CLS] beside the mean of the patches: (B, T) weights of the token rows, [CLS]'s
    half's share on [CLS] and the mean's share spread evenly over the patches (the mean's own 1/N). A half's share
    is the size of its contribution to the target, |gradient . input| over the half (for a linear head |W_c x|,
    that half's term of the logit), over both halves' (1/2 each when both are zero): a half the head ignores adds
    nothing, and with one half alone the map is that pooling's own."""
    d = pooled.shape[-1] // 2
    part = (pooled.detach().float() * gradient.float()).reshape(-1, 2, d).sum(dim=-1).abs()  # (B, 2)
    total = part.sum(dim=-1, keepdim=True)
    share = torch.where(total > 0, part / total.clamp(min=torch.finfo(part.dtype).tiny), torch.full_like(part, 0.5))
    k = layout.num_prefix_tokens
    weights = share.new_zeros(share.shape[0], layout.num_tokens)  # (B, T)
    weights[:, 0] = share[:, 0]
    weights[:, k:] = share[:, 1:] / layout.num_patches
    return weights


def attention_gradient_map(scorer: Scorer, config: ViTConfig) -> torch.Tensor:
    out, maps, grads, _ = _grad_pass(scorer)
    depth, layout = config.depth, scorer.layout
    pool = (maps[-1].detach(), grads[-1]) if pooling.POOLS[config.pool].latent else None
    query: list[int] | torch.Tensor = _readout(layout, config, scorer.resolved.head)
    if pooling.POOLS[config.pool].halves:
        query = halves_readout(maps[-1], grads[-1], layout)
    return rel.attention_gradient([m.detach() for m in maps[:depth]], grads[:depth], layout, query=query,
                                  class_attentions=[m.detach() for m in maps[depth:config.num_blocks]],
                                  class_gradients=grads[depth:config.num_blocks], pool=pool)


def _start_relevance(model: VisionTransformer, out: dict[str, Any], scorer: Scorer, tokens: torch.Tensor,
                     pooled: torch.Tensor) -> torch.Tensor:
    """LRP from the explained output back to the final tokens (B, T, D), from the pass's own normed tokens and
    pooled vector (the final norm passes the relevance through)."""
    cfg, layout, resolved = model.config, scorer.layout, scorer.resolved
    k = layout.num_prefix_tokens
    relevance = torch.zeros_like(tokens)
    if resolved.kind == "similarity":
        embedding = out["logits"].float()  # (B, E): the cosine's terms e_d r_d / |e| sum to the similarity
        assert resolved.reference is not None
        r_out = embedding * resolved.reference.to(embedding) / embedding.norm(dim=-1, keepdim=True)
        r_pooled = lrp.linear_rule(pooled, model.proj, r_out) if cfg.proj_dim else r_out
        r_dist = None
    else:
        one_hot = torch.zeros_like(out["logits"], dtype=torch.float32)
        rows = torch.arange(one_hot.shape[0], device=one_hot.device)
        one_hot[rows, resolved.index if not resolved.indices else torch.tensor(resolved.indices).to(rows)] = 1.0
        r_dist = None
        if resolved.head in ("cls", "dist", "average") and "dist" in out["head_logits"]:
            dist_in = tokens[:, 1]
            z_cls, z_dist = model.head(pooled) - model.head.bias, model.head_dist(dist_in) - model.head_dist.bias
            r_cls, r_d = lrp.add_rule(z_cls / 2, z_dist / 2, one_hot)
            r_cls, r_d = {"cls": (one_hot, 0 * one_hot), "dist": (0 * one_hot, one_hot)}.get(resolved.head,
                                                                                              (r_cls, r_d))
            r_pooled = lrp.linear_rule(pooled, model.head, r_cls)
            r_dist = lrp.linear_rule(dist_in, model.head_dist, r_d)
        else:
            r_pooled = lrp.linear_rule(pooled, model.head, one_hot)
    d = tokens.shape[-1]
    for n, part in enumerate(pooling.POOLS[cfg.pool].parts):  # the head's rule split the relevance between them
        share = r_pooled[:, n * d:(n + 1) * d]
        if part == pooling.MEAN:
            relevance[:, k:] = relevance[:, k:] + lrp.mean_rule(tokens[:, k:], share)
        else:
            relevance[:, 0] = relevance[:, 0] + share
    if r_dist is not None:
        relevance[:, 1] = relevance[:, 1] + r_dist
    return relevance


@dataclass
class Propagated:
    """LRP through the blocks: the relevance at the output's tokens and at the first block's input (B, T, D; None
    where not asked for), each block's attention relevance R_A (B, heads, T, T) and the target's gradient at each
    attention map."""

    start: torch.Tensor
    input: torch.Tensor | None
    attention: list[torch.Tensor]
    gradients: list[torch.Tensor]


def propagate(scorer: Scorer, config: ViTConfig, *, to_input: bool = True) -> Propagated:
    """One pass with the attention in the graph, the target's gradient, then LRP from the output to the input
    through the values that pass computed (lrp.block_sites at every block); `to_input=False` stops at the first
    block's attention map (what transformer-attribution reads)."""
    model = scorer.model
    blocks = [block for block in model.blocks if isinstance(block, Block)]
    sites = ["ln_final.hook_normalized", "hook_pooled"] + [f"blocks.{i}.{site}" for i, block in enumerate(blocks)
                                                           for site in lrp.block_sites(block)]
    out, maps, grads, cache = _grad_pass(scorer, sites)
    with torch.no_grad():
        start = relevance = _start_relevance(model, out, scorer, cache["ln_final.hook_normalized"].detach(),
                                             cache["hook_pooled"].detach())
        cams: list[torch.Tensor] = [torch.empty(0)] * config.depth
        for i in reversed(range(config.depth)):
            block = blocks[i]
            values = {site: cache[f"blocks.{i}.{site}"].detach() for site in lrp.block_sites(block)}
            relevance, cams[i] = lrp.block_relevance(block, values, relevance, to_input=to_input or i > 0)
    return Propagated(start, relevance if to_input else None, cams, grads[:config.depth])


def transformer_attribution_map(scorer: Scorer, config: ViTConfig) -> torch.Tensor:
    done = propagate(scorer, config, to_input=False)
    readout: list[int] | torch.Tensor = _readout(scorer.layout, config, scorer.resolved.head)
    if pooling.MEAN in pooling.POOLS[config.pool].parts:  # each token's relevance at the output weighs its row
        readout = done.start.sum(dim=-1)  # (1, T)
    return rel.attribution_rollout(done.attention, done.gradients, scorer.layout, query=readout)


def rollout_map(scorer: Scorer, config: ViTConfig) -> torch.Tensor:
    """Attention rollout from what the head reads, as the Attention view draws it (CaiT: through class attention)."""
    with torch.inference_mode():
        out = _forward(scorer.model, scorer.pixels, scorer.mask, scorer.head_mask,
                       capture=["attentions", "class_attentions"])
    query = query_for(scorer.layout, config.pool)
    if query.class_attention and out.get("class_attentions"):
        return attn.class_rollout(out["class_attentions"], out["attentions"], scorer.layout)
    return attn.rollout(out["attentions"], scorer.layout, query=list(query.rows))


def gradcam_map(scorer: Scorer, config: ViTConfig) -> torch.Tensor:
    model = scorer.model
    seen: list[torch.Tensor] = []
    block = scorer.options.gradcam_block
    block = len(model.blocks) - 1 if block is None else block
    site = f"blocks.{block}.ln1.hook_normalized"  # the block's normed input (default the last), as grad-cam's
    with torch.enable_grad(), model.hooks([(site, lambda x, hook: seen.append(x))]):
        out = _forward(model, scorer.pixels, scorer.mask, scorer.head_mask)
        (grad,) = torch.autograd.grad(target_logit(out, scorer.resolved).sum(), seen[-1])
    return rel.gradcam(seen[-1].detach(), grad, scorer.layout)


def ig_baseline(scorer: Scorer) -> torch.Tensor:
    """(B, 3, H, W) integrated gradients' starting images of Options.ig_baseline 'zero', 'blur' or 'noise'."""
    name, pixels = scorer.options.ig_baseline, scorer.pixels.detach()
    if name == "blur":
        return blur(pixels, scorer.layout.patch_size / 2)
    if name == "noise":  # uniform over each channel's range, black to white (each image's own draw, its seed)
        low, high = (v.to(pixels).view(1, -1, 1, 1) for v in scorer.bounds) if scorer.bounds else \
            (pixels.amin(dim=(2, 3), keepdim=True), pixels.amax(dim=(2, 3), keepdim=True))
        draw = torch.cat([torch.rand((1, *pixels.shape[1:]), generator=torch.Generator().manual_seed(scorer.seed(i)))
                          for i in range(scorer.images)])
        return low + (high - low) * draw.to(pixels)
    return torch.zeros_like(pixels)


def _points(scorer: Scorer) -> int:
    """Integrated gradients' points per pass: BATCH for one image, for a batch as many as keep a pass at ROWS rows."""
    return BATCH if scorer.images == 1 else max(1, ROWS // scorer.images)


def _ig_steps(scorer: Scorer) -> Iterator[int | torch.Tensor]:
    """Integrated gradients on the normalised pixels from the options' baseline (yields progress), then the (H, W)
    attribution summed over the channels."""
    def target(points: torch.Tensor) -> torch.Tensor:
        mask = None if scorer.mask is None else scorer.mask.expand(points.shape[0], -1)
        return target_logit(_forward(scorer.model, points, mask, scorer.head_mask), scorer.resolved)

    with torch.enable_grad():
        for step in rel.integrated_gradients(target, scorer.pixels, ig_baseline(scorer),
                                             n_steps=scorer.options.ig_steps, batch=_points(scorer)):
            yield step if isinstance(step, int) else step.detach().sum(dim=1)


def _ig_mask_steps(scorer: Scorer) -> Iterator[int | torch.Tensor]:
    """Integrated gradients in the patch embeddings (hook_embed), from every patch the [MASK] token to the image's
    own: (x - m) . the path's mean gradient, per patch (yields progress, then the (gh, gw) map)."""
    model = scorer.model
    seen: list[torch.Tensor] = []
    with torch.no_grad(), model.hooks([("hook_embed", lambda x, hook: seen.append(x))]):
        _forward(model, scorer.pixels, scorer.mask, scorer.head_mask)
    embedded = seen[0].clone()  # (B, N, D)
    start = model.mask_token.detach().to(embedded).expand_as(embedded)

    def target(points: torch.Tensor) -> torch.Tensor:  # points: (B k, N, D) patch embeddings, image-major
        k = points.shape[0]
        mask = None if scorer.mask is None else scorer.mask.expand(k, -1)
        with model.hooks([("hook_embed", lambda x, hook: points)]):
            out = _forward(model, scorer.pixels.repeat_interleave(k // scorer.images, dim=0), mask, scorer.head_mask)
        return target_logit(out, scorer.resolved)

    with torch.enable_grad():
        for step in rel.integrated_gradients(target, embedded, start, n_steps=scorer.options.ig_steps,
                                             batch=_points(scorer)):
            yield step if isinstance(step, int) else step.detach().sum(dim=-1).reshape(-1, *scorer.layout.grid)


def integrated_gradients_map(scorer: Scorer, config: ViTConfig, job: Job) -> torch.Tensor:
    steps = _ig_mask_steps(scorer) if scorer.options.ig_baseline == "mask" else _ig_steps(scorer)
    return _drive(steps, scorer.options.ig_steps, job)


def _windows(size: int, window: int, stride: int) -> list[int]:
    """captum's Occlusion along one axis: the windows' first pixels 0, s, 2s, ..., ceil((L - w) / s) s (the last
    window cut at the border)."""
    return [i * stride for i in range(math.ceil((size - window) / stride) + 1)]


def _occlusion_windows(scorer: Scorer) -> tuple[list[tuple[int, int]], tuple[int, int]]:
    """The occluded windows' top-left pixels and their (height, width)."""
    h, w = scorer.pixels.shape[-2:]
    p = scorer.layout.patch_size
    wh, ww = scorer.options.occlusion_window or (p, p)
    sh, sw = scorer.options.occlusion_stride or (wh, ww)
    return [(y, x) for y in _windows(h, wh, sh) for x in _windows(w, ww, sw)], (wh, ww)


def _occlusion_steps(scorer: Scorer) -> Iterator[int | torch.Tensor]:
    """captum's Occlusion with the scorer's baseline: each window (Options.occlusion_window, sliding by its stride)
    removed alone, the drop of the target's score given to its pixels, each pixel's mean over the windows that
    cover it; then the mean over each patch (yields progress, then the (gh, gw) map). One window per patch (the
    default) gives each patch's own drop."""
    h, w = scorer.pixels.shape[-2:]
    p, device, b = scorer.layout.patch_size, scorer.pixels.device, scorer.images
    corners, (wh, ww) = _occlusion_windows(scorer)
    base = scorer.score(*scorer.pixel_batch(torch.zeros((1, h, w), dtype=torch.bool, device=device)))  # (B,)
    total, count = np.zeros((b, h, w)), np.zeros((h, w))
    step = BATCH if b == 1 else max(1, ROWS // b)  # windows per pass (each image with every one)
    for start in range(0, len(corners), step):
        removed = torch.zeros((len(corners[start:start + step]), h, w), dtype=torch.bool, device=device)
        for i, (y, x) in enumerate(corners[start:start + step]):
            removed[i, y:y + wh, x:x + ww] = True
        drops = base[:, None] - scorer.score(*scorer.pixel_batch(removed)).reshape(b, -1)  # (B, k)
        where = removed.cpu().numpy()
        total += np.einsum("bk,khw->bhw", drops, where)
        count += where.sum(axis=0)
        yield start + len(removed)
    gh, gw = scorer.layout.grid
    yield torch.from_numpy(total / count).reshape(b, gh, p, gw, p).mean(dim=(2, 4))


def gradient_x_input_map(scorer: Scorer, config: ViTConfig) -> torch.Tensor:
    """Input x gradient (Shrikumar et al. 2016; captum's InputXGradient) on the normalised pixels, (H, W) summed over
    the channels."""
    pixels = scorer.pixels.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        out = _forward(scorer.model, pixels, scorer.mask, scorer.head_mask)
        (grad,) = torch.autograd.grad(target_logit(out, scorer.resolved).sum(), pixels)
    return (pixels.detach() * grad).sum(dim=1)


def random_map(scorer: Scorer, config: ViTConfig) -> torch.Tensor:
    """The random-attribution baseline: uniform values per patch, each image's seeded (Options.seed, or a batch's
    seeds)."""
    return torch.stack([torch.rand(scorer.layout.grid, generator=torch.Generator().manual_seed(scorer.seed(i)),
                                   dtype=torch.float64) for i in range(scorer.images)])


def _conserved_target(out: dict[str, Any], resolved: Resolved) -> torch.Tensor:
    """(k,) the target as LRP starts from it: the class's logit, or the cosine similarity with the embedding's norm
    held constant (the identity rule through a normalisation), so the relevance it sends back sums to it."""
    if resolved.kind == "similarity":
        assert resolved.reference is not None
        embedding = out["logits"].float()
        return _similarity(embedding / embedding.norm(dim=-1, keepdim=True).detach(), resolved)
    return target_logit(out, resolved)


def attnlrp_map(scorer: Scorer, rules: attnlrp.Rules) -> torch.Tensor:
    """AttnLRP by `rules` (CP-LRP, a gamma per layer type): input x modified gradient of one pass whose sites carry
    the rules (analysis/attnlrp.py), summed per patch: (gh, gw)."""
    model = scorer.model
    pixels = scorer.pixels.detach().clone().requires_grad_(True)
    with torch.enable_grad(), model.hooks(attnlrp.hooks(model, rules, scorer.layout)):
        out = _forward(model, pixels, scorer.mask, scorer.head_mask)
        (grad,) = torch.autograd.grad(_conserved_target(out, scorer.resolved).sum(), pixels)
    return rel.per_patch(pixels.detach().float() * grad.float(), scorer.layout.patch_size)


def lrp_rules(options: Options, conservative: bool = False) -> attnlrp.Rules:
    """AttnLRP's (CP-LRP's: `conservative`) rules with the options' gamma on every linear layer type."""
    gamma = {layer: options.attnlrp_gamma for layer in attnlrp.GAMMA_LAYERS} if options.attnlrp_gamma else {}
    return attnlrp.Rules(conservative=conservative, gamma=gamma)


def _one_pass(compute: Callable[[Scorer, ViTConfig], torch.Tensor]) -> Callable[[Scorer, ViTConfig, Job], torch.Tensor]:
    """A method of one pass (nothing to report or check until it is done) as a record's function."""
    return lambda scorer, config, job: compute(scorer, config)


# ---------------------------------------------------------------------------- the methods table
METHODS: dict[str, Method] = {m.name: m for m in (
    Method("rollout", _one_pass(rollout_map), "attention rollout", "rollout",
           "every block's attention (not class-specific)", "Abnar & Zuidema 2020", gradient=False),
    Method("attention-gradient", _one_pass(attention_gradient_map), "attention × gradient (Chefer 2021b)",
           "attention × grad", "every attention map in the output's graph and the target's gradient",
           "Chefer et al., ICCV 2021", report=True),
    Method("transformer-attribution", _one_pass(transformer_attribution_map), "transformer attribution (Chefer 2021)",
           "LRP attribution", "LRP relevance of every attention map and its gradient", "Chefer et al., CVPR 2021",
           _lrp_refusal, report=True),
    Method("gradcam", _one_pass(gradcam_map), "Grad-CAM (last block's norm1)", "Grad-CAM",
           "the tokens entering the last block's attention and their gradient", "pytorch-grad-cam's ViT recipe",
           report=True),
    Method("integrated-gradients", integrated_gradients_map, "integrated gradients", "integrated grad.",
           "gradients along the path from a baseline (default 50, from a zero image)",
           "captum IntegratedGradients defaults", pixel_level=True),
    Method("occlusion", lambda scorer, config, job: _drive(_occlusion_steps(scorer),
                                                           len(_occlusion_windows(scorer)[0]), job),
           "occlusion (one patch at a time)", "occlusion", "one forward pass per patch, batched",
           "Zeiler & Fergus 2014; captum Occlusion's windows and strides", gradient=False),
    Method("gradient-x-input", _one_pass(gradient_x_input_map), "gradient × input", "grad × input",
           "the target's gradient at the input pixels", "captum InputXGradient", default=False, pixel_level=True),
    Method("attnlrp", _one_pass(lambda scorer, config: attnlrp_map(scorer, lrp_rules(scorer.options))),
           "AttnLRP (Achtibat 2024)", "AttnLRP",
           "one pass with LXT's rules at the hook sites, and its modified gradient at the input pixels",
           "Achtibat et al., ICML 2024; LXT 2.1", attnlrp.refusal, default=False, conserves=True),
    Method("cp-lrp", _one_pass(lambda scorer, config: attnlrp_map(scorer, lrp_rules(scorer.options, True))),
           "CP-LRP (attention held constant)", "CP-LRP",
           "one pass with LXT's rules at the hook sites, the attention probabilities constant",
           "Ali et al., ICML 2022; LXT 2.1", attnlrp.refusal, default=False, conserves=True),
    Method("random", _one_pass(random_map), "random attribution (baseline)", "random", "nothing: seeded noise",
           "the baseline a method must beat (Adebayo et al. 2018)", gradient=False, default=False, baseline=True),
)}


# ---------------------------------------------------------------------------- one explanation
@dataclass(frozen=True)
class Conservation:
    """An LRP map's relevance budget: the target it starts from, the input's total; the rest is what biases absorb
    (and the rules' stabilisers)."""

    target: float
    input: float

    @property
    def absorbed(self) -> float:
        return self.target - self.input

    def text(self) -> str:
        return f"relevance {self.input:.3g} of the target's {self.target:.3g} at the input (biases absorb " \
               f"{self.absorbed:.3g})"

    def to_json(self) -> dict[str, float | None]:
        return {"target": json_number(self.target), "input": json_number(self.input),
                "absorbed": json_number(self.absorbed)}


@dataclass
class Faithfulness:
    baseline: str
    positive: np.ndarray  # (10,) the target's score with 0, 10, ..., 90 % of the patches removed, most relevant first
    negative: np.ndarray  # (10,) the same, least relevant first
    deletion_fractions: np.ndarray
    deletion: np.ndarray
    insertion: np.ndarray
    pointing: bool | None = None  # on an image whose object mask is known
    iou: float | None = None
    road_morf: np.ndarray | None = None  # (9,) ROAD: the target's score with 10, ..., 90 % of the patches imputed,
    road_lerf: np.ndarray | None = None  # most (MoRF) or least (LeRF) relevant first

    @property
    def fractions(self) -> np.ndarray:
        return np.asarray(faith.PERTURBATION_FRACTIONS)

    @property
    def road_fractions(self) -> np.ndarray:
        return np.asarray(faith.ROAD_FRACTIONS)

    @property
    def road_morf_auc(self) -> float:
        """The area under ROAD's MoRF curve over 10 .. 90 % (lower is better); NaN when ROAD was not measured."""
        return math.nan if self.road_morf is None else faith.auc(self.road_morf, self.road_fractions)

    @property
    def road_lerf_auc(self) -> float:
        """The same for LeRF (higher is better)."""
        return math.nan if self.road_lerf is None else faith.auc(self.road_lerf, self.road_fractions)

    @property
    def positive_auc(self) -> float:
        return faith.auc(self.positive, self.fractions)

    @property
    def negative_auc(self) -> float:
        return faith.auc(self.negative, self.fractions)

    @property
    def deletion_auc(self) -> float:
        return faith.auc(self.deletion, self.deletion_fractions)

    @property
    def insertion_auc(self) -> float:
        return faith.auc(self.insertion, self.deletion_fractions)

    @property
    def gap(self) -> float:
        """negative AUC - positive AUC: the larger, the more the map's order matters to the model."""
        return self.negative_auc - self.positive_auc


@dataclass(frozen=True)
class SanityStep:
    """One step of the cascading randomisation (explore.sanity): the map with the parameters from `randomised_from`
    ('head', 'block 11', ..., 'block 0', 'embedding') up drawn anew, and its likeness to the trained model's map."""

    randomised_from: str
    spearman: float  # rank correlation with the trained model's map (NaN: a constant map)
    ssim: float  # structural similarity of the two maps, each scaled to 0..1
    relevance: np.ndarray  # (gh, gw)


@dataclass
class Explanation:
    method: str
    target: Resolved
    layout: TokenLayout
    relevance: np.ndarray  # (gh, gw) the method's raw values
    display: np.ndarray  # (H, W, 3) uint8 the image as the model sees it
    masked: np.ndarray | None  # (gh, gw) the user's [MASK] patches, or None
    faithfulness: Faithfulness | None = None
    seconds: float = 0.0
    note: str = ""
    conservation: Conservation | None = None  # an LRP method's relevance budget
    pixels: np.ndarray | None = None  # (H, W) the pixel-level map (Options.pixels), for the methods that have one
    sanity: list[SanityStep] | None = None  # the cascading randomisation check (`sanity`), when run

    @property
    def grid(self) -> tuple[int, int]:
        return self.layout.grid

    def _repr_png_(self) -> bytes:
        """Inline in Jupyter: the map over the image and, when measured, its faithfulness curves."""
        from .notebook import png

        curves = [perturbation_figure([self])] if self.faithfulness is not None else []
        return png(map_figure(self), *curves)


@dataclass
class Session:
    """What every method of one explanation shares: the model, the inputs' pixels and masks, the target."""

    loaded: LoadedModel
    inputs: Inputs
    scorer: Scorer
    display: np.ndarray

    @property
    def config(self) -> ViTConfig:
        return self.loaded.config


def input_bounds(loaded: LoadedModel) -> tuple[torch.Tensor, torch.Tensor]:
    """(3,) each: black and white in the model's normalised input."""
    mean, std = (torch.tensor(v, dtype=torch.float32) for v in (loaded.preprocessing.mean, loaded.preprocessing.std))
    return -mean / std, (1 - mean) / std


def prepare(inputs: Inputs, target: Target | None = None, baseline: str = "zero", options: Options | None = None
            ) -> Session:
    """Check the inputs and options, run the model once on them, and make the target concrete."""
    check_inputs(inputs)
    if baseline not in BASELINES:
        raise ValueError(f"baseline must be one of {BASELINES}, got {baseline!r}")
    loaded = inputs.loaded
    model = loaded.model
    pixels = pixels_for(inputs)
    options = options or Options()
    options.check(loaded.config, (int(pixels.shape[-2]), int(pixels.shape[-1])), baseline)
    device = pixels.device
    mask = torch.from_numpy(inputs.mask.reshape(-1).astype(bool)).to(device) if inputs.mask.any() else None
    head_mask = None
    if (inputs.head_mask < 1).any():
        head_mask = torch.from_numpy(inputs.head_mask.astype(np.float32)).to(device)
    layout = model.layout((int(pixels.shape[-2]), int(pixels.shape[-1])))

    def run() -> dict[str, Any]:
        with torch.inference_mode():
            return _forward(model, pixels, mask, head_mask)

    def unmasked() -> torch.Tensor:
        with torch.inference_mode():
            return model(pixels)[0].float()

    resolved = resolve_target(loaded, target or Target(), run, unmasked)
    scorer = Scorer(model, pixels, layout, mask, head_mask, resolved, baseline, options, input_bounds(loaded))
    return Session(loaded, inputs, scorer, loaded.preprocessing.to_image(pixels))


def _drive(steps: Iterator[int | torch.Tensor], total: int, job: Job) -> torch.Tensor:
    """Run a method that yields its progress (steps done of `total`) and then its map, checking the job between."""
    for step in steps:
        job.check()
        if isinstance(step, int):
            job.progress(step / total)
        else:
            return step
    raise RuntimeError("the method yielded no map")


def relevance_map(session: Session, method: str, *, job: Job | None = None) -> np.ndarray:
    """The (gh, gw) map of one method, its own raw values."""
    return compute_maps(session, method, job=job).relevance


@dataclass
class Maps:
    """One method's maps: per patch (gh, gw), and for a pixel-level method (H, W) summed over the channels; what
    the user must know of them (recomputed in float64, constant, SmoothGrad not applied)."""

    relevance: np.ndarray
    pixels: np.ndarray | None
    note: str = ""


def _smoothed(method: Method, scorer: Scorer, config: ViTConfig, job: Job) -> torch.Tensor:
    """The method's raw result; with Options.smoothgrad (a gradient method) the mean over that many copies of the
    image with Gaussian noise of sigma times the input's range added (SmoothGrad), the noise seeded."""
    n, sigma = scorer.options.smoothgrad, scorer.options.smoothgrad_sigma
    if not n or not method.gradient:
        return method.compute(scorer, config, job)
    if scorer.images > 1:  # each image's noise of its own seed, as it is alone
        return torch.cat([_smoothed(method, scorer.row(i), config, job.part(i / scorer.images,
                                                                            (i + 1) / scorer.images))
                          for i in range(scorer.images)])
    generator = torch.Generator().manual_seed(scorer.seed())
    pixels = scorer.pixels.detach()
    spread = sigma * float(pixels.max() - pixels.min())
    total: torch.Tensor | None = None
    for i in range(n):
        noise = torch.randn(pixels.shape, generator=generator, dtype=torch.float64).to(pixels)
        noisy = replace(scorer, pixels=pixels + spread * noise)
        result = method.compute(noisy, config, job.part(i / n, (i + 1) / n, f"SmoothGrad {i + 1}/{n}")).detach()
        total = result if total is None else total + result
    assert total is not None
    return total / n


ROUNDING = 1024  # a map whose spread is within this many units of rounding of its largest value is lost to rounding


def _constant(values: np.ndarray, dtype: torch.dtype) -> bool:
    """Every value the same, or their spread within the rounding (ROUNDING x eps of `dtype`, what the map was
    computed in) of the largest: what is left is mostly rounding noise."""
    scale = float(np.abs(values).max()) if values.size else 0.0
    return bool(np.ptp(values) <= ROUNDING * torch.finfo(dtype).eps * scale) if np.isfinite(scale) else False


def _in_float64(scorer: Scorer) -> Scorer:
    """The scorer over a float64 copy of its model (the user's model is left as it is)."""
    model = copy.deepcopy(scorer.model).double()
    return replace(scorer, model=model, pixels=scorer.pixels.double(),
                   head_mask=None if scorer.head_mask is None else scorer.head_mask.double())


def _raw_maps(record: Method, scorer: Scorer, config: ViTConfig, job: Job) -> tuple[np.ndarray, np.ndarray | None]:
    """(B, gh, gw) the method's maps of the scorer's images and, for a pixel-level method, (B, H, W) its pixels'."""
    result = _smoothed(record, scorer, config, job).detach().cpu()
    if tuple(result.shape[1:]) == scorer.layout.grid:
        return result.numpy().astype(np.float64), None
    per_patch = rel.per_patch(result[:, None], scorer.layout.patch_size)  # (B, H, W) summed over the channels
    return per_patch.numpy().astype(np.float64), result.numpy().astype(np.float64)


def batch_maps(scorer: Scorer, method: str, config: ViTConfig, *, job: Job | None = None) -> list[Maps]:
    """One method's maps of each image of the scorer's batch (one pass of the batch, its rows image-major). A map that
    comes out constant in float32 is computed again in float64 (that image alone); if it is still constant its note
    says so."""
    job = job or Job()
    record = check_method(method, config)
    relevance, pixels = _raw_maps(record, scorer, config, job)
    out = []
    for i in range(scorer.images):
        maps, picture, note = relevance[i], None if pixels is None else pixels[i], ""
        if _constant(maps, scorer.pixels.dtype) and not record.baseline:
            if scorer.pixels.dtype != torch.float64:
                again, again_pixels = _raw_maps(record, _in_float64(scorer.row(i)), config, job)
                maps, picture = again[0], None if again_pixels is None else again_pixels[0]
                note = "computed again in float64: in float32 its differences were lost to rounding"
            if _constant(maps, torch.float64):
                note = (f"the map is constant ({maps.reshape(-1)[0]:.3g} on every patch, in float64 too): it says "
                        "nothing about where the evidence is")
        if scorer.options.smoothgrad and not record.gradient and not record.baseline:
            note = "; ".join(filter(None, [note, "SmoothGrad averages gradient methods only: computed once"]))
        out.append(Maps(maps, picture if scorer.options.pixels else None, note))
    job.progress(1.0)
    return out


def compute_maps(session: Session, method: str, *, job: Job | None = None, scorer: Scorer | None = None) -> Maps:
    """One method's maps (its own raw values) on the session's inputs (or on `scorer`: a randomised model's). A map
    that comes out constant in float32 is computed again in float64; if it is still constant its note says so."""
    return batch_maps(scorer or session.scorer, method, session.config, job=job)[0]


def target_value(session: Session) -> float:
    """The target's value on the session's inputs, as an LRP starts from it (the logit, or the similarity)."""
    scorer = session.scorer
    with torch.inference_mode():
        out = _forward(scorer.model, scorer.pixels, scorer.mask, scorer.head_mask)
        return float(_conserved_target(out, scorer.resolved)[0])


def faithfulness(session: Session, relevance: np.ndarray, *, object_mask: np.ndarray | None = None,
                 job: Job | None = None) -> Faithfulness:
    """Positive / negative perturbation, deletion / insertion and ROAD of one map with the session's baseline; with
    an (H, W) bool `object_mask` of the input also the pointing game and the 60 %-mass IoU."""
    return faithfulness_batch(session.scorer, [relevance], object_masks=[object_mask], job=job)[0]


Part = tuple[int, torch.Tensor, torch.Tensor | None]  # an image of the batch, its passes' pixels and [MASK] mask


def _stacked_scores(scorer: Scorer, parts: Iterator[Part], rows: int) -> Iterator[np.ndarray]:
    """Each part's (k,) scores, in order, the parts of every image stacked into passes of at least `rows` rows (the
    last fewer), each row scored for its image's target."""
    pending: list[Part] = []

    def flush() -> Iterator[np.ndarray]:
        pixels = torch.cat([p for _, p, _ in pending])
        owners = [i for i, part, _ in pending for _ in range(len(part))]
        mask = None
        if any(m is not None for _, _, m in pending):  # ROAD's passes have no [MASK] where the 'mask' baseline has
            none = torch.zeros(scorer.layout.num_patches, dtype=torch.bool, device=pixels.device)
            mask = torch.cat([none.expand(len(p), -1) if m is None else m for _, p, m in pending])
        scores = scorer.score(pixels, mask, owners)
        yield from np.split(scores, np.cumsum([len(p) for _, p, _ in pending])[:-1])
        pending.clear()

    for part in parts:
        pending.append(part)
        if sum(len(p) for _, p, _ in pending) >= rows:
            yield from flush()
    if pending:
        yield from flush()


def _road_pixels(scorer: Scorer, relevance: np.ndarray, most_first: bool, noise: float,
                 generator: torch.Generator, job: Job) -> tuple[torch.Tensor, torch.Tensor | None]:
    """ROAD's (S, 3, H, W) imputed images of one image (`scorer` holds one) at faith.ROAD_FRACTIONS, most or least
    relevant first, and their [MASK] mask (the user's)."""
    image = scorer.pixels.detach()[0]  # (3, H, W)
    p, (gh, gw) = scorer.layout.patch_size, scorer.layout.grid
    pixel_level = tuple(np.shape(relevance)) == tuple(image.shape[-2:]) and p > 1
    imputed = []
    for removed in faith.road_masks(relevance, most_first):  # (N,) patches or (H * W,) pixels
        job.check()
        missing = removed.reshape(image.shape[-2:]) if pixel_level else \
            removed.reshape(gh, 1, gw, 1).repeat(p, axis=1).repeat(p, axis=3).reshape(gh * p, gw * p)
        imputed.append(faith.noisy_linear_imputation(image, missing, noise, generator))
    pixels = torch.stack(imputed)  # (S, 3, H, W)
    return pixels, None if scorer.mask is None else scorer.mask.expand(len(pixels), -1)


def faithfulness_batch(scorer: Scorer, relevances: Sequence[np.ndarray], *,
                       object_masks: Sequence[np.ndarray | None] | None = None, job: Job | None = None
                       ) -> list[Faithfulness]:
    """`faithfulness` of each image's map (relevances[i] of image i of the scorer's batch): every image's curves and
    ROAD passes stacked into passes of ROWS rows (one image: BATCH), a removal that repeats within one image's curves
    (positive perturbation is a subset of deletion) scored once; each image's ROAD noise from its own seed."""
    job = job or Job()
    b, n = scorer.images, scorer.layout.num_patches
    if len(relevances) != b:
        raise ValueError(f"{len(relevances)} maps for {b} images")
    fractions = faith.deletion_fractions(n)
    rows = [scorer.row(i) for i in range(b)]
    sizes, unique, inverse = [], [], []
    for relevance in relevances:
        masks = [faith.perturbation_masks(relevance, True), faith.perturbation_masks(relevance, False),
                 faith.deletion_masks(relevance, fractions), faith.insertion_masks(relevance, fractions)]
        kept, back = np.unique(np.concatenate(masks), axis=0, return_inverse=True)
        sizes.append([len(m) for m in masks])
        unique.append(kept)
        inverse.append(back.reshape(-1))
    per_pass = BATCH if b == 1 else ROWS
    road_rows = 2 * len(faith.ROAD_FRACTIONS)
    total = sum(len(u) for u in unique) + ROAD_COST * road_rows * b
    device = scorer.pixels.device

    def parts() -> Iterator[Part]:
        done = 0
        for i, row in enumerate(rows):
            for start in range(0, len(unique[i]), per_pass):
                job.check()
                removed = torch.from_numpy(unique[i][start:start + per_pass]).to(device)
                done += len(removed)
                job.progress(done / total)
                yield i, *row.batch(removed)
        for i, row in enumerate(rows):
            generator = torch.Generator().manual_seed(row.seed())  # MoRF's draws first, then LeRF's
            for most_first in (True, False):
                yield i, *_road_pixels(row, relevances[i], most_first, faith.ROAD_NOISE, generator, job)
                done += ROAD_COST * road_rows // 2
                job.progress(done / total, "ROAD")

    scored = _stacked_scores(scorer, parts(), per_pass)
    curves = [np.concatenate([next(scored) for _ in range(0, len(u), per_pass)])[back]
              for u, back in zip(unique, inverse, strict=True)]
    out = []
    for i, relevance in enumerate(relevances):
        morf, lerf = next(scored), next(scored)
        parts_i = np.split(curves[i], np.cumsum(sizes[i])[:-1])
        pointing = iou = None
        mask = None if object_masks is None else object_masks[i]
        if mask is not None:
            coverage = faith.patch_coverage(np.asarray(mask, dtype=bool), scorer.layout.patch_size)
            pointing, iou = faith.pointing_hit(relevance, coverage), faith.mass_iou(relevance, coverage)
        out.append(Faithfulness(scorer.baseline, parts_i[0], parts_i[1], fractions, parts_i[2], parts_i[3], pointing,
                                iou, morf, lerf))
    job.progress(1.0)
    return out


ROAD_COST = 4  # an imputation's time in forward passes, roughly (for the progress bar's shares)


def road(scorer: Scorer, relevance: np.ndarray, *, noise: float = faith.ROAD_NOISE, seed: int | None = None,
         job: Job | None = None) -> tuple[np.ndarray, np.ndarray]:
    """ROAD (Rong et al., ICML 2022) as pytorch-grad-cam's ROADMostRelevantFirst / ROADLeastRelevantFirst define it:
    at each of faith.ROAD_FRACTIONS the most (MoRF) or least (LeRF) relevant share of the patches (stable order)
    replaced in the normalised input by noisy linear imputation (`noise` times standard normal noise), then the
    target's score (the user's [MASK] and head mask apply). The noise is drawn from one generator seeded with
    `seed` (default Options.seed), MoRF's fractions first then LeRF's, each in rising order. `relevance` is a
    (gh, gw) map of the patches, or an (H, W) map of the pixels (a pixel-level map: its shares are of the pixels).
    Returns (morf, lerf), (9,) each."""
    job = job or Job()
    generator = torch.Generator().manual_seed(scorer.seed() if seed is None else seed)
    curves = []
    for n, most_first in enumerate((True, False)):
        pixels, mask = _road_pixels(scorer, relevance, most_first, noise, generator, job.part(n / 2, (n + 1) / 2))
        curves.append(np.concatenate([scorer.score(pixels[i:i + BATCH], None if mask is None else mask[i:i + BATCH])
                                      for i in range(0, len(pixels), BATCH)]))
    return curves[0], curves[1]


def explain(inputs: Inputs, methods: Sequence[str], target: Target | None = None, baseline: str = "zero", *,
            measure: bool = True, object_mask: np.ndarray | None = None, job: Job | None = None,
            options: Options | None = None) -> list[Explanation]:
    """Every method's map on the inputs' image for one target, each with its faithfulness (`measure`), ranked as
    given. The job hears of each batch (its share of the whole, what runs) and is checked between batches."""
    target = target or Target()
    if not methods:
        raise ValueError(f"no method chosen; choose from {', '.join(METHODS)}")
    for name in methods:
        check_method(name, inputs.loaded.config)
    session = prepare(inputs, target, baseline, options)
    job = job or Job()
    results = []
    parts = len(methods) * (2 if measure else 1)
    for i, name in enumerate(methods):
        start = time.perf_counter()
        done = i * (2 if measure else 1)
        maps = compute_maps(session, name, job=job.part(done / parts, (done + 1) / parts, name))
        relevance = maps.relevance
        measured = None
        if measure:
            measured = faithfulness(session, relevance, object_mask=object_mask,
                                    job=job.part((done + 1) / parts, (done + 2) / parts, f"{name}: faithfulness"))
        note = ""
        flat = METHODS[name].gradient and not METHODS[name].conserves  # LRP holds the embedding's norm constant
        if session.scorer.resolved.kind == "similarity" and flat and not inputs.mask.any() and target.reference is None:
            note = ("the similarity of an image to itself is 1 whatever small change is made, so its gradient is "
                    "zero: choose a reference image or paint [MASK] patches")
        note = "; ".join(filter(None, [note, maps.note]))
        conservation = Conservation(target_value(session), float(relevance.sum(dtype=np.float64))) \
            if METHODS[name].conserves else None
        results.append(Explanation(name, session.scorer.resolved, session.scorer.layout, relevance, session.display,
                                   inputs.mask if inputs.mask.any() else None, measured,
                                   time.perf_counter() - start, note, conservation, maps.pixels))
    return results


def ranked(explanations: Sequence[Explanation]) -> list[Explanation]:
    """Which map to believe for this image: by the gap between the negative and the positive AUC, largest first
    (unmeasured ones last, in their order)."""
    return sorted(explanations, key=lambda e: -e.faithfulness.gap if e.faithfulness is not None else math.inf)


def to_json(source: str, image: str, explanation: Explanation) -> dict[str, Any]:
    """The CLI's JSON object of one method (non-finite numbers as null)."""
    def curve(values: np.ndarray) -> list[float | None]:
        return [json_number(v) for v in values]

    t = explanation.target
    f = explanation.faithfulness
    faithful = None
    if f is not None:
        faithful = {"positive_auc": json_number(f.positive_auc), "negative_auc": json_number(f.negative_auc),
                    "deletion_auc": json_number(f.deletion_auc), "insertion_auc": json_number(f.insertion_auc),
                    "baseline": f.baseline,
                    "curves": {"positive": curve(f.positive), "negative": curve(f.negative),
                               "deletion": curve(f.deletion), "insertion": curve(f.insertion),
                               "deletion_fractions": curve(f.deletion_fractions)}}
        if f.pointing is not None:
            faithful.update(pointing=f.pointing, iou=json_number(f.iou or 0.0))
        if f.road_morf is not None and f.road_lerf is not None:
            faithful["road"] = {"fractions": curve(f.road_fractions), "morf": curve(f.road_morf),
                                "lerf": curve(f.road_lerf)}
    out: dict[str, Any] = {"source": source, "image": image, "method": explanation.method,
                           "target": {"index": t.index, "label": t.label, "head": t.head},
                           "grid": list(explanation.grid),
                           "relevance": [[json_number(v) for v in row] for row in explanation.relevance],
                           "faithfulness": faithful}
    if explanation.pixels is not None:  # Options.pixels: the pixel-level map beside the per-patch one
        out["pixel_relevance"] = [[json_number(v) for v in row] for row in explanation.pixels]
    if explanation.sanity is not None:
        out["sanity"] = [{"randomised_from": step.randomised_from, "spearman": json_number(step.spearman),
                          "ssim": json_number(step.ssim)} for step in explanation.sanity]
    if explanation.conservation is not None:  # an LRP method's: the target, the input's total, what biases absorb
        out["conservation"] = explanation.conservation.to_json()
    return out


# ---------------------------------------------------------------------------- the pictures
def random_row(explanations: Sequence[Explanation]) -> Explanation | None:
    """The measured random-attribution baseline among the explanations (None if it was not computed)."""
    return next((e for e in explanations if METHODS[e.method].baseline and e.faithfulness is not None), None)


def no_better_than_random(explanation: Explanation, explanations: Sequence[Explanation]) -> bool:
    """Whether a measured map's gap (negative - positive AUC) is at most the random baseline's, when both were
    measured on the same image (a baseline row itself: False)."""
    baseline = random_row(explanations)
    if baseline is None or explanation.faithfulness is None or METHODS[explanation.method].baseline:
        return False
    assert baseline.faithfulness is not None
    return explanation.faithfulness.gap <= baseline.faithfulness.gap


def summary_text(explanation: Explanation, explanations: Sequence[Explanation] = ()) -> str:
    """The faithfulness numbers of a map in one line (with the baseline they were measured with); beside the other
    `explanations`, whether it does no better than their random-attribution row."""
    f, c = explanation.faithfulness, explanation.conservation
    kept = "" if c is None else f" · {c.text()}"
    if f is None:
        return "faithfulness not measured" + kept
    text = (f"positive AUC {f.positive_auc:.3f} · negative AUC {f.negative_auc:.3f} · deletion {f.deletion_auc:.3f}"
            f" · insertion {f.insertion_auc:.3f}")
    if f.road_morf is not None:
        text += f" · ROAD MoRF {f.road_morf_auc:.3f} · LeRF {f.road_lerf_auc:.3f}"
    text += f" ({f.baseline} baseline)"
    if f.pointing is not None:
        text += f" · pointing {'hit' if f.pointing else 'miss'} · IoU {f.iou:.2f}"
    if METHODS[explanation.method].baseline:
        text += " · the baseline to beat"
    elif no_better_than_random(explanation, explanations):
        text += " · NO BETTER THAN RANDOM"
    return text + kept


def map_figure(explanation: Explanation, *, image: bool = True, opacity: float = 0.6) -> MapsFigure:
    """One method's map over the image, as the Attention view draws a map, titled with the target (an LRP map also
    with its relevance budget)."""
    m = METHODS[explanation.method]
    title = f"{m.label} · {explanation.target.title}"
    if explanation.conservation is not None:
        title += f" · {explanation.conservation.text()}"
    return MapsFigure("", explanation.relevance[None].astype(np.float64), (title,),
                      explanation.display if image else None, explanation.grid, colorbar_label="relevance (raw)",
                      masked=explanation.masked, opacity=opacity)


def pixel_figure(explanation: Explanation, *, image: bool = True, opacity: float = 0.6) -> MapsFigure:
    """A pixel-level map (Options.pixels) over the image, with the patch grid."""
    assert explanation.pixels is not None
    m = METHODS[explanation.method]
    title = f"{m.label} (pixels) · {explanation.target.title}"
    return MapsFigure("", explanation.pixels[None].astype(np.float64), (title,),
                      explanation.display if image else None, explanation.grid, colorbar_label="relevance (raw)",
                      masked=explanation.masked, opacity=opacity)


def ranking_figure(explanations: Sequence[Explanation], *, image: bool = True, only: Sequence[str] | None = None
                   ) -> MapsFigure:
    """Every method side by side, ranked by the gap of their negative and positive AUCs ("which map to believe
    for this image"), each scaled to its own maximum (their raw units differ); `only` draws those methods alone,
    still numbered by their rank among all."""
    order = ranked(explanations)
    drawn = [(i, e) for i, e in enumerate(order) if only is None or e.method in only]
    if not drawn:
        raise ValueError("no explanation to draw")
    def flag(e: Explanation) -> str:  # the random row, and a map that does no better
        return " (baseline)" if METHODS[e.method].baseline else " ≤ random" if no_better_than_random(e, order) else ""

    titles = tuple(f"{i + 1}. {METHODS[e.method].short} · {e.faithfulness.gap:+.3f}{flag(e)}" if e.faithfulness else
                   METHODS[e.method].short for i, e in drawn)  # the gap: negative - positive AUC; unmeasured: no rank
    maps = np.stack([np.clip(e.relevance, 0, None) if e.relevance.max() > 0 else e.relevance for _, e in drawn])
    first = order[0].faithfulness
    heading = f"{order[0].target.title} · " + (
        f"ranked by negative − positive AUC ({first.baseline} baseline)" if first else "faithfulness not measured")
    return MapsFigure(heading, maps.astype(np.float64), titles, order[0].display if image else None, order[0].grid,
                      colorbar_label="share of the map's maximum", scale="each", masked=order[0].masked)


def rollout_and_best(explanations: Sequence[Explanation]) -> list[str]:
    """Rollout (if computed) and the best-ranked class-specific method: the pair a lesson sets side by side."""
    order = ranked(explanations)
    best = [e.method for e in order if e.method != "rollout"][:1]
    return [e.method for e in order if e.method == "rollout"] + best


def perturbation_figure(explanations: Sequence[Explanation]) -> LinesFigure:
    """Positive (most relevant removed first; lower is better) and negative (least first; higher is better)
    curves of every measured map, at 0, 10, ..., 90 % of the patches removed."""
    measured = [e for e in explanations if e.faithfulness is not None]
    if not measured:
        raise ValueError("no map's faithfulness was measured")
    series: dict[str, np.ndarray] = {}
    for e in measured:
        assert e.faithfulness is not None
        name = "" if len(measured) == 1 else f"{e.method} "  # one map: its name is in the title
        series[f"{name}positive"] = e.faithfulness.positive
        series[f"{name}negative"] = e.faithfulness.negative
    kind = "similarity" if measured[0].target.kind == "similarity" else "probability"
    first = measured[0].faithfulness
    assert first is not None
    whose = f"{METHODS[measured[0].method].short}: " if len(measured) == 1 else ""
    return LinesFigure(f"{whose}perturbation", np.asarray(faith.PERTURBATION_FRACTIONS),
                       series, "share of patches removed", f"target {kind}")


def deletion_figure(explanations: Sequence[Explanation]) -> LinesFigure:
    """Deletion and insertion curves (Petsiuk et al.) of every measured map."""
    measured = [e for e in explanations if e.faithfulness is not None]
    if not measured:
        raise ValueError("no map's faithfulness was measured")
    series: dict[str, np.ndarray] = {}
    for e in measured:
        assert e.faithfulness is not None
        name = "" if len(measured) == 1 else f"{e.method} "
        series[f"{name}deletion"] = e.faithfulness.deletion
        series[f"{name}insertion"] = e.faithfulness.insertion
    first = measured[0].faithfulness
    assert first is not None
    whose = f"{METHODS[measured[0].method].short}: " if len(measured) == 1 else ""
    return LinesFigure(f"{whose}deletion, insertion",
                       first.deletion_fractions, series, "share of patches deleted / inserted", "target score")


def road_figure(explanations: Sequence[Explanation]) -> LinesFigure:
    """ROAD's curves (Rong et al.): the target's score with 10 .. 90 % of the patches imputed, most relevant first
    (MoRF, lower is better) and least relevant first (LeRF, higher is better), of every map ROAD was measured on."""
    measured = [e for e in explanations if e.faithfulness is not None and e.faithfulness.road_morf is not None]
    if not measured:
        raise ValueError("no map's ROAD was measured")
    series: dict[str, np.ndarray] = {}
    for e in measured:
        f = e.faithfulness
        assert f is not None and f.road_morf is not None and f.road_lerf is not None
        name = "" if len(measured) == 1 else f"{e.method} "
        series[f"{name}MoRF"], series[f"{name}LeRF"] = f.road_morf, f.road_lerf
    whose = f"{METHODS[measured[0].method].short}: " if len(measured) == 1 else ""
    return LinesFigure(f"{whose}ROAD", np.asarray(faith.ROAD_FRACTIONS), series, "share of patches imputed",
                       "target score")


def csv_rows(explanations: Sequence[Explanation]) -> list[dict[str, object]]:
    """One row per method for the CLI's CSV: the target, the AUCs, the baseline, the pointing game and IoU."""
    rows = []
    for rank, e in enumerate(ranked(explanations), start=1):
        f = e.faithfulness
        rows.append({"rank": rank, "method": e.method, "target_index": e.target.index, "target_label": e.target.label,
                     "head": e.target.head, "baseline": f.baseline if f else "",
                     "positive_auc": f.positive_auc if f else "", "negative_auc": f.negative_auc if f else "",
                     "deletion_auc": f.deletion_auc if f else "", "insertion_auc": f.insertion_auc if f else "",
                     "pointing": "" if f is None or f.pointing is None else int(f.pointing),
                     "iou": "" if f is None or f.iou is None else f.iou, "seconds": round(e.seconds, 3)})
    return rows


# ---------------------------------------------------------------------------- built-in data, whose objects are known
@dataclass(frozen=True)
class Localisation:
    """How often each method's map finds the object on built-in images: the pointing game's hit rate and the
    mean IoU of the 60 %-mass region with the shape's patches, over `images` images explaining their label."""

    variant: str
    images: int
    pointing: dict[str, float]
    iou: dict[str, float]


def localisation(loaded: LoadedModel, methods: Sequence[str], *, variant: str = "shapes", n: int = 8, seed: int = 0,
                 job: Job | None = None) -> Localisation:
    """Explain the true class of the first n validation images of a built-in dataset (`data.synthetic`, whose
    masks are known exactly) with each method, and score where the maps point."""
    from ..data.synthetic import generate, object_masks

    size = loaded.preprocessing.size
    if size[0] != size[1]:
        raise ValueError(f"the built-in datasets are square; this model takes {size[0]}x{size[1]}")
    images, labels = generate(n, seed=seed, size=int(size[0]), variant=variant, split="val")
    masks = object_masks(n, seed=seed, size=int(size[0]), variant=variant, split="val").numpy()
    hits = {m: 0.0 for m in methods}
    ious = {m: 0.0 for m in methods}
    for image, label, mask in zip(images, labels, masks, strict=True):
        picture = Image.fromarray(image.permute(1, 2, 0).numpy())
        inputs = Inputs.unmasked(loaded, picture, size)
        session = prepare(inputs, Target(index=int(label)))
        coverage = faith.patch_coverage(mask, session.scorer.layout.patch_size)
        for name in methods:
            relevance = relevance_map(session, name, job=job)
            hits[name] += faith.pointing_hit(relevance, coverage) / n
            ious[name] += faith.mass_iou(relevance, coverage) / n
    return Localisation(variant, n, hits, ious)
