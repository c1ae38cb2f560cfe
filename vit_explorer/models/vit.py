"""The glass-box Vision Transformer: ViT, DeiT (distilled), CaiT, DINOv2 (registers), CLIP, SigLIP,
MAE, DeiT III, BEiT and EVA-02 in one readable forward pass.

Token layout inside the self-attention blocks: [prefix tokens][patches in raster order], with
prefix = (), ("cls",) or ("cls", "dist"), followed by register tokens ("reg0", ...) if any. CaiT has
no prefix there; its [CLS] joins in the class-attention stage. Every stage is a named hook site
(models/hooks.py: `run_with_cache`, `run_with_hooks`, `hook_dict`, TransformerLens's names);
`forward_intermediates` returns the stages views ask for by their stable capture names.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from . import position
from .blocks import Block, ClassAttentionBlock
from .config import ConfigError, TokenLayout, ViTConfig
from .hooks import HookedMixin, HookFn, HookPoint
from .norms import make_norm
from .pooling import POOLS
from .stems import make_stem

EMBED_STAGES = ("stem", "patches", "masked", "with_prefix", "with_pos", "embedded")
CAPTURE_KEYS = EMBED_STAGES + ("hidden_states", "attentions", "class_tokens", "class_attentions", "pool_attention",
                               "pre_logits")
MASK_MODES = ("replace", "bert")
_EXTRA_REGISTERS = threading.local()  # this thread's test-time registers: id(model) -> how many
# a capture name -> the sites whose values it holds: one tensor, or a list with one per block (per
# class-attention block); attentions come back as (B, heads, T, T), class attentions as (B, heads, 1, 1+N)
STAGE_SITES = {"stem": "hook_stem", "patches": "hook_embed", "masked": "hook_masked",
               "with_prefix": "hook_with_prefix", "with_pos": "hook_with_pos", "embedded": "hook_embedded",
               "pool_attention": "attn_pool.hook_pattern", "pre_logits": "hook_pooled"}
BLOCK_SITES = {"hidden_states": ("blocks", "hook_resid_post"), "attentions": ("blocks", "attn.hook_pattern"),
               "class_tokens": ("class_blocks", "hook_resid_post"),
               "class_attentions": ("class_blocks", "attn.hook_pattern")}


def _capture_names(capture: Iterable[str] | str) -> set[str]:
    if isinstance(capture, str):  # 'all' or a single name; set('attentions') would be its letters
        capture = CAPTURE_KEYS if capture == "all" else (capture,)
    want = set(capture)
    unknown = want - set(CAPTURE_KEYS)
    if unknown:
        raise ValueError(f"unknown capture keys {sorted(unknown)}; choose from {CAPTURE_KEYS}")
    return want


class VisionTransformer(HookedMixin, nn.Module):
    attn_pool: nn.Module  # an attention pool's module (pooling.Pool.module), where the pool has one
    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.config = config
        d = config.embed_dim
        self.patch_embed = make_stem(config)
        self.embed_norm = make_norm(config.norm, d, config.layer_norm_eps) if config.embed_norm else nn.Identity()

        if config.prefix_tokens in ("cls", "cls+dist"):
            self.cls_token = nn.Parameter(torch.zeros(1, 1, d))
        if config.distilled:
            self.dist_token = nn.Parameter(torch.zeros(1, 1, d))
        if config.reg_tokens:
            self.reg_token = nn.Parameter(torch.zeros(1, config.reg_tokens, d))
        if config.mask_token:
            self.mask_token = nn.Parameter(torch.zeros(1, 1, d))
        else:  # no learned [MASK]: masked patches become zero vectors; not a parameter, not saved
            self.register_buffer("mask_token", torch.zeros(1, 1, d), persistent=False)

        self.pos_scheme = position.SCHEMES[config.pos_embed]
        for name, parameter in self.pos_scheme.create(config).items():
            setattr(self, name, parameter)
        self.pos_drop = nn.Dropout(config.pos_drop_rate)
        eps = config.layer_norm_eps
        self.norm_pre = make_norm(config.norm, d, eps) if config.pre_norm else nn.Identity()

        n_blocks = config.depth
        dpr = [config.drop_path_rate * i / max(n_blocks - 1, 1) for i in range(n_blocks)]
        self.blocks = nn.ModuleList(Block(config, dpr[i]) for i in range(n_blocks))
        self.class_blocks = nn.ModuleList(ClassAttentionBlock(config) for _ in range(config.class_attn_depth))
        # the final norm: on every token, or (fc_norm) on the pooled vector
        self.norm = nn.Identity() if config.fc_norm else make_norm(config.norm, d, eps)
        self.fc_norm = make_norm(config.norm, d, eps) if config.fc_norm else nn.Identity()
        self.pool = POOLS[config.pool]
        pool_module = self.pool.module(config)
        if pool_module is not None:
            self.attn_pool = pool_module
        if config.proj_dim:
            self.proj = nn.Linear(config.pooled_dim, config.proj_dim, bias=False)
        self.head_drop = nn.Dropout(config.drop_rate)
        self.head = nn.Linear(config.pooled_dim, config.num_classes) if config.num_classes else nn.Identity()
        if config.distilled and config.dist_head:
            self.head_dist = nn.Linear(d, config.num_classes) if config.num_classes else nn.Identity()
        # the embedding's sites, in the order the pass reaches them
        self.hook_stem = HookPoint("hook_stem")  # (B, D, gh, gw) the stem's output
        self.hook_embed = HookPoint("hook_embed")  # (B, N, D) the patch tokens
        self.hook_masked = HookPoint("hook_masked")  # (B, N, D) after [MASK] replaced the masked patches
        self.hook_with_prefix = HookPoint("hook_with_prefix")  # (B, T, D) [CLS], distillation, registers in front
        self.hook_pos_embed = HookPoint("hook_pos_embed")  # (1, T, D) the additive position embedding, as added
        self.hook_with_pos = HookPoint("hook_with_pos")  # (B, T, D)
        self.hook_embedded = HookPoint("hook_embedded")  # (B, T, D) what the first block reads
        self.hook_ln_final = HookPoint("ln_final.hook_normalized")  # (B, T, D) after the final norm
        self.hook_pooled = HookPoint("hook_pooled")  # (B, pooled_dim) what the head reads
        self.init_weights()
        self.name_hooks()

    # ------------------------------------------------------------------ setup
    def init_weights(self) -> None:
        """timm-style init: truncated normal (std 0.02) for tokens, tables and Linear weights."""
        if next(self.parameters()).is_meta:  # shapes only, for a checkpoint's weights (init on meta is slow)
            return
        for name, p in self.named_parameters():
            if name in ("cls_token", "dist_token", "reg_token", "mask_token", "attn_pool.latent") or \
                    name.startswith("pos_embed") or name.endswith("relative_position_bias_table"):
                nn.init.trunc_normal_(p, std=0.02)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        for block in self.blocks:
            if isinstance(block, Block) and block.attn.talking_heads:  # start talking heads as identity mixing
                for lin in (block.attn.proj_l, block.attn.proj_w):
                    nn.init.eye_(lin.weight)
                    nn.init.zeros_(lin.bias)

    @property
    def dtype(self) -> torch.dtype:
        """The dtype the model runs in: its weights' (a bf16 checkpoint's stay bf16)."""
        return next(self.parameters()).dtype

    @property
    def prefix_names(self) -> tuple[str, ...]:
        return self.config.prefix_names

    def layout(self, image_size: tuple[int, int] | None = None) -> TokenLayout:
        """The token layout for an input of image_size (H, W) (default: the configured size); inside
        `test_time_registers(k)` it has k more registers, after the model's own prefix tokens."""
        h, w = image_size or self.config.image_size
        p = self.config.patch_size
        r = self.config.reg_tokens
        extra = tuple(f"reg{r + i}" for i in range(self.extra_registers))
        return TokenLayout(self.prefix_names + extra, (h // p, w // p), p, bool(self.config.class_attn_depth))

    @contextmanager
    def test_time_registers(self, k: int = 1) -> Iterator[TokenLayout]:
        """Passes inside the block run with k extra zero tokens after the prefix tokens (test-time registers,
        Jiang et al. 2025): zero at `hook_with_prefix`, no position embedding, named `reg{i}` in the layout.
        Yields the layout at the configured size; what reads or writes them is hooks on the sites."""
        if self.config.class_attn_depth:
            raise ConfigError("test-time registers join the self-attention blocks, which CaiT's [CLS] skips: "
                              "CaiT has no place for them")
        if not 1 <= k <= 64:
            raise ValueError(f"test-time registers: k must be 1..64, got {k}")
        counts: dict[int, int] = _EXTRA_REGISTERS.__dict__.setdefault("counts", {})
        before = counts.get(id(self), 0)
        counts[id(self)] = before + k
        try:
            yield self.layout()
        finally:
            if before:
                counts[id(self)] = before
            else:
                del counts[id(self)]

    @property
    def extra_registers(self) -> int:
        """Test-time registers of the passes this thread runs (Jiang et al. 2025): zero tokens after the prefix
        tokens inside `test_time_registers(k)`; the layout names them as registers, so pooling, RoPE and views skip
        them. Per thread, as per-pass hooks are: the app's workers share one model."""
        counts: dict[int, int] = getattr(_EXTRA_REGISTERS, "counts", {})
        return counts.get(id(self), 0)

    def check_image_size(self, h: int, w: int) -> tuple[int, int]:
        p = self.config.patch_size
        if h % p or w % p or h < p or w < p:
            raise ConfigError(f"input {h}x{w} is not a positive multiple of the patch size {p}")
        return h // p, w // p

    # ------------------------------------------------------------------ position embeddings
    def position_embedding(self, grid: tuple[int, int]) -> torch.Tensor | None:
        """Additive PE for a grid as (prefix + patches, D), one row per token of the sequence.

        Prefix tokens get the scheme's learned rows (learned 1D with `pos_embed_prefix`: [CLS] and the
        distillation token) or zero rows (every other prefix token, registers always).
        Learned tables are resampled (bicubic, explicit size, prefix rows untouched) when the grid
        differs from the one they were trained for. None for schemes that add nothing ('none', 'rope').
        """
        cfg = self.config
        table = self.pos_scheme.table(self, grid)
        if table is None:
            return None
        table = table.to(self.mask_token.device, self.mask_token.dtype)
        k = self.pos_scheme.prefix_rows(cfg)
        missing = cfg.num_prefix_tokens - k  # prefix tokens without a row: they come after those with one
        if not missing:
            return table
        return torch.cat([table[:k], table.new_zeros(missing, cfg.embed_dim), table[k:]], dim=0)

    def rope_angles(self, grid: tuple[int, int]) -> torch.Tensor | None:
        angles = self.pos_scheme.rotary(self.config, grid)
        return None if angles is None else angles.to(self.mask_token.device)

    # ------------------------------------------------------------------ masking
    def apply_mask(self, patches: torch.Tensor, mask: torch.Tensor, mode: str = "replace",
                   generator: torch.Generator | None = None) -> torch.Tensor:
        """Replace the embeddings of masked patches (mask: (B, N) or (N,) bool) with [MASK].

        mode='bert' corrupts as BERT/ViT-MPP do: of the masked patches 80% get [MASK], 10% the
        embedding of a random other patch of the same image, 10% stay unchanged.
        """
        if mode not in MASK_MODES:
            raise ValueError(f"mask mode must be one of {MASK_MODES}, got {mode!r}")
        b, n, d = patches.shape
        mask = mask.to(patches.device, torch.bool)
        if mask.ndim == 1:
            mask = mask.expand(b, -1)
        if mask.shape != (b, n):
            raise ValueError(f"mask has shape {tuple(mask.shape)}; expected ({b}, {n}) for a {n}-patch grid")
        token = self.mask_token.to(patches.dtype).expand(b, n, d)
        if mode == "replace":
            return torch.where(mask[..., None], token, patches)
        u = torch.rand(b, n, generator=generator, device="cpu").to(patches.device)
        use_mask = mask & (u < 0.8)
        use_random = mask & (u >= 0.8) & (u < 0.9)
        other = torch.randint(0, n, (b, n), generator=generator, device="cpu").to(patches.device)
        shuffled = torch.gather(patches, 1, other[..., None].expand(b, n, d))  # (B, N, D)
        out = torch.where(use_random[..., None], shuffled, patches)
        return torch.where(use_mask[..., None], token, out)

    # ------------------------------------------------------------------ the forward pass
    def forward_intermediates(
        self,
        pixel_values: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        mask_mode: str = "replace",
        head_mask: torch.Tensor | None = None,
        capture: Iterable[str] | str = (),
        generator: torch.Generator | None = None,
    ) -> dict[str, Any]:
        """Run the model and return, by stable names, what `capture` asks for (each a hook site's value).

        Always returned: 'logits' (B, classes) (DeiT: mean of both heads), 'head_logits'
        ({'cls': ..., 'dist': ...}; only 'cls' when dist_head=False) and 'layout' (TokenLayout).
        Capturable (capture='all' for every one): see CAPTURE_KEYS and STAGE_SITES / BLOCK_SITES. 'attentions' is a
        list with one (B, heads, T, T) tensor per block (capturing them forms them explicitly in every block);
        'class_attentions' one (B, heads, 1, 1+N) per class-attention block. mask: (B, N) or (N,) bool, the
        patches [MASK] replaces; head_mask: (num_blocks, heads), 1 keeps a head, 0 removes it (at its hook_z).
        Hooks added with `add_hook` or `hooks()` run as well.
        """
        want = _capture_names(capture)
        layout = self._check_inputs(pixel_values, head_mask)
        # a bf16 model runs in bf16: float32 inputs (pixels, head masks) would promote everything they touch
        pixel_values = pixel_values.to(self.dtype)
        values: dict[str, Any] = {}
        with self._pass_edits(mask, mask_mode, generator, head_mask), self._capturing(want, values):
            x = self.embed(pixel_values, layout)  # (B, T, D)
            x = self.encode(x, layout)  # (B, T, D)
            x = self.attend_class(x)  # CaiT: (B, 1+N, D)
            head_logits = self.classify(x, layout)
        if "dist" in head_logits:
            logits = (head_logits["cls"] + head_logits["dist"]) / 2  # DeiT: average of both heads
        else:
            (logits,) = head_logits.values()
        return {**values, "logits": logits, "head_logits": head_logits, "layout": layout}

    def _pass_edits(self, mask: torch.Tensor | None, mask_mode: str, generator: torch.Generator | None,
                    head_mask: torch.Tensor | None) -> Any:
        """[MASK] at hook_masked and the head mask at each block's attn.hook_z, as hooks of this pass."""
        hooks: list[tuple[str, HookFn]] = []
        if mask is not None:
            if mask_mode not in MASK_MODES:
                raise ValueError(f"mask mode must be one of {MASK_MODES}, got {mask_mode!r}")
            hooks.append(("hook_masked", lambda x, hook: self.apply_mask(x, mask, mask_mode, generator)))
        if head_mask is not None:
            for block, keep in zip(self.all_blocks(), head_mask.to(self.dtype), strict=True):
                hooks.append((block.attn.hook_z.name, _head_mask(keep)))
        return self.hooks(hooks, first=True)

    def _capturing(self, want: set[str], values: dict[str, Any]) -> Any:
        """Hooks that keep the captured values (in the autograd graph, as the pass computed them)."""
        fwd: list[tuple[str, HookFn]] = []
        for key in want & set(STAGE_SITES):
            if STAGE_SITES[key] in self.hook_dict:
                fwd.append((STAGE_SITES[key], _keeper(values, key)))
        for key in want & set(BLOCK_SITES):
            stack, site = BLOCK_SITES[key]
            if not len(getattr(self, stack)):
                continue
            values[key] = []
            for i in range(len(getattr(self, stack))):
                fwd.append((f"{stack}.{i}.{site}", _keeper(values, key, append=True)))
        return self.hooks(fwd)

    def all_blocks(self) -> list[Block | ClassAttentionBlock]:
        """The self-attention blocks, then CaiT's class-attention blocks: num_blocks in all."""
        return [*self.blocks, *self.class_blocks]

    def _check_inputs(self, pixel_values: torch.Tensor, head_mask: torch.Tensor | None) -> TokenLayout:
        cfg = self.config
        if pixel_values.ndim != 4 or pixel_values.shape[1] != cfg.in_chans:
            raise ValueError(f"expected images (B, {cfg.in_chans}, H, W), got {tuple(pixel_values.shape)}")
        self.check_image_size(pixel_values.shape[2], pixel_values.shape[3])
        n_layers = cfg.num_blocks
        if head_mask is not None and tuple(head_mask.shape) != (n_layers, cfg.num_heads):
            raise ValueError(f"head_mask must have shape ({n_layers}, {cfg.num_heads}), got {tuple(head_mask.shape)}")
        return self.layout((pixel_values.shape[2], pixel_values.shape[3]))

    def embed(self, pixel_values: torch.Tensor, layout: TokenLayout) -> torch.Tensor:
        """Image -> the token sequence the blocks read, (B, T, D); stages 1-4 of the forward pass."""
        b = pixel_values.shape[0]
        # 1. stem: image -> grid of patch embeddings -> sequence in raster order
        feat = self.hook_stem(self.patch_embed(pixel_values))  # (B, D, gh, gw)
        x = self.hook_embed(self.embed_norm(feat.flatten(2).transpose(1, 2)))  # (B, N, D); AIMv2 norms them

        # 2. [MASK] replaces chosen patch embeddings before prefix tokens and PE are added (a hook of the pass)
        x = self.hook_masked(x)

        # 3. prefix tokens ([CLS], distillation, registers) in front of the patches
        prefix = [getattr(self, f"{name}_token") for name in self.prefix_names if not name.startswith("reg")]
        if self.config.reg_tokens:
            prefix.append(self.reg_token)  # (1, R, D): every register at once
        if self.extra_registers:
            prefix.append(x.new_zeros(1, self.extra_registers, x.shape[-1]))  # (1, k, D) test-time registers
        x = self.hook_with_prefix(torch.cat([token.expand(b, -1, -1) for token in prefix] + [x], dim=1))  # (B, T, D)

        # 4. position embedding (additive schemes), then dropout and (CLIP) the pre-norm
        pe = self.position_embedding(layout.grid)
        if pe is not None and self.extra_registers:  # no position for a test-time register: zero rows
            p = self.config.num_prefix_tokens
            pe = torch.cat([pe[:p], pe.new_zeros(self.extra_registers, pe.shape[-1]), pe[p:]], dim=0)
        if pe is not None:
            x = x + self.hook_pos_embed(pe.to(x.dtype)[None])  # (B, P+N, D)
        x = self.hook_with_pos(x)
        return self.hook_embedded(self.norm_pre(self.pos_drop(x)))

    def encode(self, x: torch.Tensor, layout: TokenLayout) -> torch.Tensor:
        """5. the self-attention blocks."""
        rope = self.rope_angles(layout.grid)
        for block in self.blocks:
            bias = self.pos_scheme.attention_bias(block, self.config, layout.grid, layout.num_prefix_tokens)
            x = block(x, rope=rope, bias=bias, num_prefix=layout.num_prefix_tokens)
        return x

    def attend_class(self, x: torch.Tensor) -> torch.Tensor:
        """6. CaiT: [CLS] joins now and only it is updated by class attention; other models pass through."""
        if not self.config.class_attn_depth:
            return x
        cls = self.cls_token.expand(x.shape[0], -1, -1)  # (B, 1, D)
        for block in self.class_blocks:
            assert isinstance(block, ClassAttentionBlock)
            if block.hook_resid_pre.active:  # the sequence this block reads; patched patches stay patched
                u = block.hook_resid_pre(torch.cat([cls, x], dim=1))  # (B, 1+N, D)
                cls, x = u[:, :1], u[:, 1:]
            cls = block(x, cls)
        return torch.cat([cls, x], dim=1)  # (B, 1+N, D)

    def classify(self, x: torch.Tensor, layout: TokenLayout) -> dict[str, torch.Tensor]:
        """7. final norm, pooling, then the logits of each head: a classifier's, the projection to a
        joint space (CLIP), or with neither the pooled features themselves."""
        cfg = self.config
        x = self.hook_ln_final(self.norm(x))
        pooled = self.pool(self, x, layout)  # an attention pool's attention: attn_pool.hook_pattern
        pooled = self.hook_pooled(pooled)
        if cfg.proj_dim:
            return {cfg.pool: self.proj(pooled)}
        head_logits = {cfg.pool: self.head(self.head_drop(pooled))}
        if cfg.distilled and cfg.dist_head:
            head_logits["dist"] = self.head_dist(self.head_drop(x[:, 1]))
        return head_logits

    def forward(self, pixel_values: torch.Tensor, *, mask: torch.Tensor | None = None,
                head_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, classes); for DeiT with dist_head the mean of the class and distillation heads."""
        return self.forward_intermediates(pixel_values, mask=mask, head_mask=head_mask)["logits"]


def _head_mask(keep: torch.Tensor) -> HookFn:
    """Zero whole heads at a block's hook_z (B, T, heads, hd): keep (heads,) 1 or 0; exact on any path."""
    return lambda z, hook: z * keep.to(z.device, z.dtype).view(1, 1, -1, 1)


def _keeper(values: dict[str, Any], key: str, append: bool = False) -> HookFn:
    def keep(x: torch.Tensor, hook: HookPoint) -> None:
        if append:
            values[key].append(x)
        else:
            values[key] = x
    return keep


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
