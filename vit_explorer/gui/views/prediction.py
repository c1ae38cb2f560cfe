"""Top-k classes; for DeiT the class head, the distillation head and their average; the masks' effect."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QLabel, QSpinBox, QWidget

from .. import figures, live
from ..forward import ForwardResult
from ..session import Session
from .base import Table, View

HEAD_TITLES = {"cls": "class head", "dist": "distillation head", "gap": "pooled head"}


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
        self.toolbar.insertWidget(1, self.top_k)
        self.plots = pg.GraphicsLayoutWidget()
        self.plots.setMinimumHeight(220)
        self.body.addWidget(self.plots, 1)
        self._key: tuple | None = None  # structure of the drawn figure: (k, titles)
        self._bars: list[tuple[pg.PlotItem, pg.BarGraphItem]] = []
        self.change = QLabel("")
        self.change.setWordWrap(True)
        self.body.addWidget(self.change)
        self.listen(session.result_ready, self.redraw)
        self.listen(session.busy, lambda busy: self.note.setText("computing…" if busy else ""))
        self.redraw()

    def picture(self) -> QWidget:
        return self.plots

    def _labels(self, indices: np.ndarray) -> list[str]:
        labels = self.session.loaded.labels
        return [_short(labels[i]) for i in indices]

    def redraw(self, *_: object) -> None:
        result: ForwardResult | None = self.session.result
        if result is None:
            self.plots.ci.clear()
            self._key = None
            self.change.setText("No prediction yet.")
            return
        k = min(self.top_k.value(), result.num_classes)
        heads = result.head_probs if len(result.head_probs) > 1 else {}
        columns = [("average of both heads" if heads else "prediction", result.probs)]
        columns += [(HEAD_TITLES.get(name, name), p) for name, p in heads.items()]
        key = (k, tuple(title for title, _ in columns))
        if key != self._key:  # new structure: draw from scratch
            self.plots.ci.clear()
            self._bars = []
            for i, (title, probs) in enumerate(columns):
                order = np.argsort(-probs)[:k]
                self._bars.append(figures.draw_bars(self.plots.ci, self._labels(order), probs[order], title=title,
                                                    xlabel="probability"))
                if i == 0 and len(columns) > 1:
                    self.plots.ci.nextRow()
            self._key = key
        else:  # same structure: new numbers only
            for (plot, bars), (_, probs) in zip(self._bars, columns, strict=True):
                order = np.argsort(-probs)[:k]
                live.update_bars(plot, bars, self._labels(order), probs[order])
        self.change.setText(self._change_text(result))

    def _change_text(self, result: ForwardResult) -> str:
        base = result.baseline_probs
        if base is None:
            return "No masks: this is the model's prediction on the whole image."
        labels = self.session.loaded.labels
        top, top_base = int(result.probs.argmax()), int(base.argmax())
        n_masked = int(result.inputs.mask.sum())
        n_heads = int((result.inputs.head_mask < 1).sum())
        what = f"{n_masked} masked patches, {n_heads} heads off"
        delta = result.probs[top_base] - base[top_base]
        text = f"With {what}: '{labels[top_base]}' {base[top_base]:.1%} → {result.probs[top_base]:.1%} ({delta:+.1%})."
        if top != top_base:
            text += f" The top class changed to '{labels[top]}' ({result.probs[top]:.1%})."
        return text

    def table(self) -> Table | None:
        result = self.session.result
        if result is None:
            return None
        labels = self.session.loaded.labels
        names = list(result.head_probs) if len(result.head_probs) > 1 else []
        header = ["index", "label", "prob"] + [f"prob_{n}" for n in names]
        header += ["prob_unmasked"] if result.baseline_probs is not None else []
        rows = []
        for i in np.argsort(-result.probs):
            row = [int(i), labels[i], float(result.probs[i])] + [float(result.head_probs[n][i]) for n in names]
            if result.baseline_probs is not None:
                row.append(float(result.baseline_probs[i]))
            rows.append(row)
        return header, rows


def _short(label: str, limit: int = 28) -> str:
    label = label.split(",")[0]
    return label if len(label) <= limit else label[: limit - 1] + "…"
