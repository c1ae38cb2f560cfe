"""On a transformers ViT with the same weights, each head's and each MLP's share of the logit equals one computed
here independently from transformers' own module outputs (forward hooks): the head's slice of the attention
output projection's input, through that slice of its weight, the final LayerNorm with its scale frozen at the
run's own value, and the classifier's row; the same for AIMv2 (RMSNorm, the query-pool head) projected on a
direction. (transformer-lens is not installed here and cannot load a ViT, so its
`stack_head_results` + `apply_ln_to_stack` is not compared.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.checkpoints.conftest import build_hf
from vit_explorer import load
from vit_explorer.analysis.components import decompose

pytest.importorskip("transformers")


def _record(layers: list[tuple[torch.nn.Module, torch.nn.Module]], final_norm: torch.nn.Module) -> tuple:
    """Hooks on transformers' own modules: each block's input to its attention output layer (the heads'
    outputs), its MLP's output, and the final norm's input; with the handles to remove them."""
    contexts: dict[int, torch.Tensor] = {}
    mlps: dict[int, torch.Tensor] = {}
    final: dict[str, torch.Tensor] = {}
    handles = []
    for i, (out_proj, mlp) in enumerate(layers):
        handles.append(out_proj.register_forward_pre_hook(lambda m, args, i=i: contexts.__setitem__(i, args[0])))
        handles.append(mlp.register_forward_hook(lambda m, args, out, i=i: mlps.__setitem__(i, out)))
    handles.append(final_norm.register_forward_pre_hook(lambda m, args: final.__setitem__("x", args[0])))
    return contexts, mlps, final, handles


def test_per_head_shares_equal_those_from_transformers_hooks(tmp_path: Path) -> None:
    ref = build_hf("vit")
    ref.save_pretrained(tmp_path)
    ours = load(str(tmp_path)).model
    cfg = ref.config
    heads, hd = cfg.num_attention_heads, cfg.hidden_size // cfg.num_attention_heads
    contexts, mlps, final, handles = _record([(layer.attention.o_proj, layer.mlp.fc2) for layer in ref.vit.layers],
                                             ref.vit.layernorm)
    pixels = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        logits = ref(pixel_values=pixels).logits[0]
        for h in handles:
            h.remove()
        target = int(logits.argmin())  # not the top class: the default must not be what makes it agree
        x = final["x"][0, 0].double()  # the final [CLS] state, before the final norm
        sigma = (x.var(unbiased=False) + ref.vit.layernorm.eps).sqrt()
        row = ref.classifier.weight[target].double() * ref.vit.layernorm.weight.double() / sigma  # (D,)

        def share(v: torch.Tensor) -> float:  # a part of the [CLS] state -> its share of the target logit
            return float((v - v.mean()) @ row)

        expected_heads = torch.zeros(cfg.num_hidden_layers, heads, dtype=torch.float64)
        expected_mlp = torch.zeros(cfg.num_hidden_layers, dtype=torch.float64)
        for i, layer in enumerate(ref.vit.layers):
            weight = layer.attention.o_proj.weight.double()  # (D, D)
            for h in range(heads):
                cut = slice(h * hd, (h + 1) * hd)
                expected_heads[i, h] = share(weight[:, cut] @ contexts[i][0, 0, cut].double())
            expected_mlp[i] = share(mlps[i][0, 0].double())
    d = decompose(ours, pixels, target=target)
    assert d.logit == pytest.approx(float(logits[target]), abs=1e-5)
    got_heads = torch.tensor(d.heads(cfg.num_hidden_layers, heads), dtype=torch.float64)
    torch.testing.assert_close(got_heads, expected_heads, atol=1e-5, rtol=1e-4)
    got_mlp = torch.tensor([p.value for p in d.parts if p.name == "mlp"], dtype=torch.float64)
    torch.testing.assert_close(got_mlp, expected_mlp, atol=1e-5, rtol=1e-4)
    assert d.bias == pytest.approx(ref.classifier.bias[target].item(), abs=1e-7)
    assert expected_heads.abs().max() > 1e-3  # the heads do carry part of the logit


def test_aimv2_shares_equal_those_from_transformers_hooks(tmp_path: Path) -> None:
    """AIMv2 (RMSNorm, no biases, the query-pool head with biases on): each head's and MLP's share of the pooled
    features' projection on a direction, computed from transformers' module outputs through the final RMSNorm
    with its divisor frozen and the pool head with its attention frozen, equals ours; the parts add up."""
    from transformers import Aimv2VisionConfig, Aimv2VisionModel

    from tests.checkpoints.conftest import randomize

    torch.manual_seed(0)
    ref = randomize(Aimv2VisionModel(Aimv2VisionConfig(hidden_size=48, num_hidden_layers=2, num_attention_heads=2,
                                                       intermediate_size=96, patch_size=8, image_size=32,
                                                       qkv_bias=True, mlp_bias=True)))
    ref.set_attn_implementation("eager")
    ref.save_pretrained(tmp_path)
    ours = load(str(tmp_path)).model
    assert ours.config.pool == "query" and ours.config.norm == "rmsnorm"
    cfg = ref.config
    heads, hd = cfg.num_attention_heads, cfg.hidden_size // cfg.num_attention_heads
    contexts, mlps, final, handles = _record([(layer.attention.out_proj, layer.ffn) for layer in ref.encoder.layers],
                                             ref.rms_norm)
    pixels = torch.randn(1, 3, 32, 32)
    direction = torch.randn(cfg.hidden_size)
    with torch.no_grad():
        pooled = ref(pixel_values=pixels).pooler_output[0]
        for h in handles:
            h.remove()
        x = final["x"][0].double()  # (T, D) the final stream, before the final RMSNorm
        rms = (x.pow(2).mean(-1, keepdim=True) + ref.rms_norm.variance_epsilon).sqrt()  # (T, 1) frozen
        pool = ref.head
        keys = pool.k_proj(ref.rms_norm(final["x"]))[0].double().reshape(-1, heads, hd)  # (T, H, hd)
        probs = torch.einsum("hc,thc->ht", pool.cls_token[0, 0].double().reshape(heads, hd), keys)
        probs = probs.mul(hd**-0.5).softmax(-1)  # (H, T) the query's attention, frozen
        w_v = pool.v_proj.weight.double().reshape(heads, hd, -1)  # (H, hd, D)
        w_o = pool.output_proj.weight.double()

        def share(v: torch.Tensor) -> float:  # a part of the final stream (T, D) -> its share of the projection
            normed = v.double() * ref.rms_norm.weight.double() / rms  # (T, D)
            per_head = torch.einsum("ht,td,hcd->hc", probs, normed, w_v)  # (H, hd)
            return float(direction.double() @ (w_o @ per_head.reshape(-1)))

        expected_heads = torch.zeros(cfg.num_hidden_layers, heads, dtype=torch.float64)
        expected_mlp = torch.zeros(cfg.num_hidden_layers, dtype=torch.float64)
        for i, layer in enumerate(ref.encoder.layers):
            weight = layer.attention.out_proj.weight.double()  # (D, D)
            for h in range(heads):
                cut = slice(h * hd, (h + 1) * hd)
                expected_heads[i, h] = share(contexts[i][0, :, cut].double() @ weight[:, cut].T)
            expected_mlp[i] = share(mlps[i][0])
    d = decompose(ours, pixels, direction=direction)
    assert d.kind == "direction"
    assert d.logit == pytest.approx(float(pooled @ direction), abs=1e-4)
    assert d.total == pytest.approx(d.logit, rel=1e-4, abs=1e-6)
    got_heads = torch.tensor(d.heads(cfg.num_hidden_layers, heads), dtype=torch.float64)
    torch.testing.assert_close(got_heads, expected_heads, atol=1e-5, rtol=1e-4)
    got_mlp = torch.tensor([p.value for p in d.parts if p.name == "mlp"], dtype=torch.float64)
    torch.testing.assert_close(got_mlp, expected_mlp, atol=1e-5, rtol=1e-4)
    assert expected_heads.abs().max() > 1e-3 and expected_mlp.abs().max() > 1e-3
