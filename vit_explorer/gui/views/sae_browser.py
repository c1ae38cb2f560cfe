"""The Dataset view's "Features (SAE)" tab: open a trained sparse autoencoder (the `sae` command's --out folder),
encode the analysed dataset's tokens with it (in a worker, cancellable), list its features by frequency or by
effect, draw the chosen feature's top-activating patches, its map on the current image and its activation
histogram; a click on a patch lists the features active there; steering ablates or clamps the feature in the
live model (a per-pass hook of the session), so that the Prediction view and the maps follow."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from ...analysis import sae as S
from ...explore import sae as E
from ...explore.forward import ForwardResult, Needs
from ...jobs import Job
from .. import figures

if TYPE_CHECKING:
    from .dataset import DatasetView

ORDERS = ("frequency", "effect")
FIGURES = ("top-activating patches", "map on the current image", "activation histogram")
STEERING = ("off", "ablate", "clamp")  # clamp: to the value of the spin box beside
OWNER = "dataset-sae"  # what the tab asks of the forward pass (the state's tokens)
LISTED = 200  # features listed at most


@dataclass
class Encoded:
    """A dataset's patch tokens encoded by an SAE."""

    z: np.ndarray  # (images * patches, m) codes
    kept: list[int]  # the dataset's images encoded
    frequency: np.ndarray  # (m,) share of tokens where each feature is active


