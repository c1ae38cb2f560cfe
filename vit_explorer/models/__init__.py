"""The glass-box ViT family (Qt-free)."""

from .config import ConfigError, TokenLayout, ViTConfig
from .hooks import HookPoint
from .presets import PRESETS, preset
from .vit import CAPTURE_KEYS, VisionTransformer, count_parameters

__all__ = ["CAPTURE_KEYS", "PRESETS", "ConfigError", "HookPoint", "TokenLayout", "ViTConfig", "VisionTransformer",
           "count_parameters", "preset"]
