"""The main window: source box, dockable views, status bar, shortcuts.

The window paints first with only Qt imported; PyTorch and the model code are imported on a
background thread, then the views are built and the source is loaded (see `run_app`).
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEvent, QMargins, QObject, QRect, QSettings, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QDragEnterEvent, QDropEvent, QGuiApplication
from PySide6.QtWidgets import (
    QComboBox,
    QCompleter,
    QDockWidget,
    QFileDialog,
    QLabel,
    QMainWindow,
    QProgressBar,
    QPushButton,
    QTabBar,
    QTabWidget,
    QToolBar,
    QWidget,
)

from ..text import shown
from .banner import Banner
from .collector import app_collector, collect_everything
from .lesson import LessonRunner
from .menus import install_menus
from .presentation import Presentation
from .settings import problem, read_texts

PREFERRED_SIZE = (1600, 1000)
# a window manager's frame before the window is shown and has one (a title bar above, thin borders)
FRAME_GUESS = QMargins(4, 32, 4, 4)
RECENT_KEY = "recent_sources"
MAX_RECENT = 12


def fit_window(preferred: QSize, room: QRect, frame: QMargins) -> tuple[QRect, bool]:
    """The window's geometry (inside its frame) centred in `room`: the preferred size where it fits with the
    frame, else as much as fits; and whether the preferred size fitted."""
    most = room.marginsRemoved(frame).size()
    size = preferred.boundedTo(most)
    frame_size = size.grownBy(frame)
    left = room.left() + (room.width() - frame_size.width()) // 2 + frame.left()
    top = room.top() + (room.height() - frame_size.height()) // 2 + frame.top()
    return QRect(left, top, size.width(), size.height()), size == preferred


class MainWindow(QMainWindow):
    core_ready = Signal(str)  # "" when torch and the model code imported, else an error message
    ready = Signal()  # views built; the first load has been started

    def __init__(self, source: str | None = None, dtype: str | None = None) -> None:
        super().__init__()
        self.dtype = dtype  # what the models opened run in (None: their weights' own)
        self.setWindowTitle("vit-explorer")
        self.fit_screen()
        self.setAcceptDrops(True)
        self.setDockNestingEnabled(True)
        self.initial_source = source
        self.started = time.perf_counter()
        self.first_prediction_s: float | None = None
        self.session: Any = None
        self.views: dict[str, Any] = {}
        self.docks: dict[str, QDockWidget] = {}
        self.image_panel: Any = None
        self.big_dock: QDockWidget | None = None  # the first of the tabbed views on the right
        self.initial_image: str | None = None  # an image given on the command line instead of a model
        self.presentation: Presentation = Presentation(self)
        self.presentation_action: QAction | None = None  # View > Presentation mode (set by install_menus)
        self.menu_actions: dict[str, QAction] = {}  # the menus' items by title, made from actions.ACTIONS
        self.lesson: Any = None  # the LessonRunner, made with the views
        self._prediction_alone = False  # presenting a Prediction step: image and prediction side by side
        self._told_settings = False  # a settings file that could not be used: said once, with the first model

        bar = self.source_bar = QToolBar("Source")
        bar.setMovable(False)
        self.addToolBar(bar)
        bar.addWidget(QLabel(" Model: "))
        self.source_box = QComboBox()
        self.source_box.setEditable(True)
        self.source_box.setMinimumWidth(240)
        self.source_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.source_box.setMinimumContentsLength(40)
        self.source_box.setToolTip("A hub id (google/vit-base-patch16-224, timm/...), a folder or a checkpoint file; "
                                   "Enter loads it.")
        self.source_box.lineEdit().setPlaceholderText("hub id, folder or file")
        self.source_box.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)  # the history holds loaded models only
        self.source_box.lineEdit().returnPressed.connect(self.load_typed)
        for item in self.recent_sources():
            self.source_box.addItem(item)
        # the history also opens on a click in the text (only the arrow opens a combo's own list, and people
        # click the text); a completer's list leaves the typing to the box and narrows as one types
        self.history = QCompleter(self.source_box.model(), self.source_box)
        self.history.setFilterMode(Qt.MatchFlag.MatchContains)
        self.history.setCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.source_box.setCompleter(self.history)
        self.source_box.lineEdit().installEventFilter(self)
        self.source_box.setCurrentText(source or "")
        bar.addWidget(self.source_box)
        browse = QPushButton("File…")
        browse.setToolTip("Choose a checkpoint file (.safetensors, .pth, .bin).")
        browse.clicked.connect(self.browse_file)
        bar.addWidget(browse)
        folder = QPushButton("Folder…")
        folder.setToolTip("Choose a checkpoint folder (Hugging Face, timm or vit-explorer layout).")
        folder.clicked.connect(self.browse_folder)
        bar.addWidget(folder)
        self.load_button = QPushButton("Load")
        self.load_button.setToolTip("Load the model named in the box (Ctrl+L).")
        self.load_button.clicked.connect(self.load_typed)
        self.load_button.setEnabled(False)
        bar.addWidget(self.load_button)
        self.progress = QProgressBar()
        self.progress.setRange(0, 0)
        self.progress.setMaximumWidth(160)
        self.progress.setVisible(False)
        self.progress.setToolTip("A model is loading in the background.")
        bar.addWidget(self.progress)

        self.banner = Banner()
        self.message_bar = QToolBar("Messages")  # a row of its own only while there is a message
        self.message_bar.setMovable(False)
        self.message_bar.addWidget(self.banner)
        self.message_bar.setVisible(False)
        self.banner.changed.connect(self.message_bar.setVisible)
        self.addToolBarBreak()
        self.addToolBar(self.message_bar)

        self.placeholder = QLabel("Loading PyTorch and the model code…")
        self.placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setCentralWidget(self.placeholder)

        self.device_label = QLabel("device: –")
        self.time_label = QLabel("forward: –")
        self.statusBar().addPermanentWidget(self.device_label)
        self.statusBar().addPermanentWidget(self.time_label)
        self.statusBar().showMessage("starting…")

        self.core_ready.connect(self._core_ready)
        QTimer.singleShot(0, self._import_core)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        """A click in the Model box's text lists the recent sources (the box often has the focus already: a click
        is what tells)."""
        if (watched is self.source_box.lineEdit() and event.type() == QEvent.Type.MouseButtonPress
                and self.source_box.count() and not self.history.popup().isVisible()):
            self.history.setCompletionPrefix("")
            QTimer.singleShot(0, self.history.complete)  # after the click has placed the cursor
        return super().eventFilter(watched, event)

    def fit_screen(self) -> None:
        """Open at 1600x1000 where that fits the screen's available room with the window's frame, else maximised
        (the window manager fits the frame: the status bar stays on screen)."""
        screen = self.screen() or QGuiApplication.primaryScreen()
        shown = self.isVisible() and self.frameGeometry() != self.geometry()
        frame = QMargins(self.geometry().left() - self.frameGeometry().left(),
                         self.geometry().top() - self.frameGeometry().top(),
                         self.frameGeometry().right() - self.geometry().right(),
                         self.frameGeometry().bottom() - self.geometry().bottom()) if shown else FRAME_GUESS
        inside, fits = fit_window(QSize(*PREFERRED_SIZE), screen.availableGeometry(), frame)
        self.setGeometry(inside)  # also the size it returns to when no longer maximised
        if not fits:
            self.setWindowState(self.windowState() | Qt.WindowState.WindowMaximized)

    # ------------------------------------------------------------------ start-up
    def _import_core(self) -> None:
        collector = app_collector()
        if collector is not None:
            collector.hold()  # resumed in _core_ready

        def work() -> None:
            try:
                import torch  # noqa: F401 - the slow imports, off the GUI thread

                from .. import checkpoints, models  # noqa: F401
                from ..analysis import attention, dropout, heads, params, patch_embed, pe, tokens  # noqa: F401
                from ..explore import forward  # noqa: F401
            except Exception as error:  # noqa: BLE001 - shown in the window
                self.core_ready.emit(f"could not import PyTorch: {error}")
                return
            self.core_ready.emit("")

        threading.Thread(target=work, name="vit-explorer-import", daemon=True).start()
        QTimer.singleShot(0, self._import_drawing)

    def _import_drawing(self) -> None:
        """pyqtgraph and the figure code (half a second, no torch) here while torch imports in the other thread,
        so that the views are built as soon as torch is in."""
        from . import figures  # noqa: F401

    def _core_ready(self, message: str) -> None:
        collector = app_collector()
        if collector is not None:
            collector.resume()
        if message:
            self.placeholder.setTextFormat(Qt.TextFormat.PlainText)  # the message may quote a path
            self.placeholder.setText(message)
            return
        from .session import Session

        self.session = Session(self)
        self.session.dtype = self.dtype
        self.session.error.connect(self.show_error)
        self.session.notice.connect(lambda message: self.statusBar().showMessage(message, 10000))
        self.session.result_ready.connect(self._result)
        self.session.loading.connect(self._loading)
        self.session.load_progress.connect(self._load_progress)
        self.session.model_changed.connect(self._model_changed)
        # once the views have let go of the old model: its garbage may have been frozen (collector.py)
        self.session.model_changed.connect(lambda: QTimer.singleShot(1000, collect_everything))
        opened = self._open_initial()  # the model loads in the background while the views are built
        self._build_views()
        self.load_button.setEnabled(True)
        if not opened:
            from ..paths import BUNDLED_MODEL

            self.show_error(f"The bundled classroom model is missing ({BUNDLED_MODEL}); "
                            "build one in the Model builder or load a checkpoint.")
            self.docks["Model builder"].raise_()
        self.ready.emit()

    def _build_views(self) -> None:
        import pyqtgraph as pg
        import torch

        from ..checkpoints.devices import preferred_device
        from .image_panel import ImagePanel, sample_images
        from .text import plain_labels
        from .views import VIEW_CLASSES

        # leave one core to the GUI thread so the window keeps repainting while the model computes
        torch.set_num_threads(max(1, (os.cpu_count() or 2) - 1))
        from .palette import follow_palette

        pg.setConfigOptions(antialias=True)  # imageAxisOrder is set once, in figures.py
        follow_palette(self, self.palette())  # plots drawn from now on; changeEvent handles later changes

        self.image_panel = ImagePanel(self.session)
        plain_labels(self.image_panel)
        self._add_dock("Image", self.image_panel, Qt.DockWidgetArea.LeftDockWidgetArea)
        first_big: QDockWidget | None = None
        for cls in VIEW_CLASSES:
            view = cls(self.session)
            plain_labels(view)  # every label shows its text as written: no view can forget it
            self.views[cls.title] = view
            if cls.title == "Prediction":
                self._add_dock(cls.title, view, Qt.DockWidgetArea.LeftDockWidgetArea)
                continue
            dock = self._add_dock(cls.title, view, Qt.DockWidgetArea.RightDockWidgetArea)
            if first_big is None:
                first_big = dock
            else:
                view.set_on_screen(False)  # a tab behind the first: it computes when it is raised
                self.tabifyDockWidget(first_big, dock)
        if first_big is not None:
            first_big.raise_()
        self.splitDockWidget(self.docks["Image"], self.docks["Prediction"], Qt.Orientation.Vertical)
        self.setTabPosition(Qt.DockWidgetArea.RightDockWidgetArea, QTabWidget.TabPosition.North)
        for bar in self.findChildren(QTabBar):  # whole view names, scrolled when they do not fit
            bar.setElideMode(Qt.TextElideMode.ElideNone)
            bar.setUsesScrollButtons(True)
        self.big_dock = first_big
        QTimer.singleShot(0, self.share_width)
        self.takeCentralWidget()
        self.placeholder.deleteLater()

        self.device_label.setText(f"device: {preferred_device().type}")
        samples = sample_images()
        if self.initial_image is not None:
            self.image_panel.open_path(self.initial_image)
        elif samples:
            self.image_panel.open_path(str(samples[0]))
        self.lesson = LessonRunner(self)
        install_menus(self)
        self.presentation.apply()  # the remembered text size

    def show_lesson_panel(self, panel: QWidget, shown: bool) -> None:
        """The lesson's caption in a dock along the bottom, while a lesson runs."""
        dock = self.docks.get("Lesson")
        if dock is None:
            dock = QDockWidget("Lesson", self)
            dock.setObjectName("dock-Lesson")
            dock.setWidget(panel)
            dock.setFeatures(QDockWidget.DockWidgetFeature.NoDockWidgetFeatures)
            dock.setTitleBarWidget(QWidget())  # the panel has its own title row: no "Lesson" bar over it
            self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, dock)
            self.docks["Lesson"] = dock
        dock.setVisible(shown)

    def open_lesson(self, path: str) -> None:
        """Read and validate a lesson file, then start it at its first step (a bad file: the banner says why)."""
        from ..explore.lessons import LessonError, read_lesson

        try:
            lesson = read_lesson(path)
        except LessonError as error:
            self.show_error(str(error))
            return
        self.lesson.start(lesson)

    def share_width(self) -> None:
        """About a third of the width for the image and the prediction, the rest for the big views (presenting,
        less: the figure a step is about comes first); with the prediction alone, half each, side by side."""
        if self.big_dock is None:
            return
        image, prediction = self.docks["Image"], self.docks["Prediction"]
        if self._prediction_alone:
            self.resizeDocks([image, prediction], [self.width() // 2, self.width() // 2], Qt.Orientation.Horizontal)
            return
        if self.presentation.presenting and prediction.isHidden():  # Compare: the image only, as wide as it is
            left = self.image_panel.minimumSizeHint().width() + 16
        elif self.presentation.presenting:
            left = max(300, min(460, self.width() * 31 // 100))
        else:
            left = max(340, min(560, self.width() * 38 // 100))
        self.resizeDocks([image, self.big_dock], [left, self.width() - left], Qt.Orientation.Horizontal)
        # the image panel's controls need their height; the prediction chart is readable smaller. Presenting, the
        # panel asks exactly for the image and the Mask / Query / Draw row, the prediction takes the rest
        if self.presentation.presenting:
            # the image dock alone: the prediction below takes what is left (sizes for both can overshoot)
            self.resizeDocks([image], [self.image_panel.sizeHint().height()], Qt.Orientation.Vertical)
        else:
            total = image.height() + prediction.height()  # pixels: Qt reads bare proportions against the old sizes
            self.resizeDocks([image, prediction], [total * 56 // 100, total * 44 // 100], Qt.Orientation.Vertical)

    def show_view(self, title: str, panels: tuple[str, ...] | None = None) -> None:
        """Bring view `title` to the front with only `panels` of it drawn (None: all), the others whole again.
        Presenting, the Prediction view takes the big views' room (the image and the prediction side by side),
        and Compare the prediction dock's (it shows both models' predictions itself)."""
        for name, view in self.views.items():
            view.set_panels(panels if name == title else None)
        self.prediction_alone(self.presentation.presenting and title == "Prediction")
        # Compare draws both models' predictions: presenting, its columns get the prediction dock's width
        self.docks["Prediction"].setVisible(not (self.presentation.presenting and title == "Compare"))
        if title != "Prediction":
            self.docks[title].raise_()
        QTimer.singleShot(0, self.share_width)

    def fit_prediction(self) -> None:
        """Beside a presented view the prediction lists PRESENTED_ROWS classes; alone, or not presenting, all."""
        self.views["Prediction"].set_narrow(self.presentation.presenting and not self._prediction_alone)

    def prediction_alone(self, alone: bool) -> None:
        """The image and the prediction side by side with the tabbed views hidden, or back in their places."""
        if alone == self._prediction_alone or self.big_dock is None:
            return
        self._prediction_alone = alone
        self.fit_prediction()
        image, prediction = self.docks["Image"], self.docks["Prediction"]
        tabbed = [dock for title, dock in self.docks.items() if title not in ("Image", "Prediction", "Lesson")]
        current = next((dock for dock in tabbed if self.views[dock.windowTitle()].on_screen), self.big_dock)
        for dock in tabbed:
            dock.setVisible(not alone)
        self.splitDockWidget(image, prediction, Qt.Orientation.Horizontal if alone else Qt.Orientation.Vertical)
        if not alone:
            current.raise_()
        QTimer.singleShot(0, self.share_width)

    def _add_dock(self, title: str, widget: QWidget, area: Qt.DockWidgetArea) -> QDockWidget:
        from .zoom import ZoomArea

        dock = QDockWidget(title, self)
        dock.setObjectName(f"dock-{title}")
        dock.setWidget(ZoomArea(widget))
        if hasattr(widget, "set_on_screen"):
            dock.visibilityChanged.connect(widget.set_on_screen)
        self.addDockWidget(area, dock)
        self.docks[title] = dock
        return dock

    def _open_initial(self) -> bool:
        """Start loading the source given on the command line, or the bundled model; False if it is missing.

        An image given as the source (`vit-explorer photo.jpg`) opens on the bundled model.
        """
        from ..data.images import IMAGE_EXTENSIONS
        from ..paths import BUNDLED_MODEL

        source = self.initial_source
        if source is not None and source.lower().endswith(IMAGE_EXTENSIONS) and Path(source).is_file():
            self.initial_image, source = source, None
        if source is None:
            if not (BUNDLED_MODEL / "vit_explorer.json").exists():
                return False
            source = str(BUNDLED_MODEL)
        self.load(source)
        return True

    # ------------------------------------------------------------------ loading
    def recent_sources(self) -> list[str]:
        return read_texts(RECENT_KEY, MAX_RECENT)

    def _remember(self, source: str) -> None:
        """Add a loaded source to the history (not temporary folders: they will be gone)."""
        if Path(source).expanduser().resolve().is_relative_to(Path(tempfile.gettempdir()).resolve()):
            return
        recent = [source] + [s for s in self.recent_sources() if s != source]
        QSettings().setValue(RECENT_KEY, recent[:MAX_RECENT])
        if self.source_box.findText(source) < 0:
            self.source_box.insertItem(0, source)

    def load(self, source: str) -> None:
        source = source.strip()
        if not source or self.session is None:
            return
        self.source_box.setCurrentText(source)
        self.session.load(source, on_done=lambda loaded: self._remember(source),
                          on_error=lambda message: self._load_failed(source))

    def _load_failed(self, source: str) -> None:
        """The previous model stays: the box goes back to it, the status bar no longer says "loading" (the banner
        says what went wrong)."""
        self.source_box.setCurrentText(self.shown_source())
        self.statusBar().showMessage(f"could not load {shown(source)}: see the message above", 10000)

    def shown_source(self) -> str:
        """What the Model box shows for the current model."""
        loaded = self.session.loaded if self.session is not None else None
        if loaded is None:
            return ""
        if loaded.source:
            return str(loaded.source)
        return "(trained in the app)" if loaded.details.get("trained_in_app") else "(built in the Model builder)"

    def load_typed(self) -> None:
        self.load(self.source_box.currentText())

    def browse_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open checkpoint", "",
                                              "Checkpoints (*.safetensors *.pth *.pt *.bin);;All files (*)")
        if path:
            self.load(path)

    def browse_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Open checkpoint folder")
        if path:
            self.load(path)

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802
        if event.mimeData().hasUrls():
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802
        from ..data.images import IMAGE_EXTENSIONS

        url = event.mimeData().urls()[0]
        if not url.isLocalFile():  # a link dragged from a browser: nothing on this disk to open
            self.show_error(f"{shown(url.toString())}: a dropped web address is not opened; download the file and "
                            "drop that, or type a hub id (org/name) in the Model box")
            return
        path = url.toLocalFile()
        if path.lower().endswith(IMAGE_EXTENSIONS) and self.image_panel is not None:
            self.image_panel.open_path(path)
        else:
            self.load(path)

    # ------------------------------------------------------------------ feedback
    def show_error(self, message: str) -> None:
        """In the banner, until dismissed or the next model loads (the status bar is too short and too brief)."""
        self.banner.show_message(message)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt's name
        """Light/dark switch at run time: widgets restyle themselves, the plots are told here."""
        if event.type() == QEvent.Type.PaletteChange and self.views:
            from .palette import follow_palette  # pyqtgraph is imported by now (the views exist)

            follow_palette(self, self.palette())
        super().changeEvent(event)

    def _load_progress(self, fraction: float, stage: str) -> None:
        self.progress.setRange(0, 100)
        self.progress.setValue(round(100 * fraction))
        self.progress.setFormat(stage)
        self.statusBar().showMessage(f"loading: {stage}…")

    def _loading(self, source: str) -> None:
        self.progress.setRange(0, 0)  # busy until the load says how far it is
        self.progress.setVisible(bool(source))
        self.load_button.setEnabled(not source)
        if source:
            self.statusBar().showMessage(f"loading {shown(source)}…")

    def _model_changed(self) -> None:
        loaded = self.session.loaded
        self.banner.dismiss()
        lines = [f"warning: {line}" for line in loaded.warnings]  # e.g. NaN weights: its numbers cannot be trusted
        if problem() and not self._told_settings:
            self._told_settings = True
            lines.append(f"warning: {problem()}")
        if lines:
            self.show_error("\n".join(lines))
        self.source_box.setCurrentText(self.shown_source())
        name = Path(loaded.source).name if loaded.source else self.shown_source()
        self.setWindowTitle(f"vit-explorer — {shown(name, 80)}")  # a source may be a 100,000-character name
        self.statusBar().showMessage(f"loaded {shown(loaded.source or 'the built model')} ({loaded.kind})", 8000)
        self.device_label.setText(f"device: {loaded.device} · {str(loaded.dtype).removeprefix('torch.')}")
        self.device_label.setToolTip("Where the model runs, and in which dtype: bf16 / fp16 weights run as they are "
                                     "stored (`vit-explorer SOURCE --dtype float32` upcasts); the views draw "
                                     "float32 copies of what they show.")

    def _result(self, result: Any) -> None:
        if self.first_prediction_s is None:
            self.first_prediction_s = time.perf_counter() - self.started
        self.time_label.setText(f"forward: {result.seconds * 1000:.0f} ms")

    # ------------------------------------------------------------------ actions
    def views_on_screen(self) -> tuple[str, ...]:
        """The titles of the views on screen: the tab in front, and the docks beside the tabs."""
        return tuple(title for title, view in self.views.items() if view.on_screen and self.docks[title].isVisible())

    def docks_on_screen(self) -> list[QDockWidget]:
        """The docks on screen: the views' in front (not a tab behind another) and the others shown (the image's,
        the lesson's)."""
        shown = self.views_on_screen()
        return [dock for title, dock in self.docks.items()
                if title in shown or (title not in self.views and dock.isVisible())]

    def current_view(self) -> Any:
        """The view holding the keyboard focus, else the big view on screen (the current tab)."""
        focus = self.focusWidget()
        shown = [self.views[title] for title in self.views_on_screen()]
        for view in shown:
            if focus is not None and view.isAncestorOf(focus):
                return view
        tabs = [view for view in shown if view.title != "Prediction"]
        return (tabs or shown or [None])[0]

    def export_current(self) -> None:
        view = self.current_view()
        if view is not None:
            view.ask_export("png")

    def step_layer(self, step: int) -> None:
        if self.session is not None and self.session.loaded is not None:
            self.session.select(layer=self.session.layer + step)

    def closeEvent(self, event: Any) -> None:  # noqa: N802
        for widget in [*self.views.values(), self.image_panel]:
            if widget is not None:
                widget.close()
        if self.session is not None:
            self.session.shutdown()
        super().closeEvent(event)
