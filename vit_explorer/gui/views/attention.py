"""Attention: one head or all heads of a layer for a query token, overlaid on the image."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt
from PySide6.QtWidgets import QCheckBox, QComboBox, QDoubleSpinBox, QHBoxLayout, QLabel, QSlider, QSpinBox, QWidget

from ...analysis.attention import (
    HEAD_FUSIONS,
    class_attention_maps,
    class_rollout,
    mean_attention_distance,
    rollout,
    to_grid,
)
from .. import figures, live
from ..forward import ForwardResult
from ..session import Session
from .base import Table, View

MODES = ("one head", "all heads", "mean of heads", "rollout", "mean attention distance", "class attention (CaiT)")


def query_row(result: ForwardResult, query: tuple[int, int] | None) -> int | None:
    """Sequence index of the query token: the patch (row, col), else the first prefix token; None = none."""
    layout = result.layout
    if query is not None and query[0] < layout.grid[0] and query[1] < layout.grid[1]:
        return layout.token_index(*query)
    return 0 if layout.num_prefix_tokens else None


def attention_grid(result: ForwardResult, layer: int, query: tuple[int, int] | None) -> np.ndarray:
    """(heads, gh, gw): attention from the query token to every patch in one self-attention block.

    Without a prefix token and no patch chosen (CaiT's self-attention, GAP models), the map is the
    attention each patch receives, averaged over all queries.
    """
    probs = result.attentions[layer][0]  # (heads, T, T)
    row = query_row(result, query)
    received = probs.mean(dim=1) if row is None else probs[:, row]  # (heads, T)
    return to_grid(received, result.layout).numpy()  # (heads, gh, gw)


def rollout_map(result: ForwardResult, query: tuple[int, int] | None, head_fusion: str,
                discard_ratio: float) -> np.ndarray:
    """Attention rollout for the query ([CLS] by default; CaiT: through its class-attention blocks)."""
    row = query_row(result, query)
    if row is None and result.class_attentions:
        return class_rollout(result.class_attentions, result.attentions, result.layout,
                             head_fusion=head_fusion)[0].numpy()
    if row is None:
        raise ValueError("this model has no [CLS] token: pick a patch as the query to see its rollout")
    return rollout(result.attentions, result.layout, head_fusion=head_fusion, discard_ratio=discard_ratio,
                   query=row)[0].numpy()


class AttentionView(View):
    title = "Attention"

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(session, parent)
        self.maps: np.ndarray | None = None  # (maps, gh, gw) last drawn
        self.distance: np.ndarray | None = None  # (blocks, heads) mean attention distance, when shown
        self._key: tuple | None = None  # structure of the drawn maps; the same structure is updated in place
        self._figures: list[tuple[pg.PlotItem, pg.ImageItem, pg.ImageItem | None]] = []  # plot, photo, heat
        self.images: list[pg.ImageItem] = []
        self._heading: pg.LabelItem | None = None  # over small multiples
        self._shared_bar: pg.ColorBarItem | None = None  # the one colour bar of small multiples
        self._display: np.ndarray | None = None  # the photo under the drawn maps
        controls = QHBoxLayout()
        self.mode = QComboBox()
        self.mode.addItems(MODES)
        self.mode.setToolTip("What to show: one head, every head of the layer side by side, their mean, or CaiT's "
                             "class attention.")
        self.layer = QSpinBox()
        self.layer.setPrefix("layer ")
        self.layer.setToolTip("The block whose attention is shown (Ctrl+Up / Ctrl+Down).")
        self.head = QSpinBox()
        self.head.setPrefix("head ")
        self.head.setToolTip("The attention head shown in 'one head' mode.")
        self.query = QComboBox()
        self.query.addItems(["first prefix token ([CLS])", "patch under the cursor"])
        self.query.setToolTip("Whose attention is shown: [CLS]'s, or that of the patch you hover (or pick in the "
                              "image panel's Query mode).")
        self.opacity = QSlider(Qt.Orientation.Horizontal)
        self.opacity.setRange(0, 100)
        self.opacity.setValue(60)
        self.opacity.setMinimumWidth(120)
        self.opacity.setToolTip("Opacity of the attention map over the image.")
        self.fusion = QComboBox()
        self.fusion.addItems(HEAD_FUSIONS)
        self.fusion.setToolTip("Rollout: how the heads of a block are combined before multiplying through the layers.")
        self.discard = QDoubleSpinBox()
        self.discard.setRange(0.0, 0.95)
        self.discard.setSingleStep(0.05)
        self.discard.setPrefix("discard ")
        self.discard.setToolTip("Rollout: share of the weakest attention weights set to zero in each block.")
        self.raw = QCheckBox("map only")
        self.raw.setToolTip("Show the attention map without the image under it.")
        for widget in (self.mode, self.layer, self.head, self.query, self.fusion, self.discard, QLabel("opacity"),
                       self.opacity, self.raw):
            controls.addWidget(widget)
        controls.addStretch(1)
        self.body.addLayout(controls)
        self.plots = pg.GraphicsLayoutWidget()
        self.body.addWidget(self.plots, 1)
        self.plots.scene().sigMouseMoved.connect(self._mouse_moved)

        self.mode.currentIndexChanged.connect(self.refresh)
        self.layer.valueChanged.connect(lambda v: self.session.select(layer=v))
        self.head.valueChanged.connect(lambda v: self.session.select(head=v))
        self.query.currentIndexChanged.connect(self._query_mode)
        self.opacity.valueChanged.connect(self._set_opacity)
        self.raw.toggled.connect(self.refresh)
        self.fusion.currentIndexChanged.connect(self.refresh)
        self.discard.valueChanged.connect(self.refresh)
        self.listen(session.result_ready, self.schedule_soon)
        self.listen(session.selection_changed, self._selection)
        self.listen(session.model_changed, self._model_changed)
        self._model_changed()

    def _model_changed(self) -> None:
        cfg = self.session.loaded.config if self.session.loaded else None
        for box, top in ((self.layer, (cfg.depth if cfg else 1) - 1), (self.head, (cfg.num_heads if cfg else 1) - 1)):
            box.blockSignals(True)
            box.setRange(0, max(0, top))
            box.blockSignals(False)
        self._selection()

    def _selection(self) -> None:
        for box, value in ((self.layer, self.session.layer), (self.head, self.session.head)):
            box.blockSignals(True)
            box.setValue(value)
            box.blockSignals(False)
        self.schedule()

    def _query_mode(self, index: int) -> None:
        if index == 0:
            self.session.select(query=None)

    def _mouse_moved(self, pos: QPointF) -> None:
        if self.query.currentIndex() != 1 or not self.images or self.session.result is None:
            return
        for image in self.images:
            if image.sceneBoundingRect().contains(pos):
                point = image.mapFromScene(pos)
                layout = self.session.result.layout
                h, w = image.image.shape[:2]
                row, col = int(point.y() * layout.grid[0] / h), int(point.x() * layout.grid[1] / w)
                if (row, col) != self.session.query and 0 <= row < layout.grid[0] and 0 <= col < layout.grid[1]:
                    self.session.select(query=(row, col))
                return

    def _set_opacity(self, value: int) -> None:
        for _, _, heat in self._figures:
            if heat is not None:
                heat.setOpacity(value / 100)

    def refresh(self, *_: object) -> None:
        result: ForwardResult | None = self.session.result
        mode = MODES[self.mode.currentIndex()]
        # only the controls this mode uses: a short toolbar keeps the view (and the window) within 1600 px
        for widget, modes in ((self.fusion, ("rollout",)), (self.discard, ("rollout",)), (self.head, ("one head",)),
                              (self.layer, ("one head", "all heads", "mean of heads", "class attention (CaiT)")),
                              (self.query, ("one head", "all heads", "mean of heads", "rollout"))):
            widget.setVisible(mode in modes)
        if result is None:
            return
        query = self.session.query if self.query.currentIndex() == 1 else None
        if mode in ("rollout", "mean attention distance"):
            fusion, discard = self.fusion.currentText(), self.discard.value()
            if mode == "rollout":
                work = lambda: ("rollout", rollout_map(result, query, fusion, discard))
            else:
                work = lambda: ("distance", mean_attention_distance(result.attentions, result.layout).numpy())
            self.session.run("attention-analysis", work, lambda out: self._draw_analysis(result, query, *out))
            return
        self.session.runner.cancel("attention-analysis")
        layer = min(self.session.layer, len(result.attentions) - 1)
        row = query_row(result, query)
        who = self._who(result, row, query)
        if mode == "class attention (CaiT)":
            if not result.class_attentions:
                self._clear("This model has no class-attention blocks (CaiT only).")
                return
            block = min(self.session.layer, len(result.class_attentions) - 1)
            maps = class_attention_maps(result.class_attentions, result.layout)[0, block].numpy()  # (heads, gh, gw)
            heading = f"class-attention block {block} · query [CLS]"
        else:
            maps = attention_grid(result, layer, query)
            heading = f"layer {layer} · {who}"
            if mode == "one head":
                head = min(self.session.head, len(maps) - 1)
                maps, heading = maps[head:head + 1], f"layer {layer} · head {head} · {who}"
            elif mode == "mean of heads":
                maps, heading = maps.mean(0, keepdims=True), f"layer {layer} · mean of heads · {who}"
        if len(maps) == 1:
            self._draw_maps(result, maps, [heading])
        else:  # small multiples: the shared part above them, short titles that fit a small plot
            self._draw_maps(result, maps, [f"head {h}" for h in range(len(maps))], heading)

    @staticmethod
    def _who(result: ForwardResult, row: int | None, query: tuple[int, int] | None) -> str:
        if row is None:
            return "mean over queries"
        if row < result.layout.num_prefix_tokens:
            return f"query [{result.layout.prefix_names[row].upper()}]"
        return f"query patch {query[0]},{query[1]} (token {row})"

    def _clear(self, note: str) -> None:
        self.plots.ci.clear()
        self._key = None
        self._figures = []
        self.images = []
        self._heading = self._shared_bar = None
        self.maps = None
        self.distance = None
        self.note.setText(note)

    def _draw_analysis(self, result: ForwardResult, query: tuple[int, int] | None, kind: str,
                       values: np.ndarray) -> None:
        if kind == "rollout":
            title = f"attention rollout · {self.fusion.currentText()} over heads · discard {self.discard.value():.2f}"
            self._draw_maps(result, values[None], [title])
            return
        self._clear("")
        self.distance = values  # (blocks, heads)
        blocks, heads = values.shape
        layers = np.repeat(np.arange(blocks), heads)
        groups = [f"head {h}" for _ in range(blocks) for h in range(heads)]
        figures.draw_scatter(self.plots.ci, layers, values.reshape(-1), groups=groups,
                             title="mean attention distance per head against depth", xlabel="layer",
                             ylabel="mean attention distance (pixels)")

    def _draw_maps(self, result: ForwardResult, maps: np.ndarray, titles: list[str], heading: str = "") -> None:
        """One map per title; several maps (with a heading over them) share one colour scale and one bar,
        so heads can be compared and every plot keeps the same width."""
        raw = self.raw.isChecked()
        key = (raw, len(maps), result.layout.grid, result.display.shape)
        masked = result.inputs.mask if result.inputs.mask.any() else None
        shared = live.levels_of(maps) if len(maps) > 1 else None
        if key == self._key:  # same figures: new numbers only (rebuilding plots is slow)
            self.maps = maps
            self.distance = None
            self.note.setText("")
            h, w = result.display.shape[:2]
            if self._heading is not None and self._heading.text != heading:
                self._heading.setText(heading, size=figures.TITLE_SIZE, bold=True)
            if self._shared_bar is not None:
                self._shared_bar.setLevels(values=shared)
            # only what changed: a new title or photo re-lays out or re-renders the plot (the GUI thread's time)
            new_photo = not np.array_equal(self._display, result.display)
            for (plot, photo, heat), values, title in zip(self._figures, maps, titles, strict=True):
                if plot.titleLabel.text != title:
                    plot.setTitle(title, size=figures.TITLE_SIZE)
                if raw:
                    live.update_heat(plot, photo, values, shared)
                else:
                    if new_photo:
                        photo.setImage(result.display, levels=(0, 255), autoLevels=False)
                    live.update_heat(plot, heat, values, shared)
                    live.update_masked(plot, masked, h, w)
            self._display = result.display
            return
        self._clear("")
        self.maps = maps
        self._display = result.display
        columns = int(np.ceil(np.sqrt(len(maps))))
        rows = -(-len(maps) // columns)
        if shared is not None:
            self._heading = figures.add_title(self.plots.ci, heading, colspan=columns + 1)
            self.plots.ci.nextRow()
        for i, (values, title) in enumerate(zip(maps, titles, strict=True)):
            if i and i % columns == 0:
                self.plots.ci.nextRow()
            if raw:
                plot, image = figures.draw_heatmap(self.plots.ci, values, title=title, cmap="inferno", levels=shared,
                                                   colorbar_label="attention", grid=result.layout.grid,
                                                   colorbar=shared is None)
                heat = None
            else:
                plot, image, heat = figures.draw_image(
                    self.plots.ci, result.display, title=title, grid=result.layout.grid, overlay=values,
                    overlay_alpha=self.opacity.value() / 100, overlay_levels=shared, overlay_label="attention",
                    masked=masked, colorbar=shared is None)
            self._figures.append((plot, image, heat))
            self.images.append(image)
        if shared is not None:
            self._shared_bar = figures.draw_colorbar(self.plots.ci, heat if heat is not None else image, levels=shared,
                                                     cmap="inferno", label="attention", row=1, col=columns,
                                                     rowspan=rows)
        self._key = key

    def table(self) -> Table | None:
        if self.distance is not None:
            blocks, heads = self.distance.shape
            return ["layer", "head", "mean attention distance (pixels)"], [
                (b, h, float(self.distance[b, h])) for b in range(blocks) for h in range(heads)]
        if self.maps is None:
            return None
        return ["map", "row", "col", "attention"], [
            (m, r, c, float(self.maps[m, r, c])) for m in range(len(self.maps))
            for r in range(self.maps.shape[1]) for c in range(self.maps.shape[2])]
