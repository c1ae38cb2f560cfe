"""Top-k classes on a fixed 0-100 % axis; for DeiT the class head, the distillation head and their
average; the masks' effect in words. What is shown comes from `explore.prediction`."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QCheckBox, QComboBox, QHBoxLayout, QLineEdit, QSpinBox, QWidget

from ...analysis.registers import REGISTER_MODES, parse_neurons
from ...explore import registers
from ...explore.features import embedding_figure
from ...explore.figures import BarsFigure, LinesFigure
from ...explore.forward import ForwardResult
from ...explore.prediction import change_text, prediction_figure
from .. import figures
from ..session import MAX_TEST_TIME_REGISTERS, RegisterSettings, Session
from .base import Note, Table, View

MIN_HEIGHT = 120  # the chart's least height (more with more bars)
WIDE_PX = 640  # from this width both models' norms are drawn beside the prediction
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
        # test-time registers (Jiang et al. 2025), live: the shifted model beside the original
        self.registers = QCheckBox("test-time registers")
        self.registers.setToolTip("Run the model beside itself with test-time registers: the chosen MLP neurons' "
                                  "activations move into extra tokens (Jiang et al. 2025). The Attention and "
                                  "Features views show both too.")
        self.neurons = QLineEdit()
        self.neurons.setPlaceholderText("the finder's top 4, or BLOCK:UNIT,…")
        self.neurons.setMaximumWidth(140)  # the settings share one row in a narrow dock
        self.neurons.setToolTip("The neurons to move, as BLOCK:UNIT,… (blocks from 0); empty: the register-neuron "
                                "finder's top 4 over the bundled sample images.")
        self.register_k = QSpinBox()
        self.register_k.setRange(1, MAX_TEST_TIME_REGISTERS)
        self.register_k.setPrefix("k = ")
        self.register_mode = QComboBox()
        self.register_mode.addItems(list(REGISTER_MODES))
        self.register_mode.setToolTip("What the patches keep of a moved neuron's activation.")
        self.controls.addWidget(self.registers)
        # its settings: one row of their own under the controls, shown only while the toggle is on
        self.register_row = QWidget()
        row = QHBoxLayout(self.register_row)
        row.setContentsMargins(0, 0, 0, 0)
        for widget in (self.neurons, self.register_k, self.register_mode):
            row.addWidget(widget)
        row.addStretch(1)
        self.body.addWidget(self.register_row)
        # the controls edit the session's settings (one source of truth: the other views follow them too)
        self.registers.toggled.connect(self._edited)
        self.neurons.editingFinished.connect(self._edited)
        self.register_k.valueChanged.connect(self._edited)
        self.register_mode.currentIndexChanged.connect(self._edited)
        self.shifted: registers.Shifted | None = None  # the current result's shifted pass, when the toggle is on
        self._shifted_for: object = None  # the result it belongs to
        self.plots = pg.GraphicsLayoutWidget()
        self.plots.setMinimumHeight(MIN_HEIGHT)
        self.body.addWidget(self.plots, 1)
        self.figure: BarsFigure | None = None
        self._drawn: figures.BarsPlot | None = None
        self._beside: tuple[BarsFigure, LinesFigure] | None = None  # the shifted model's figures drawn beside
        self.narrow = False  # presenting, in the column beside the big view (set_narrow)
        self.change = Note(least_lines=CHANGE_LINES)  # how the masks and heads changed the prediction
        self.body.addWidget(self.change)
        self.listen(session.result_ready, self.redraw)
        self.listen(session.result_ready, self._registers_changed)
        self.listen(session.registers_changed, self._registers_changed)
        self.listen(session.busy, self.note.show_busy)
        self.redraw()
        self._registers_changed()

    # ------------------------------------------------------------------ test-time registers
    def _edited(self, *_: object) -> None:
        """The controls as they stand become the session's settings (neurons the text does not name: kept)."""
        text = self.neurons.text()
        neurons = self.session.registers.neurons
        try:
            neurons = tuple(parse_neurons(text)) if text.strip() else None
        except ValueError as error:
            self.session.error.emit(str(error))
        self.session.set_registers(on=self.registers.isChecked(), neurons=neurons, k=self.register_k.value(),
                                   mode=REGISTER_MODES[self.register_mode.currentIndex()])

    def _follow(self, settings: RegisterSettings) -> None:
        """The controls show the session's settings (without their signals)."""
        controls = (self.registers, self.neurons, self.register_k, self.register_mode)
        for widget in controls:
            widget.blockSignals(True)
        self.registers.setChecked(settings.on)
        typed = self.neurons.text()
        try:
            same = (tuple(parse_neurons(typed)) if typed.strip() else None) == settings.neurons
        except ValueError:
            same = False
        if not same:
            self.neurons.setText(",".join(f"{b}:{u}" for b, u in settings.neurons or ()))
        self.register_k.setValue(settings.k)
        self.register_mode.setCurrentIndex(REGISTER_MODES.index(settings.mode))
        for widget in controls:
            widget.blockSignals(False)
        self.register_row.setVisible(settings.on)  # the settings take room only while they act

    def _registers_changed(self, *_: object) -> None:
        """The toggle or its settings changed, or a new result came: compute the shifted pass in a worker (a stale
        one is dropped), or, off, show the original alone."""
        settings = self.session.registers
        self._follow(settings)
        on = settings.on
        had = self.shifted is not None
        self.shifted = self._shifted_for = None
        result = self.session.result
        if not on or result is None or not result.inputs.loaded.config.num_classes:
            if had:  # the shifted markers go; a plain result was drawn by redraw already (one paint per click)
                self.redraw()
            return
        inputs, session = result.inputs, self.session

        def compute() -> registers.Shifted:
            neurons = session.register_neurons(inputs, settings)
            return registers.shifted(inputs, neurons, mode=settings.mode, k=settings.k)

        def done(shifted: registers.Shifted) -> None:
            if self.session.result is result and self.session.registers == settings:  # else stale: dropped
                self.shifted, self._shifted_for = shifted, result
                self.redraw()

        self.note.setText("computing the model with test-time registers…")
        self.run_for_model(inputs.model_id, "registers", compute, done)

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
        shifted = self.shifted if self._shifted_for is result else None
        if shifted is not None:  # the original and the shifted model side by side
            beside = registers.shifted_figures(result, shifted, self.shown_k)
            self.figure = beside[0]
            self._draw(beside[0], beside)
            self.change.setText(registers.shift_text(result, shifted))
            self.note.setText("")
            return
        if self._drawn is not None and self._drawn.matches(figure) and self._beside is None:
            self._drawn.update(figure)  # same structure: new numbers (and labels only if the classes changed)
        else:
            self._draw(figure)
        self.change.setText(change_text(result))

    def _draw(self, figure: BarsFigure, beside: tuple[BarsFigure, LinesFigure] | None = None) -> None:
        """A new chart, and the view at least as tall as the chart needs (a row per bar), which takes the height
        from the image panel above (it scrolls) rather than pressing the bars' labels together. beside: the shifted
        model's figures: its probabilities are markers on `figure`; both models' norms go beside it on a wide view."""
        self.plots.ci.clear()
        self._beside = beside
        columns = 2 if beside is not None and self.plots.width() >= WIDE_PX else 1
        with self.titles_fitting(self.plots, columns, beside=100, most=44):  # the title wraps, never clips
            self._drawn = figures.BarsPlot(self.plots.ci, figure)
            if beside is not None and columns == 2:  # the norms beside, when there is room
                figures.draw(self.plots.ci, beside[1])
        QTimer.singleShot(0, self, self._fit_height)  # once the chart's items know their sizes

    def _fit_height(self) -> None:
        need = self.plots.ci.effectiveSizeHint(Qt.SizeHint.MinimumSize).height()
        self.plots.setMinimumHeight(max(MIN_HEIGHT, math.ceil(need) + 2))
        if self.change.compact:  # presented: the sentence under the chart is one elided line
            self.change.setMinimumHeight(self.change.fontMetrics().lineSpacing())

    def table(self) -> Table | None:
        result = self.session.result
        if result is None:
            return None
        loaded = result.inputs.loaded
        names = list(result.head_probs) if len(result.head_probs) > 1 else []
        header = ["index", "label", "prob"] + [f"prob_{n}" for n in names]
        header += ["prob_unmasked"] if result.baseline_probs is not None else []
        shifted = self.shifted if self._shifted_for is result else None
        header += ["prob_test_time_registers"] if shifted is not None else []
        rows = []
        for i in np.argsort(-result.probs):
            row = [int(i), loaded.label(int(i)), float(result.probs[i])]
            row += [float(result.head_probs[n][i]) for n in names]
            if result.baseline_probs is not None:
                row.append(float(result.baseline_probs[i]))
            if shifted is not None:
                row.append(float(shifted.probs[i]))
            rows.append(row)
        return header, rows
