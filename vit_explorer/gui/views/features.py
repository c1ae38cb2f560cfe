"""Features: what the patch tokens show (PCA as colour over several images, [CLS] attention per head, token
norms and registers, patch correspondence, the nearest images by pooled features). What is shown comes
from `explore.features`; the other images are the bundled samples."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QCheckBox, QComboBox, QDoubleSpinBox, QSpinBox, QWidget

from ...data.images import open_image, sample_images
from ...explore import features, registers
from ...explore.figures import Figure, ImagesFigure, arrays
from ...explore.forward import ForwardResult, Inputs, Needs, run_forward
from .. import figures
from ..session import RegisterSettings, Session
from .base import Table, View

MODES = ("PCA of patch features", "[CLS] attention per head", "token norms", "patch correspondence",
         "nearest images", "outliers and register neurons", "attention entropy")
BESIDE = ("PCA of patch features", "token norms")  # the modes that show the model with test-time registers beside
SamplesKey = tuple[int, tuple[int, int], bytes]  # model, input size, head mask: what the samples' features depend on
# what a picture of a pair takes beside its side at text scale 1, measured at 1280x800: across, its margins; down, its
# title row and the space to the next row; and the figure's title (three lines at that width)
PICTURE_FRAME_PX, IMAGES_TITLE_PX = (8, 41), 85
REARRANGE_GAIN = 1.25  # pictures this much larger by the estimate for another arrangement to replace the one shown


class FeaturesView(View):
    key = "features"

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(session, parent)
        self.figure: Figure | None = None
        self.extra: Figure | None = None  # a second figure under the first (token norms: the map)
        self._samples: tuple[SamplesKey, list[tuple[str, np.ndarray]]] | None = None  # (name, pooled features) each
        self.mode = QComboBox()
        self.mode.addItems(MODES)
        self.mode.setToolTip("PCA of the patch tokens as colour (DINOv2), [CLS] attention per head (DINO), token "
                             "norms and registers, which patches of another image match a patch, nearest images.")
        self.state = QSpinBox()  # the block whose output tokens are used; -1: the embedded input
        self.state.setPrefix("after block ")
        self.state.setMinimum(-1)
        self.state.setSpecialValueText("embedded input")
        self.state.setToolTip("Which tokens to use: those after a block (counted from 0, as the Attention view's "
                              "layers), or the embedded input.")
        self.background = QCheckBox("remove background")
        self.background.setToolTip("Split foreground from background by the first principal component, then colour "
                                   "the foreground by the next three (DINOv2's figure).")
        self.share = QDoubleSpinBox()
        self.share.setRange(0.05, 1.0)
        self.share.setSingleStep(0.05)
        self.share.setValue(0.6)
        self.share.setPrefix("keep ")
        self.share.setToolTip("Keep the patches that hold this share of each head's attention (DINO: 60%).")
        self.other = QComboBox()
        for path in sample_images():
            self.other.addItem(f"second image: {path.stem}", str(path))
        self.other.setToolTip("The image whose patches are compared with the chosen patch of this one.")
        self.patch = QSpinBox()
        self.patch.setPrefix("patch ")
        self.patch.setToolTip("The patch (raster index) of this image to match; or click it on the left image.")
        for widget in (self.mode, self.state, self.background, self.share, self.other, self.patch):
            self.controls.addWidget(widget)
        self.plots = pg.GraphicsLayoutWidget()
        self.plots.scene().sigMouseClicked.connect(self._clicked)
        self.body.addWidget(self.plots, 1)
        self._drawn: object = None
        self._arranged = (0, 0)  # (pairs of pictures a row, columns) of the figure drawn (0: none)
        self.mode.currentIndexChanged.connect(self.refresh)
        self.state.valueChanged.connect(self.refresh)
        self.background.toggled.connect(self.refresh)
        self.share.valueChanged.connect(self.refresh)
        self.other.currentIndexChanged.connect(self.refresh)
        self.patch.valueChanged.connect(self.refresh)
        self.listen(session.result_ready, self.schedule_soon)
        self.listen(session.model_changed, self._model_changed)
        self.listen(session.inputs_changed, self._patch_range)
        self.listen(session.registers_changed, self._registers_changed)
        self._model_changed()

    def picture(self) -> QWidget:
        return self.plots

    @property
    def mode_name(self) -> str:
        return MODES[self.mode.currentIndex()]

    def _model_changed(self) -> None:
        loaded = self.session.loaded
        depth = loaded.config.depth if loaded else 1
        self.state.setRange(-1, depth - 1)
        self.state.setValue(depth - 1)  # the last block's tokens, as the papers show them
        self._patch_range()
        self.schedule()

    def _registers_changed(self) -> None:
        if self.mode_name in BESIDE:
            self.schedule()

    def _patch_range(self) -> None:
        """The patches of the grid (another input size has another grid): the new result redraws."""
        self.patch.blockSignals(True)
        self.patch.setRange(0, max(0, int(np.prod(self.session.grid)) - 1))
        self.patch.blockSignals(False)

    def _needs(self, mode: str) -> Needs:
        loaded = self.session.loaded
        if mode == "[CLS] attention per head" and loaded is not None:
            return Needs(maps=frozenset({loaded.config.depth - 1}))
        if mode in ("PCA of patch features", "patch correspondence"):
            return Needs(tokens=frozenset({self.state.value() + 1}))
        return Needs()

    def refresh(self, *_: object) -> None:
        mode = self.mode_name
        for widget, modes in ((self.state, ("PCA of patch features", "patch correspondence")),
                              (self.background, ("PCA of patch features",)),
                              (self.share, ("[CLS] attention per head",)),
                              (self.other, ("patch correspondence",)), (self.patch, ("patch correspondence",))):
            widget.setVisible(mode in modes)
        result = self.session.result
        if result is None:
            return
        needs = self._needs(mode)
        if not self.session.require(self.title, needs):
            self.note.setText("computing…")
            return
        name = self.session.image_name
        if mode == "nearest images":
            self._nearest(result, name)
            return
        state = self.state.value() + 1  # index of the token states: 0 is the embedded input
        background, share = self.background.isChecked(), self.share.value()
        other, patch = self.other.currentData(), self.patch.value()
        settings = self.session.registers
        if settings.on and mode in BESIDE:
            session = self.session
            self.note.setText("computing the model with test-time registers…")
            self.run_for_model(result.inputs.model_id, "features", lambda: self._beside(
                mode, result, session.register_neurons(result.inputs, settings), settings, state, background),
                self._draw, self._failed)
            return
        self.run_for_model(result.inputs.model_id, "features", lambda: self._compute(
            mode, result, needs, name, state, background, share, other, patch), self._draw, self._failed)

    @staticmethod
    def _beside(mode: str, result: ForwardResult, neurons: list[tuple[int, int]], settings: RegisterSettings,
                state: int, background: bool) -> tuple[Figure, Figure | None]:
        """The original and the model with test-time registers side by side (in a worker)."""
        inputs, k = result.inputs, settings.k
        if mode == "token norms":
            return registers.norms_beside(registers.shifted(inputs, neurons, mode=settings.mode, k=k),
                                          result.layout.grid, result.display)
        tokens = registers.shifted_tokens(inputs, neurons, mode=settings.mode, k=k, state=state)
        return registers.pca_beside(inputs, result.display, tokens, result.layout.grid, k, state, background), None

    @staticmethod
    def _compute(mode: str, result: ForwardResult, needs: Needs, name: str, state: int, background: bool,
                 share: float, other: str | None, patch: int) -> tuple[Figure, Figure | None]:
        """The figures of a mode (in a worker): other images run as the result's image ran, with the view's needs."""
        if mode == "PCA of patch features":
            others = features.pca_companions(name)
            results = [result] + [run_beside(result.inputs, p, needs) for p in others]
            return features.pca_figure(results, [name] + [p.stem for p in others], state, background), None
        if mode == "[CLS] attention per head":
            return features.cls_heads_figure(result, share), None
        if mode == "token norms":
            return features.norms_figure(result), features.outliers_figure(result, result.depth)
        if mode == "outliers and register neurons":
            return registers.sample_diagnosis(result.inputs.loaded)
        if mode == "attention entropy":
            return registers.entropy_figure(*registers.attention_entropy(result.inputs)), None
        if other is None:  # patch correspondence, the last mode computed here (nearest images: `_nearest`)
            raise ValueError("no second image: the bundled samples are missing")
        gw = result.layout.grid[1]
        second = run_beside(result.inputs, Path(other), needs)
        return features.correspondence_figure(result, second, state, divmod(patch, gw), (name, Path(other).stem)), None

    def _nearest(self, result: ForwardResult, name: str) -> None:
        """The samples nearest the image by pooled features, the image itself left out (by file stem, as the PCA
        does); the samples run once per model, input size and head mask."""
        inputs = result.inputs
        key = (inputs.model_id, inputs.size, inputs.head_mask.tobytes())
        if self._samples is None or self._samples[0] != key:
            self.note.setText("running the sample images…")
            self.run_for_model(inputs.model_id, "features", lambda: sample_features(inputs),
                               lambda found: self._samples_ready(key, found), self._failed)
            return
        self.session.cancel("features")  # an older figure still computing would replace this one
        others = [(stem, pooled) for stem, pooled in self._samples[1] if not features.same_image(stem, name)]
        nearest = features.nearest(result.features, [pooled for _, pooled in others], [stem for stem, _ in others])
        without_classifier = not inputs.loaded.config.num_classes  # then the embedding is all there is to see
        self._draw((nearest, features.embedding_figure(result) if without_classifier else None))

    def _samples_ready(self, key: SamplesKey, found: list[tuple[str, np.ndarray]]) -> None:
        self._samples = (key, found)
        self.schedule()

    def _draw(self, drawn: tuple[Figure, Figure | None]) -> None:
        self.note.setText("")
        self.figure, self.extra = drawn
        self.plots.ci.clear()
        if isinstance(self.figure, ImagesFigure):
            self._arranged = pairs, columns = self._arrangement()
            layout = self.plots.ci.layout
            left, _, right, _ = layout.getContentsMargins()
            room = self.plots.viewport().width() - left - right - layout.horizontalSpacing() * (columns - 1)
            self._drawn = figures.ImagesPlot(self.plots.ci, self.figure, pairs=pairs, column_px=room / columns)
        else:
            self._drawn = figures.draw(self.plots.ci, self.figure)
        if self.extra is not None:  # in a layout of its own: its columns are not the first figure's
            self.plots.ci.nextRow()
            figures.draw(self.plots.ci.addLayout(), self.extra)

    def _arrangement(self) -> tuple[int, int]:
        """(pairs a row, columns) for the figure in the view's room now."""
        pairs = self._pairs_a_row()
        figure = self.figure
        paired = isinstance(figure, ImagesFigure) and len(figure.images) % 2 == 0
        return pairs, 2 * pairs if paired else min(len(figure.images), 3) if isinstance(figure, ImagesFigure) else 1

    def _pairs_a_row(self) -> int:
        """Pairs of pictures (an image and its PCA colours) a row: as many as draw them largest in the room the view
        is laid out in (at 1280x800 in normal mode two pairs a row draw 207 px pictures, one pair 90 px). The height
        is the page's before its blank rows go (`page_height`): zoomed, the trimmed page depends on the choice."""
        figure = self.figure
        if not isinstance(figure, ImagesFigure) or len(figure.images) % 2:
            return 1
        count, scale = len(figure.images) // 2, figures.text_scale()
        width = self.plots.width()
        height = self.page_height() - (self.height() - self.plots.height()) - IMAGES_TITLE_PX * scale

        def side(pairs: int) -> float:
            rows = -(-count // pairs)
            return min(width / (2 * pairs) - PICTURE_FRAME_PX[0] * scale,
                       height / rows - PICTURE_FRAME_PX[1] * scale)

        best, shown = max(range(1, count + 1), key=side), self._arranged[0]
        # the arrangement on screen stays unless another draws the pictures clearly larger: the estimate is rough
        # (titles wrap differently in other columns), and a layout reshuffled at a Ctrl+plus for a few pixels loses
        # the reader and can draw them smaller
        return shown if 1 <= shown <= count and side(best) < REARRANGE_GAIN * side(shown) else best

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        if isinstance(self.figure, ImagesFigure) and (self._arrangement() != self._arranged or event.size().width()
                                                      != event.oldSize().width()):  # the titles fit the columns
            self._draw((self.figure, self.extra))

    def _clicked(self, event: object) -> None:
        """In correspondence mode, a click on the first image picks the patch to match."""
        result = self.session.result
        if self.mode_name != "patch correspondence" or not isinstance(self._drawn, figures.ImagesPlot) or not result:
            return
        hit = self._drawn.pixel_at(event.scenePos())
        if hit is not None and hit[0] == 0:
            h, w = result.display.shape[:2]
            gh, gw = result.layout.grid
            self.patch.setValue(hit[1] * gh // h * gw + hit[2] * gw // w)

    def _failed(self, message: str) -> None:
        self.plots.ci.clear()
        self.figure = self.extra = None
        self.note.setText(message)

    def restyle(self) -> None:
        if self.figure is not None:
            self._draw((self.figure, self.extra))

    def table(self) -> Table | None:
        if isinstance(self.figure, ImagesFigure) or self.figure is None:
            return None
        rows = [(key, i, float(v)) for key, values in arrays(self.figure).items()
                for i, v in enumerate(np.asarray(values).reshape(-1))]
        return ["series", "index", "value"], rows


def run_beside(inputs: Inputs, path: Path, needs: Needs) -> ForwardResult:
    """Another image run as `inputs` ran (the same model, size and head mask), nothing masked (in a worker)."""
    return run_forward(Inputs(inputs.loaded, open_image(path), inputs.size, np.zeros(inputs.mask.shape, bool),
                              inputs.head_mask, needs=needs))


def sample_features(inputs: Inputs) -> list[tuple[str, np.ndarray]]:
    """Each bundled sample's name and pooled features, run as `inputs` ran (in a worker)."""
    return [(path.stem, run_beside(inputs, path, Needs()).features) for path in sample_images()]
