"""Hypothesis over every field of every schema: any JSON value (wrong types, NaN, infinities, huge
integers, nested lists and objects) in any one field, or the field removed, is either accepted or
refused with a CheckpointError (ConfigError for ViTConfig) of one line that names the file and the
field. Nothing else escapes: no TypeError, OverflowError, ZeroDivisionError or RecursionError."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vit_explorer.checkpoints.errors import CheckpointError
from vit_explorer.checkpoints.schemas import (
    hf_preprocess,
    parse_hf_config,
    parse_native,
    parse_timm_config,
    timm_preprocess,
)
from vit_explorer.models import ConfigError, ViTConfig

WHERE = "/models/x/config.json"
SCALARS = (st.none() | st.booleans() | st.integers(min_value=-(10**40), max_value=10**40)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
           | st.sampled_from([0, -1, 1, 2**31, 0.5, 1e-300, 1e300, "", "0", "true", "gelu", [], {}]))
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                                         max_size=4), max_leaves=12)
REMOVE = object()

HF_CONFIG = {"architectures": ["ViTForImageClassification"], "model_type": "vit", "hidden_size": 48,
             "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 96, "hidden_act": "gelu",
             "layer_norm_eps": 1e-12, "image_size": 32, "patch_size": 8, "num_channels": 3, "qkv_bias": True,
             "id2label": {"0": "cat", "1": "dog"}}
HF_PROCESSOR = {"do_resize": True, "size": {"shortest_edge": 36}, "resample": 3, "do_center_crop": True,
                "crop_size": {"height": 32, "width": 32}, "do_rescale": True, "rescale_factor": 1 / 255,
                "do_normalize": True, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}
TIMM_CONFIG = {"architecture": "vit_tiny_patch16_224", "num_classes": 7, "num_features": 48, "global_pool": "token",
               "model_args": {"img_size": [32, 32], "patch_size": 8, "num_classes": 7, "embed_dim": 48, "depth": 2,
                              "num_heads": 2, "in_chans": 3, "global_pool": "token", "qkv_bias": True,
                              "mlp_ratio": 4.0, "dynamic_img_size": True, "drop_rate": 0.0},
               "pretrained_cfg": {"input_size": [3, 32, 32], "crop_pct": 0.875, "interpolation": "bicubic",
                                  "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5], "num_classes": 7,
                                  "crop_mode": "center", "label_names": ["a"] * 7}}
NATIVE = {"format": "vit-explorer", "version": 1,
          "config": ViTConfig(image_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=4, num_classes=2).to_dict(),
          "labels": ["cat", "dog"],
          "preprocessing": {"size": [32, 32], "resize_shortest": 36, "resize_to": None, "keep_ratio": False,
                            "crop": True, "crop_offset": "round", "interpolation": "bicubic", "backend": "pil",
                            "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]},
          "training": {"step": 3}}


def paths(data: dict[str, Any], prefix: str = "") -> list[str]:
    """Every key path of a JSON object, nested objects included."""
    found = []
    for key, value in data.items():
        found.append(prefix + key)
        if isinstance(value, dict) and value:
            found += paths(value, f"{prefix}{key}.")
    return found


def mutated(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(base)
    *parents, key = path.split(".")
    node = data
    for parent in parents:
        node = node[parent]
    if value is REMOVE:
        del node[key]
    else:
        node[key] = value
    return data


def change(base: dict[str, Any]) -> st.SearchStrategy[tuple[str, Any]]:
    return st.tuples(st.sampled_from(paths(base)), JSON | st.just(REMOVE))


def assert_clear(error: BaseException, path: str, name_field: bool = True) -> None:
    message = str(error)
    assert "\n" not in message and len(message) < 2000, message
    assert message.startswith(WHERE), message
    if name_field:
        assert path.rsplit(".", 1)[-1] in message or path.split(".", 1)[0] in message, (path, message)


@settings(max_examples=300, deadline=None)
@given(change(HF_CONFIG))
def test_hf_config(change: tuple[str, Any]) -> None:
    path, value = change
    try:
        parse_hf_config(mutated(HF_CONFIG, path, value), WHERE)
    except CheckpointError as error:
        assert_clear(error, path)


@settings(max_examples=300, deadline=None)
@given(change(HF_PROCESSOR))
def test_hf_preprocessor(change: tuple[str, Any]) -> None:
    path, value = change
    defaults = {"size": {"height": 36, "width": 36}, "resample": 3, "do_center_crop": True,
                "crop_size": {"height": 32, "width": 32}}
    try:
        pre = hf_preprocess(mutated(HF_PROCESSOR, path, value), defaults, WHERE)
    except CheckpointError as error:
        assert_clear(error, path)
    else:
        assert all(math.isfinite(v) for v in pre.mean + pre.std) and min(pre.std) > 0 and max(pre.size) <= 8192


@settings(max_examples=400, deadline=None)
@given(change(TIMM_CONFIG))
def test_timm_config_and_pretrained_cfg(change: tuple[str, Any]) -> None:
    path, value = change
    try:
        spec = parse_timm_config(mutated(TIMM_CONFIG, path, value), WHERE, None)
        timm_preprocess(spec.pretrained_cfg, WHERE, "pretrained_cfg.")
    except CheckpointError as error:
        assert_clear(error, path)


@settings(max_examples=400, deadline=None)
@given(change(NATIVE))
def test_native_json(change: tuple[str, Any]) -> None:
    path, value = change
    try:
        parse_native(mutated(NATIVE, path, value), WHERE)
    except CheckpointError as error:
        # a config's own consistency rules may name another field than the one changed
        assert_clear(error, path, name_field=not path.startswith("config."))


FIELDS = list(ViTConfig().to_dict())


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(FIELDS), JSON)
def test_vit_config_refuses_with_config_error(field: str, value: Any) -> None:
    base = ViTConfig(image_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=4, num_classes=2).to_dict()
    try:
        config = ViTConfig.from_dict({**base, field: value})
    except ConfigError as error:
        assert "\n" not in str(error)
    else:  # accepted: a well-typed config that round-trips
        assert ViTConfig.from_dict(config.to_dict()) == config


@pytest.mark.parametrize("field,value", [("depth", 12.0), ("num_heads", True), ("qkv_bias", "false"),
                                         ("layer_norm_eps", float("nan")), ("layer_norm_eps", -1e-6),
                                         ("embed_dim", 0), ("image_size", float("inf")),
                                         ("patch_size", float("inf")), ("mlp_ratio", 1e308),
                                         ("image_size", [224, 224.5]), ("rope_theta", 0.0)])
def test_vit_config_names_the_field(field: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=field):
        ViTConfig(**{field: value})
