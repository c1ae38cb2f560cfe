"""The Dataset view's "Features (SAE)" tab: an SAE trained on the tiny model's tokens of a built-in set opens in it,
its features are listed by frequency, the chosen feature's figures hold its crops, map and histogram, a patch click
lists the features active there, ablating a feature changes the live prediction and "off" restores it exactly;
hostile or mismatched files give a message naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from vit_explorer.analysis import sae as S
from vit_explorer.explore import sae as E
from vit_explorer.explore.figures import LinesFigure, MapsFigure, TilesFigure
from vit_explorer.explore.forward import pixels_for

from .conftest import wait_result

STATE = 1  # the tiny model has 2 blocks: state 2 is its last, where patch tokens no longer reach [CLS]


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VIT_EXPLORER_CACHE", str(tmp_path / "cache"))


def analysed(qtbot, window, limit: int = 16):
    window.docks["Dataset"].raise_()
    view = window.views["Dataset"]
    view.data.setCurrentText("shapes")
    view.limit.setValue(limit)
    view.run_button.click()
    qtbot.waitUntil(lambda: view.analysis is not None, timeout=60000)
    view.tabs.setCurrentWidget(view.sae)
    return view


def write_sae(folder: Path, sae: S.SAE, state: int = STATE) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().contiguous() for k, v in sae.state_dict().items() if k != "threshold"},
              folder / E.WEIGHTS)
    (folder / E.METRICS).write_text(json.dumps({"kind": sae.kind, "k": sae.k, "state": state, "tokens": "patch"}))
    return folder


def trained(view, folder: Path) -> S.SAE:
    """An SAE of width 2d, k 4, fitted for a few steps on the analysed images' patch tokens of STATE."""
    loaded = view.session.loaded
    x3, _ = E.tokens(loaded, view.analysis.features.source, STATE, "patch")
    d = x3.shape[-1]
    torch.manual_seed(0)
    sae = S.SAE(d, 2 * d, 4)
    E.fit(sae, x3.reshape(-1, d), steps=20, batch_size=128)
    write_sae(folder, sae)
    return sae


def test_browse_click_and_steer(qtbot, window, tmp_path: Path) -> None:
    view = analysed(qtbot, window)
    tab, session = view.sae, window.session
    sae = trained(view, tmp_path / "sae")
    assert tab.open(tmp_path / "sae")
    qtbot.waitUntil(lambda: tab.encoded is not None, timeout=60000)
    enc = tab.encoded
    source, grid = view.analysis.features.source, view.analysis.features.grid
    assert enc.z.shape == (len(source) * grid[0] * grid[1], sae.width)
    # the list: every feature, most frequent first
    listed = [int(tab.features.item(i).data(256)) for i in range(tab.features.count())]
    assert sorted(listed) == list(range(sae.width))
    assert np.all(np.diff(enc.frequency[listed]) <= 0)
    np.testing.assert_allclose(enc.frequency, (enc.z > 0).mean(0))
    # the figures of the chosen feature: its crops, then its histogram
    f = tab.feature
    assert f == listed[0]
    tiles = tab.figure()
    assert isinstance(tiles, TilesFigure)
    np.testing.assert_array_equal(tiles.tiles, E.crops(source, enc.kept, E.top_tokens(enc.z, f), grid))
    assert len(tab.plots.ci.items) > 0
    tab.figure_kind.setCurrentIndex(2)
    histogram = tab.figure()
    assert isinstance(histogram, LinesFigure)
    active = enc.z[:, f][enc.z[:, f] > 0]
    assert sum(float(v.sum()) for v in histogram.series.values()) == len(active)
    # its map on the image on screen: the codes of the model's own tokens at STATE
    tab.figure_kind.setCurrentIndex(1)
    qtbot.waitUntil(lambda: tab.current_codes() is not None, timeout=20000)
    result = session.result
    loaded = session.loaded
    site = S.state_site(STATE)
    with torch.no_grad():
        _, cache = loaded.model.run_with_cache(pixels_for(result.inputs), names_filter=[site])
    p = result.layout.num_prefix_tokens
    codes = E.codes(sae, cache[site][0, p:].float().numpy())  # (patches, m)
    shown = tab.figure()
    assert isinstance(shown, MapsFigure)
    np.testing.assert_allclose(shown.maps[0], codes[:, f].reshape(result.layout.grid), atol=1e-5)
    # a click on a patch: the features active there, largest first
    strongest = np.unravel_index(int(np.argmax(codes)), codes.shape)
    patch, g = int(strongest[0]), result.layout.grid
    session.select(query=divmod(patch, g[1]))
    got = [(int(tab.at_list.item(i).data(256))) for i in range(tab.at_list.count())]
    assert got == [feature for feature, _ in E.features_at(codes, 0, patch, g)] and got
    # steering: ablate the strongest feature there; the prediction moves as run_with_hooks says, then "off" restores
    clean = session.result.probs.copy()
    feature = int(strongest[1])
    tab.at_list.itemClicked.emit(tab.at_list.item(got.index(feature)))
    assert tab.feature == feature
    tab.steering.setCurrentIndex(1)  # ablate
    steered = wait_result(qtbot, session).probs
    with torch.no_grad():
        expected = loaded.model.run_with_hooks(pixels_for(result.inputs),
                                               fwd_hooks=[(site, S.steer(sae, feature, 0.0))])
    np.testing.assert_allclose(steered, expected[0].float().softmax(-1).numpy(), atol=1e-6)
    assert np.abs(steered - clean).max() > 1e-6
    tab.steering.setCurrentIndex(0)  # off
    assert session.hooks == ()
    np.testing.assert_array_equal(wait_result(qtbot, session).probs, clean)
    # the feature set to its own value at every token leaves the prediction bit-identical
    session.set_hooks(((site, S.steer(sae, feature, None)),))
    np.testing.assert_array_equal(wait_result(qtbot, session).probs, clean)


def test_hostile_files_give_a_message_naming_the_file(qtbot, window, tmp_path: Path) -> None:
    view = analysed(qtbot, window, limit=10)
    tab = view.sae
    d = window.session.loaded.config.embed_dim
    good = write_sae(tmp_path / "good", S.SAE(d, 2 * d, 4))
    truncated = write_sae(tmp_path / "truncated", S.SAE(d, 2 * d, 4))
    data = (truncated / E.WEIGHTS).read_bytes()
    (truncated / E.WEIGHTS).write_bytes(data[: len(data) // 2])
    wide = write_sae(tmp_path / "wide", S.SAE(d + 1, 2 * d, 4))
    garbled = write_sae(tmp_path / "garbled", S.SAE(d, 2 * d, 4))
    (garbled / E.METRICS).write_text('{"kind": "topk", "k": "four"')
    for folder, file, words in ((truncated, E.WEIGHTS, "safetensors"), (wide, E.WEIGHTS, f"width {d}"),
                                (garbled, E.METRICS, "JSON"), (tmp_path / "none", E.WEIGHTS, "no such file")):
        assert not tab.open(folder)
        assert str(folder / file) in tab.note.text() and words in tab.note.text()
        assert tab.sae is None and tab.features.count() == 0
    assert tab.open(good)
    qtbot.waitUntil(lambda: tab.encoded is not None, timeout=60000)
