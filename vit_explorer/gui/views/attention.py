"""Attention: one head or all heads of a layer for the query token, rollout, mean attention distance and
CaiT's class attention, overlaid on the image. What is shown comes from `explore.attention`; the settings are the
session's (`Session.attention`): the controls set them there and follow them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QLabel,
    QPushButton,
    QSlider,
    QSpinBox,
    QWidget,
)

from ...analysis.attention import HEAD_FUSIONS
from ...explore import attention, registers
from ...explore.attention import CLASS_ATTENTION, MODES
from ...explore.figures import MapsFigure
from ...explore.forward import ForwardResult
from ...models import TokenLayout
from .. import figures
from ..session import MAX_DISCARD, AttentionSettings, Session
from .base import Table, View

LAYERED = ("one head", "all heads", "mean of heads", CLASS_ATTENTION)  # modes that show one layer


class AttentionView(View):
    key = "attention"

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(session, parent)
        self.figure: MapsFigure | None = None  # the maps last drawn
        self.distance: np.ndarray | None = None  # (blocks, heads) mean attention distance, when shown
        self._drawn: figures.MapsPlot | None = None
        self.query_name = ""  # the query of the maps drawn
        self.shifted: tuple[np.ndarray, np.ndarray] | None = None  # (heads, gh, gw) of the original and the model
        # with test-time registers, both drawn, when the toggle is on (see `_beside`)
        self._settings = session.attention  # those drawn: an opacity change alone redraws nothing
        self.mode = QComboBox()
        self.mode.addItems(MODES)
        self.mode.setToolTip("What to show: one head, every head of the layer side by side, their mean, rollout "
                             "through all layers, mean attention distance, or CaiT's class attention.")
        self.layer = _spin("layer ", "The block whose attention is shown (Ctrl+Up / Ctrl+Down).")
        self.head = _spin("head ", "The attention head shown in 'one head' mode.")
        self.reset_query = QPushButton("Query: default")
        self.reset_query.setToolTip("Click a patch (in the image panel's Query mode, or on a map) to see its "
                                    "attention; this button goes back to what the classifier reads.")
        self.reset_query.clicked.connect(lambda: self.session.select(query=None))
        self.opacity = QSlider(Qt.Orientation.Horizontal)
        self.opacity.setRange(0, 100)
        self.opacity.setValue(60)
        self.opacity.setMinimumWidth(90)
        self.opacity.setToolTip("Opacity of the attention map over the image.")
        self.fusion = QComboBox()
        self.fusion.addItems(HEAD_FUSIONS)
        self.fusion.setToolTip("Rollout: how the heads of a block are combined before multiplying through the layers.")
        self.discard = QDoubleSpinBox()
        self.discard.setRange(0.0, MAX_DISCARD)
        self.discard.setSingleStep(0.05)
        self.discard.setPrefix("discard ")
        self.discard.setToolTip("Rollout: share of the weakest attention weights set to zero in each block.")
        self.raw = QCheckBox("map only")
        self.raw.setToolTip("Show the attention map without the image under it.")
        self.opacity_label = QLabel("opacity")
        for widget in (self.mode, self.layer, self.head, self.reset_query, self.fusion, self.discard,
                       self.opacity_label, self.opacity, self.raw):
            self.controls.addWidget(widget)
        self.plots = pg.GraphicsLayoutWidget()
        self.body.addWidget(self.plots, 1)
        self.plots.scene().sigMouseClicked.connect(self._clicked)

        self.mode.currentIndexChanged.connect(lambda i: self.session.set_attention(mode=MODES[i]))
        self.layer.valueChanged.connect(lambda v: self.session.select(layer=v))
        self.head.valueChanged.connect(lambda v: self.session.select(head=v))
        self.opacity.valueChanged.connect(lambda v: self.session.set_attention(opacity=v / 100))
        self.raw.toggled.connect(lambda on: self.session.set_attention(map_only=on))
        self.fusion.currentIndexChanged.connect(lambda i: self.session.set_attention(fusion=HEAD_FUSIONS[i]))
        self.discard.valueChanged.connect(lambda v: self.session.set_attention(discard=v))
        self.listen(session.result_ready, self.schedule_soon)
        self.listen(session.selection_changed, self._selection)
        self.listen(session.model_changed, self._model_changed)
        self.listen(session.attention_changed, self._settings_changed)
        self.listen(session.registers_changed, self.schedule)
        self._follow(session.attention)
        self._model_changed()

    def picture(self) -> QWidget:
        return self.plots

    def export_info(self) -> dict[str, str]:
        info = {**super().export_info(), "mode": self.mode_name, "query": self.query_name}
        if self.mode_name in LAYERED:
            info["layer"] = str(self.session.layer)
        if self.mode_name == "one head":
            info["head"] = str(self.session.head)
        if self.mode_name == "rollout":
            settings = self.session.attention
            info.update({"head fusion": settings.fusion, "discard": f"{settings.discard:.2f}"})
        info["masked patches"] = str(int(self.session.mask.sum()))
        info["heads off"] = str(int((self.session.head_mask < 1).sum()))
        return info

    def restyle(self) -> None:
        self._clear("")
        self.schedule()

    @property
    def maps(self) -> np.ndarray | None:
        """(maps, gh, gw) last drawn, or None."""
        return None if self.figure is None else self.figure.maps

    @property
    def mode_name(self) -> str:
        return self.session.attention.mode

    def _model_changed(self) -> None:
        self._ranges()
        self._selection()

    def _follow(self, settings: AttentionSettings) -> None:
        """The controls show `settings` (without their signals: the session holds them already)."""
        controls = (self.mode, self.fusion, self.discard, self.opacity, self.raw)
        for widget in controls:
            widget.blockSignals(True)
        self.mode.setCurrentIndex(MODES.index(settings.mode))
        self.fusion.setCurrentIndex(HEAD_FUSIONS.index(settings.fusion))
        self.discard.setValue(settings.discard)
        self.opacity.setValue(round(settings.opacity * 100))
        self.raw.setChecked(settings.map_only)
        for widget in controls:
            widget.blockSignals(False)

    def _settings_changed(self) -> None:
        """New settings: the controls follow; an opacity change alone restyles the maps drawn, anything else
        redraws (a new mode also changes the layer range: drawn in `_selection`)."""
        settings, drawn = self.session.attention, self._settings
        self._settings = settings
        self._follow(settings)
        self._ranges()
        if self._drawn is not None and replace(drawn, opacity=settings.opacity) == settings:
            self._drawn.set_opacity(settings.opacity)
            return
        self.schedule()

    def _ranges(self) -> None:
        """The layer box counts self-attention blocks, or class-attention blocks in that mode."""
        cfg = self.session.loaded.config if self.session.loaded else None
        layers = (cfg.class_attn_depth if self.mode_name == CLASS_ATTENTION else cfg.depth) if cfg else 1
        for box, top in ((self.layer, max(layers, 1) - 1), (self.head, (cfg.num_heads if cfg else 1) - 1)):
            box.blockSignals(True)
            box.setRange(0, max(0, top))
            box.blockSignals(False)

    def _selection(self) -> None:
        for box, value in ((self.layer, self.session.layer), (self.head, self.session.head)):
            box.blockSignals(True)
            box.setValue(value)
            box.blockSignals(False)
        self.schedule()

    def _clicked(self, event: object) -> None:
        """A click on a map makes that patch the query."""
        result = self.session.result
        if self._drawn is None or result is None:
            return
        pos = event.scenePos()
        for heat in self._drawn.heats:
            if heat.sceneBoundingRect().contains(pos):
                point = heat.mapFromScene(pos)
                h, w = heat.image.shape[:2]
                gh, gw = result.layout.grid
                row, col = int(point.y() * gh / h), int(point.x() * gw / w)
                if 0 <= row < gh and 0 <= col < gw:
                    self.session.select(query=(row, col))
                return

    def _controls(self, mode: str) -> None:
        """Only the controls this mode uses: a short toolbar keeps the view within small screens."""
        for widget, modes in ((self.fusion, ("rollout",)), (self.discard, ("rollout",)), (self.head, ("one head",)),
                              (self.layer, LAYERED), (self.reset_query, ("one head", "all heads", "mean of heads",
                                                                         "rollout")),
                              (self.opacity, LAYERED + ("rollout",)), (self.opacity_label, LAYERED + ("rollout",)),
                              (self.raw, LAYERED + ("rollout",))):
            widget.setVisible(mode in modes)

    def refresh(self, *_: object) -> None:
        mode = self.mode_name
        self._controls(mode)
        result: ForwardResult | None = self.session.result
        if result is None:
            return
        settings = self.session.attention
        if not self.session.require(self.title, attention.needs_for(mode, self.session.layer, settings.fusion)):
            self.figure = self.distance = None  # what is on screen is out of date until the pass arrives
            self.note.setText("computing…")
            return
        query = attention.query_for(result.layout, result.inputs.loaded.config.pool, self.session.query)
        self.query_name = query.name
        self.reset_query.setText(f"Query: {query.name}")
        self.reset_query.setEnabled(not query.default)
        image, opacity = not settings.map_only, settings.opacity
        if mode == "rollout":
            discard = settings.discard
            self.run_for_model(result.inputs.model_id, "attention-analysis",
                               lambda: attention.rollout_figure(result, query, discard, image=image, opacity=opacity),
                               self._draw)
            return
        if mode == "mean attention distance":
            self.run_for_model(result.inputs.model_id, "attention-analysis", lambda: attention.mean_distance(result),
                               lambda distance: self._draw_distance(distance, result.layout))
            return
        self.session.cancel("attention-analysis")
        if mode == CLASS_ATTENTION and not result.class_attentions:
            self._clear("This model has no class-attention blocks (CaiT only).")
            return
        self._draw(attention.heads_figure(result, mode, self.session.layer, self.session.head, query, image=image,
                                          opacity=opacity, heads=self.session.heads))
        if self.session.registers.on and mode != CLASS_ATTENTION:
            self._beside(result, mode, image, opacity)

    def _beside(self, result: ForwardResult, mode: str, image: bool, opacity: float) -> None:
        """The test-time-registers toggle is on: the original's and the shifted model's maps side by side,
        computed in a worker (dropped when the result, the selection or a setting changed meanwhile)."""
        session, inputs, settings = self.session, result.inputs, self.session.registers
        layer, head, heads, patch = min(session.layer, result.depth - 1), session.head, session.heads, session.query
        key = (settings, session.attention, layer, head, heads, patch)

        def compute() -> tuple[np.ndarray, np.ndarray]:
            neurons = session.register_neurons(inputs, settings)
            return registers.shifted_attention(inputs, neurons, mode=settings.mode, k=settings.k, layer=layer,
                                               patch=patch)

        def done(maps: tuple[np.ndarray, np.ndarray]) -> None:
            if session.result is not result or key != (session.registers, session.attention, min(
                    session.layer, result.depth - 1), session.head, session.heads, session.query):
                return  # stale
            self.shifted = maps
            where = f"layer {layer} · query {self.query_name}"
            self._draw(registers.attention_beside(maps, mode, head, heads, settings.k, where,
                                                  result.display if image else None, result.layout.grid, opacity),
                       keep_shifted=True)

        self.note.setText("computing the model with test-time registers…")
        self.run_for_model(inputs.model_id, "registers-attention", compute, done)

    def _clear(self, note: str) -> None:
        self.plots.ci.clear()
        self._drawn = None
        self.figure = None
        self.distance = None
        self.shifted = None
        self.note.setText(note)

    def _draw(self, figure: MapsFigure, keep_shifted: bool = False) -> None:
        self.note.setText("")
        self.distance = None
        if not keep_shifted:
            self.shifted = None
        self.figure = figure
        if self._drawn is not None and self._drawn.matches(figure):
            self._drawn.update(figure)  # same plots: new numbers only (rebuilding plots is slow)
            return
        self.plots.ci.clear()
        with self.titles_fitting(self.plots, figure.shape()[1], beside=120, most=44):  # side-by-side maps: titles
            self._drawn = figures.MapsPlot(self.plots.ci, figure)  # wrap, so no column is wider than another

    def _draw_distance(self, distance: np.ndarray, layout: TokenLayout) -> None:
        self._clear("")
        self.distance = distance  # (blocks, heads)
        figures.draw(self.plots.ci, attention.distance_figure(distance, layout))

    def table(self) -> Table | None:
        if self.distance is not None:
            blocks, heads = self.distance.shape
            return ["layer", "head", "mean attention distance (pixels)"], [
                (b, h, float(self.distance[b, h])) for b in range(blocks) for h in range(heads)]
        if self.figure is None:
            return None
        maps = self.figure.maps
        return ["map", "row", "col", "attention"], [
            (self.figure.titles[m], r, c, float(maps[m, r, c])) for m in range(len(maps))
            for r in range(maps.shape[1]) for c in range(maps.shape[2])]


def _spin(prefix: str, tip: str) -> QSpinBox:
    box = QSpinBox()
    box.setPrefix(prefix)
    box.setToolTip(tip)
    return box
