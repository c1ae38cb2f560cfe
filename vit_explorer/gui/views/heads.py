"""Heads: a layers x heads grid of toggles that sets the head mask, coloured by measured importance
(measured by `explore.heads` on the current image and [MASK], with progress, cancellable)."""

from __future__ import annotations

import math

import numpy as np
from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QGridLayout, QLabel, QPushButton, QScrollArea, QWidget

from ...explore.forward import Inputs
from ...explore.heads import HeadImportance, measure
from ..session import Session
from ..text import plain
from .base import Table, View
from .job_controls import JobControls

AUTO_MEASURE_CELLS = 64  # measure importance at once for models with at most this many heads in all
MEASURE_TIP = ("Remove each head alone and measure how much the predicted class's probability drops on this image, "
               "with the current [MASK].")
NO_CLASSIFIER = ("This model has no classifier (features only): head importance, the drop in the predicted class's "
                 "probability, has no meaning for it.")


SHOWN_DECIMALS = 3  # the cells write importance as +0.000
CELL_LEAST_PX, CELL_MOST = 28, 3  # a cell's height: at least this, at most this many times a button's own


def importance_colour(value: float, top: float) -> str:
    """White -> red as a head matters more (a removed head is drawn dark grey by the style sheet); white for
    a value that is not a number (NaN weights) and for one that reads as zero at the shown precision."""
    value, top = round(value, SHOWN_DECIMALS), round(top, SHOWN_DECIMALS)  # colour what the cell says
    t = 0.0 if not top > 0 or not math.isfinite(value) else min(max(value / top, 0.0), 1.0)
    g = round(255 - 180 * t)
    return f"rgb(255, {g}, {g})"


