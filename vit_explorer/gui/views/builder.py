"""Build a model from a preset or from parts, with the parameter count shown before building."""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QWidget,
)

from ...explore.build import build_loaded
from ...models import PRESETS, ConfigError, ViTConfig, preset
from ...models.position import SCHEMES
from ...models.stems import STEMS
from ..session import Session
from .base import Table, View

PE_SCHEMES = [(scheme.label, name) for name, scheme in SCHEMES.items()]
STEM_CHOICES = [(stem.label, name) for name, stem in STEMS.items()]
PREFIXES = [("[CLS]", "cls"), ("[CLS] + distillation", "cls+dist"), ("none", "none")]
# what the classifier (or features-only output) reads
POOLING = {"cls": "output from [CLS]", "gap": "output from the mean of the patches",
           "map": "output from an attention pool of the patches",
           "query": "output from a learned query's attention over the patches",
           "cls+mean": "output from [CLS] beside the mean of the patches"}


DEFAULT_LAYER_SCALE = 1e-5  # CaiT's LayerScale init

class BuilderView(View):
    key = "builder"

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(session, parent)
        self._base: dict[str, Any] = dict(PRESETS["classroom"])  # fields without a control come from here
        self._tokens = ("cls", "cls")  # (prefix tokens, pool) shown: the pool stays while the prefix does
        form = QFormLayout()
        self.preset = QComboBox()
        self.preset.addItem("(from parts)", "")
        for name in PRESETS:
            self.preset.addItem(name, name)
        self.preset.setToolTip("Start from a named preset; changing any part below edits it.")
        self.preset.activated.connect(self._preset_chosen)
        from_current = QPushButton("Current model")
        from_current.setToolTip("Fill the parts in from the model that is open now.")
        from_current.clicked.connect(self.from_current)
        row = QHBoxLayout()
        row.addWidget(self.preset, 1)
        row.addWidget(from_current)
        form.addRow("Preset", row)

        def combo(items: list[tuple[str, str]], tip: str) -> QComboBox:
            box = QComboBox()
            for text, value in items:
                box.addItem(text, value)
            box.setToolTip(tip)
            box.currentIndexChanged.connect(self.update_estimate)
            return box

        def spin(lo: int, hi: int, value: int, tip: str, step: int = 1) -> QSpinBox:
            box = QSpinBox()
            box.setRange(lo, hi)
            box.setSingleStep(step)
            box.setValue(value)
            box.setToolTip(tip)
            box.valueChanged.connect(self.update_estimate)
            return box

        self.stem = combo(STEM_CHOICES, "How the image becomes tokens: one linear map per patch, a small "
                                        "convolutional network, or (hybrid, the ViT paper's R50+ViT) a ResNet "
                                        "whose feature map is the patch grid (stride 4, 8, 16 or 32: its first 1 to "
                                        "4 ResNet-50 stages).")
        self.pos_embed = combo(PE_SCHEMES, "How the model knows where each patch sits.")
        self.prefix = combo(PREFIXES, "Tokens put in front of the patches; without them the head reads the patches "
                                      "(their mean, or an attention pool as SigLIP's).")
        self.depth_box = spin(1, 48, 4, "Number of transformer blocks.")
        self.width_box = spin(8, 2048, 96, "Embedding width D of every token.", 8)
        self.heads = spin(1, 32, 4, "Attention heads per block (D must be divisible by it).")
        self.mlp_ratio = QDoubleSpinBox()
        self.mlp_ratio.setRange(0.25, 8.0)
        self.mlp_ratio.setSingleStep(0.5)
        self.mlp_ratio.setValue(2.0)
        self.mlp_ratio.setToolTip("Hidden width of each MLP as a multiple of D.")
        self.mlp_ratio.valueChanged.connect(self.update_estimate)
        self.patch = spin(1, 64, 4, "Patch size P in pixels (the stem's stride).")
        self.image_h = spin(1, 1024, 32, "Input height in pixels (a multiple of P).")
        self.image_w = spin(1, 1024, 32, "Input width in pixels (a multiple of P).")
        self.classes = spin(0, 10000, 10, "Number of classes of the classifier; 0: features only (no classifier, the "
                                          "model returns its pooled features, as DINOv2 and SigLIP do).")
        self.classes.setSpecialValueText("features only")
        self.layer_scale = QCheckBox(f"LayerScale ({DEFAULT_LAYER_SCALE:g})")
        self.layer_scale.setToolTip("Scale each residual branch by a learned per-channel factor, as CaiT does.")
        self.layer_scale.toggled.connect(self.update_estimate)
        self.class_attn = spin(0, 4, 0, "CaiT class-attention blocks where only [CLS] is updated (needs [CLS]).")
        for label, widget in (("Stem", self.stem), ("Position embedding", self.pos_embed),
                              ("Prefix tokens", self.prefix), ("Depth", self.depth_box), ("Width D", self.width_box),
                              ("Heads", self.heads), ("MLP ratio", self.mlp_ratio), ("Patch size", self.patch),
                              ("Image height", self.image_h), ("Image width", self.image_w),
                              ("Classes", self.classes), ("", self.layer_scale),
                              ("Class-attention layers", self.class_attn)):
            form.addRow(label, widget)
        self.estimate = QLabel("")
        self.estimate.setWordWrap(True)
        form.addRow(self.estimate)
        self.build_button = QPushButton("Build and open")
        self.build_button.setToolTip("Create this model with random weights and make it the current model.")
        self.build_button.clicked.connect(self.build)
        form.addRow(self.build_button)
        self.form = QWidget()
        self.form.setLayout(form)
        scroll = QScrollArea()  # on a small screen the form scrolls instead of pushing the window taller
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.form)
        self.body.addWidget(scroll, 1)
        self.set_config(preset("classroom"))

    def set_config(self, cfg: ViTConfig) -> None:
        """Show a config in the controls."""
        widgets = (self.stem, self.pos_embed, self.prefix, self.depth_box, self.width_box, self.heads, self.mlp_ratio,
                   self.patch, self.image_h, self.image_w, self.classes, self.layer_scale, self.class_attn)
        for w in widgets:
            w.blockSignals(True)
        self.stem.setCurrentIndex(self.stem.findData(cfg.stem))
        self.pos_embed.setCurrentIndex(self.pos_embed.findData(cfg.pos_embed))
        self.prefix.setCurrentIndex(self.prefix.findData(cfg.prefix_tokens))
        self._tokens = (cfg.prefix_tokens, cfg.pool)
        self.depth_box.setValue(cfg.depth)
        self.width_box.setValue(cfg.embed_dim)
        self.heads.setValue(cfg.num_heads)
        self.mlp_ratio.setValue(cfg.mlp_ratio)
        self.patch.setValue(cfg.patch_size)
        self.image_h.setValue(cfg.image_size[0])
        self.image_w.setValue(cfg.image_size[1])
        self.classes.setValue(cfg.num_classes)
        self.layer_scale.setChecked(cfg.layer_scale_init is not None)
        self.layer_scale.setText(f"LayerScale ({cfg.layer_scale_init or DEFAULT_LAYER_SCALE:g})")
        self.class_attn.setValue(cfg.class_attn_depth)
        for w in widgets:
            w.blockSignals(False)
        self.update_estimate()

    def from_current(self) -> None:
        """Start from the open model (its fields that have no control here are kept too)."""
        if self.session.loaded is not None:
            self.preset.setCurrentIndex(0)
            self._base = self.session.loaded.config.to_dict()
            self.set_config(self.session.loaded.config)

    def _preset_chosen(self, index: int) -> None:
        name = self.preset.itemData(index)
        self._base = dict(PRESETS[name]) if name else {}
        if name:
            self.set_config(preset(name))

    def config(self) -> ViTConfig:
        """The config the controls describe; raises ConfigError with what to change."""
        prefix = self.prefix.currentData()
        class_attn = self.class_attn.value()
        shown_prefix, shown_pool = self._tokens  # another prefix: the head reads what it offers
        values: dict[str, Any] = {
            **self._base,
            "stem": self.stem.currentData(),
            "pos_embed": self.pos_embed.currentData(),
            "prefix_tokens": prefix,
            "pool": shown_pool if prefix == shown_prefix else "gap" if prefix == "none" else "cls",
            "depth": self.depth_box.value(),
            "embed_dim": self.width_box.value(),
            "num_heads": self.heads.value(),
            "mlp_ratio": self.mlp_ratio.value(),
            "patch_size": self.patch.value(),
            "image_size": (self.image_h.value(), self.image_w.value()),
            "num_classes": self.classes.value(),
            # the open model's or preset's own init (DeiT III: 1e-6), else CaiT's
            "layer_scale_init": (self._base.get("layer_scale_init") or DEFAULT_LAYER_SCALE)
            if self.layer_scale.isChecked() else None,
            "class_attn_depth": class_attn,
        }
        if class_attn:
            values["pos_embed_prefix"] = False
        return ViTConfig(**values)

    def update_estimate(self, *_: object) -> None:
        try:
            cfg = self.config()
        except ConfigError as error:
            self.session.draft = None
            self.estimate.setStyleSheet("color: #d93025;")
            self.estimate.setText(str(error))
            self.build_button.setEnabled(False)
            return
        self.session.draft = cfg
        self.estimate.setStyleSheet("")
        gh, gw = cfg.grid_size
        self.estimate.setText(f"{cfg.estimate_parameters():,} parameters (stem {cfg.stem_parameters():,}) · "
                              f"{gh}×{gw} patches · "
                              f"{cfg.num_prefix_tokens} prefix tokens · head dim {cfg.head_dim} · {POOLING[cfg.pool]}")
        self.build_button.setEnabled(True)

    def build(self) -> None:
        try:
            cfg = self.config()
        except ConfigError as error:
            self.estimate.setText(str(error))
            return
        self.note.setText("building…")

        def done(loaded: Any) -> None:
            self.note.setText("")
            self.session.set_model(loaded)

        self.session.run("build", lambda: build_loaded(cfg), done, self._failed, io=True)

    def _failed(self, message: str) -> None:
        self.note.setText("")
        self.session.error.emit(f"could not build the model: {message}")

    def table(self) -> Table | None:
        try:
            cfg = self.config()
        except ConfigError:
            return None
        return ["field", "value"], [(k, v) for k, v in cfg.to_dict().items()]
