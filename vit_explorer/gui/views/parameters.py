"""Parameter counts: the stage -> layer -> tensor tree with shares, a bar chart of the stages, and the
compute of one image at the current input size (from `explore.tables`)."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QSplitter, QTreeWidget, QTreeWidgetItem, QWidget

from ...analysis.params import ParameterTable
from ...explore.tables import ModelTables, model_tables
from .. import figures
from ..session import Session
from .base import Table, View


class ParametersView(View):
    key = "parameters"

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(session, parent)
        self.params: ParameterTable | None = None
        self.tables: ModelTables | None = None
        split = self.split = QSplitter(Qt.Orientation.Vertical)
        self.tree = QTreeWidget()
        self.tree.setColumnCount(4)
        self.tree.setHeaderLabels(["stage / layer / tensor", "shape", "parameters", "share"])
        header = self.tree.header()
        header.setStretchLastSection(False)
        for column in range(4):  # every column as wide as its widest entry, expanded rows included
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        self.tree.setToolTip("Every parameter tensor, grouped by stage and layer; expand a row to see its tensors.")
        split.addWidget(self.tree)
        self.chart = pg.GraphicsLayoutWidget()
        self.chart.setToolTip("Parameters per stage of the model.")
        split.addWidget(self.chart)
        split.setSizes([500, 400])
        self.body.addWidget(split, 1)
        self.listen(session.model_changed, self.schedule)
        self.listen(session.inputs_changed, self._compute_changed)
        self.refresh()

    def picture(self) -> QWidget:
        return self.split

    def restyle(self) -> None:
        self.chart.setVisible(self.shows("chart"))
        super().restyle()

    def expand(self, path: tuple[str, ...]) -> None:
        """Expand the tree down to the row named by `path` (stage, layer, ...), the other layers closed as the tree
        opens, and show it; a name that is not there is a ValueError naming it."""
        if self._dirty:  # a new model while hidden: the tree is of the one before
            self._dirty = False
            self.refresh()
        for stage in (self.tree.topLevelItem(i) for i in range(self.tree.topLevelItemCount())):
            for index in range(stage.childCount() if stage is not None else 0):
                child = stage.child(index) if stage is not None else None
                if child is not None:
                    child.setExpanded(False)
        parent: QTreeWidgetItem = self.tree.invisibleRootItem()
        for name in path:
            children = [parent.child(i) for i in range(parent.childCount())]
            found = [child for child in children if child is not None and child.text(0) == name]
            if not found:
                names = [child.text(0) for child in children[:12] if child is not None]
                raise ValueError(f"the parameter tree has no row {name!r} here (rows: {names})")
            parent = found[0]
            parent.setExpanded(True)
        self.tree.setCurrentItem(parent)
        # at the top: the row's own children (a block's tensors, LayerScale's among them) get the room below it; its
        # last child on screen too (at 1024x768 presented, a block's 18 tensors are a row more than the tree shows:
        # ls2.gamma, which the LayerScale step names, was below the edge)
        self.tree.scrollToItem(parent, QAbstractItemView.ScrollHint.PositionAtTop)
        if parent.childCount():
            self.tree.scrollToItem(parent.child(parent.childCount() - 1), QAbstractItemView.ScrollHint.EnsureVisible)

    def open_rows(self) -> tuple[str, ...]:
        """The names of the tree's rows on screen: those whose parents are all expanded."""
        rows: list[str] = []

        def walk(item: QTreeWidgetItem) -> None:
            for child in (item.child(i) for i in range(item.childCount())):
                if child is not None:
                    rows.append(child.text(0))
                    if child.isExpanded():
                        walk(child)

        walk(self.tree.invisibleRootItem())
        return tuple(rows)

    def _compute_changed(self) -> None:
        """A new input size changes the compute, not the parameters (masks change neither)."""
        if self.session.loaded is not None and self.tables is not None:
            self.tables = self.tables.at_size(self.session.loaded.model, self.session.size)
            self.note.setText(self.tables.compute_text())

    def refresh(self, *_: object) -> None:
        self.tree.clear()
        self.chart.ci.clear()
        if self.session.loaded is None:
            return
        tables = self.tables = model_tables(self.session.loaded.model, self.session.size)
        table = self.params = tables.params
        self.note.setText(tables.compute_text())
        stages: dict[str, QTreeWidgetItem] = {}
        layers: dict[tuple[str, str], QTreeWidgetItem] = {}
        by_stage = table.by_stage()
        for stage, count in by_stage.items():
            stages[stage] = QTreeWidgetItem(self.tree, [stage, "", f"{count:,}", f"{table.share(count):.1%}"])
        for stage, layer, count in table.by_layer():
            layers[(stage, layer)] = QTreeWidgetItem(stages[stage], [layer, "", f"{count:,}",
                                                                     f"{table.share(count):.1%}"])
        for row in table.rows:
            QTreeWidgetItem(layers[(row.stage, row.layer)], [row.name, "×".join(map(str, row.shape)),
                                                             f"{row.count:,}", f"{table.share(row.count):.2%}"])
        QTreeWidgetItem(self.tree, ["total", "", f"{table.total:,}", "100%"])
        for item in stages.values():
            item.setExpanded(True)
        figures.draw(self.chart.ci, tables.params_figure())

    def table(self) -> Table | None:
        if self.params is None:
            return None
        rows = [(r.stage, r.layer, r.name, "x".join(map(str, r.shape)), r.count, self.params.share(r.count))
                for r in self.params.rows]
        return ["stage", "layer", "tensor", "shape", "parameters", "share"], rows
