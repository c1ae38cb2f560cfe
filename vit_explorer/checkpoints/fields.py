"""Typed, bounded reading of the JSON objects in checkpoint files (the validation layer's primitives).

The same rules hold in every file (HF config.json and preprocessor_config.json, timm config.json,
vit_explorer.json):
- a bool is JSON `true`/`false`; not "false", not 0 or 1;
- an int is a JSON number written without a fraction or exponent: 12, not 12.0 or 1.2e1 (our
  writers, transformers and timm all write ints that way, so a float where an int belongs means an
  edited file, and truncating it would load another model);
- a float is any finite JSON number (ints included); NaN and Infinity are refused;
- every number has a range, every string and list a bounded length.
Each error is a CheckpointError naming the file, the field (dotted for nested objects) and what
is allowed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from .errors import CheckpointError

MAX_INT = 2**31 - 1  # no dimension of a model or an image comes near it
MAX_STR = 1000  # characters in a name or label
_MISSING: Any = object()


def describe(value: Any) -> str:
    """A short, JSON-flavoured description of a value for error messages: '"false" (a string)'."""
    if isinstance(value, bool):
        return f"{str(value).lower()} (a bool)"
    if value is None:
        return "null"
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer():
            return f"{value!r} (a float: write an integer without a decimal point)"
        return f"{value!r} (a float)"
    if isinstance(value, int):
        return f"{value} (an integer)" if abs(value) < 10**12 else "a huge integer"
    kinds = ((str, "a string"), (list, "a list"), (dict, "an object"))
    kind = next((name for cls, name in kinds if isinstance(value, cls)), type(value).__name__)
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return f"{text[:60]}{'...' if len(text) > 60 else ''} ({kind})"


class Fields:
    """Read typed fields from one JSON object; `where` is the file, `prefix` the path to the object."""

    def __init__(self, data: Any, where: str, prefix: str = "") -> None:
        if not isinstance(data, dict):
            what = prefix.rstrip(".") or "the file's content"
            raise CheckpointError(f"{where}: {what} must be a JSON object, got {describe(data)}")
        self.data, self.where, self.prefix = data, where, prefix

    def name(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def fail(self, key: str, allowed: str, value: Any = _MISSING) -> NoReturn:
        got = "" if value is _MISSING else f", got {describe(value)}"
        raise CheckpointError(f"{self.where}: {self.name(key)} must be {allowed}{got}")

    def has(self, key: str) -> bool:
        return key in self.data

    def _get(self, key: str, default: Any) -> Any:
        if key in self.data:
            return self.data[key]
        if default is _MISSING:
            raise CheckpointError(f"{self.where}: {self.name(key)} is missing")
        return default

    def integer(self, key: str, default: Any = _MISSING, *, low: int = 1, high: int = MAX_INT) -> Any:
        """An int in [low, high]; `default` (any value, e.g. None) when the key is absent."""
        value = self._get(key, default)
        if key in self.data:
            check_int(value, low, high, lambda allowed: self.fail(key, allowed, value))
        return value

    def number(self, key: str, default: Any = _MISSING, *, low: float = 0.0, high: float = math.inf,
              low_open: bool = False) -> Any:
        """A finite number in [low, high] (or (low, high] with low_open), as a float."""
        value = self._get(key, default)
        if key not in self.data:
            return value
        return check_float(value, low, high, low_open, lambda allowed: self.fail(key, allowed, value))

    def flag(self, key: str, default: Any = _MISSING) -> Any:
        value = self._get(key, default)
        if key in self.data and not isinstance(value, bool):
            self.fail(key, "true or false (a JSON bool)", value)
        return value

    def text(self, key: str, default: Any = _MISSING, *, choices: Sequence[str] | None = None) -> Any:
        value = self._get(key, default)
        if key not in self.data:
            return value
        if not isinstance(value, str) or len(value) > MAX_STR:
            self.fail(key, f"a string of at most {MAX_STR} characters", value)
        if choices is not None and value not in choices:
            self.fail(key, "one of " + ", ".join(repr(c) for c in choices), value)
        return value

    def size2(self, key: str, default: Any = _MISSING, *, high: int = MAX_INT) -> Any:
        """An (H, W) pair written as one int (square) or a list of two ints, each in [1, high]."""
        value = self._get(key, default)
        if key not in self.data:
            return value
        allowed = f"an integer or a list of two integers, each from 1 to {high}"
        pair = [value, value] if type(value) is int else value
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2):
            self.fail(key, allowed, value)
        for side in pair:
            check_int(side, 1, high, lambda _: self.fail(key, allowed, value))
        return (pair[0], pair[1])

    def numbers(self, key: str, default: Any, count: int, *, low: float = -math.inf, high: float = math.inf,
               low_open: bool = False) -> Any:
        """`count` finite numbers (one number stands for all), each in range, as a tuple of floats."""
        value = self._get(key, default)
        if key not in self.data:
            return value
        items = [value] * count if isinstance(value, (int, float)) and not isinstance(value, bool) else value
        bounds = f"({low}, {high}]" if low_open else f"[{low}, {high}]"
        allowed = f"a number or a list of {count} numbers, each finite and in {bounds}"
        if not (isinstance(items, (list, tuple)) and len(items) == count):
            self.fail(key, allowed, value)
        return tuple(check_float(v, low, high, low_open, lambda _: self.fail(key, allowed, value)) for v in items)

    def strings(self, key: str, default: Any = _MISSING, *, max_items: int = 100_000) -> Any:
        value = self._get(key, default)
        if key not in self.data:
            return value
        if not (isinstance(value, (list, tuple)) and len(value) <= max_items
                and all(isinstance(s, str) and len(s) <= MAX_STR for s in value)):
            self.fail(key, f"a list of at most {max_items:,} strings of at most {MAX_STR} characters", value)
        return list(value)

    def section(self, key: str, *, required: bool = False) -> Fields:
        """A nested object ({} when absent and not required)."""
        value = self._get(key, _MISSING if required else {})
        return Fields({} if value is None and not required else value, self.where, f"{self.name(key)}.")

    def refuse_unknown(self, known: Sequence[str]) -> None:
        unknown = sorted(set(self.data) - set(known))
        if unknown:
            shown = ", ".join(repr(k[:40]) for k in unknown[:5]) + (", ..." if len(unknown) > 5 else "")
            what = f"{self.prefix.rstrip('.')} key" if self.prefix else "key"
            raise CheckpointError(f"{self.where}: unsupported {what}(s) {shown}; vit-explorer reads "
                                  + ", ".join(known))


def check_int(value: Any, low: int, high: int, fail: Callable[[str], NoReturn]) -> None:
    """Call fail(allowed) unless value is an int (not a bool, not a float) in [low, high]."""
    if type(value) is not int or not low <= value <= high:
        fail(f"an integer from {low} to {high}")


def check_float(value: Any, low: float, high: float, low_open: bool, fail: Callable[[str], NoReturn]) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        fail("a number")
    number = float(value) if abs(value) < 1e308 else math.inf
    in_range = (low < number if low_open else low <= number) and number <= high
    if not (math.isfinite(number) and in_range):
        fail(f"a finite number in {'(' if low_open else '['}{low}, {high}]")
    return number
