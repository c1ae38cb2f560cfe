"""AttnLRP and CP-LRP against LXT 2.1's efficient patches on a torchvision ViT carrying the same weights (the bundled
model and a ViT-S-shaped random one): the same maps and the same relevance budget; and every family runs or refuses
with a reason."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

import vit_explorer
from vit_explorer.analysis import attnlrp
from vit_explorer.analysis.relevance import per_patch
from vit_explorer.checkpoints import LoadedModel
from vit_explorer.checkpoints.preprocess import Preprocess
from vit_explorer.explore import relevance as rel
from vit_explorer.explore.forward import Inputs
from vit_explorer.models import VisionTransformer
from vit_explorer.models.presets import preset

from .test_relevance import FAMILIES, _inputs, _model

ROOT = Path(__file__).resolve().parents[2]
METHODS = ("attnlrp", "cp-lrp")


def _lxt_module(name: str) -> types.ModuleType:
    """lxt.efficient.<name> without the package's __init__ (it imports a module transformers 5 removed)."""
    import lxt

    folder = Path(lxt.__file__).parent / "efficient"
    if "lxt.efficient" not in sys.modules:
        package = types.ModuleType("lxt.efficient")
        package.__path__ = [str(folder)]
        sys.modules["lxt.efficient"] = package
    full = f"lxt.efficient.{name}"
    if full not in sys.modules:
        spec = importlib.util.spec_from_file_location(full, folder / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[full] = module
        spec.loader.exec_module(module)
    return sys.modules[full]


def _lxt_patches() -> types.ModuleType:
    return _lxt_module("patches")


def _eager_attention(module: nn.Module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Plain attention (B, H, T, hd), the function LXT's wrapper puts its rules around."""
    return ((q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5).softmax(dim=-1) @ v


def _attnlrp_mha_forward(self: nn.MultiheadAttention, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                         *args, **kwargs) -> tuple[torch.Tensor, None]:
    """nn.MultiheadAttention (batch first, self-attention) through LXT's `wrap_attention_forward`: the uniform rule
    on q, k and v as LXT applies it to every transformers attention function."""
    b, t, d = query.shape
    q, k, v = F.linear(query, self.in_proj_weight, self.in_proj_bias).chunk(3, dim=-1)

    def heads(x: torch.Tensor) -> torch.Tensor:
        return x.reshape(b, t, self.num_heads, -1).transpose(1, 2)

    out = _lxt_patches().wrap_attention_forward(_eager_attention)(self, heads(q), heads(k), heads(v))
    return self.out_proj(out.transpose(1, 2).reshape(b, t, d)), None


@contextmanager
def lxt_rules(conservative: bool) -> Iterator[None]:
    """LXT's patches on torch's GELU, LayerNorm and MultiheadAttention classes (CP-LRP: LXT's torchvision map;
    AttnLRP: its attention wrapper), undone afterwards."""
    patches = _lxt_patches()
    saved = {cls: {name: cls.__dict__[name] for name in ("forward", "original_forward") if name in cls.__dict__}
             for cls in (nn.GELU, nn.LayerNorm, nn.MultiheadAttention)}
    try:
        patches.patch_method(patches.non_linear_forward, nn.GELU, keep_original=True)
        patches.patch_method(patches.layer_norm_forward, nn.LayerNorm)
        if conservative:
            patches.patch_method(patches.cp_multi_head_attention_forward, nn.MultiheadAttention, keep_original=True)
        else:
            nn.MultiheadAttention.forward = _attnlrp_mha_forward
        yield
    finally:
        for cls, attrs in saved.items():
            for name in ("forward", "original_forward"):
                if name in attrs:
                    setattr(cls, name, attrs[name])
                elif name in cls.__dict__:
                    delattr(cls, name)


def torchvision_copy(model: VisionTransformer) -> nn.Module:
    """torchvision's VisionTransformer with the model's weights (its stem module as conv_proj, CLIP's pre-norm in
    place of the encoder's dropout)."""
    from torchvision.models.vision_transformer import VisionTransformer as TorchvisionViT

    cfg = model.config
    assert cfg.pool == "cls" and cfg.prefix_tokens == "cls" and cfg.pos_embed == "learned" and cfg.mlp == "gelu"
    tv = TorchvisionViT(image_size=cfg.image_size[0], patch_size=cfg.patch_size, num_layers=cfg.depth,
                        num_heads=cfg.num_heads, hidden_dim=cfg.embed_dim, mlp_dim=model.blocks[0].mlp.fc1.out_features,
                        num_classes=cfg.num_classes, norm_layer=lambda d: nn.LayerNorm(d, eps=cfg.layer_norm_eps))
    tv.conv_proj = copy.deepcopy(model.patch_embed)
    if cfg.pre_norm:
        tv.encoder.dropout = copy.deepcopy(model.norm_pre)
    with torch.no_grad():
        tv.class_token.copy_(model.cls_token)
        tv.encoder.pos_embedding.copy_(model.pos_embed)
        for layer, block in zip(tv.encoder.layers, model.blocks, strict=True):
            layer.ln_1.load_state_dict(block.norm1.state_dict())
            layer.self_attention.in_proj_weight.copy_(block.attn.qkv.weight)
            layer.self_attention.in_proj_bias.copy_(block.attn.qkv.bias)
            layer.self_attention.out_proj.load_state_dict(block.attn.proj.state_dict())
            layer.ln_2.load_state_dict(block.norm2.state_dict())
            layer.mlp[0].load_state_dict(block.mlp.fc1.state_dict())
            layer.mlp[3].load_state_dict(block.mlp.fc2.state_dict())
        tv.encoder.ln.load_state_dict(model.norm.state_dict())
        tv.heads.head.load_state_dict(model.head.state_dict())
    return tv.eval()


@contextmanager
def zennit_gamma(tv: nn.Module, gamma: dict[str, float]) -> Iterator[None]:
    """zennit's Gamma on the attention output projections (proj) and the MLPs' first (fc1) and second (fc2) linear
    layers, in LXT's gradient x input form (lxt.efficient.zennit_patches), undone afterwards."""
    from zennit.composites import NameMapComposite
    from zennit.core import BasicHook
    from zennit.rules import Gamma

    saved = BasicHook.forward, BasicHook.backward
    _lxt_module("zennit_patches").monkey_patch_zennit()
    ends = {"proj": "self_attention.out_proj", "fc1": "mlp.0", "fc2": "mlp.3"}
    names = [name for name, _ in tv.named_modules()]
    composite = NameMapComposite([([n for n in names if n.endswith(ends[kind])], Gamma(gamma=g))
                                  for kind, g in gamma.items()])
    try:
        with composite.context(tv):
            yield
    finally:
        BasicHook.forward, BasicHook.backward = saved


def lxt_relevance(tv: nn.Module, pixels: torch.Tensor, index: int, conservative: bool, patch: int,
                  gamma: dict[str, float] | None = None) -> tuple[np.ndarray, float, float]:
    """LXT's map (input x gradient summed per patch), its total and the target logit."""
    x = pixels.detach().clone().requires_grad_(True)
    with lxt_rules(conservative), zennit_gamma(tv, gamma or {}):
        logit = tv(x)[0, index]
        logit.backward()
    relevance = (x * x.grad).detach()
    return per_patch(relevance, patch)[0].numpy(), float(relevance.sum()), float(logit.detach())


def vit_s_random() -> LoadedModel:
    """A ViT-S/16 (timm's widths and depth) with random weights, norms and biases perturbed so every rule matters."""
    torch.manual_seed(0)
    model = VisionTransformer(preset("vit-s16", num_classes=10))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
        model.head.weight.normal_(0, 0.1)
    model.eval()
    cfg = model.config
    return LoadedModel(model, cfg, [f"class{i}" for i in range(cfg.num_classes)], Preprocess(cfg.image_size))


def _image(size: tuple[int, int], seed: int = 0) -> Image.Image:
    return Image.fromarray((np.random.default_rng(seed).random((*size, 3)) * 255).astype(np.uint8))


@pytest.fixture(scope="module", params=["classroom", "vit-s16-random"])
def loaded(request: pytest.FixtureRequest) -> LoadedModel:
    if request.param == "classroom":
        return vit_explorer.load(ROOT / "resources" / "classroom")
    return vit_s_random()


@pytest.mark.parametrize("method", METHODS)
def test_the_map_and_its_budget_equal_lxts_on_the_same_weights(loaded: LoadedModel, method: str) -> None:
    size = tuple(loaded.config.image_size)
    inputs = Inputs.unmasked(loaded, _image(size), size)
    session = rel.prepare(inputs)
    index = session.scorer.resolved.index
    pixels = session.scorer.pixels
    tv = torchvision_copy(loaded.model)
    with torch.no_grad():
        assert torch.allclose(tv(pixels), loaded.model(pixels), atol=1e-4)
    (result,) = rel.explain(inputs, [method], measure=False)
    expected, total, logit = lxt_relevance(tv, pixels, index, method == "cp-lrp", loaded.config.patch_size)
    scale = np.abs(expected).max()
    assert scale > 0 and np.abs(result.relevance - expected).max() <= 1e-4 * scale  # within 1e-4 of its maximum
    conservation = result.conservation
    assert conservation is not None
    assert conservation.target == pytest.approx(logit, abs=1e-4)
    assert conservation.input == pytest.approx(total, abs=1e-4 * max(1.0, abs(total)))
    assert conservation.absorbed == pytest.approx(logit - total, abs=2e-4 * max(1.0, abs(total)))


@pytest.mark.parametrize("gamma", [{"fc1": 0.25}, {"fc2": 0.5}, {"proj": 0.25}, {"proj": 0.1, "fc1": 0.1, "fc2": 1.0}])
def test_a_gamma_per_layer_type_equals_zennits_gamma_under_lxt(loaded: LoadedModel, gamma: dict[str, float]) -> None:
    size = tuple(loaded.config.image_size)
    session = rel.prepare(Inputs.unmasked(loaded, _image(size), size))
    scorer = session.scorer
    ours = rel.attnlrp_map(scorer, attnlrp.Rules(gamma=gamma)).numpy()
    expected, _, _ = lxt_relevance(torchvision_copy(loaded.model), scorer.pixels, scorer.resolved.index, False,
                                   loaded.config.patch_size, gamma)
    plain = rel.attnlrp_map(scorer, attnlrp.Rules()).numpy()
    scale = np.abs(expected).max()
    assert np.abs(ours - expected).max() <= 1e-4 * scale
    assert np.abs(plain - expected).max() > 1e-2 * scale  # the gamma changes the map


def test_attnlrp_and_cp_lrp_differ_where_the_attention_carries_relevance(loaded: LoadedModel) -> None:
    size = tuple(loaded.config.image_size)
    a, c = rel.explain(Inputs.unmasked(loaded, _image(size), size), list(METHODS), measure=False)
    assert not np.allclose(a.relevance, c.relevance, atol=1e-6)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("name", FAMILIES)
def test_every_family_runs_or_refuses_with_a_reason(name: str, method: str) -> None:
    inputs = _inputs(name)
    reason = rel.METHODS[method].reason(inputs.loaded.config)
    if reason is not None:
        with pytest.raises(ValueError, match=f"method '{method}' does not apply to this model: .+; use "):
            rel.explain(inputs, [method])
        return
    (result,) = rel.explain(inputs, [method], measure=False)
    assert result.relevance.shape == inputs.loaded.model.layout().grid
    assert np.isfinite(result.relevance).all() and np.abs(result.relevance).max() > 0
    c = result.conservation
    assert c is not None and np.isfinite([c.target, c.input]).all()
    assert "biases absorb" in rel.summary_text(result)
    out = rel.to_json("src", "img.png", result)
    assert out["conservation"] == pytest.approx({"target": c.target, "input": c.input, "absorbed": c.absorbed})


def test_only_the_hybrid_stem_is_refused() -> None:
    refused = {name for name in FAMILIES if rel.METHODS["attnlrp"].reason(_model(name).config)}
    assert refused == {"vit-b16-r50"}


def test_the_rules_change_nothing_the_forward_computes() -> None:
    """The rules' hooks replace values by the same values (only the gradient differs): the logits stay."""
    for name, overrides in (("eva02-ti14", {}), ("eva02-ti14", {"mlp_norm": True}), ("siglip-b16", {}),
                            ("cait-xxs24", {}), ("beit-b16", {}), ("aimv2-l14-query", {}), ("clip-b16", {}),
                            ("dinov2-g14", {}), ("deit3-s16", {"mlp_norm": True})):
        model = _model(name, **overrides)
        pixels = torch.randn(1, 3, *model.config.image_size)
        with torch.no_grad():
            plain = model(pixels)
        widened = attnlrp.Rules(gamma={"proj": .5, "fc1": .5, "fc2": .5})
        for rules in (attnlrp.Rules(), attnlrp.Rules(conservative=True), widened):
            with model.hooks(attnlrp.hooks(model, rules, model.layout())), torch.enable_grad():
                x = pixels.clone().requires_grad_(True)
                out = model(x)
                assert torch.allclose(out, plain, atol=1e-5), name
                (grad,) = torch.autograd.grad(out[0].sum(), x)
                assert torch.isfinite(grad).all() and grad.abs().max() > 0, name


def test_the_identity_rule_through_a_norm_holds_its_scale_constant() -> None:
    norm = nn.LayerNorm(8)
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    x = torch.randn(3, 8, requires_grad=True)
    y = attnlrp.norm_rule(norm, x, norm(x))
    (grad,) = torch.autograd.grad(y.sum(), x)
    std = (x.var(dim=-1, unbiased=False, keepdim=True) + norm.eps).sqrt().detach()
    centring = torch.eye(8) - 1 / 8
    assert torch.allclose(y, norm(x)) and torch.allclose(grad, (norm.weight / std) @ centring, atol=1e-6)


def test_a_similarity_target_sends_back_the_similarity() -> None:
    inputs = _inputs("dinov2-s14-reg4")
    other = Image.fromarray(np.full((16, 24, 3), 90, np.uint8))
    (result,) = rel.explain(inputs, ["attnlrp"], rel.Target(reference=other), measure=False)
    session = rel.prepare(inputs, rel.Target(reference=other))
    with torch.no_grad():
        out = inputs.loaded.model.forward_intermediates(session.scorer.pixels)
    assert result.conservation is not None
    assert result.conservation.target == pytest.approx(float(rel.target_logit(out, session.scorer.resolved)[0]),
                                                       abs=1e-5)


def test_a_masked_patch_gets_no_relevance_and_the_budget_still_adds_up() -> None:
    mask = np.zeros((4, 6), bool)
    mask[1, 2] = True
    (result,) = rel.explain(_inputs("vit-s16", mask=mask), ["attnlrp"], measure=False)
    assert result.relevance[1, 2] == 0 and np.abs(result.relevance).max() > 0  # its pixels never reach the model
    c = result.conservation
    assert c is not None and c.input == pytest.approx(float(result.relevance.sum(dtype=np.float64)))


def test_explain_json_gives_relevance_and_the_budget(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from vit_explorer.cli import main

    image = tmp_path / "image.png"
    _image((32, 32)).save(image)
    assert main(["explain", str(ROOT / "resources" / "classroom"), str(image), "--method", "cp-lrp", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"source", "image", "method", "target", "grid", "relevance", "faithfulness", "conservation"}
    assert out["method"] == "cp-lrp" and np.array(out["relevance"]).shape == (8, 8)
    budget = out["conservation"]
    assert budget["input"] == pytest.approx(float(np.sum(out["relevance"])), rel=1e-5)
    assert budget["absorbed"] == pytest.approx(budget["target"] - budget["input"], abs=1e-5)


def test_an_embedding_against_itself_is_explained_with_its_norm_held_constant() -> None:
    """The similarity of an image to itself is flat for a gradient, but LRP starts from it with the norm constant:
    a map that sums to the similarity (1) less what biases absorb, and no note saying the gradient is zero."""
    (result,) = rel.explain(_inputs("dinov2-s14"), ["attnlrp"], measure=False)
    assert result.note == "" and np.abs(result.relevance).max() > 0
    assert result.conservation is not None and result.conservation.target == pytest.approx(1.0, abs=1e-5)


def test_the_attention_pools_new_sites_hold_what_its_mlp_reads() -> None:
    """attn_pool.hook_attn_out (the latent query's projected output) and attn_pool.ln.hook_normalized (its norm):
    the pooled vector is the one plus the MLP of the other, as the pool computes it."""
    model = _model("siglip-b16")
    with torch.no_grad():
        _, cache = model.run_with_cache(torch.randn(1, 3, 16, 24))
        out, normed = cache["attn_pool.hook_attn_out"], cache["attn_pool.ln.hook_normalized"]
        assert torch.equal(normed, model.attn_pool.norm(out))
        assert torch.allclose(cache["hook_pooled"], out + model.attn_pool.mlp(normed), atol=1e-6)


@pytest.mark.parametrize(("name", "overrides"), [
    ("vit-s16", {}), ("deit3-s16", {"mlp_norm": True}), ("beit-b16", {}), ("siglip-b16", {}),
    ("siglip2-b16-naflex", {}), ("pe-core-b16", {}), ("cait-xxs24", {}), ("dinov3-b16", {}), ("dinov2-s14-reg4", {}),
    ("clip-b16", {})])
def test_the_rules_at_the_sites_equal_lxts_patched_norms_and_activations(name: str, overrides: dict) -> None:
    """Every family with torch's LayerNorm and GELU: LXT's patches on those classes (every norm: pre-norm, the blocks',
    a sub-LN, the final norm, fc_norm, the pool's; every GELU), with the uniform rule's factors as backward hooks at
    q, k, v (an attention pool: its pattern and its input), give the same input relevance as our sites' rules."""
    model = _model(name, **overrides)
    if name == "clip-b16":  # quick-GELU is not torch's GELU: LXT has no patch for it; plain GELU here
        for block in model.blocks:
            block.mlp.act = nn.GELU()
    pixels = torch.randn(1, 3, 16, 24)

    def relevance(fwd_hooks: list, bwd_hooks: list) -> torch.Tensor:
        x = pixels.clone().requires_grad_(True)
        with torch.enable_grad(), model.hooks(fwd_hooks, bwd_hooks):
            (grad,) = torch.autograd.grad(model(x)[0, 0], x)
        return (x * grad).detach()

    ours = relevance(attnlrp.hooks(model, attnlrp.Rules(), model.layout()), [])

    def times(factor: float):
        return lambda grad, hook: grad * factor

    sites = [n for n in model.hook_dict if n.endswith(("attn.hook_q", "attn.hook_k"))]
    bwd = [(n, times(0.25)) for n in sites] + [(n, times(0.5)) for n in model.hook_dict if n.endswith("attn.hook_v")]
    if "attn_pool.hook_pattern" in model.hook_dict:
        bwd += [("attn_pool.hook_pattern", times(0.5)), ("ln_final.hook_normalized", times(0.5))]
    with lxt_rules(conservative=True):  # the MultiheadAttention patch touches no module of ours
        reference = relevance([], bwd)
    assert torch.allclose(ours, reference, atol=1e-5 * float(reference.abs().max())), name


def test_the_single_map_figure_says_the_budget() -> None:
    (result,) = rel.explain(_inputs("vit-s16"), ["attnlrp"], measure=False)
    assert result.conservation is not None
    assert rel.map_figure(result).titles[0].endswith(result.conservation.text())
    assert "biases absorb" in result.conservation.text() and result.conservation.text() in rel.summary_text(result)


@pytest.mark.parametrize("method", ["attnlrp", "cp-lrp"])
def test_the_options_gamma_is_the_gamma_rule_on_every_linear_layer_type(loaded: LoadedModel, method: str) -> None:
    """Options.attnlrp_gamma (the Explain view's 'AttnLRP γ') gives the maps of Rules(gamma=...) on every layer type
    GAMMA_LAYERS names; 0 is LRP-0, the default."""
    size = tuple(loaded.config.image_size)
    inputs = Inputs.unmasked(loaded, _image(size), size)
    options = rel.Options(attnlrp_gamma=0.5)
    shown = rel.explain(inputs, [method], measure=False, options=options)[0].relevance
    scorer = rel.prepare(inputs, options=options).scorer
    rules = attnlrp.Rules(conservative=method == "cp-lrp", gamma=dict.fromkeys(attnlrp.GAMMA_LAYERS, 0.5))
    np.testing.assert_allclose(shown, rel.attnlrp_map(scorer, rules)[0].numpy(), rtol=1e-6, atol=1e-9)  # (1, gh, gw)
    plain = rel.explain(inputs, [method], measure=False)[0].relevance
    assert not np.allclose(shown, plain)
    with pytest.raises(ValueError, match="gamma"):
        rel.prepare(inputs, options=rel.Options(attnlrp_gamma=-1.0))
