"""Top-k classes on a fixed 0-100 % axis; for DeiT the class head, the distillation head and their
average; the masks' effect in words. What is shown comes from `explore.prediction`."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QLabel, QSpinBox, QWidget

from ...explore.features import embedding_figure
from ...explore.figures import BarsFigure
from ...explore.forward import ForwardResult
from ...explore.prediction import change_text, prediction_figure
from .. import figures
from ..session import Session
from .base import Table, View


class PredictionView(View):
    title = "Prediction"

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(session, parent)
        self.top_k = QSpinBox()
        self.top_k.setRange(1, 20)
        self.top_k.setValue(5)
        self.top_k.setPrefix("top ")
        self.top_k.setToolTip("How many of the most likely classes to show.")
        self.top_k.valueChanged.connect(self.redraw)
        self.controls.addWidget(self.top_k)
        self.plots = pg.GraphicsLayoutWidget()
        self.plots.setMinimumHeight(120)
        self.body.addWidget(self.plots, 1)
        self.figure: BarsFigure | None = None
        self._drawn: figures.BarsPlot | None = None
        self.change = QLabel("")
        self.change.setWordWrap(True)
        self.body.addWidget(self.change)
        self.listen(session.result_ready, self.redraw)
        self.listen(session.busy, lambda busy: self.note.setText("computing…" if busy else ""))
        self.redraw()

    def picture(self) -> QWidget:
        return self.plots

    def restyle(self) -> None:
        self.plots.ci.clear()
        self._drawn = None
        self.redraw()

    def redraw(self, *_: object) -> None:
        result: ForwardResult | None = self.session.result
        if result is None:
            self.plots.ci.clear()
            self._drawn = self.figure = None
            self.change.setText("No prediction yet.")
            return
        if not result.inputs.loaded.config.num_classes:  # features only: the embedding is what there is
            self.figure = embedding_figure(result.features, self.top_k.value())
            self.plots.ci.clear()
            self._drawn = figures.BarsPlot(self.plots.ci, self.figure)
            self.change.setText("This model has no classifier (features only): its pooled embedding is shown. "
                                "The Features view finds the nearest images and shows its patch features.")
            return
        figure = self.figure = prediction_figure(result, self.top_k.value())
        if self._drawn is not None and self._drawn.matches(figure):
            self._drawn.update(figure)  # same structure: new numbers (and labels only if the classes changed)
        else:
            self.plots.ci.clear()
            self._drawn = figures.BarsPlot(self.plots.ci, figure)
        self.change.setText(change_text(result))

    def table(self) -> Table | None:
        result = self.session.result
        if result is None:
            return None
        loaded = result.inputs.loaded
        names = list(result.head_probs) if len(result.head_probs) > 1 else []
        header = ["index", "label", "prob"] + [f"prob_{n}" for n in names]
        header += ["prob_unmasked"] if result.baseline_probs is not None else []
        rows = []
        for i in np.argsort(-result.probs):
            row = [int(i), loaded.label(int(i)), float(result.probs[i])]
            row += [float(result.head_probs[n][i]) for n in names]
            if result.baseline_probs is not None:
                row.append(float(result.baseline_probs[i]))
            rows.append(row)
        return header, rows
