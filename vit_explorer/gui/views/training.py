"""Training: dataset, model and hyper-parameters; start, pause, stop, resume; live curves and PE
similarity; a second run with one change plotted against the first; how long the run takes and what
accuracy measured runs reached."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, QStandardPaths, Qt, QTimer
from PySide6.QtGui import QFontMetrics, QResizeEvent
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QSplitter,
    QToolButton,
    QWidget,
)

from ...checkpoints.native import CONFIG_NAME
from ...models import PRESETS, ViTConfig, preset
from ...models.position import SCHEMES
from ...training.events import (
    AttentionHealth,
    CheckpointSaved,
    Control,
    Error,
    Finished,
    Notice,
    PESnapshot,
    Started,
    Step,
    Validation,
)
from ...training.expect import DEMO, estimate, pace
from ...training.health import health_series
from ...training.recipe import Recipe
from .. import figures
from ..collector import collect_everything
from ..session import Run, Session
from ..text import Legend
from ..workers import GeneratorThread
from .base import Table, View, placeholder_pane

DATASETS = [("shapes (built in)", "shapes"), ("where (built in)", "where")]
CHANGES: list[tuple[str, Callable[[ViTConfig], dict[str, Any]]]] = [  # the comparison run's one change
    ("no position embedding", lambda c: {"pos_embed": "none"}),
    ("sine-cosine 2D position embedding", lambda c: {"pos_embed": "sincos_2d"}),
    ("learned 2D position embedding", lambda c: {"pos_embed": "learned_2d"}),
    ("the other stem (patchify / convolutional)", lambda c: {"stem": "patchify" if c.stem == "conv" else "conv"}),
    ("no [CLS]: average pooling", lambda c: {"prefix_tokens": "none", "pool": "gap"}),
    ("half the depth", lambda c: {"depth": max(1, c.depth // 2)}),
]
REDRAW_MS = 250  # curves redraw at most this often while training
ESTIMATE_EVERY_S = 3.0  # training seconds between updates of the run's estimate
DEFAULTS = Recipe()  # the trainer's own defaults fill the form
DEFAULT_PRESET = "classroom-conv"  # learns fastest on a laptop CPU (the line under the Model choice says so)
DEFAULT_BUDGET_S = 60  # a demo in front of a class: long enough to learn, short enough to watch
# below this width the settings fold away when a run starts, so the curves and the PE grid get the whole view
SETTINGS_BESIDE_PLOTS_PX = 1100
PE_TITLE_CHARS = 16  # the PE grid's title wraps this narrow, so it never sets its column wider than its share
PLACEHOLDER = ("Press Start to train. Here appear, as the model learns: the training loss and accuracy every 5 "
               "steps (a line per run, dots for the validation set), and the similarity grid of the position "
               "embedding being learned (the ViT paper's Figure 7), updated every 10 steps.")


@dataclass
class DataReady:
    """First item of a run: the dataset is loaded; the config is adjusted to its number of classes."""

    data: Any  # TrainingData
    config: ViTConfig


def describe(run: Run) -> str:
    """A run in one line: its model, data, recipe and how far it got (an exported figure's metadata)."""
    c = run.config
    model = (f"preset {run.preset}" if run.preset else "the Model builder's model") + \
        f" (stem {c.stem}, position embedding {c.pos_embed}, D {c.embed_dim}, depth {c.depth}, {c.num_heads} heads)"
    r = run.recipe
    length = "" if r is None else (f"{r.steps:,} steps" if r.steps else f"{r.time_budget:g} s budget")
    recipe = "" if r is None else f"; recipe: {length}, batch {r.batch_size}, lr {r.lr:g}, seed {r.seed}"
    done = run.steps[-1] if run.steps else 0
    state = f"{done:,} steps done" + ("" if run.finished is None else f" ({run.finished.reason})")
    if run.val:
        state += f", validation accuracy {run.val[-1][2]:.1%} at step {run.val[-1][0]:,}"
    return f"{model}; data {run.dataset}, {run.images:,} training images{recipe}; {state}; saved to {run.out}"


def runs_folder() -> Path:
    """~/.local/share/vit-explorer/runs on Linux (the generic data folder: the app's own would repeat its name)."""
    base = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.GenericDataLocation) or str(Path.home())
    return Path(base) / "vit-explorer" / "runs"


