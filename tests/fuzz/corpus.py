"""The fuzz corpus: named bad inputs to `predict`, `inspect`, `convert` (and so to `load`), `explain`,
`components` / `patch` and the dataset analyses `embed` / `probe` / `cka`.

Each case writes one bad input into its own scratch folder (config files field by field with wrong
types and out-of-range values, corrupt weights, hostile pickles, bad images, special files, bad
flags, architectures that disagree with their weights) and returns the command line. The expected
outcome is always the same: exit status 2, exactly one line on stderr that starts
`vit-explorer COMMAND: error:` and contains each `expect` fragment (the file or flag and the
problem), no traceback, within seconds. `heavy` cases could hang or exhaust memory if a guard
failed, so they run only in a memory-limited subprocess (test_limits.py).

The corpus grows by adding a line or a function here. `python tests/fuzz/corpus.py` counts it.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import struct
import sys
import zipfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from safetensors.torch import save_file

from vit_explorer.commands import COMMANDS

IMAGE = "image.png"


@dataclass(frozen=True)
class Kit:
    """Valid sources (built once) and a scratch folder for one case."""

    valid: Path
    root: Path

    @property
    def image(self) -> str:
        return str(self.valid / IMAGE)

    def copy(self, name: str) -> Path:
        """A fresh copy of the valid source `name` (native, hf, deit, timm, cait) to break."""
        return Path(shutil.copytree(self.valid / name, self.root / name))


@dataclass(frozen=True)
class Case:
    name: str  # "category/what"; unique
    make: Callable[[Kit], tuple[list[str], list[str]]]  # kit -> (argv, fragments the error line must contain)
    heavy: bool = False

    @property
    def category(self) -> str:
        return self.name.split("/", 1)[0]


CASES: list[Case] = []


def add(name: str, make: Callable[[Kit], tuple[list[str], list[str]]], heavy: bool = False) -> None:
    assert all(c.name != name for c in CASES), name
    CASES.append(Case(name, make, heavy))


# ------------------------------------------------------------------------------------------ valid sources
LABELS = ["cat", "dog", "bird", "fish", "frog", "horse", "ship"]
TIMM_ARGS = {"img_size": [32, 32], "patch_size": 8, "num_classes": 7, "embed_dim": 48, "depth": 2, "num_heads": 2,
             "in_chans": 3, "global_pool": "token"}


def build_valid(folder: Path) -> Path:
    """Tiny valid checkpoints in every format (written by our own writers) and an image."""
    from vit_explorer.checkpoints import LoadedModel, convert
    from vit_explorer.checkpoints.native import save_native
    from vit_explorer.checkpoints.preprocess import Preprocess
    from vit_explorer.models import VisionTransformer, ViTConfig, preset

    torch.manual_seed(0)
    folder.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 56, 3), dtype=np.uint8)).save(folder / IMAGE)
    native = VisionTransformer(preset("classroom-tiny", num_classes=7)).eval()
    save_native(folder / "native", native, LABELS, Preprocess((32, 32)))
    hf_like = dict(image_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=4, mlp_ratio=2.0, num_classes=7,
                   layer_norm_eps=1e-12, pe_resample_antialias=False)
    for name, extra in (("hf", {}), ("deit", {"prefix_tokens": "cls+dist"})):
        model = VisionTransformer(ViTConfig(**hf_like, **extra)).eval()
        pre = Preprocess((32, 32), resize_shortest=36, crop=True, crop_offset="floor", backend="tensor")  # DeiT's
        convert(LoadedModel(model, model.config, LABELS, pre), "hf", folder / name)
    timm_config = {"architecture": "vit_tiny_patch16_224", "num_classes": 7, "num_features": 48,
                   "global_pool": "token", "model_args": TIMM_ARGS,
                   "pretrained_cfg": {"input_size": [3, 32, 32], "crop_pct": 0.875, "interpolation": "bicubic",
                                      "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5], "num_classes": 7}}
    vit = VisionTransformer(ViTConfig(image_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=2,
                                      num_classes=7)).eval()
    _write_timm(folder / "timm", vit.state_dict(), timm_config)
    cait = VisionTransformer(ViTConfig(image_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=4, num_classes=7,
                                       pos_embed_prefix=False, layer_scale_init=1e-5, talking_heads=True,
                                       class_attn_depth=2)).eval()
    state = {k.replace("class_blocks.", "blocks_token_only.").replace(".ls1.gamma", ".gamma_1")
             .replace(".ls2.gamma", ".gamma_2"): v for k, v in cait.state_dict().items()}
    cait_config = {**timm_config, "architecture": "cait_xxs24_224",
                   "model_args": {k: v for k, v in TIMM_ARGS.items() if k != "num_heads"}}
    _write_timm(folder / "cait", state, cait_config)
    return folder


def _write_timm(folder: Path, state: dict[str, torch.Tensor], config: dict[str, Any]) -> None:
    folder.mkdir()
    save_file({k: v.contiguous() for k, v in state.items()}, folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps(config))


# ---------------------------------------------------------------------------------------------- helpers
def predict(kit: Kit, source: Path | str, *extra: str) -> list[str]:
    return ["predict", str(source), kit.image, *extra]


def set_json(path: Path, key_path: str, raw: str | None) -> None:
    """Set a (dotted) key of a JSON file to raw JSON text, or delete it (raw None)."""
    data = json.loads(path.read_text())
    *parents, key = key_path.split(".")
    node = data
    for parent in parents:
        node = node[parent]
    if raw is None:
        node.pop(key, None)
        path.write_text(json.dumps(data))
        return
    node[key] = "__RAW__"
    path.write_text(json.dumps(data).replace('"__RAW__"', raw))


def field_case(category: str, source: str, file: str, key: str, raw: str | None, what: str = "") -> None:
    """A source whose `file` has `key` set to the raw JSON `raw`; the error names the file and the key."""
    def make(kit: Kit) -> tuple[list[str], list[str]]:
        folder = kit.copy(source)
        set_json(folder / file, key, raw)
        return predict(kit, folder), [file, what or key.rsplit(".", 1)[-1]]

    add(f"{category}/{key}={raw}", make)


INTS = ["0", "-1", "12.0", '"12"', "true", "null", "1e400", "1" + "0" * 30, "[]", "NaN", "{}"]
BOOLS = ['"false"', "0", "1", "null", '"true"', "[]"]
POSITIVE_FLOATS = ["NaN", "-1e-6", "0", '"1e-12"', "1e400", "-Infinity", "true", "5.0", "[]"]
SIZES = ["0", "-5", "224.5", '"224"', "[224]", "[224, 224, 3]", "[0, 224]", "1e400", '{"h": 1}', "[32.0, 32]"]
STRINGS = ["3", "null", "[]", "{}", '"' + "x" * 5000 + '"']

# ------------------------------------------------------------------------------- HF config.json, per field
for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "patch_size",
            "num_channels"):
    for raw in INTS:
        field_case("hf-config", "hf", "config.json", key, raw)
for raw in SIZES:
    field_case("hf-config", "hf", "config.json", "image_size", raw)
for raw in BOOLS:
    field_case("hf-config", "hf", "config.json", "qkv_bias", raw)
for raw in POSITIVE_FLOATS:
    field_case("hf-config", "hf", "config.json", "layer_norm_eps", raw)
for raw in ['"swin"', "3", "null", '["vit"]']:
    field_case("hf-config", "hf", "config.json", "model_type", raw)
for raw in ['"ViTForImageClassification"', "[3]", '["SwinForImageClassification"]', '["DeiTModel"]', "{}"]:
    field_case("hf-config", "hf", "config.json", "architectures", raw)
for raw in ['"gelu_new"', "5", '"relu"']:
    field_case("hf-config", "hf", "config.json", "hidden_act", raw)
for raw in ['{"a": "cat"}', '{"0": 5}', '"x"', '{"0": {"nested": 1}}', '{"0": "cat", "1": "dog"}', "7",
            '{"-1": "cat"}', '{"\u0663": "cat"}']:
    field_case("hf-config", "hf", "config.json", "id2label", raw)
for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "model_type"):
    field_case("hf-config", "hf", "config.json", key, None)
field_case("hf-config", "deit", "config.json", "model_type", '"vit"', "architectures")

# ------------------------------------------------------------------- HF preprocessor_config.json, per field
PRE = "preprocessor_config.json"
for raw in ["0", "-1", "100000", '{"height": 224}', '{"shortest_edge": 100000}', '"224"', "224.0",
            '{"height": 0, "width": 32}', '{"height": 32, "width": 1e400}', '{"longest_edge": 32}']:
    field_case("hf-preprocessor", "deit", PRE, "size", raw)
for raw in ["0", "100000", '{"shortest_edge": 5}', '{"height": 1e5, "width": 32}', "[32, 32]"]:
    field_case("hf-preprocessor", "deit", PRE, "crop_size", raw)
for raw in ["36", '{"height": 30, "width": 32}']:  # valid, but not what the model's patches tile
    field_case("hf-preprocessor", "deit", PRE, "crop_size", raw, "patch size 8 does not divide")
for raw in ["7", '"bicubic"', "2.0", "-1", "true"]:
    field_case("hf-preprocessor", "deit", PRE, "resample", raw)
for raw in ["1", '"x"', "0", "NaN"]:
    field_case("hf-preprocessor", "deit", PRE, "rescale_factor", raw)
for raw in ["[0.5, 0.5]", "NaN", '"a"', "[0.5, 0.5, 1e400]", "[0.5, 0.5, 100]", "{}"]:
    field_case("hf-preprocessor", "deit", PRE, "image_mean", raw)
for raw in ["0", "[0, 0, 0]", "NaN", "-1", "[0.5, 0.5, 0.5, 0.5]", "[0.5, 0.5, 1e-9]"]:
    field_case("hf-preprocessor", "deit", PRE, "image_std", raw)
for key, raw in (("do_normalize", '"no"'), ("do_resize", '"yes"'), ("do_rescale", "false"), ("do_rescale", "0"),
                 ("do_center_crop", "1")):
    field_case("hf-preprocessor", "deit", PRE, key, raw)

# ---------------------------------------------------------------------------------- timm config.json
for raw in ["5", '"swin_tiny_patch4_window7_224"', '""', "null", '"vit_tiny_patch16_99999999999"', "[]"]:
    field_case("timm-config", "timm", "config.json", "architecture", raw)
for key in ("embed_dim", "depth", "num_heads", "patch_size", "in_chans", "num_classes"):
    for raw in ["0", "-1", '"3"', "3.0", "true", "1e400"]:
        field_case("timm-config", "timm", "config.json", f"model_args.{key}", raw)
for raw in ["[0, 0]", "1e9", "[32]", '"32"', "32.5"]:
    field_case("timm-config", "timm", "config.json", "model_args.img_size", raw)
for key, raw in (("global_pool", '"avg"'), ("class_token", "false"), ("reg_tokens", "4"), ("fc_norm", "true"),
                 ("no_embed_class", "true"), ("qk_norm", "true"), ("pre_norm", "true"), ("act_layer", '"relu"'),
                 ("qkv_bias", '"false"'), ("init_values", "NaN"), ("init_values", '"1e-5"'), ("mlp_ratio", "0"),
                 ("mlp_ratio", "1e400"), ("dynamic_img_size", '"yes"'), ("drop_rate", "2"), ("pos_embed", '"none"'),
                 ("reg_tokens", "false"), ("norm_layer", '"rmsnorm"')):
    field_case("timm-config", "timm", "config.json", f"model_args.{key}", raw)
for raw in ["[1, 2]", '"x"', "5"]:
    field_case("timm-config", "timm", "config.json", "model_args", raw)
    field_case("timm-config", "timm", "config.json", "pretrained_cfg", raw)
for raw in ["[3, 0, 0]", "[3, 100000, 100000]", '"224"', "[3, 32]", "[3, 32.0, 32]"]:
    field_case("timm-config", "timm", "config.json", "pretrained_cfg.input_size", raw)
for key, raw in (("crop_pct", "0"), ("crop_pct", "5"), ("crop_pct", "NaN"), ("crop_pct", "0.0001"),
                 ("crop_mode", '"border"'), ("interpolation", '"magic"'), ("mean", "[1, 2]"), ("std", "[0, 0, 0]"),
                 ("std", '"x"'), ("num_classes", '"7"')):
    field_case("timm-config", "timm", "config.json", f"pretrained_cfg.{key}", raw)
for key, raw in (("global_pool", '"avg"'), ("num_classes", '"7"'), ("num_features", "48.0"),
                 ("label_names", '[1, 2, 3, 4, 5, 6, 7]'), ("label_names", '{"x": "cat"}')):
    field_case("timm-config", "timm", "config.json", key, raw)

# ------------------------------------------------------------------------------ vit_explorer.json
NATIVE = "vit_explorer.json"
for raw in ["999", "0", '"1"', "1.0", "null"]:
    field_case("native-json", "native", NATIVE, "version", raw)
field_case("native-json", "native", NATIVE, "format", '"other"', "vit-explorer")
for raw in ["[]", '"x"', "null"]:
    field_case("native-json", "native", NATIVE, "config", raw)
for key, raw in (("depth", "2.0"), ("depth", '"2"'), ("num_heads", "2.5"), ("patch_size", "4.0"),
                 ("qkv_bias", '"false"'), ("layer_norm_eps", "NaN"), ("layer_norm_eps", "-1e-6"),
                 ("layer_norm_eps", "0"), ("embed_dim", "0"), ("image_size", "1e400"), ("patch_size", "1e400"),
                 ("image_size", "[32, 32.5]"), ("unknown_key", "1"), ("mlp_ratio", "Infinity"), ("stem", "5"),
                 ("dist_head", "1"), ("num_classes", "-7"), ("rope_theta", "-1"), ("embed_dim", "1e3"),
                 ("conv_stem_strides", '["2"]'), ("image_size", "[1048577, 32]")):
    field_case("native-json", "native", NATIVE, f"config.{key}", raw)
for raw in ["[1, 2, 3, 4, 5, 6, 7]", '[{"a": 1}, "b", "c", "d", "e", "f", "g"]', '["a", "b"]', '"cats"', "5"]:
    field_case("native-json", "native", NATIVE, "labels", raw)
for key, raw in (("size", "[0, 0]"), ("size", "[100000, 100000]"), ("size", '"32"'), ("mean", "[0.5, 0.5]"),
                 ("std", "[0, 0, 0]"), ("std", "[NaN, 1, 1]"), ("interpolation", '"x"'), ("unknown", "1"),
                 ("crop", '"yes"'), ("resize_shortest", "100000"), ("resize_to", "[1e9, 5]"), ("backend", "3")):
    field_case("native-json", "native", NATIVE, f"preprocessing.{key}", raw)
field_case("native-json", "native", NATIVE, "preprocessing", '"fast"')
field_case("native-json", "native", NATIVE, "training", "[1]")


# ---------------------------------------------------- declared architecture against the weights
def arch_case(name: str, source: str, file: str, key: str, raw: str, fragments: list[str]) -> None:
    def make(kit: Kit) -> tuple[list[str], list[str]]:
        folder = kit.copy(source)
        set_json(folder / file, key, raw)
        return predict(kit, folder), fragments

    add(f"architecture/{name}", make)


arch_case("hf-width", "hf", "config.json", "hidden_size", "64", ["declares hidden_size 64", "have 48"])
arch_case("hf-depth", "hf", "config.json", "num_hidden_layers", "3", ["num_hidden_layers 3", "have 2"])
arch_case("hf-mlp", "hf", "config.json", "intermediate_size", "192", ["intermediate_size 192", "have 96"])
arch_case("hf-mlp-fraction", "hf", "config.json", "intermediate_size", "100", ["intermediate_size 100"])
arch_case("hf-heads-indivisible", "hf", "config.json", "num_attention_heads", "5", ["num_heads 5"])
arch_case("hf-image-size", "hf", "config.json", "image_size", "48", ["position-table rows", "have 17"])
arch_case("hf-patch", "hf", "config.json", "patch_size", "4", ["patch_size 4", "have 8"])
arch_case("hf-channels", "hf", "config.json", "num_channels", "1", ["num_channels 1", "have 3"])
arch_case("hf-no-qkv-bias", "hf", "config.json", "qkv_bias", "false", ["unexpected keys", "qkv.bias"])
arch_case("hf-backbone-with-head", "hf", "config.json", "architectures", '["ViTModel"]', ["unexpected", "head"])
arch_case("hf-id2label-count", "hf", "config.json", "id2label", '{"0": "a", "1": "b"}', ["id2label has 2"])
arch_case("timm-width", "timm", "config.json", "model_args.embed_dim", "64", ["num_features 48", "width 64"])
arch_case("timm-depth", "timm", "config.json", "model_args.depth", "3", ["depth 3", "have 2"])
arch_case("timm-patch", "timm", "config.json", "model_args.patch_size", "4", ["patch_size 4", "have 8"])
arch_case("timm-img", "timm", "config.json", "model_args.img_size", "[64, 64]", ["position-table rows", "have 17"])
arch_case("timm-classes", "timm", "config.json", "num_classes", "5", ["num_classes", "declared differently"])
arch_case("timm-all-classes", "timm", "config.json", "model_args.num_classes", "5", ["num_classes", "5"])
arch_case("timm-num-features", "timm", "config.json", "num_features", "64", ["num_features 64"])
arch_case("timm-mlp-ratio", "timm", "config.json", "model_args.mlp_ratio", "2.0", ["MLP width", "have 192"])
arch_case("timm-qkv-bias", "timm", "config.json", "model_args.qkv_bias", "false", ["unexpected", "qkv.bias"])
arch_case("timm-layer-scale", "timm", "config.json", "model_args.init_values", "1e-5", ["missing", "ls1.gamma"])
arch_case("cait-heads", "cait", "config.json", "model_args.num_heads", "2", ["num_heads 2", "have 4"])
arch_case("cait-class-depth", "cait", "config.json", "model_args.depth_token_only", "3", ["depth_token_only 3"])
arch_case("cait-as-vit", "cait", "config.json", "architecture", '"vit_tiny_patch16_224"', ["unexpected keys"])
arch_case("native-depth", "native", NATIVE, "config.depth", "3", ["declares depth 3", "have 2"])
arch_case("native-classes", "native", NATIVE, "config.num_classes", "5", ["7 labels for 5 classes"])
arch_case("native-mlp", "native", NATIVE, "config.mlp_ratio", "4.0", ["declares MLP width", "have 128"])
arch_case("native-conv-stem", "native", NATIVE, "config.stem", '"conv"', ["missing keys", "patch_embed.convs"])


def _name_heads(kit: Kit) -> tuple[list[str], list[str]]:
    """A ViT-S name at the name's width with model_args heads that contradict it (invisible in shapes)."""
    folder = kit.root / "small"
    vit = _vit(embed_dim=384, depth=1, num_heads=3, image_size=32, patch_size=16, num_classes=7)
    args = {"img_size": [32, 32], "depth": 1, "num_heads": 3, "num_classes": 7}
    _write_timm(folder, vit.state_dict(), {"architecture": "vit_small_patch16_224", "model_args": args})
    return predict(kit, folder), ["num_heads=3 contradicts", "vit_small_patch16_224", "6 heads"]


