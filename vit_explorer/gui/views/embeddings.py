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


@dataclass
class EmbeddingFacts:
    model_id: int  # the session's id of the model these facts describe
    components: np.ndarray | None  # (k, P, P, 3) principal components of the patch-embedding filters
    variance: np.ndarray | None  # (k,) share of variance each explains
    unfold_max_diff: float | None  # max |Conv2d - Unfold+Linear|; None for a convolutional stem
    dropout: DropoutDemo
    cls_dist: np.ndarray | None  # cosine of [CLS] and distillation token: input, then after each block


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
    return EmbeddingFacts(result.inputs.model_id, components, variance, diff, dropout_demo(result.with_pos, p),
                          result.cls_dist)


class EmbeddingsView(View):
    title = "Embeddings"

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(session, parent)
        self.facts: EmbeddingFacts | None = None
        self._curve: pg.PlotDataItem | None = None  # the [CLS]/[DIST] similarity curve, updated in place
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
        self.listen(session.result_ready, self.schedule)
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
                        and (self.facts.cls_dist is None) == (facts.cls_dist is None))
        self.facts = facts
        if same_picture:  # the filters are the model's: only the curve and the numbers change
            if self._curve is not None:
                self._curve.setData(np.arange(len(facts.cls_dist)), facts.cls_dist)
        else:
            self._draw(facts)
        self.facts_label.setText("\n".join(self._lines(facts)))

    def _draw(self, facts: EmbeddingFacts) -> None:
        self.plots.ci.clear()
        self._curve = None
        if facts.components is not None:
            explained = facts.variance[: len(facts.components)].sum()
            figures.draw_rgb_tiles(self.plots.ci, facts.components,
                                   title=f"top {len(facts.components)} components of the patch-embedding filters "
                                         f"({explained:.0%} of their variance)")
        if facts.cls_dist is not None:
            self.plots.ci.nextRow()
            x = np.arange(len(facts.cls_dist))
            plot = figures.draw_lines(self.plots.ci, x, {"cos([CLS], [DIST])": facts.cls_dist},
                                      title="[CLS] vs distillation token through the layers",
                                      xlabel="layer (0 = embedded input)", ylabel="cosine similarity")
            self._curve = plot.listDataItems()[0]

    @staticmethod
    def _lines(facts: EmbeddingFacts) -> list[str]:
        lines = []
        if facts.components is not None:
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
        if self.facts.cls_dist is not None:
            rows += [(f"cos(cls, dist) layer {i}", float(v)) for i, v in enumerate(self.facts.cls_dist)]
        return ["quantity", "value"], rows
