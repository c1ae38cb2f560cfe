"""Lesson mode: step through a lesson (explore/lessons.py) on the live app. Each step puts the app in its
state (model, image, size, masks, heads, view, attention mode, layer, query, a second model to compare)
and shows its caption; a presenter steps with PageDown / PageUp (what a clicker sends) anywhere in the window,
or the arrows in the lesson panel (the keys are the table's, actions.py), and can leave at any step and explore
from there."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image
from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QFont, QKeySequence, QResizeEvent, QShortcut
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from .actions import ACTIONS

if TYPE_CHECKING:  # torch and the model code load after the window paints (see main_window)
    from ..checkpoints import LoadedModel
    from ..explore.forward import ForwardResult
    from ..explore.lessons import Lesson, Model, Shown, StepSettings
    from .main_window import MainWindow

# (text, tooltip, runner slot); COMPACT_TEXTS while presenting: short labels leave the title its width
BUTTONS = (("◀ Previous", "The previous step (PageUp; Left in this panel)", "previous"),
           ("Next ▶", "The next step (PageDown; Right in this panel)", "next"),
           ("Leave lesson", "Stop the lesson here and explore freely", "leave"))
COMPACT_TEXTS = ("◀", "▶", "Leave")


def materialize(model: Model) -> LoadedModel:
    """The LoadedModel a step names: loaded from its source, or built from its preset (run in a worker)."""
    if model.source is not None:
        from ..checkpoints import load
        from ..explore.build import preferred_device

        return load(model.source, device=preferred_device())  # where the session runs its models
    from ..explore.build import build_loaded

    return build_loaded(model.config(), seed=model.seed)  # the same weights, the same numbers, at every launch


class LessonPanel(QWidget):
    """The caption of the current step, with Previous / Next / Leave."""

    def __init__(self, runner: LessonRunner) -> None:
        super().__init__()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 4, 8, 4)
        head = QHBoxLayout()  # the step's title, then the step counter and the buttons (short while presenting)
        self.title = QLabel("")
        self.title.setWordWrap(True)
        self.title.setTextFormat(Qt.TextFormat.PlainText)  # a lesson's text is shown as written, never as HTML
        bold = QFont()
        bold.setBold(True)  # only the weight is set: the size follows the app's text scale (Ctrl+plus)
        self.title.setFont(bold)
        head.addWidget(self.title, 1)
        self.counter = QLabel("")
        head.addWidget(self.counter)
        self.compact = False
        self._figure_text = ""
        self.hide_caption = QPushButton("Hide caption")
        self.hide_caption.setCheckable(True)
        self.hide_caption.setToolTip("Give the caption's room to the figures (the step's title stays)")
        self.hide_caption.toggled.connect(self._caption_hidden)
        head.addWidget(self.hide_caption)
        self.buttons: list[QPushButton] = []
        for text, tip, slot in BUTTONS:
            button = QPushButton(text)
            button.setToolTip(tip)
            button.clicked.connect(getattr(runner, slot))
            head.addWidget(button)
            self.buttons.append(button)
        layout.addLayout(head)
        self.caption = QLabel("")
        self.caption.setWordWrap(True)
        self.caption.setTextFormat(Qt.TextFormat.PlainText)
        layout.addWidget(self.caption)
        self.figure = QLabel("")  # where the figure comes from, small
        self.figure.setWordWrap(True)
        self.figure.setTextFormat(Qt.TextFormat.PlainText)
        self.figure.setStyleSheet("font-style: italic;")
        layout.addWidget(self.figure)

    def set_compact(self, compact: bool) -> None:
        """Presenting: short button labels (their tooltips say the rest), so the step's title keeps the width."""
        for button, (text, _, _), short in zip(self.buttons, BUTTONS, COMPACT_TEXTS, strict=True):
            button.setText(short if compact else text)
        self.compact = compact
        self._caption_hidden(self.hide_caption.isChecked())

    def _caption_hidden(self, hidden: bool) -> None:
        texts = ("Caption", "Caption") if self.compact else ("Show caption", "Hide caption")
        self.hide_caption.setText(texts[0] if hidden else texts[1])
        self.caption.setVisible(not hidden)
        self.figure.setText("" if hidden else self._figure_text)
        self.figure.setVisible(not hidden and bool(self._figure_text))
        self._fit()

    def show_step(self, lesson: Lesson, index: int) -> None:
        step = lesson.steps[index]
        self.title.setText(step.title)
        self.counter.setText(f"{index + 1} / {len(lesson.steps)}")
        self.caption.setText(step.caption)
        self._figure_text = f"See: {step.figure}" if step.figure else ""
        self._caption_hidden(self.hide_caption.isChecked())

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self._fit()

    def _fit(self) -> None:
        """Exactly as tall as the wrapped caption at the panel's width: the dock along the bottom does not ask its
        labels' height-for-width, and cut the caption's lines in half."""
        layout = self.layout()
        if layout is not None:
            layout.invalidate()  # a new title or caption: the cached height for this width is stale
        need = layout.heightForWidth(self.width()) if layout is not None and layout.hasHeightForWidth() else -1
        if need > 0 and need != self.minimumHeight():
            self.setFixedHeight(need)  # and no taller: the figures above need every line the caption does not


