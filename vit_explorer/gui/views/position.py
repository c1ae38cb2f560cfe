"""Position embeddings: the per-patch similarity grid, one patch's map large, the prefix tokens' maps,
and a comparison with another scheme or another model. What is shown comes from `explore.position`."""

from __future__ import annotations

from dataclasses import replace

import pyqtgraph as pg
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QComboBox, QLineEdit, QPushButton, QWidget

from ...analysis.pe import PESimilarity
from ...explore import position
from ...explore.figures import SimilarityFigure
from ...models import VisionTransformer
from ...models.position import SCHEMES
from .. import figures
from ..session import Session
from .base import Table, View

# a similarity mosaic's room around its data area (axes; title and axis), the colour bar after the last one, the
# least width of a column of mosaics, the mosaics' share of the height above the single maps (rows 3:2), and the
# least side of a compared mosaic before the maps give way
MOSAIC_FRAME_PX, COLORBAR_PX, COLUMN_MIN_PX, MOSAIC_SHARE, READABLE_PX = (70, 110), 90, 230, 0.6, 120
MIN_TITLE_CHARS = 12
# one mosaic alone: its room around the data area across (axis and colour bar) and down (title and axis), and a
# single map's (axis; title of up to three lines), at text scale 1 (measured at 1280x800: 91 and 118; 83 and 91 px)
ONE_MOSAIC_FRAME_PX, MAP_FRAME_PX = (95, 120), (85, 95)


