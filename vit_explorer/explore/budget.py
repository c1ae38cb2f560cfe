"""One work budget for the dataset analyses, checked before the work starts (as `checkpoints.memory.check_run`
is for a forward pass): the images a built-in set draws and the features every image keeps must fit in half the
memory free here. A refusal names the figure and the way out, the largest `--limit` that fits.

Every dataset command and the Dataset view open their images through `dataset.open_source` and extract through
`dataset.extract`, which call these checks: a new command is covered without new code. Fitting a probe is bounded
in `analysis.probes` (a cheaper closed-form probe above a size), a patching sweep by its token count."""

from __future__ import annotations

import torch

from ..checkpoints.files import size_text
from ..checkpoints.memory import BudgetError, available_bytes
from ..models import ViTConfig

SHARE = 0.5  # of the free memory one analysis may plan to hold (the model, the decoding and the figures need room)


def check_images(where: str, images: int, bytes_per_image: int, what: str) -> None:
    """BudgetError when `images` of `bytes_per_image` each would take more than SHARE of the free memory."""
    free = available_bytes(torch.device("cpu"))
    needed = images * bytes_per_image
    if free is None or needed <= free * SHARE:
        return
    most = int(free * SHARE // max(bytes_per_image, 1))
    way_out = f"use --limit {most:,} or fewer (the Dataset view: at most {most:,} images)" if most else \
        "free some memory first"
    raise BudgetError(f"{where}: {what} of {images:,} images need about {size_text(needed)}, more than the "
                      f"{size_text(int(free * SHARE))} (half the memory free here) one analysis may hold; {way_out}")


def pixel_bytes(side: int) -> int:
    """Bytes a built-in image of `side` x `side` takes while its set is drawn (uint8 RGB, twice: drawn, joined)."""
    return 2 * 3 * side * side


def feature_bytes(config: ViTConfig, patches: int) -> int:
    """Bytes every image's features take (explore.dataset.Features): per token state a readout token and the
    patch mean (float32), `patches` sampled patch tokens (float16) and the norms, plus the pooled output."""
    states = config.depth + config.class_attn_depth + 1
    width = config.embed_dim
    per_state = width * (4 + 4 + 2 * patches) + 4 * (3 + config.num_prefix_tokens)
    return states * per_state + 4 * max(config.pooled_dim, width) + 8 + 4 * patches
