"""Explain: why the model decides. Every chosen relevance method on the current image side by side, each with
its faithfulness numbers and ranked by them ("which map to believe for this image"); a click on a map draws
its perturbation, deletion / insertion or ROAD curves below. A seeded random-attribution row is computed beside
them: a map that does no better than random says so in its title and the heading. "sanity check" under the maps
runs the cascading randomisation (explore.sanity) on a copy of the model, as a job on the view's one controls, and
draws the clicked method's strip of maps with their Spearman correlation and SSIM to the trained map. The maps
come from `explore.relevance`, computed in a worker with progress (cancellable); the image panel's [MASK] patches and
the heads switched off apply. "Rank on
dataset" ranks the chosen methods over the Dataset view's images (`explore.ranking`): a table of each method's mean
AUCs with their 95 % bootstrap intervals and a figure of the score chosen, also a job on the view's one controls."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QComboBox,
    QLabel,
    QMenu,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QWidget,
)

from ...explore import ranking as rk
from ...explore import relevance as rel
from ...explore import sanity
from ...explore.figures import small_multiples_shape
from ...explore.relevance import Explanation
from ...jobs import Job
from .. import figures
from ..session import Session
from .base import Table, View
from .job_controls import JobControls

CURVE_KINDS = ["perturbation curves", "deletion / insertion", "ROAD", "sanity check"]
TARGET_CHOICES = 20  # the most likely classes offered as targets (besides "top class")
MAPS_MIN_PX = 160


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
            action.toggled.connect(self.schedule)
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
        for widget in (self.methods_button, self.target, self.head, self.baseline, self.curve_kind, self.job,
                       self.rank_button, self.rank_score):
            self.controls.addWidget(widget)
        self.ranking_table = QTableWidget()
        self.ranking_table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.ranking_plots = pg.GraphicsLayoutWidget()
        self.plots = pg.GraphicsLayoutWidget()
        self.plots.setMinimumHeight(MAPS_MIN_PX)  # the maps are the view: never squeezed to a strip (a hidden tab too)
        self.curves = pg.GraphicsLayoutWidget()
        self.heading = QLabel("")  # what is explained and how the maps are ranked: one line over the maps
        self.heading.setWordWrap(True)
        self.curves.setToolTip("Positive: the most relevant patches removed first (lower is better); negative: the "
                               "least relevant first (higher is better). Deletion and insertion (Petsiuk et al.): "
                               "patches deleted from the image, or put back into the removed image, most relevant "
                               "first.")
        self.body.addWidget(self.heading)
        self.body.addWidget(self.plots, 3)
        self.body.addWidget(self.curves, 2)
        self.body.addWidget(self.ranking_table, 1)
        self.body.addWidget(self.ranking_plots, 2)
        self._show_ranking()
        self.plots.scene().sigMouseClicked.connect(self._clicked)
        self.job.progressed.connect(self._progressed)
        self.listen(session.result_ready, self.schedule_soon)
        self.listen(session.model_changed, self._model_changed)
        self._model_changed()

    def picture(self) -> QWidget:
        return self.plots

    def bring_up_to_date(self, seconds: float = 120.0) -> None:
        """As every view's, with the time six maps and their curves take on a CPU (a hybrid ResNet stem: a minute)."""
        super().bring_up_to_date(seconds)

    def export_info(self) -> dict[str, str]:
        info = {**super().export_info(), "methods": ", ".join(e.method for e in self._order)}
        if self.explanations:
            info["target"] = self.explanations[0].target.title
            info["baseline"] = self.baseline.currentText()
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
        self.curves.ci.clear()
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
        self.schedule()

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

        baseline_row = [] if any(rel.METHODS[m].baseline for m in methods) else ["random"]

        def work(job: Job) -> list[Explanation]:
            return rel.explain(inputs, [*methods, *baseline_row], target, baseline, job=job)

        request = (tuple(methods), target.index, head, baseline)
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
        self.curves.ci.clear()
        self._drawn = None
        self.heading.setText("")
        if not self.explanations:
            return
        only = [e.method for e in self.explanations] if self.shows("maps") else rel.rollout_and_best(self.explanations)
        figure = rel.ranking_figure(self._ranking(), only=only)  # numbered among all, the random row included
        self.heading_text = figure.heading + self._random_text() + (
            " · click a map for its curves" if self.shows("curves") else "")
        self.heading.setText(self.heading_text)
        figure = replace(figure, heading="")  # said above, on one line: the maps keep the height
        self._order = [e for e in rel.ranked(self.explanations) if e.method in only]
        columns = small_multiples_shape(len(self._order))[1]
        with self.titles_fitting(self.plots, columns, beside=120, most=60):  # one colour bar beside the grid
            self._drawn = figures.MapsPlot(self.plots.ci, figure)
        self._draw_curves()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)  # the maps drawn again when the width of their titles changes
        if self.explanations:
            QTimer.singleShot(0, self, self._fit_height)

    def _draw_curves(self, *_: object) -> None:
        self.curves.ci.clear()
        self.curves.setVisible(self.shows("curves"))
        chosen = [e for e in self.explanations if e.method == self.chosen and e.faithfulness is not None]
        if not chosen:
            return
        name = rel.METHODS[chosen[0].method].short
        kind = CURVE_KINDS[self.curve_kind.currentIndex()]
        self.body.setStretchFactor(self.curves, 3 if kind == "sanity check" else 2)  # a strip of maps: as tall
        # one-line titles: the curves keep the height of a short view
        if kind == "sanity check":
            if chosen[0].sanity is None:
                self.note.setText("Choose 'sanity check' under the maps to randomise a copy of the model.")
                return
            # as many maps a row as their short titles fit beside the colour bar; the heading and every number
            # (the SSIM too) are said in the note
            strip = replace(sanity.strip_figure(chosen[0], compact=True), heading="")
            chars = max(len(title) for title in strip.titles)
            fits = int((self.curves.width() - 120) / (chars * figures.title_char_px()))
            strip = replace(strip, columns=max(1, min(len(strip.maps), fits)))
            self.note.setText(f"{sanity.strip_heading(chosen[0])}: {sanity.numbers_text(chosen[0])}")
            with self.titles_fitting(self.curves, strip.columns or 1, beside=120, most=chars):
                figures.MapsPlot(self.curves.ci, strip)
        elif kind == "perturbation curves":  # one chart at a time: two side by side do not fit a small screen
            figure = replace(rel.perturbation_figure(chosen), title=f"{name}: positive and negative perturbation")
            figures.draw(self.curves.ci, figure)
        elif kind == "ROAD":
            figures.draw(self.curves.ci, replace(rel.road_figure(chosen), title=f"{name}: ROAD, MoRF and LeRF"))
        else:
            figure = replace(rel.deletion_figure(chosen), title=f"{name}: deletion and insertion")
            figures.draw(self.curves.ci, figure)
        QTimer.singleShot(0, self, self._fit_height)  # once the plots' items know their sizes

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
        explanations, (_, index, head, baseline) = self.explanations, self._request
        originals = {e.method: e.relevance for e in explanations}
        target = rel.Target(index, head)

        def work(job: Job) -> dict[str, list[rel.SanityStep]]:
            return sanity.run(rel.prepare(inputs, target, baseline), originals, job=job)

        def done(steps: dict[str, list[rel.SanityStep]]) -> None:
            if self.explanations is not explanations:  # other maps since: these steps are not theirs
                return
            sanity.attach(explanations, steps)
            self.curve_kind.setCurrentIndex(CURVE_KINDS.index("sanity check"))
            self._draw_curves()

        self.note.setText("sanity check: randomising a copy of the model from the head down…")
        self.job.start(inputs.model_id, work, done, self._failed)  # new maps asked for supersede it

    def _fit_height(self) -> None:
        """The curves at least as tall as their titles, axes and legends need (larger text needs more), taken
        from the maps above; where both do not fit (a small screen with large text) the curves give way."""
        if not self.shows("curves") or not self.explanations:
            return
        maps = self.plots.ci.effectiveSizeHint(Qt.SizeHint.MinimumSize).height()
        curves = self.curves.ci.effectiveSizeHint(Qt.SizeHint.MinimumSize).height()
        room = self.plots.height() + (self.curves.height() + self.body.spacing() if self.curves.isVisible() else 0)
        fits = maps + curves + self.body.spacing() <= room
        self.curves.setMinimumHeight(math.ceil(curves) + 2 if fits else 0)
        self.curves.setVisible(fits)
        self.heading.setText(self.heading_text + ("" if fits else " · no room for the curves: enlarge the window"))

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
