"""Reading images with errors that name the file and say what is wrong."""

from __future__ import annotations

import os
from pathlib import Path

from PIL import Image, UnidentifiedImageError

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm")


def sample_images() -> list[Path]:
    """The bundled sample images (resources/samples), sorted by name; empty if there are none."""
    from ..paths import SAMPLES

    if not SAMPLES.is_dir():
        return []
    return sorted(p for p in SAMPLES.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS)


class ImageError(ValueError):
    """An image that cannot be read; the message names the file."""


def open_image(path: str | os.PathLike[str]) -> Image.Image:
    """Open and fully decode an image as RGB, or raise ImageError naming the file and the problem."""
    path = Path(path)
    if not path.exists():
        raise ImageError(f"{path}: no such image file")
    if path.is_dir():
        raise ImageError(f"{path}: is a folder, not an image file")
    try:
        with Image.open(path) as image:
            image.load()  # decode now, so a truncated file fails here and not later
            return image.convert("RGB")
    except UnidentifiedImageError:
        raise ImageError(f"{path}: not an image Pillow can read (unknown or corrupt format)") from None
    except (OSError, SyntaxError, ValueError) as error:
        raise ImageError(f"{path}: corrupt or truncated image ({error})") from None
