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
        self._key: tuple | None = None  # structure of the drawn figure: (k, title, marker names)
        self._bars: list[tuple[pg.PlotItem, pg.BarGraphItem]] = []
        self._shown: tuple | None = None  # (model, classes best first) whose labels the axis shows
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
        order = np.argsort(-result.probs)[:k]
        # DeiT: bars are the average the model predicts, symbols the class and distillation heads on the same
        # classes (one compact chart; three separate top-k charts are unreadable in a small dock)
        markers = {HEAD_TITLES.get(name, name): p[order] for name, p in heads.items()}
        title = "average of both heads (bars)" if heads else "prediction"
        key = (k, title, tuple(markers))
        shown = (result.inputs.model_id, tuple(order.tolist()))
        if key != self._key:  # new structure: draw from scratch
            self.plots.ci.clear()
            self._bars = [figures.draw_bars(self.plots.ci, self._labels(order), result.probs[order], title=title,
                                            xlabel="probability", markers=markers)]
            self._key = key
        else:  # same structure: new numbers only (and new labels only if the classes changed)
            plot, bars = self._bars[0]
            same = shown == self._shown
            live.update_bars(plot, bars, None if same else self._labels(order), result.probs[order], markers=markers)
        self._shown = shown
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
        change = f"{delta:+.1%}" if abs(delta) >= 0.0005 else "no change"  # not "-0.0%"
        text = f"With {what}: '{labels[top_base]}' {base[top_base]:.1%} → {result.probs[top_base]:.1%} ({change})."
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


def _short(label: str, limit: int = 32) -> str:
    label = label.split(",")[0]
    return label if len(label) <= limit else label[: limit - 1] + "…"