class LessonRunner(QObject):
    """Puts each step's whole state (`explore.lessons.resolve`) in place, however the step is entered, and checks
    the step's claims (`expect`) once its result is on screen."""

    applied = Signal(int)  # a step is in place (its model loaded, the views set)
    ended = Signal()

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.panel = LessonPanel(self)
        self._models: dict[str, LoadedModel] = {}  # by Model.key: the ones this or a later step uses (see _keep)
        self._states: tuple[StepSettings, ...] = ()  # the lesson's steps, each as a whole state
        self._start: tuple[LoadedModel | None, Image.Image, str, str | None] | None = None  # what the lesson began on
        self._image: tuple[str, int] | None = None  # the image a step opened, and the session's id of it
        self._checking = -1  # the step whose claims are checked when its result arrives
        self.failures: list[str] = []  # the claims of the step on screen that failed (the banner says them)
        for action in ACTIONS:  # the arrows step only while the panel has the focus: elsewhere they belong to the
            for key in action.panel_keys:  # focused control (PageDown / PageUp are the menu's, window-wide)
                QShortcut(QKeySequence(key), self.panel, activated=lambda action=action: action.handler(window),
                          context=Qt.ShortcutContext.WidgetWithChildrenShortcut)
        window.session.lesson_changed.connect(self._show)
        window.session.result_ready.connect(self._result)

    @property
    def lesson(self) -> Lesson | None:
        """The lesson presented (the session's)."""
        return self.window.session.lesson

    @property
    def index(self) -> int:
        """The index of its step on screen (the session's; -1: none)."""
        return self.window.session.step

    def _show(self) -> None:
        if self.lesson is not None:
            self.panel.show_step(self.lesson, self.index)

    @property
    def running(self) -> bool:
        return self.lesson is not None

    def start(self, lesson: Lesson) -> None:
        session = self.window.session
        self._models = {}
        self._states = lesson.states
        view = self.window.current_view()
        self._start = (session.loaded, session.image, session.image_name, view.title if view is not None else None)
        self._image = None
        self.window.show_lesson_panel(self.panel, True)
        self.panel.buttons[1].setFocus()  # Next: the arrows step at once
        self.go(0, lesson)

    def next(self) -> None:
        if self.lesson is not None and self.index + 1 < len(self.lesson.steps):
            self.go(self.index + 1)

    def previous(self) -> None:
        if self.lesson is not None and self.index > 0:
            self.go(self.index - 1)

    def leave(self) -> None:
        """Stop the lesson; the app stays as the last step left it."""
        self.window.session.set_lesson(None)
        self._models = {}  # the session keeps the model on screen; the rest go
        self._checking, self.failures = -1, []
        self.window.prediction_alone(False)  # the views' tabs and the prediction back, to explore from here
        self.window.docks["Prediction"].setVisible(True)
        self.window.presentation.arrange()
        self.window.show_lesson_panel(self.panel, False)
        self.ended.emit()

    def go(self, index: int, lesson: Lesson | None = None) -> None:
        """Show step `index` (of `lesson`, default: the one presented) and put the app in its whole state (a model
        to load first, then the rest): the same state and numbers whichever step came before."""
        lesson = lesson or self.lesson
        assert lesson is not None
        state = self._states[index]
        self._checking, self.failures = -1, []
        self.window.session.set_lesson(lesson, index, hover=state.hover)  # the panel follows: its caption
        self._models = {key: loaded for key, loaded in self._models.items() if key in self._keep()}
        if state.model is None:
            assert self._start is not None
            self._model_ready(index, self._start[0])
        else:
            self._with_model(state.model, lambda loaded: self._model_ready(index, loaded))

    # ------------------------------------------------------------------ applying a step
    def _keep(self) -> set[str]:
        """The models this step and the later ones use: kept, so a model is loaded or built once on the way
        forward; the others are let go (30 steps over different presets would otherwise hold 30 models). Going
        back to a step whose model was let go loads it again (a preset: built again from the same seed)."""
        later = self._states[self.index:]
        return {model.key for state in later for model in (state.model, state.compare) if model is not None}

    def _with_model(self, model: Model, then: Callable[[LoadedModel], None]) -> None:
        if model.key in self._models:
            then(self._models[model.key])
            return
        session = self.window.session

        def done(loaded: LoadedModel) -> None:
            session.loading.emit("")
            if self.lesson is not None and model.key in self._keep():  # not if the presenter has moved past it
                self._models[model.key] = loaded
            then(loaded)

        def failed(message: str) -> None:
            session.loading.emit("")
            session.error.emit(f"lesson: could not open the step's model: {message}")

        # the progress bar runs until the step's model is in place: the figures still up are the step before's
        session.loading.emit(model.source or f"preset:{model.preset}")
        session.run("lesson-model", lambda: materialize(model), done, failed, io=True)

    def _model_ready(self, index: int, loaded: LoadedModel | None) -> None:
        if index != self.index or self.lesson is None:
            return  # the presenter moved on while it loaded
        if loaded is not None and self.window.session.loaded is not loaded:
            self.window.session.set_model(loaded)
        self._arrange(index)

    def _arrange(self, index: int) -> None:
        """Everything but the model: the step's whole state (`explore.lesson_states.step_state`, settled on the
        model and image now on screen), each setting set whole, so what the step before left never shows through."""
        from ..explore.lesson_states import step_state

        window, session = self.window, self.window.session
        assert self._start is not None
        settings = self._states[index]
        self._open_image(settings.image)
        if session.loaded is None:
            return
        state = step_state(settings, session.loaded, session.image)
        for problem in state.problems:  # the banner says what this model cannot show; the rest applies
            session.error.emit(f"lesson step {index + 1}: {problem}")
        try:
            session.set_size(state.size)
        except ValueError as error:  # over the budget: the banner says so, the model runs at the size it had
            session.error.emit(f"lesson step {index + 1}: {error}")
        if state.mask.shape == session.grid:
            session.set_mask(state.mask)
        session.set_head_mask(state.head_mask)
        session.set_attention(mode=state.mode)
        session.select(layer=state.layer, head=state.head, query=state.query, heads=state.heads)
        window.image_panel.set_input_mode(state.input_mode)
        window.presentation.arrange()  # the hover readout the step asks for (`Session.hover`)
        view = state.view or self._start[3]
        if view is not None:
            window.show_view(view, state.panels)
        tab = state.tab or self._start[3]
        if view == "Prediction" and tab is not None and tab != "Prediction":
            window.docks[tab].raise_()  # the tab beside it: the one the last step before showed
        explain = window.views["Explain"]
        if explain.target.currentData() != state.target:  # explained again only when the class changes
            explain.choose(target=state.target, top_class=state.target is None)
        if state.expand:
            try:
                window.views["Parameters"].expand(state.expand)
            except ValueError as error:
                session.error.emit(f"lesson step {index + 1}: expand: {error}")
        if state.compare is not None:
            self._with_model(state.compare, lambda loaded: self._compared(index, loaded))
            return
        if session.compared is not None:
            session.set_compared(None)
        self._applied(index)

    def _open_image(self, source: str | None) -> None:
        """The step's image (None: the lesson's first), opened again only when another is on screen."""
        session = self.window.session
        assert self._start is not None
        name = source or ""
        if self._image == (name, session.image_id):
            return
        if source is None:
            session.set_image(self._start[1], self._start[2])
        else:
            self.window.image_panel.open_sample_or_path(source)
        self._image = (name, session.image_id)

    def _compared(self, index: int, loaded: LoadedModel) -> None:
        if index != self.index:
            return
        if self.window.session.compared is not loaded:
            self.window.session.set_compared(loaded)
        self._applied(index)

    def _applied(self, index: int) -> None:
        self._checking = index
        self.applied.emit(index)
        self._result(self.window.session.result)

    # ------------------------------------------------------------------ the step's claims
    def _result(self, result: ForwardResult | None) -> None:
        """The step's claims, checked once its own result is on screen; failures go to the banner."""
        from ..explore.lessons import check_claims

        session = self.window.session
        if (self._checking != self.index or self.lesson is None or result is None
                or result.inputs.model_id != session.model_id or result.inputs.image_id != session.image_id
                or not np.array_equal(result.inputs.mask, session.mask)):
            return
        self._checking = -1
        self.failures = check_claims(self.lesson, self.index, self.shown())
        if self.failures:
            session.error.emit("\n".join(self.failures))

    def shown(self) -> Shown:
        """What is on screen now, as a step's claims read it."""
        from ..explore.lessons import Shown

        window, session = self.window, self.window.session
        loaded, result = session.loaded, session.result
        explain = window.views["Explain"]
        target = explain.target.currentData()
        predicted = None
        if loaded is not None and result is not None and result.inputs.model_id == session.model_id:
            predicted = loaded.label(int(np.argmax(result.probs)))
        return Shown(
            config=loaded.config if loaded is not None else None, trained=bool(loaded is not None and loaded.source),
            grid=session.grid, views=window.views_on_screen(), mode=session.attention.mode,
            layer=session.layer, input_mode=window.image_panel.input_mode(), masked=int(session.mask.sum()),
            heads_off=int((session.head_mask == 0).sum()), predicted=predicted,
            target=loaded.label(int(target)) if loaded is not None and target is not None else None,
            compared=session.compared.config if session.compared is not None else None,
            rows=window.views["Parameters"].open_rows())
