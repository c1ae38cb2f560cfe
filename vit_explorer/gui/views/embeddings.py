"""Embeddings: patch-embedding components, the Conv2d = Unfold + Linear check, [CLS]/distillation
similarity through the layers, and the dropout train-vs-eval demo."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QDoubleSpinBox, QLabel, QWidget

from ...analysis.dropout import DropoutDemo, dropout_demo
from ...analysis.patch_embed import embedding_components, unfold_difference
from .. import figures
from ..forward import ForwardResult, pixels_for
from ..session import Session
from .base import Table, View

MAX_TILES = 28  # filters shown of a convolutional stem's first layer


@dataclass
class EmbeddingFacts:
    model_id: int  # the session's id of the model these facts describe
    components: np.ndarray | None  # (k, h, w, 3) patchify: principal components of the filters; conv stem:
    # the first 3x3 convolution's filters
    variance: np.ndarray | None  # (k,) patchify: share of the filters' variance each component explains
    unfold_max_diff: float | None  # max |Conv2d - Unfold+Linear|; None for a convolutional stem
    dropout: DropoutDemo
    tokens: dict[str, np.ndarray]  # token-similarity curves: input, then after each block


def embedding_facts(result: ForwardResult, p: float, previous: EmbeddingFacts | None) -> EmbeddingFacts:
    """Everything this view shows, computed in a worker; the filter components of `previous` (same
    model) are reused, as they do not depend on the image."""
    import torch

    model = result.inputs.loaded.model
    pixels = pixels_for(result.inputs)
    components = variance = diff = None
    with torch.inference_mode():
        if model.config.stem == "patchify" and model.config.in_chans == 3:
            if previous is not None and previous.components is not None:
                components, variance = previous.components, previous.variance
            else:
                comps, share = embedding_components(model)
                components, variance = comps.cpu().numpy(), share.cpu().numpy()
            diff = unfold_difference(model, pixels)
        elif model.config.stem == "conv" and model.config.in_chans == 3:
            first = model.patch_embed.convs[0][0].weight  # (C_out, 3, 3, 3)
            components = first[:MAX_TILES].permute(0, 2, 3, 1).float().cpu().numpy()  # (k, 3, 3, RGB)
    tokens = {}
    if result.cls_patch is not None:
        tokens["cos([CLS], patch), mean over patches"] = result.cls_patch
    if result.cls_dist is not None:
        tokens["cos([CLS], [DIST])"] = result.cls_dist
    return EmbeddingFacts(result.inputs.model_id, components, variance, diff, dropout_demo(result.with_pos, p),
                          tokens)


class EmbeddingsView(View):
    title = "Embeddings"

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(session, parent)
        self.facts: EmbeddingFacts | None = None
        self._curves: list[pg.PlotDataItem] = []  # the token-similarity curves, updated in place
        self.p = QDoubleSpinBox()
        self.p.setRange(0.0, 0.95)
        self.p.setSingleStep(0.05)
        self.p.setValue(0.1)
        self.p.setPrefix("dropout p ")
        self.p.setToolTip("Dropout probability used in the train-vs-eval demonstration.")
        self.p.valueChanged.connect(self.refresh)
        self.toolbar.insertWidget(1, self.p)
        self.plots = pg.GraphicsLayoutWidget()
        self.body.addWidget(self.plots, 1)
        self.facts_label = QLabel("")
        self.facts_label.setWordWrap(True)
        self.body.addWidget(self.facts_label)
        self.listen(session.result_ready, self.schedule_soon)
        self.refresh()

    def refresh(self, *_: object) -> None:
        result = self.session.result
        if result is None:
            return
        p = self.p.value()
        facts = self.facts if self.facts is not None and self.facts.model_id == result.inputs.model_id else None
        self.session.run("embeddings", lambda: embedding_facts(result, p, facts), self._show)

    def _show(self, facts: EmbeddingFacts) -> None:
        same_picture = (self.facts is not None and self.facts.model_id == facts.model_id
                        and list(self.facts.tokens) == list(facts.tokens))
        self.facts = facts
        if same_picture:  # the filters are the model's: only the curves and the numbers change
            for curve, values in zip(self._curves, facts.tokens.values(), strict=True):
                curve.setData(np.arange(len(values)), values)
        else:
            self._draw(facts)
        self.facts_label.setText("\n".join(self._lines(facts)))

    def _draw(self, facts: EmbeddingFacts) -> None:
        self.plots.ci.clear()
        self._curves = []
        if facts.variance is not None:
            explained = facts.variance[: len(facts.components)].sum()
            figures.draw_rgb_tiles(self.plots.ci, facts.components,
                                   title=f"top {len(facts.components)} components of the patch-embedding filters "
                                         f"({explained:.0%} of their variance)")
        elif facts.components is not None:
            figures.draw_rgb_tiles(self.plots.ci, facts.components,
                                   title=f"{len(facts.components)} filters of the convolutional stem's first 3×3 "
                                         "convolution")
        if facts.tokens:
            self.plots.ci.nextRow()
            x = np.arange(len(next(iter(facts.tokens.values()))))
            plot = figures.draw_lines(self.plots.ci, x, facts.tokens, title="token similarity through the layers",
                                      xlabel="layer (0 = embedded input)", ylabel="cosine similarity")
            self._curves = plot.listDataItems()

    @staticmethod
    def _lines(facts: EmbeddingFacts) -> list[str]:
        lines = []
        if facts.unfold_max_diff is not None:
            lines.append(f"Conv2d(k=P, s=P) against Unfold + Linear with the same weights: largest difference "
                         f"{facts.unfold_max_diff:.2e} — the patchify stem is one linear map per patch.")
        else:
            lines.append("This model has a convolutional stem: its patch embedding is not one linear map per patch, "
                         "so there are no filter components and no Unfold + Linear identity.")
        d = facts.dropout
        lines.append(f"Dropout p={d.p:.2f} on the embedded tokens: train mode zeroes {d.zeros_train:.1%} of the values "
                     f"(before: {d.zeros_before:.1%}) and scales the rest by 1/(1−p) (error {d.scale_error:.1e}); "
                     f"eval mode zeroes {d.zeros_eval:.1%} and "
                     f"{'leaves the input unchanged' if d.eval_unchanged else 'CHANGES the input'}.")
        return lines

    def table(self) -> Table | None:
        if self.facts is None:
            return None
        d = self.facts.dropout
        rows: list[tuple[str, Any]] = [("dropout p", d.p), ("zeros before", d.zeros_before),
                                       ("zeros train mode", d.zeros_train), ("zeros eval mode", d.zeros_eval),
                                       ("train scale error", d.scale_error), ("eval unchanged", d.eval_unchanged)]
        if self.facts.unfold_max_diff is not None:
            rows.append(("conv vs unfold+linear max diff", self.facts.unfold_max_diff))
            rows += [(f"component {i} variance share", float(v)) for i, v in enumerate(self.facts.variance)]
        for name, values in self.facts.tokens.items():
            rows += [(f"{name} layer {i}", float(v)) for i, v in enumerate(values)]
        return ["quantity", "value"], rows
