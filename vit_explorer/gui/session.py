"""The app's state, in one typed place: the loaded model, the image, masks, resolution, what is
selected, the attention settings, the test-time-registers toggle, the model compared with the loaded one, the
lesson step on screen, the training runs on screen, and the model the builder describes.

Views take the session in `__init__`, read it, connect to its signals and disconnect on close, and
ask it to run work in the background (`run`, `cancel`). Lessons and menus set the state here, never in a
view's widgets; a setter that changes nothing emits nothing, so widgets that follow a signal cannot loop.
Every change that alters the model's input schedules one forward pass on the "forward" channel; a newer
change makes the older pass stale, so views only ever see the newest result.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image
from PySide6.QtCore import QObject, Signal

from ..analysis.attention import HEAD_FUSIONS
from ..analysis.registers import REGISTER_MODES
from ..checkpoints import LoadedModel
from ..explore.attention import CLASS_ATTENTION, MODES
from ..explore.build import preferred_device
from ..explore.forward import ForwardResult, Inputs, Needs, check_size, nonfinite_outputs, run_forward
from ..models import ViTConfig
from ..models.hooks import HookFn
from ..paths import BUNDLED
from ..training.events import AttentionHealth, Finished
from ..training.recipe import Recipe
from .workers import Runner

if TYPE_CHECKING:
    from ..explore.dataset_analysis import DatasetState
    from ..explore.lessons import Lesson

_ids = itertools.count(1)
FORWARD_PRIORITY = 10  # the forward pass starts before waiting analyses: every view needs its result


def default_image(size: tuple[int, int]) -> Image.Image:
    """A neutral grey picture, used until the user opens one."""
    return Image.new("RGB", (size[1], size[0]), (128, 128, 128))


MAX_DISCARD = 0.95  # rollout keeps at least 5 % of each block's attention weights


@dataclass(frozen=True)
class AttentionSettings:
    """What the Attention view shows."""

    mode: str = "one head"  # one of explore.attention.MODES
    fusion: str = HEAD_FUSIONS[0]  # rollout: how the heads of a block are combined
    discard: float = 0.0  # rollout: share of the weakest weights set to zero in each block, 0 to MAX_DISCARD
    opacity: float = 0.6  # of the map over the image, 0 to 1
    map_only: bool = False  # the map without the image under it

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"attention mode {self.mode!r} is not one of {list(MODES)}")
        if self.fusion not in HEAD_FUSIONS:
            raise ValueError(f"attention fusion {self.fusion!r} is not one of {list(HEAD_FUSIONS)}")
        if not 0.0 <= self.discard <= MAX_DISCARD:
            raise ValueError(f"attention discard {self.discard} is not from 0 to {MAX_DISCARD}")
        if not 0.0 <= self.opacity <= 1.0:
            raise ValueError(f"attention opacity {self.opacity} is not from 0 to 1")


MAX_TEST_TIME_REGISTERS = 8  # the toggle's k goes up to this


@dataclass(frozen=True)
class RegisterSettings:
    """The test-time-registers toggle (issue 29): when on, the Prediction, Attention and Features views show the
    model beside itself with k registers fed by `neurons` (None: the finder's top 4 over the bundled samples)."""

    on: bool = False
    neurons: tuple[tuple[int, int], ...] | None = None  # (block, unit) each
    k: int = 1
    mode: str = REGISTER_MODES[0]  # what the patches keep: zero / mean / unchanged

    def __post_init__(self) -> None:
        if self.mode not in REGISTER_MODES:
            raise ValueError(f"register mode {self.mode!r} is not one of {list(REGISTER_MODES)}")
        if not 1 <= self.k <= MAX_TEST_TIME_REGISTERS:
            raise ValueError(f"test-time registers: k {self.k} is not from 1 to {MAX_TEST_TIME_REGISTERS}")


@dataclass
class Run:
    """A training run of the Training view: what it trains and, as it goes, its curves (the trainer's events)."""

    name: str
    config: ViTConfig
    out: Path
    steps: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)
    val: list[tuple[int, float, float]] = field(default_factory=list)  # (step, loss, accuracy)
    health: list[AttentionHealth] = field(default_factory=list)  # attention health per logged step
    preset: str = ""  # the preset it was built from ("" for the Model builder's model)
    dataset: str = ""
    images: int = 0  # built-in images drawn for training
    recipe: Recipe | None = None
    total_steps: int | None = None
    time_budget: float | None = None
    first_step: tuple[int, float] | None = None  # (step, training seconds) of its first Step event: the pace after it
    estimated_at: float = 0.0  # training seconds when the estimate was last written
    started: bool = False  # past setting up: its plots exist
    finished: Finished | None = None
    saved: Path | None = None