add("architecture/timm-name-heads-vs-model-args", _name_heads)


def _vit(**kwargs: Any) -> torch.nn.Module:
    from vit_explorer.models import VisionTransformer, ViTConfig

    return VisionTransformer(ViTConfig(**kwargs))


def _bare_vit_b_as_small(kit: Kit) -> tuple[list[str], list[str]]:
    """ViT-B weights (1 block, to stay small) named vit_small: widths disagree, both named."""
    path = kit.root / "weights.safetensors"
    save_file(_vit(embed_dim=768, depth=1, num_heads=12).state_dict(), path)
    return predict(kit, path, "--arch", "vit_small_patch16_224"), ["embed_dim 384", "have 768", str(path)]


add("architecture/bare-vit-b-named-small", _bare_vit_b_as_small)


# -------------------------------------------------------------------------------- safetensors weights
def weights_case(name: str, source: str, write: Callable[[Path], None], fragments: list[str],
                 heavy: bool = False) -> None:
    def make(kit: Kit) -> tuple[list[str], list[str]]:
        folder = kit.copy(source)
        write(folder / "model.safetensors")
        return predict(kit, folder), ["model.safetensors", *fragments]

    add(f"safetensors/{name}", make, heavy)


def _header(path: Path, header: Any, data: bytes = b"", length: int | None = None) -> None:
    text = json.dumps(header).encode() if not isinstance(header, bytes) else header
    path.write_bytes(struct.pack("<Q", len(text) if length is None else length) + text + data)


