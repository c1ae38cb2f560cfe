"""The typed configuration of the glass-box ViT family, validated on construction."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any

from ..errors import UserError
from . import pooling
from .norms import NORMS
from .position import SCHEMES, Rotary2D
from .stems import HYBRID_LAYERS, HYBRID_WIDTHS, hybrid_parameters
from .stems import STEMS as STEM_CLASSES

STEMS = tuple(STEM_CLASSES)  # described in stems.py
PREFIX_TOKENS = ("cls", "cls+dist", "none")
PREFIX_NAMES = {"cls": ("cls",), "cls+dist": ("cls", "dist"), "none": ()}  # learned tokens in front of the patches
POOLS = tuple(pooling.POOLS)  # what the head reads: the pooling heads' table (pooling.py)
# the MLP of each block: GELU (exact), GELU's tanh approximation (SigLIP in HF), CLIP's quick-GELU
# x * sigmoid(1.702 x), or SwiGLU silu(x W_g) * (x W_x) (DINOv2-giant, EVA-02)
MLPS = ("gelu", "gelu_tanh", "quick_gelu", "swiglu")
# Every valid arrangement of the tokens, by the name the builder shows: the fields that make it (CaiT's
# number of class-attention blocks is the builder's own control; one stands for "some" here).
TOKEN_LAYOUTS: dict[str, dict[str, Any]] = {
    "[CLS]": dict(prefix_tokens="cls", pool="cls", class_attn_depth=0),
    "[CLS], head on the mean of patches": dict(prefix_tokens="cls", pool="gap", class_attn_depth=0),
    "[CLS] + distillation (DeiT)": dict(prefix_tokens="cls+dist", pool="cls", class_attn_depth=0),
    "none, head on the mean of patches (GAP)": dict(prefix_tokens="none", pool="gap", class_attn_depth=0),
    "[CLS] joins in class attention (CaiT)": dict(prefix_tokens="cls", pool="cls", class_attn_depth=1,
                                                   pos_embed_prefix=False),
    "[CLS] + 4 registers (DINOv2)": dict(prefix_tokens="cls", pool="cls", class_attn_depth=0, reg_tokens=4),
    "none, attention-pool head (SigLIP)": dict(prefix_tokens="none", pool="map", class_attn_depth=0),
    "[CLS] and the mean of patches (DINOv2 classifier)": dict(prefix_tokens="cls", pool="cls+mean",
                                                              class_attn_depth=0),
}
POS_EMBEDS = tuple(SCHEMES)  # the position-embedding schemes, described in position.py
PE_RESAMPLES = ("bicubic", "bilinear")  # SigLIP 2 (NaFlex) resamples its table bilinearly for each image's grid

# Refuse configurations that would allocate more than this many parameters: a typo such as
# depth=12000 should produce a message, not a machine that swaps for ten minutes. Real models reach ViT-22B
# (21.7e9) and DINOv3 7B (6.7e9); whether one of them fits is the memory check's to say (checkpoints/memory.py).
MAX_PARAMETERS = 25_000_000_000
MIN_ROPE_THETA = 1.0  # RoPE's base frequency (real models: 10, 100, 10000)


class ConfigError(UserError, ValueError):
    """A configuration that cannot build a model; the message says what to change."""


def _need(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def mlp_ratio_for(width: int, hidden: int) -> float:
    """An mlp_ratio r with int(width * r) == hidden (hidden / width can fall just short in floating point)."""
    ratio = hidden / width
    return ratio if int(width * ratio) == hidden else (hidden + 0.5) / width


@dataclass
class ViTConfig:
    """Everything needed to build a `VisionTransformer`; presets live in `presets.py`."""

    image_size: tuple[int, int] = (224, 224)  # (H, W) the model is built for; PEs resample to others
    patch_size: int = 16  # the stem's total stride P; the grid is (H/P, W/P)
    in_chans: int = 3
    num_classes: int = 1000  # 0 = no classifier, the model returns pooled features
    embed_dim: int = 768  # D
    depth: int = 12  # number of self-attention blocks
    num_heads: int = 12
    mlp_ratio: float = 4.0  # MLP hidden width = mlp_ratio * D (SwiGLU: of each of its two input branches)
    mlp: str = "gelu"  # one of MLPS
    mlp_norm: bool = False  # a LayerNorm on the MLP's hidden units before its output layer (EVA-02's sub-LN)
    qkv_bias: bool = True
    k_bias: bool = True  # with qkv_bias, keys get a bias too; BEiT, EVA-02 have none (softmax ignores it anyway)
    pre_norm: bool = False  # a LayerNorm on the tokens before the blocks (CLIP); the stem then has no bias
    stem: str = "patchify"  # "patchify" (Conv2d k=P s=P) or "conv" (Xiao et al. 2021)
    conv_stem_channels: tuple[int, ...] = ()  # conv stem 3x3 widths; () = derived from D and P
    conv_stem_strides: tuple[int, ...] = ()  # conv stem 3x3 strides (product = P); () = all 2
    hybrid_layers: tuple[int, ...] = ()  # hybrid stem: bottleneck blocks per ResNet stage; () = ResNet-50's for P
    prefix_tokens: str = "cls"  # "cls", "cls+dist" (DeiT) or "none"
    # DeiT: a classifier on the distillation token, averaged with [CLS]'s; HF DeiTForImageClassification has none
    dist_head: bool = True
    # register tokens after [CLS] (and the distillation token): learned prefix tokens with no position
    # embedding, scratch space for the blocks (DINOv2 with registers)
    reg_tokens: int = 0
    pool: str = "cls"  # what the head reads, one of POOLS
    fc_norm: bool = False  # pool='gap': the final norm normalises the pooled vector, not each token (MAE, BEiT)
    proj_dim: int = 0  # >0: a bias-free projection of the pooled features to a joint image-text space (CLIP)
    pos_embed: str = "learned"  # one of POS_EMBEDS
    pos_embed_prefix: bool = True  # learned 1D PE has rows for the prefix tokens (ViT, DeiT); CaiT: False
    pe_resample_antialias: bool = True  # timm antialiases when shrinking a learned PE; HF does not
    rope_theta: float = 100.0  # base frequency of 2D axial RoPE (Heo et al. 2024; EVA-02: 10000)
    rope_ref_grid: tuple[int, ...] = ()  # (rows, cols): RoPE positions rescaled to span it (EVA-02); () = indices
    mask_token: bool = False  # learnable [MASK]; without it masked patches become zeros (no parameter)
    layer_norm_eps: float = 1e-6  # timm 1e-6; HF ViT configs default to 1e-12
    drop_rate: float = 0.0  # dropout after dense layers (MLP, attention projection) and before the head
    pos_drop_rate: float = 0.0  # dropout after adding the position embedding
    attn_drop_rate: float = 0.0  # dropout on the attention probabilities
    drop_path_rate: float = 0.0  # stochastic depth, rising linearly to this value in the last block
    layer_scale_init: float | None = None  # LayerScale gamma init (CaiT: 1e-5); None = no LayerScale
    talking_heads: bool = False  # CaiT's talking-heads attention in the self-attention blocks
    class_attn_depth: int = 0  # CaiT: class-attention blocks after which only [CLS] is updated
    class_attn_mlp_ratio: float = 4.0
    # DINOv3, AIMv2, the Perception Encoder (issue 18)
    norm: str = "layernorm"  # every norm of the model, one of NORMS ('rmsnorm': AIMv2)
    embed_norm: bool = False  # a norm on the patch embeddings, before [MASK] and the position embedding (AIMv2)
    proj_bias: bool = True  # biases in attention's output projection and the MLP (AIMv2 has none)
    rope_offset: float = 0.0  # added to RoPE's row and column indices (timm's rope_grid_offset; PE: 1)
    pool_heads: int = 0  # heads of the attention-pool head; 0 = num_heads (PE: 8)
    pool_mlp_ratio: float = 0.0  # MLP width of the attention-pool head / D; 0 = mlp_ratio
    pool_prefix: bool = False  # the attention-pool head reads the prefix tokens too (timm's Eva: PE's [CLS])
    pe_resample: str = "bicubic"  # how a learned table follows another grid, one of PE_RESAMPLES (SigLIP 2: bilinear)

    def __post_init__(self) -> None:
        self._check_types()
        if isinstance(self.image_size, int):
            self.image_size = (self.image_size, self.image_size)
        self.image_size = tuple(int(s) for s in self.image_size)  # type: ignore[assignment]
        self.conv_stem_channels = tuple(int(c) for c in self.conv_stem_channels)
        self.conv_stem_strides = tuple(int(s) for s in self.conv_stem_strides)
        self.hybrid_layers = tuple(int(s) for s in self.hybrid_layers)
        self.rope_ref_grid = tuple(int(s) for s in self.rope_ref_grid)
        self._validate()

    # ------------------------------------------------------------------ validation
    def _check_types(self) -> None:
        """Each field's type, before anything computes with it: an int field takes an integral number
        (not a float such as 12.0 or a bool), a float field a finite real number, a bool field a bool
        (not "false"), a size field an int or a pair of ints. Also the ranges the rest relies on to stay
        finite (positive sizes, layer_norm_eps > 0, rope_theta >= 1, a bounded mlp_ratio)."""
        for f in fields(self):
            value, kind = getattr(self, f.name), _FIELD_KINDS[str(f.type)]
            if not _KIND_CHECKS[kind](value):
                raise ConfigError(f"{f.name} must be {_KIND_NAMES[kind]}, got {value!r} ({type(value).__name__})")
        for name in ("image_size", "conv_stem_channels", "conv_stem_strides", "rope_ref_grid", "hybrid_layers"):
            sizes = getattr(self, name)
            if not all(1 <= int(s) <= MAX_SIZE for s in ((sizes,) if isinstance(sizes, numbers.Integral) else sizes)):
                raise ConfigError(f"{name} must hold integers from 1 to {MAX_SIZE}, got {sizes!r}")
        for name in ("patch_size", "in_chans", "embed_dim", "depth", "num_heads", "num_classes", "class_attn_depth",
                     "reg_tokens", "proj_dim"):
            if getattr(self, name) > MAX_SIZE:
                raise ConfigError(f"{name} must be at most {MAX_SIZE}, got {getattr(self, name)}")
        for name, high in (("layer_norm_eps", 1.0), ("mlp_ratio", 64.0), ("class_attn_mlp_ratio", 64.0)):
            if not 0 < getattr(self, name) <= high:
                raise ConfigError(f"{name} must be > 0 and at most {high}, got {getattr(self, name)}")
        if not 0 <= self.pool_mlp_ratio <= 64.0 or not 0 <= self.pool_heads <= MAX_SIZE or abs(self.rope_offset) > 1e6:
            raise ConfigError(f"pool_mlp_ratio must be from 0 to 64, pool_heads from 0 to {MAX_SIZE} and rope_offset "
                              f"within 1e6, got {self.pool_mlp_ratio}, {self.pool_heads}, {self.rope_offset}")
        if not MIN_ROPE_THETA <= self.rope_theta <= 1e9:  # the frequencies are 1 / theta^k
            raise ConfigError(f"rope_theta (timm: rope_temperature) must be from {MIN_ROPE_THETA:g} to 1e9, got "
                              f"{self.rope_theta:g}: below 1 the rotation frequencies grow instead of falling, and a "
                              "tiny base overflows them (every output NaN); real models use 10, 100 or 10000")
        if self.layer_scale_init is not None and not 0 < self.layer_scale_init <= 1e3:
            raise ConfigError(f"layer_scale_init must be None or in (0, 1000], got {self.layer_scale_init}")

    def _validate(self) -> None:
        for name in ("patch_size", "in_chans", "embed_dim", "num_heads"):
            _need(getattr(self, name) >= 1, f"{name} must be at least 1, got {getattr(self, name)}")
        _need(self.depth >= 0 and self.class_attn_depth >= 0, "depth and class_attn_depth must be >= 0")
        _need(self.num_blocks >= 1, "the model needs at least one block (depth >= 1)")
        _need(self.num_classes >= 0, f"num_classes must be >= 0, got {self.num_classes}")
        _need(self.reg_tokens >= 0 and self.proj_dim >= 0, "reg_tokens and proj_dim must be >= 0")
        _need(len(self.image_size) == 2, f"image_size must be (H, W), got {self.image_size}")
        h, w = self.image_size
        p = self.patch_size
        _need(
            h % p == 0 and w % p == 0 and h >= p and w >= p,
            f"image_size {h}x{w} is not a positive multiple of patch_size {p}: "
            f"use e.g. {max(1, round(h / p)) * p}x{max(1, round(w / p)) * p}",
        )
        _need(self.stem in STEMS, f"stem must be one of {STEMS}, got {self.stem!r}")
        _need(
            self.prefix_tokens in PREFIX_TOKENS,
            f"prefix_tokens must be one of {PREFIX_TOKENS}, got {self.prefix_tokens!r}",
        )
        _need(self.pool in POOLS, f"pool must be one of {POOLS}, got {self.pool!r}")
        _need(self.mlp in MLPS, f"mlp must be one of {MLPS}, got {self.mlp!r}")
        _need(self.norm in NORMS, f"norm must be one of {tuple(NORMS)}, got {self.norm!r}")
        _need(self.pe_resample in PE_RESAMPLES, f"pe_resample must be one of {PE_RESAMPLES}, got {self.pe_resample!r}")
        self._validate_heads()
        _need(self.pos_embed in POS_EMBEDS, f"pos_embed must be one of {POS_EMBEDS}, got {self.pos_embed!r}")
        _need(
            self.embed_dim % self.num_heads == 0,
            f"embed_dim {self.embed_dim} must be divisible by num_heads {self.num_heads}",
        )
        self._validate_tokens()
        problem = SCHEMES[self.pos_embed].check(self)
        _need(problem is None, str(problem))
        if self.rope_ref_grid:
            _need(isinstance(SCHEMES[self.pos_embed], Rotary2D),
                 f"rope_ref_grid rescales RoPE positions, and pos_embed {self.pos_embed!r} has no RoPE: set it to ()")
            _need(len(self.rope_ref_grid) == 2, f"rope_ref_grid must be () or (rows, cols), got {self.rope_ref_grid}")
        if self.rope_offset:
            _need(isinstance(SCHEMES[self.pos_embed], Rotary2D),
                 f"rope_offset shifts RoPE positions, and pos_embed {self.pos_embed!r} has no RoPE: set it to 0")
        _need(self.qkv_bias or self.k_bias, "k_bias=False drops only the keys' bias, so it needs qkv_bias=True")
        for name in ("drop_rate", "pos_drop_rate", "attn_drop_rate", "drop_path_rate"):
            _need(0.0 <= getattr(self, name) < 1.0, f"{name} must be in [0, 1), got {getattr(self, name)}")
        _need(self.mlp_ratio > 0 and self.class_attn_mlp_ratio > 0, "mlp_ratio must be > 0")
        if self.stem == "conv":
            strides = self.conv_stem_strides or self._default_conv_strides()
            _need(
                math.prod(strides) == p,
                f"conv stem strides {strides} multiply to {math.prod(strides)}, not patch_size {p}",
            )
            _need(
                not self.conv_stem_channels or len(self.conv_stem_channels) == len(strides),
                f"conv_stem_channels {self.conv_stem_channels} needs one width per stride {strides}",
            )
        if self.stem == "hybrid":
            self.hybrid_plan()
        _need(not self.hybrid_layers or self.stem == "hybrid",
              f"hybrid_layers {self.hybrid_layers} are the hybrid stem's: set stem='hybrid' or hybrid_layers=()")
        _need(
            self.num_patches <= 65536,
            f"{self.num_patches} patches ({h}x{w} at patch {p}) is more than this tool handles; use a larger patch",
        )
        count = self.estimate_parameters()
        _need(
            count <= MAX_PARAMETERS,
            f"this configuration would have about {count:,} parameters (limit {MAX_PARAMETERS:,}); "
            "reduce embed_dim or depth",
        )

    def _validate_tokens(self) -> None:
        """The prefix tokens, what the head reads and CaiT's late [CLS] fit together."""
        if self.pool in ("cls", "cls+mean"):
            _need(self.prefix_tokens != "none",
                  f"pool={self.pool!r} needs a [CLS] token: set prefix_tokens='cls' or pool='gap'")
        if self.prefix_tokens == "cls+dist":
            _need(self.pool == "cls",
                 "a distilled model (prefix_tokens='cls+dist') reads its heads from tokens: set pool='cls'")
        else:
            _need(self.dist_head, "dist_head=False drops the distillation token's classifier, "
                                 "so it needs prefix_tokens='cls+dist'")
        if self.class_attn_depth:
            _need(
                self.prefix_tokens == "cls" and self.pool == "cls",
                "class-attention blocks (CaiT) update a [CLS] token: use prefix_tokens='cls', pool='cls'",
            )
            _need(not self.reg_tokens, "register tokens join the self-attention blocks, which CaiT's [CLS] skips: "
                                      "set reg_tokens=0 or class_attn_depth=0")
            _need(
                not (SCHEMES[self.pos_embed].prefix_table and self.pos_embed_prefix),
                "with class attention [CLS] joins after the position embedding: set pos_embed_prefix=False",
            )

    def _validate_heads(self) -> None:
        """Pooling, its norm, the projection and the classifier fit together."""
        if self.fc_norm and self.pool != "gap":
            raise ConfigError("fc_norm normalises the mean of the patch tokens: it needs pool='gap'")
        if self.pool == "map" and self.mlp == "swiglu":
            raise ConfigError("the attention-pool head's MLP takes a GELU-family activation: choose mlp='gelu', "
                              "'gelu_tanh' or 'quick_gelu' with pool='map'")
        if self.pool not in ("map", "query") and (self.pool_heads or self.pool_prefix) or \
                self.pool != "map" and self.pool_mlp_ratio:
            raise ConfigError("pool_heads, pool_prefix (pool='map' or 'query') and pool_mlp_ratio (pool='map') shape "
                              "the attention-pool head: set them to 0 / False, or choose that pool")
        if self.pool_heads and self.embed_dim % self.pool_heads:
            raise ConfigError(f"embed_dim {self.embed_dim} must be divisible by pool_heads {self.pool_heads}")
        if self.proj_dim and self.num_classes:
            raise ConfigError("a projection to a joint space (proj_dim) takes the classifier's place: set "
                              "num_classes=0 or proj_dim=0")

    def hybrid_plan(self) -> tuple[int, ...]:
        """Bottleneck blocks in each stage of the hybrid stem's ResNet; its stride is 4, then 2 per further stage."""
        if not self.hybrid_layers:
            _need(self.patch_size in HYBRID_LAYERS,
                  f"the hybrid stem's ResNet has a stride of 4, 8, 16 or 32 (1 to 4 stages), not patch_size "
                  f"{self.patch_size}: set patch_size to one of {tuple(HYBRID_LAYERS)}")
            return HYBRID_LAYERS[self.patch_size]
        n = len(self.hybrid_layers)
        _need(1 <= n <= 4 and 4 * 2 ** (n - 1) == self.patch_size,
              f"hybrid_layers {self.hybrid_layers} give a ResNet of {n} stages, stride "
              f"{4 * 2 ** (n - 1) if 1 <= n <= 4 else '?'}, not patch_size {self.patch_size}: give 1 to 4 stages "
              f"with patch_size 4 x 2^(stages - 1), or hybrid_layers=() for ResNet-50's")
        return self.hybrid_layers

    def _default_conv_strides(self) -> tuple[int, ...]:
        n = round(math.log2(self.patch_size)) if self.patch_size > 1 else 0
        if 2**n != self.patch_size:
            raise ConfigError(
                f"the conv stem's default strides are all 2, so patch_size must be a power of 2 "
                f"(got {self.patch_size}); set conv_stem_strides explicitly"
            )
        return (2,) * max(n, 1) if self.patch_size > 1 else (1,)

    # ------------------------------------------------------------------ derived sizes
    @property
    def head_dim(self) -> int:
        return self.embed_dim // self.num_heads

    @property
    def num_blocks(self) -> int:
        """Every block with attention heads: the self-attention blocks, then CaiT's class-attention blocks (the rows
        of a head mask, the layers of the logit's parts)."""
        return self.depth + self.class_attn_depth

    @property
    def grid_size(self) -> tuple[int, int]:
        return (self.image_size[0] // self.patch_size, self.image_size[1] // self.patch_size)

    @property
    def num_patches(self) -> int:
        gh, gw = self.grid_size
        return gh * gw

    @property
    def prefix_names(self) -> tuple[str, ...]:
        """Names of the tokens in front of the patches during the self-attention blocks, in order:
        'cls', 'dist', then 'reg0', 'reg1', ... for register tokens."""
        if self.class_attn_depth:
            return ()  # CaiT: [CLS] joins only in the class-attention stage
        return PREFIX_NAMES[self.prefix_tokens] + tuple(f"reg{i}" for i in range(self.reg_tokens))

    @property
    def num_prefix_tokens(self) -> int:
        """Prefix tokens in front of the patches during the self-attention blocks."""
        return len(self.prefix_names)

    @property
    def mlp_hidden(self) -> int:
        """The MLP's hidden width (SwiGLU: of each branch)."""
        return int(self.embed_dim * self.mlp_ratio)

    @property
    def pool_mlp_hidden(self) -> int:
        """The attention-pool head's MLP width."""
        return int(self.embed_dim * (self.pool_mlp_ratio or self.mlp_ratio))

    @property
    def pooled_dim(self) -> int:
        """The width of what the head reads: D, or 2D for [CLS] beside the mean of the patches."""
        return pooling.POOLS[self.pool].width(self.embed_dim)

    @property
    def distilled(self) -> bool:
        return self.prefix_tokens == "cls+dist"

    def conv_stem_plan(self) -> list[tuple[int, int]]:
        """(out_channels, stride) of each 3x3 conv of the convolutional stem."""
        strides = self.conv_stem_strides or self._default_conv_strides()
        if self.conv_stem_channels:
            return list(zip(self.conv_stem_channels, strides, strict=True))
        # Xiao et al.: stride-2 convs double the width, ending at D/2 before the 1x1 projection
        # to D (ViT_C-1GF: 24, 48, 96, 192 for D = 192 would end at D; we end at D/2 so the
        # stem stays lighter than one transformer block on small models).
        n2 = sum(1 for s in strides if s == 2)
        plan, k = [], 0
        for s in strides:
            if s == 2:
                k += 1
            plan.append((max(8, self.embed_dim * 2 ** k // 2 ** (n2 + 1)), s))
        return plan

    def stem_parameters(self) -> int:
        """Parameters of the stem alone (the builder shows them beside the total)."""
        d = self.embed_dim
        bias = 0 if self.pre_norm else d
        if self.stem == "patchify":
            return self.in_chans * self.patch_size**2 * d + bias
        if self.stem == "hybrid":  # the ResNet, then a 1x1 projection of its last stage's channels
            layers = self.hybrid_plan()
            return hybrid_parameters(self.in_chans, layers) + HYBRID_WIDTHS[len(layers) - 1] * d + bias
        n, c_in = 0, self.in_chans
        for c_out, _ in self.conv_stem_plan():
            n += c_in * c_out * 9 + 2 * c_out
            c_in = c_out
        return n + c_in * d + bias

    def estimate_parameters(self) -> int:
        """Closed-form parameter count (exact for every option); used before allocating."""
        d = self.embed_dim
        nd = NORMS[self.norm][1] * d  # one norm's parameters
        dense_bias = d if self.proj_bias else 0
        n = (nd if self.embed_norm else 0) + self.stem_parameters()
        n += (len(PREFIX_NAMES[self.prefix_tokens]) + self.reg_tokens) * d
        if self.mask_token:
            n += d
        n += SCHEMES[self.pos_embed].num_parameters(self)
        n += nd if self.pre_norm else 0
        qkv_bias = (3 if self.k_bias else 2) * d if self.qkv_bias else 0
        layer_scale = 2 * d if self.layer_scale_init is not None else 0
        block = 2 * nd + 3 * d * d + qkv_bias + d * d + dense_bias + self._mlp_parameters(self.mlp_hidden) + layer_scale
        if self.talking_heads:
            block += 2 * (self.num_heads**2 + self.num_heads)
        n += self.depth * block
        ca = 2 * nd + 3 * d * d + qkv_bias + d * d + dense_bias + layer_scale
        n += self.class_attn_depth * (ca + self._mlp_parameters(int(d * self.class_attn_mlp_ratio)))
        n += nd  # final norm (before pooling, or after it with fc_norm)
        if self.pool == "map":  # latent query, q, kv, proj, norm, a plain MLP
            h = self.pool_mlp_hidden
            n += d + (d * d + d) + (2 * d * d + 2 * d) + (d * d + d) + nd + (2 * d * h + h + d)
        elif self.pool == "query":  # the query itself, keys and values, the output layer
            n += d + 2 * (d * d + (d if self.qkv_bias else 0)) + d * d + d
        n += self.pooled_dim * self.proj_dim
        heads = 2 if self.distilled and self.dist_head else 1
        if self.num_classes:
            n += heads * (self.pooled_dim * self.num_classes + self.num_classes)
        return n

    def _mlp_parameters(self, hidden: int) -> int:
        d = self.embed_dim
        branches = 2 if self.mlp == "swiglu" else 1
        bias = 1 if self.proj_bias else 0
        norm = NORMS[self.norm][1] * hidden if self.mlp_norm else 0
        return branches * (d * hidden + bias * hidden) + hidden * d + bias * d + norm

    # ------------------------------------------------------------------ (de)serialisation
    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key, value in out.items():
            if isinstance(value, tuple):
                out[key] = list(value)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ViTConfig:
        if not isinstance(data, dict):
            raise ConfigError(f"a config must be a mapping of field names to values, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown config keys {unknown}; known keys are {sorted(known)}")
        values = dict(data)
        for key in ("image_size", "conv_stem_channels", "conv_stem_strides", "rope_ref_grid", "hybrid_layers"):
            if key in values and isinstance(values[key], list):
                values[key] = tuple(values[key])
        return cls(**values)

    def replace(self, **changes: Any) -> ViTConfig:
        return ViTConfig.from_dict({**self.to_dict(), **changes})


@dataclass(frozen=True)
class TokenLayout:
    """Where each token sits in a sequence, so no view hard-codes '1 CLS + square grid'."""

    prefix_names: tuple[str, ...]  # names of the prefix tokens in order, e.g. ("cls", "dist")
    grid: tuple[int, int]  # (rows, cols) of patch tokens
    patch_size: int = 16  # stride of the stem in pixels, for distances and overlays
    class_attn: bool = False  # CaiT: [CLS] is absent from the self-attention blocks

    @property
    def num_prefix_tokens(self) -> int:
        return len(self.prefix_names)

    @property
    def registers(self) -> tuple[int, ...]:
        """Sequence indices of the register tokens (DINOv2 with registers), () when there are none."""
        return tuple(i for i, name in enumerate(self.prefix_names) if name.startswith("reg"))

    @property
    def num_patches(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def num_tokens(self) -> int:
        return self.num_prefix_tokens + self.num_patches

    def token_index(self, row: int, col: int) -> int:
        """Sequence index of the patch at (row, col)."""
        return self.num_prefix_tokens + row * self.grid[1] + col

    def patch_position(self, token: int) -> tuple[int, int] | None:
        """(row, col) of a token, or None for a prefix token."""
        if token < self.num_prefix_tokens:
            return None
        return divmod(token - self.num_prefix_tokens, self.grid[1])


# ---------------------------------------------------------------------- field types (ViTConfig._check_types)
MAX_SIZE = 1 << 20  # any single size (a side, a width, a depth, classes): far beyond real models, far below overflow


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_float(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


def _is_ints(v: Any) -> bool:
    return isinstance(v, (tuple, list)) and all(_is_int(s) for s in v)


# the type of each ViTConfig field (by its annotation) and how to check it; a new field needs its kind here
_FIELD_KINDS = {"int": "int", "float": "float", "bool": "bool", "str": "str", "tuple[int, int]": "size",
                "tuple[int, ...]": "ints", "float | None": "float?"}
_KIND_CHECKS: dict[str, Callable[[Any], bool]] = {
    "int": _is_int,
    "float": _is_float,
    "bool": lambda v: isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
    "size": lambda v: _is_int(v) or _is_ints(v),  # the length is checked with the other rules
    "ints": _is_ints,
    "float?": lambda v: v is None or _is_float(v),
}
_KIND_NAMES = {"int": "an integer (not a float or a bool)", "float": "a finite number", "bool": "true or false",
               "str": "a string", "size": "an integer or (height, width) integers",
               "ints": "a list of integers", "float?": "a finite number or None"}
