"""Dataset: what the model learned across many images. Choose a folder or a built-in set and analyse it (in a
worker, with progress and cancel; features are cached on disk): probe accuracy per token state and the confusion
matrix at the best state, CKA between states (and against the Compare view's model) where a click on a cell
lists the images that drive it, a projector of images or patch tokens (hover: the thumbnail; click: open the
image in the explorer, a patch as the query), and the mean attention distance and token norms over the dataset."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyqtgraph as pg
from PIL import Image, ImageDraw
from PySide6.QtCore import QPoint, QPointF, Qt, Signal
from PySide6.QtGui import QImage, QPixmap
from PySide6.QtWidgets import (
    QBoxLayout,
    QComboBox,
    QFileDialog,
    QGraphicsSceneMouseEvent,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSpinBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from ...analysis import probes as P
from ...analysis.polygon import inside
from ...data import synthetic
from ...explore import dataset as D
from ...explore import dataset_analysis as A
from ...explore.attention import distance_figure
from ...jobs import Job
from .. import figures
from ..session import Session
from ..text import Legend
from .base import Note, Table, View, placeholder_pane
from .job_controls import JobControls
from .sae_browser import SaeBrowser

COLOURINGS = ("label", "model's prediction", "probe's prediction")
POINTS = ("images", "patch tokens")
DISTANCE_FIGURES = ("mean attention distance per head", "its spread over the images", "token norms")
THUMB = 112  # pixels per side of the hover thumbnail
DEFAULT_LIMIT = 1000
CELL_HINT = "Click a cell: the images that drive it"
LASSO_HINT = "Lasso: Shift+drag (or the Lasso button, then drag) around points"
LISTED = 1000  # selected images listed at most (the count says how many there are)
PLACEHOLDER = ("Choose a dataset (a built-in set, or a folder of images: Folder…) and press Analyse. Here appear, "
               "over its images: the accuracy of probes on every token state and their confusion matrix, CKA "
               "between the states, a projector of the images or their patch tokens, and the attention distance "
               "and token norms.")


class LassoViewBox(pg.ViewBox):
    """A ViewBox whose left drag draws a freehand lasso when `lasso` is on or Shift is held (a plain drag pans);
    on release `lassoed` gives the polygon in data coordinates, (V, 2)."""

    lassoed = Signal(object)

    def __init__(self) -> None:
        super().__init__()
        self.lasso = False
        self._shift = False  # Shift was held at the last press
        self._drawing = False  # the drag going on draws a lasso
        self.vertices: list[tuple[float, float]] = []
        self.outline = pg.PlotCurveItem(pen=pg.mkPen((20, 20, 20), width=1.5, style=Qt.PenStyle.DashLine))
        self.outline.setZValue(20)
        self.addItem(self.outline, ignoreBounds=True)

    def mousePressEvent(self, ev: QGraphicsSceneMouseEvent) -> None:  # noqa: N802 - Qt's name
        # Shift is read at the press: the drag that follows is a lasso to its end, whatever the keys do meanwhile
        self._shift = bool(ev.modifiers() & Qt.KeyboardModifier.ShiftModifier)
        ev.ignore()  # pyqtgraph's scene turns the press and the moves into its drag event

    def mouseDragEvent(self, ev: Any, axis: int | None = None) -> None:  # noqa: N802 - pyqtgraph's name
        if ev.isStart():
            self._drawing = ev.button() == Qt.MouseButton.LeftButton and (self.lasso or self._shift)
        if not self._drawing:
            super().mouseDragEvent(ev, axis)
            return
        ev.accept()
        if ev.isStart():
            start = self.mapSceneToView(ev.buttonDownScenePos())
            self.vertices = [(start.x(), start.y())]
        here = self.mapSceneToView(ev.scenePos())
        self.vertices.append((here.x(), here.y()))
        finished = ev.isFinish()
        xy = np.asarray(self.vertices + self.vertices[:1] if finished else self.vertices)
        self.outline.setData(xy[:, 0], xy[:, 1])
        if finished:
            self._drawing = False
            self.lassoed.emit(np.asarray(self.vertices))

    def clear_outline(self) -> None:
        self.vertices = []
        self.outline.setData([], [])


def _qpixmap(image: Image.Image) -> QPixmap:
    rgb = np.ascontiguousarray(np.asarray(image.convert("RGB")))
    h, w, _ = rgb.shape
    return QPixmap.fromImage(QImage(rgb.data, w, h, 3 * w, QImage.Format.Format_RGB888).copy())


class DatasetView(View):
    key = "dataset"

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(session, parent)
        self.drivers: list[int] = []  # image indices listed for the CKA cell chosen
        self.selected = np.zeros(0, dtype=np.int64)  # the projector's points inside the lasso
        self.data = QComboBox()
        self.data.setEditable(True)
        self.data.addItems(list(synthetic.VARIANTS))
        self.data.setMinimumContentsLength(14)
        self.data.setToolTip("A built-in set, or a folder of images: one sub-folder per class (or flat, unlabelled).")
        folder = QPushButton("Folder…")
        folder.clicked.connect(self.choose_folder)
        self.limit = QSpinBox()
        self.limit.setRange(10, 1_000_000)
        self.limit.setValue(DEFAULT_LIMIT)
        self.limit.setPrefix("images ")
        self.limit.setToolTip("A seeded, stratified sample of this many images.")
        self.job = JobControls(self, "dataset", run_text="Analyse", on_run=self.start,
                               on_cancelled=lambda: self._finished("analysis cancelled"))
        self.run_button, self.progress = self.job.button, self.job.bar
        self.projection = QComboBox()
        self.projection.addItems(list(A.PROJECTIONS))
        self.projection.setToolTip("PCA (exact), t-SNE or UMAP (seeded) of the projector's features.")
        self.state = QSpinBox()
        self.state.setPrefix("state ")
        self.state.setToolTip("The token state the projector shows: 0 the embedded input, i the output of block i-1.")
        self.points_kind = QComboBox()
        self.points_kind.addItems(list(POINTS))
        self.colour = QComboBox()
        self.colour.addItems(list(COLOURINGS))
        for widget in (self.data, folder, self.limit, self.job, self.projection, self.state,
                       self.points_kind, self.colour):
            self.controls.addWidget(widget)
        for box in (self.projection, self.points_kind):
            box.currentIndexChanged.connect(self.update_projection)
        self.state.valueChanged.connect(self.update_projection)
        self.colour.currentIndexChanged.connect(self._colour_points)

        self.tabs = QTabWidget()
        probe_column = self._page("Probes", QVBoxLayout)
        self.probe_kind = QComboBox()  # one figure at a time: each gets the whole page
        self.probe_kind.addItems(["accuracy per token state", "confusion matrix at the best state"])
        self.probe_kind.currentIndexChanged.connect(self._draw_probes)
        probe_column.addWidget(self.probe_kind, 0, Qt.AlignmentFlag.AlignLeft)
        self.probe_plots = pg.GraphicsLayoutWidget()
        probe_column.addWidget(self.probe_plots, 1)
        cka_row = self._page("CKA", QHBoxLayout)
        left = QVBoxLayout()
        self.cka_of = QComboBox()
        self.cka_of.addItems(["within this model", "against the compared model"])
        self.cka_of.currentIndexChanged.connect(self._draw_cka)
        left.addWidget(self.cka_of, 0, Qt.AlignmentFlag.AlignLeft)
        self.cka_plots = pg.GraphicsLayoutWidget()
        self._cka_plot: pg.PlotItem | None = None  # the heatmap drawn now
        self.cka_plots.scene().sigMouseClicked.connect(self._cka_clicked)
        left.addWidget(self.cka_plots, 1)
        cka_row.addLayout(left, 5)
        right = QVBoxLayout()
        self.cell_label = QLabel(CELL_HINT)
        self.cell_label.setWordWrap(True)
        right.addWidget(self.cell_label)
        self.driver_list = self._image_list()
        right.addWidget(self.driver_list, 1)
        cka_row.addLayout(right, 2)
        proj_row = self._page("Projector", QHBoxLayout)
        self.projector = pg.GraphicsLayoutWidget()
        self.lasso_box = LassoViewBox()
        self.lasso_box.lassoed.connect(self.select_inside)
        self.scatter_plot = self.projector.ci.addPlot(viewBox=self.lasso_box)
        self.scatter_plot.setMenuEnabled(False)
        self.scatter = pg.ScatterPlotItem(size=7, pen=None, hoverable=True, hoverSize=11,
                                          hoverPen=pg.mkPen("k", width=1.5))
        self.scatter_plot.addItem(self.scatter)
        self.marks = pg.ScatterPlotItem(size=11, pen=pg.mkPen((10, 10, 10), width=1.5), brush=None)  # the selection
        self.marks.setZValue(10)
        self.scatter_plot.addItem(self.marks)
        # a swatch per class, named as written, in a column of its own: beside the points, never on them
        self.legend = Legend()
        self.projector.ci.addItem(self.legend, row=0, col=1)
        self.scatter.sigHovered.connect(self._hovered)
        self.scatter.sigClicked.connect(self._clicked)
        proj_row.addWidget(self.projector, 4)
        side = QVBoxLayout()
        self.thumb = QLabel()
        self.thumb.setFixedSize(THUMB, THUMB)
        self.thumb.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.thumb_text = QLabel("Hover a point: its image; click: open it in the explorer")
        self.thumb_text.setWordWrap(True)
        self.thumb_text.setMaximumWidth(THUMB + 60)
        side.addWidget(self.thumb)
        side.addWidget(self.thumb_text)
        lasso_row = QHBoxLayout()
        self.lasso_button = QPushButton("Lasso")
        self.lasso_button.setCheckable(True)
        self.lasso_button.setToolTip("On: a drag draws a lasso around points instead of panning (or hold Shift).")
        self.lasso_button.toggled.connect(lambda on: setattr(self.lasso_box, "lasso", on))
        self.clear_button = QPushButton("Clear")
        self.clear_button.setToolTip("Clear the lasso selection.")
        self.clear_button.clicked.connect(self.clear_selection)
        lasso_row.addWidget(self.lasso_button)
        lasso_row.addWidget(self.clear_button)
        side.addLayout(lasso_row)
        self.selection_label = QLabel(LASSO_HINT)
        self.selection_label.setWordWrap(True)
        self.selection_label.setMaximumWidth(THUMB + 60)
        side.addWidget(self.selection_label)
        self.selection_list = self._image_list()
        self.selection_list.setMaximumWidth(THUMB + 60)
        side.addWidget(self.selection_list, 1)
        proj_row.addLayout(side, 0)
        distance_column = self._page("Attention distance and norms", QVBoxLayout)
        self.distance_kind = QComboBox()  # one figure at a time: each gets the whole page
        self.distance_kind.addItems(list(DISTANCE_FIGURES))
        self.distance_kind.currentIndexChanged.connect(self._draw_distance)
        distance_column.addWidget(self.distance_kind, 0, Qt.AlignmentFlag.AlignLeft)
        self.distance_plots = pg.GraphicsLayoutWidget()
        distance_column.addWidget(self.distance_plots, 1)
        self.sae = SaeBrowser(self)
        self.tabs.addTab(self.sae, "Features (SAE)")
        self.pane, self.placeholder = placeholder_pane(PLACEHOLDER, self.tabs)  # before the analysis
        self.body.addWidget(self.pane, 1)
        self.detail = Note()
        self.body.addWidget(self.detail)
        self.listen(session.model_changed, self._model_changed)
        self.listen(session.compared_changed, self._draw_cka)
        self._model_changed()

    def picture(self) -> QWidget:
        return self.tabs.currentWidget() if self.analysis is not None else self.placeholder

    # ------------------------------------------------------------------ the analysis shown (the session's)
    @property
    def analysis(self) -> A.DatasetAnalysis | None:
        return self.session.dataset.analysis if self.session.dataset is not None else None

    @property
    def _projection(self) -> A.Projection | None:
        return self.session.dataset.projection if self.session.dataset is not None else None

    @property
    def points(self) -> np.ndarray | None:
        """(M, 2) the projector's points, of the analysis shown."""
        return self._projection.points if self._projection is not None else None

    @property
    def point_rows(self) -> np.ndarray | None:
        """(M,) the image index of each point."""
        return self._projection.rows if self._projection is not None else None

    @property
    def point_patch(self) -> np.ndarray | None:
        """(M,) the patch index of each point (-1: a whole image)."""
        return self._projection.patch if self._projection is not None else None

    # ------------------------------------------------------------------ running
    def choose_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Image folder (one sub-folder per class)")
        if path:
            self.data.setCurrentText(path)

    def _model_changed(self) -> None:
        self.job.stop()
        self._finished("")
        self.session.set_dataset(None)
        self.sae.reset()
        for widget in (self.probe_plots, self.cka_plots, self.distance_plots):
            widget.ci.clear()
        self.scatter.clear()
        self.driver_list.clear()
        self.clear_selection()
        loaded = self.session.loaded
        self.state.setRange(0, loaded.config.depth if loaded is not None else 0)
        self.state.setValue(self.state.maximum())
        self.run_button.setEnabled(loaded is not None)
        self.pane.setCurrentWidget(self.placeholder)

    def start(self) -> None:
        """Open the dataset and analyse it in a worker (features come from the cache when they are there)."""
        loaded = self.session.loaded
        if loaded is None:
            return
        data, limit = self.data.currentText().strip(), self.limit.value()
        compared = self.session.compared
        self.note.setText(f"analysing {data}…")

        def work(job: Job) -> A.DatasetAnalysis:
            source = D.open_source(data, limit=limit)
            return A.analyse(loaded, source, compared=compared, cache=D.default_cache(), job=job)

        self.job.start(self.session.model_id, work, self._done, self._failed)

    def _finished(self, note: str) -> None:
        self.note.setText(note)

    def _failed(self, message: str) -> None:
        self._finished(f"the analysis failed: {message}")

    def _done(self, analysis: A.DatasetAnalysis) -> None:
        self.session.set_dataset(A.DatasetState(analysis))  # the whole of the last one goes, its projection too
        self.sae.reset()  # its codes were of the last one's images
        self.scatter.clear()
        self.legend.clear()
        self.clear_selection()
        self.pane.setCurrentWidget(self.tabs)
        f = analysis.features
        skipped = f" ({len(f.skipped)} unreadable images skipped)" if f.skipped else ""
        cached = ", features from the cache" if f.from_cache else ""
        best = analysis.best
        probe = f"; the linear probe is a {best.linear_model} (so many classes)" if best is not None and \
            best.linear_model != P.LOGISTIC else ""
        self._finished(f"{f.source.name}: {len(f):,} images, {int((f.source.split == 1).sum()):,} for validation"
                       f"{skipped}{cached}{probe}" + ("" if f.source.labelled else "; no labels, so no probes"))
        self.restyle()
        self.update_projection()

    # ------------------------------------------------------------------ drawing
    def restyle(self) -> None:
        if self.analysis is None:
            return
        self._draw_probes()
        self._draw_cka()
        self._draw_distance()
        if self.points is not None:
            self._style_projector()

    def _draw_probes(self, *_: object) -> None:
        self.probe_plots.ci.clear()
        best = None if self.analysis is None else self.analysis.best
        if self.analysis is None or best is None:
            return
        if self.probe_kind.currentIndex() == 0:
            figures.draw(self.probe_plots.ci, A.probe_figure(self.analysis.probes, self.analysis.features.depth))
        else:
            figures.draw(self.probe_plots.ci, A.confusion_figure(best))

    def cka_matrix(self) -> tuple[np.ndarray, bool] | None:
        """The matrix drawn and whether it is against the compared model."""
        a = self.analysis
        if a is None:
            return None
        against = self.cka_of.currentIndex() == 1 and a.cka_compared is not None
        return (a.cka_compared if against and a.cka_compared is not None else a.cka), against

    def _draw_cka(self, *_: object) -> None:
        self.cka_plots.ci.clear()
        self._cka_plot = None
        self.driver_list.clear()  # they were the images of a cell of the matrix drawn before
        self.drivers = []
        self.cell_label.setText(CELL_HINT)
        shown = self.cka_matrix()
        if shown is None:
            return
        matrix, against = shown
        a = self.analysis
        assert a is not None
        if self.cka_of.currentIndex() == 1 and not against:
            self.cell_label.setText("Load a model in the Compare view, then Analyse again, for CKA between the two.")
        kind = a.tokens_compared if against else a.tokens
        title = (f"linear CKA of the {'[CLS]' if kind == 'cls' else 'mean patch token'}: states (rows) x "
                 + (f"{self.session.compared_name} states" if against else "states") + " (0 = input)")
        self._cka_plot = figures.draw(self.cka_plots.ci, A.cka_figure(matrix, title)).plots[0]

    def _cka_clicked(self, event: object) -> None:
        plot, shown = self._cka_plot, self.cka_matrix()
        scene_pos = event.scenePos()
        if plot is None or shown is None or not plot.vb.sceneBoundingRect().contains(scene_pos):
            return
        pos = plot.vb.mapSceneToView(scene_pos)
        row, col = int(np.floor(pos.y())), int(np.floor(pos.x()))
        if 0 <= row < shown[0].shape[0] and 0 <= col < shown[0].shape[1]:
            self.show_drivers(row, col)

    def show_drivers(self, row: int, col: int, k: int = 12) -> None:
        """List the images that contribute most to CKA cell (row, col)."""
        shown = self.cka_matrix()
        a = self.analysis
        if shown is None or a is None:
            return
        matrix, against = shown
        tokens = a.tokens_compared if against else a.tokens  # both sides read the same kind of token
        top, shares = A.cka_drivers(a.features, row, col, a.compared if against else None, tokens, k=k)
        self.cell_label.setText(f"CKA {matrix[row, col]:.3f} of state {row} and state {col}: the {len(top)} images "
                                "that contribute most (click one to open it)")
        self.driver_list.clear()
        self.drivers = [int(i) for i in top]
        for i, share in zip(top, shares, strict=True):
            item = QListWidgetItem(f"{share:+.4f}  {a.features.source.paths[int(i)]}")
            item.setData(Qt.ItemDataRole.UserRole, int(i))
            self.driver_list.addItem(item)

    def _draw_distance(self, *_: object) -> None:
        a = self.analysis
        self.distance_plots.ci.clear()
        if a is None:
            return
        kind = self.distance_kind.currentText()
        if kind == DISTANCE_FIGURES[2] or a.distance is None or self.session.loaded is None:
            figures.draw(self.distance_plots.ci, A.norms_figure(a.norms, a.features.depth))
        elif kind == DISTANCE_FIGURES[1]:
            figures.draw(self.distance_plots.ci, A.distance_spread_figure(a.distance))
        else:
            layout = self.session.loaded.model.layout(self.session.loaded.preprocessing.size)
            figures.draw(self.distance_plots.ci, distance_figure(a.distance.mean, layout))

    # ------------------------------------------------------------------ the projector
    def update_projection(self, *_: object) -> None:
        """Project the chosen state's features (in a worker: t-SNE and UMAP take seconds)."""
        a = self.analysis
        if a is None:
            return
        f, state, method = a.features, self.state.value(), self.projection.currentText()
        patches = self.points_kind.currentText() == "patch tokens"
        if patches:
            n, k = f.patch_index.shape
            x = f.patches[:, state].reshape(n * k, -1).astype(np.float32)
            rows, patch = np.repeat(np.arange(n), k), f.patch_index.reshape(-1)
        else:
            x = f.tokens(a.tokens)[state]
            rows, patch = np.arange(len(f)), np.full(len(f), -1)
        self.detail.setText(f"projecting {len(x):,} points ({method})…")
        self.run_for_model(self.session.model_id, "dataset-projection", lambda: A.project(x, method),
                           lambda points: self._projected(a, A.Projection(points, rows, patch)), self.detail.setText)

    def _projected(self, analysis: A.DatasetAnalysis, projection: A.Projection) -> None:
        dataset = self.session.dataset
        if dataset is None or dataset.analysis is not analysis:
            return  # the points of an analysis replaced since
        self.session.set_dataset(A.DatasetState(analysis, projection))
        self.clear_selection()  # the lasso was drawn around the points of another projection
        self._style_projector()
        self.scatter_plot.autoRange()
        self.detail.setText("")

    def _style_projector(self) -> None:
        """The projector's title and coloured points with their legend, in the text scale of now."""
        a, points, patch = self.analysis, self.points, self.point_patch
        assert a is not None and points is not None and patch is not None
        kind = "patch tokens" if (patch >= 0).any() else ("[CLS]" if a.tokens == "cls" else "mean patch token")
        figures.set_title(self.scatter_plot, f"{self.projection.currentText().upper()} of the {kind}, state "
                                             f"{self.state.value()} ({len(points):,} points)")
        self._colour_points()

    def point_colours(self) -> np.ndarray | None:
        """(M,) the class index each point is coloured by (-1: grey)."""
        a, rows = self.analysis, self.point_rows
        if a is None or rows is None:
            return None
        f = a.features
        how = self.colour.currentText()
        if how == "model's prediction":
            by_image = f.predicted
        elif how == "probe's prediction" and a.best is not None:
            by_image = np.full(len(f), -1)
            by_image[a.best.val] = a.best.predictions
        else:
            by_image = f.source.labels
        return by_image[rows]

    def _colour_points(self, *_: object) -> None:
        colours = self.point_colours()
        if colours is None or self.points is None:
            return
        classes = max(int(colours.max()) + 1, 1)
        palette = [pg.mkBrush(pg.intColor(c, hues=max(classes, 2), alpha=200)) for c in range(classes)]
        grey = pg.mkBrush(150, 150, 150, 120)
        brushes = [palette[c] if c >= 0 else grey for c in colours]
        self.scatter.setData(pos=self.points, brush=brushes, data=np.arange(len(self.points)))
        self.legend.clear()
        self.legend.setLabelTextSize(figures.label_size())  # the text scale's (presented: large), as the axes'
        names = self.analysis.features.source.label_names if self.analysis is not None else []
        for c in range(min(classes, len(names))):
            self.legend.addItem(pg.ScatterPlotItem(size=8, pen=None, brush=palette[c]), names[c])
        if (colours < 0).any():
            self.legend.addItem(pg.ScatterPlotItem(size=8, pen=None, brush=grey), "training image (no probe)")

    def select_inside(self, polygon: np.ndarray) -> None:
        """Select the projector's points inside `polygon` ((V, 2), data coordinates): mark them and list their
        images (each once, in dataset order; a click opens one)."""
        if self.points is None or self.point_rows is None or self.point_patch is None or self.analysis is None:
            return
        self.selected = np.flatnonzero(inside(self.points, polygon))
        self.marks.setData(pos=self.points[self.selected])
        images = self.selected_images()
        paths = self.analysis.features.source.paths
        patches = f"{len(self.selected):,} patch tokens of " if (self.point_patch >= 0).any() else ""
        listed = f" (the first {LISTED:,} listed)" if len(images) > LISTED else ""
        self.selection_label.setText(f"selected {patches}{len(images):,} images{listed}; click one to open it")
        self.selection_list.clear()
        for i in images[:LISTED]:
            item = QListWidgetItem(paths[int(i)])
            item.setToolTip(paths[int(i)])
            item.setData(Qt.ItemDataRole.UserRole, int(i))
            self.selection_list.addItem(item)

    def selected_images(self) -> np.ndarray:
        """The image indices of the selected points, each once, sorted."""
        if self.point_rows is None:
            return np.zeros(0, dtype=np.int64)
        return np.unique(self.point_rows[self.selected])

    def clear_selection(self) -> None:
        self.selected = np.zeros(0, dtype=np.int64)
        self.marks.clear()
        self.lasso_box.clear_outline()
        self.selection_list.clear()
        self.selection_label.setText(LASSO_HINT)

    def point_at(self, x: float, y: float) -> QPoint:
        """Where data point (x, y) of the projector is drawn, in its widget's coordinates (tests drag through it)."""
        return self.projector.mapFromScene(self.lasso_box.mapViewToScene(QPointF(x, y)))

    def _hovered(self, item: object, points: list[pg.SpotItem], event: object) -> None:
        if not len(points) or self.analysis is None or self.point_rows is None or self.point_patch is None:
            return
        n = int(points[0].data())
        row, patch = int(self.point_rows[n]), int(self.point_patch[n])
        self.thumb.setPixmap(_qpixmap(self.thumbnail(row, patch)))
        src = self.analysis.features.source
        label = src.label_names[src.labels[row]] if src.labelled else "unlabelled"
        where = f", patch {divmod(patch, self.analysis.features.grid[1])}" if patch >= 0 else ""
        self.thumb_text.setText(f"{src.paths[row]}{where}\n{label}")

    def thumbnail(self, row: int, patch: int = -1) -> Image.Image:
        """The image, THUMB pixels wide, with the patch outlined (patch tokens)."""
        assert self.analysis is not None
        f = self.analysis.features
        try:
            image = f.source.image(row).convert("RGB").resize((THUMB, THUMB), Image.Resampling.BILINEAR)
        except ValueError:
            return Image.new("RGB", (THUMB, THUMB), (90, 90, 90))
        if patch >= 0:
            gh, gw = f.grid
            r, c = divmod(patch, gw)
            ImageDraw.Draw(image).rectangle((c * THUMB / gw, r * THUMB / gh, (c + 1) * THUMB / gw - 1,
                                             (r + 1) * THUMB / gh - 1), outline=(255, 40, 40), width=2)
        return image

    def _clicked(self, item: object, points: list[pg.SpotItem], event: object) -> None:
        if len(points) and self.point_rows is not None and self.point_patch is not None:
            n = int(points[0].data())
            self.open_image(int(self.point_rows[n]), int(self.point_patch[n]))

    def _page(self, title: str, kind: type[QBoxLayout]) -> QBoxLayout:
        """A new tab `title`, and its margin-less layout of `kind` to fill."""
        page = QWidget()
        box = kind(page)
        box.setContentsMargins(0, 0, 0, 0)
        self.tabs.addTab(page, title)
        return box

    def _image_list(self) -> QListWidget:
        """A list of images (each item's UserRole: its index in the dataset); a click opens it in the explorer."""
        images = QListWidget()
        opened = lambda item: self.open_image(int(item.data(Qt.ItemDataRole.UserRole)))
        images.itemClicked.connect(opened)
        images.itemActivated.connect(opened)
        return images

    def open_image(self, row: int, patch: int = -1) -> None:
        """Open image `row` in the explorer; a patch becomes the query token of the attention maps."""
        a = self.analysis
        if a is None:
            return
        try:
            image = a.features.source.image(row)
        except ValueError as error:
            self.detail.setText(str(error))
            return
        self.session.set_image(image, a.features.source.paths[row])
        if patch >= 0:
            grid = a.features.grid
            if tuple(self.session.grid) == tuple(grid):
                self.session.select(query=divmod(patch, grid[1]))

    def cell_at(self, row: int, col: int) -> QPoint:
        """Where CKA cell (row, col) is drawn, in the heatmap widget's coordinates (tests click it)."""
        assert self._cka_plot is not None
        scene = self._cka_plot.vb.mapViewToScene(QPointF(col + 0.5, row + 0.5))
        return self.cka_plots.mapFromScene(scene)

    def table(self) -> Table | None:
        a = self.analysis
        if a is None or not a.probes:
            return None
        rows = [(int(s), c.tokens, float(k), float(lin)) for c in a.probes
                for s, k, lin in zip(c.states, c.knn, c.linear, strict=True)]
        return ["state", "tokens", "knn", "linear"], rows
