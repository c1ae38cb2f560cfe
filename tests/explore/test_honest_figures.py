"""Honest figures headless (issue 15): ImageNet names for a 1000-class head saved without labels, said in the
prediction's title, and the report's note on an all-zero table."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from PIL import Image

from vit_explorer import cli, load
from vit_explorer.checkpoints import Preprocess, save_native
from vit_explorer.checkpoints.labels import imagenet_labels
from vit_explorer.explore.figures import ZERO_NOTE
from vit_explorer.explore.forward import Needs
from vit_explorer.explore.prediction import prediction_figure
from vit_explorer.models import VisionTransformer, preset
from vit_explorer.report import forward_for_report


def test_placeholder_labels_of_a_1000_class_hf_head_become_imagenet_names(tmp_path: Path) -> None:
    from transformers import ViTConfig, ViTForImageClassification

    model = ViTForImageClassification(ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                intermediate_size=64, image_size=32, patch_size=8, num_labels=1000))
    assert model.config.id2label[980] == "LABEL_980"  # what transformers writes when nobody names the classes
    model.save_pretrained(tmp_path)
    loaded = load(tmp_path)
    assert loaded.labels == imagenet_labels(1000) and loaded.label(980) != "LABEL_980"
    assert "ImageNet-1k" in loaded.details["labels"]
    result = forward_for_report(loaded, Image.new("RGB", (32, 32), (90, 120, 200)), (32, 32), Needs())
    figure = prediction_figure(result, 5)
    assert "ImageNet-1k names" in figure.title and not any(label.startswith("LABEL_") for label in figure.labels)


def test_report_notes_an_all_zero_relative_bias(tmp_path: Path) -> None:
    model = VisionTransformer(preset("classroom-tiny", pos_embed="rel_bias")).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "relative_position_bias_table" in name:
                parameter.zero_()  # as BEiT initialises them
    folder = save_native(tmp_path / "beit", model, [f"c{i}" for i in range(model.config.num_classes)],
                         Preprocess(model.config.image_size))
    assert cli.main(["inspect", str(folder), "--out", str(tmp_path / "report")]) == 0
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["figure_notes"]["relative_position_bias.png"] == ZERO_NOTE
    assert (tmp_path / "report" / "relative_position_bias.png").is_file()
