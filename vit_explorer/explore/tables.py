"""The Parameters view's and the report's numbers: parameters per stage, layer and tensor, and the
compute of one image per stage."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..analysis.params import ParameterTable, flops_per_stage, parameter_table
from ..models import VisionTransformer
from .figures import BarsFigure

FLOPS_NOTE = ("FLOPs count 2 per multiply-add of the matrix products and convolutions for one image; the papers' "
              "'FLOPs' (e.g. 17.6 G for ViT-B/16) count multiply-adds, given here as multiply_adds")


@dataclass(frozen=True)
class ModelTables:
    params: ParameterTable
    flops: dict[str, int]  # per stage, 2 per multiply-add
    size: tuple[int, int]  # the (H, W) the compute is for

    @property
    def total_flops(self) -> int:
        return sum(self.flops.values())

    def params_figure(self) -> BarsFigure:
        by_stage = self.params.by_stage()
        return BarsFigure(f"parameters per stage (total {self.params.total / 1e6:.2f} M)", tuple(by_stage),
                          np.asarray([c / 1e6 for c in by_stage.values()], dtype=np.float64), "millions of parameters",
                          value_format="{:.3f} M", horizontal=False)

    def compute_text(self) -> str:
        """One line: the multiply-adds (as papers count 'FLOPs') and the FLOPs of one image at this size."""
        macs = self.total_flops / 2
        return (f"one {self.size[0]}×{self.size[1]} image: {macs / 1e9:.3g} G multiply-adds "
                f"({self.total_flops / 1e9:.3g} GFLOPs at 2 per multiply-add)")

    def at_size(self, model: VisionTransformer, size: tuple[int, int]) -> ModelTables:
        """The same parameters, the compute at another input size (the size changes only the compute)."""
        size = (int(size[0]), int(size[1]))
        return self if size == self.size else ModelTables(self.params, flops_per_stage(model.config, size), size)

    def summary(self) -> dict[str, Any]:
        return {"flops": self.flops, "flops_total": self.total_flops,
                "multiply_adds": {k: v // 2 for k, v in self.flops.items()},
                "multiply_adds_total": self.total_flops // 2, "flops_note": FLOPS_NOTE}


def model_tables(model: VisionTransformer, size: tuple[int, int]) -> ModelTables:
    return ModelTables(parameter_table(model), flops_per_stage(model.config, size), (int(size[0]), int(size[1])))
