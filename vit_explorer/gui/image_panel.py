"""The image as the model sees it, with the patch grid, [MASK] painting, drawing and the query token."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyqtgraph as pg
from PIL import Image, ImageDraw
from PySide6.QtCore import QPointF, QSize, Qt, QTimer
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QImage, QResizeEvent
from PySide6.QtWidgets import (
    QApplication,
    QButtonGroup,
    QComboBox,
    QFileDialog,
    QFrame,
    QGraphicsItem,
    QLabel,
    QPushButton,
    QRadioButton,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from ..data.images import IMAGE_EXTENSIONS, ImageError, open_image, sample_images
from ..explore.forward import ForwardResult
from ..explore.lessons import INPUT_MODES
from . import figures
from .flow import flow_row
from .session import Session
from .session_widget import SessionWidget

QUERY_RGBA = (255, 215, 0, 200)


HOVER_HINT = "Hover a patch: row, col, token"  # short: one line in a narrow column


def qimage_to_pil(qimage: QImage) -> Image.Image:
    """A QImage (e.g. from the clipboard) as a PIL RGB image."""
    qimage = qimage.convertToFormat(QImage.Format.Format_RGB888)
    w, h, stride = qimage.width(), qimage.height(), qimage.bytesPerLine()
    data = np.frombuffer(qimage.constBits(), np.uint8, count=stride * h).reshape(h, stride)  # (H, stride)
    return Image.fromarray(data[:, : 3 * w].reshape(h, w, 3).copy())


class Painter(Protocol):
    """What a PatchCanvas reports to: the image panel, or a view that paints patches of its own (Components)."""

    def hover(self, pos: QPointF | None) -> None: ...

    def press(self, pos: QPointF, start: bool) -> None: ...


class PatchCanvas(pg.ImageItem):
    """The model-resolution image; reports hover, clicks and drags in pixel coordinates."""

    def __init__(self, panel: Painter) -> None:
        super().__init__()
        self.panel = panel
        self.setAcceptHoverEvents(True)

    def hoverEvent(self, event: Any) -> None:  # noqa: N802 - pyqtgraph's name
        if event.isExit():
            self.panel.hover(None)
        else:
            self.panel.hover(event.pos())

    def mouseClickEvent(self, event: Any) -> None:  # noqa: N802
        if event.button() == Qt.MouseButton.LeftButton:
            event.accept()
            self.panel.press(event.pos(), start=True)

    def mouseDragEvent(self, event: Any) -> None:  # noqa: N802
        if event.button() != Qt.MouseButton.LeftButton:
            event.ignore()
            return
        event.accept()
        self.panel.press(event.pos(), start=event.isStart())


class ControlsArea(QScrollArea):
    """Asks for the height its contents need at its width (their height for that width), so the image above
    gets the rest; scrolls only when there is not that much room. `keep_whole`: never less than that height
    (presenting: the few controls left must stay on screen)."""

    keep_whole = False

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        widget = self.widget()
        if widget is None:
            return super().sizeHint()
        width = self.viewport().width() or widget.width()
        height = widget.heightForWidth(width) if widget.hasHeightForWidth() else widget.sizeHint().height()
        return QSize(super().sizeHint().width(), max(height, widget.minimumSizeHint().height()) + 2 * self.frameWidth())

    def set_keep_whole(self, keep: bool) -> None:
        """Off: no least height. On: the contents' height at the width the pending layout gives (measured after it:
        mid-change, the width is the old one, and its height could push the window past the screen)."""
        self.keep_whole = keep
        if keep:
            QTimer.singleShot(0, self, lambda: self._keep(self.width()))
        else:
            self._keep(self.width())

    def _keep(self, width: int) -> None:
        widget = self.widget()
        need = widget.heightForWidth(width) + 2 * self.frameWidth() \
            if self.keep_whole and widget is not None and widget.hasHeightForWidth() else 0
        if need != self.minimumHeight():
            self.setMinimumHeight(need)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._keep(event.size().width())
        self.updateGeometry()  # a new width may need another height


class ImagePanel(SessionWidget):
    """Open/drop/paste an image or a sample; paint masks, draw, pick the query; set the resolution."""

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(session, parent)
        self.setAcceptDrops(True)
        self._paint_value = True
        self._last_draw: tuple[float, float] | None = None

        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        open_button = self.open_button = QPushButton("Open image…")
        open_button.setToolTip("Open an image file (you can also drop one here or paste with Ctrl+V).")
        open_button.clicked.connect(self.ask_open)
        self.samples = QComboBox()
        self.samples.setToolTip("Pick one of the bundled sample images.")
        self.samples.addItem("Samples…")
        for path in sample_images():
            self.samples.addItem(path.stem, str(path))
        self.samples.activated.connect(self._sample_chosen)
        blank = self.blank_button = QPushButton("Blank")
        blank.setToolTip("Start drawing on a black canvas.")
        blank.clicked.connect(self.clear_canvas)
        layout.addWidget(flow_row([open_button, self.samples, blank]))

        self.plot = pg.GraphicsLayoutWidget()
        self.plot.setMinimumSize(110, 110)  # small: the panel gives its height to the chart below first
        self.view = self.plot.addViewBox(lockAspect=True, invertY=True, enableMouse=False)
        self.canvas = PatchCanvas(self)
        self.view.addItem(self.canvas)
        self.mask_item = pg.ImageItem()  # the query patch, highlighted
        self.view.addItem(self.mask_item)
        self._hatches: list[QGraphicsItem] = []  # masked patches, drawn as the figures draw them
        self._shown: tuple[object, ...] | None = None  # the (model, image, size) whose picture the canvas holds
        self._marked: tuple[object, ...] | None = None  # the (patch, mask, query) the hatches and highlight show
        self.grid_item = pg.PlotCurveItem(pen=pg.mkPen((255, 255, 255, 110), width=1), connect="pairs")
        self.view.addItem(self.grid_item)
        for item in (self.mask_item, self.grid_item):
            item.setAcceptedMouseButtons(Qt.MouseButton.NoButton)
            item.setAcceptHoverEvents(False)
        for item in (self.canvas, self.grid_item):  # a click changes neither: painted from a pixmap at screen size
            item.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        layout.addWidget(self.plot, 1)

        self.hover_label = QLabel(HOVER_HINT)
        self.hover_label.setWordWrap(True)
        controls = QWidget()  # below the image; scrolls rather than squeezing it when the text is large
        layout_controls = QVBoxLayout(controls)
        layout_controls.setContentsMargins(0, 0, 0, 0)
        layout_controls.addWidget(self.hover_label)

        self.mode_group = QButtonGroup(self)
        for i, (name, tip) in enumerate((
            ("Mask", "Click or drag over patches to toggle the [MASK] token."),
            ("Query", "Click a patch to make it the query token of the attention view."),
            ("Draw", "Draw on the image with the mouse; the model classifies as you draw."),
        )):
            button = QRadioButton(name)
            button.setToolTip(tip)
            self.mode_group.addButton(button, i)
        self.mode_group.button(0).setChecked(True)
        self.compact = False  # presentation mode (set_compact)
        self.zoom, self._unzoomed = 1.0, QSize()  # Ctrl+plus beyond the mode's text size (set_zoom)
        self._least_side = 110  # small: the panel gives its height to the chart below first
        self.mode_group.idToggled.connect(lambda *_: self._drawing_tools())
        self.brush = QSpinBox()
        self.brush.setRange(1, 64)
        self.brush.setValue(3)
        self.brush.setPrefix("brush ")
        self.brush.setToolTip("Brush width in model pixels for drawing.")
        self.mode_row = flow_row([*self.mode_group.buttons(), self.brush])
        layout_controls.addWidget(self.mode_row)

        clear = QPushButton("Clear")
        clear.setToolTip("Unmask every patch (Esc).")
        clear.clicked.connect(self.clear_mask)
        invert = QPushButton("Invert")
        invert.setToolTip("Mask the visible patches and unmask the masked ones.")
        invert.clicked.connect(lambda: self.session.set_mask(~self.session.mask))
        self.percent = QSpinBox()
        self.percent.setRange(0, 100)
        self.percent.setValue(50)
        self.percent.setSuffix(" %")
        self.percent.setToolTip("Share of patches the Random button masks.")
        random_button = QPushButton("Random")
        random_button.setToolTip("Mask a random share of the patches.")
        random_button.clicked.connect(self.random_mask)
        self.mask_row = flow_row([clear, invert, self.percent, random_button])
        layout_controls.addWidget(self.mask_row)
        self.height_box, self.width_box = QSpinBox(), QSpinBox()
        for box, name in ((self.height_box, "H "), (self.width_box, "W ")):
            box.setRange(1, 4096)
            box.setPrefix(name)
            box.setToolTip("Input size in pixels fed to the model (a multiple of the patch size); "
                           "learned position embeddings are resampled.")
        apply_size = QPushButton("Apply")
        apply_size.setToolTip("Run the model at this height and width (rectangles too).")
        apply_size.clicked.connect(self.apply_size)
        reset_size = QPushButton("Native")
        reset_size.setToolTip("Go back to the resolution the model was trained at (NaFlex: the image's own).")
        reset_size.clicked.connect(self.reset_size)
        self.size_row = flow_row([self.height_box, self.width_box, apply_size, reset_size])
        layout_controls.addWidget(self.size_row)
        scroll = self.controls_area = ControlsArea()
        scroll.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)  # extra room is the image's
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setWidget(controls)
        layout.addWidget(scroll)

        self.listen(session.model_changed, self._model_changed)
        self.listen(session.inputs_changed, self._draw_mask)
        self.listen(session.inputs_changed, self._sync_size_boxes)  # a size set elsewhere (a lesson step)
        self.listen(session.selection_changed, self._draw_mask)
        self.listen(session.result_ready, self._result)
        self.listen(session.image_changed, self._image_changed)
        self._model_changed()

    # ------------------------------------------------------------------ inputs
    def ask_open(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open image", "", "Images (" +
                                              " ".join(f"*{e}" for e in IMAGE_EXTENSIONS) + ")")
        if path:
            self.open_path(path)

    def open_path(self, path: str) -> bool:
        """Open an image file; a bad file gives a message and changes nothing."""
        try:
            image = open_image(path)
        except ImageError as error:
            self.session.error.emit(str(error))
            return False
        self.session.set_image(image, Path(path).name)
        return True

    def set_compact(self, compact: bool, hover: bool = False, min_image: int = 110) -> None:
        """Presentation mode: the image (at least `min_image` px), its first row and the Mask / Query / Draw
        choice; the hover readout only when `hover` (a lesson step asks the class to hover); Esc clears the mask."""
        self.compact = compact
        self.hover_label.setVisible(not compact or hover)
        self.open_button.setVisible(not compact)  # File > Open image (Ctrl+O) is still there
        for row in (self.mask_row, self.size_row):
            row.setVisible(not compact)
        self._drawing_tools()
        # compact, the few controls left are never scrolled away: the prediction below gives up the room
        self._least_side = min_image if compact else 110
        self._keep_image()
        margin = 1 if compact else 9  # pyqtgraph's default margin: presenting, the pixels go to the image
        self.plot.ci.layout.setContentsMargins(margin, margin, margin, margin)

    def set_zoom(self, zoom: float) -> None:
        """Ctrl+plus beyond the mode's text size (its ZoomArea calls this): the page keeps its pane's width, so the
        controls' rows wrap into more lines; the controls keep their whole height and the image its side, `zoom`
        times larger as far as the width lets it, and the page grows down (it scrolls) instead."""
        if self.zoom == 1 and zoom > 1:
            self._unzoomed = self.plot.size()
        self.zoom = zoom
        self._keep_image()

    def _keep_image(self) -> None:
        self.plot.setMinimumSize(self._least_side, self._least_side)
        if self.zoom > 1:  # taller only: the pane's width is the width
            side = min(self._unzoomed.width(), self._unzoomed.height())
            self.plot.setMinimumHeight(max(self._least_side, min(round(self.zoom * side), self._unzoomed.width())))
        self.controls_area.set_keep_whole(self.compact or self.zoom > 1)

    def _drawing_tools(self) -> None:
        """Compact, the blank canvas and the brush only while drawing: the image keeps the room otherwise."""
        shown = not self.compact or self.mode_group.checkedId() == INPUT_MODES.index("draw")
        self.blank_button.setVisible(shown)
        self.brush.setVisible(shown)

    def set_input_mode(self, mode: str) -> None:
        """"mask", "query" or "draw": what a click on the image does."""
        self.mode_group.button(INPUT_MODES.index(mode)).setChecked(True)

    def input_mode(self) -> str:
        """What a click on the image does now: "mask", "query" or "draw"."""
        return INPUT_MODES[self.mode_group.checkedId()]

    def open_sample_or_path(self, name: str) -> bool:
        """"sample:NAME" for a bundled sample, else an image file."""
        if name.startswith("sample:"):
            paths = [p for p in sample_images() if p.stem == name.removeprefix("sample:")]
            if not paths:
                self.session.error.emit(f"no bundled sample {name.removeprefix('sample:')!r}")
                return False
            name = str(paths[0])
        return self.open_path(name)

    def _image_changed(self) -> None:
        """The samples box names the sample on screen, or goes back to "Samples…" for any other image."""
        index = self.samples.findText(Path(self.session.image_name).stem) if self.session.image_name else -1
        self.samples.setCurrentIndex(max(index, 0))

    def _sample_chosen(self, index: int) -> None:
        path = self.samples.itemData(index)
        if path:
            self.open_path(path)

    def paste(self) -> None:
        qimage = QApplication.clipboard().image()
        if qimage.isNull():
            self.session.error.emit("the clipboard holds no image")
            return
        self.session.set_image(qimage_to_pil(qimage), "pasted image")

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802
        urls = event.mimeData().urls()
        if urls and urls[0].toLocalFile().lower().endswith(IMAGE_EXTENSIONS):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802
        self.open_path(event.mimeData().urls()[0].toLocalFile())

    def clear_mask(self) -> None:
        self.session.set_mask(np.zeros(self.session.grid, bool))

    def random_mask(self) -> None:
        gh, gw = self.session.grid
        n = round(gh * gw * self.percent.value() / 100)
        mask = np.zeros(gh * gw, bool)
        mask[np.random.default_rng().choice(gh * gw, n, replace=False)] = True
        self.session.set_mask(mask.reshape(gh, gw))

    def apply_size(self) -> None:
        try:
            self.session.set_size((self.height_box.value(), self.width_box.value()))
        except ValueError as error:
            self._sync_size_boxes()  # the size refused: the boxes show the one the model still runs at
            self.session.error.emit(str(error))

    def reset_size(self) -> None:
        if self.session.loaded is not None:
            image = self.session.image
            self.session.set_size(self.session.loaded.preprocessing.native_size(image.height, image.width))
            self._sync_size_boxes()

    def clear_canvas(self) -> None:
        h, w = self.session.size
        self.session.set_image(Image.new("RGB", (w, h), (0, 0, 0)), "drawing")

    # ------------------------------------------------------------------ mouse
    def patch_at(self, pos: QPointF) -> tuple[int, int] | None:
        p = self.session.loaded.config.patch_size if self.session.loaded else 16
        gh, gw = self.session.grid
        row, col = int(pos.y() // p), int(pos.x() // p)
        if 0 <= row < gh and 0 <= col < gw:
            return row, col
        return None

    def hover(self, pos: QPointF | None) -> None:
        patch = None if pos is None else self.patch_at(pos)
        if patch is None or self.session.result is None:
            return
        layout = self.session.result.layout
        row, col = patch
        state = " · masked" if self.session.mask[row, col] else ""
        self.hover_label.setText(f"row {row}, col {col}, token {layout.token_index(row, col)}{state}")

    def press(self, pos: QPointF, start: bool) -> None:
        mode = self.mode_group.checkedId()
        if mode == 2:
            self._draw(pos, start)
            return
        patch = self.patch_at(pos)
        if patch is None:
            return
        if mode == 1:
            self.session.select(query=patch)
            return
        if start:  # a drag paints the value the first patch toggled to
            self._paint_value = not self.session.mask[patch]
        if self.session.mask[patch] != self._paint_value:
            self.session.toggle_patch(*patch, value=self._paint_value)

    def _draw(self, pos: QPointF, start: bool) -> None:
        """Draw a white stroke on the image, under the cursor: model pixels are mapped to the image's own through
        the model's resize and centre crop."""
        loaded = self.session.loaded
        if loaded is None:
            return
        image = self.session.image.copy()
        recipe = loaded.preprocessing.with_size(self.session.size)
        y, x = recipe.source_point(pos.y(), pos.x(), image.height, image.width)
        point = (x, y)
        rh, rw = recipe.resized_size(image.height, image.width)
        width = max(1, round(self.brush.value() * (image.height / rh + image.width / rw) / 2))
        draw = ImageDraw.Draw(image)
        if start or self._last_draw is None:
            r = width / 2
            draw.ellipse((point[0] - r, point[1] - r, point[0] + r, point[1] + r), fill=(255, 255, 255))
        else:
            draw.line([self._last_draw, point], fill=(255, 255, 255), width=width, joint="curve")
        self._last_draw = point
        self.session.set_image(image, "drawing")

    # ------------------------------------------------------------------ drawing
    def _model_changed(self) -> None:
        self._sync_size_boxes()
        self._draw_mask()

    def _sync_size_boxes(self) -> None:
        if self.session.loaded is None:
            return
        p = self.session.loaded.config.patch_size
        for box, value in ((self.height_box, self.session.size[0]), (self.width_box, self.session.size[1])):
            box.setSingleStep(p)
            box.setMinimum(p)
            box.setValue(value)

    def _result(self, result: ForwardResult) -> None:
        inputs = result.inputs
        shown = (inputs.model_id, inputs.image_id, inputs.size)
        if shown != self._shown:  # a mask click or a head toggle: the same picture, nothing to draw again
            self._shown = shown
            self._draw_picture(result)
        self._draw_mask()

    def _draw_picture(self, result: ForwardResult) -> None:
        self.canvas.setImage(result.display, autoLevels=False, levels=(0, 255))
        h, w = result.display.shape[:2]
        p = result.layout.patch_size
        xs, ys = [], []
        for x in range(0, w + 1, p):
            xs += [x, x]
            ys += [0, h]
        for y in range(0, h + 1, p):
            xs += [0, w]
            ys += [y, y]
        self.grid_item.setData(np.asarray(xs, float), np.asarray(ys, float))
        self.view.setRange(xRange=(0, w), yRange=(0, h), padding=0.01)

    def _draw_mask(self) -> None:
        if self.session.loaded is None:
            return
        p = self.session.loaded.config.patch_size
        gh, gw = self.session.mask.shape
        marked = (p, self.session.mask.tobytes(), self.session.mask.shape, self.session.query)
        if marked == self._marked:  # drawn already (at the click, before its pass): no repaint
            return
        self._marked = marked
        for item in self._hatches:
            self.view.removeItem(item)
        before = set(self.view.addedItems)
        figures.draw_masked_cells(self.view, self.session.mask, gh * p, gw * p)  # grey and hatched, as in every view
        self._hatches = [item for item in self.view.addedItems if item not in before]
        for item in self._hatches:
            item.setAcceptedMouseButtons(Qt.MouseButton.NoButton)
        rgba = np.zeros((gh, gw, 4), np.uint8)
        if self.session.query is not None and self.session.query[0] < gh and self.session.query[1] < gw:
            rgba[self.session.query] = QUERY_RGBA
        self.mask_item.setImage(rgba, autoLevels=False, levels=(0, 255))
        self.mask_item.setRect(0, 0, gw * p, gh * p)
        self.mask_item.setVisible(self.session.query is not None)  # fully transparent: nothing to paint
