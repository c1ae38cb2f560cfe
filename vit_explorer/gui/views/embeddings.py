"""Embeddings: patch-embedding components, the Conv2d = Unfold + Linear check, [CLS]/distillation
similarity through the layers, and the dropout train-vs-eval demo."""

from __future__ import annotations

from typing import Any

import pyqtgraph as pg
from PySide6.QtWidgets import QDoubleSpinBox, QWidget

from ...explore.embeddings import EmbeddingFacts, embedding_facts
from .. import figures
from ..session import Session
from .base import Note, Table, View


class EmbeddingsView(View):
    key = "embeddings"

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
        self.controls.addWidget(self.p)
        self.plots = pg.GraphicsLayoutWidget()
        self.body.addWidget(self.plots, 1)
        self.facts_label = Note()  # the Conv2d = Unfold + Linear check and the dropout demonstration
        self.body.addWidget(self.facts_label)
        self.listen(session.result_ready, self.schedule_soon)
        self.refresh()

    def picture(self) -> QWidget:
        return self.plots

    def refresh(self, *_: object) -> None:
        result = self.session.result
        if result is None:
            return
        p = self.p.value()
        facts = self.facts if self.facts is not None and self.facts.model_id == result.inputs.model_id else None
        self.run_for_model(result.inputs.model_id, "embeddings", lambda: embedding_facts(result, p, facts), self._show)

    def _show(self, facts: EmbeddingFacts) -> None:
        same_picture = (self.facts is not None and self.facts.model_id == facts.model_id
                        and list(self.facts.tokens) == list(facts.tokens))
        self.facts = facts
        # the filters are the model's: only the curves and the numbers change
        if same_picture and (self._curves or not self.shows("tokens")):
            x = facts.tokens_figure().x  # the drawn figure's x, so the curves stay on its ticks
            for curve, values in zip(self._curves, facts.tokens.values(), strict=True):
                curve.setData(x, values)
        else:
            self._draw(facts)
        self.facts_label.setText("\n".join(self._lines(facts)))

    def restyle(self) -> None:
        if self.facts is not None:
            self._draw(self.facts)

    def _draw(self, facts: EmbeddingFacts) -> None:
        self.plots.ci.clear()
        self._curves = []
        if facts.filters is not None and self.shows("filters"):
            figures.draw(self.plots.ci, facts.filters.figure())
        if facts.tokens and self.shows("tokens"):
            self.plots.ci.nextRow()
            plot = figures.draw(self.plots.ci, facts.tokens_figure())
            self._curves = plot.listDataItems()

    @staticmethod
    def _lines(facts: EmbeddingFacts) -> list[str]:
        lines = []
        if facts.unfold_max_diff is not None:
            lines.append(f"Conv2d(k=P, s=P) against Unfold + Linear with the same weights: largest difference "
                         f"{facts.unfold_max_diff:.2e} — the patchify stem is one linear map per patch.")
        else:
            kind = "a hybrid ResNet stem" if facts.stem == "hybrid" else "a convolutional stem"
            lines.append(f"This model has {kind}: its patch embedding is not one linear map per patch, "
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
        if self.facts.filters is not None and self.facts.filters.variance is not None:
            rows += [(f"component {i} variance share", float(v)) for i, v in enumerate(self.facts.filters.variance)]
        for name, values in self.facts.tokens.items():
            rows += [(f"{name} layer {i}", float(v)) for i, v in enumerate(values)]
        return ["quantity", "value"], rows
