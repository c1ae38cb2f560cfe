"""Components: which part of the model computes the answer. Three tabs, each computed off the GUI thread from
`explore.components`: the target logit's parts (by block, and by head as a layers x heads map), the logit lens
(what each patch says at each depth, as a class map over the image), and activation patching: paint patches on
the image, pick the block and the component, and see the logit difference move from the corrupted run's
towards the clean run's; or sweep every block x position (or block x head) at once."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt, QTimer
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFrame,
    QLabel,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from ...analysis.components import SITES, Decomposition, Sweep
from ...data.images import open_image, sample_images
from ...explore.components import (
    LensMaps,
    PatchRuns,
    class_colours,
    corrupted_inputs,
    decomposition,
    head_shares,
    lens_maps,
    lens_pictures,
    parts_figure,
    patch_once,
    record_runs,
    run_sweep,
    sweep_figure,
)
from ...explore.figures import BarsFigure, small_multiples_shape
from ...explore.forward import Inputs
from ...jobs import Job
from .. import figures
from ..image_panel import QUERY_RGBA, PatchCanvas
from ..measure import LARGEST_SHARE
from ..session import Session
from ..text import html as html_text
from .base import Note, Table, View
from .job_controls import JobControls

TABS = ("By block", "By head", "Lens", "Patching", "Sweep")
TASKS = {"By block": "Parts", "By head": "Parts", "Lens": "Lens", "Patching": "Patching",
         "Sweep": "Patching"}  # what each tab computes (tabs of one task share it)
SWEEP_TITLE_PX = 70  # the sweep's heading over its maps
SWEEP_MAP_ROW_PX = 50  # a sweep map's title and margins over and under its data area
SWEEP_MAP_COLUMN_PX = 20  # and beside it
SWEEP_BAR_PX = 100  # the colour bar beside the sweep's maps
SCROLL_BAR_PX = 24  # a tab page's vertical scroll bar and frame
COMPONENT_NAMES = {"resid": "residual stream", "attn": "attention output", "mlp": "MLP output",
                   "head": "one head's output"}
CORRUPTIONS = (("[MASK] over every patch", "mask-all"), ("[MASK] painted in the Image panel", "mask-session"),
               ("heads switched off in the Heads view", "heads-session"), ("every head off", "heads-all"))
SHARE_CMAP = "CET-D1"  # diverging: a part that lowers the logit is blue, one that raises it red
MAX_KEYS = 24  # classes named in the lens's colour key (those the maps show most)
MOVE_HEIGHT = 120  # the clean / corrupted / patched bars under the canvas
PAINTED_RGBA = (*QUERY_RGBA[:3], 110)  # the painted patches: the query's gold, the image still seen through it
NO_CLASSIFIER = ("This model has no classifier: the parts are those of its largest feature (the CLI decomposes "
                 "the cosine with a reference image), and the lens and patching need class logits.")


class ComponentsView(View):
    key = "components"

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(session, parent)
        self.target = QComboBox()
        self.target.setToolTip("The class whose logit is decomposed and patched (the top class by default).")
        self.target.activated.connect(lambda *_: self._settings_changed())
        self.component = QComboBox()
        for site in SITES:
            self.component.addItem(COMPONENT_NAMES[site], site)
        self.component.setToolTip("What patching copies from the clean run into the corrupted one.")
        self.component.activated.connect(lambda *_: self._settings_changed())
        self.layer = QSpinBox()
        self.layer.setPrefix("block ")
        self.layer.setToolTip("The block whose input (residual stream) or output is patched.")
        self.layer.valueChanged.connect(lambda *_: self._patch())
        self.head = QSpinBox()
        self.head.setPrefix("head ")
        self.head.setToolTip("The head patched when the component is one head's output.")
        self.head.valueChanged.connect(lambda *_: self._patch())
        self.corruption = QComboBox()
        for text, key in CORRUPTIONS:
            self.corruption.addItem(text, key)
        for path in sample_images():
            self.corruption.addItem(f"another image: {path.stem}", str(path))
        self.corruption.setToolTip("The corrupted run: the clean run is the image without [MASK], every head on.")
        self.corruption.activated.connect(lambda *_: self._settings_changed())
        self.with_prefix = QCheckBox("prefix tokens too")
        self.with_prefix.setToolTip("Patch the [CLS] (distillation, register) tokens as well as the painted patches.")
        self.with_prefix.toggled.connect(lambda *_: self._patch())
        self.sweep_job = JobControls(self, "components-sweep", run_text="Sweep", cancel_text="Cancel sweep",
                                     on_run=self.start_sweep,
                                     on_cancelled=lambda: self._sweep_finished("sweep cancelled"))
        self.sweep_button = self.sweep_job.button
        self.sweep_button.setToolTip("Patch each block x position (one head's output: each block x head) alone, in "
                                     "batches, and draw the normalised effects in the Sweep tab.")
        clear = QPushButton("Clear painted")
        clear.clicked.connect(self.clear_painted)
        for widget in (self.target, self.component, self.layer, self.head, self.corruption, self.with_prefix,
                       self.sweep_job, clear):
            self.controls.addWidget(widget)

        self.tabs = QTabWidget()
        self.parts_plots = pg.GraphicsLayoutWidget()
        self.heads_plots = pg.GraphicsLayoutWidget()
        self.lens_plots = pg.GraphicsLayoutWidget()
        patch_page = QWidget()
        page = QVBoxLayout(patch_page)
        page.setContentsMargins(0, 0, 0, 0)
        self.canvas_plots = pg.GraphicsLayoutWidget()
        self.canvas_plots.setMinimumSize(120, 120)
        self.canvas_view = self.canvas_plots.addViewBox(lockAspect=True, invertY=True, enableMouse=False)
        self.canvas = PatchCanvas(self)
        self.canvas_view.addItem(self.canvas)
        self.painted_item = pg.ImageItem()
        self.painted_item.setAcceptedMouseButtons(Qt.MouseButton.NoButton)
        self.canvas_view.addItem(self.painted_item)
        page.addWidget(QLabel("Paint the patches to patch (click or drag):"))
        page.addWidget(self.canvas_plots, 1)
        self.sweep_plots = pg.GraphicsLayoutWidget()
        self.move_plots = pg.GraphicsLayoutWidget()
        self.move_plots.setMinimumHeight(MOVE_HEIGHT)
        self.move_plots.setMaximumHeight(MOVE_HEIGHT)
        page.addWidget(self.move_plots)
        pages = (self.parts_plots, self.heads_plots, self.lens_plots, patch_page, self.sweep_plots)
        for page, name in zip(pages, TABS, strict=True):
            scroll = QScrollArea()  # a figure keeps the size it needs (large text, a short screen): the page scrolls
            scroll.setWidgetResizable(True)
            scroll.setFrameShape(QFrame.Shape.NoFrame)
            scroll.setWidget(page)
            self.tabs.addTab(scroll, name)
        self.tabs.currentChanged.connect(self._tab_changed)
        self.body.addWidget(self.tabs, 1)
        self.legend = Note()
        self.body.addWidget(self.legend)

        self.decomposed: Decomposition | None = None
        self.maps: LensMaps | None = None
        self.runs: PatchRuns | None = None
        self.sweep: Sweep | None = None
        self.effect: float | None = None  # the painted patch's normalised effect
        self._sweep_wanted = False  # Sweep was pressed before the runs were recorded: it starts once they are
        self._sweep_shape: tuple[int, int] | None = None  # the position sweep drawn: (maps, maps a row)
        self.painted = np.zeros((1, 1), bool)
        self._paint_value = True
        self._done: dict[str, object] = {}  # tab -> the key of what it shows (drawn once per input)
        self._legends: dict[str, str] = {}  # tab -> the line under it
        self.listen(session.model_changed, self._model_changed)
        self.listen(session.result_ready, self.schedule_soon)
        self._model_changed()

    # ------------------------------------------------------------------ state
    def picture(self) -> QWidget:
        page = self.tabs.currentWidget()
        inner = page.widget() if isinstance(page, QScrollArea) else None
        return inner if inner is not None else page

    def _fit(self, plots: pg.GraphicsLayoutWidget, least_height: int = 0) -> None:
        """Once the figure's items know their sizes: the widget at least as large as the figure needs (and at least
        `least_height` tall)."""
        def fit() -> None:
            need = plots.ci.effectiveSizeHint(Qt.SizeHint.MinimumSize)
            plots.setMinimumSize(math.ceil(need.width()) + 2, max(math.ceil(need.height()) + 2, least_height))
            if plots is self.move_plots:  # the bars under the canvas take what they need; the canvas the rest
                plots.setMaximumHeight(max(MOVE_HEIGHT, plots.minimumHeight()))

        QTimer.singleShot(0, self, fit)

    @property
    def tab(self) -> str:
        return TABS[self.tabs.currentIndex()]

    @property
    def task(self) -> str:
        """What the current tab shows: "Parts", "Lens" or "Patching"."""
        return TASKS[self.tab]

    def _tab_changed(self, *_: object) -> None:
        self.legend.setText(self._legends.get(self.task, ""))
        self.schedule()

    def _say(self, task: str, text: str) -> None:
        """The line under the tabs of a task (shown while one of them is the current one)."""
        self._legends[task] = text
        if self.task == task:
            self.legend.setText(text)

    def _model_changed(self) -> None:
        self.sweep_job.stop()
        loaded = self.session.loaded
        self.decomposed = self.maps = self.runs = self.sweep = None
        self._sweep_wanted = False
        self.effect = None
        self._done.clear()
        self.target.clear()
        if loaded is None:
            return
        cfg = loaded.config
        self.target.addItem("top class", None)
        for i in range(cfg.num_classes):
            self.target.addItem(f"{i}: {loaded.label(i)}", i)
        self.layer.setRange(0, cfg.num_blocks - 1)
        self.head.setRange(0, cfg.num_heads - 1)
        self.painted = np.zeros(self.session.grid, bool)
        self.note.setText("" if cfg.num_classes else NO_CLASSIFIER)
        self.schedule()

    def _settings_changed(self) -> None:
        self.head.setEnabled(self.component.currentData() == "head")
        self.runs = self.sweep = None
        self.effect = None
        self._done.pop("Patching", None)
        self._done.pop("Parts", None)
        self.schedule()

    def _clean(self) -> Inputs | None:
        """The session's input without [MASK] and with every head on: the clean run."""
        inputs = self.session.inputs()
        if inputs is None:
            return None
        return replace(inputs, mask=np.zeros_like(inputs.mask), head_mask=np.ones_like(inputs.head_mask))

    def _corrupted(self, clean: Inputs) -> Inputs | None:
        key = self.corruption.currentData()
        if key == "mask-all":
            return corrupted_inputs(clean, "mask")
        if key == "mask-session":
            return corrupted_inputs(clean, "mask", mask=self.session.mask.copy()) if self.session.mask.any() else None
        if key == "heads-session":
            heads = self.session.head_mask
            return corrupted_inputs(clean, "heads", head_mask=heads.copy()) if (heads < 1).any() else None
        if key == "heads-all":
            return corrupted_inputs(clean, "heads")
        return corrupted_inputs(clean, "image", image=open_image(key), image_id=-1 - self.corruption.currentIndex())

    def _key(self, inputs: Inputs) -> tuple[object, ...]:
        return (inputs.model_id, inputs.image_id, tuple(inputs.size), inputs.mask.tobytes(),
                inputs.head_mask.tobytes(), self.target.currentData(), self.component.currentData(),
                self.corruption.currentData())

    # ------------------------------------------------------------------ computing
    def refresh(self, *_: object) -> None:
        inputs = self.session.inputs()
        if inputs is None or self.session.result is None:
            return
        if inputs.mask.shape != self.painted.shape:
            self.painted = np.zeros(inputs.mask.shape, bool)
        key = self._key(inputs)
        if self._done.get(self.task) == key:
            return
        self._done[self.task] = key
        if self.task == "Parts":
            target = self.target.currentData()
            self.note.setText("decomposing…")
            self.run_for_model(inputs.model_id, "components-parts", lambda: decomposition(inputs, target),
                               self._decomposed, self._failed)
        elif self.task == "Lens":
            if not inputs.loaded.config.num_classes:
                self.note.setText(NO_CLASSIFIER)
                return
            self.note.setText("reading every token through the head…")
            self.run_for_model(inputs.model_id, "components-lens", lambda: lens_maps(inputs), self._lensed,
                               self._failed)
        else:
            self._record()

    def _failed(self, message: str) -> None:
        self._done.pop(self.task, None)
        self._sweep_wanted = False
        self.note.setText(f"failed: {message}")

    def _record(self) -> None:
        """Record the clean and the corrupted run for patching (once per input, component and corruption)."""
        clean = self._clean()
        if clean is None or not clean.loaded.config.num_classes:
            self.note.setText(NO_CLASSIFIER if clean is not None else "")
            return
        try:
            corrupted = self._corrupted(clean)
        except (OSError, ValueError) as error:
            self.note.setText(str(error))
            return
        if corrupted is None:
            self._done.pop("Patching", None)
            self.note.setText("Nothing to corrupt: paint [MASK] in the Image panel or switch heads off in the Heads "
                              "view first, or choose another corruption.")
            return
        component, target = self.component.currentData(), self.target.currentData()
        self.runs = None  # a painted patch waits for the runs of this input
        self.note.setText("recording the clean and the corrupted run…")
        self.run_for_model(clean.model_id, "components-record", lambda: record_runs(clean, corrupted, component,
                                                                                   target), self._recorded,
                           self._failed)

    def _recorded(self, runs: PatchRuns) -> None:
        self.runs = runs
        self.note.setText("")
        self._draw_canvas()
        self._patch()
        if self._sweep_wanted:
            self.start_sweep()

    def _positions(self) -> list[int] | None:
        if self.runs is None:
            return None
        layout = self.session.result.layout if self.session.result is not None else None
        if layout is None:
            return None
        tokens = [layout.token_index(int(r), int(c)) for r, c in zip(*np.nonzero(self.painted), strict=True)]
        if self.with_prefix.isChecked():
            tokens = list(range(layout.num_prefix_tokens)) + tokens
        return tokens

    def _patch(self) -> None:
        """The corrupted run with the painted positions patched: its logit difference, normalised."""
        runs, positions = self.runs, self._positions()
        if runs is None or positions is None or self.task != "Patching":
            return
        layer = self.layer.value()
        head = self.head.value() if runs.component == "head" else None
        self.run_for_model(runs.clean.model_id, "components-patch", lambda: patch_once(runs, layer, positions, head),
                           self._patched, self._failed)

    def _patched(self, result: tuple[float, object]) -> None:
        self.effect = result[0]
        self._draw_move()

    def start_sweep(self) -> None:
        """Sweep the current patching runs in a worker (the controls show its progress and cancel it)."""
        runs = self.runs
        if runs is None:  # the runs first: the Patching tab records them, then the sweep starts
            self._sweep_wanted = True
            self.tabs.setCurrentIndex(TABS.index("Patching"))
            return
        self._sweep_wanted = False
        self.note.setText("sweeping (batched)…")
        component = runs.component

        def work(job: Job) -> Sweep:
            return run_sweep(runs.clean, runs.corrupted, component, target=runs.target, foil=runs.foil, job=job)

        self.sweep_job.start(runs.clean.model_id, work, self._swept,
                             lambda message: self._sweep_finished(f"sweep failed: {message}"))

    def _sweep_finished(self, note: str) -> None:
        self.note.setText(note)

    def _swept(self, result: Sweep) -> None:
        self._sweep_finished("")
        self.sweep = result
        self._draw_sweep()
        self.tabs.setCurrentIndex(TABS.index("Sweep"))
        self._draw_canvas()

    # ------------------------------------------------------------------ painting
    def hover(self, pos: QPointF | None) -> None:
        """PatchCanvas reports the pointer; the painted patches need only presses."""

    def patch_at(self, pos: QPointF) -> tuple[int, int] | None:
        loaded = self.session.loaded
        if loaded is None:
            return None
        p = loaded.config.patch_size
        gh, gw = self.painted.shape
        row, col = int(pos.y() // p), int(pos.x() // p)
        return (row, col) if 0 <= row < gh and 0 <= col < gw else None

    def press(self, pos: QPointF, start: bool) -> None:
        """As the Image panel paints [MASK]: a drag paints the value the first patch toggled to."""
        patch = self.patch_at(pos)
        if patch is None:
            return
        if start:
            self._paint_value = not self.painted[patch]
        if self.painted[patch] != self._paint_value:
            self.set_painted_patch(patch, self._paint_value)

    def set_painted_patch(self, patch: tuple[int, int], value: bool) -> None:
        self.painted[patch] = value
        self._draw_canvas()
        self._patch()

    def clear_painted(self) -> None:
        self.painted[:] = False
        self._draw_canvas()
        self._patch()

    # ------------------------------------------------------------------ drawing
    def _decomposed(self, d: Decomposition) -> None:
        self.decomposed = d
        loaded = self.session.loaded
        if loaded is None:
            return
        self.note.setText("" if loaded.config.num_classes else NO_CLASSIFIER)
        cfg = loaded.config
        self.parts_plots.ci.clear()
        what = f"class {d.target} ({loaded.label(d.target)})" if d.kind == "logit" else f"feature {d.target}"
        figures.BarsPlot(self.parts_plots.ci, parts_figure(d, loaded))
        self._fit(self.parts_plots)
        self.heads_plots.ci.clear()
        grid = head_shares(d, cfg.num_blocks, cfg.num_heads)
        top = float(np.abs(grid).max()) or 1.0
        figures.draw_heatmap(self.heads_plots.ci, grid, title=f"{what}: each head's part of the logit",
                             cmap=SHARE_CMAP, levels=(-top, top), colorbar_label="part of the logit (logit units)",
                             xlabel="head", ylabel="block")
        self._fit(self.heads_plots)
        self._say("Parts", f"The parts add up exactly: {d.total - d.bias:+.4f} + head bias {d.bias:+.4f} = "
                           f"{d.total:.4f} (the model: {d.logit:.4f}). The final norm's scale is frozen at this run's "
                           "value; its shift and the pool's biases are parts of their own ('norm & pool'). A head's "
                           "share is its output through its slice of the attention projection.")

    def _lensed(self, maps: LensMaps) -> None:
        self.maps = maps
        loaded = self.session.loaded
        self.note.setText("")
        if loaded is None:
            return
        layout = self.lens_plots.ci
        layout.clear()
        states = len(maps.classes)
        rows, columns = small_multiples_shape(states)
        figures.add_title(layout, "What each patch says: its top class, brighter as it is more probable",
                          colspan=columns)
        pictures = lens_pictures(maps, loaded.config.num_classes)
        for i, picture in enumerate(pictures):
            if i % columns == 0:
                layout.nextRow()
            name = "input" if i == 0 else f"block {i - 1}"
            counts = np.bincount(maps.classes[i].ravel(), minlength=loaded.config.num_classes)
            said = loaded.label(int(counts.argmax()))
            figures.draw_image(layout, picture, title=f"{name}: {said}", grid=maps.layout.grid, axes=False)
        colours = class_colours(loaded.config.num_classes)
        shown = sorted(set(maps.classes.ravel().tolist()))[:MAX_KEYS]
        layout.nextRow()
        entries = [(f'<span style="color:#{"".join(f"{v:02x}" for v in colours[c])}">&#9632;</span> '
                    f"{html_text(loaded.label(c))}", len(loaded.label(c)) + 3) for c in shown]
        room = 0.9 * (self.tabs.width() - SCROLL_BAR_PX) / figures.label_char_px()  # what a line holds, a tenth spare
        lines: list[list[str]] = [[]]
        used = 0
        for text, chars in entries:  # the key in lines that fit the pane: no scrolling across to read it
            if lines[-1] and used + chars > room:
                lines.append([])
                used = 0
            lines[-1].append(text)
            used += chars
        layout.addLabel("<br>".join("&nbsp; ".join(line) for line in lines), colspan=columns,
                        size=figures.label_size())
        self._fit(self.lens_plots)
        self._say("Lens", f"Each patch's state read through the final norm and the head, at the input and after each "
                          f"block; dark = no class is probable. The model predicts {loaded.label(maps.final)}.")

    def _draw_canvas(self) -> None:
        result = self.session.result
        loaded = self.session.loaded
        if result is None or loaded is None:
            return
        self.canvas.setImage(result.display, autoLevels=False, levels=(0, 255))
        p = loaded.config.patch_size
        gh, gw = self.painted.shape
        rgba = np.zeros((gh, gw, 4), np.uint8)
        rgba[self.painted] = PAINTED_RGBA
        self.painted_item.setImage(rgba, autoLevels=False, levels=(0, 255))
        self.painted_item.setRect(0, 0, gw * p, gh * p)
        self.canvas_view.setRange(xRange=(0, gw * p), yRange=(0, gh * p), padding=0.01)

    def _draw_move(self) -> None:
        runs = self.runs
        loaded = self.session.loaded
        if runs is None or loaded is None or self.effect is None:
            return
        self.move_plots.ci.clear()
        patched = runs.corrupted_difference + self.effect * (runs.clean_difference - runs.corrupted_difference)
        where = (f"block {self.layer.value()}" + (f" head {self.head.value()}" if runs.component == "head" else ""))
        figures.BarsPlot(self.move_plots.ci, BarsFigure(
            f"patched: {self.effect:+.2f} of the way to the clean run",
            ("clean", "corrupted", "patched"), np.asarray([runs.clean_difference, runs.corrupted_difference, patched]),
            xlabel=f"logit of {loaded.label(runs.target)} minus {loaded.label(runs.foil)}",
            value_format="{:+.3f}",
            highlight=2))
        self._fit(self.move_plots)
        self._say("Patching", f"The {COMPONENT_NAMES[runs.component]} at {where}, at the {int(self.painted.sum())} "
                              "painted patches" + (" and the prefix tokens" if self.with_prefix.isChecked() else "")
                  + ", copied from the clean run into the corrupted one. Sweep: each block x position alone.")

    def _draw_sweep(self) -> None:
        result, run = self.sweep, self.session.result
        if result is None or run is None:
            return
        self.sweep_plots.ci.clear()
        self._sweep_shape = None
        if result.axis == "position":
            figure = sweep_figure(result, run.layout, run.display)
            columns = self._sweep_columns(len(figure.maps))
            self._sweep_shape = len(figure.maps), columns
            figures.MapsPlot(self.sweep_plots.ci, replace(figure, columns=columns))
            # each block's map at least LARGEST_SHARE of the screen's height (what a lesson's figure gets), in as
            # many columns as the pane's width holds at that size: the tab scrolls down to the rest
            rows = -(-len(figure.maps) // columns)
            self._fit(self.sweep_plots, SWEEP_TITLE_PX + rows * (self._big() + SWEEP_MAP_ROW_PX))
            return
        figures.draw_heatmap(self.sweep_plots.ci, result.effects.numpy(),
                             title="patching one head alone: normalised effect (1 = the clean run's answer)",
                             cmap=SHARE_CMAP, levels=(-1.0, 1.0), colorbar_label="normalised effect",
                             xlabel="head", ylabel="block")
        self._fit(self.sweep_plots)

    def _big(self) -> int:
        """A sweep map's side: LARGEST_SHARE of the screen's height."""
        screen = self.screen()
        return math.ceil(LARGEST_SHARE * (screen.geometry().height() if screen is not None else 800))

    def _sweep_columns(self, maps: int) -> int:
        """As many sweep maps a row as the Sweep tab's width holds at _big() each (beside one colour bar and the
        page's vertical scroll bar; a tab not shown yet has no width of its own: the tab widget's)."""
        width = self.tabs.width() - SCROLL_BAR_PX
        return max(1, min(maps, (width - SWEEP_BAR_PX) // (self._big() + SWEEP_MAP_COLUMN_PX)))

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)  # the sweep's maps a row follow the pane's width
        if self._sweep_shape is not None and self._sweep_columns(self._sweep_shape[0]) != self._sweep_shape[1]:
            self._draw_sweep()

    def table(self) -> Table | None:
        if self.task == "Parts" and self.decomposed is not None:
            return ["name", "layer", "head", "value"], [
                (p.name, "" if p.layer is None else p.layer, "" if p.head is None else p.head, p.value)
                for p in self.decomposed.parts] + [("head_bias", "", "", self.decomposed.bias)]
        if self.task == "Lens" and self.maps is not None:
            rows = []
            for s, (classes, probs) in enumerate(zip(self.maps.classes, self.maps.probs, strict=True)):
                for (r, c), cls in np.ndenumerate(classes):
                    rows.append((s, r, c, int(cls), float(probs[r, c])))
            return ["state", "row", "col", "class", "prob"], rows
        if self.task == "Patching" and self.sweep is not None:
            name = "token" if self.sweep.axis == "position" else "head"
            effects = self.sweep.effects.tolist()
            return ["block", name, "effect"], [(layer, col, effects[i][j]) for i, layer in enumerate(self.sweep.layers)
                                                for j, col in enumerate(self.sweep.columns)]
        return None
