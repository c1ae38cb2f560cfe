"""A model from a config and a state dict with our parameter names, every key and shape checked first.

When the weights do not fit, the message says it twice: as the dimensions the config file (or
model name) declares against those the tensors show (width, depth, MLP width, patch, channels,
position-table rows, classes, heads where talking heads show them), in the declaring file's own
field names, and as the missing, unexpected and mis-shaped keys.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch

from ..models import VisionTransformer, ViTConfig
from ..models.position import SCHEMES
from .errors import CheckpointError
from .weights import release


def _summarise(keys: list[str], limit: int = 30) -> str:
    """Keys that differ only in a block index are shown once with '*' (blocks.*.attn.qkv.weight)."""
    groups: dict[str, list[str]] = {}
    for key in keys:
        groups.setdefault(re.sub(r"\.\d+\.", ".*.", key), []).append(key)
    shown = [pattern if len(members) > 1 else members[0] for pattern, members in groups.items()]
    return ", ".join(shown[:limit]) + (", ..." if len(shown) > limit else "")


def _count(state: Mapping[str, torch.Tensor], prefix: str) -> int:
    indices = {int(m.group(1)) for k in state if (m := re.match(rf"{re.escape(prefix)}\.(\d+)\.", k))}
    return max(indices) + 1 if indices else 0


def weight_dims(state: Mapping[str, torch.Tensor]) -> dict[str, tuple[int, str]]:
    """What the tensors show: dimension -> (value, the tensor that shows it)."""
    def shape(key: str) -> str:
        return f"{key} {tuple(state[key].shape)}"

    found: dict[str, tuple[int, str]] = {}
    for dim, key, axis in (("width", "norm.weight", 0), ("width", "fc_norm.weight", 0),
                           ("mlp_width", "blocks.0.mlp.fc1.weight", 0), ("mlp_width", "blocks.0.mlp.fc1_g.weight", 0),
                           ("class_mlp_width", "class_blocks.0.mlp.fc1.weight", 0),
                           ("pos_rows", "pos_embed", 1), ("heads", "blocks.0.attn.proj_l.weight", 0)):
        if key in state and state[key].dim() > axis:
            found[dim] = (int(state[key].shape[axis]), shape(key))
    proj = state.get("patch_embed.proj.weight")
    if proj is not None and proj.dim() == 4 and proj.shape[-1] > 1:  # a 1x1 projection ends the conv stem
        found["patch_size"] = (int(proj.shape[-1]), shape("patch_embed.proj.weight"))
        found["in_chans"] = (int(proj.shape[1]), shape("patch_embed.proj.weight"))
    found["depth"] = (_count(state, "blocks"), f"blocks.0 to blocks.{_count(state, 'blocks') - 1}")
    if "class_blocks.0.norm1.weight" in state or _count(state, "class_blocks"):
        found["class_attn_depth"] = (_count(state, "class_blocks"), "class_blocks.*")
    head = state.get("head.weight")
    found["num_classes"] = (0, "no head.weight") if head is None else (int(head.shape[0]), shape("head.weight"))
    return found


def config_dims(config: ViTConfig) -> dict[str, int]:
    """The same dimensions as the config declares them."""
    dims = {"width": config.embed_dim, "depth": config.depth, "mlp_width": int(config.embed_dim * config.mlp_ratio),
            "num_classes": config.num_classes}
    if config.stem == "patchify":
        dims.update(patch_size=config.patch_size, in_chans=config.in_chans)
    if SCHEMES[config.pos_embed].prefix_table:  # a learned 1D table: one row per patch (and prefix token)
        dims["pos_rows"] = config.num_patches + SCHEMES[config.pos_embed].prefix_rows(config)
    if config.talking_heads:
        dims["heads"] = config.num_heads
    if config.class_attn_depth:
        dims.update(class_attn_depth=config.class_attn_depth,
                    class_mlp_width=int(config.embed_dim * config.class_attn_mlp_ratio))
    return dims


def dims_disagreement(config: ViTConfig, state: Mapping[str, torch.Tensor], declared_by: str,
                      names: Mapping[str, str]) -> str:
    """'' if the dimensions agree, else "<declared_by> declares <field> X but the weights have Y (<tensor>); ..."."""
    found = weight_dims(state)
    parts = [f"{names.get(dim, dim)} {value} but the weights have {found[dim][0]} ({found[dim][1]})"
             for dim, value in config_dims(config).items() if dim in found and found[dim][0] != value]
    return f"{declared_by} declares " + "; ".join(parts) if parts else ""


def check_state_dict(model: torch.nn.Module, state: Mapping[str, torch.Tensor], where: str, explain: str = "",
                     declared_by: str = "") -> None:
    """Compare keys and shapes with the model; name every missing, unexpected and mis-shaped key (and,
    given `declared_by`, what declares the architecture)."""
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    misshaped = [f"{k}: checkpoint {tuple(state[k].shape)} vs model {tuple(expected[k].shape)}"
                 for k in sorted(set(expected) & set(state)) if state[k].shape != expected[k].shape]
    if missing or unexpected or misshaped or explain:
        parts = [explain] if explain else []
        for title, items in (("missing", missing), ("unexpected", unexpected)):
            if items:
                parts.append(f"{len(items)} {title} keys: {_summarise(items)}")
        if misshaped:
            shown = ", ".join(misshaped[:12]) + (", ..." if len(misshaped) > 12 else "")
            parts.append(f"{len(misshaped)} mis-shaped keys: {shown}")
        declares = f" that {declared_by} declares" if declared_by and not explain else ""  # explain names it
        raise CheckpointError(f"{where}: weights do not match the architecture{declares}; " + "; ".join(parts))


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}


def parse_dtype(dtype: str | torch.dtype | None, where: str = "dtype") -> torch.dtype | None:
    """'float32', 'bfloat16', 'float16', 'float64' (or a torch dtype) -> the torch dtype; None: the stored one."""
    if dtype is None or isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if isinstance(dtype, str) and dtype.removeprefix("torch.") in DTYPES:
        return DTYPES[dtype.removeprefix("torch.")]
    raise CheckpointError(f"{where}: {dtype!r} is not a dtype vit-explorer runs in; choose one of {', '.join(DTYPES)} "
                          "(or none, to keep the weights' own)")


def stored_dtype(state: Mapping[str, torch.Tensor]) -> torch.dtype:
    """The floating-point dtype that holds most of the weights (float32 when there are none)."""
    counts: dict[torch.dtype, int] = {}
    for t in state.values():
        if t.is_floating_point():
            counts[t.dtype] = counts.get(t.dtype, 0) + t.numel()
    return max(counts, key=lambda d: counts[d]) if counts else torch.float32


def build_model(config: ViTConfig, state: dict[str, torch.Tensor], where: str, declared_by: str = "the config",
                names: Mapping[str, str] | None = None, dtype: torch.dtype | None = None) -> VisionTransformer:
    """Build the model on the meta device (no allocation), check the weights, then assign them.

    `declared_by` and `names` (our dimension -> the declaring file's field) word the message when a
    declared dimension disagrees with the tensors. The model keeps the weights' own dtype (`stored_dtype`: a
    bf16 checkpoint runs in bf16, as torch runs it), or `dtype` when given (an upcast); tensors in another
    dtype are converted one at a time, the memory-mapped original released as its copy is made, so there is
    never a second full copy.
    """
    target = dtype or stored_dtype(state)
    with torch.device("meta"):
        model = VisionTransformer(config)
    check_state_dict(model, state, where, dims_disagreement(config, state, declared_by, names or {}), declared_by)
    for key in list(state):
        value = state[key]
        if value.is_floating_point() and value.dtype != target:
            state[key] = value.to(target)
            release(value)
            del value
    model.load_state_dict(state, assign=True)
    # buffers that are not saved (the zero [MASK] when there is no learned one) were on meta
    for name, buf in list(model.named_buffers()):
        if buf.is_meta:
            module_name, _, attr = name.rpartition(".")
            module = model.get_submodule(module_name) if module_name else model
            module.register_buffer(attr, torch.zeros(buf.shape, dtype=target if buf.is_floating_point() else buf.dtype),
                                   persistent=False)
    return model.eval()
