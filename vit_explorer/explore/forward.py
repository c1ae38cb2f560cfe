"""The forward pass every view shares: one call with the captures they draw, run in a worker."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image

from ..analysis.tokens import cls_dist_similarity, patch_cls_similarity
from ..checkpoints import LoadedModel
from ..models import TokenLayout

CAPTURE = ("attentions", "hidden_states", "with_pos", "embedded")  # what the views draw (CaiT: class attention too)


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

    @property
    def masked(self) -> bool:
        return bool(self.mask.any()) or bool((self.head_mask < 1).any())


@dataclass
class ForwardResult:
    inputs: Inputs
    layout: TokenLayout
    display: np.ndarray  # (H, W, 3) uint8: the image as the model sees it, de-normalised
    logits: torch.Tensor  # (classes,) on the CPU (DeiT: the average of both heads; no classifier: pooled features)
    probs: np.ndarray  # (classes,) softmax of the logits
    head_probs: dict[str, np.ndarray]  # per head ('cls', 'dist' or 'gap')
    baseline_probs: np.ndarray | None  # without any mask or head mask (None when nothing is masked)
    attentions: list[torch.Tensor]  # per block (1, heads, T, T) on the CPU, as the analyses take them
    class_attentions: list[torch.Tensor]  # CaiT: per class-attention block (1, heads, 1, 1 + N)
    with_pos: torch.Tensor | None = None  # (1, T, D) tokens after adding the position embedding, on the CPU
    cls_dist: np.ndarray | None = None  # DeiT: cosine of [CLS] and distillation token, input then each block
    cls_patch: np.ndarray | None = None  # mean cosine of [CLS] with the patch tokens, input then each block
    seconds: float = 0.0

    @property
    def num_classes(self) -> int:
        return int(self.probs.shape[0])


def pixels_for(inputs: Inputs) -> torch.Tensor:
    """The image preprocessed as the source does it, at the chosen size: (1, 3, H, W)."""
    pre = inputs.loaded.preprocessing.with_size(inputs.size)
    return pre(inputs.image).to(inputs.loaded.device)


def run_forward(inputs: Inputs, baseline: np.ndarray | None = None) -> ForwardResult:
    """Run the model with the masks and capture attention; also the unmasked baseline if needed."""
    start = time.perf_counter()
    loaded = inputs.loaded
    model = loaded.model
    pixels = pixels_for(inputs)
    device = pixels.device
    mask = torch.from_numpy(inputs.mask.reshape(-1)).to(device) if inputs.mask.any() else None
    head_mask = None
    if (inputs.head_mask < 1).any():
        head_mask = torch.from_numpy(inputs.head_mask.astype(np.float32)).to(device)
    capture = list(CAPTURE)
    if loaded.config.class_attn_depth:
        capture.append("class_attentions")
    with torch.inference_mode():
        out = model.forward_intermediates(pixels, mask=mask, head_mask=head_mask, capture=capture)
        if inputs.masked and baseline is None:
            baseline = model(pixels)[0].float().softmax(-1).cpu().numpy()
    layout: TokenLayout = out["layout"]
    logits = out["logits"][0].float().cpu()
    probs = logits.softmax(-1).numpy()
    head_probs = {k: v[0].float().softmax(-1).cpu().numpy() for k, v in out["head_logits"].items()}
    attentions = [a.float().cpu() for a in out["attentions"]]  # (1, heads, T, T) per block
    class_attn = [a.float().cpu() for a in out.get("class_attentions", [])]  # (1, heads, 1, 1+N)
    states = [out["embedded"]] + out["hidden_states"]  # (1, T, D) each
    cls_dist = cls_patch = None
    if "dist" in layout.prefix_names:  # DeiT: how alike [CLS] and the distillation token become
        cls_dist = cls_dist_similarity(states, layout)[0].cpu().numpy()
    if "cls" in layout.prefix_names:
        cls_patch = np.asarray([float(patch_cls_similarity(s, layout).mean()) for s in states])
    pre = loaded.preprocessing
    return ForwardResult(
        inputs=inputs, layout=layout, display=pre.to_image(pixels), logits=logits, probs=probs,
        head_probs=head_probs, baseline_probs=baseline if inputs.masked else None, attentions=attentions,
        class_attentions=class_attn, with_pos=out["with_pos"].float().cpu(), cls_dist=cls_dist,
        cls_patch=cls_patch,
        seconds=time.perf_counter() - start,
    )
