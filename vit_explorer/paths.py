"""Where bundled resources live (the repository's top-level resources/ folder)."""

from pathlib import Path

RESOURCES = Path(__file__).resolve().parent.parent / "resources"
BUNDLED_MODEL = RESOURCES / "classroom"  # native checkpoint opened when no source is given
BUNDLED = {  # the bundled classroom models by name (resources/README.md says how each was trained)
    "classroom": BUNDLED_MODEL,  # convolutional stem, on the shapes
    "classroom-patchify": RESOURCES / "classroom-patchify",  # ViT's patchify stem, on the shapes
    "where": RESOURCES / "where",  # where a shape is: needs to know the position of each patch
    "where-no-pe": RESOURCES / "where-no-pe",  # the same without position embedding
}
SAMPLES = RESOURCES / "samples"  # sample images shown in the app
LESSONS = RESOURCES / "lessons"  # guided lessons (explore/lessons.py reads them)