class HeadsView(View):
    key = "heads"

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(session, parent)
        self.result: HeadImportance | None = None
        self.measured_on: Inputs | None = None  # the input `result` was measured on
        self.buttons: list[list[QPushButton]] = []
        self._synced: tuple[bytes, int] | None = None  # (head mask, importance) the buttons show
        self._measuring: Inputs | None = None  # the input of the measurement running now
        self._measure_next_result = False  # a small model is measured after its first prediction
        self.job = JobControls(self, "head-importance", run_text="Measure importance", on_run=self.measure_importance,
                               on_cancelled=lambda: self._finished("measurement cancelled"))
        self.measure, self.progress = self.job.button, self.job.bar
        self.measured = self.job.progressed  # (share, what) of the measurement running
        for text, tip, slot in (("All on", "Switch every head back on.", self.all_on),
                                ("Invert", "Switch the heads that are on off, and those off on.", self.invert)):
            button = QPushButton(text)
            button.setToolTip(tip)
            button.clicked.connect(slot)
            self.controls.addWidget(button)
        self.controls.addWidget(self.job)
        self.grid_widget = QWidget()
        self.grid = QGridLayout(self.grid_widget)
        self.grid.setSpacing(3)
        self.cells_area = scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.grid_widget)
        scroll.viewport().installEventFilter(self)  # its height shares out to the cells (_fit_cells)
        self.body.addWidget(scroll, 1)
        self.legend = QLabel("Click a head to switch it off (dark) or on; the number is its importance: the drop in "
                             "the predicted class's probability when that head alone is removed.")
        self.legend.setWordWrap(True)
        self.body.addWidget(self.legend)
        self.listen(session.model_changed, self.rebuild)
        self.listen(session.image_changed, self._input_changed)
        self.listen(session.inputs_changed, self._inputs_changed)
        self.listen(session.result_ready, self._result)
        self.rebuild()

    def picture(self) -> QWidget:
        return self.grid_widget

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        if watched is self.cells_area.viewport() and event.type() == QEvent.Type.Resize:
            self._fit_cells()
        return super().eventFilter(watched, event)

    def restyle(self) -> None:
        super().restyle()
        self._fit_cells()

    def _fit_cells(self) -> None:
        """The cells share the pane's height: a grid the room reads (4 x 4 heads drew as a 150 px strip at the top
        of a 500 px pane), at least CELL_LEAST_PX and a button's own height, at most CELL_MOST times that; more
        layers than the pane holds scroll."""
        if not self.buttons:
            return
        for buttons in self.buttons:  # a button with a style sheet (its colour) keeps the font it was polished
            for button in buttons:  # with: presented, its number stayed at the normal size (16 px beside 24)
                button.setFont(self.font())
        own = max(CELL_LEAST_PX, self.buttons[0][0].sizeHint().height())  # one line of text: as tall as any
        header = max(label.sizeHint().height() for label in self.grid_widget.findChildren(QLabel))
        margins = self.grid.contentsMargins()
        room = (self.cells_area.viewport().height() - margins.top() - margins.bottom() - header
                - self.grid.spacing() * len(self.buttons))
        height = max(own, min(CELL_MOST * own, room // len(self.buttons)))
        for buttons in self.buttons:
            for button in buttons:
                button.setFixedHeight(height)

    @property
    def importance(self) -> np.ndarray | None:
        """(layers, heads) of the last measurement, or None."""
        return None if self.result is None else self.result.values

    @property
    def running(self) -> bool:
        """A measurement runs now."""
        return self._measuring is not None

    def rebuild(self) -> None:
        """Buttons for the new model; a measurement of the old one, shown or running, is dropped."""
        self.job.stop()
        self._finished("")
        while self.grid.count():
            old = self.grid.takeAt(0).widget()
            old.hide()  # gone from the screen now: it is deleted when the event loop next gets to it
            old.deleteLater()
        for row in range(self.grid.rowCount()):
            self.grid.setRowStretch(row, 0)
        self.buttons = []
        self.result = self.measured_on = None
        self._synced = None
        loaded = self.session.loaded
        classifier = loaded is not None and loaded.config.num_classes > 0
        self.measure.setEnabled(classifier)
        self.measure.setToolTip(MEASURE_TIP if classifier else NO_CLASSIFIER)
        self.note.setText("" if classifier or loaded is None else NO_CLASSIFIER)
        if loaded is None:
            return
        cfg = loaded.config
        layers = cfg.num_blocks
        for h in range(cfg.num_heads):
            self.grid.addWidget(plain(QLabel(f"head {h}")), 0, h + 1)
        for i in range(layers):
            name = f"layer {i}" if i < cfg.depth else f"class-attn {i - cfg.depth}"
            self.grid.addWidget(plain(QLabel(name)), i + 1, 0)
            buttons: list[QPushButton] = []
            for h in range(cfg.num_heads):
                button = QPushButton("")
                button.setCheckable(True)
                button.setChecked(True)
                button.setToolTip(f"{name}, head {h}: click to remove or restore this head.")
                button.clicked.connect(lambda checked, i=i, h=h: self.toggle(i, h, checked))
                self.grid.addWidget(button, i + 1, h + 1)
                buttons.append(button)
            self.buttons.append(buttons)
        self.grid.setRowStretch(layers + 1, 1)  # keep the rows together at the top
        self._fit_cells()
        self._sync()
        self._measure_next_result = classifier and layers * cfg.num_heads <= AUTO_MEASURE_CELLS

    def _result(self, *_: object) -> None:
        """The first prediction of a small model comes first, then its heads are measured (once in sight)."""
        if self._measure_next_result and self.on_screen:
            self._measure_next_result = False
            self.measure_importance()

    def set_on_screen(self, shown: bool) -> None:
        super().set_on_screen(shown)
        if shown and self.session.result is not None:
            self._result()

    def _inputs_changed(self) -> None:
        """A new [MASK] or size makes what is shown, or being measured, that of another input; a head switched
        does not (each head is measured alone, in the full model)."""
        self._sync()
        inputs = self.session.inputs()
        if inputs is not None and any(measured is not None and measured_input(measured) != measured_input(inputs)
                                      for measured in (self._measuring, self.measured_on)):
            self._input_changed()

    def _input_changed(self) -> None:
        """A new input: measure again (a measurement still running was for the old one and is dropped)."""
        small = self.buttons and len(self.buttons) * len(self.buttons[0]) <= AUTO_MEASURE_CELLS
        if self.running or (self.result is not None and small and self.on_screen):
            self.measure_importance()
        elif self.result is not None and small:
            self._measure_next_result = True  # when the view is next in sight
        elif self.result is not None:
            self.note.setText("the input changed: measure again for importance on this input")

    def toggle(self, layer: int, head: int, on: bool) -> None:
        mask = self.session.head_mask.copy()
        mask[layer, head] = 1.0 if on else 0.0
        self.session.set_head_mask(mask)

    def all_on(self) -> None:
        self.session.set_head_mask(np.ones_like(self.session.head_mask))

    def invert(self) -> None:
        self.session.set_head_mask(1.0 - self.session.head_mask)

    def measure_importance(self) -> None:
        inputs = self.session.inputs()
        if inputs is None or not inputs.loaded.config.num_classes:
            return
        name = self.session.image_name
        self._measuring = inputs
        self.note.setText("measuring head importance…")
        self.job.start(inputs.model_id, lambda job: measure(inputs, name, job),
                       lambda result: self._measured(inputs, result), self._finished)

    def _finished(self, note: str) -> None:
        self._measuring = None
        self.note.setText(note)

    def _measured(self, inputs: Inputs, result: HeadImportance) -> None:
        self.result, self.measured_on = result, inputs
        self._finished(result.describe())
        self._sync()

    def _sync(self) -> None:
        mask = self.session.head_mask
        if not self.buttons or mask.shape != (len(self.buttons), len(self.buttons[0])):
            return
        key = (mask.tobytes(), id(self.importance))
        if key == self._synced:  # a patch mask changed, not the heads: restyling buttons is slow
            return
        self._synced = key
        finite = self.importance[np.isfinite(self.importance)] if self.importance is not None else np.zeros(0)
        top = float(finite.max()) if finite.size else 0.0
        for i, row in enumerate(self.buttons):
            for h, button in enumerate(row):
                on = bool(mask[i, h] >= 1)
                button.setChecked(on)
                value = None if self.importance is None else float(self.importance[i, h])
                button.setText("off" if not on else "" if value is None else f"{value:+.{SHOWN_DECIMALS}f}")
                colour = importance_colour(value or 0.0, top) if on else "rgb(70, 70, 70)"
                text = "black" if on else "white"
                button.setStyleSheet(f"QPushButton {{ background: {colour}; color: {text}; }}")

    def export_info(self) -> dict[str, str]:
        info = super().export_info()
        if self.result is not None:
            info["importance"] = self.result.describe()
        return info

    def table(self) -> Table | None:
        mask = self.session.head_mask
        rows = []
        for i in range(mask.shape[0]):
            for h in range(mask.shape[1]):
                value = "" if self.importance is None else float(self.importance[i, h])
                rows.append((i, h, int(mask[i, h] >= 1), value))
        return ["layer", "head", "on", "importance (probability drop)"], rows


def measured_input(inputs: Inputs) -> tuple[int, int, tuple[int, int], bytes]:
    """What decides a head-importance measurement: the model, the image, the input size and the [MASK] (not the
    head mask: each head is removed alone from the full model)."""
    return inputs.model_id, inputs.image_id, inputs.size, inputs.mask.tobytes()
