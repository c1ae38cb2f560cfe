"""Issue 29, items 3 and 4: with the session's test-time-registers toggle on, the Attention and Features views show
the original and the shifted model side by side (their shifted side equals the shifted pass recomputed here through
the hook sites), turning it off removes the shifted side, and the Features view's attention-entropy heatmap equals a
numpy recomputation from `run_with_cache`'s patterns."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from vit_explorer.analysis import registers as R
from vit_explorer.explore.forward import pixels_for
from vit_explorer.explore.registers import registers_title
from vit_explorer.gui.measure import SMALLEST_PX

from .screens import run_on_screen

NEURONS = ((1, 3), (0, 5))


def show(window, title: str):
    window.docks[title].raise_()
    return window.views[title]


def shifted_cache(inputs, sites: list[str], k: int = 1, mode: str = "mean") -> tuple[dict, object]:
    """The pass with k test-time registers fed by NEURONS, through the model's own context and run_with_cache."""
    model = inputs.loaded.model
    pixels = pixels_for(inputs)
    with torch.inference_mode(), model.test_time_registers(k):
        layout = model.layout((pixels.shape[2], pixels.shape[3]))
        hooks = R.register_hooks(NEURONS, layout.num_patches, layout.registers[-k:], mode)
        with model.hooks(hooks):
            _, cache = model.run_with_cache(pixels, names_filter=sites)
    return cache, layout


def test_attention_side_by_side_equals_the_shifted_pass(qtbot, window) -> None:
    session = window.session
    view = show(window, "Attention")
    qtbot.waitUntil(lambda: view.maps is not None, timeout=10000)
    session.select(layer=1, head=1)
    session.set_registers(on=True, neurons=NEURONS, mode="mean", k=2)
    qtbot.waitUntil(lambda: view.shifted is not None, timeout=30000)
    result = session.result
    site = "blocks.1.attn.hook_pattern"
    cache, layout = shifted_cache(result.inputs, [site], k=2)
    assert layout.num_prefix_tokens == 3  # [CLS] and the two registers
    expected = cache[site][0, :, 0, layout.num_prefix_tokens:].reshape(-1, *layout.grid).numpy()  # [CLS] row
    np.testing.assert_allclose(view.shifted[1], expected, rtol=1e-5, atol=1e-7)
    plain = result.maps[1][0, :, 0, 1:].reshape(-1, *layout.grid).numpy()  # nothing masked: the view's own pass
    np.testing.assert_allclose(view.shifted[0], plain, rtol=1e-5, atol=1e-7)
    assert not np.allclose(expected, plain)
    # one head: the original's map beside the shifted model's, titled
    assert len(view.figure.maps) == 2 and view.figure.titles[1].startswith(registers_title(2))
    np.testing.assert_allclose(view.figure.maps[1], expected[1], rtol=1e-5, atol=1e-7)

    session.set_attention(mode="all heads")
    qtbot.waitUntil(lambda: view.shifted is not None and len(view.figure.maps) == 2 * len(plain), timeout=30000)
    np.testing.assert_allclose(view.figure.maps[len(plain):], expected, rtol=1e-5, atol=1e-7)

    session.set_registers(on=False)
    assert view.shifted is None and len(view.figure.maps) == len(plain)  # the shifted side is gone
    assert not any(registers_title(2) in t for t in view.figure.titles)


