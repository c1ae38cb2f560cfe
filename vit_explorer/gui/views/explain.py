"""Explain: why the model decides. Every chosen relevance method on the current image side by side, each with
its faithfulness numbers and ranked by them ("which map to believe for this image"); a click on a map draws
its perturbation, deletion / insertion or ROAD curves beside it. A seeded random-attribution row is computed beside
them: a map that does no better than random says so in its title and the heading. "sanity check" under the maps
runs the cascading randomisation (explore.sanity) on a copy of the model, as a job on the view's one controls, and
draws the clicked method's strip of maps with their Spearman correlation and SSIM to the trained map. The maps
come from `explore.relevance`, computed in a worker with progress (cancellable); the image panel's [MASK] patches and
the heads switched off apply. "Rank on
dataset" ranks the chosen methods over the Dataset view's images (`explore.ranking`): a table of each method's mean
AUCs with their 95 % bootstrap intervals and a figure of the score chosen, also a job on the view's one controls.

The chosen map (the best-ranked until a map is clicked) is drawn large, at least LARGEST_SHARE of the screen's height
(its raw values; the pixel-level map where one was asked for), with its curves beside it (under it on a narrow
screen); the ranked maps follow, as many a row as keep each readable, in a pane that scrolls vertically only. A
lesson's step that shows the maps alone draws them in the whole pane, as before. "Parameters" sets the chosen
methods' parameters (explain_parameters: relevance.Options, as the CLI's flags do)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QBoxLayout,
    QComboBox,
    QFrame,
    QLabel,
    QMenu,
    QPushButton,
    QScrollArea,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from ...explore import ranking as rk
from ...explore import relevance as rel
from ...explore import sanity
from ...explore.figures import small_multiples_shape
from ...explore.relevance import Explanation
from ...jobs import Job
from .. import figures
from ..measure import LARGEST_SHARE, SMALLEST_PX
from ..session import Session
from .base import Table, View, title_chars
from .explain_parameters import ExplainParameters
from .job_controls import JobControls

CURVE_KINDS = ["perturbation curves", "deletion / insertion", "ROAD", "sanity check"]
TARGET_CHOICES = 20  # the most likely classes offered as targets (besides "top class")
MAPS_MIN_PX = 160
GRID_CELL_PX = 180  # the ranked maps' column at least this wide (a map of ~160 px under its title)
TITLE_PAD_PX = 12  # a title's label beyond its text's width
MOST_TITLE_CHARS = 60  # the ranked maps' titles wrap at no more characters
BAR_PX = 120  # a colour bar and its label beside a grid of maps
CURVES_BESIDE_PX = 320  # the curves beside the chosen map when this much width is left to them, else under it
TABLE_PX, RANKING_PX = 160, 240  # the dataset ranking's table and figure


class ExplainView(View):
    key = "explain"

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(session, parent)
        self.explanations: list[Explanation] = []
        self.random_row: Explanation | None = None  # the random-attribution baseline of the same image and target
        self._asked: tuple[str, ...] = ()  # the methods of the maps computed last
        self.chosen: str | None = None  # the method whose curves are drawn
        self._drawn: figures.MapsPlot | None = None
        self._request: tuple[object, ...] = ()  # the methods, target, head and baseline of the maps computed last
        self.heading_text = ""  # over the maps: what is explained, how the maps are ranked
        self._order: list[Explanation] = []
        self.ranking: rk.Ranking | None = None  # the chosen methods ranked over the Dataset view's images
        self.methods_button = QToolButton()
        self.methods_button.setText("Methods")
        self.methods_button.setToolTip("The relevance methods to compute and compare (a method the model does not "
                                       "support is greyed out, its reason in the tooltip).")
        self.methods_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.methods_menu = QMenu(self.methods_button)
        self.method_actions = {}
        for name in rel.METHODS:
            action = self.methods_menu.addAction(rel.METHODS[name].label)
            action.setCheckable(True)
            action.setChecked(rel.METHODS[name].default)
            action.toggled.connect(self._methods_changed)
            self.method_actions[name] = action
        self.methods_button.setMenu(self.methods_menu)
        self.target = QComboBox()
        self.target.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.target.setMinimumContentsLength(16)  # "12: label (34.5%)" readable
        self.target.setToolTip("The class to explain (the most likely ones of the current prediction); a model "
                               "without a classifier explains the similarity of its embedding to the unmasked image.")
        self.target.activated.connect(self.schedule)
        self.head = QComboBox()
        self.head.addItems(rel.HEADS)
        self.head.setToolTip("DeiT distilled: explain the average of both heads, the class head or the "
                             "distillation head.")
        self.head.activated.connect(self.schedule)
        self.baseline = QComboBox()
        self.baseline.addItems(rel.BASELINES)
        self.baseline.setToolTip("What a removed patch becomes when faithfulness is measured: 0 in the normalised "
                                 "input, the [MASK] token, or a blur of the image.")
        self.baseline.activated.connect(self.schedule)
        self.curve_kind = QComboBox()
        self.curve_kind.addItems(CURVE_KINDS)
        self.curve_kind.setToolTip("The curves drawn under the maps for the map clicked: Chefer et al.'s positive "
                                   "and negative perturbation, Petsiuk et al.'s deletion and insertion, ROAD's "
                                   "most / least relevant first with noisy linear imputation (Rong et al.), or the "
                                   "sanity check: cascading randomisation (Adebayo et al. 2018), every map again "
                                   "with the model's parameters drawn anew from the head down, block by block, on a "
                                   "copy of the model, the clicked method's strip of maps with their Spearman "
                                   "correlation and SSIM to the trained map (choosing it runs it).")
        self.curve_kind.activated.connect(self._curve_kind_chosen)
        self.job = JobControls(self, "explain", on_cancelled=self._cancelled, bar_width=220)
        self.job.button.setToolTip("Stop computing the maps.")
        self.progress, self.cancel_button = self.job.bar, self.job.button
        self.rank_button = QPushButton("Rank on dataset")  # run on the view's one controls (its Cancel stops it)
        self.rank_button.clicked.connect(self.rank_dataset)
        self.rank_button.setToolTip("Rank the chosen methods over the Dataset view's images: each one's mean "
                                    "AUCs with 95 % bootstrap intervals (and, on shapes / where, the pointing "
                                    "game and IoU).")
        self.rank_score = QComboBox()
        self.rank_score.setToolTip("The score the dataset ranking's figure draws.")
        self.rank_score.activated.connect(self._draw_ranking)
        self.parameters = ExplainParameters()
        self.parameters.changed.connect(self._parameters_changed)
        for widget in (self.methods_button, self.parameters, self.target, self.head, self.baseline, self.curve_kind,
                       self.job, self.rank_button, self.rank_score):
            self.controls.addWidget(widget)
        self.ranking_table = QTableWidget()
        self.ranking_table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.ranking_table.setMinimumHeight(TABLE_PX)
        self.ranking_plots = pg.GraphicsLayoutWidget()
        self.ranking_plots.setMinimumHeight(RANKING_PX)
        self.plots = pg.GraphicsLayoutWidget()  # the ranked maps
        self.plots.setMinimumHeight(MAPS_MIN_PX)  # the maps are the view: never squeezed to a strip (a hidden tab too)
        self.detail = pg.GraphicsLayoutWidget()  # the chosen map, large
        self._detail: figures.MapsPlot | None = None
        self._detail_extra = (150, 90)  # the detail's width and height beyond its data area (measured once drawn)
        self.curves = pg.GraphicsLayoutWidget()
        self.heading = QLabel("")  # what is explained and how the maps are ranked: one line over the maps
        self.heading.setWordWrap(True)
        self.curves.setToolTip("Positive: the most relevant patches removed first (lower is better); negative: the "
                               "least relevant first (higher is better). Deletion and insertion (Petsiuk et al.): "
                               "patches deleted from the image, or put back into the removed image, most relevant "
                               "first.")
        self.page = QWidget()  # what scrolls: the chosen map and its curves, the ranked maps, the dataset ranking
        page = QVBoxLayout(self.page)
        page.setContentsMargins(0, 0, 0, 0)
        self.detail_row = QBoxLayout(QBoxLayout.Direction.LeftToRight)
        self.detail_row.addWidget(self.detail, 0, Qt.AlignmentFlag.AlignTop)
        self.detail_row.addWidget(self.curves, 1, Qt.AlignmentFlag.AlignTop)
        page.addLayout(self.detail_row)
        page.addWidget(self.plots, 1)
        page.addWidget(self.ranking_table)
        page.addWidget(self.ranking_plots)
        page.addStretch(0)  # sized figures (not a lesson's maps, which fill the pane): the room left goes under them
        self.maps_area = QScrollArea()  # vertically only: every figure keeps the pane's width
        self.maps_area.setFrameShape(QFrame.Shape.NoFrame)
        self.maps_area.setWidgetResizable(True)
        self.maps_area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.maps_area.setWidget(self.page)
        self.body.addWidget(self.heading)
        self.body.addWidget(self.maps_area, 1)
        self._fitting = False  # a _fit pass is scheduled
        self._show_ranking()
        self.plots.scene().sigMouseClicked.connect(self._clicked)
        self.job.progressed.connect(self._progressed)
        self.listen(session.result_ready, self.schedule_soon)
        self.listen(session.model_changed, self._model_changed)
        self._model_changed()

    def picture(self) -> QWidget:
        return self.page

    def bring_up_to_date(self, seconds: float = 120.0) -> None:
        """As every view's, with the time six maps and their curves take on a CPU (a hybrid ResNet stem: a minute)."""
        super().bring_up_to_date(seconds)

    def export_info(self) -> dict[str, str]:
        info = {**super().export_info(), "methods": ", ".join(e.method for e in self._order)}
        if self.explanations:
            info["target"] = self.explanations[0].target.title
            info["baseline"] = self.baseline.currentText()
        changed = self.parameters.changed_from_default()
        if changed:
            info["parameters"] = ", ".join(f"{label}: {value}" for label, value in changed)
        info["masked patches"] = str(int(self.session.mask.sum()))
        info["heads off"] = str(int((self.session.head_mask < 1).sum()))
        return info

    # ------------------------------------------------------------------ inputs
    def _model_changed(self) -> None:
        loaded = self.session.loaded
        self.explanations, self._order, self.chosen, self._request = [], [], None, ()
        self.random_row = None
        self.job.stop()
        self.ranking = None
        self._show_ranking()
        self.plots.ci.clear()
        self.detail.ci.clear()
        self._detail = None
        self.curves.ci.clear()
        self.parameters.set_model(loaded.config if loaded is not None else None)
        if loaded is None:
            return
        for name, action in self.method_actions.items():
            reason = rel.METHODS[name].reason(loaded.config)
            action.setEnabled(reason is None)
            method = rel.METHODS[name]
            action.setToolTip(reason or f"{method.needs} ({method.reference})")
        self.methods_menu.setToolTipsVisible(True)
        self.head.setVisible(bool(loaded.config.distilled and loaded.config.dist_head))
        self._fill_targets()
        self._methods_changed()

    def _fill_targets(self) -> None:
        """'top class' and the most likely classes of the current prediction, keeping the chosen one."""
        result, loaded = self.session.result, self.session.loaded
        kept = self.target.currentData()
        self.target.blockSignals(True)
        self.target.clear()
        if loaded is not None and not rel.has_classifier(loaded.config):
            self.target.addItem("similarity to the unmasked image", None)
        else:
            self.target.addItem("top class", None)
            if result is not None and result.inputs.loaded is loaded:
                for i in np.argsort(-result.probs)[:TARGET_CHOICES]:
                    self.target.addItem(f"{int(i)}: {loaded.label(int(i))} ({result.probs[i]:.1%})", int(i))
            if kept is not None and self.target.findData(kept) < 0:
                self.target.addItem(f"{kept}: {loaded.label(kept) if loaded else kept}", kept)
        index = self.target.findData(kept)
        self.target.setCurrentIndex(max(index, 0))
        self.target.blockSignals(False)

    def methods(self) -> list[str]:
        return [name for name, action in self.method_actions.items() if action.isChecked() and action.isEnabled()]

    def _methods_changed(self, *_: object) -> None:
        self.parameters.show_for(self.methods())
        self._parameters_changed()

    def _parameters_changed(self) -> None:
        changed = self.parameters.changed_from_default()
        self.parameters.setText(f"Parameters ({len(changed)} set)" if changed else "Parameters")
        self.schedule()

    def choose(self, *, methods: list[str] | None = None, target: int | str | None = None,
               baseline: str | None = None, top_class: bool = False) -> None:
        """Set the controls (tests, lessons) and recompute; `target` by index or label (ValueError for a label this
        model does not have), or the top class (`top_class`)."""
        loaded = self.session.loaded
        if isinstance(target, str):
            if loaded is None or target not in loaded.labels:
                raise ValueError(f"{target!r} is not one of this model's labels")
            target = loaded.labels.index(target)
        if top_class:
            self.target.setCurrentIndex(0)
        if methods is not None:
            for name, action in self.method_actions.items():
                action.blockSignals(True)
                action.setChecked(name in methods)
                action.blockSignals(False)
            self.parameters.show_for(self.methods())
        if target is not None:
            if self.target.findData(target) < 0:
                self.target.addItem(f"{target}: {loaded.label(target) if loaded else target}", target)
            self.target.setCurrentIndex(self.target.findData(target))
        if baseline is not None:
            self.baseline.setCurrentText(baseline)
        self.schedule()

    # ------------------------------------------------------------------ work
    def refresh(self, *_: object) -> None:
        inputs = self.session.inputs()
        methods = self.methods()
        if inputs is None or self.session.result is None:
            self.note.setText("No model or image yet.")
            return
        if not methods:
            self.note.setText("Choose one or more methods (Methods menu).")
            return
        self._fill_targets()
        loaded = inputs.loaded
        head = self.head.currentText() if not self.head.isHidden() else "average"
        target = rel.Target(self.target.currentData(), head)
        baseline = self.baseline.currentText()
        options = self.parameters.options()

        baseline_row = [] if any(rel.METHODS[m].baseline for m in methods) else ["random"]

        def work(job: Job) -> list[Explanation]:
            return rel.explain(inputs, [*methods, *baseline_row], target, baseline, job=job, options=options)

        request = (tuple(methods), target.index, head, baseline, options)
        self._asked = tuple(methods)  # the maps shown; the random row computed beside them is not one
        if request != self._request:  # other maps asked for: the old ones must not pass for them while these compute
            self._request = request
            self.explanations, self._order, self.random_row = [], [], None
            self.restyle()
        self.note.setText(f"computing {len(methods)} maps on {loaded.source or 'the model'}…")
        self.job.start(inputs.model_id, work, self._done, self._failed)

    def cancel(self) -> None:
        self.job.cancel()

    def rank_dataset(self) -> None:
        """Rank the chosen methods over the images of the Dataset view's analysis."""
        loaded, dataset = self.session.loaded, self.session.dataset
        methods = self.methods()
        if loaded is None or dataset is None:
            self.note.setText("Analyse a dataset in the Dataset view first: the ranking runs over its images.")
            return
        if not methods:
            self.note.setText("Choose one or more methods (Methods menu).")
            return
        source = dataset.analysis.features.source
        baseline = self.baseline.currentText()

        def work(job: Job) -> rk.Ranking:
            return rk.rank_dataset(loaded, source, methods, baseline=baseline, job=job)

        self.note.setText(f"ranking {len(methods)} methods over {len(source):,} images…")
        self.job.start(self.session.model_id, work, self._ranked, self._failed)  # new maps asked for supersede it

    def _ranked(self, result: rk.Ranking) -> None:
        self.ranking = result
        self.note.setText(f"{result.images:,} images; target: {result.targets}"
                          + (f"; {len(result.skipped)} skipped" if result.skipped else ""))
        kept = self.rank_score.currentText()
        self.rank_score.clear()
        self.rank_score.addItems(result.columns)
        self.rank_score.setCurrentText(kept if kept in result.columns else result.columns[0])
        header, rows = rk.csv_rows(result)
        self.ranking_table.setColumnCount(len(header))
        self.ranking_table.setRowCount(len(rows))
        self.ranking_table.setHorizontalHeaderLabels(header)
        for r, row in enumerate(rows):
            for c, value in enumerate(row):
                text = f"{value:.3f}" if isinstance(value, float) else str(value)
                self.ranking_table.setItem(r, c, QTableWidgetItem(text))
        self._show_ranking()
        self._draw_ranking()

    def _show_ranking(self) -> None:
        for widget in (self.ranking_table, self.ranking_plots, self.rank_score):
            widget.setVisible(self.ranking is not None)

    def _draw_ranking(self, *_: object) -> None:
        self.ranking_plots.ci.clear()
        if self.ranking is not None:
            figures.draw(self.ranking_plots.ci, rk.figures(self.ranking)[self.rank_score.currentText()])

    def _cancelled(self) -> None:
        self.note.setText("cancelled: change a setting or the image to compute again")

    def _progressed(self, share: float, what: str) -> None:
        self.note.setText(f"computing: {what}…")

    def _failed(self, message: str) -> None:
        self.note.setText(f"could not explain: {message}")

    def _done(self, explanations: list[Explanation]) -> None:
        asked = self._asked
        self.random_row = next((e for e in explanations if e.method not in asked), None)
        explanations = [e for e in explanations if e.method in asked or not asked]
        self.explanations = explanations
        notes = sorted({f"{e.method}: {e.note}" for e in explanations if e.note})
        self.note.setText(" · ".join(notes))
        if self.chosen not in [e.method for e in explanations]:
            self.chosen = rel.ranked(explanations)[0].method if explanations else None
        self.restyle()

    # ------------------------------------------------------------------ drawing
    def restyle(self) -> None:
        self.plots.ci.clear()
        self.detail.ci.clear()
        self.curves.ci.clear()
        self._drawn = self._detail = None
        self.heading.setText("")
        if not self.explanations:
            self._fit_soon()
            return
        only = [e.method for e in self.explanations] if self.shows("maps") else rel.rollout_and_best(self.explanations)
        figure = rel.ranking_figure(self._ranking(), only=only)  # numbered among all, the random row included
        self.heading_text = figure.heading + self._random_text() + (
            " · click a map for its curves" if self.shows("curves") else "")
        self.heading.setText(self.heading_text)
        self._order = [e for e in rel.ranked(self.explanations) if e.method in only]
        columns, chars = self._columns(figure.titles)
        figure = replace(figure, heading="", columns=columns)  # the heading is said above, on one line
        with self.titles_fitting(self.plots, columns, beside=BAR_PX, most=chars):  # one colour bar beside them
            self._drawn = figures.MapsPlot(self.plots.ci, figure)
        self._draw_curves()

    def _columns(self, titles: Sequence[str]) -> tuple[int, int]:
        """The ranked maps a row and the characters their titles wrap at: in a lesson's step (no curves) as square
        as possible in the whole pane; else as many as leave each column GRID_CELL_PX and room for its title's
        lines wrapped as they need (large text: fewer columns, never a title wider than its column)."""
        width = self.maps_area.viewport().width() - BAR_PX
        if not self.shows("curves"):
            columns = small_multiples_shape(len(titles))[1]
            return columns, title_chars(width, columns, MOST_TITLE_CHARS)
        for columns in range(min(len(titles), width // GRID_CELL_PX), 1, -1):
            most = title_chars(width, columns, MOST_TITLE_CHARS)
            chars = figures.fitting_chars(titles, width / columns - TITLE_PAD_PX, most)
            if chars is not None:
                return columns, chars
        return 1, title_chars(width, 1, MOST_TITLE_CHARS)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)  # the maps drawn again when the width of their titles changes
        if self._drawn is not None and self._columns(self._drawn.figure.titles)[0] != self._drawn.figure.shape()[1]:
            self.restyle()
        elif self.explanations:
            self._fit_soon()

    def _kind(self) -> str:
        return CURVE_KINDS[self.curve_kind.currentIndex()]

    def _draw_detail(self, chosen: Explanation | None) -> None:
        """The chosen map large, its raw values (the pixel-level map where it was computed)."""
        self.detail.ci.clear()
        self._detail = None
        if chosen is None or not self.shows("curves") or self._kind() == "sanity check":
            return
        figure = rel.pixel_figure(chosen) if chosen.pixels is not None else rel.map_figure(chosen)
        chars = max(14, int(self._big() / figures.title_char_px()))  # never wider than the map
        with figures.title_width(chars):
            self._detail = figures.MapsPlot(self.detail.ci, figure)

    def _draw_curves(self, *_: object) -> None:
        self.curves.ci.clear()
        self.curves.setVisible(self.shows("curves"))
        chosen = [e for e in self.explanations if e.method == self.chosen and e.faithfulness is not None]
        self._draw_detail(chosen[0] if chosen else None)
        self._fit_soon()
        if not chosen:
            return
        name = rel.METHODS[chosen[0].method].short
        kind = self._kind()
        if kind == "sanity check":
            if chosen[0].sanity is None:
                self.note.setText("Choose 'sanity check' under the maps to randomise a copy of the model.")
                return
            # the strip takes the detail's row: as many maps a row as keep each GRID_CELL_PX wide and fit their
            # short titles; the heading and every number (the SSIM too) are said in the note
            strip = replace(sanity.strip_figure(chosen[0], compact=True), heading="")
            chars = max(len(title) for title in strip.titles)
            cell = max(GRID_CELL_PX, chars * figures.title_char_px())
            fits = int((self.maps_area.viewport().width() - BAR_PX) / cell)
            strip = replace(strip, columns=max(1, min(len(strip.maps), fits)))
            self.note.setText(f"{sanity.strip_heading(chosen[0])}: {sanity.numbers_text(chosen[0])}")
            with self.titles_fitting(self.curves, strip.columns or 1, beside=BAR_PX, most=chars):
                figures.MapsPlot(self.curves.ci, strip)
        else:  # one chart at a time, beside the map it is of (that names the method): narrow, its title short
            figure, title = {"perturbation curves": (rel.perturbation_figure, "perturbation"),
                             "ROAD": (rel.road_figure, "ROAD"),
                             "deletion / insertion": (rel.deletion_figure, "deletion, insertion")}[kind]
            figures.draw(self.curves.ci, replace(figure(chosen), title=f"{name}: {title}"))

    def _ranking(self) -> list[Explanation]:
        return [*self.explanations, *([self.random_row] if self.random_row is not None else [])]

    def _random_text(self) -> str:
        """The random row's gap, and the methods that do no better than it."""
        row = self.random_row
        if row is None or row.faithfulness is None:
            return ""
        ranking = self._ranking()
        worse = [rel.METHODS[e.method].short for e in self.explanations if rel.no_better_than_random(e, ranking)]
        return f" · random attribution {row.faithfulness.gap:+.3f}" + (
            f": {', '.join(worse)} no better" if worse else "")

    # ------------------------------------------------------------------ the sanity check
    def _curve_kind_chosen(self, *_: object) -> None:
        """The user's choice of what is drawn under the maps: the sanity check runs when chosen and not yet run."""
        if CURVE_KINDS[self.curve_kind.currentIndex()] == "sanity check" and \
                any(e.sanity is None for e in self.explanations):
            self.run_sanity()
        else:
            self._draw_curves()

    def run_sanity(self) -> None:
        """The cascading randomisation of the maps shown, in a job (progress, cancel)."""
        inputs = self.session.inputs()
        if inputs is None or not self.explanations:
            self.note.setText("Compute the maps first: the sanity check compares them with the randomised model's.")
            return
        explanations, (_, index, head, baseline, options) = self.explanations, self._request
        originals = {e.method: e.relevance for e in explanations}
        target = rel.Target(index, head)

        def work(job: Job) -> dict[str, list[rel.SanityStep]]:
            return sanity.run(rel.prepare(inputs, target, baseline, options), originals, job=job)

        def done(steps: dict[str, list[rel.SanityStep]]) -> None:
            if self.explanations is not explanations:  # other maps since: these steps are not theirs
                return
            sanity.attach(explanations, steps)
            self.curve_kind.setCurrentIndex(CURVE_KINDS.index("sanity check"))
            self._draw_curves()

        self.note.setText("sanity check: randomising a copy of the model from the head down…")
        self.job.start(inputs.model_id, work, done, self._failed)  # new maps asked for supersede it

    # ------------------------------------------------------------------ sizes
    def _big(self) -> int:
        """The chosen map's side: LARGEST_SHARE of the screen's height (what a lesson's figure gets), or what the
        pane's width leaves beside its axes and colour bar (large text in a narrow pane: nothing cut on the right)."""
        screen = self.screen()
        height = screen.geometry().height() if screen is not None else 800
        room = self.maps_area.viewport().width() - self._detail_extra[0]
        return max(SMALLEST_PX, min(math.ceil(LARGEST_SHARE * height), room))

    def _fit_soon(self) -> None:
        """Size the figures once their items are laid out (a few passes: each measures what the last one gave)."""
        if not self._fitting:
            self._fitting = True
            QTimer.singleShot(0, self, lambda: self._fit(4))

    def _fit(self, passes: int) -> None:
        """The chosen map's data area _big() square, its curves as tall beside it (or under it), the ranked maps'
        and the sanity strip's data areas square in their columns; in a lesson's step the maps fill the pane."""
        self._fitting = False
        normal = self.shows("curves")
        page = self.page.layout()
        page.setStretch(page.count() - 1, 1 if normal else 0)
        self.maps_area.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOn if normal else
                                               Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        big, width = self._big(), self.maps_area.viewport().width()
        moved = False
        self.detail.setVisible(self._detail is not None)
        if self._detail is not None:
            box, room = self._box(self._detail.plots[0]), self.detail.ci.geometry()
            if box is not None and box[0] <= room.width() and box[1] <= room.height():  # laid out: what is not data
                # what is not data: as the items are laid out (wider than the widget when its labels need more)
                laid = max(self.detail.width(), math.ceil(room.width()))
                wide = laid - box[0] if box[0] < big else max(self._detail_extra[0], laid - box[0])  # never narrower
                self._detail_extra = (wide, self.detail.height() - box[1])
            moved |= self._set_size(self.detail, big + self._detail_extra[0], big + self._detail_extra[1])
        room = width - self.detail.width() - self.detail_row.spacing()
        need = self.curves.ci.effectiveSizeHint(Qt.SizeHint.MinimumSize).width()  # its titles, axes and legend
        beside = self._detail is not None and room >= max(CURVES_BESIDE_PX, need)
        self.detail_row.setDirection(QBoxLayout.Direction.LeftToRight if beside else
                                     QBoxLayout.Direction.TopToBottom)
        if self._kind() == "sanity check":
            plots = [p for p in self.curves.ci.items if isinstance(p, pg.PlotItem)]
            moved |= self._square(self.curves, plots, len(plots))
        else:
            moved |= self._set_size(self.curves, None, big + self._detail_extra[1])
        if normal and self._drawn is not None:
            moved |= self._square(self.plots, self._drawn.plots, self._drawn.figure.shape()[1])
        else:
            self.plots.setMinimumHeight(MAPS_MIN_PX)
            self.plots.setMaximumHeight(16777215)
        if moved and passes > 1:
            self._fitting = True
            QTimer.singleShot(0, self, lambda: self._fit(passes - 1))

    @staticmethod
    def _box(plot: pg.PlotItem) -> tuple[int, int] | None:
        """The (width, height) of a plot's data area in the widget's pixels (None before it is laid out)."""
        rect = plot.getViewBox().sceneBoundingRect()
        return (round(rect.width()), round(rect.height())) if rect.width() > 1 and rect.height() > 1 else None

    @staticmethod
    def _set_size(widget: QWidget, width: int | None, height: int) -> bool:
        """A fixed height (and width); whether it changed."""
        if widget.minimumHeight() == widget.maximumHeight() == height and \
                (width is None or widget.minimumWidth() == widget.maximumWidth() == width):
            return False
        widget.setFixedHeight(height)
        if width is not None:
            widget.setFixedWidth(width)
        return True

    def _square(self, widget: pg.GraphicsLayoutWidget, plots: list[pg.PlotItem], columns: int) -> bool:
        """The widget's height such that its maps' data areas are square (at least SMALLEST_PX), the maps in rows
        of `columns`: measured where they are laid out, else a first guess from the column's width."""
        if not plots:
            return False
        rows = -(-len(plots) // max(columns, 1))
        box, room = self._box(plots[0]), widget.ci.geometry()
        if box is not None and room.height() <= widget.height() + 1:
            height = widget.height() + rows * (max(box[0], SMALLEST_PX) - box[1])
        else:
            height = rows * ((widget.width() - BAR_PX) // max(columns, 1) + 60)
        return self._set_size(widget, None, max(height, MAPS_MIN_PX))

    def _clicked(self, event: object) -> None:
        """A click on a map draws that method's curves."""
        if self._drawn is None:
            return
        pos = event.scenePos()
        for explanation, plot in zip(self._order, self._drawn.plots, strict=False):
            if plot.sceneBoundingRect().contains(pos):
                self.chosen = explanation.method
                self._draw_curves()
                return

    def table(self) -> Table | None:
        if not self.explanations:
            return None
        rows = rel.csv_rows(self.explanations)
        header = list(rows[0])
        return header, [[row[key] for key in header] for row in rows]
