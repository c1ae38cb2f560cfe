"""Position embeddings: the per-patch similarity grid, one patch's map large, [CLS]'s map, a comparison."""

from __future__ import annotations

from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import QPointF
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLineEdit, QPushButton, QWidget

from ...analysis.pe import PESimilarity, pe_similarity
from .. import figures, live
from ..session import Session
from .base import Table, View
from .builder import PE_SCHEMES


def scheme_similarity(model: Any, scheme: str, grid: tuple[int, int]) -> PESimilarity:
    """PE similarity of the same width and grid with another PE scheme, freshly initialised.

    The position embedding does not depend on the blocks, so a one-block model is enough.
    """
    from ...models import VisionTransformer

    cfg = model.config.replace(pos_embed=scheme, pos_embed_prefix=scheme == "learned" and model.config.pos_embed_prefix,
                               depth=1, class_attn_depth=0, num_classes=0)
    return pe_similarity(VisionTransformer(cfg), grid)


def tile_at(image: pg.ImageItem, pos: QPointF, grid: tuple[int, int]) -> tuple[int, int] | None:
    """Which tile (patch row, col) of a similarity mosaic a scene position falls on."""
    point = image.mapFromScene(pos)
    h, w = image.image.shape[:2]
    gh, gw = grid
    sep_y = (h - gh * gh) / (gh - 1) if gh > 1 else 0
    sep_x = (w - gw * gw) / (gw - 1) if gw > 1 else 0
    row, col = int(point.y() // (gh + sep_y)), int(point.x() // (gw + sep_x))
    if 0 <= row < gh and 0 <= col < gw and 0 <= point.x() < w and 0 <= point.y() < h:
        return row, col
    return None


class PositionView(View):
    title = "Position embeddings"

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(session, parent)
        self.sim: PESimilarity | None = None
        self.other: PESimilarity | None = None
        self.other_name = ""
        self.patch = (0, 0)
        self.mosaic: pg.ImageItem | None = None
        self._patch_map: tuple[pg.PlotItem, pg.ImageItem] | None = None  # the clicked patch's map
        controls = QHBoxLayout()
        self.compare = QComboBox()
        self.compare.addItem("no comparison", "")
        for text, value in PE_SCHEMES:
            if value not in ("none", "rope"):
                self.compare.addItem(f"compare: {text} (untrained)", value)
        self.compare.setToolTip("Show the same architecture with another PE scheme next to this model's.")
        self.compare.currentIndexChanged.connect(self._compare_scheme)
        self.compare_source = QLineEdit()
        self.compare_source.setPlaceholderText("or compare with a model: hub id, folder or file")
        self.compare_source.setToolTip("Load a second model and show its position-embedding similarity next to this "
                                       "one's.")
        self.compare_source.returnPressed.connect(self._compare_model)
        load = QPushButton("Compare")
        load.setToolTip("Load the second model named in the box.")
        load.clicked.connect(self._compare_model)
        for widget in (self.compare, self.compare_source, load):
            controls.addWidget(widget)
        self.body.addLayout(controls)
        self.plots = pg.GraphicsLayoutWidget()
        self.plots.setToolTip("Click a tile to see that patch's similarity map large.")
        self.plots.scene().sigMouseClicked.connect(self._clicked)
        self.body.addWidget(self.plots, 1)
        self._key: tuple[int, tuple[int, int]] | None = None  # (model, grid) last computed
        self.listen(session.model_changed, self.schedule)
        self.listen(session.inputs_changed, self.schedule)
        self.refresh()

    def refresh(self, *_: object) -> None:
        loaded = self.session.loaded
        key = (self.session.model_id, self.session.grid)
        if loaded is None or key == self._key:  # masks do not change the position embedding
            return
        self._key = key
        model, grid = loaded.model, self.session.grid
        self.session.run("pe", lambda: pe_similarity(model, grid), self._computed)
        if self.compare.currentData():
            self._compare_scheme()

    def _computed(self, sim: PESimilarity) -> None:
        self.sim = sim
        self.patch = (min(self.patch[0], sim.grid[0] - 1), min(self.patch[1], sim.grid[1] - 1))
        self.redraw()

    def _compare_scheme(self, *_: object) -> None:
        scheme = self.compare.currentData()
        loaded = self.session.loaded
        if not scheme or loaded is None:
            self.other = None
            self.redraw()
            return
        grid = self.session.grid
        name = self.compare.currentText().removeprefix("compare: ")
        self.session.run("pe-compare", lambda: scheme_similarity(loaded.model, scheme, grid),
                         lambda sim: self._compared(sim, name))

    def _compare_model(self) -> None:
        source = self.compare_source.text().strip()
        if not source:
            return
        from ...checkpoints import load

        self.note.setText(f"loading {source}…")
        self.session.runner.submit("pe-compare", lambda: pe_similarity(load(source).model),
                                   lambda sim: self._compared(sim, source),
                                   lambda message: self._failed(source, message), pool="io")

    def _failed(self, source: str, message: str) -> None:
        self.note.setText("")
        self.session.error.emit(f"could not load {source} for comparison: {message}")

    def _compared(self, sim: PESimilarity, name: str) -> None:
        self.note.setText("")
        self.other, self.other_name = sim, name
        self.redraw()

    def _clicked(self, event: Any) -> None:
        if self.mosaic is None or self.sim is None:
            return
        tile = tile_at(self.mosaic, event.scenePos(), self.sim.grid)
        if tile is not None:
            self.patch = tile
            self._show_patch()

    def redraw(self) -> None:
        self.plots.ci.clear()
        self.mosaic = None
        self._patch_map = None
        sim = self.sim
        if sim is None:
            return
        self.note.setText(sim.note)
        if sim.patches is None:
            return
        # the mosaics get a full-width row of their own; the single maps share the row below
        top = self.plots.ci.addLayout()
        self.plots.ci.nextRow()
        bottom = self.plots.ci.addLayout()
        self.plots.ci.layout.setRowStretchFactor(0, 3)
        self.plots.ci.layout.setRowStretchFactor(1, 2)
        scheme = self.session.loaded.config.pos_embed
        _, self.mosaic = figures.draw_similarity_grid(
            top, sim.patches, title=f"position-embedding similarity ({scheme}, {sim.grid[0]}×{sim.grid[1]})")
        if self.other is not None:
            if self.other.patches is None:
                self.note.setText(f"{self.other_name}: {self.other.note}")
            else:
                figures.draw_similarity_grid(top, self.other.patches, title=self.other_name)
        r, c = self.patch
        maps = [(self._patch_title(), sim.patches[r, c])]
        maps += [(f"[{name.upper()}] PE vs patches", values) for name, values in sim.prefix.items()]
        for i, (title, values) in enumerate(maps):  # same levels: one colour bar, after the last map, fits the width
            drawn = figures.draw_heatmap(bottom, values, title=title, cmap=figures.SIMILARITY_CMAP, levels=(-1, 1),
                                         colorbar_label="cosine similarity", grid=sim.grid,
                                         colorbar=i == len(maps) - 1)
            if i == 0:
                self._patch_map = drawn

    def _patch_title(self) -> str:
        return f"patch ({self.patch[0]}, {self.patch[1]}) vs every patch"

    def _show_patch(self) -> None:
        """The clicked patch's map, updated in place."""
        if self._patch_map is None or self.sim is None:
            return
        plot, image = self._patch_map
        live.update_heat(plot, image, self.sim.patches[self.patch], levels=(-1, 1))
        plot.setTitle(self._patch_title(), size=figures.TITLE_SIZE)

    def table(self) -> Table | None:
        if self.sim is None or self.sim.patches is None:
            return None
        gh, gw = self.sim.grid
        rows = [(i, j, r, c, float(self.sim.patches[i, j, r, c]))
                for i in range(gh) for j in range(gw) for r in range(gh) for c in range(gw)]
        return ["row", "col", "other_row", "other_col", "cosine"], rows
