"""Position embeddings: learned 1D/2D tables, fixed sine-cosine 1D/2D, and 2D rotary (RoPE).

How each scheme treats the prefix tokens ([CLS], distillation):
- learned (1D): with `pos_embed_prefix` the table has a row per prefix token in front of the
  patch rows (ViT, DeiT); without it only patches get a position (CaiT; DeiT III and timm's
  `no_embed_class`), prefix tokens a zero row.
- learned_2d, sincos_1d, sincos_2d: prefix tokens get no position (a zero row, as MAE does);
  their own learned embedding already tells them apart.
- rope: nothing is added to the tokens; queries and keys of patch tokens are rotated by their
  (row, col) inside attention, prefix tokens are not rotated.
- none: nothing.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def sincos_1d(positions: torch.Tensor, dim: int, temperature: float = 10000.0) -> torch.Tensor:
    """(N,) positions -> (N, dim) as [sin | cos] halves (the Transformer's frequencies, MAE's layout)."""
    omega = torch.arange(dim // 2, dtype=torch.float64) / (dim / 2.0)
    omega = 1.0 / temperature**omega  # (dim/2,)
    angles = positions.to(torch.float64)[:, None] * omega[None, :]  # (N, dim/2)
    return torch.cat([angles.sin(), angles.cos()], dim=1).float()


def sincos_2d(grid: tuple[int, int], dim: int) -> torch.Tensor:
    """(gh*gw, dim): the first half encodes the row, the second the column, in raster order."""
    gh, gw = grid
    rows = torch.arange(gh).repeat_interleave(gw)
    cols = torch.arange(gw).repeat(gh)
    return torch.cat([sincos_1d(rows, dim // 2), sincos_1d(cols, dim // 2)], dim=1)


def learned_2d(table_y: torch.Tensor, table_x: torch.Tensor) -> torch.Tensor:
    """ViT App. D.4: concatenate the row's Y embedding and the column's X embedding (D/2 each).

    table_y: (gh, D/2), table_x: (gw, D/2) -> (gh*gw, D) in raster order.
    """
    gh, gw = table_y.shape[0], table_x.shape[0]
    y = table_y[:, None, :].expand(gh, gw, -1)
    x = table_x[None, :, :].expand(gh, gw, -1)
    return torch.cat([y, x], dim=-1).reshape(gh * gw, -1)


def resample_grid(
    table: torch.Tensor, old_grid: tuple[int, int], new_grid: tuple[int, int], antialias: bool
) -> torch.Tensor:
    """Bicubic resampling of patch PE rows (N_old, D) -> (N_new, D) to an explicit output size."""
    if tuple(old_grid) == tuple(new_grid):
        return table
    d = table.shape[-1]
    dtype = table.dtype
    image = table.float().reshape(1, old_grid[0], old_grid[1], d).permute(0, 3, 1, 2)  # (1, D, gh, gw)
    image = F.interpolate(image, size=tuple(new_grid), mode="bicubic", align_corners=False, antialias=antialias)
    return image.permute(0, 2, 3, 1).reshape(new_grid[0] * new_grid[1], d).to(dtype)


def resample_axis(table: torch.Tensor, new_len: int) -> torch.Tensor:
    """Resample one axis table (L_old, D/2) -> (new_len, D/2) with cubic interpolation."""
    if table.shape[0] == new_len:
        return table
    image = table.float().t()[None, :, :, None]  # (1, D/2, L, 1)
    image = F.interpolate(image, size=(new_len, 1), mode="bicubic", align_corners=False)
    return image[0, :, :, 0].t().to(table.dtype)


def rope_angles(grid: tuple[int, int], head_dim: int, theta: float) -> torch.Tensor:
    """(N, head_dim/2) rotation angle of each dimension pair of each patch (axial 2D RoPE):
    the first half of the pairs turn with the patch's row, the second half with its column."""
    gh, gw = grid
    quarter = head_dim // 4
    freqs = 1.0 / theta ** (torch.arange(quarter, dtype=torch.float64) / quarter)  # (hd/4,)
    rows = torch.arange(gh, dtype=torch.float64).repeat_interleave(gw)
    cols = torch.arange(gw, dtype=torch.float64).repeat(gh)
    angles = torch.cat([rows[:, None] * freqs, cols[:, None] * freqs], dim=1)  # (N, hd/2)
    return angles.float()


def apply_rope(x: torch.Tensor, angles: torch.Tensor, num_prefix: int) -> torch.Tensor:
    """Rotate consecutive pairs of x (B, H, T, hd) by angles (N, hd/2); prefix tokens stay put."""
    prefix, patches = x[:, :, :num_prefix], x[:, :, num_prefix:]
    pairs = patches.float().reshape(*patches.shape[:-1], -1, 2)  # (B, H, N, hd/2, 2)
    cos, sin = angles.cos(), angles.sin()  # (N, hd/2)
    a, b = pairs[..., 0], pairs[..., 1]
    rotated = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    return torch.cat([prefix, rotated.to(x.dtype)], dim=2)
