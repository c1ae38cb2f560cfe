"""The glass-box Vision Transformer: ViT, DeiT (distilled), CaiT, DINOv2 (registers), CLIP, SigLIP,
MAE, DeiT III, BEiT and EVA-02 in one readable forward pass.

Token layout inside the self-attention blocks: [prefix tokens][patches in raster order], with
prefix = (), ("cls",) or ("cls", "dist"), followed by register tokens ("reg0", ...) if any. CaiT has
no prefix there; its [CLS] joins in the class-attention stage. `forward_intermediates` is the single
call that exposes every stage.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from functools import partial
from typing import Any

import torch
from torch import nn

from . import position
from .blocks import ALL, GRAD, AttentionPool, Block, ClassAttentionBlock, QueryPool, Rows
from .config import ConfigError, TokenLayout, ViTConfig
from .norms import make_norm
from .stems import make_stem

EMBED_STAGES = ("stem", "patches", "masked", "with_prefix", "with_pos", "embedded")
CAPTURE_KEYS = EMBED_STAGES + ("hidden_states", "attentions", "class_tokens", "class_attentions", "pool_attention",
                               "pre_logits")
MASK_MODES = ("replace", "bert")
AttentionHook = Callable[[int, torch.Tensor], None]  # (block index, (B, heads, R, T) probabilities)
# (block index, site, value) -> value: blocks.Edit for every block; CaiT's class-attention blocks are counted
# after the self-attention blocks, and their "resid" is the whole sequence [CLS; patches] they read
StreamEdit = Callable[[int, str, torch.Tensor], torch.Tensor]


class Captures:
    """The intermediate values one forward pass was asked for, by name (see CAPTURE_KEYS)."""

    def __init__(self, capture: Iterable[str] | str) -> None:
        if isinstance(capture, str):  # 'all' or a single name; set('attentions') would be its letters
            capture = CAPTURE_KEYS if capture == "all" else (capture,)
        self.want = set(capture)
        unknown = self.want - set(CAPTURE_KEYS)
        if unknown:
            raise ValueError(f"unknown capture keys {sorted(unknown)}; choose from {CAPTURE_KEYS}")
        self.values: dict[str, Any] = {}

    def keep(self, name: str, value: Any) -> None:
        if name in self.want:
            self.values[name] = value


class VisionTransformer(nn.Module):
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
        if config.pool in ("map", "query"):
            self.attn_pool: AttentionPool | QueryPool = AttentionPool(config) if config.pool == "map" else \
                QueryPool(config)
        if config.proj_dim:
            self.proj = nn.Linear(config.pooled_dim, config.proj_dim, bias=False)
        self.head_drop = nn.Dropout(config.drop_rate)
        self.head = nn.Linear(config.pooled_dim, config.num_classes) if config.num_classes else nn.Identity()
        if config.distilled and config.dist_head:
            self.head_dist = nn.Linear(d, config.num_classes) if config.num_classes else nn.Identity()
        self.init_weights()

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
        """The token layout for an input of image_size (H, W) (default: the configured size)."""
        h, w = image_size or self.config.image_size
        p = self.config.patch_size
        return TokenLayout(self.prefix_names, (h // p, w // p), p, bool(self.config.class_attn_depth))

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

    @staticmethod
    def _check_rows(attn_rows: Rows, n_tokens: int) -> list[int]:
        if isinstance(attn_rows, str) or attn_rows is None:
            raise ValueError(f"attn_rows must be 'all' or a list of query indices, got {attn_rows!r}")
        rows = [int(r) for r in attn_rows]
        bad = [r for r in rows if not 0 <= r < n_tokens]
        if bad:
            raise ValueError(f"attn_rows {bad} out of range: this input has {n_tokens} tokens (0..{n_tokens - 1})")
        return rows

    # ------------------------------------------------------------------ the forward pass
    def forward_intermediates(
        self,
        pixel_values: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        mask_mode: str = "replace",
        head_mask: torch.Tensor | None = None,
        capture: Iterable[str] | str = (),
        attn_rows: Rows = ALL,
        attn_layers: Collection[int] | None = None,
        attention_hook: AttentionHook | None = None,
        generator: torch.Generator | None = None,
        edit: StreamEdit | None = None,
    ) -> dict[str, Any]:
        """Run the model and return, by stable names, what `capture` asks for.

        Always returned: 'logits' (B, classes) (DeiT: mean of both heads), 'head_logits'
        ({'cls': ..., 'dist': ...}; only 'cls' when dist_head=False) and 'layout' (TokenLayout).
        Capturable (capture='all' for every one): see CAPTURE_KEYS. 'attentions' is a list with one
        (B, heads, R, T) tensor per block, R = T unless `attn_rows` lists query indices;
        'class_attentions' one (B, heads, 1, 1+N) per class-attention block. head_mask:
        (layers, heads), 1 keeps a head, 0 removes it; layers = depth + class_attn_depth.

        Attention on demand: only the blocks in `attn_layers` (default: all) form attention
        probabilities explicitly, the others run the fused kernel; their entries of 'attentions' are
        None. `attention_hook(block, probs)` sees each of those blocks' probabilities as it runs, so a
        caller can reduce them (fuse heads, measure distances) without the model keeping them.
        `edit(block, site, value)` reads and may replace the residual stream, each branch's output or each
        head's output as the blocks run (see StreamEdit; activation patching, the logit's parts).
        attn_rows=GRAD: every block's, class-attention block's and the attention pool's probabilities are
        formed and the outputs computed from them, so gradients with respect to them are the real ones.
        """
        out = Captures(capture)
        layout = self._check_inputs(pixel_values, head_mask)
        # a bf16 model runs in bf16: float32 inputs (pixels, head masks) would promote everything they touch
        pixel_values = pixel_values.to(self.dtype)
        if head_mask is not None:
            head_mask = head_mask.to(pixel_values.dtype)
        rows = None
        if "attentions" in out.want or attention_hook is not None:
            rows = attn_rows if attn_rows in (ALL, GRAD) else self._check_rows(attn_rows, layout.num_tokens)
        explicit = range(self.config.depth) if attn_layers is None else set(attn_layers)
        heads = [None] * (self.config.depth + self.config.class_attn_depth) if head_mask is None else list(head_mask)
        x = self.embed(pixel_values, layout, out, mask=mask, mask_mode=mask_mode, generator=generator)  # (B, T, D)
        x = self.encode(x, layout, out, heads[:self.config.depth], rows, explicit, attention_hook, edit)  # (B, T, D)
        grad = attn_rows == GRAD and rows is not None
        x = self.attend_class(x, out, heads[self.config.depth:], edit, grad)  # CaiT: (B, 1+N, D)
        head_logits = self.classify(x, layout, out, grad)
        if "dist" in head_logits:
            logits = (head_logits["cls"] + head_logits["dist"]) / 2  # DeiT: average of both heads
        else:
            (logits,) = head_logits.values()
        return {**out.values, "logits": logits, "head_logits": head_logits, "layout": layout}

    def _check_inputs(self, pixel_values: torch.Tensor, head_mask: torch.Tensor | None) -> TokenLayout:
        cfg = self.config
        if pixel_values.ndim != 4 or pixel_values.shape[1] != cfg.in_chans:
            raise ValueError(f"expected images (B, {cfg.in_chans}, H, W), got {tuple(pixel_values.shape)}")
        self.check_image_size(pixel_values.shape[2], pixel_values.shape[3])
        n_layers = cfg.depth + cfg.class_attn_depth
        if head_mask is not None and tuple(head_mask.shape) != (n_layers, cfg.num_heads):
            raise ValueError(f"head_mask must have shape ({n_layers}, {cfg.num_heads}), got {tuple(head_mask.shape)}")
        return self.layout((pixel_values.shape[2], pixel_values.shape[3]))

    def embed(self, pixel_values: torch.Tensor, layout: TokenLayout, out: Captures, *,
              mask: torch.Tensor | None = None, mask_mode: str = "replace",
              generator: torch.Generator | None = None) -> torch.Tensor:
        """Image -> the token sequence the blocks read, (B, T, D); stages 1-4 of the forward pass."""
        b = pixel_values.shape[0]
        # 1. stem: image -> grid of patch embeddings -> sequence in raster order
        feat = self.patch_embed(pixel_values)  # (B, D, gh, gw)
        out.keep("stem", feat)
        x = self.embed_norm(feat.flatten(2).transpose(1, 2))  # (B, N, D); AIMv2 norms the patch embeddings
        out.keep("patches", x)

        # 2. [MASK] replaces chosen patch embeddings before prefix tokens and PE are added
        if mask is not None:
            x = self.apply_mask(x, mask, mask_mode, generator)
        out.keep("masked", x)

        # 3. prefix tokens ([CLS], distillation, registers) in front of the patches
        prefix = [getattr(self, f"{name}_token") for name in self.prefix_names if not name.startswith("reg")]
        if self.config.reg_tokens:
            prefix.append(self.reg_token)  # (1, R, D): every register at once
        x = torch.cat([token.expand(b, -1, -1) for token in prefix] + [x], dim=1)  # (B, P+N, D)
        out.keep("with_prefix", x)

        # 4. position embedding (additive schemes), then dropout and (CLIP) the pre-norm
        pe = self.position_embedding(layout.grid)
        if pe is not None:
            x = x + pe.to(x.dtype)[None]  # (B, P+N, D)
        out.keep("with_pos", x)
        x = self.norm_pre(self.pos_drop(x))
        out.keep("embedded", x)
        return x

    def encode(self, x: torch.Tensor, layout: TokenLayout, out: Captures, head_masks: list[torch.Tensor | None],
               rows: Rows, explicit: Collection[int], hook: AttentionHook | None,
               edit: StreamEdit | None = None) -> torch.Tensor:
        """5. the self-attention blocks. rows: the attention rows to form in the blocks in `explicit`
        (None: none anywhere, the fused path); each block's probabilities go to `hook`, and are kept
        only when 'attentions' is captured."""
        rope = self.rope_angles(layout.grid)
        hidden: list[torch.Tensor] = []
        attentions: list[torch.Tensor | None] = []
        for i, (block, head_mask) in enumerate(zip(self.blocks, head_masks, strict=True)):
            block_rows = rows if i in explicit else None
            bias = self.pos_scheme.attention_bias(block, self.config, layout.grid, layout.num_prefix_tokens)
            x, probs = block(x, rope=rope, bias=bias, num_prefix=layout.num_prefix_tokens, head_mask=head_mask,
                             rows=block_rows, edit=None if edit is None else partial(edit, i))
            if "hidden_states" in out.want:  # holding on to unwanted states would keep depth x (B, T, D) alive
                hidden.append(x)
            if probs is not None and hook is not None:
                hook(i, probs)
            if "attentions" in out.want:
                attentions.append(probs)
        out.keep("hidden_states", hidden)
        out.keep("attentions", attentions)
        return x

    def attend_class(self, x: torch.Tensor, out: Captures, head_masks: list[torch.Tensor | None],
                     edit: StreamEdit | None = None, grad: bool = False) -> torch.Tensor:
        """6. CaiT: [CLS] joins now and only it is updated by class attention; other models pass through."""
        if not self.config.class_attn_depth:
            return x
        cls = self.cls_token.expand(x.shape[0], -1, -1)  # (B, 1, D)
        class_tokens, class_attn = [], []
        for j, (block, head_mask) in enumerate(zip(self.class_blocks, head_masks, strict=True)):
            if edit is not None:  # the sequence this block reads; patched patches stay patched for the next ones
                u = edit(self.config.depth + j, "resid", torch.cat([cls, x], dim=1))  # (B, 1+N, D)
                cls, x = u[:, :1], u[:, 1:]
            cls, probs = block(x, cls, head_mask=head_mask, capture=GRAD if grad else "class_attentions" in out.want,
                               edit=None if edit is None else partial(edit, self.config.depth + j))
            class_tokens.append(cls)
            class_attn.append(probs)
        out.keep("class_tokens", class_tokens)
        out.keep("class_attentions", class_attn)
        return torch.cat([cls, x], dim=1)  # (B, 1+N, D)

    def classify(self, x: torch.Tensor, layout: TokenLayout, out: Captures, grad: bool = False
                 ) -> dict[str, torch.Tensor]:
        """7. final norm, pooling, then the logits of each head: a classifier's, the projection to a
        joint space (CLIP), or with neither the pooled features themselves."""
        cfg = self.config
        x = self.norm(x)
        if cfg.pool == "gap":
            pooled = self.fc_norm(x[:, layout.num_prefix_tokens:].mean(dim=1))  # (B, D), patch tokens only
        elif cfg.pool in ("map", "query"):
            start = 0 if cfg.pool_prefix else layout.num_prefix_tokens
            pooled, probs = self.attn_pool(x[:, start:], GRAD if grad else "pool_attention" in out.want)
            out.keep("pool_attention", probs)  # (B, heads, 1, N or T): the latent query over the patches (all tokens)
        elif cfg.pool == "cls+mean":  # transformers' DINOv2 classifiers
            pooled = torch.cat([x[:, 0], x[:, layout.num_prefix_tokens:].mean(dim=1)], dim=-1)  # (B, 2D)
        else:
            pooled = x[:, 0]
        out.keep("pre_logits", pooled)
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


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
