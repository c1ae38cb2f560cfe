"""Compare: the current model and a second one side by side on the same image, masks and head switches
(prediction, attention rollout, position-embedding similarity). What is shown comes from `explore.compare`; the
second model is the session's (`Session.compared`)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import replace

import pyqtgraph as pg
from PySide6.QtWidgets import QComboBox, QLineEdit, QPushButton, QWidget

from ...checkpoints import LoadedModel
from ...explore.compare import PRESETS, Side, joint_prediction, side
from ...explore.forward import Needs
from ...paths import BUNDLED
from .. import figures
from ..session import Session, could_not_load, model_name
from .base import Table, View

TOP_K = 3  # classes per side: the maps below need the height more (the Prediction panel lists five)
# px of the view's width that two columns' titles cannot have: the margins (titles in a row across the columns), or
# the margins, each column's patch axes and the colour bars beside its maps (titles over the figures)
MARGINS, BESIDE = 40, 320


class CompareView(View):
    key = "compare"

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(session, parent)
        self.sides: tuple[Side, ...] | None = None
        self.preset: list[tuple[str, LoadedModel]] | None = None  # a preset's models, shown instead of two
        self.choice = QComboBox()
        self.choice.addItem("compare with a bundled model…", "")
        for name, folder in BUNDLED.items():
            if (folder / "vit_explorer.json").exists():
                self.choice.addItem(name, str(folder))
        for name in PRESETS:
            self.choice.addItem(f"preset: {name}", f"preset:{name}")
        self.choice.setToolTip("A second model to run on the same image, masks and heads, or a preset of several "
                               "(the three stems side by side).")
        self.choice.activated.connect(lambda i: self.compare_with(self.choice.itemData(i) or ""))
        self.source = QLineEdit()
        self.source.setPlaceholderText("or a hub id, folder or file")
        self.source.returnPressed.connect(lambda: self.compare_with(self.source.text().strip()))
        load = QPushButton("Compare")
        load.setToolTip("Load the model named in the box as the second model.")
        load.clicked.connect(lambda: self.compare_with(self.source.text().strip()))
        for widget in (self.choice, self.source, load):
            self.controls.addWidget(widget)
        self.plots = pg.GraphicsLayoutWidget()
        self.plots.ci.setContentsMargins(2, 2, 2, 2)  # two columns side by side: the pixels go to the figures
        self.body.addWidget(self.plots, 1)
        self.listen(session.result_ready, self.schedule_soon)
        self.listen(session.model_changed, self.schedule)
        self.listen(session.compared_changed, self._compared)

    def picture(self) -> QWidget:
        """The two columns once a second model is shown; before that, the view (there is no figure yet)."""
        return self.plots if self.sides is not None else self

    def compare_with(self, source: str) -> None:
        """Load a second model (in the background) and show both."""
        if not source:
            return
        if source.startswith("preset:"):
            self.show_preset(source.removeprefix("preset:"))
            return
        self.preset = None
        from ...checkpoints import load

        self.note.setText(f"loading {source}…")
        self.session.run("compare-load", lambda: load(source), self.session.set_compared,
                         lambda message: self._failed(source, message), io=True)

    def show_preset(self, name: str) -> None:
        """Load a preset's models (in the background) and show them side by side on the current image."""
        self.note.setText(f"loading the preset {name}…")
        self.session.run("compare-load", PRESETS[name], self._preset_ready,
                         lambda message: self._failed(f"the preset {name}", message), io=True)

    def _preset_ready(self, models: list[tuple[str, LoadedModel]]) -> None:
        self.preset = models
        self._compared()

    def _compared(self) -> None:
        self.note.setText("")
        self.schedule()

    def _failed(self, source: str, message: str) -> None:
        self.note.setText("")
        self.session.error.emit(could_not_load(source, message, " to compare"))

    def refresh(self, *_: object) -> None:
        result, other, mine = self.session.result, self.session.compared, self.session.loaded
        if self.preset is not None and result is not None:
            models, inputs = self.preset, result.inputs
            self.run_for_model(inputs.model_id, "compare",
                               lambda: tuple(side(loaded, name, inputs, TOP_K) for name, loaded in models), self._draw)
            return
        if other is None:
            self.sides = None
            self.plots.ci.clear()
            self.note.setText("Choose a second model to compare with the current one.")
            return
        if result is None or mine is None or not self.session.require(self.title, Needs(fusion="mean")):
            return  # drawn when the pass with the rollout arrives
        inputs, names = result.inputs, (model_name(mine, "the current model"), self.session.compared_name)
        self.run_for_model(inputs.model_id, "compare",
                           lambda: (side(mine, names[0], inputs, TOP_K, done=result),
                                    side(other, names[1], inputs, TOP_K)),
                           self._draw)

    def _draw(self, sides: tuple[Side, ...]) -> None:
        self.sides = sides
        self.plots.ci.clear()
        notes: dict[str, list[str]] = {}  # the same note for several sides is said once, naming them all
        for one in sides:
            if one.note:
                notes.setdefault(one.note, []).append(one.name.split(":")[0])
        if len(sides) > 2:  # a row each leaves no room for a third panel
            notes.setdefault("PE similarity is shown for two models (choose a second model above)", [])
        self.note.setText("; ".join(f"{', '.join(names)}: {note}" if names else note for note, names in notes.items()))
        if len(sides) > 2:
            self._draw_rows(sides)
            return
        # both predictions in one chart across the view when the models share their classes
        joint = joint_prediction(sides[0], sides[1], TOP_K) if self.shows("prediction") else None
        if joint is not None:
            figures.BarsPlot(self.plots.ci.addLayout(row=0, col=0, colspan=2), joint)
        columns = []
        if [name for name in self.panels if name != "prediction"] or joint is None:
            columns = [self.plots.ci.addLayout(row=1, col=i) for i in range(2)]
            for column in columns:
                column.setContentsMargins(0, 0, 0, 0)  # the view's own margins hold: the pixels go to the figures
        for i in range(2):  # two equal columns
            self.plots.ci.layout.setColumnStretchFactor(i, 1)
        same_scale = sides[0].similarity is not None and sides[1].similarity is not None and (
            sides[0].similarity.levels == sides[1].similarity.levels is not None)
        # the grids alone (a lesson step on them): their titles in a row across the columns, and on one scale, one
        # colour bar in a thin row under both, so that both are the same size; with the other panels above them, one
        # colour bar after the last column (a row under all three panels would take the height they need)
        alone = self.panels == ("position",)
        grids = []
        with self._titles_fitting(beside=MARGINS if alone else BESIDE):
            for i, (column, one) in enumerate(zip(columns, sides if columns else (), strict=True)):
                similarity = one.similarity
                if similarity is not None and alone:  # each title names its side; the row is as tall as the longer
                    title = figures.wrap_title(f"{one.name}: {similarity.title}")
                    if similarity.note:
                        title += f"<br><i>{figures.wrap_title(similarity.note)}</i>"
                    self.plots.ci.addLabel(title, row=0, col=i, size=figures.title_size())
                    similarity = replace(similarity, title="", note="")
                elif not self.shows("prediction") or joint is not None:  # a side's own bars name it, else a heading
                    figures.add_title(column, one.name)
                    column.nextRow()
                drawn = 0  # panels in this column so far: each after the first in a row of its own
                if one.prediction is not None and self.shows("prediction") and joint is None:
                    figures.BarsPlot(column, one.prediction)
                    drawn += 1
                if self.shows("rollout"):
                    if drawn:
                        column.nextRow()
                    figures.MapsPlot(column, one.rollout)
                    drawn += 1
                if similarity is not None and self.shows("position"):
                    if drawn:
                        column.nextRow()
                    bar = not same_scale or (not alone and one is sides[-1])
                    grids.append(figures.SimilarityPlot(column, similarity, colorbar=bar))
        if same_scale and alone and grids:
            figure = grids[0].figure
            figures.draw_colorbar(self.plots.ci, [grid.mosaic for grid in grids], levels=grids[0].levels,
                                  cmap=figures.SIMILARITY_CMAP, label=figure.colorbar_label, row=2, col=0, colspan=2,
                                  orientation="horizontal")

    def _draw_rows(self, sides: tuple[Side, ...]) -> None:
        """More than two models (a preset): a row each, its prediction (titled with its name) beside its rollout;
        three columns would be too narrow for either."""
        with self._titles_fitting():
            for i, one in enumerate(sides):
                row = self.plots.ci.addLayout(row=i, col=0)
                if one.prediction is not None and self.shows("prediction"):
                    figures.BarsPlot(row, one.prediction)
                else:
                    figures.add_title(row, one.name)
                if self.shows("rollout"):
                    figures.MapsPlot(row, one.rollout)

    def _titles_fitting(self, beside: int = BESIDE) -> AbstractContextManager[None]:
        """Titles that fit one column (half the view; the rows of a preset too), `beside` px of the view's width
        going to the patch axes and colour bars."""
        return self.titles_fitting(self.plots, 2, beside=beside, most=44)

    def restyle(self) -> None:
        if self.sides is not None:
            self._draw(self.sides)

    def table(self) -> Table | None:
        if self.sides is None:
            return None
        rows = []
        for one in self.sides:
            if one.prediction is not None:
                rows += [(one.name, label, float(p)) for label, p in zip(one.prediction.labels, one.prediction.values,
                                                                       strict=True)]
        return ["model", "class", "probability"], rows

