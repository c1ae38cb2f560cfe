"""Heads: a layers x heads grid of toggles that sets the head mask, coloured by measured importance."""

from __future__ import annotations

from typing import Any

import numpy as np
from PySide6.QtWidgets import QGridLayout, QLabel, QPushButton, QScrollArea, QWidget

from ...analysis.heads import head_importance
from ..forward import pixels_for
from ..session import Session
from .base import Table, View

AUTO_MEASURE_CELLS = 64  # measure importance at once for models with at most this many heads in all


def importance_colour(value: float, top: float) -> str:
    """White -> red as a head matters more (a removed head is drawn dark grey by the style sheet)."""
    t = 0.0 if top <= 0 else min(max(value / top, 0.0), 1.0)
    g = round(255 - 180 * t)
    return f"rgb(255, {g}, {g})"


class HeadsView(View):
    title = "Heads"

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(session, parent)
        self.importance: np.ndarray | None = None  # (layers, heads)
        self.buttons: list[list[QPushButton]] = []
        self._synced: tuple[bytes, int] | None = None  # (head mask, importance) the buttons show
        row = self.toolbar
        self.measure = QPushButton("Measure importance")
        self.measure.setToolTip("Remove each head alone and measure how much the predicted class's probability "
                                "drops on this image.")
        self.measure.clicked.connect(self.measure_importance)
        row.insertWidget(1, self.measure)
        for text, tip, slot in (("All on", "Switch every head back on.", self.all_on),
                                ("Invert", "Switch the heads that are on off, and those off on.", self.invert)):
            button = QPushButton(text)
            button.setToolTip(tip)
            button.clicked.connect(slot)
            row.insertWidget(1, button)
        self.grid_widget = QWidget()
        self.grid = QGridLayout(self.grid_widget)
        self.grid.setSpacing(3)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.grid_widget)
        self.body.addWidget(scroll, 1)
        self.legend = QLabel("Click a head to switch it off (dark) or on; the number is its importance: the drop in "
                             "the predicted class's probability when that head alone is removed.")
        self.legend.setWordWrap(True)
        self.body.addWidget(self.legend)
        self.listen(session.model_changed, self.rebuild)
        self.listen(session.image_changed, self._image_changed)
        self.listen(session.inputs_changed, self._sync)
        self.rebuild()

    def rebuild(self) -> None:
        while self.grid.count():
            self.grid.takeAt(0).widget().deleteLater()
        for row in range(self.grid.rowCount()):
            self.grid.setRowStretch(row, 0)
        self.buttons = []
        self.importance = None
        self._synced = None
        loaded = self.session.loaded
        if loaded is None:
            return
        cfg = loaded.config
        layers = cfg.depth + cfg.class_attn_depth
        for h in range(cfg.num_heads):
            self.grid.addWidget(QLabel(f"head {h}"), 0, h + 1)
        for i in range(layers):
            name = f"layer {i}" if i < cfg.depth else f"class-attn {i - cfg.depth}"
            self.grid.addWidget(QLabel(name), i + 1, 0)
            row = []
            for h in range(cfg.num_heads):
                button = QPushButton("")
                button.setCheckable(True)
                button.setChecked(True)
                button.setMinimumHeight(28)
                button.setToolTip(f"{name}, head {h}: click to remove or restore this head.")
                button.clicked.connect(lambda checked, i=i, h=h: self.toggle(i, h, checked))
                self.grid.addWidget(button, i + 1, h + 1)
                row.append(button)
            self.buttons.append(row)
        self.grid.setRowStretch(layers + 1, 1)  # keep the rows together at the top
        self._sync()
        if layers * cfg.num_heads <= AUTO_MEASURE_CELLS:
            self.measure_importance()

    def _image_changed(self) -> None:
        if self.importance is not None and self.importance.size <= AUTO_MEASURE_CELLS:
            self.measure_importance()

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
        if inputs is None:
            return
        self.note.setText("measuring head importance…")

        def work() -> Any:
            import torch

            with torch.inference_mode():
                return head_importance(inputs.loaded.model, pixels_for(inputs)).numpy()

        self.session.run("head-importance", work, self._measured)

    def _measured(self, importance: np.ndarray) -> None:
        self.importance = importance
        self.note.setText("")
        self._sync()

    def _sync(self) -> None:
        mask = self.session.head_mask
        if not self.buttons or mask.shape != (len(self.buttons), len(self.buttons[0])):
            return
        key = (mask.tobytes(), id(self.importance))
        if key == self._synced:  # a patch mask changed, not the heads: restyling buttons is slow
            return
        self._synced = key
        top = float(self.importance.max()) if self.importance is not None else 0.0
        for i, row in enumerate(self.buttons):
            for h, button in enumerate(row):
                on = bool(mask[i, h] >= 1)
                button.setChecked(on)
                value = None if self.importance is None else float(self.importance[i, h])
                button.setText("off" if not on else "" if value is None else f"{value:+.3f}")
                colour = importance_colour(value or 0.0, top) if on else "rgb(70, 70, 70)"
                text = "black" if on else "white"
                button.setStyleSheet(f"QPushButton {{ background: {colour}; color: {text}; }}")

    def table(self) -> Table | None:
        mask = self.session.head_mask
        rows = []
        for i in range(mask.shape[0]):
            for h in range(mask.shape[1]):
                value = "" if self.importance is None else float(self.importance[i, h])
                rows.append((i, h, int(mask[i, h] >= 1), value))
        return ["layer", "head", "on", "importance (probability drop)"], rows