class PositionView(View):
    key = "position"

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(session, parent)
        self.sim: PESimilarity | None = None
        self.inside: SimilarityFigure | None = None  # the picture of a scheme inside attention (RoPE, BEiT's bias)
        self.other: PESimilarity | None = None
        self.other_name = ""
        self.patch = (0, 0)
        self.figure: SimilarityFigure | None = None
        self._drawn: figures.SimilarityPlot | None = None
        self._drawn_layout = (0, 0, True)  # (mosaics a row, title characters, maps) of the figure drawn
        self._beside = False  # the single maps of one mosaic drawn beside it (_maps_beside), not below
        self.compare = QComboBox()
        self.compare.addItem("no comparison", "")
        for scheme in SCHEMES.values():
            if scheme.additive:
                self.compare.addItem(f"compare: {scheme.label} (untrained)", scheme.name)
        self.compare.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.compare.setMinimumContentsLength(20)  # long scheme names elide in the box, read whole in its list
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
            self.controls.addWidget(widget)
        self.plots = pg.GraphicsLayoutWidget()
        self.plots.setToolTip("Click a tile to see that patch's similarity map large.")
        self.plots.scene().sigMouseClicked.connect(self._clicked)
        self.body.addWidget(self.plots, 1)
        self._key: tuple[int, tuple[int, int]] | None = None  # (model, grid) last computed
        self.listen(session.model_changed, self.schedule)
        self.listen(session.inputs_changed, self.schedule)
        self.refresh()

    def picture(self) -> QWidget:
        return self.plots

    def export_info(self) -> dict[str, str]:
        info = {**super().export_info(), "patch shown large": f"{self.patch[0]},{self.patch[1]}"}
        if self.other is not None:
            info["compared with"] = self.other_name
        return info

    @property
    def mosaic(self) -> pg.ImageItem | None:
        """The similarity mosaic drawn, or None."""
        return None if self._drawn is None else self._drawn.mosaic

    def refresh(self, *_: object) -> None:
        loaded = self.session.loaded
        key = (self.session.model_id, self.session.grid)
        if loaded is None or key == self._key:  # masks do not change the position embedding
            return
        self._key = key
        model, grid = loaded.model, self.session.grid
        self.session.run("pe", lambda: self._compute(model, grid), self._computed)
        if self.compare.currentData():
            self._compare_scheme()

    @staticmethod
    def _compute(model: VisionTransformer, grid: tuple[int, int]) -> tuple[PESimilarity, SimilarityFigure | None]:
        """In a worker: the similarity, and for a scheme inside attention (also EVA-02's RoPE beside its table) its
        own picture (RoPE's is N² big)."""
        return position.similarity(model, grid), position.attention_scheme_figure(model, grid)

    def _computed(self, pictures: tuple[PESimilarity, SimilarityFigure | None]) -> None:
        self.sim, self.inside = pictures
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
        self.session.run("pe-compare", lambda: position.scheme_similarity(loaded.model, scheme, grid),
                         lambda sim: self._compared(sim, name))

    def _compare_model(self) -> None:
        source = self.compare_source.text().strip()
        if not source:
            return
        from ...checkpoints import load

        self.note.setText(f"loading {source}…")
        self.session.run("pe-compare", lambda: position.similarity(load(source).model),
                         lambda sim: self._compared(sim, source), lambda message: self._failed(source, message),
                         io=True)

    def _failed(self, source: str, message: str) -> None:
        self.note.setText("")
        self.session.error.emit(f"could not load {source} for comparison: {message}")

    def _compared(self, sim: PESimilarity, name: str) -> None:
        self.note.setText("")
        self.other, self.other_name = sim, name
        self.redraw()

    def _clicked(self, event: object) -> None:
        if self._drawn is None or self.sim is None or self.sim.patches is None:
            return
        tile = self._drawn.tile_at(event.scenePos())
        if tile is not None:
            self.patch = tile
            title, values = position.patch_map(self.sim, tile)
            self._drawn.show_map(title, values)

    def restyle(self) -> None:
        self.redraw()

    def redraw(self) -> None:
        self.plots.ci.clear()
        self._drawn = self.figure = None
        sim, loaded = self.sim, self.session.loaded
        if sim is None or loaded is None:
            return
        notes = [sim.note] if sim.note else []
        if sim.patches is None:  # a scheme inside attention (RoPE, BEiT's bias) has its own picture, if any
            self.note.setText(sim.note)
            if self.inside is not None:
                self.figure = self.inside
                self._drawn = figures.SimilarityPlot(self.plots.ci, self.inside)
            return
        others: tuple[tuple[str, PESimilarity], ...] = ()
        if self.other is not None:
            if self.other.patches is None:
                notes.append(f"{self.other_name}: {self.other.note}")
            others = ((self.other_name, self.other),)
        self.note.setText("; ".join(notes))
        self.patch = position.clamp_patch(sim, self.patch)
        rotation = self.inside.similarity if self.inside is not None else None  # EVA-02: its RoPE beside its table
        figure = position.pe_figure(sim, position.title(loaded.model, sim.grid), self.patch, others, rotation)
        self.figure = figure if self.shows("maps") else replace(figure, maps=())
        if not self.figure.others:  # one mosaic: its maps below it, or beside it in a wide view
            self._beside = self._maps_beside()
            self._drawn = figures.SimilarityPlot(self.plots.ci, self.figure, maps_beside=self._beside)
            return
        self._drawn_layout = columns, chars, maps = self._mosaic_layout()
        if not maps and self.figure.maps:
            self.figure = replace(self.figure, maps=())
            self.note.setText("; ".join([*notes, "the single maps make room for the comparison (a wider view shows "
                                                 "them)"]))
        while True:  # titles narrower until the figure is no wider than the view (pyqtgraph never squeezes them)
            with figures.title_width(chars):
                self._drawn = figures.SimilarityPlot(self.plots.ci, self.figure, columns=columns)
            if chars <= MIN_TITLE_CHARS or self.plots.ci.minimumWidth() <= self.plots.width():
                break
            self.plots.ci.clear()
            chars = max(MIN_TITLE_CHARS, chars - 4)

    def _mosaic_layout(self) -> tuple[int, int, bool]:
        """Mosaics a row, the characters of a title line, and whether the single maps fit below: a comparison
        (another scheme, another model, EVA-02's rotation) wraps onto more rows rather than running off the
        right, and in a narrow view the maps give way to the mosaics it is about (clicking a tile still shows its
        map in the lesson-sized views)."""
        count = 1 + len(self.figure.others) if self.figure is not None else 1
        width, height = self.plots.width() - COLORBAR_PX, self.plots.height()

        def side(columns: int, share: float) -> float:  # the mosaics' side, with that many a row
            rows = -(-count // columns)
            return min(width / columns - MOSAIC_FRAME_PX[0], share * height / rows - MOSAIC_FRAME_PX[1])

        maps = self.figure is not None and bool(self.figure.maps)
        fits = [c for c in range(1, count + 1) if width / c >= COLUMN_MIN_PX] or [1]
        columns = max(fits, key=lambda c: side(c, MOSAIC_SHARE if maps else 1.0))
        if maps and count > 1 and side(columns, MOSAIC_SHARE) < READABLE_PX:
            maps = False
            columns = max(fits, key=lambda c: side(c, 1.0))
        return columns, max(MIN_TITLE_CHARS, min(44, int((width / columns - 30) / 10))), maps

    def _maps_beside(self) -> bool:
        """One mosaic and its single maps: the maps go in a column beside the mosaic when that draws the mosaic
        larger than the rows below it would (a wide pane: at 1280x800 in normal mode, 456 px rather than 265)
        and each map is still readable."""
        if self.figure is None or not self.figure.maps or self.figure.others:
            return False
        scale, share = figures.text_scale(), figures.MAPS_COLUMN_SHARE
        (across, down), (map_across, map_down) = ONE_MOSAIC_FRAME_PX, MAP_FRAME_PX
        width, height = self.plots.width(), self.plots.height()
        below = min(width - across * scale, MOSAIC_SHARE * height - down * scale)
        beside = min((1 - share) * width - across * scale, height - down * scale)
        maps = min(share * width - map_across * scale, height / len(self.figure.maps) - map_down * scale)
        return beside > below and maps >= READABLE_PX

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        if self.figure is None:
            return
        if (self._mosaic_layout() != self._drawn_layout) if self.figure.others else (
                self._maps_beside() != self._beside):
            self.redraw()

    def table(self) -> Table | None:
        if self.sim is None or self.sim.patches is None:
            return None
        gh, gw = self.sim.grid
        rows = [(i, j, r, c, float(self.sim.patches[i, j, r, c]))
                for i in range(gh) for j in range(gw) for r in range(gh) for c in range(gw)]
        return ["row", "col", "other_row", "other_col", "cosine"], rows
