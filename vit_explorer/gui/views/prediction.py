"""Top-k classes on a fixed 0-100 % axis; for DeiT the class head, the distillation head and their
average; the masks' effect in words. What is shown comes from `explore.prediction`."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QSpinBox, QWidget

from ...explore.features import embedding_figure
from ...explore.figures import BarsFigure
from ...explore.forward import ForwardResult
from ...explore.prediction import change_text, prediction_figure
from .. import figures
from ..session import Session
from .base import Note, Table, View

MIN_HEIGHT = 120  # the chart's least height (more with more bars)
CHANGE_LINES = 2  # the masks' effect in words: two lines kept, more as the column allows


PRESENTED_ROWS = 3  # classes the prediction lists beside a presented view, at the text size a room reads


class PredictionView(View):
    key = "prediction"

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
        self.plots.setMinimumHeight(MIN_HEIGHT)
        self.body.addWidget(self.plots, 1)
        self.figure: BarsFigure | None = None
        self._drawn: figures.BarsPlot | None = None
        self.narrow = False  # presenting, in the column beside the big view (set_narrow)
        self.change = Note()  # how the masks and heads changed the prediction
        self.body.addWidget(self.change)
        self.listen(session.result_ready, self.redraw)
        self.listen(session.busy, self.note.show_busy)
        self.redraw()

    def picture(self) -> QWidget:
        return self.plots

    @property
    def shown_k(self) -> int:
        """Rows drawn: the top-k box's, at most PRESENTED_ROWS beside a presented view (the column is short; alone,
        the prediction shows them all)."""
        return min(self.top_k.value(), PRESENTED_ROWS) if self.narrow else self.top_k.value()

    def set_narrow(self, narrow: bool) -> None:
        if narrow != self.narrow:
            self.narrow = narrow
            self.restyle()

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
            self.figure = embedding_figure(result, self.shown_k)
            self._draw(self.figure)
            features = result.inputs.loaded.details.get("features")
            what = ("its image embedding (the projection to the joint image-text space) is shown"
                    if result.inputs.loaded.config.proj_dim else f"its features, {features}, are shown" if features
                    else "its pooled embedding is shown")
            self.change.setText(f"This model has no classifier (features only): {what}, "
                                f"{result.logits.numel()} numbers. The Features view finds the nearest images and "
                                "shows its patch features.")
            return
        figure = self.figure = prediction_figure(result, self.shown_k)
        if self._drawn is not None and self._drawn.matches(figure):
            self._drawn.update(figure)  # same structure: new numbers (and labels only if the classes changed)
        else:
            self._draw(figure)
        self.change.setText(change_text(result))

    def _draw(self, figure: BarsFigure) -> None:
        """A new chart, and the view at least as tall as the chart needs (a row per bar), which takes the height
        from the image panel above (it scrolls) rather than pressing the bars' labels together."""
        self.plots.ci.clear()
        with self.titles_fitting(self.plots, 1, beside=100, most=44):  # beside the labels: the title wraps, never clips
            self._drawn = figures.BarsPlot(self.plots.ci, figure)
        QTimer.singleShot(0, self, self._fit_height)  # once the chart's items know their sizes

    def _fit_height(self) -> None:
        need = self.plots.ci.effectiveSizeHint(Qt.SizeHint.MinimumSize).height()
        self.plots.setMinimumHeight(max(MIN_HEIGHT, math.ceil(need) + 2))
        # room for the sentence under the chart as it wraps in a narrow column (the dock asks one line)
        lines = 1 if self.change.compact else CHANGE_LINES
        self.change.setMinimumHeight(lines * self.change.fontMetrics().lineSpacing())

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
