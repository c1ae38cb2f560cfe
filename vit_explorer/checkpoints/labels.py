"""Class names shipped in resources/ for ImageNet heads (generated once from timm's package data:
the first WordNet lemma of each synset, in timm's class order)."""

from __future__ import annotations

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
