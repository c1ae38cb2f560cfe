"""Position embeddings: the table of schemes, and their learned 1D/2D tables, fixed sine-cosine
1D/2D and 2D rotary (RoPE) functions.

`SCHEMES` is the one place a scheme is described: config validation, the parameter estimate, the
model's parameters and its per-token embedding, the builder's labels and the analyses all read it.
Adding a scheme means adding one `Scheme` subclass here (and its tests).

How each scheme treats the prefix tokens ([CLS], distillation):
- learned (1D): with `pos_embed_prefix` the table has a row per prefix token in front of the
  patch rows (ViT, DeiT); without it only patches get a position (CaiT; DeiT III and timm's
  `no_embed_class`), prefix tokens a zero row.
- learned_2d, sincos_1d, sincos_2d, sincos_2d_xy (AIMv2 native: the column's half first): prefix
  tokens get no position (a zero row, as MAE does); their own learned embedding already tells them apart.
- rope: nothing is added to the tokens; queries and keys of patch tokens are rotated by their
  (row, col) inside attention, prefix tokens are not rotated.
- learned+rope (EVA-02): both of the above.
- rope_dinov3 (DINOv3): RoPE on patch centres normalised to [-1, 1], rotating the two halves of
  each head against each other; learned+rope_xy (Perception Encoder): a learned table and RoPE
  whose positions start at `rope_offset`, the column's frequencies first.
- rel_bias (BEiT): nothing is added to the tokens; each block adds a learned bias to the attention
  logits, one per head for each (row, col) offset between query and key patch; a query or key that
  is a prefix token takes one of three more learned entries (prefix to patch, patch to prefix,
  prefix to prefix).
- none: nothing.

Register tokens (DINOv2 with registers) never get a position: their rows are zero, or their
attention bias the prefix entries'.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from .config import ViTConfig
    from .vit import VisionTransformer


def sincos_1d(positions: torch.Tensor, dim: int, temperature: float = 10000.0) -> torch.Tensor:
    """(N,) positions -> (N, dim) as [sin | cos] halves (the Transformer's frequencies, MAE's layout)."""
    omega = torch.arange(dim // 2, dtype=torch.float64) / (dim / 2.0)
    omega = 1.0 / temperature**omega  # (dim/2,)
    angles = positions.to(torch.float64)[:, None] * omega[None, :]  # (N, dim/2)
    return torch.cat([angles.sin(), angles.cos()], dim=1).float()


def sincos_2d(grid: tuple[int, int], dim: int, cols_first: bool = False) -> torch.Tensor:
    """(gh*gw, dim): the first half encodes the row, the second the column, in raster order
    (`cols_first`: the column first, AIMv2's native-resolution table)."""
    gh, gw = grid
    rows = torch.arange(gh).repeat_interleave(gw)
    cols = torch.arange(gw).repeat(gh)
    first, second = (cols, rows) if cols_first else (rows, cols)
    return torch.cat([sincos_1d(first, dim // 2), sincos_1d(second, dim // 2)], dim=1)


def learned_2d(table_y: torch.Tensor, table_x: torch.Tensor) -> torch.Tensor:
    """ViT App. D.4: concatenate the row's Y embedding and the column's X embedding (D/2 each).

    table_y: (gh, D/2), table_x: (gw, D/2) -> (gh*gw, D) in raster order.
    """
    gh, gw = table_y.shape[0], table_x.shape[0]
    y = table_y[:, None, :].expand(gh, gw, -1)
    x = table_x[None, :, :].expand(gh, gw, -1)
    return torch.cat([y, x], dim=-1).reshape(gh * gw, -1)


def resample_grid(
    table: torch.Tensor, old_grid: tuple[int, int], new_grid: tuple[int, int], antialias: bool,
    mode: str = "bicubic",
) -> torch.Tensor:
    """Bicubic (or bilinear: SigLIP 2) resampling of patch PE rows (N_old, D) -> (N_new, D) to an explicit
    output size."""
    if tuple(old_grid) == tuple(new_grid):
        return table
    d = table.shape[-1]
    dtype = table.dtype
    image = table.float().reshape(1, old_grid[0], old_grid[1], d).permute(0, 3, 1, 2)  # (1, D, gh, gw)
    image = F.interpolate(image, size=tuple(new_grid), mode=mode, align_corners=False, antialias=antialias)
    return image.permute(0, 2, 3, 1).reshape(new_grid[0] * new_grid[1], d).to(dtype)


def resample_axis(table: torch.Tensor, new_len: int) -> torch.Tensor:
    """Resample one axis table (L_old, D/2) -> (new_len, D/2) with cubic interpolation."""
    if table.shape[0] == new_len:
        return table
    image = table.float().t()[None, :, :, None]  # (1, D/2, L, 1)
    image = F.interpolate(image, size=(new_len, 1), mode="bicubic", align_corners=False)
    return image[0, :, :, 0].t().to(table.dtype)


def rope_angles(grid: tuple[int, int], head_dim: int, theta: float,
                ref_grid: tuple[int, ...] = (), offset: float = 0.0, cols_first: bool = False) -> torch.Tensor:
    """(N, head_dim/2) rotation angle of each dimension pair of each patch (axial 2D RoPE):
    the first half of the pairs turn with the patch's row, the second half with its column
    (`cols_first`: the other way round, timm's grid_indexing='xy' of the Perception Encoder).

    Positions are the row and column indices plus `offset`, or with `ref_grid` (rows, cols) rescaled
    so that any grid spans the reference one (EVA-02's `ref_feat_shape`: position / grid side * reference side).
    """
    gh, gw = grid
    quarter = head_dim // 4
    freqs = 1.0 / theta ** (torch.arange(quarter, dtype=torch.float64) / quarter)  # (hd/4,)
    rows = torch.arange(gh, dtype=torch.float64).repeat_interleave(gw) + offset
    cols = torch.arange(gw, dtype=torch.float64).repeat(gh) + offset
    if ref_grid:
        rows, cols = rows / gh * ref_grid[0], cols / gw * ref_grid[1]
    first, second = (cols, rows) if cols_first else (rows, cols)
    angles = torch.cat([first[:, None] * freqs, second[:, None] * freqs], dim=1)  # (N, hd/2)
    return angles.float()


def rope_angles_dinov3(grid: tuple[int, int], head_dim: int, theta: float, offset: float = 0.0) -> torch.Tensor:
    """(N, head_dim/2) DINOv3's RoPE angles: patch centres ((index + 0.5 + offset) / side) mapped to
    [-1, 1], times 2 pi over periods theta^(2k / (head_dim/2)); rows' quarter first, then columns'."""
    gh, gw = grid
    quarter = head_dim // 4
    periods = theta ** (2.0 * torch.arange(quarter, dtype=torch.float32) / (head_dim // 2))  # (hd/4,)
    rows = ((torch.arange(0.5, gh, dtype=torch.float32) + offset) / gh).repeat_interleave(gw) * 2.0 - 1.0  # (N,)
    cols = ((torch.arange(0.5, gw, dtype=torch.float32) + offset) / gw).repeat(gh) * 2.0 - 1.0
    coords = torch.stack([rows, cols], dim=1)  # (N, 2)
    return (2 * torch.pi * coords[:, :, None] / periods[None, None, :]).flatten(1)  # (N, hd/2)


def apply_rope(x: torch.Tensor, angles: torch.Tensor, num_prefix: int, half: bool = False) -> torch.Tensor:
    """Rotate pairs of x (B, H, T, hd) by angles (N, hd/2); prefix tokens stay put. The pairs are
    consecutive dimensions (2i, 2i+1), or with `half` dimension i and i + hd/2 (DINOv3's rotate-half)."""
    prefix, patches = x[:, :, :num_prefix], x[:, :, num_prefix:]
    if half:
        a, b = patches.float().chunk(2, dim=-1)  # (B, H, N, hd/2) each
    else:
        pairs = patches.float().reshape(*patches.shape[:-1], -1, 2)  # (B, H, N, hd/2, 2)
        a, b = pairs[..., 0], pairs[..., 1]
    cos, sin = angles.cos(), angles.sin()  # (N, hd/2)
    turned = (a * cos - b * sin, a * sin + b * cos)
    rotated = torch.cat(turned, dim=-1) if half else torch.stack(turned, dim=-1).flatten(-2)
    return torch.cat([prefix, rotated.to(x.dtype)], dim=2)


@functools.lru_cache(maxsize=16)
def relative_index(grid: tuple[int, int], num_prefix: int) -> torch.Tensor:
    """(T, T) row of the relative-position bias table for each (query, key) pair, T = num_prefix + N.

    Patch pairs index their offset (dr, dc) in a (2gh-1, 2gw-1) table in raster order; then come
    three entries shared by every prefix token (BEiT's [CLS]): prefix -> patch, patch -> prefix,
    prefix -> prefix (timm's and HF's `gen_relative_position_index`, for any number of prefix tokens).
    Cached, so made outside inference mode whoever asks first: an inference tensor would break training.
    """
    with torch.inference_mode(False):
        return _relative_index(grid, num_prefix)


def _relative_index(grid: tuple[int, int], num_prefix: int) -> torch.Tensor:
    gh, gw = grid
    rows = torch.arange(gh).repeat_interleave(gw)
    cols = torch.arange(gw).repeat(gh)
    offsets = (rows[:, None] - rows[None, :] + gh - 1) * (2 * gw - 1) + (cols[:, None] - cols[None, :] + gw - 1)
    n_rel = (2 * gh - 1) * (2 * gw - 1)
    t = num_prefix + gh * gw
    index = torch.full((t, t), n_rel + 2, dtype=torch.long)  # prefix -> prefix
    index[:num_prefix, num_prefix:] = n_rel  # prefix -> patch
    index[num_prefix:, :num_prefix] = n_rel + 1  # patch -> prefix
    index[num_prefix:, num_prefix:] = offsets
    return index


def resample_offsets(table: torch.Tensor, old_grid: tuple[int, int], new_grid: tuple[int, int]) -> torch.Tensor:
    """A relative-position bias table (rows, heads) for another grid: the (2gh-1, 2gw-1) offset part
    resampled bilinearly (as HF's BEiT does at any input size), the three prefix entries kept."""
    if tuple(old_grid) == tuple(new_grid):
        return table
    old = (2 * old_grid[0] - 1, 2 * old_grid[1] - 1)
    new = (2 * new_grid[0] - 1, 2 * new_grid[1] - 1)
    n_old = old[0] * old[1]
    image = table[:n_old].float().t().reshape(1, -1, *old)  # (1, heads, 2gh-1, 2gw-1)
    image = F.interpolate(image, size=new, mode="bilinear", align_corners=False)
    return torch.cat([image.reshape(-1, new[0] * new[1]).t().to(table.dtype), table[n_old:]])


# ---------------------------------------------------------------------------- the schemes
class Scheme:
    """One position-embedding scheme. The defaults describe a scheme that adds nothing and has no
    parameters; subclasses override what their scheme does."""

    name = ""  # the value of ViTConfig.pos_embed
    label = ""  # what the builder and the figures call it
    additive = False  # adds one vector per token to the embedded tokens (the PE similarity views need this)
    resampled = False  # a learned table trained for one grid, resampled for other grids
    prefix_table = False  # the table can hold rows for prefix tokens (`pos_embed_prefix`)
    rotates = False  # turns queries and keys inside attention (RoPE)
    rope_half = False  # RoPE turns dimension i with i + head_dim/2 (DINOv3), not 2i with 2i+1
    note = "no position embedding: the model sees the patches as an unordered set"  # what the PE views say

    def check(self, config: ViTConfig) -> str | None:
        """Why this scheme cannot build `config` (a message saying what to change), or None."""
        return None

    def num_parameters(self, config: ViTConfig) -> int:
        return 0

    def prefix_rows(self, config: ViTConfig) -> int:
        """How many learned rows the scheme keeps for prefix tokens (the others get zero rows)."""
        return 0

    def create(self, config: ViTConfig) -> dict[str, nn.Parameter]:
        """The model's parameters for this scheme by attribute name, each starting with "pos_embed" (the
        parameter table and weight decay recognise them by it); the model initialises them."""
        return {}

    def table(self, model: VisionTransformer, grid: tuple[int, int]) -> torch.Tensor | None:
        """The additive embedding for a grid: (prefix_rows + gh*gw, D), prefix rows first, patches in
        raster order; None when the scheme adds nothing."""
        return None

    def rotary(self, config: ViTConfig, grid: tuple[int, int]) -> torch.Tensor | None:
        """Rotation angles (gh*gw, head_dim/2) applied to queries and keys inside attention; None if none."""
        return None

    def create_attention(self, config: ViTConfig) -> dict[str, nn.Parameter]:
        """Parameters each self-attention block owns for this scheme, by attribute name (counted in
        `num_parameters` for all blocks together)."""
        return {}

    def attention_bias(self, block: nn.Module, config: ViTConfig, grid: tuple[int, int],
                       num_prefix: int) -> torch.Tensor | None:
        """The bias one self-attention block adds to its attention logits, (heads, T, T); None if none."""
        return None


class Learned1D(Scheme):
    name, label, additive = "learned", "learned 1D", True
    resampled = prefix_table = True
    note = "a learned table with one row per patch (ViT); resampled bicubically for other grids"

    def prefix_rows(self, config: ViTConfig) -> int:
        """[CLS] and the distillation token with `pos_embed_prefix`; never register tokens."""
        return config.num_prefix_tokens - config.reg_tokens if config.pos_embed_prefix else 0

    def num_parameters(self, config: ViTConfig) -> int:
        return (config.num_patches + self.prefix_rows(config)) * config.embed_dim

    def create(self, config: ViTConfig) -> dict[str, nn.Parameter]:
        rows = config.num_patches + self.prefix_rows(config)
        return {"pos_embed": nn.Parameter(torch.zeros(1, rows, config.embed_dim))}

    def table(self, model: VisionTransformer, grid: tuple[int, int]) -> torch.Tensor:
        cfg = model.config
        table = model.get_parameter("pos_embed")[0]  # (prefix rows + N, D)
        if tuple(grid) == cfg.grid_size:
            return table  # the native grid: no resampling, no copy
        k = self.prefix_rows(cfg)  # prefix rows stay out of the interpolation
        return torch.cat([table[:k], resample_grid(table[k:], cfg.grid_size, grid, cfg.pe_resample_antialias,
                                                   cfg.pe_resample)])


class Learned2D(Scheme):
    name, label, additive = "learned_2d", "learned 2D", True
    resampled = True
    note = "learned row and column tables of D/2 each, concatenated (ViT App. D.4)"

    def check(self, config: ViTConfig) -> str | None:
        if config.embed_dim % 2:
            return (f"learned_2d concatenates a row and a column table of D/2: "
                    f"embed_dim {config.embed_dim} must be even")
        return None

    def num_parameters(self, config: ViTConfig) -> int:
        gh, gw = config.grid_size
        return (gh + gw) * config.embed_dim // 2

    def create(self, config: ViTConfig) -> dict[str, nn.Parameter]:
        gh, gw = config.grid_size
        half = config.embed_dim // 2
        return {"pos_embed_y": nn.Parameter(torch.zeros(gh, half)), "pos_embed_x": nn.Parameter(torch.zeros(gw, half))}

    def table(self, model: VisionTransformer, grid: tuple[int, int]) -> torch.Tensor:
        return learned_2d(resample_axis(model.get_parameter("pos_embed_y"), grid[0]),
                          resample_axis(model.get_parameter("pos_embed_x"), grid[1]))


class SinCos1D(Scheme):
    name, label, additive = "sincos_1d", "sine-cosine 1D", True
    note = "fixed sines and cosines of the raster index (the Transformer's), no parameters"

    def check(self, config: ViTConfig) -> str | None:
        if config.embed_dim % 2:
            return f"sine-cosine position embeddings need an even embed_dim, got {config.embed_dim}"
        return None

    def table(self, model: VisionTransformer, grid: tuple[int, int]) -> torch.Tensor:
        return sincos_1d(torch.arange(grid[0] * grid[1]), model.config.embed_dim)


class SinCos2D(Scheme):
    name, label, additive = "sincos_2d", "sine-cosine 2D", True
    note = "fixed sines and cosines of the row (first half) and the column (second half), as MAE"

    def check(self, config: ViTConfig) -> str | None:
        if config.embed_dim % 4:
            return (f"{self.name} splits D into sin/cos of rows and columns: "
                    f"embed_dim {config.embed_dim} must be divisible by 4")
        return None

    def table(self, model: VisionTransformer, grid: tuple[int, int]) -> torch.Tensor:
        return sincos_2d(grid, model.config.embed_dim)


class SinCos2DXY(SinCos2D):
    """AIMv2's native-resolution models (HF is_native=True): SinCos2D's table with the column's half first,
    computed for each input's grid (SinCos2D's checks)."""

    name, label = "sincos_2d_xy", "sine-cosine 2D, columns first (AIMv2)"
    note = ("fixed sines and cosines of the column (first half) and the row (second half), for any grid "
            "(AIMv2's native-resolution models)")

    def table(self, model: VisionTransformer, grid: tuple[int, int]) -> torch.Tensor:
        return sincos_2d(grid, model.config.embed_dim, cols_first=True)


class NoPosition(Scheme):
    name, label = "none", "none"


class Rotary2D(Scheme):
    name, label = "rope", "RoPE (2D rotary)"
    rotates = True
    note = "rotary position embedding acts inside attention: queries and keys turn by the patch's row and column"

    def check(self, config: ViTConfig) -> str | None:
        if config.head_dim % 4:
            return f"2D RoPE rotates pairs along two axes: head_dim {config.head_dim} must be divisible by 4"
        return None

    def rotary(self, config: ViTConfig, grid: tuple[int, int]) -> torch.Tensor:
        return rope_angles(grid, config.head_dim, config.rope_theta, config.rope_ref_grid, config.rope_offset)


class LearnedRotary(Learned1D, Rotary2D):
    """EVA-02: a learned absolute table added to the tokens (Learned1D's), and RoPE inside attention
    (Rotary2D's checks and angles)."""

    name, label = "learned+rope", "learned 1D + RoPE (EVA-02)"
    note = "a learned table added to the tokens (resampled for other grids), and RoPE inside attention"


class RotaryDinoV3(Rotary2D):
    """DINOv3: RoPE on normalised patch centres, so every grid spans [-1, 1] (Rotary2D's checks)."""

    name, label = "rope_dinov3", "RoPE on normalised centres (DINOv3)"
    rope_half = True
    note = ("rotary position embedding acts inside attention: queries and keys turn by the patch centre's row and "
            "column, scaled to [-1, 1] on any grid (DINOv3)")

    def check(self, config: ViTConfig) -> str | None:
        if config.rope_ref_grid:
            return "DINOv3's RoPE spans [-1, 1] on every grid, so it has no reference grid: set rope_ref_grid=()"
        return super().check(config)

    def rotary(self, config: ViTConfig, grid: tuple[int, int]) -> torch.Tensor:
        return rope_angles_dinov3(grid, config.head_dim, config.rope_theta, config.rope_offset)


class LearnedRotaryXY(LearnedRotary):
    """Perception Encoder: a learned table, and RoPE whose positions start at `rope_offset`, on the
    reference grid, the column's frequencies before the row's (timm's grid_indexing='xy')."""

    name, label = "learned+rope_xy", "learned 1D + RoPE, columns first (PE)"

    def rotary(self, config: ViTConfig, grid: tuple[int, int]) -> torch.Tensor:
        return rope_angles(grid, config.head_dim, config.rope_theta, config.rope_ref_grid, config.rope_offset,
                           cols_first=True)


class RelativeBias(Scheme):
    name, label = "rel_bias", "relative position bias (BEiT)"
    note = ("relative position bias acts inside attention: each self-attention block adds a learned bias per "
            "head for the offset between query and key patches")

    @staticmethod
    def table_rows(grid: tuple[int, int]) -> int:
        return (2 * grid[0] - 1) * (2 * grid[1] - 1) + 3

    def num_parameters(self, config: ViTConfig) -> int:
        return config.depth * self.table_rows(config.grid_size) * config.num_heads

    def create_attention(self, config: ViTConfig) -> dict[str, nn.Parameter]:
        rows = self.table_rows(config.grid_size)
        return {"relative_position_bias_table": nn.Parameter(torch.zeros(rows, config.num_heads))}

    def attention_bias(self, block: nn.Module, config: ViTConfig, grid: tuple[int, int],
                       num_prefix: int) -> torch.Tensor:
        built = block.get_parameter("attn.relative_position_bias_table")  # (rows, heads) for the built grid
        table = resample_offsets(built, config.grid_size, grid)
        index = relative_index(tuple(grid), num_prefix).to(table.device)
        return table[index].permute(2, 0, 1)  # (heads, T, T)


SCHEMES: dict[str, Scheme] = {s.name: s for s in (Learned1D(), Learned2D(), SinCos1D(), SinCos2D(), NoPosition(),
                                                  Rotary2D(), LearnedRotary(), RelativeBias(),
                                                  RotaryDinoV3(), LearnedRotaryXY(), SinCos2DXY())}