def read_features(path: Path, width: int) -> tuple[np.ndarray | None, dict[int, str]]:
    """The `effect` column (m,) and each feature's best-factor label from the `sae` command's features.csv, where
    it is there and whole (None and {} otherwise: the list is then ordered by frequency only)."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        effect = np.array([float(r["effect"]) for r in rows])
        labels = {int(r["feature"]): f"{r['best_factor']}, AP {float(r['ap']):.2f}" for r in rows
                  if r.get("best_factor") and r.get("ap")}
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError, csv.Error):
        return None, {}
    return (effect, labels) if len(effect) == width and np.isfinite(effect).all() else (None, labels)


class SaeBrowser(QWidget):
    """The tab; `open(folder)` opens an SAE (what the button does after its dialog)."""

    def __init__(self, view: DatasetView) -> None:
        super().__init__()
        self.view, self.session = view, view.session
        self.sae: S.SAE | None = None
        self.metrics: dict[str, Any] = {}
        self.effect: np.ndarray | None = None
        self.labels: dict[int, str] = {}
        self.encoded: Encoded | None = None
        self.clicked: list[tuple[int, float]] = []  # the features active at the clicked patch
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        top = QHBoxLayout()
        self.open_button = QPushButton("Open SAE…")
        self.open_button.setToolTip("A folder written by `vit-explorer sae --out`: sae.safetensors and metrics.json.")
        self.open_button.clicked.connect(self.choose)
        self.order = QComboBox()
        self.order.addItems([f"by {o}" for o in ORDERS])
        self.order.setToolTip("Features most often active first, or those whose ablation moves the prediction most "
                              "(the effect column of features.csv).")
        self.order.currentIndexChanged.connect(self._list)
        self.figure_kind = QComboBox()
        self.figure_kind.addItems(list(FIGURES))
        self.figure_kind.currentIndexChanged.connect(self.draw)
        self.job = view.job  # the view's one controls: the encoding is cancelled by its button
        for widget in (self.open_button, self.order, self.figure_kind):
            top.addWidget(widget)
        top.addStretch(1)
        column.addLayout(top)
        self.note = QLabel("Open a trained SAE (Open SAE…) to browse its features over this dataset.")
        self.note.setWordWrap(True)
        column.addWidget(self.note)
        row = QHBoxLayout()
        side = QVBoxLayout()  # the features, those at the clicked patch, the steering: the figure gets the rest
        side.addWidget(QLabel("feature: active on, effect"))
        self.features = QListWidget()
        self.features.currentRowChanged.connect(self.draw)
        self.features.currentRowChanged.connect(self.steer)
        side.addWidget(self.features, 3)
        self.at_label = QLabel("Click a patch (Image panel, Query): the features active there")
        self.at_label.setWordWrap(True)
        side.addWidget(self.at_label)
        self.at_list = QListWidget()
        self.at_list.itemClicked.connect(lambda item: self.choose_feature(int(item.data(Qt.ItemDataRole.UserRole))))
        side.addWidget(self.at_list, 2)
        side.addWidget(QLabel("Steer the chosen feature:"))
        self.steering = QComboBox()
        self.steering.addItems(list(STEERING))
        self.steering.setToolTip("In the live model, at every token of the SAE's state: the Prediction view and the "
                                 "maps follow.")
        self.steering.currentIndexChanged.connect(self.steer)
        self.value = QDoubleSpinBox()
        self.value.setRange(-1e4, 1e4)
        self.value.setDecimals(2)
        self.value.setToolTip("The code the feature is clamped to at every token (0 ablates it).")
        self.value.valueChanged.connect(self.steer)
        steer_row = QHBoxLayout()
        steer_row.addWidget(self.steering)
        steer_row.addWidget(self.value)
        side.addLayout(steer_row)
        self.steer_note = QLabel("")
        self.steer_note.setWordWrap(True)
        side.addWidget(self.steer_note)
        sides = QWidget()
        sides.setLayout(side)
        side.setContentsMargins(0, 0, 0, 0)
        sides.setFixedWidth(sides.fontMetrics().horizontalAdvance("0") * 26)
        row.addWidget(sides, 0)
        self.plots = pg.GraphicsLayoutWidget()
        row.addWidget(self.plots, 1)
        column.addLayout(row, 1)
        view.listen(self.session.selection_changed, self.show_clicked)
        view.listen(self.session.result_ready, self._result)

    # ------------------------------------------------------------------ opening
    def choose(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "A trained SAE's folder (sae.safetensors, metrics.json)")
        if folder:
            self.open(folder)

    def open(self, folder: str | Path) -> bool:
        """Open the SAE in `folder` over the model on screen and encode the analysed dataset's tokens with it (in a
        worker); False, with the message on the note, for a file that cannot be opened."""
        loaded, analysis = self.session.loaded, self.view.analysis
        if loaded is None or analysis is None:
            self.note.setText("Analyse a dataset first: the SAE's features are read over its images.")
            return False
        try:
            sae, metrics = E.open_sae(folder, loaded)
            if metrics["tokens"] != "patch":
                raise E.SaeFileError(f"{Path(folder) / E.METRICS}: this SAE reads the [CLS]; the browser shows "
                                     "patch-token SAEs (their features have maps)")
        except E.SaeFileError as error:
            self.note.setText(str(error))
            return False
        self.remove_steering()
        self.sae, self.metrics, self.encoded = sae, metrics, None
        self.effect, self.labels = read_features(Path(folder) / "features.csv", sae.width)
        self.features.clear()
        self.plots.ci.clear()
        source, state = analysis.features.source, metrics["state"]
        self.note.setText(f"encoding the tokens of state {state} of {len(source):,} images…")

        def work(job: Job) -> Encoded:
            x3, kept = E.tokens(loaded, source, state, "patch", job=job)  # (images, patches, d)
            z = E.codes(sae, x3.reshape(-1, x3.shape[-1]))
            return Encoded(z, kept, (z > 0).mean(0))

        self.job.start(self.session.model_id, work, self._encoded, lambda message: self.note.setText(
            f"encoding failed: {message}"), on_cancelled=lambda: self.note.setText("encoding cancelled"))
        return True

    def _encoded(self, encoded: Encoded) -> None:
        self.encoded = encoded
        m = self.metrics
        self.note.setText(f"{m['kind']} SAE, k {m['k']}, {self.sae.width if self.sae else 0} features at state "
                          f"{m['state']}: {int((encoded.frequency == 0).sum())} never active over "
                          f"{len(encoded.kept):,} images" + ("" if self.effect is not None else
                                                             "; no features.csv effects, so ordered by frequency"))
        self.session.require(OWNER, Needs(tokens=frozenset({int(m["state"])})))
        self._list()

    # ------------------------------------------------------------------ the list and the figures
    def order_shown(self) -> np.ndarray:
        """The features listed, in order."""
        if self.encoded is None:
            return np.zeros(0, np.int64)
        by = ORDERS[self.order.currentIndex()]
        return E.order(self.encoded.frequency, self.effect, by=by)[:LISTED]

    def _list(self, *_: object) -> None:
        self.features.clear()
        if self.encoded is None:
            return
        for f in self.order_shown():
            effect = f", {self.effect[f]:.3f}" if self.effect is not None else ""
            item = QListWidgetItem(f"{int(f)}: {self.encoded.frequency[f]:.1%}{effect}")
            item.setData(Qt.ItemDataRole.UserRole, int(f))
            if int(f) in self.labels:
                item.setToolTip(self.labels[int(f)])
            self.features.addItem(item)
        self.features.setCurrentRow(0)

    @property
    def feature(self) -> int | None:
        item = self.features.currentItem()
        return None if item is None else int(item.data(Qt.ItemDataRole.UserRole))

    def choose_feature(self, feature: int) -> None:
        for i in range(self.features.count()):
            if int(self.features.item(i).data(Qt.ItemDataRole.UserRole)) == feature:
                self.features.setCurrentRow(i)
                return

    def figure(self) -> Any | None:
        """The figure composition of the chosen feature that the tab draws now (None: nothing to draw)."""
        f, encoded, analysis = self.feature, self.encoded, self.view.analysis
        if f is None or encoded is None or analysis is None or self.sae is None:
            return None
        kind = self.figure_kind.currentIndex()
        if kind == 1:
            return self.current_map(f)
        source, grid = analysis.features.source, analysis.features.grid
        label = {f: self.labels.get(f, "").split(",")[0] or f"on {encoded.frequency[f]:.1%} of patches"}
        shown = E.browser_figures(source, encoded.kept, encoded.z, grid, np.array([f]), label)
        name = f"feature_{f}.png" if kind == 0 else "histograms.png"
        return shown[name][0] if name in shown else None

    def current_map(self, feature: int) -> Any | None:
        """The feature's map on the image on screen, from the session's pass (None until its tokens are there)."""
        codes = self.current_codes()
        result = self.session.result
        if codes is None or result is None:
            return None
        return E.map_figure(f"Feature {feature} on the current image", codes, np.array([feature]),
                            result.display, result.layout.grid)

    def current_codes(self) -> np.ndarray | None:
        """Codes (patches, m) of the image on screen at the SAE's state, from the session's last pass."""
        result, sae = self.session.result, self.sae
        if result is None or sae is None or int(self.metrics["state"]) not in result.tokens:
            return None
        tokens = result.tokens[int(self.metrics["state"])][0, result.layout.num_prefix_tokens:]  # (patches, d)
        return E.codes(sae, tokens.numpy().astype(np.float32))

    def draw(self, *_: object) -> None:
        self.plots.ci.clear()
        figure = self.figure()
        if figure is not None:
            figures.draw(self.plots.ci, figure)

    def _result(self, result: ForwardResult) -> None:
        if self.sae is not None and self.isVisible():
            self.show_clicked()
            if self.figure_kind.currentIndex() == 1:
                self.draw()

    # ------------------------------------------------------------------ a click on a patch
    def show_clicked(self) -> None:
        """List the features active at the query patch of the image on screen."""
        self.at_list.clear()
        self.clicked = []
        query, codes, result = self.session.query, self.current_codes(), self.session.result
        if query is None or codes is None or result is None:
            return
        grid = result.layout.grid
        row, col = query
        self.clicked = E.features_at(codes, 0, row * grid[1] + col, grid)
        self.at_label.setText(f"patch ({row}, {col}): {len(self.clicked)} features active (click one)")
        for f, a in self.clicked:
            item = QListWidgetItem(f"{f}: {a:.3f}")
            item.setData(Qt.ItemDataRole.UserRole, f)
            self.at_list.addItem(item)

    # ------------------------------------------------------------------ steering
    def steer(self, *_: object) -> None:
        """Apply the steering chosen (off, ablate, clamp to the value) to the chosen feature in the live model."""
        how, f, sae = STEERING[self.steering.currentIndex()], self.feature, self.sae
        if how == "off" or f is None or sae is None:
            self.session.set_hooks(())
            self.steer_note.setText("")
            return
        value = 0.0 if how == "ablate" else self.value.value()
        state = int(self.metrics["state"])
        self.session.set_hooks(((S.state_site(state), S.steer(sae, f, value)),))
        self.steer_note.setText(f"feature {f} set to {value:g} at every token of state {state}: see Prediction")

    def remove_steering(self) -> None:
        self.steering.setCurrentIndex(0)
        self.session.set_hooks(())

    def reset(self) -> None:
        """Forget the SAE (a new model: its width and tokens are another's); the session dropped the hooks."""
        self.job.stop()
        self.steering.blockSignals(True)
        self.steering.setCurrentIndex(0)
        self.steering.blockSignals(False)
        self.sae, self.metrics, self.encoded, self.effect, self.labels = None, {}, None, None, {}
        self.features.clear()
        self.at_list.clear()
        self.plots.ci.clear()
        self.steer_note.setText("")
        self.session.release(OWNER)
        self.session.set_hooks(())
