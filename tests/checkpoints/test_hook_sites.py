"""The named hook sites against the reference implementations on the same weights: each site's value equals
timm's (and transformers') module at the same place (resid_post = the block's output, attn_out and mlp_out =
each branch as it is added, z = the input of the attention's output projection, pattern = the softmax), and the
pattern is softmax(q k^T / sqrt(d)) of the q and k sites (RoPE: the rotated ones; BEiT/talking heads aside).
Then what the sites are for: a head zeroed through hook_z is the head mask, a replaced pattern changes the
output, and a backward hook on hook_pattern sees the gradient the attention-gradient method uses."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from vit_explorer.checkpoints import load

from .conftest import TIMM_CASES, assert_close, build_timm, save_timm_hub
from .test_families_timm import FAMILIES, build

# ViT, DeiT distilled, CaiT (class attention, talking heads), DINOv2 with registers, SigLIP (attention pool),
# EVA-02 (RoPE, SwiGLU), DINOv3 (RoPE on normalised centres, registers, LayerScale)
CASES = ["vit", "deit_distilled", "cait", "dinov2_reg", "siglip", "eva02", "dinov3"]


def _reference(case: str) -> torch.nn.Module:
    return build_timm(case) if case in TIMM_CASES else build(case)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory):
    cache: dict[str, tuple[torch.nn.Module, Any]] = {}

    def get(case: str) -> tuple[torch.nn.Module, Any]:
        if case not in cache:
            ref = _reference(case)
            cache[case] = ref, load(save_timm_hub(ref, tmp_path_factory.mktemp(case))).model
        return cache[case]

    return get


def _timm_sites(model: torch.nn.Module, x: torch.Tensor) -> dict[str, list[torch.Tensor]]:
    """Per block of timm's: its output, each branch as added (LayerScale in), the output projection's input, the
    probabilities (its unfused path)."""
    seen: dict[str, list[torch.Tensor]] = {"resid_post": [], "branches": [], "z": [], "pattern": []}
    for module in model.modules():
        if hasattr(module, "fused_attn"):
            module.fused_attn = False
    hooks = []
    blocks = list(model.blocks) + list(getattr(model, "blocks_token_only", []))
    for block in blocks:
        hooks.append(block.register_forward_hook(lambda m, i, o: seen["resid_post"].append(o)))
        for name in ("drop_path1", "drop_path2", "drop_path"):  # CaiT's one drop_path serves both branches
            if hasattr(block, name):
                hooks.append(getattr(block, name).register_forward_hook(lambda m, i, o: seen["branches"].append(o)))
        hooks.append(block.attn.proj.register_forward_pre_hook(lambda m, args: seen["z"].append(args[0])))
        hooks.append(block.attn.attn_drop.register_forward_hook(lambda m, i, o: seen["pattern"].append(o)))
    try:
        with torch.no_grad():
            model(x)
    finally:
        for hook in hooks:
            hook.remove()
    return seen


@pytest.mark.parametrize("case", CASES)
def test_each_site_equals_timms_module_at_the_same_place(pair, case: str) -> None:
    ref, ours = pair(case)
    x = torch.randn(2, 3, 32, 32)
    want = _timm_sites(ref, x)
    with torch.no_grad():
        logits, cache = ours.run_with_cache(x)
    stacks = [f"blocks.{i}" for i in range(len(ours.blocks))] + [f"class_blocks.{j}" for j in
                                                                 range(len(ours.class_blocks))]
    assert len(want["resid_post"]) == len(stacks)
    for n, stack in enumerate(stacks):
        # CaiT's class-attention blocks return [CLS] alone, as ours do at their hook_resid_post
        assert_close(cache[f"{stack}.hook_resid_post"], want["resid_post"][n], f"{case} {stack} resid_post")
        assert_close(cache[f"{stack}.hook_attn_out"], want["branches"][2 * n], f"{case} {stack} attn_out")
        assert_close(cache[f"{stack}.hook_mlp_out"], want["branches"][2 * n + 1], f"{case} {stack} mlp_out")
        z = cache[f"{stack}.attn.hook_z"]  # (B, T, heads, hd)
        assert z.shape[2] == ours.config.num_heads
        assert_close(z.flatten(2), want["z"][n], f"{case} {stack} z")
        assert_close(cache[f"{stack}.attn.hook_pattern"], want["pattern"][n], f"{case} {stack} pattern")
        mid = cache[f"{stack}.hook_resid_mid"]
        assert_close(mid + cache[f"{stack}.hook_mlp_out"], cache[f"{stack}.hook_resid_post"], f"{stack} the sum")
    with torch.no_grad():
        assert_close(logits, ref(x), f"{case} logits")


@pytest.mark.parametrize("case", [c for c in CASES if c != "cait"])  # talking heads mix heads around the softmax
def test_the_pattern_is_the_softmax_of_the_q_and_k_sites(pair, case: str) -> None:
    _, ours = pair(case)
    with torch.no_grad():
        _, cache = ours.run_with_cache(torch.randn(2, 3, 32, 32))
    scale = ours.config.head_dim ** -0.5
    for i in range(len(ours.blocks)):
        rotated = f"blocks.{i}.attn.hook_rot_q" in cache
        q = cache[f"blocks.{i}.attn.hook_{'rot_q' if rotated else 'q'}"].transpose(1, 2)  # (B, H, T, hd)
        k = cache[f"blocks.{i}.attn.hook_{'rot_k' if rotated else 'k'}"].transpose(1, 2)
        assert_close(((q * scale) @ k.transpose(-2, -1)).softmax(-1), cache[f"blocks.{i}.attn.hook_pattern"],
                     f"{case} block {i}")
        assert_close(cache[f"blocks.{i}.attn.hook_attn_scores"].softmax(-1), cache[f"blocks.{i}.attn.hook_pattern"],
                     f"{case} block {i} scores")


def test_the_attention_pool_pattern_equals_timms_latent_query(pair) -> None:
    """SigLIP's attention pool: attn_pool.hook_pattern is softmax(q k^T / sqrt(d)) of timm's latent query."""
    ref, ours = pair("siglip")
    seen: dict[str, torch.Tensor] = {}
    pool = ref.attn_pool
    hooks = [pool.q_norm.register_forward_hook(lambda m, i, o: seen.__setitem__("q", o)),
             pool.k_norm.register_forward_hook(lambda m, i, o: seen.__setitem__("k", o))]
    x = torch.randn(2, 3, 32, 32)
    try:
        with torch.no_grad():
            ref(x)
    finally:
        for hook in hooks:
            hook.remove()
    with torch.no_grad():
        _, cache = ours.run_with_cache(x, names_filter="attn_pool.hook_pattern")
    want = ((seen["q"] * pool.scale) @ seen["k"].transpose(-2, -1)).softmax(-1)
    assert_close(cache["attn_pool.hook_pattern"], want, "attention pool")


@pytest.mark.parametrize("kind", ["vit", "deit"])
def test_each_site_equals_transformers_modules(hf_folder, kind: str) -> None:
    ref, folder = hf_folder(kind)
    ours = load(folder).model
    x = torch.randn(2, 3, 32, 32)
    backbone = ref.vit if kind == "vit" else ref.deit
    seen: dict[str, list[torch.Tensor]] = {"attn_out": [], "mlp_out": [], "z": []}
    hooks = []
    for layer in backbone.layers:  # transformers 5's ViTLayer: attention (q/k/v/o_proj), mlp (fc1, fc2)
        hooks.append(layer.attention.register_forward_hook(
            lambda m, i, o: seen["attn_out"].append(o[0] if isinstance(o, tuple) else o)))
        hooks.append(layer.mlp.register_forward_hook(lambda m, i, o: seen["mlp_out"].append(o)))
        hooks.append(layer.attention.o_proj.register_forward_pre_hook(lambda m, a: seen["z"].append(a[0])))
    try:
        with torch.no_grad():
            want = ref(pixel_values=x, output_hidden_states=True, output_attentions=True)
    finally:
        for hook in hooks:
            hook.remove()
    with torch.no_grad():
        logits, cache = ours.run_with_cache(x)
    assert_close(logits, want.logits, "logits")
    for i in range(ref.config.num_hidden_layers):
        assert_close(cache[f"blocks.{i}.hook_resid_post"], want.hidden_states[i + 1], f"resid_post {i}")
        assert_close(cache[f"blocks.{i}.attn.hook_pattern"], want.attentions[i], f"pattern {i}")
        assert_close(cache[f"blocks.{i}.hook_attn_out"], seen["attn_out"][i], f"attn_out {i}")
        assert_close(cache[f"blocks.{i}.hook_mlp_out"], seen["mlp_out"][i], f"mlp_out {i}")
        assert_close(cache[f"blocks.{i}.attn.hook_z"].flatten(2), seen["z"][i], f"z {i}")


@pytest.mark.parametrize("case", ["vit", "cait", "eva02"])
def test_a_head_zeroed_through_hook_z_is_the_head_mask(pair, case: str) -> None:
    _, ours = pair(case)
    cfg = ours.config
    x = torch.randn(2, 3, 32, 32)
    head_mask = torch.ones(cfg.num_blocks, cfg.num_heads)
    head_mask[0, 1] = 0
    head_mask[cfg.num_blocks - 1, 0] = 0
    last = f"class_blocks.{cfg.class_attn_depth - 1}" if cfg.class_attn_depth else f"blocks.{cfg.depth - 1}"

    def zero(head: int):
        def hook(z: torch.Tensor, site: Any) -> torch.Tensor:
            z = z.clone()
            z[:, :, head] = 0
            return z
        return hook

    with torch.no_grad():
        masked = ours(x, head_mask=head_mask)
        hooked = ours.run_with_hooks(x, fwd_hooks=[("blocks.0.attn.hook_z", zero(1)), (f"{last}.attn.hook_z", zero(0))])
        plain = ours(x)
    torch.testing.assert_close(hooked, masked)
    assert not torch.allclose(plain, masked)


def test_a_replaced_pattern_changes_the_output_and_reading_one_does_not(pair) -> None:
    _, ours = pair("vit")
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        plain = ours(x)
        read = ours.run_with_hooks(x, fwd_hooks=[("blocks.1.attn.hook_pattern", lambda p, hook: None)])
        uniform = ours.run_with_hooks(x, fwd_hooks=[("blocks.1.attn.hook_pattern",
                                                     lambda p, hook: torch.full_like(p, 1 / p.shape[-1]))])
        in_place = ours.run_with_hooks(x, fwd_hooks=[("blocks.1.attn.hook_pattern",
                                                      lambda p, hook: p.fill_(1 / p.shape[-1]))])
    assert torch.equal(read, plain)  # reading leaves the fused kernel's output, bit for bit
    assert not torch.allclose(uniform, plain)
    torch.testing.assert_close(in_place, uniform)
    assert not any(point.active for point in ours.hook_dict.values())  # run_with_hooks removes its hooks


@pytest.mark.parametrize("case", ["vit", "cait", "siglip"])
def test_the_backward_hook_on_the_pattern_is_the_attention_gradient_methods(pair, case: str) -> None:
    from vit_explorer.explore import relevance

    _, ours = pair(case)
    x = torch.randn(1, 3, 32, 32)
    layout = ours.layout()
    with torch.no_grad():
        target = int(ours(x).argmax())
    resolved = relevance.Resolved("class", target, f"class {target}", "cls", "test")
    scorer = relevance.Scorer(ours, x, layout, None, None, resolved)
    _, _, grads, _ = relevance._grad_pass(scorer)

    seen: dict[str, torch.Tensor] = {}
    sites = relevance.attention_sites(ours)
    with torch.enable_grad():
        pixels = x.clone().requires_grad_(True)
        logits = ours.run_with_hooks(pixels, bwd_hooks=[(name, lambda g, hook: seen.__setitem__(hook.name, g))
                                                        for name in sites])
        logits[0, target].backward()
    assert list(seen) == list(reversed(sites))  # the backward pass reaches them last block first
    for name, grad in zip(sites, grads, strict=True):
        assert_close(seen[name], grad, name)


def test_hook_names_list_every_site_and_a_wrong_name_says_what_there_is(pair) -> None:
    _, ours = pair("eva02")
    names = ours.hook_names()
    for site in ("hook_embed", "hook_pos_embed", "blocks.0.hook_resid_pre", "blocks.0.ln1.hook_normalized",
                 "blocks.0.attn.hook_q", "blocks.0.attn.hook_rot_k", "blocks.0.attn.hook_pattern",
                 "blocks.0.attn.hook_z", "blocks.0.hook_attn_out", "blocks.0.hook_resid_mid", "blocks.0.mlp.hook_post",
                 "blocks.0.hook_mlp_out", "blocks.1.hook_resid_post", "ln_final.hook_normalized"):
        assert site in names
    assert set(names) == set(ours.hook_dict) and all(ours.hook_dict[n].name == n for n in names)
    with pytest.raises(KeyError, match="no hook site 'blocks.0.attn.hook_patern'"):
        ours.run_with_hooks(torch.randn(1, 3, 32, 32), fwd_hooks=[("blocks.0.attn.hook_patern", lambda t, h: None)])
    assert "blocks.0.attn.hook_rot_q" not in _reference_free_names()


def _reference_free_names() -> list[str]:
    """A model without RoPE has no rotated sites."""
    from vit_explorer.models import VisionTransformer, preset

    return VisionTransformer(preset("classroom")).hook_names()


def test_registers_and_distillation_sites_hold_the_prefix_tokens(pair) -> None:
    """The prefix tokens sit where the layout says: DINOv2's four registers after [CLS] in hook_with_prefix."""
    _, ours = pair("dinov2_reg")
    with torch.no_grad():
        _, cache = ours.run_with_cache(torch.randn(1, 3, 32, 32), names_filter=["hook_with_prefix"])
    torch.testing.assert_close(cache["hook_with_prefix"][0, 1:5], ours.reg_token[0])
    assert FAMILIES["dinov2_reg"][0].startswith("vit_small_patch14_reg4")