def _truncate(fraction: float) -> Callable[[Path], None]:
    return lambda p: p.write_bytes(p.read_bytes()[: int(p.stat().st_size * fraction)])


def _tensors(**tensors: torch.Tensor) -> Callable[[Path], None]:
    return lambda p: save_file(tensors, p)


weights_case("truncated-half", "hf", _truncate(0.5), ["truncated or corrupt"])
weights_case("truncated-header", "hf", _truncate(0.001), ["truncated or corrupt"])
weights_case("empty", "hf", lambda p: p.write_bytes(b""), ["truncated or corrupt"])
weights_case("seven-bytes", "hf", lambda p: p.write_bytes(b"1234567"), ["truncated or corrupt"])
weights_case("random", "hf", lambda p: p.write_bytes(os.urandom(4096)), ["truncated or corrupt"])
weights_case("header-length-huge", "hf", lambda p: _header(p, {}, length=2**63), ["header"])
weights_case("header-not-json", "hf", lambda p: _header(p, b"{not json"), ["not valid JSON"])
weights_case("header-list", "hf", lambda p: _header(p, [1, 2]), ["not a JSON object"])
weights_case("header-deep", "hf", lambda p: _header(p, b"[" * 100_000 + b"]" * 100_000), ["nested"])
weights_case("header-not-utf8", "hf", lambda p: _header(p, b'{"\xff": 1}'), ["UTF-8"])
weights_case("dtype-unknown", "hf", lambda p: _header(p, {"w": {"dtype": "F99", "shape": [1], "data_offsets": [0, 4]}},
                                                      b"\0" * 4), ["dtype"])
