"""Where bundled resources live (the repository's top-level resources/ folder)."""

from pathlib import Path

RESOURCES = Path(__file__).resolve().parent.parent / "resources"
BUNDLED_MODEL = RESOURCES / "classroom"  # native checkpoint opened when no source is given
SAMPLES = RESOURCES / "samples"  # sample images shown in the app
