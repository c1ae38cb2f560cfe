"""Lesson mode: step through a lesson (explore/lessons.py) on the live app. Each step puts the app in its
state (model, image, size, masks, heads, view, attention mode, layer, query, a second model to compare)
and shows its caption; a presenter steps with PageDown / PageUp (what a clicker sends) anywhere in the window,
or the arrows in the lesson panel (the keys are the table's, actions.py), and can leave at any step and explore
from there."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QFont, QKeySequence, QResizeEvent, QShortcut
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from .actions import ACTIONS

if TYPE_CHECKING:  # torch and the model code load after the window paints (see main_window)
    from ..checkpoints import LoadedModel
    from ..explore.lessons import Lesson, Model, Step
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

    return build_loaded(model.config())


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
    applied = Signal(int)  # a step is in place (its model loaded, the views set)
    ended = Signal()

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.panel = LessonPanel(self)
        self._models: dict[str, LoadedModel] = {}  # by Model.key: the ones this or a later step uses (see _keep)
        for action in ACTIONS:  # the arrows step only while the panel has the focus: elsewhere they belong to the
            for key in action.panel_keys:  # focused control (PageDown / PageUp are the menu's, window-wide)
                QShortcut(QKeySequence(key), self.panel, activated=lambda action=action: action.handler(window),
                          context=Qt.ShortcutContext.WidgetWithChildrenShortcut)
        window.session.lesson_changed.connect(self._show)

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
        self._models = {}
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
        self.window.prediction_alone(False)  # the views' tabs and the prediction back, to explore from here
        self.window.docks["Prediction"].setVisible(True)
        self.window.presentation.arrange()
        self.window.show_lesson_panel(self.panel, False)
        self.ended.emit()

    def go(self, index: int, lesson: Lesson | None = None) -> None:
        """Show step `index` (of `lesson`, default: the one presented) and put the app in its state (a model to
        load first, then the rest)."""
        lesson = lesson or self.lesson
        assert lesson is not None
        step = lesson.steps[index]
        self.window.session.set_lesson(lesson, index, hover=step.hover)  # the panel follows: its caption
        self._models = {key: loaded for key, loaded in self._models.items() if key in self._keep()}
        if step.model is None:
            self._arrange(step, index)
        else:
            self._with_model(step.model, lambda loaded: self._model_ready(step, index, loaded))

    # ------------------------------------------------------------------ applying a step
    def _keep(self) -> set[str]:
        """The models this step and the later ones use: kept, so a model is loaded or built once on the way
        forward; the others are let go (30 steps over different presets would otherwise hold 30 models). Going
        back to a step whose model was let go loads it again (a preset: new random weights)."""
        assert self.lesson is not None
        later = self.lesson.steps[self.index:]
        return {model.key for step in later for model in (step.model, step.compare) if model is not None}

    def _with_model(self, model: Model, then: Callable[[LoadedModel], None]) -> None:
        if model.key in self._models:
            then(self._models[model.key])
            return
        session = self.window.session

        def done(loaded: LoadedModel) -> None:
            if self.lesson is not None and model.key in self._keep():  # not if the presenter has moved past it
                self._models[model.key] = loaded
            then(loaded)

        session.run("lesson-model", lambda: materialize(model), done,
                    lambda message: session.error.emit(f"lesson: could not open the step's model: {message}"), io=True)

    def _model_ready(self, step: Step, index: int, loaded: LoadedModel) -> None:
        if index != self.index or self.lesson is None:
            return  # the presenter moved on while it loaded
        if self.window.session.loaded is not loaded:
            self.window.session.set_model(loaded)
        self._arrange(step, index)

    def _arrange(self, step: Step, index: int) -> None:
        """Everything but the model, in the order that keeps each setting valid (size before the mask)."""
        from ..explore.lesson_states import step_head_mask, step_mask

        window, session = self.window, self.window.session
        if step.image is not None:
            window.image_panel.open_sample_or_path(step.image)
        if step.size == "native":
            window.image_panel.reset_size()
        elif isinstance(step.size, tuple):
            try:
                session.set_size(step.size)
            except ValueError as error:  # a size this model cannot take: the banner says so, the rest applies
                session.error.emit(f"lesson step {index + 1}: {error}")
        mask = step_mask(step, session.grid, session.mask)
        if mask is not session.mask:
            session.set_mask(mask)
        if step.heads_off is not None:
            session.set_head_mask(step_head_mask(step, session.head_mask.shape, session.head_mask))
        if step.mode is not None:
            session.set_attention(mode=step.mode)
        session.select(layer=step.layer, head=step.head, query=step.query, heads=step.heads)
        window.image_panel.set_input_mode(step.input_mode)
        window.presentation.arrange()  # the hover readout the step asks for (`Session.hover`)
        if step.view is not None:
            window.show_view(step.view, step.panels)
        if step.target is not None:
            try:
                window.views["Explain"].choose(target=step.target)
            except ValueError as error:  # a label this model does not have: the banner says so, the rest applies
                session.error.emit(f"lesson step {index + 1}: target: {error}")
        if step.expand:
            try:
                window.views["Parameters"].expand(step.expand)
            except ValueError as error:
                session.error.emit(f"lesson step {index + 1}: expand: {error}")
        if step.compare is not None:
            self._with_model(step.compare, lambda loaded: self._compared(index, loaded))
            return
        self.applied.emit(index)

    def _compared(self, index: int, loaded: LoadedModel) -> None:
        if index != self.index:
            return
        self.window.session.set_compared(loaded)
        self.applied.emit(index)