def test_a_pass_in_another_thread_does_not_see_this_threads_hooks(pair) -> None:
    """The app runs passes on one model in several workers: a head mask or hooks of one pass stay in its thread,
    while add_hook's apply to every pass."""
    import threading

    _, ours = pair("vit")
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        plain = ours(x)
    inside: dict[str, torch.Tensor] = {}
    started, release = threading.Event(), threading.Event()

    def other() -> None:
        started.set()
        release.wait(30)
        with torch.no_grad():
            inside["logits"] = ours(x)

    def zero(z: torch.Tensor, hook: Any) -> torch.Tensor:
        release.set()  # the other thread runs its pass while this one's hooks are in place
        worker.join(30)
        return torch.zeros_like(z)

    worker = threading.Thread(target=other)
    worker.start()
    started.wait(30)
    with torch.no_grad():
        hooked = ours.run_with_hooks(x, fwd_hooks=[("blocks.0.attn.hook_z", zero)])
    worker.join(30)
    torch.testing.assert_close(inside["logits"], plain)
    assert not torch.allclose(hooked, plain)
    ours.add_hook("blocks.0.attn.hook_z", lambda z, hook: torch.zeros_like(z))
    try:
        seen: dict[str, torch.Tensor] = {}
        thread = threading.Thread(target=lambda: seen.__setitem__("logits", ours(x).detach()))
        thread.start()
        thread.join(30)
        torch.testing.assert_close(seen["logits"], hooked)
    finally:
        ours.reset_hooks()


