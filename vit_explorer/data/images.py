"""Reading images with errors that name the file and say what is wrong.

An image is untrusted input: only a regular file of bounded size is opened, its pixel count and
aspect ratio are checked from the header before it is decoded (a decompression bomb or a
1x20000 strip is refused, not decoded), 16- and 32-bit greyscale and float images are scaled to
0..255 instead of clipped, and the EXIF orientation (a phone photo taken upright) is applied.
"""

from __future__ import annotations

import os
import struct
import warnings
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from ..checkpoints.files import open_regular
from ..errors import UserError

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm")
MAX_IMAGE_BYTES = 512 * 2**20
MAX_PIXELS = 2**26  # 67 megapixels (8192 x 8192); Pillow's own bomb warning starts at 89
MAX_ASPECT = 20  # longest side / shortest side; resized to a 224 shortest edge, a 20:1 image is 224 x 4480
_WIDE_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I", "F")  # 16-bit, 32-bit integer and float greyscale


def sample_images() -> list[Path]:
    """The bundled sample images (resources/samples), sorted by name; empty if there are none."""
    from ..paths import SAMPLES

    if not SAMPLES.is_dir():
        return []
    return sorted(p for p in SAMPLES.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS)


class ImageError(UserError, ValueError):
    """An image that cannot be read; the message names the file."""


def open_image(path: str | os.PathLike[str]) -> Image.Image:
    """Open and fully decode an image as RGB, or raise ImageError naming the file and the problem."""
    path = Path(path)
    if not path.exists():
        raise ImageError(f"{path}: no such image file")
    with open_regular(path, MAX_IMAGE_BYTES, "image", ImageError) as f:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", Image.DecompressionBombWarning)
                with Image.open(f) as image:
                    check_size(image.width, image.height, path)
                    image.load()  # decode now, so a truncated file fails here and not later
                    return to_rgb(ImageOps.exif_transpose(image))
        except ImageError:
            raise
        except UnidentifiedImageError:
            raise ImageError(f"{path}: not an image Pillow can read (unknown or corrupt format)") from None
        except (Image.DecompressionBombError, Image.DecompressionBombWarning):
            raise ImageError(f"{path}: declares more pixels than an image may have ({MAX_PIXELS:,}), "
                             "a possible decompression bomb") from None
        except MemoryError:
            raise ImageError(f"{path}: not enough memory to decode this image") from None
        except (OSError, SyntaxError, ValueError, TypeError, KeyError, IndexError, struct.error) as error:
            # Pillow's decoders raise all of these on malformed input
            raise ImageError(f"{path}: corrupt or truncated image ({str(error)[:200]})") from None


def check_size(width: int, height: int, path: Path) -> None:
    """Refuse, before decoding, an image that is empty, too large or too thin."""
    if width < 1 or height < 1:
        raise ImageError(f"{path}: the image is empty ({width}x{height})")
    if width * height > MAX_PIXELS:
        raise ImageError(f"{path}: {width}x{height} is {width * height:,} pixels, more than an image may have "
                         f"({MAX_PIXELS:,}); downscale it")
    if max(width, height) > MAX_ASPECT * min(width, height):
        raise ImageError(f"{path}: {width}x{height} is thinner than {MAX_ASPECT}:1 (its shortest side would be "
                         "resized to the model's input and the other with it); crop it")


def to_rgb(image: Image.Image) -> Image.Image:
    """RGB, with wide greyscale scaled to 0..255 rather than clipped (which makes most of it white).

    16-bit images use their full 0..65535 range; 32-bit integer and float images the narrowest of
    0..1 (floats only), 0..255 and 0..65535 that holds every value, else their own minimum to maximum.
    """
    if image.mode not in _WIDE_MODES:
        return image.convert("RGB")
    values = np.asarray(image, dtype=np.float32)
    values = np.where(np.isfinite(values), values, 0.0)
    if image.mode.startswith("I;16"):
        low, high = 0.0, 65535.0
    else:
        low, high = float(values.min(initial=0.0)), float(values.max(initial=0.0))
        ranges = ([(0.0, 1.0)] if image.mode == "F" else []) + [(0.0, 255.0), (0.0, 65535.0)]
        low, high = next(((a, b) for a, b in ranges if a <= low and high <= b), (low, high))
    scaled = (values - low) * (255.0 / max(high - low, 1e-12))
    grey = Image.fromarray(np.clip(np.rint(scaled), 0, 255).astype(np.uint8))  # (H, W) uint8: mode L
    return grey.convert("RGB")
