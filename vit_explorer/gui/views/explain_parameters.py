"""The Explain view's method parameters (explore.relevance.Options, what `vit-explorer explain`'s flags set): a
"Parameters" button whose panel shows only the parameters of the methods chosen, the defaults the methods as
published."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QMenu,
    QSpinBox,
    QToolButton,
    QWidget,
    QWidgetAction,
)

from ...explore import relevance as rel
from ...models import ViTConfig

SETTLE_MS = 400  # a value typed digit by digit, or arrows held down: one recomputation when it rests
LRP = ("attnlrp", "cp-lrp")


def _spin(low: int, high: int, value: int, off: str = "") -> QSpinBox:
    spin = QSpinBox()
    spin.setRange(low, high)
    spin.setValue(value)
    spin.setSpecialValueText(off)  # shown for the lowest value: what 0 means
    return spin


class ExplainParameters(QToolButton):
    """The button and its panel; `options()` is the rel.Options the widgets set, `changed` says when they rest
    after a change."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        defaults = rel.Options()
        self.setText("Parameters")
        self.setToolTip("The chosen methods' parameters (as vit-explorer explain's flags): integrated gradients' "
                        "steps and baseline, Grad-CAM's block, SmoothGrad, occlusion's window and stride, pixel-level "
                        "maps, AttnLRP's gamma. Only those of the chosen methods are shown.")
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.ig_steps = _spin(1, 10_000, defaults.ig_steps)
        self.ig_steps.setToolTip("Integrated gradients: points along the path (--ig-steps).")
        self.ig_baseline = QComboBox()
        self.ig_baseline.addItems(rel.IG_BASELINES)
        self.ig_baseline.setCurrentText(defaults.ig_baseline)
        self.ig_baseline.setToolTip("Integrated gradients: where the path starts (--ig-baseline): a zero image, the "
                                    "image blurred, [MASK] in every patch embedding (per-patch map only) or uniform "
                                    "noise.")
        self.gradcam_block = QComboBox()
        self.gradcam_block.setToolTip("Grad-CAM: the block whose normed input it reads (--gradcam-block).")
        self.smoothgrad = _spin(0, 1000, defaults.smoothgrad, "off")
        self.smoothgrad.setToolTip("SmoothGrad: each gradient method averaged over this many noisy copies of the "
                                   "image (--smoothgrad; off: none).")
        self.sigma = QDoubleSpinBox()
        self.sigma.setRange(0.0, 10.0)
        self.sigma.setDecimals(3)
        self.sigma.setSingleStep(0.05)
        self.sigma.setValue(defaults.smoothgrad_sigma)
        self.sigma.setToolTip("SmoothGrad: the noise's standard deviation, a share of the input's range "
                              "(--smoothgrad-sigma).")
        self.window_px = _spin(0, 4096, 0, "one patch")
        self.window_px.setSuffix(" px")
        self.window_px.setToolTip("Occlusion: the occluded square window in pixels (--occlusion-window; one patch by "
                                  "default).")
        self.stride_px = _spin(0, 4096, 0, "the window")
        self.stride_px.setSuffix(" px")
        self.stride_px.setToolTip("Occlusion: the window's step in pixels (--occlusion-stride; the window by "
                                  "default).")
        self.pixels = QCheckBox()
        self.pixels.setToolTip("The pixel-level map of the methods that have one (integrated gradients, gradient × "
                               "input), drawn large beside the per-patch maps (--pixels).")
        self.gamma = QDoubleSpinBox()
        self.gamma.setRange(0.0, 100.0)
        self.gamma.setDecimals(3)
        self.gamma.setSingleStep(0.05)
        self.gamma.setSpecialValueText("0 (LRP-0)")
        self.gamma.setToolTip("AttnLRP / CP-LRP: the gamma rule's gamma on the attention output and MLP layers "
                              "(0: LRP-0).")
        self.panel = QWidget()
        self.form = QFormLayout(self.panel)
        self.rows = {"ig_steps": ("IG steps", self.ig_steps), "ig_baseline": ("IG baseline", self.ig_baseline),
                     "gradcam_block": ("Grad-CAM block", self.gradcam_block),
                     "smoothgrad": ("SmoothGrad samples", self.smoothgrad), "sigma": ("SmoothGrad σ", self.sigma),
                     "window": ("occlusion window", self.window_px), "stride": ("occlusion stride", self.stride_px),
                     "pixels": ("pixel-level maps", self.pixels), "gamma": ("AttnLRP γ", self.gamma)}
        for label, widget in self.rows.values():
            self.form.addRow(label, widget)
        menu = QMenu(self)
        action = QWidgetAction(menu)
        action.setDefaultWidget(self.panel)
        menu.addAction(action)
        self.setMenu(menu)
        self._settle = QTimer(self)
        self._settle.setSingleShot(True)
        self._settle.setInterval(SETTLE_MS)
        self._settle.timeout.connect(self.changed)
        for spin in (self.ig_steps, self.smoothgrad, self.sigma, self.window_px, self.stride_px, self.gamma):
            spin.valueChanged.connect(self._edited)
        for box in (self.ig_baseline, self.gradcam_block):
            box.currentIndexChanged.connect(self._edited)
        self.pixels.toggled.connect(self._edited)
        self.set_model(None)

    def _edited(self, *_: object) -> None:
        self.sigma.setEnabled(self.smoothgrad.value() > 0)
        self.stride_px.setEnabled(self.window_px.value() > 0)
        self._settle.start()

    def set_model(self, config: ViTConfig | None) -> None:
        """Grad-CAM's blocks are this model's (the last by default)."""
        self.gradcam_block.blockSignals(True)
        self.gradcam_block.clear()
        self.gradcam_block.addItem("the last", None)
        for block in range(config.depth if config is not None else 0):
            self.gradcam_block.addItem(str(block), block)
        self.gradcam_block.blockSignals(False)
        self._edited()
        self._settle.stop()  # a new model recomputes anyway

    def show_for(self, methods: Sequence[str]) -> None:
        """Show the parameters of these methods only (the button itself only when one applies)."""
        records = [rel.METHODS[m] for m in methods]
        shown = {"ig_steps": "integrated-gradients" in methods, "ig_baseline": "integrated-gradients" in methods,
                 "gradcam_block": "gradcam" in methods,
                 "smoothgrad": any(r.gradient and not r.baseline for r in records),
                 "sigma": any(r.gradient and not r.baseline for r in records),
                 "window": "occlusion" in methods, "stride": "occlusion" in methods,
                 "pixels": any(r.pixel_level for r in records), "gamma": any(m in LRP for m in methods)}
        for name, (_, widget) in self.rows.items():
            self.form.setRowVisible(widget, shown[name])
        self.setVisible(any(shown.values()))
        self.panel.adjustSize()

    def options(self) -> rel.Options:
        """The Options these widgets set (the CLI's flags give the same record)."""
        window = self.window_px.value()
        stride = self.stride_px.value()
        return rel.Options(ig_steps=self.ig_steps.value(), ig_baseline=self.ig_baseline.currentText(),
                           gradcam_block=self.gradcam_block.currentData(), smoothgrad=self.smoothgrad.value(),
                           smoothgrad_sigma=self.sigma.value(),
                           occlusion_window=(window, window) if window else None,
                           occlusion_stride=(stride, stride) if window and stride else None,
                           pixels=self.pixels.isChecked(), attnlrp_gamma=self.gamma.value())

    def changed_from_default(self) -> list[tuple[str, str]]:
        """(label, value) of the parameters shown that are set away from their defaults."""
        ours, defaults = self.options(), rel.Options()
        fields = {"ig_steps": "ig_steps", "ig_baseline": "ig_baseline", "gradcam_block": "gradcam_block",
                  "smoothgrad": "smoothgrad", "sigma": "smoothgrad_sigma", "window": "occlusion_window",
                  "stride": "occlusion_stride", "pixels": "pixels", "gamma": "attnlrp_gamma"}
        return [(self.rows[row][0], str(getattr(ours, name))) for row, name in fields.items()
                if getattr(ours, name) != getattr(defaults, name) and self.form.isRowVisible(self.rows[row][1])
                and not (row == "sigma" and not ours.smoothgrad)]