def test_features_norms_side_by_side_and_off(qtbot, window) -> None:
    session = window.session
    view = show(window, "Features")
    view.mode.setCurrentText("token norms")
    qtbot.waitUntil(lambda: view.extra is not None, timeout=20000)
    window.views["Prediction"].register_mode.setCurrentText("mean")  # the Prediction view's controls edit it
    window.views["Prediction"].neurons.setText("1:3,0:5")
    window.views["Prediction"].registers.setChecked(True)
    assert session.registers.on and session.registers.neurons == NEURONS and session.registers.mode == "mean"
    qtbot.waitUntil(lambda: view.extra is not None and len(view.extra.maps) == 2, timeout=30000)
    result = session.result
    depth = result.depth
    sites = ["hook_embedded"] + [f"blocks.{i}.hook_resid_post" for i in range(depth)]
    cache, layout = shifted_cache(result.inputs, sites)
    norms = np.stack([cache[s][0, -layout.num_patches:].float().norm(dim=-1).numpy() for s in sites])  # (S, N)
    np.testing.assert_allclose(view.extra.maps[1], norms[-1].reshape(layout.grid), rtol=1e-5)
    np.testing.assert_allclose(view.figure.series["largest, registers"], norms.max(axis=1),
                               rtol=1e-5)
    original = result.norms[:, result.layout.num_prefix_tokens:]  # (S, N) the view's own pass (nothing masked)
    np.testing.assert_allclose(view.extra.maps[0], original[-1].reshape(layout.grid), rtol=1e-5)
    assert view.extra.titles == ("original", registers_title(1))

    window.views["Prediction"].registers.setChecked(False)
    assert not session.registers.on
    qtbot.waitUntil(lambda: view.extra is not None and len(view.extra.maps) == 1, timeout=20000)
    assert not any("registers" in name for name in view.figure.series)


def test_features_pca_side_by_side(qtbot, window) -> None:
    session = window.session
    view = show(window, "Features")
    session.set_registers(on=True, neurons=NEURONS)
    view.mode.setCurrentText("PCA of patch features")
    qtbot.waitUntil(lambda: view.figure is not None and registers_title(1) in getattr(view.figure, "titles", ()),
                    timeout=30000)
    assert view.figure.titles == ("image", "original", registers_title(1))


def test_entropy_heatmap_equals_numpy(qtbot, window) -> None:
    session = window.session
    view = show(window, "Features")
    view.mode.setCurrentText("attention entropy")
    qtbot.waitUntil(lambda: view.figure is not None and "entropy" in view.figure.titles[0], timeout=20000)
    inputs = session.result.inputs
    model = inputs.loaded.model
    with torch.inference_mode():
        _, cache = model.run_with_cache(pixels_for(inputs), names_filter=lambda n: n.endswith("attn.hook_pattern"))
    patterns = [cache[f"blocks.{i}.attn.hook_pattern"][0].double().numpy() for i in range(session.result.depth)]
    expected = np.stack([-(p * np.log(np.where(p > 0, p, 1.0))).sum(-1).mean(-1) for p in patterns])  # (L, heads)
    np.testing.assert_allclose(view.figure.maps[0], expected, rtol=1e-5, atol=1e-6)
    tokens = patterns[0].shape[-1]
    assert view.figure.levels == (0.0, np.log(tokens))
    assert f"log T = {np.log(tokens):.2f}" in view.figure.colorbar_label


SIDE_BY_SIDE_CHILD = r"""
maximise()
window.show_view("Attention")
view = window.views["Attention"]
window.session.select(head=0)
window.session.set_registers(on=True, neurons=((1, 3), (0, 5)), mode="mean", k=1)
settle(lambda: view.shifted is not None and view._drawn is not None and len(view._drawn.plots) == 2, seconds=300)
settle(quiet=1.0)
boxes = [view.plots.mapFromScene(p.getViewBox().sceneBoundingRect()).boundingRect() for p in view._drawn.plots]
print(json.dumps({"maps": [b.getRect() for b in boxes], "titles": list(view.figure.titles)}))
"""


@pytest.mark.slow
def test_side_by_side_maps_are_the_same_size_at_1024x768(tmp_path: Path) -> None:
    """The shifted side's longer title once made its column wider: 180 px against 310 px at 1024x768. The titles
    wrap to a column's width now, so both maps are drawn at one size."""
    out = run_on_screen(tmp_path, (1024, 768), SIDE_BY_SIDE_CHILD)[-1]
    (_, _, w0, h0), (_, _, w1, h1) = out["maps"]
    assert registers_title(1) in out["titles"][1], out
    assert abs(w0 - w1) <= 2 and abs(h0 - h1) <= 2 and min(w0, h0) >= SMALLEST_PX, out