def test_a_site_is_idle_again_once_every_pass_that_hooked_it_is_over(pair) -> None:
    """An idle site skips the per-thread lookup (`HookPoint.locals`): every hooks() block, nested, failing or in
    two threads at once, leaves the count it found, and a hook added while another thread's is in place still runs."""
    import threading

    _, ours = pair("vit")
    site = ours.hook_dict["blocks.0.attn.hook_z"]
    x = torch.randn(1, 3, 32, 32)
    calls: list[str] = []
    inner = threading.Event()
    done = threading.Event()

    def other() -> None:
        with ours.hooks([(site.name, lambda z, hook: calls.append("other"))]):
            inner.set()
            done.wait(30)

    worker = threading.Thread(target=other)
    worker.start()
    inner.wait(30)
    assert site.locals == 1
    with torch.no_grad(), ours.hooks([(site.name, lambda z, hook: calls.append("outer"))]):
        with ours.hooks([(site.name, lambda z, hook: calls.append("inner"))]):
            ours(x)
        assert site.locals == 2
        with pytest.raises(RuntimeError), ours.hooks([(site.name, lambda z, hook: None)]):
            raise RuntimeError("a pass that fails")
    done.set()
    worker.join(30)
    assert calls == ["outer", "inner"]  # the other thread's hook stayed in its thread
    assert all(point.locals == 0 and not point.active for point in ours.hook_dict.values())