ENTROPY_RAMP, ENTROPY_RAMP_END = pg.colormap.get("viridis"), 0.8  # the blocks' entropy, first to last (no yellow)
CURVES_SHARE = 3 / 5  # the four curves' share of the width, with the PE grid and the thumbnail beside them
LEGEND_SAMPLE_PX = 48  # a legend key's width beside its name: its sample line and the gaps
HEALTH_MIN_PX = 700  # the plot pane's width from which the attention-health plots are drawn, at the default text size
# (see _roomy; presented at 1920x1080 with the settings shown, 780 px cut the PE grid and the thumbnail at the edge)


class TrainingView(View):
    key = "training"

    @property
    def runs(self) -> list[Run]:
        """The runs on screen: the session's (`Session.runs`), which lessons and menus read too."""
        return self.session.runs

    @runs.setter
    def runs(self, runs: list[Run]) -> None:
        self.session.set_runs(runs)

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(session, parent)
        self.worker: GeneratorThread | None = None  # the run's thread (not `thread`: QObject.thread())
        self.control: Control | None = None
        self.data: Any = None  # the TrainingData of the current run (labels, preprocessing)
        self._redraw_pending = False

        split = self.split = QSplitter()
        form_widget = QWidget()
        form = QFormLayout(form_widget)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)  # narrow: labels above their fields
        self.dataset = QComboBox()
        self.dataset.setEditable(True)
        for text, value in DATASETS:
            self.dataset.addItem(text, value)
        self.dataset.setToolTip("A built-in dataset, or type a folder: CIFAR-10/100 python batches or one sub-folder "
                                "per class.")
        form.addRow("Dataset", self.dataset)
        self.model_choice = QComboBox()
        self.model_choice.addItem("the Model builder's model", "")
        for name in PRESETS:
            if name.startswith("classroom") or name == "vit-ti4-32":
                self.model_choice.addItem(f"preset {name}", name)
        self.model_choice.setCurrentIndex(self.model_choice.findData(DEFAULT_PRESET))
        self.model_choice.setToolTip("What to train: a small preset or the model described in the Model builder.")
        form.addRow("Model", self.model_choice)
        why = QLabel(f"The convolutional stem (Xiao et al. 2021) learns fastest, so it is the default for a live demo: "
                     f"{DEMO.accuracy:.0%} after {DEFAULT_BUDGET_S} s on a 2-core laptop. 'classroom' has ViT's own "
                     "patchify stem.")
        why.setWordWrap(True)
        form.addRow(why)
        self.steps = QSpinBox()
        self.steps.setRange(0, 1_000_000)
        self.steps.setValue(0)
        self.steps.setSpecialValueText("use the time budget")
        self.steps.setToolTip("Optimizer steps to train for; 0 trains for the time budget instead.")
        form.addRow("Steps", self.steps)
        self.budget = QSpinBox()
        self.budget.setRange(5, 24 * 3600)
        self.budget.setValue(DEFAULT_BUDGET_S)
        self.budget.setSuffix(" s")
        self.budget.setToolTip("How long to train when no step count is given.")
        form.addRow("Time budget", self.budget)
        self.batch = QSpinBox()
        self.batch.setRange(1, 4096)
        self.batch.setValue(DEFAULTS.batch_size)
        self.batch.setToolTip("Images per optimizer step.")
        form.addRow("Batch size", self.batch)
        self.lr = QDoubleSpinBox()
        self.lr.setDecimals(5)
        self.lr.setRange(1e-5, 1.0)
        self.lr.setSingleStep(1e-4)
        self.lr.setValue(DEFAULTS.lr)
        self.lr.setToolTip("Peak learning rate of AdamW after warm-up (cosine decay after it).")
        form.addRow("Learning rate", self.lr)
        self.train_size = QSpinBox()
        self.train_size.setRange(64, 200_000)
        self.train_size.setValue(20_000)
        self.train_size.setToolTip("How many images the built-in datasets draw for training.")
        form.addRow("Built-in images", self.train_size)
        self.out = QLineEdit(str(runs_folder() / "run"))
        self.out.setToolTip("Folder where the checkpoint is saved (a native vit-explorer checkpoint).")
        form.addRow("Save to", self.out)
        self.change = QComboBox()
        for text, _ in CHANGES:
            self.change.addItem(text)
        self.change.setToolTip("The one change of the comparison run; its curves are drawn against the first run's.")
        form.addRow("Comparison", self.change)

        self.start_button = QPushButton("Start")
        self.start_button.setToolTip("Train a new model from scratch with these settings.")
        self.start_button.clicked.connect(lambda: self.start())
        self.pause_button = QPushButton("Pause")
        self.pause_button.setToolTip("Pause or continue the running training.")
        self.pause_button.clicked.connect(self.toggle_pause)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Stop training; the checkpoint so far is saved.")
        self.stop_button.clicked.connect(self.stop)
        self.resume_button = QPushButton("Resume")
        self.resume_button.setToolTip("Continue the last stopped run from its saved training state.")
        self.resume_button.clicked.connect(self.resume)
        self.compare_button = QPushButton("Run comparison")
        self.compare_button.setToolTip("Train again with the one change chosen above and plot both runs.")
        self.compare_button.clicked.connect(self.start_comparison)
        self.use_button = QPushButton("Open trained model")
        self.use_button.setToolTip("Make the last trained model the current model of every view.")
        self.use_button.clicked.connect(self.use_trained)
        self.settings_button = QToolButton()
        self.settings_button.setText("Settings")
        self.settings_button.setCheckable(True)
        self.settings_button.setChecked(True)
        self.settings_button.setToolTip("Show or hide the run's settings; on a small screen they fold away when a "
                                        "run starts, so the figures get the room.")
        self.settings_button.toggled.connect(self._show_settings)
        # the buttons stay in the view's toolbar (they wrap on a narrow screen) while the settings fold away
        for b in (self.start_button, self.pause_button, self.stop_button, self.resume_button, self.compare_button,
                  self.use_button, self.settings_button):
            self.controls.addWidget(b)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setToolTip("Progress of the current run.")
        self.progress.setVisible(False)  # until a run starts
        self.status = QLabel("Not training.")
        self.status.setWordWrap(True)
        self.estimate = QLabel("")  # the run's length from its pace, and the accuracy measured runs reached
        self.estimate.setWordWrap(True)
        self.estimate.setVisible(False)
        line = QHBoxLayout()
        line.addWidget(self.progress, 1)
        line.addWidget(self.status, 3)
        self.body.addLayout(line)
        self.body.addWidget(self.estimate)
        scroll = self.form_area = QScrollArea()  # on a small screen the form scrolls, not the window taller
        scroll.setWidgetResizable(True)
        scroll.setWidget(form_widget)
        split.addWidget(scroll)
        self.plots = pg.GraphicsLayoutWidget()
        self.pane, self.placeholder = placeholder_pane(PLACEHOLDER, self.plots)  # before the first run
        split.addWidget(self.pane)
        self.pane.installEventFilter(self)
        split.setStretchFactor(1, 3)
        split.setChildrenCollapsible(False)
        self.body.addWidget(split, 1)
        self.snapshot: PESnapshot | None = None
        self.snapshot_run = ""  # the run the snapshot belongs to
        self._key: tuple | None = None  # structure of the drawn figures
        self._curves: dict[tuple[str, str, str], pg.PlotDataItem] = {}  # (run, metric, train/val) -> curve
        self._plots: dict[str, pg.PlotItem] = {}  # metric -> its plot
        self._legend: pg.LegendItem | None = None
        self._drawn_snapshot: PESnapshot | None = None  # the snapshot the PE grid shows
        self._pe: tuple[pg.PlotItem, pg.ImageItem] | None = None
        self._side: pg.GraphicsLayout | None = None  # the PE grid and the [CLS] thumbnail, beside or below the curves
        self._thumb: tuple[pg.PlotItem, pg.ImageItem] | None = None  # the last block's [CLS] attention
        self._health: dict[str, pg.PlotDataItem] = {}  # "entropy:<series>" / "norm:<run>" -> curve
        self._entropy_labels: dict[str, pg.TextItem] = {}  # "block <b>" -> its name at its line's end
        self._with_health = True  # the attention-health plots drawn (a pane wide enough for six figures)
        self._beside = True  # the PE grid beside the curves (a wide pane) or below them (a tall one)
        self._fit_form()
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self.redraw)
        self.listen(session.runs_changed, self.redraw)  # runs set here or elsewhere (Session.set_runs)
        self._buttons()

    def picture(self) -> QWidget:
        """The curves once a run has data; before that, the form (there is no figure yet)."""
        return self.plots if any(run.steps for run in self.runs) else self

    # ------------------------------------------------------------------ control
    @property
    def running(self) -> bool:
        """A run has started and its last event has not been handled yet (cleared by `_done`)."""
        return self.worker is not None

    def _buttons(self) -> None:
        running = self.running
        self.start_button.setEnabled(not running)
        self.compare_button.setEnabled(not running and bool(self.runs))
        self.pause_button.setEnabled(running)
        self.stop_button.setEnabled(running)
        last = self.runs[-1] if self.runs else None
        self.resume_button.setEnabled(not running and last is not None and last.finished is not None
                                      and last.finished.reason == "stopped")
        self.use_button.setEnabled(not running and last is not None and last.finished is not None)
        self.pause_button.setText("Continue" if self.control is not None and self.control.paused else "Pause")

    def config(self) -> ViTConfig:
        name = self.model_choice.currentData()
        if name:
            return preset(name)
        if self.session.draft is None:
            raise ValueError("the Model builder's settings are not valid; fix them or pick a preset")
        return self.session.draft

    def recipe(self) -> Recipe:
        steps = self.steps.value() or None
        return Recipe(steps=steps, time_budget=None if steps else float(self.budget.value()),
                      batch_size=self.batch.value(), lr=self.lr.value(), snapshot_every=10, log_every=5)

    def start(self, config: ViTConfig | None = None, name: str = "run 1", resume: bool = False) -> bool:
        """Start a run (in its own thread); returns False with a message if the settings are wrong."""
        if self.running:
            return False
        try:
            cfg = config or self.config()
            recipe = self.recipe()
        except ValueError as error:
            self.session.error.emit(str(error))
            return False
        out = Path(self.out.text()).expanduser()
        if name != "run 1":
            out = out.with_name(out.name + "-" + name.replace(" ", "-"))
        if not resume and (out / CONFIG_NAME).exists() and not self.confirm_replace(out):
            return False  # the runs on screen stay
        dataset = self.dataset.currentData() or self.dataset.currentText().strip()
        size = self.train_size.value()
        if resume:
            run = self.runs[-1]
        else:  # a first run starts afresh; a comparison run replaces any but the first
            kept = self.runs[:0 if name == "run 1" else 1]
            # the preset it comes from: the chosen one, or (a comparison run) the first run's, changed
            chosen = self.model_choice.currentData() if config is None else kept[0].preset if kept else ""
            run = Run(name, cfg, out, preset=chosen, dataset=dataset, images=size, recipe=recipe)
            self.session.set_runs([*kept, run])
        run.finished, run.first_step, run.estimated_at = None, None, 0.0
        self.progress.setVisible(True)
        self.estimate.setVisible(False)
        if self.width() < SETTINGS_BESIDE_PLOTS_PX:
            self.settings_button.setChecked(False)
        self.control = Control()
        control = self.control

        def make() -> Iterator[Any]:
            from ...checkpoints.devices import resolve_device
            from ...data.datasets import load_data
            from ...training import threads
            from ...training.checkpoint import hold_folder
            from ...training.trainer import train

            with hold_folder(run.out):  # as `vit-explorer train` does: a second run on the folder is refused
                data = load_data(dataset, image_size=cfg.image_size, train_size=size, val_size=max(64, size // 10))
                cfg_run = cfg if data.num_classes == cfg.num_classes else cfg.replace(num_classes=data.num_classes)
                yield DataReady(data, cfg_run)
                # one thread on a CPU (the other cores paint the window), or VIT_EXPLORER_THREADS, set in this thread
                choice = threads.choose(None, cfg_run, recipe.batch_size, resolve_device(None, default="auto"))
                threads.apply(choice)
                if choice.reason:
                    yield Notice(choice.reason)
                yield from train(cfg_run, data, recipe, run.out, resume=resume, control=control)

        self.worker = GeneratorThread(make, self)
        self.worker.item.connect(lambda event: self._event(run, event))
        self.worker.done.connect(self._done)
        self.status.setText(f"{run.name}: preparing the data…")
        self.worker.start()
        self._buttons()
        return True

    def confirm_replace(self, out: Path) -> bool:
        """Ask before a new run replaces the model saved in `out` (the command line needs --overwrite)."""
        answer = QMessageBox.question(
            self, "Replace the saved run?", f"{out} already holds a trained model. Train a new one in its place "
            "(the saved model is lost), or choose another 'Save to' folder?",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, QMessageBox.StandardButton.No)
        return answer == QMessageBox.StandardButton.Yes

    def start_comparison(self) -> bool:
        if not self.runs:
            return False
        label, change = CHANGES[self.change.currentIndex()]
        base = self.runs[0].config
        try:
            cfg = base.replace(**change(base))
        except ValueError as error:
            self.session.error.emit(f"cannot make the comparison model: {error}")
            return False
        return self.start(cfg, name=label)

    def toggle_pause(self) -> None:
        if self.control is None:
            return
        if self.control.paused:
            self.control.resume()
        else:
            self.control.pause()
        self._buttons()

    def stop(self) -> None:
        if self.control is not None:
            self.control.stop()

    def resume(self) -> None:
        if self.runs:
            self.start(self.runs[-1].config, self.runs[-1].name, resume=True)

    def use_trained(self) -> None:
        from ...checkpoints import LoadedModel

        run = self.runs[-1] if self.runs else None
        if run is None or run.finished is None or self.data is None:
            return
        model = run.finished.model.cpu().eval()
        source = str(run.saved or "")
        self.session.set_model(LoadedModel(model, run.config, list(self.data.labels), self.data.preprocessing,
                                           source, "native", {"trained_in_app": True}))

    # ------------------------------------------------------------------ events
    def _event(self, run: Run, event: Any) -> None:
        if isinstance(event, DataReady):
            self.data, run.config = event.data, event.config
            self.status.setText(f"{run.name}: building the model…")
        elif isinstance(event, Started):
            run.total_steps, run.time_budget = event.total_steps, event.time_budget
            run.started = True
            # still setting up (the user waits for the first step): the garbage collector scans the modules the
            # optimizer imported (torch._dynamo) now, then leaves them frozen; the plots are built now too, so
            # the steps only feed them
            collect_everything()
            if self.on_screen:
                self.redraw()
            else:
                self._dirty = True
            self.status.setText(f"{run.name}: training on {event.device}, {event.num_parameters:,} parameters")
        elif isinstance(event, Step):
            run.steps.append(event.step)
            run.loss.append(event.loss)
            run.accuracy.append(event.accuracy)
            done = (event.step / run.total_steps if run.total_steps else
                    event.elapsed_s / run.time_budget if run.time_budget else 0.0)
            self.progress.setValue(round(1000 * min(done, 1.0)))
            eta = "" if event.eta_s is None else f", ETA {event.eta_s:.0f} s"
            self.status.setText(f"{run.name}: step {event.step}, loss {event.loss:.3f}, accuracy {event.accuracy:.1%}, "
                                f"{event.images_per_s:.0f} images/s{eta}")
            self._estimate(run, event)
            self._schedule_redraw()
        elif isinstance(event, Validation):
            run.val.append((event.step, event.loss, event.accuracy))
            self._schedule_redraw()
        elif isinstance(event, PESnapshot):
            self.snapshot, self.snapshot_run = event, run.name
            self._schedule_redraw()
        elif isinstance(event, AttentionHealth):
            run.health.append(event)
            self._schedule_redraw()
        elif isinstance(event, CheckpointSaved):
            run.saved = event.path
            self.note.setText(f"saved {event.path} at step {event.step}")
        elif isinstance(event, Notice):
            self.note.setText(event.message)
        elif isinstance(event, Error):
            self.session.error.emit(f"training stopped: {event.message}")
        elif isinstance(event, Finished):
            run.finished = event
            self.progress.setValue(1000 if event.reason != "stopped" else self.progress.value())
            acc = "" if event.val_accuracy is None else f", validation accuracy {event.val_accuracy:.1%}"
            self.status.setText(f"{run.name}: {event.reason} after {event.step} steps ({event.elapsed_s:.0f} s){acc}")
            self._schedule_redraw()

    def _estimate(self, run: Run, event: Step) -> None:
        """From the second Step event on (the first window holds the slow first steps), the run's length at its
        pace and the accuracy measured runs of its model reached."""
        if run.first_step is None:
            run.first_step = (event.step, event.elapsed_s)
            return
        rate = pace(run.first_step, (event.step, event.elapsed_s))
        if rate is None or (self.estimate.isVisible() and event.elapsed_s - run.estimated_at < ESTIMATE_EVERY_S):
            return  # a new text re-lays out the view (wrapped lines): not on every step
        run.estimated_at = event.elapsed_s
        self.estimate.setText(f"{run.name}: " + estimate(run.config, run.dataset, rate, (event.step, event.elapsed_s),
                                                         run.total_steps, run.time_budget))
        self.estimate.setVisible(True)

    def _done(self, message: str) -> None:
        if message:
            self.session.error.emit(f"training failed: {message}")
            self.status.setText(f"training failed: {message}")
        self.worker = None
        self._buttons()

    def _schedule_redraw(self) -> None:
        if not self.on_screen:  # drawn when the tab is shown
            self._dirty = True
        elif not self._timer.isActive():
            self._timer.start(REDRAW_MS)

    def refresh(self, *_: object) -> None:
        self.redraw()

    def restyle(self) -> None:
        self._fit_form()
        self._key = None
        self.redraw()

    def _fit_form(self) -> None:
        """The form as wide as about 52 characters of the current text size; the figures get the rest."""
        width = self._form_width()
        self.form_area.setMaximumWidth(width)
        self.split.setSizes([width, 3 * width])

    def _form_width(self) -> int:
        """About 52 characters of the current text size; once there are figures, at most 45 % of the view (they
        need the rest)."""
        width = QFontMetrics(QApplication.font()).horizontalAdvance("x") * 52
        return min(width, max(self.width(), 400) * 45 // 100) if self._key is not None else width

    def _show_settings(self, shown: bool) -> None:
        self.form_area.setVisible(shown)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self.form_area.setMaximumWidth(self._form_width())

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        """The plot pane resized (the window, the splitter, the settings shown or hidden): when the other
        arrangement of the figures fits it better, lay them out again."""
        if watched is self.pane and event.type() == QEvent.Type.Resize and self._key is not None \
                and (self._wide(), self._roomy()) != (self._beside, self._with_health):
            self._key = None
            self._schedule_redraw()
        return super().eventFilter(watched, event)

    def _roomy(self) -> bool:
        """Whether the pane holds the attention-health plots beside the loss and accuracy (six figures, each at least
        120 px on its short side): a narrower pane (1024x768) draws the loss, the accuracy and the PE grid alone
        (the health is still logged, and drawn as soon as the pane is widened: a hidden settings form, a wider
        window)."""
        return self.pane.width() >= HEALTH_MIN_PX * figures.text_scale()  # larger text: larger axes and labels

    def _wide(self) -> bool:
        """Whether the PE grid goes beside the curves (it needs about a square) rather than below them: three
        figures stacked leave each a strip, so only a pane much taller than wide stacks them."""
        size = self.pane.size()
        return size.width() >= 0.8 * size.height()

    def redraw(self) -> None:
        """Draw the curves and the PE grid. The plots are built once per set of runs; later series (validation
        dots, the PE grid) join them in place and new points only feed the curves, so a step never rebuilds
        the layout on the GUI thread."""
        runs = [r for r in self.runs if r.started]
        self.pane.setCurrentWidget(self.plots if runs else self.placeholder)
        if not runs:
            self.plots.ci.clear()
            self._curves, self._plots, self._pe, self._key = {}, {}, None, None
            return
        key = tuple(r.name for r in runs)
        if key != self._key:
            self._build_figures(runs)
            if self._key is None:  # the first figures: the form makes room for them
                self._key = key
                self._fit_form()
            self._key = key
        for i, run in enumerate(runs):
            for metric in ("loss", "accuracy"):
                self._curves[(run.name, metric, "train")].setData(run.steps, getattr(run, metric))
                if run.val:
                    values = [v[1] if metric == "loss" else v[2] for v in run.val]
                    self._val_curve(run.name, metric, i).setData([v[0] for v in run.val], values)
        if self.snapshot is not None and self.snapshot is not self._drawn_snapshot:  # a new one: not every redraw
            self._draw_snapshot(self.snapshot)
        self._draw_health(runs)

    def _draw_health(self, runs: list[Run]) -> None:
        """Attention health: the newest run's entropy per block (with log T), every run's largest token norm, and
        the newest run's last [CLS] attention (an untrained model: entropy near log T, no outlier norms, a flat
        map)."""
        if not self._with_health:
            return
        newest = runs[-1]
        steps, entropy, _ = health_series(newest.health)
        plot = self._plots["entropy"]
        blocks = [name for name in entropy if not name.startswith("uniform")]
        for name, values in entropy.items():
            if f"entropy:{name}" not in self._health:
                uniform = name.startswith("uniform")
                # the blocks on a ramp of their own, each named at its line's end: in the runs' colours block 0
                # read as run 1 (the lines are the newest run's blocks)
                colour = "#888888" if uniform else ENTROPY_RAMP.map(
                    ENTROPY_RAMP_END * blocks.index(name) / max(1, len(blocks) - 1), mode="qcolor")
                pen = pg.mkPen(colour, width=2, **({"style": Qt.PenStyle.DashLine} if uniform else {}))
                self._health[f"entropy:{name}"] = curve = plot.plot([], [], pen=pen, name=name)
                if uniform and self._legend is not None:  # the one legend says what the dashed line is
                    self._legend.addItem(curve, "uniform (log T)")
                if not uniform:
                    label = self._entropy_labels[name] = pg.TextItem(name.replace("block ", "b"), color=colour,
                                                                     anchor=(1, 1))
                    label.setFont(figures.tick_font())
                    label.textItem.document().setDocumentMargin(0)  # a line of text tall: names stack close
                    plot.addItem(label)
            self._health[f"entropy:{name}"].setData(steps, values)
        self._place_entropy_labels()
        for run in runs:
            run_steps, _, norms = health_series(run.health)
            if f"norm:{run.name}" in self._health:
                self._health[f"norm:{run.name}"].setData(run_steps, norms)
        if newest.health and self._side is not None:
            last = newest.health[-1]
            if self._thumb is None:
                self._side.nextRow()
                self._thumb = figures.draw_attention_thumbnail(self._side, last.cls_attention, title="")
                self._side.layout.setRowStretchFactor(0, 3)  # the grid, with its colour bar and axes, has more to
                self._side.layout.setRowStretchFactor(1, 2)  # draw around its data than the thumbnail
            with figures.title_width(PE_TITLE_CHARS):
                figures.set_title(self._thumb[0], f"[CLS] at step {last.step}")
            self._thumb[1].setImage(last.cls_attention, autoLevels=True)

    def _place_entropy_labels(self) -> None:
        """Each block's name at its entropy line's end, a line of text apart from the others' (close entropies
        early in a run drew b1-b3 over each other); again when the plot's range changes, which changes the gap."""
        plot = self._plots.get("entropy")
        ends = {name: self._health[f"entropy:{name}"].getData() for name in self._entropy_labels}
        ends = {name: (float(x[-1]), float(y[-1])) for name, (x, y) in ends.items() if x is not None and len(x)}
        if plot is None or not ends:
            return
        pixel = plot.getViewBox().viewPixelSize()[1]  # data units per screen pixel, up the axis
        gap = max(label.boundingRect().height() for label in self._entropy_labels.values()) * pixel
        heights = figures.spread([y for _, y in ends.values()], gap)
        for (name, (x, _)), y in zip(ends.items(), heights, strict=True):
            self._entropy_labels[name].setPos(x, y)

    def _val_curve(self, run: str, metric: str, index: int) -> pg.PlotDataItem:
        """The validation dots of a run, added to its plot when the first validation arrives."""
        if (run, metric, "val") not in self._curves:
            plot = self._plots[metric]
            colour = figures.PALETTE[index % len(figures.PALETTE)]
            self._curves[(run, metric, "val")] = dots = plot.plot([], [], pen=None, symbol="o", symbolBrush=colour,
                                                                  symbolSize=9)
            if metric == "loss" and index == 0 and self._legend is not None:  # the legend says once what dots are
                self._legend.addItem(dots, "validation")
        return self._curves[(run, metric, "val")]

    def _draw_snapshot(self, snapshot: PESnapshot) -> None:
        """The PE similarity grid below the curves (built with them): only its image changes, unless the grid does."""
        mosaic = figures.similarity_mosaic(snapshot.similarity)
        if self._pe is None or self._pe[1].image.shape != mosaic.shape:  # a grid of another size: lay out anew
            self._build_figures([r for r in self.runs if r.started])
            return
        plot, image = self._pe
        image.setImage(mosaic, levels=(-1, 1), autoLevels=False)
        self._drawn_snapshot = snapshot
        with figures.title_width(PE_TITLE_CHARS):
            figures.set_title(plot, self._snapshot_title())

    def _build_figures(self, runs: list[Run]) -> None:
        """The loss and accuracy curves side by side, attention entropy and the largest token norm under them, and
        the PE grid and [CLS] thumbnail beside them on a wide pane (below them on a tall one)."""
        self.plots.ci.clear()
        self._curves, self._plots, self._pe, self._drawn_snapshot = {}, {}, None, None
        self._thumb, self._health, self._entropy_labels = None, {}, {}
        self._beside, self._with_health = self._wide(), self._roomy()
        # one legend for every curve, in a row of its own: it never covers a curve. A pane with the health plots has it
        # over the curves (the PE grid and the thumbnail beside them keep the whole height); a narrower one over every
        # figure: over the curves alone its width pushed the PE grid past the pane's edge (at 1024x768). Either way
        # it has as many keys a row as its room holds: in one row over the curves, a comparison run's name widened
        # their column and cut the PE grid's colour bar at the pane's edge (at 1280x800)
        over_all = not self._with_health
        keys = [run.name for run in runs] + ["validation"] + ([] if over_all else ["uniform (log T)"])
        room = self.pane.width() * (CURVES_SHARE if self._beside and not over_all else 1)
        columns = _legend_columns(keys, room)
        legend = self._legend = Legend(labelTextSize=figures.label_size(), colCount=columns,
                                       labelTextColor=pg.getConfigOption("foreground"))
        if over_all:
            self.plots.ci.addItem(legend, colspan=2 if self._beside else 1)
            self.plots.ci.nextRow()
        curves = self.plots.ci.addLayout()
        if not over_all:
            curves.addItem(legend, colspan=2)
            curves.nextRow()
        # two by two: loss | accuracy, then attention health (issue 29): entropy per block against log T | the
        # largest token norm; each keeps a data area a room can read at 1280x800
        names = {"loss": "loss", "accuracy": "accuracy", "entropy": "entropy (nats)", "norm": "max token norm"}
        if not self._with_health:
            names = {"loss": "loss", "accuracy": "accuracy"}
        for i, (metric, ylabel) in enumerate(names.items()):
            if i == 2 or (i == 1 and not self._with_health):  # two by two, or loss above accuracy
                curves.nextRow()
            # no title: the y axis names the metric, and a title row would take the height the curve needs
            plot = self._plots[metric] = figures.draw_lines(curves, [], {}, title="", xlabel="step",
                                                             ylabel=ylabel, markers=False, integer_x=True,
                                                             legend=False)  # the one above both names the runs
            if metric == "entropy":
                plot.getViewBox().sigRangeChanged.connect(lambda *_: self._place_entropy_labels())
                continue  # its curves (per block of the newest run) come with the first health event
            for j, run in enumerate(runs):
                colour = figures.PALETTE[j % len(figures.PALETTE)]
                line = plot.plot([], [], pen=pg.mkPen(colour, width=2.5))
                if metric == "norm":
                    self._health[f"norm:{run.name}"] = line
                else:
                    self._curves[(run.name, metric, "train")] = line
                if metric == "loss":
                    legend.addItem(line, run.name)
        legend.setMaximumHeight(legend.layout.preferredHeight())
        if not self._beside:
            self.plots.ci.nextRow()
        else:  # four curves two by two, and the grid over the thumbnail: the curves take three fifths of the width
            self.plots.ci.layout.setColumnStretchFactor(0, round(5 * CURVES_SHARE) if self._with_health else 1)
            self.plots.ci.layout.setColumnStretchFactor(1, round(5 * (1 - CURVES_SHARE)) if self._with_health else 1)
        newest = runs[-1]
        side = self._side = self.plots.ci.addLayout()
        with figures.title_width(PE_TITLE_CHARS):
            if self.snapshot is not None:
                self._pe = figures.draw_similarity_grid(side, self.snapshot.similarity, title=self._snapshot_title())
                self._drawn_snapshot = self.snapshot
            elif SCHEMES[newest.config.pos_embed].additive:  # its grid, empty until the first snapshot
                gh, gw = newest.config.grid_size
                self._pe = figures.draw_similarity_grid(
                    side, np.full((gh, gw, gh, gw), np.nan, np.float32),
                    title=f"PE similarity · {newest.name} · at the first snapshot")

    def _snapshot_title(self) -> str:
        return f"PE similarity · {self.snapshot_run} · step {self.snapshot.step}"

    def closeEvent(self, event: Any) -> None:  # noqa: N802
        self.stop()
        if self.worker is not None:
            self.worker.join(10)
        super().closeEvent(event)

    def export_info(self) -> dict[str, str]:
        """The runs drawn, not the loaded model and image: each run's model, data, recipe and steps done."""
        info = {"view": self.title}
        for run in self.runs:
            info[run.name] = describe(run)
        return info

    def table(self) -> Table | None:
        """Every logged training point and every validation, per run, in step order."""
        rows: list[tuple[str, str, int, float, float]] = []
        for r in self.runs:
            points = [("train", s, loss, acc) for s, loss, acc in zip(r.steps, r.loss, r.accuracy, strict=True)]
            points += [("validation", s, loss, acc) for s, loss, acc in r.val]
            rows += [(r.name, split, s, loss, acc) for split, s, loss, acc in sorted(points, key=lambda p: p[1])]
        return (["run", "split", "step", "loss", "accuracy"], rows) if rows else None


def _legend_columns(keys: list[str], width: float) -> int:
    """As many of a legend's keys a row as `width` px hold (a key: its sample line and its name; the legend fills its
    rows in turn, each column as wide as its widest key)."""
    widths = [len(key) * figures.label_char_px() + LEGEND_SAMPLE_PX for key in keys]
    for columns in range(len(keys), 1, -1):
        if sum(max(widths[c::columns]) for c in range(columns)) <= width:
            return columns
    return 1
