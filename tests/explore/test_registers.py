"""Issue 29: outlier tokens, the register-neuron finder and test-time registers, on a seeded tiny model with a
register neuron planted in one block (a hidden unit made large at chosen patches, whose output column writes a
large vector): the finder ranks it first and names its block; moving it into a test-time register removes the
planted high-norm tokens; 'unchanged' with the register's own value leaves the logits bit-identical; the entropy is
a numpy recomputation from the captured attention."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from PIL import Image

from vit_explorer.analysis import registers as R
from vit_explorer.explore import dataset as D
from vit_explorer.explore import registers as X
from vit_explorer.explore.build import build_loaded
from vit_explorer.models import preset

BLOCK, UNIT = 2, 37  # where the neuron is planted
PLANTED = (3, 9, 12)  # patch indices (raster order) it fires at
SIZE = 32


@pytest.fixture(scope="module")
def loaded():
    torch.manual_seed(0)
    return build_loaded(preset("classroom-tiny", image_size=(SIZE, SIZE), depth=4), device="cpu")


def plant(model: torch.nn.Module, value: float = 60.0):
    """The planted neuron: its output column a unit vector, its activation `value` at the PLANTED patches (the
    last N tokens: a register in front moves them, not this)."""
    fc2 = model.get_submodule(f"blocks.{BLOCK}.mlp.fc2")
    with torch.no_grad():
        fc2.weight[:, UNIT] = 0.0
        fc2.weight[0, UNIT] = 1.0
    n = model.layout().num_patches

    def fire(hidden: torch.Tensor, hook) -> torch.Tensor:
        hidden = hidden.clone()
        for p in PLANTED:
            hidden[:, hidden.shape[1] - n + p, UNIT] = value
        return hidden

    return f"blocks.{BLOCK}.mlp.hook_post", fire


@pytest.fixture()
def planted(loaded) -> Iterator[object]:
    model = loaded.model
    saved = model.get_submodule(f"blocks.{BLOCK}.mlp.fc2").weight.detach().clone()
    name, fire = plant(model)
    model.add_hook(name, fire)
    yield loaded
    model.reset_hooks()
    with torch.no_grad():
        model.get_submodule(f"blocks.{BLOCK}.mlp.fc2").weight.copy_(saved)


def images(n: int = 12) -> torch.Tensor:
    return torch.randn(n, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1))


def test_the_finder_ranks_the_planted_neuron_first_and_names_its_block(planted) -> None:
    source = D.open_source("shapes", limit=24)
    diagnosis = X.diagnose(planted, source, batch_size=8)
    assert diagnosis.outlier_state == BLOCK + 1  # after the MLP of the planted block
    assert diagnosis.detect_state == planted.config.depth  # the finder reads the last state's outliers (the paper's)
    (block, unit, score), *rest = diagnosis.neurons()
    assert (block, unit) == (BLOCK, UNIT)
    assert score == pytest.approx(60.0) and all(r[2] < score / 5 for r in rest)
    share = diagnosis.outlier_share
    assert share[BLOCK + 1] == pytest.approx(len(PLANTED) / 64) and share[: BLOCK + 1].max() < X.MIN_SHARE
    assert diagnosis.outlier_map[BLOCK + 1].reshape(-1)[list(PLANTED)].min() == 1.0
    out = diagnosis.to_json()
    assert set(out) >= {"states", "neurons", "outlier_state"} and out["outlier_state"] == BLOCK + 1
    assert set(out["states"][0]) == {"state", "outlier_share", "max_norm", "median_norm"}
    assert out["neurons"][0] == {"block": BLOCK, "unit": UNIT, "score": pytest.approx(60.0)}


def test_an_untrained_model_has_no_outliers_and_near_uniform_attention(loaded, tmp_path) -> None:
    rng = np.random.default_rng(0)
    for i in range(8):
        Image.fromarray(rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8)).save(tmp_path / f"{i}.png")
    diagnosis = X.diagnose(loaded, D.open_source(str(tmp_path)), batch_size=8)
    assert diagnosis.outlier_state is None and diagnosis.neurons() == []
    assert diagnosis.entropy is not None and diagnosis.max_entropy == pytest.approx(math.log(65))
    assert diagnosis.entropy.min() > 0.9 * diagnosis.max_entropy


def test_the_scores_are_the_papers_mean_over_images_of_the_mean_at_outliers(planted) -> None:
    """The one-pass sums against a direct recomputation: per image, each unit's mean activation over that image's
    outlier positions at the outlier state, averaged over the images that have any."""
    model, x = planted.model, images(6)
    _, cache = model.run_with_cache(x, names_filter=lambda n: n.endswith(("mlp.hook_post", "hook_resid_post")))
    last = planted.config.depth - 1
    state = cache[f"blocks.{last}.hook_resid_post"]  # the paper's detect_outliers_layer=-1
    mask = R.outlier_mask(R.token_norms(state)[:, 1:])  # (B, N)
    assert mask.any(dim=1).all()
    for block in range(planted.config.depth):  # every block, as the paper's loop over layers
        acts = cache[f"blocks.{block}.mlp.hook_post"][:, 1:]  # (B, N, H)
        expected = torch.stack([acts[b][mask[b]].abs().mean(dim=0) for b in range(len(x))]).mean(dim=0)
        got = R.register_neuron_sums(R.outlier_weights(mask[None]), acts)[0] / len(x)
        torch.testing.assert_close(got, expected)


def test_moving_the_planted_neuron_removes_the_high_norm_tokens(planted) -> None:
    model, x = planted.model, images()
    n = model.layout().num_patches
    _, cache = model.run_with_cache(x, names_filter=f"blocks.{BLOCK}.hook_resid_post")
    norms = R.token_norms(cache[f"blocks.{BLOCK}.hook_resid_post"])[:, -n:]
    others = np.setdiff1d(np.arange(n), PLANTED)
    assert norms[:, list(PLANTED)].min() > 5 * norms[:, others].max()  # planted: high-norm
    out = X.with_registers(planted, x, [(BLOCK, UNIT)], mode="zero", capture=("hidden_states",))
    layout = out["layout"]
    assert layout.num_prefix_tokens == 2 and layout.registers == (1,)
    for state in out["hidden_states"][BLOCK:]:
        moved = R.token_norms(state)
        patch = moved[:, -n:]
        assert patch[:, list(PLANTED)].max() <= 1.5 * patch[:, others].max()  # down to the others' level
        assert (moved[:, 1] > 5 * patch.max(dim=1).values).all()  # the register holds them now


def test_unchanged_patches_and_the_registers_own_value_are_bit_identical(loaded) -> None:
    """The edit with the patches 'unchanged' that writes into the register the value it already has is the same pass
    as the register with no edit, bit for bit (a wrong register index or a touched patch would show)."""
    model, x = loaded.model, images(4)
    units = [5, 17]
    with torch.inference_mode():
        with model.test_time_registers(1) as layout:
            plain, cache = model.run_with_cache(x, names_filter="blocks.1.mlp.hook_post")
        own = cache["blocks.1.mlp.hook_post"][:, layout.registers[-1], units]  # (B, U)
        edited = X.with_registers(loaded, x, [(1, u) for u in units], mode="unchanged", register_value=own)
        zero = X.with_registers(loaded, x, [(1, u) for u in units], mode="unchanged", register_value=0.0)
        without = model(x)
    assert torch.equal(edited["logits"], plain)
    assert not torch.equal(zero["logits"], plain)  # the register's own value is not zero: attention wrote into it
    assert not torch.equal(without, plain)  # a test-time register is a token: attention sees it
    assert model.layout().num_prefix_tokens == 1  # the context ended


def test_register_modes_zero_mean_unchanged() -> None:
    hidden = torch.arange(2 * 5 * 3, dtype=torch.float32).reshape(2, 5, 3)  # (B, T=1+1+3, H)
    for mode, expect in (("zero", 0.0), ("unchanged", None), ("mean", "mean")):
        h = hidden.clone()
        R.activate_on_registers([1], 3, [1], mode)(h, None)  # type: ignore[arg-type]
        patches = hidden[:, 2:, 1]
        assert torch.equal(h[:, 1, 1], patches.max(dim=1).values)
        if expect == 0.0:
            assert (h[:, 2:, 1] == 0).all()
        elif expect is None:
            assert torch.equal(h[:, 2:, 1], patches)
        else:
            assert torch.allclose(h[:, 2:, 1], patches.mean(dim=1, keepdim=True).expand(-1, 3))
        assert torch.equal(h[:, :, [0, 2]], hidden[:, :, [0, 2]]) and torch.equal(h[:, 0], hidden[:, 0])
    with pytest.raises(ValueError, match="register mode"):
        R.activate_on_registers([1], 3, [1], "max")


def test_entropy_equals_numpy_from_the_captured_attention(loaded) -> None:
    model, x = loaded.model, images(3)
    _, cache = model.run_with_cache(x, names_filter=lambda n: n.endswith("attn.hook_pattern"))
    for i in range(loaded.config.depth):
        p = cache[f"blocks.{i}.attn.hook_pattern"].double().numpy()
        expected = -(p * np.log(p)).sum(axis=-1).mean(axis=-1)  # (B, heads)
        np.testing.assert_allclose(R.attention_entropy(torch.from_numpy(p)).numpy(), expected, rtol=1e-6)
    uniform = torch.full((1, 2, 5, 5), 0.2)
    assert R.attention_entropy(uniform)[0, 0].item() == pytest.approx(math.log(5))
    onehot = torch.zeros(1, 1, 3, 3)
    onehot[..., 0] = 1.0
    assert R.attention_entropy(onehot).item() == 0.0


def test_parse_and_check_neurons(loaded) -> None:
    assert R.parse_neurons("2:37, 0:1") == [(2, 37), (0, 1)]
    for bad in ("2", "a:1", "1:-2", ""):
        with pytest.raises(ValueError, match="BLOCK:UNIT"):
            R.parse_neurons(bad)
    with pytest.raises(ValueError, match="block 9"):
        X.check_neurons(loaded, [(9, 0)])
    with pytest.raises(ValueError, match="unit 128"):
        X.check_neurons(loaded, [(0, 128)])


@pytest.mark.parametrize("overrides", [
    dict(pos_embed="rope"), dict(pos_embed="rel_bias"), dict(pos_embed="rope_dinov3", reg_tokens=2),
    dict(prefix_tokens="cls+dist"), dict(prefix_tokens="none", pool="gap"), dict(pos_embed="sincos_2d", mlp="swiglu"),
])
def test_a_test_time_register_fits_every_layout(overrides) -> None:
    """Position schemes (RoPE skips prefix tokens, BEiT's bias has prefix rows), distillation tokens, GAP, SwiGLU:
    the extra token is one more register, named in the layout, and the pooled output never reads it."""
    loaded = build_loaded(preset("classroom-tiny", image_size=(16, 16), **overrides), device="cpu")
    model, x = loaded.model, images(2)[:, :, :16, :16]
    before = model.layout()
    out = X.with_registers(loaded, x, [(0, 1), (1, 2)], capture=("hidden_states",))
    layout = out["layout"]
    assert layout.num_prefix_tokens == before.num_prefix_tokens + 1 and layout.registers[-1] == before.num_prefix_tokens
    assert out["hidden_states"][0].shape[1] == before.num_tokens + 1 and out["logits"].shape == model(x).shape
    assert torch.isfinite(out["logits"]).all() and model.layout() == before


def test_cait_has_no_place_for_a_test_time_register() -> None:
    loaded = build_loaded(preset("classroom-tiny", image_size=(16, 16), class_attn_depth=1, prefix_tokens="cls",
                                  pos_embed_prefix=False),
                          device="cpu")
    with pytest.raises(Exception, match="CaiT"):
        X.with_registers(loaded, images(1)[:, :, :16, :16], [(0, 1)])


def test_the_positional_artifact_is_all_of_the_variance_when_every_image_is_the_same(loaded, tmp_path) -> None:
    image = np.random.default_rng(0).integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8)
    for i in range(3):
        Image.fromarray(image).save(tmp_path / f"{i}.png")
    d = X.diagnose(loaded, D.open_source(str(tmp_path)), batch_size=2)
    assert d.positional_share is not None and d.position_mean is not None
    np.testing.assert_allclose(d.positional_share, 1.0, rtol=1e-4)
    pixels = D.dataset_preprocessing(loaded)(Image.open(tmp_path / "0.png"))
    _, cache = loaded.model.run_with_cache(pixels, names_filter="hook_embedded")
    np.testing.assert_allclose(d.position_mean[0], cache["hook_embedded"][0, 1:].numpy(), rtol=1e-4, atol=1e-5)
    rng = np.random.default_rng(1)
    for i in range(3):
        Image.fromarray(rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8)).save(tmp_path / f"{i}.png")
    noisy = X.diagnose(loaded, D.open_source(str(tmp_path)), batch_size=2).positional_share
    assert noisy is not None and (noisy < 0.9).all()


def test_a_pass_on_another_thread_is_not_counted(planted) -> None:
    """The diagnosis's hooks read only their own thread's pass (a GUI worker may run the model meanwhile)."""
    import threading

    seen: list[int] = []
    batch = X._Batch(planted.model.layout(), planted.config.depth, R.DEFAULT_RATIO, None, attention=True)
    with planted.model.hooks(batch.hooks), torch.inference_mode():
        other = threading.Thread(target=lambda: seen.append(planted.model(images(2)).shape[0]))
        other.start()
        other.join()
        assert seen == [2] and batch.norms == [] and batch.acts == []
        planted.model(images(2))
    assert len(batch.norms) == planted.config.depth + 1 and len(batch.acts) == planted.config.depth


def test_the_finder_alone_finds_the_same_neurons(planted) -> None:
    source = D.open_source("shapes", limit=16)
    full = X.diagnose(planted, source, batch_size=8)
    alone = X.diagnose(planted, source, batch_size=8, attention=False, statistics=False)
    assert alone.neurons()[0][:2] == full.neurons()[0][:2] == (BLOCK, UNIT)
    assert alone.outlier_state == full.outlier_state == BLOCK + 1
    assert alone.entropy is None and alone.positional_share is None and np.isnan(alone.massive_max).all()
    # the fused attention kernel against the explicit softmax: the same numbers to float32 rounding
    np.testing.assert_allclose(alone.norms, full.norms, rtol=1e-5)
    np.testing.assert_allclose(alone.neuron_scores(), full.neuron_scores(), rtol=1e-4, atol=1e-6)


def test_test_time_registers_stay_in_the_thread_that_asked(loaded) -> None:
    """The app's workers share one model: a pass in another thread while this one adds registers runs without."""
    import threading

    model = loaded.model
    x = torch.randn(1, 3, *model.config.image_size)
    seen: dict[str, object] = {}
    with torch.no_grad():
        plain = model(x)
        with model.test_time_registers(2) as layout:
            worker = threading.Thread(target=lambda: seen.update(layout=model.layout(), logits=model(x)))
            worker.start()
            worker.join(30)
            assert layout.num_prefix_tokens == model.config.num_prefix_tokens + 2
    assert seen["layout"] == model.layout()
    assert torch.equal(seen["logits"], plain)