weights_case("shape-negative", "hf", lambda p: _header(p, {"w": {"dtype": "F32", "shape": [-1],
                                                                   "data_offsets": [0, 4]}}, b"\0" * 4), ["shape"])
weights_case("shape-float", "hf", lambda p: _header(p, {"w": {"dtype": "F32", "shape": [1.0],
                                                                "data_offsets": [0, 4]}}, b"\0" * 4), ["shape"])
weights_case("offsets-outside", "hf", lambda p: _header(p, {"w": {"dtype": "F32", "shape": [1000],
                                                                    "data_offsets": [0, 4000]}}, b"\0" * 4),
             ["data_offsets"])
weights_case("shape-offsets-disagree", "hf", lambda p: _header(p, {"w": {"dtype": "F32", "shape": [3],
                                                                           "data_offsets": [0, 4]}}, b"\0" * 4),
             ["does not fill"])
weights_case("entry-not-object", "hf", lambda p: _header(p, {"w": [1]}), ["not described"])
weights_case("entry-huge-shape", "hf", lambda p: _header(p, {"w": {"dtype": "F32", "shape": [2**62, 2**62],
                                                                     "data_offsets": [0, 4]}}, b"\0" * 4), ["shape"])
weights_case("many-tensors", "hf", lambda p: _header(p, {f"t{i}": {"dtype": "F32", "shape": [1],
                                                                     "data_offsets": [4 * i, 4 * i + 4]}
                                                          for i in range(20_000)}, b"\0" * 80_000), ["20,000 tensors"])
weights_case("million-tensors", "hf", lambda p: _header(p, ("{" + ",".join(
    f'"t{i}":{{"dtype":"F32","shape":[1],"data_offsets":[{4 * i},{4 * i + 4}]}}' for i in range(1_000_000)) + "}"
).encode(), b"\0" * 4_000_000), ["header"], heavy=True)
for dtype in (torch.int64, torch.int32, torch.uint8, torch.bool, torch.int8, torch.int16):
    weights_case(f"dtype-{str(dtype).removeprefix('torch.')}", "hf",
                 _tensors(**{"vit.layernorm.weight": torch.zeros(48, dtype=dtype)}),
                 ["vit.layernorm.weight", str(dtype).removeprefix("torch.").upper()[:1]])
weights_case("missing-file", "hf", lambda p: p.unlink(), ["no weights found"])
weights_case("folder-instead", "hf", lambda p: (p.unlink(), p.mkdir()), ["a folder"])
weights_case("fifo", "hf", lambda p: (p.unlink(), os.mkfifo(p)), ["named pipe"])
weights_case("dev-zero", "hf", lambda p: (p.unlink(), p.symlink_to("/dev/zero")), ["character device"])
weights_case("sparse-128GiB", "hf", lambda p: os.truncate(p, 128 * 2**30), ["128.0 GiB"])