def model_name(loaded: LoadedModel, unnamed: str) -> str:
    """A model's short name: the bundled model's, else the folder's or file's (the last part of a hub id); `unnamed`
    for a model built in the app."""
    for name, folder in BUNDLED.items():
        if loaded.source and str(folder) == loaded.source:
            return name
    return Path(loaded.source).name or loaded.source if loaded.source else unnamed


def could_not_load(source: str, message: str, purpose: str = "") -> str:
    """A failed load's message, naming the source once (the checkpoint readers' messages begin with it)."""
    return f"could not load {'the model' if source in message else source}{purpose}: {message}"


class Session(QObject):
    model_changed = Signal()  # a new model: everything is reset
    image_changed = Signal()
    inputs_changed = Signal()  # mask, head mask or resolution changed
    selection_changed = Signal()  # layer, head or query token changed
    result_ready = Signal(object)  # ForwardResult
    error = Signal(str)  # a message for the status bar / a dialog
    notice = Signal(str)  # something done that the user should see confirmed (a file saved)
    busy = Signal(bool)  # a forward pass is running
    loading = Signal(str)  # a load started ("" when it ended)
    load_progress = Signal(float, str)  # (fraction, stage) of the load running (sent from its worker)
    job_progress = Signal(str, float, str)  # (channel, share, what) of a channel's current job (see JobControls)
    attention_changed = Signal()  # the attention settings
    registers_changed = Signal()  # the test-time-registers toggle's settings
    compared_changed = Signal()  # the model compared with the loaded one
    lesson_changed = Signal()  # a lesson started or ended, or another step of it is on screen
    runs_changed = Signal()  # a training run started afresh or was replaced (its curves grow in place)
    dataset_changed = Signal()  # the Dataset view's analysis (and its projection) replaced

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._runner = Runner(self)
        self._runner.error.connect(lambda channel, message: self.error.emit(message))
        self._runner.progressed.connect(self.job_progress)
        self.loaded: LoadedModel | None = None
        self.model_id = 0
        self.image: Image.Image = default_image((224, 224))
        self.image_name = "grey"
        self.image_id = next(_ids)
        self.size: tuple[int, int] = (224, 224)
        self.mask = np.zeros((14, 14), bool)  # (gh, gw) True = [MASK]
        self.head_mask = np.ones((1, 1), np.float32)  # (layers, heads)
        self.hooks: tuple[tuple[str, HookFn], ...] = ()  # per-pass edits of the live model (a feature steered)
        self.layer = 0  # the selected block, counted among the blocks `num_layers` names
        self.head = 0
        self.heads: tuple[int, ...] | None = None  # the heads "all heads" shows (None: all), e.g. two to contrast
        self.query: tuple[int, int] | None = None  # None = the first prefix token ([CLS]); else (row, col)
        self.result: ForwardResult | None = None
        self.needs = Needs()  # what the views on screen draw beyond the prediction, all together
        self._needs_of: dict[str, Needs] = {}  # by view
        self.attention = AttentionSettings()
        self.registers = RegisterSettings()
        self._register_defaults: dict[int, list[tuple[int, int]]] = {}  # model id -> the finder's neurons
        self.compared: LoadedModel | None = None  # the Compare view's second model
        self.compared_name = ""  # its column's heading
        self.dtype: str | None = None  # what `load` runs the models in (None: their weights' own; --dtype)
        self.lesson: Lesson | None = None  # the lesson being presented
        self.step = -1  # the index of its step on screen (-1: none yet)
        self.hover = False  # the step asks for the image panel's hover readout while presenting
        self.draft: ViTConfig | None = None  # the config the model builder describes (the training view uses it)
        self.runs: list[Run] = []  # the Training view's runs: the first, and the comparison run with one change
        self.dataset: DatasetState | None = None  # the Dataset view's analysis of the model on screen, whole
        self._baseline: tuple[tuple[int, int, tuple[int, int]], np.ndarray] | None = None
        self._warned = 0  # the model whose non-finite outputs the banner has shown

    # ------------------------------------------------------------------ model
    @property
    def grid(self) -> tuple[int, int]:
        p = self.loaded.config.patch_size if self.loaded else 16
        return (self.size[0] // p, self.size[1] // p)

    @property
    def class_layers(self) -> bool:
        """Whether the layer counts CaiT's class-attention blocks (the attention mode that draws them) or the
        self-attention blocks (every other mode, which draws maps only those form)."""
        return self.attention.mode == CLASS_ATTENTION

    @property
    def num_layers(self) -> int:
        """The blocks the layer selects from: the self-attention blocks, or CaiT's class-attention blocks while
        the layer counts those (`class_layers`)."""
        cfg = self.loaded.config if self.loaded else None
        if cfg is None:
            return 0
        return cfg.class_attn_depth if self.class_layers and cfg.class_attn_depth else cfg.depth

    def load(self, source: str, on_done: Callable[[LoadedModel], None] | None = None,
             on_error: Callable[[str], None] | None = None) -> None:
        """Load a checkpoint in the background; a failure keeps the current model."""
        from ..checkpoints import load

        self.loading.emit(source)

        def done(loaded: LoadedModel) -> None:
            self.loading.emit("")
            self.set_model(loaded)
            if on_done is not None:
                on_done(loaded)

        def failed(message: str) -> None:
            self.loading.emit("")
            self.error.emit(could_not_load(source, message))
            if on_error is not None:
                on_error(message)

        self.run("load", lambda: load(source, device=preferred_device(), dtype=self.dtype,
                                      progress=self.load_progress.emit), done, failed, io=True)

    def set_model(self, loaded: LoadedModel) -> None:
        """Make `loaded` current: reset masks and selection to fit it, then run it."""
        self.loaded = loaded
        self.model_id = next(_ids)
        self._baseline = None
        self.size = tuple(loaded.preprocessing.size)  # type: ignore[assignment]
        cfg = loaded.config
        if self.class_layers and not cfg.class_attn_depth:  # a CaiT-only mode does not survive a model without it
            self.attention = replace(self.attention, mode="mean of heads")
            self.attention_changed.emit()
        self.mask = np.zeros(self.grid, bool)
        self.head_mask = np.ones((cfg.num_blocks, cfg.num_heads), np.float32)
        self.hooks = ()
        self.layer = min(self.layer, self.num_layers - 1)
        self.head = min(self.head, cfg.num_heads - 1)
        self.heads = None
        self.query = None
        self.result = None
        self.dataset = None  # an analysis is of one model's features
        self.model_changed.emit()
        self.request_forward()

    # ------------------------------------------------------------------ image and inputs
    def set_image(self, image: Image.Image, name: str = "image") -> None:
        self.image = image.convert("RGB")
        self.image_name = name
        self.image_id = next(_ids)
        self._baseline = None
        self.image_changed.emit()
        self.request_forward()

    def set_size(self, size: tuple[int, int]) -> None:
        """Run the model at another input size (H, W); raises ValueError if it does not fit the patches, or
        (BudgetError) if its forward pass would exceed the budget: the previous size stays."""
        if self.loaded is None:
            return
        p = self.loaded.config.patch_size
        h, w = int(size[0]), int(size[1])
        if h < p or w < p or h % p or w % p:
            raise ValueError(f"{h}x{w} is not a multiple of the patch size {p}")
        if (h, w) == self.size:
            return
        check_size(self.loaded, (h, w), self.needs)
        self.size = (h, w)
        self.mask = np.zeros(self.grid, bool)
        self.query = None
        self._baseline = None
        self.inputs_changed.emit()
        self.request_forward()

    def set_mask(self, mask: np.ndarray) -> None:
        """Mask the patches where `mask` (the patch grid's shape; only 0/1 or booleans) is true."""
        mask = np.asarray(mask)
        if mask.shape != self.grid:
            raise ValueError(f"mask shape {mask.shape} does not match the patch grid {self.grid}")
        if mask.dtype != bool and not np.isin(mask, (0, 1)).all():  # 0.5 or NaN would pass as "masked"
            raise ValueError("a [MASK] mask holds only 0 and 1 (or False and True), one per patch")
        if np.array_equal(mask.astype(bool), self.mask):
            return
        self.mask = mask.astype(bool)
        self.inputs_changed.emit()
        self.request_forward()

    def toggle_patch(self, row: int, col: int, value: bool | None = None) -> None:
        mask = self.mask.copy()
        mask[row, col] = (not mask[row, col]) if value is None else value
        self.set_mask(mask)

    def set_head_mask(self, head_mask: np.ndarray) -> None:
        """Keep each (layer, head) by its value in `head_mask` (layers x heads): 1 keeps a head, 0 removes it, a value
        between scales its output."""
        head_mask = np.asarray(head_mask, dtype=np.float32)
        if head_mask.shape != self.head_mask.shape:
            raise ValueError(f"head mask shape {head_mask.shape} does not match the model's (layers, heads) "
                             f"{self.head_mask.shape}")
        if not (np.isfinite(head_mask).all() and ((head_mask >= 0) & (head_mask <= 1)).all()):
            raise ValueError("a head mask holds values from 0 (the head off) to 1 (kept), one per layer and head")
        if np.array_equal(head_mask, self.head_mask):
            return
        self.head_mask = head_mask
        self.inputs_changed.emit()
        self.request_forward()

    def set_hooks(self, hooks: tuple[tuple[str, HookFn], ...]) -> None:
        """Run every forward pass with these (site, hook) edits (steering; () removes them); the views follow."""
        if hooks == self.hooks:
            return
        self.hooks = tuple(hooks)
        self.inputs_changed.emit()
        self.request_forward()

    # ------------------------------------------------------------------ selection
    def select(self, *, layer: int | None = None, head: int | None = None,
               query: tuple[int, int] | None | str = "keep", heads: tuple[int, ...] | None | str = "keep") -> None:
        """Change the selected layer, head, query token (query=None selects [CLS]) and/or the heads shown side by
        side (heads=None: all; heads the model does not have are left out)."""
        if layer is not None:
            self.layer = max(0, min(layer, self.num_layers - 1))
        if head is not None and self.loaded is not None:
            self.head = max(0, min(head, self.loaded.config.num_heads - 1))
        if heads != "keep":
            n = self.loaded.config.num_heads if self.loaded is not None else 0
            kept = tuple(h for h in heads if 0 <= h < n) if isinstance(heads, tuple) else None
            self.heads = kept or None
        if query != "keep":
            self.query = query  # type: ignore[assignment]
        self.selection_changed.emit()

    # ------------------------------------------------------------------ views' settings, the compared model, lessons
    def set_attention(self, **changes: Any) -> None:
        """Change attention settings by name (AttentionSettings' fields; ValueError names a bad one). A new mode
        may count other blocks (`class_layers`): the layer stays within them."""
        settings = replace(self.attention, **changes)
        if settings == self.attention:
            return
        layers_before = self.class_layers
        self.attention = settings
        self.attention_changed.emit()
        if self.class_layers != layers_before:
            self.select(layer=self.layer)

    def set_registers(self, **changes: Any) -> None:
        """Change the test-time-registers toggle's settings by name (RegisterSettings' fields)."""
        settings = replace(self.registers, **changes)
        if settings != self.registers:
            self.registers = settings
            self.registers_changed.emit()

    def register_neurons(self, inputs: Inputs, settings: RegisterSettings) -> list[tuple[int, int]]:
        """The neurons the toggle moves for a result's inputs: the settings', or the finder's, found once per
        model (in a worker)."""
        if settings.neurons is not None:
            return list(settings.neurons)
        from ..explore.registers import default_neurons

        found = self._register_defaults.get(inputs.model_id)
        if found is None:
            found = self._register_defaults[inputs.model_id] = default_neurons(inputs.loaded)
        return found

    def set_compared(self, loaded: LoadedModel | None, name: str = "") -> None:
        """The model to run beside the loaded one (None: none), headed `name` (default: its short name)."""
        self.compared = loaded
        self.compared_name = (name or model_name(loaded, "the other model")) if loaded is not None else ""
        self.compared_changed.emit()

    def set_lesson(self, lesson: Lesson | None, step: int = -1, *, hover: bool = False) -> None:
        """The lesson presented (None: none) and the index of its step on screen, which asks for the hover
        readout or not."""
        if (lesson, step, hover) == (self.lesson, self.step, self.hover):
            return
        self.lesson, self.step, self.hover = lesson, step if lesson is not None else -1, hover
        self.lesson_changed.emit()

    def set_dataset(self, dataset: DatasetState | None) -> None:
        """The Dataset view's analysis and projection, replaced whole (None: none)."""
        if dataset is self.dataset:
            return
        self.dataset = dataset
        self.dataset_changed.emit()

    def set_runs(self, runs: list[Run]) -> None:
        """The training runs on screen (a new first run replaces them all; a comparison run the second)."""
        if runs == self.runs:
            return
        self.runs = list(runs)
        self.runs_changed.emit()

    # ------------------------------------------------------------------ the forward pass
    def require(self, owner: str, needs: Needs) -> bool:
        """A view says what it draws (Needs() when it is hidden); True when the current result already holds
        it, else a forward pass that computes what every view needs is scheduled (the view draws when its
        result arrives)."""
        self._needs_of[owner] = needs
        self.needs = Needs()
        for each in self._needs_of.values():
            self.needs = self.needs.union(each)
        if self.result is not None and needs.covered_by(self.result.inputs.needs):
            return True
        self.request_forward()
        return False

    def release(self, owner: str) -> None:
        """A view no longer draws anything (hidden): later forward passes leave out what it needed."""
        self._needs_of.pop(owner, None)
        self.needs = Needs()
        for each in self._needs_of.values():
            self.needs = self.needs.union(each)

    def inputs(self) -> Inputs | None:
        if self.loaded is None:
            return None
        return Inputs(self.loaded, self.image, self.size, self.mask.copy(), self.head_mask.copy(),
                      self.model_id, self.image_id, self.needs, self.hooks)

    def request_forward(self) -> None:
        inputs = self.inputs()
        if inputs is None:
            return
        key = (inputs.model_id, inputs.image_id, inputs.size)
        baseline = self._baseline[1] if self._baseline and self._baseline[0] == key else None
        self.busy.emit(True)
        previous = self.result  # its preprocessed image serves while the image and size stay
        self.run("forward", lambda: run_forward(inputs, baseline, previous), self._forward_done, self._forward_failed,
                 priority=FORWARD_PRIORITY)

    def current(self, inputs: Inputs) -> bool:
        """Whether `inputs` are the session's now (a result of older ones is stale: a newer pass is on its way)."""
        return (inputs.model_id == self.model_id and inputs.image_id == self.image_id and inputs.size == self.size
                and np.array_equal(inputs.mask, self.mask) and np.array_equal(inputs.head_mask, self.head_mask)
                and inputs.hooks == self.hooks)

    def _forward_done(self, result: ForwardResult) -> None:
        inputs = result.inputs
        if not self.current(inputs):
            return
        if result.baseline_probs is not None:
            self._baseline = ((inputs.model_id, inputs.image_id, inputs.size), result.baseline_probs)
        elif not inputs.masked:
            self._baseline = ((inputs.model_id, inputs.image_id, inputs.size), result.probs)
        self.result = result
        self.busy.emit(False)
        self.result_ready.emit(result)
        if self._warned != inputs.model_id and not self.loaded.warnings:  # NaN weights: said when it loaded
            warning = nonfinite_outputs(result.logits, self.loaded.source or "the model")
            if warning is not None:
                self._warned = inputs.model_id  # once per model, not at every pass
                self.error.emit(f"warning: {warning}")

    def _forward_failed(self, message: str) -> None:
        self.busy.emit(False)
        self.error.emit(f"forward pass failed: {message}")

    def run(self, channel: str, fn: Callable[..., Any], on_done: Callable[[Any], None],
            on_error: Callable[[str], None] | None = None, *, io: bool = False, priority: int = 0) -> None:
        """Run a job in the background (a newer job on the same channel makes it stale); errors go to
        `on_error`, else to the `error` signal. io=True: loading files, not computing. Jobs of higher
        priority start first (the forward pass, which every view waits for)."""
        self._runner.submit(channel, fn, on_done, on_error, pool="io" if io else "compute", priority=priority)

    def cancel(self, channel: str) -> None:
        """Drop the job running or waiting on a channel."""
        self._runner.cancel(channel)

    def working(self) -> bool:
        """Whether any background job runs now."""
        return self._runner.busy()

    def shutdown(self, msecs: int = 5000) -> None:
        """Drop the pending forward pass and wait for running jobs (closing the window)."""
        self._runner.cancel("forward")
        self._runner.wait(msecs)
