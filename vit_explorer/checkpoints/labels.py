"""Class names shipped in resources/ for ImageNet heads (generated once from timm's package data:
the first WordNet lemma of each synset, in timm's class order)."""

from __future__ import annotations

import re
from functools import cache

from ..paths import RESOURCES

IMAGENET_FILES = {1000: "imagenet_classes.txt", 21843: "imagenet21k_classes.txt"}


@cache
def _read(name: str) -> tuple[str, ...]:
    return tuple((RESOURCES / name).read_text(encoding="utf-8").splitlines())


def imagenet_labels(num_classes: int) -> list[str] | None:
    """ImageNet-1k (1000) or ImageNet-21k (21843, Google's release) names, else None."""
    name = IMAGENET_FILES.get(num_classes)
    return None if name is None else list(_read(name))


def generic_label(index: int) -> str:
    """The name of a class the checkpoint does not name."""
    return f"class {index}"


def generic_labels(num_classes: int) -> list[str]:
    return [generic_label(i) for i in range(num_classes)]


IMAGENET_NAMES = {1000: "ImageNet-1k", 21843: "ImageNet-21k"}


def is_placeholder(label: str, index: int) -> bool:
    """Whether a class name only numbers its class: transformers' LABEL_n, class_n / class n, or n."""
    match = re.fullmatch(r"(?:label_|class[_ ]?)?(\d+)", label.strip(), flags=re.IGNORECASE)
    return match is not None and int(match.group(1)) == index


def named_labels(labels: list[str]) -> tuple[list[str], str]:
    """The labels, or ImageNet's names for an ImageNet-sized head whose labels are all placeholders (a
    checkpoint saved without id2label), with a note that says so ("" when the labels are kept)."""
    names = imagenet_labels(len(labels))
    if names is None or not all(is_placeholder(label, i) for i, label in enumerate(labels)):
        return labels, ""
    return names, f"{IMAGENET_NAMES[len(labels)]} names (the checkpoint has none)"