# ---------------------------------------------------------------------------------------- pickles
class Payload:
    """Unpickling this would create a file: the proof that a pickle ran code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def pickle_case(name: str, write: Callable[[Path, Kit], None], fragments: list[str], arch: bool = True,
                heavy: bool = False) -> None:
    def make(kit: Kit) -> tuple[list[str], list[str]]:
        path = kit.root / "weights.pth"
        write(path, kit)
        return predict(kit, path, *(["--arch", "vit_tiny_patch16_224"] if arch else [])), [str(path), *fragments]

    add(f"pickle/{name}", make, heavy)


def _marker(kit: Kit) -> Path:
    return kit.root / "PWNED"


def _torch_save(obj: Any, **kwargs: Any) -> Callable[[Path, Kit], None]:
    return lambda p, kit: torch.save(obj, p, **kwargs)


pickle_case("reduce-os-system", lambda p, kit: torch.save({"w": Payload(_marker(kit))}, p), ["posix.system"])
pickle_case("reduce-protocol-5", lambda p, kit: torch.save({"w": Payload(_marker(kit))}, p, pickle_protocol=5),
            ["system"])
pickle_case("reduce-legacy", lambda p, kit: torch.save({"w": Payload(_marker(kit))}, p,
                                                      _use_new_zipfile_serialization=False), ["system"])
pickle_case("reduce-plain-pickle", lambda p, kit: p.write_bytes(pickle.dumps(Payload(_marker(kit)))),
            ["truncated or corrupt"])  # not a torch.save file: torch reads no object before its magic number
pickle_case("reduce-plain-pickle-protocol-2", lambda p, kit: p.write_bytes(pickle.dumps(Payload(_marker(kit)), 2)),
            ["system"])
pickle_case("namespace", _torch_save({"args": __import__("argparse").Namespace(lr=1)}), ["argparse.Namespace"])
pickle_case("truncated", lambda p, kit: (torch.save({"w": torch.zeros(1000)}, p),
                                         p.write_bytes(p.read_bytes()[:300])), ["truncated or corrupt"])
pickle_case("random", lambda p, kit: p.write_bytes(os.urandom(2000)), ["truncated or corrupt"])
pickle_case("empty", lambda p, kit: p.write_bytes(b""), ["truncated or corrupt"])
pickle_case("zip-not-torch", lambda p, kit: _zip(p, {"a/data.pkl": b"not a pickle"}), ["corrupt"])
pickle_case("zip-deflated", lambda p, kit: _zip(p, {"a/data.pkl": pickle.dumps({}), "a/data/0": b"\0" * 10**7},
                                                zipfile.ZIP_DEFLATED), ["compressed"])
pickle_case("a-list", _torch_save([torch.zeros(1)]), ["expected a state dict"])
pickle_case("int-keys", _torch_save({1: torch.zeros(1)}), ["names must be strings"])
pickle_case("no-tensors", _torch_save({"a": 1, "b": "x"}), ["no tensors"])
pickle_case("empty-dict", _torch_save({}), ["expected a state dict"])
for dtype in (torch.int64, torch.bool, torch.uint8, torch.complex64):
    pickle_case(f"dtype-{str(dtype).removeprefix('torch.')}", _torch_save({"norm.weight": torch.zeros(4, dtype=dtype)}),
                ["norm.weight", str(dtype).removeprefix("torch.")])
pickle_case("sparse", _torch_save({"norm.weight": torch.zeros(4).to_sparse()}), ["norm.weight", "sparse"])
pickle_case("no-arch", _torch_save({"norm.weight": torch.zeros(4)}), ["arch"], arch=False)
pickle_case("size-claims-more", lambda p, kit: _patch_pickle(p, b"K\x01\x85", b"\x8a\x06\x00\x00\x00\x00\x00\x01\x85"),
            ["truncated or corrupt"])
pickle_case("storage-claims-more", lambda p, kit: _patch_pickle(p, b"K\x01t", b"\x8a\x06\x00\x00\x00\x00\x00\x01t"),
            ["truncated or corrupt"], heavy=True)


def _zip(path: Path, entries: dict[str, bytes], compression: int = zipfile.ZIP_STORED) -> None:
    with zipfile.ZipFile(path, "w", compression) as z:
        for name, data in entries.items():
            z.writestr(name, data)


def _patch_pickle(path: Path, old: bytes, new: bytes) -> None:
    """torch.save of a 1-element tensor with bytes of its pickle replaced, e.g. a size or a storage's
    element count 1 by 2^40 (the record still holds 4 bytes)."""
    torch.save({"w": torch.zeros(1)}, path)
    with zipfile.ZipFile(path) as z:
        entries = {i.filename: z.read(i) for i in z.infolist()}
    name = next(n for n in entries if n.endswith("data.pkl"))
    assert old in entries[name]
    entries[name] = entries[name].replace(old, new)
    _zip(path, entries)


def _wrong_suffix(kit: Kit) -> tuple[list[str], list[str]]:
    path = kit.root / "weights.onnx"
    path.write_bytes(b"x")
    return predict(kit, path), [str(path), "unknown file type"]


add("pickle/unknown-suffix", _wrong_suffix)


# ------------------------------------------------------------------------------------ config files
def file_case(name: str, source: str, file: str, write: Callable[[Path], None], fragments: list[str],
              heavy: bool = False) -> None:
    def make(kit: Kit) -> tuple[list[str], list[str]]:
        folder = kit.copy(source)
        path = folder / file
        if path.exists():
            path.unlink()
        write(path)
        return predict(kit, folder), [file, *fragments]

    add(f"config-file/{source}-{file}-{name}", make, heavy)


for source, file in (("hf", "config.json"), ("hf", PRE), ("timm", "config.json"), ("native", NATIVE)):
    file_case("fifo", source, file, os.mkfifo, ["named pipe"], heavy=True)
    file_case("dev-zero", source, file, lambda p: p.symlink_to("/dev/zero"), ["character device"], heavy=True)
    file_case("folder", source, file, lambda p: p.mkdir(), ["a folder"])
    file_case("sparse-1GiB", source, file, lambda p: (p.write_bytes(b""), os.truncate(p, 2**30)), ["more than"])
    file_case("deep-list", source, file, lambda p: p.write_text("[" * 100_000 + "]" * 100_000), ["nested"])
    file_case("deep-object", source, file, lambda p: p.write_text('{"a":' * 50 + "1" + "}" * 50), ["nested"])
    file_case("not-json", source, file, lambda p: p.write_text("{not json"), ["not valid JSON"])
    file_case("not-utf8", source, file, lambda p: p.write_bytes(b'{"a": "\xff\xfe"}'), ["UTF-8"])
    file_case("a-list", source, file, lambda p: p.write_text("[1, 2]"), ["JSON object"])
    file_case("huge-int", source, file, lambda p: p.write_text('{"a": ' + "9" * 5000 + "}"), ["not valid JSON"])
    file_case("empty", source, file, lambda p: p.write_text(""), ["not valid JSON"])
file_case("dangling-link", "hf", "config.json", lambda p: p.symlink_to(p.parent / "nowhere"), ["config.json"])
file_case("neither-kind", "hf", "config.json", lambda p: p.write_text('{"hidden_size": 48}'),
          ["neither a timm config"])


# ------------------------------------------------------------------------------------------- images
def image_case(name: str, write: Callable[[Path], None], fragments: list[str], heavy: bool = False,
               suffix: str = ".png") -> None:
    def make(kit: Kit) -> tuple[list[str], list[str]]:
        path = kit.root / f"bad{suffix}"
        write(path)
        return ["predict", str(kit.valid / "native"), str(path)], [str(path), *fragments]

    add(f"image/{name}", make, heavy)


def _noise(path: Path) -> None:
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(path)


def _png(width: int, height: int, mode: str = "L") -> Callable[[Path], None]:
    return lambda p: Image.new(mode, (width, height)).save(p)


def _png_header(width: int, height: int) -> Callable[[Path], None]:
    """A PNG that declares width x height pixels (IHDR patched; the data is a 1x1 image's)."""
    def write(path: Path) -> None:
        import zlib

        buffer = io.BytesIO()
        Image.new("L", (1, 1)).save(buffer, "PNG")
        data = bytearray(buffer.getvalue())
        data[16:24] = struct.pack(">II", width, height)
        data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
        path.write_bytes(bytes(data))
    return write


image_case("missing", lambda p: None, ["no such image"])
image_case("folder", lambda p: p.mkdir(), ["a folder"])
image_case("empty", lambda p: p.write_bytes(b""), ["not an image"])
image_case("random", lambda p: p.write_bytes(os.urandom(3000)), ["not an image"])
image_case("text", lambda p: p.write_text("hello"), ["not an image"])
image_case("truncated", lambda p: (_noise(p), p.write_bytes(p.read_bytes()[:2000])), ["truncated"])
image_case("bomb-header", _png_header(100_000, 100_000), ["pixels"])
image_case("bomb-header-jpeg-size", _png_header(30_000, 30_000), ["pixels"])
image_case("strip-1x20000", _png(1, 20000), ["20:1"], heavy=True)
image_case("strip-20000x1", _png(20000, 1), ["20:1"], heavy=True)
image_case("strip-3x100", _png(3, 100), ["20:1"])
image_case("zero-size-header", _png_header(0, 0), ["bad.png"])
image_case("fifo", os.mkfifo, ["named pipe"], heavy=True)
image_case("dev-zero", lambda p: p.symlink_to("/dev/zero"), ["character device"], heavy=True)
image_case("sparse-1GiB", lambda p: (p.write_bytes(b""), os.truncate(p, 2**30)), ["more than"])
image_case("tiff-bomb", lambda p: _tiff_header(p, 65_000, 65_000), ["pixels"], suffix=".tif")
image_case("gif-garbage", lambda p: p.write_bytes(b"GIF89a" + os.urandom(100)), ["bad.gif"], suffix=".gif")


def _tiff_header(path: Path, width: int, height: int) -> None:
    Image.new("L", (8, 8)).save(path, "TIFF")
    data = bytearray(path.read_bytes())
    # patch ImageWidth (256) and ImageLength (257) entries of the first IFD
    ifd = struct.unpack("<I", data[4:8])[0]
    count = struct.unpack("<H", data[ifd:ifd + 2])[0]
    for i in range(count):
        at = ifd + 2 + 12 * i
        tag, kind = struct.unpack("<HH", data[at:at + 4])
        if tag in (256, 257):
            data[at + 2:at + 4] = struct.pack("<H", 4)  # LONG
            data[at + 8:at + 12] = struct.pack("<I", width if tag == 256 else height)
    path.write_bytes(bytes(data))


# ------------------------------------------------------------------------------------------- flags
def flag_case(name: str, argv: Callable[[Kit], list[str]], fragments: list[str]) -> None:
    add(f"flags/{name}", lambda kit: (argv(kit), fragments))


def _native(kit: Kit) -> str:
    return str(kit.valid / "native")


for value in ("0", "-1", "x", "1.5", ""):
    flag_case(f"predict-top-k={value}", lambda kit, v=value: predict(kit, _native(kit), "--top-k", v), ["--top-k"])
    flag_case(f"inspect-top-k={value}", lambda kit, v=value: ["inspect", _native(kit), "--out", str(kit.root / "o"),
                                                              "--top-k", v], ["--top-k"])
for value in ("foo", "meta", "cuda:99", "", "cpu:x", "mps", "cuda" * 20, "vulkan"):
    if value.startswith("cuda") and torch.cuda.is_available() and value == "cuda":
        continue
    flag_case(f"predict-device={value[:20]}", lambda kit, v=value: predict(kit, _native(kit), "--device", v),
              ["--device"])
    flag_case(f"inspect-device={value[:20]}", lambda kit, v=value: ["inspect", _native(kit), "--out",
                                                                   str(kit.root / "o"), "--device", v], ["--device"])
if not torch.cuda.is_available():
    flag_case("predict-device=cuda", lambda kit: predict(kit, _native(kit), "--device", "cuda"), ["--device", "CUDA"])
for value in ("0x0", "100000x100000", "big", "-5", "32x", "9" * 50):
    flag_case(f"inspect-resolution={value[:20]}", lambda kit, v=value: ["inspect", _native(kit), "--out",
                                                                       str(kit.root / "o"), "--resolution", v],
              ["--resolution"])
flag_case("predict-no-image", lambda kit: ["predict", _native(kit)], ["image"])
flag_case("predict-unknown-flag", lambda kit: predict(kit, _native(kit), "--fast"), ["--fast"])
flag_case("convert-to-onnx", lambda kit: ["convert", _native(kit), "--to", "onnx", "--out", str(kit.root / "o")],
          ["--to"])
flag_case("convert-no-out", lambda kit: ["convert", _native(kit), "--to", "hf"], ["--out"])
flag_case("predict-arch-unknown", lambda kit: predict(kit, kit.valid / "timm", "--arch",
                                                      "swin_tiny_patch4_window7_224"),
          ["swin_tiny_patch4_window7_224", "not supported"])
flag_case("predict-arch-long-digits", lambda kit: predict(kit, kit.valid / "timm", "--arch",
                                                          "vit_tiny_patch16_" + "9" * 5000), ["not supported"])
flag_case("predict-missing-source", lambda kit: predict(kit, kit.root / "nope"), ["nope", "no such file"])
flag_case("predict-hub-not-cached", lambda kit: predict(kit, "nobody/not-a-cached-model"), ["offline"])
flag_case("inspect-missing-image", lambda kit: ["inspect", _native(kit), "--out", str(kit.root / "o"), "--image",
                                                str(kit.root / "none.png")], ["none.png"])


# ----------------------------------------------------------------------------------- convert outputs
def convert_case(name: str, prepare: Callable[[Kit, Path], None], fragments: list[str], to: str = "native") -> None:
    def make(kit: Kit) -> tuple[list[str], list[str]]:
        out = kit.root / "out"
        prepare(kit, out)
        return ["convert", str(kit.valid / "hf"), "--to", to, "--out", str(out)], [str(out), *fragments]

    add(f"convert/{name}", make)


convert_case("out-is-a-file", lambda kit, out: out.write_text("x"), ["not an empty folder"])
convert_case("out-not-empty", lambda kit, out: (out.mkdir(), (out / "notes.txt").write_text("x")),
             ["not an empty folder"])
convert_case("out-holds-native", lambda kit, out: shutil.copytree(kit.valid / "native", out), ["already holds"])
convert_case("out-holds-hf", lambda kit, out: shutil.copytree(kit.valid / "hf", out), ["already holds"], to="hf")
convert_case("out-under-a-file", lambda kit, out: (out.write_text("x")), ["out"], to="hf")
add("convert/cait-to-hf", lambda kit: (["convert", str(kit.valid / "cait"), "--to", "hf", "--out",
                                        str(kit.root / "out")], ["cannot be written in the Hugging Face"]))


# -------------------------------------------------------------------------------------- resources
def _native_config(key: str, raw: str, fragments: list[str], heavy: bool = False) -> None:
    def make(kit: Kit) -> tuple[list[str], list[str]]:
        folder = kit.copy("native")
        set_json(folder / NATIVE, key, raw)
        return predict(kit, folder), fragments

    add(f"resources/{key}={raw[:30]}", make, heavy)


_native_config("preprocessing.size", "[100000, 100000]", ["size"])
_native_config("preprocessing.resize_shortest", "1000000", ["resize_shortest"])


def _attention_bomb(kit: Kit) -> tuple[list[str], list[str]]:
    """A valid config whose attention at its own size needs ~1 TiB (64 heads x 65,537^2 tokens): refused
    before building."""
    from vit_explorer.checkpoints.native import save_native
    from vit_explorer.checkpoints.preprocess import Preprocess
    from vit_explorer.models import ViTConfig

    config = ViTConfig(image_size=(4096, 4096), patch_size=16, embed_dim=64, depth=1, num_heads=64,
                       num_classes=7, pos_embed="sincos_2d")
    folder = kit.root / "big"
    model = _vit(**{k: v for k, v in config.to_dict().items()})
    save_native(folder, model, LABELS, Preprocess((32, 32)))
    return predict(kit, folder), ["needs about", "GiB"]


add("resources/attention-1TiB", _attention_bomb, heavy=True)


# --------------------------------------------------------------------- explain, components / patch, dataset analyses
def explain(kit: Kit, *extra: str) -> list[str]:
    return ["explain", _native(kit), kit.image, *extra]


def patch(kit: Kit, corrupted: str, *extra: str) -> list[str]:
    return ["patch", _native(kit), kit.image, corrupted, *extra]


def dataset(kit: Kit, command: str, data: str, *extra: str) -> list[str]:
    """A dataset command on the native model, its output in the scratch folder (it must stay unwritten)."""
    return [command, _native(kit), "--data", data, "--out", str(kit.root / "out"), "--no-cache", *extra]


def _same_images(kit: Kit, n: int = 12) -> str:
    """A folder of two classes of n identical images: every model gives them the same features."""
    for c in range(2):
        (kit.root / "same" / f"c{c}").mkdir(parents=True)
        for i in range(n // 2):
            Image.new("RGB", (32, 32), (200, 10, 10)).save(kit.root / "same" / f"c{c}" / f"{i}.png")
    return str(kit.root / "same")


def analysis_case(category: str, name: str, argv: Callable[[Kit], list[str]], fragments: list[str],
                  heavy: bool = False) -> None:
    add(f"{category}/{name}", lambda kit: (argv(kit), fragments), heavy)


TARGETS = {"superscript": "²", "double-minus": "--3", "5000-digits": "9" * 5000, "label-typo": "catt",
           "out-of-range": "7", "negative": "-1", "newline": "cat\n"}
for name, value in TARGETS.items():
    analysis_case("explain", f"target-{name}", lambda kit, v=value: explain(kit, "--method", "rollout",
                                                                             f"--target={v}"), ["target"])
analysis_case("explain", "out-empty", lambda kit: explain(kit, "--out", ""), ["--out", "empty"])
analysis_case("explain", "out-blank", lambda kit: explain(kit, "--out", "  "), ["--out", "empty"])
analysis_case("explain", "method-twice", lambda kit: explain(kit, "--method", "rollout", "rollout"),
              ["--method", "rollout", "more than once"])
analysis_case("explain", "method-twice-in-two-flags",
              lambda kit: explain(kit, "--method", "rollout", "--method", "gradcam", "rollout"),
              ["--method", "rollout", "more than once"])
analysis_case("explain", "method-unknown", lambda kit: explain(kit, "--method", "shap"), ["--method", "shap"])
analysis_case("explain", "reference-on-a-classifier", lambda kit: explain(kit, "--reference", kit.image),
              ["--reference", "classifier", "--target"])
analysis_case("explain", "reference-missing", lambda kit: explain(kit, "--reference", str(kit.root / "no.png")),
              ["no.png"])
analysis_case("explain", "head-cls-on-one-head", lambda kit: explain(kit, "--method", "rollout", "--head", "cls"),
              ["head", "cls"])
analysis_case("explain", "baseline-unknown", lambda kit: explain(kit, "--baseline", "noise"), ["--baseline"])
PARAMETERS = {"ig-steps-zero": (["--ig-steps", "0"], "--ig-steps"), "ig-steps-huge": (["--ig-steps", "9" * 5000],
              "--ig-steps"), "ig-steps-superscript": (["--ig-steps", "²"], "--ig-steps"),
              "gradcam-block-out-of-range": (["--gradcam-block", "99"], "--gradcam-block"),
              "smoothgrad-negative": (["--smoothgrad=-3"], "--smoothgrad"),
              "smoothgrad-sigma-inf": (["--smoothgrad", "2", "--smoothgrad-sigma", "inf"], "--smoothgrad-sigma"),
              "smoothgrad-sigma-alone": (["--smoothgrad-sigma", "0.3"], "--smoothgrad-sigma"),
              "occlusion-window-zero": (["--occlusion-window", "0x4"], "--occlusion-window"),
              "occlusion-window-huge": (["--occlusion-window", "99999"], "--occlusion-window"),
              "occlusion-stride-over-window": (["--occlusion-window", "4", "--occlusion-stride", "8"],
                                               "--occlusion-stride"),
              "seed-negative": (["--seed=-1"], "--seed")}
for name, (flags, flag) in PARAMETERS.items():
    analysis_case("explain", name, lambda kit, f=flags: explain(kit, "--method", "occlusion", *f), [flag])
analysis_case("explain", "out-is-a-file", lambda kit: (kit.root / "f").write_text("x") and  # noqa: B018
              explain(kit, "--out", str(kit.root / "f")), ["f"])

analysis_case("components", "reference-on-a-classifier",
              lambda kit: ["components", _native(kit), kit.image, "--reference", kit.image], ["--reference"])
for value in ("²", "7", "-1", "x", "9" * 5000):
    analysis_case("components", f"target={value[:20]}", lambda kit, v=value: ["components", _native(kit), kit.image,
                                                                          f"--target={v}"], ["target"])
analysis_case("patch", "heads-off-negative", lambda kit: patch(kit, "heads", "--heads-off=-1:-1"),
              ["--heads-off", "-1:-1"])
analysis_case("patch", "heads-off-out-of-range", lambda kit: patch(kit, "heads", "--heads-off=0:99"),
              ["--heads-off", "0:99"])
analysis_case("patch", "heads-off-empty", lambda kit: patch(kit, "heads", "--heads-off=,"), ["--heads-off"])
analysis_case("patch", "heads-off-three-parts", lambda kit: patch(kit, "heads", "--heads-off=0:0:0"),
              ["--heads-off", "0:0:0"])
analysis_case("patch", "heads-off-with-mask", lambda kit: patch(kit, "mask", "--heads-off=0:0"),
              ["--heads-off", "only with", "heads"])
analysis_case("patch", "heads-off-with-an-image", lambda kit: patch(kit, kit.image, "--heads-off=0:0"),
              ["--heads-off", "only with"])
analysis_case("patch", "masked-empty", lambda kit: patch(kit, "mask", "--masked=,"), ["--masked"])
analysis_case("patch", "masked-negative", lambda kit: patch(kit, "mask", "--masked=-1"), ["--masked"])
analysis_case("patch", "masked-out-of-range", lambda kit: patch(kit, "mask", "--masked=9999"),
              ["--masked", "out of range"])
analysis_case("patch", "masked-with-heads", lambda kit: patch(kit, "heads", "--masked=0"),
              ["--masked", "only with", "mask"])
analysis_case("patch", "masked-with-an-image", lambda kit: patch(kit, kit.image, "--masked=0"),
              ["--masked", "only with"])
analysis_case("patch", "positions-out-of-range", lambda kit: patch(kit, "mask", "--positions=0,99999"),
              ["positions", "99999", "out of range"])
analysis_case("patch", "positions-20000-out-of-range",
              lambda kit: patch(kit, "mask", "--positions=" + ",".join(["99999"] * 20000)), ["positions", "99999"])
analysis_case("patch", "positions-superscript", lambda kit: patch(kit, "mask", "--positions=²"), ["--positions"])
analysis_case("patch", "positions-empty", lambda kit: patch(kit, "mask", "--positions="), ["--positions"])
analysis_case("patch", "batch-zero", lambda kit: patch(kit, "mask", "--batch", "0"), ["--batch"])
analysis_case("patch", "component-unknown", lambda kit: patch(kit, "mask", "--component", "ffn"), ["--component"])
analysis_case("patch", "corrupted-missing", lambda kit: patch(kit, str(kit.root / "no.png")), ["no.png"])

for value in ("1e300", "inf", "nan", "0", "-1", "1e-9"):
    analysis_case("dataset", f"cka-threshold={value}",
                  lambda kit, v=value: dataset(kit, "cka", "shapes", "--limit", "20", "--kernel", "rbf",
                                               "--threshold", v), ["--threshold"])
analysis_case("dataset", "cka-threshold-with-linear",
              lambda kit: dataset(kit, "cka", "shapes", "--limit", "20", "--threshold", "0.5"), ["--threshold", "rbf"])
analysis_case("dataset", "cka-2-images", lambda kit: dataset(kit, "cka", "shapes", "--limit", "2"),
              ["CKA", "at least 4"])
analysis_case("dataset", "cka-minibatch-2", lambda kit: dataset(kit, "cka", "shapes", "--limit", "20",
                                                                "--minibatch", "2"), ["--minibatch"])
analysis_case("dataset", "umap-3-images", lambda kit: dataset(kit, "embed", "shapes", "--limit", "3", "--projection",
                                                              "umap"), ["UMAP", "at least", "--projection pca"])
analysis_case("dataset", "tsne-3-images", lambda kit: dataset(kit, "embed", "shapes", "--limit", "3", "--projection",
                                                              "tsne"), ["TSNE", "at least"])
analysis_case("dataset", "tsne-identical-images",  # SIGSEGV inside scikit-learn without the guard: memory-limited
              lambda kit: dataset(kit, "embed", _same_images(kit), "--projection", "tsne"),
              ["all the same", "--projection pca"], heavy=True)
analysis_case("dataset", "umap-identical-images",
              lambda kit: dataset(kit, "embed", _same_images(kit), "--projection", "umap"),
              ["all the same", "--projection pca"], heavy=True)
# every dataset command, a new one too: 12 GB of pixels was killed without a word
for command in [c.name for c in COMMANDS.values() if c.module == "dataset"]:
    analysis_case("dataset", f"{command}-shapes-1000000",
                  lambda kit, c=command: dataset(kit, c, "shapes", "--limit", "1000000"),
                  ["need about", "GiB", "--limit"], heavy=True)
analysis_case("dataset", "embed-where-100000000",  # drew images in memory without end before the budget
              lambda kit: dataset(kit, "embed", "where", "--limit", "100000000"), ["need about", "--limit"],
              heavy=True)
analysis_case("dataset", "data-200000-characters", lambda kit: dataset(kit, "embed", "d" * 200_000),
              ["--data", "File name too long"])
analysis_case("dataset", "data-missing", lambda kit: dataset(kit, "probe", str(kit.root / "none")),
              ["--data", "no such folder"])
analysis_case("dataset", "probe-unlabelled", lambda kit: (Image.new("RGB", (8, 8)).save(kit.root / "a.png") or
                                                          dataset(kit, "probe", str(kit.root))), ["labels"])
for flag, value in (("--limit", "0"), ("--batch-size", "0"), ("--val-fraction", "1.5"), ("--val-fraction", "nan"),
                    ("--limit", "x")):
    analysis_case("dataset", f"probe{flag}={value}", lambda kit, f=flag, v=value: dataset(kit, "probe", "shapes", f, v),
                  [flag])
analysis_case("dataset", "out-is-a-file", lambda kit: (kit.root / "f").write_text("x") and  # noqa: B018
              ["embed", _native(kit), "--data", "shapes", "--limit", "20", "--out", str(kit.root / "f")], ["--out"])
analysis_case("dataset", "cka-second-model-missing",
              lambda kit: ["cka", _native(kit), str(kit.root / "nope"), "--data", "shapes", "--limit", "20", "--out",
                           str(kit.root / "out"), "--no-cache"], ["nope"])

# the feature store's flags and a hostile store folder
for name, extra, fragments in (
        ("store-tokens-unknown", ["--store-tokens", "evil"], ["--store-tokens", "evil"]),
        ("store-states-out-of-range", ["--store-states", "99"], ["--store-states", "99"]),
        ("store-states-not-numbers", ["--store-states", "1,x"], ["--store-states"]),
        ("store-tokens-cls-twice-empty", ["--store-tokens", ","], ["--store-tokens"])):
    analysis_case("dataset", name, lambda kit, e=extra: dataset(kit, "embed", "shapes", "--limit", "8", "--store",
                                                                str(kit.root / "store"), *e), fragments)
analysis_case("dataset", "store-flags-without-store",
              lambda kit: dataset(kit, "embed", "shapes", "--limit", "8", "--store-states", "1"), ["--store"])
analysis_case("dataset", "store-is-a-file", lambda kit: (kit.root / "f").write_text("x") and  # noqa: B018
              dataset(kit, "probe", "shapes", "--limit", "8", "--store", str(kit.root / "f")),
              ["--store", "not a folder"])
analysis_case("dataset", "store-manifest-not-json",
              lambda kit: ((kit.root / "s").mkdir(), (kit.root / "s" / "manifest.json").write_text("[")) and
              dataset(kit, "cka", "shapes", "--limit", "8", "--store", str(kit.root / "s")),
              ["manifest.json", "JSON"])
analysis_case("dataset", "store-manifest-huge-width",
              lambda kit: ((kit.root / "s").mkdir(), (kit.root / "s" / "manifest.json").write_text(
                  '{"format": "vit-explorer-store", "version": 1, "model": {"hash": "", "name": ""}, '
                  '"preprocessing": {}, "states": [0], "kinds": ["mean"], "width": 1e400, "pooled_width": 1, '
                  '"patches": 1, "grid": [1, 1], "depth": 0, "prefix_names": [], "sample": null, "distance": null, '
                  '"data": {"name": "", "label_names": []}, "images": [], "shards": []}')) and
              dataset(kit, "embed", "shapes", "--limit", "8", "--store", str(kit.root / "s")),
              ["manifest.json", "width"])


def counts() -> Counter[str]:
    return Counter(case.category for case in CASES)


if __name__ == "__main__":
    total = counts()
    for category, n in sorted(total.items()):
        print(f"{category:18} {n:4}")
    print(f"{'total':18} {sum(total.values()):4} ({sum(c.heavy for c in CASES)} heavy, run memory-limited)")
    sys.exit(0)
