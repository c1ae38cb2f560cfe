"""The SAE's dataset side: AP as sklearn's, the built-in data's factors, resumable training."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score

from vit_explorer.analysis import sae as S
from vit_explorer.explore import dataset as D
from vit_explorer.explore import sae as E
from vit_explorer.paths import BUNDLED


def test_average_precision_matches_sklearn_with_ties() -> None:
    rng = np.random.default_rng(0)
    scores = np.round(rng.random((300, 5)), 1) * (rng.random((300, 5)) < 0.4)  # many ties, many zeros
    targets = rng.random((300, 3)) < 0.3
    ap = E.average_precision(scores, targets)
    for f in range(3):
        for j in range(5):
            assert ap[f, j] == pytest.approx(average_precision_score(targets[:, f], scores[:, j]), abs=1e-12)


def test_factors_on_builtin_data() -> None:
    from vit_explorer import load

    loaded = load(str(BUNDLED["classroom"]))
    source = D.open_source("shapes", limit=12)
    kept = list(range(12))
    t = E.factors(loaded, source, kept, "patch")
    patches = loaded.model.layout().num_patches
    assert all(v.shape == (12 * patches,) and v.dtype == bool for v in t.values())
    assert 0 < t["object"].mean() < 1
    shape = np.stack([t[k] for k in t if k.startswith("shape=")], 1)
    assert (shape.sum(1) == 1).all()  # one shape per image
    position = np.stack([t[k] for k in t if k.startswith("position=")], 1)
    assert (position.sum(1) == 1).all()
    with pytest.raises(ValueError, match="built-in"):
        E.factors(loaded, D.DatasetSource("folder", None, [], np.zeros(0, int), [], np.zeros(0, np.int8)), [],
                  "patch")


def test_resume_continues_the_same_run(tmp_path) -> None:
    x = np.random.default_rng(0).standard_normal((500, 8)).astype(np.float32)

    def fresh() -> S.SAE:
        torch.manual_seed(0)
        return S.SAE(8, 16, 3)

    whole = fresh()
    log = E.fit(whole, x, steps=10, batch_size=64)
    part = fresh()
    E.fit(part, x, steps=5, batch_size=64, checkpoint=tmp_path / "c.pt")
    resumed = fresh()
    log2 = E.fit(resumed, x, steps=10, batch_size=64, checkpoint=tmp_path / "c.pt")
    assert log2.step == 10 and np.allclose(log2.loss, log.loss, atol=1e-6)
    for a, b in zip(whole.parameters(), resumed.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    m, frequency = E.measure(resumed, x)
    assert m["l0"] <= 3 and frequency.shape == (16,) and frequency.sum() == pytest.approx(m["l0"])


def test_baselines_have_the_sae_width() -> None:
    x = np.random.default_rng(0).standard_normal((400, 6)).astype(np.float32)
    b = E.baselines(x, 8)
    assert b["pca"].shape == (400, 8) and b["kmeans"].shape == (400, 8)


def test_browser_pieces() -> None:
    grid = (2, 3)
    z = np.zeros((2 * 6, 4), np.float32)  # two images of 2x3 patches, four features
    z[7, 1], z[2, 1], z[7, 3] = 2.0, 1.0, 0.5
    assert E.top_tokens(z, 1).tolist() == [7, 2] and E.top_tokens(z, 0).size == 0
    assert E.features_at(z, 1, 1, grid) == [(1, 2.0), (3, 0.5)]
    assert E.feature_map(z, 1, 1, grid)[0, 1] == 2.0 and E.feature_map(z, 0, 1, grid)[0, 2] == 1.0
    assert E.order(np.array([0.1, 0.5, 0.0, 0.2])).tolist() == [1, 3, 0, 2]
    assert E.order(np.zeros(3), np.array([1.0, 3.0, 2.0]), by="effect").tolist() == [1, 2, 0]
    source = D.open_source("shapes", limit=2)
    tiles = E.crops(source, [0, 1], np.array([7, 2]), grid)
    side = source.pixels.shape[-1]
    assert tiles.shape[0] == 2 and tiles.dtype == np.uint8 and tiles.shape[1] == round(3 * side / 2)
    picture = np.asarray(source.image(1))
    assert np.array_equal(tiles[0][: side // 2 * 2, : round(side / 3) * 2], picture[: side // 2 * 2, :  # row 0..1
                                                                                      round(side / 3) * 2])


@pytest.mark.parametrize("kind", ["patch", "cls"])
def test_the_store_holds_the_tokens_the_sae_trains_on(tmp_path, kind: str) -> None:
    """store_tokens (what `sae` trains on) equals the tokens gathered in memory at the state's hook site, as a memory
    map of a store of exactly these images, and as these images' rows of a store that holds more."""
    from vit_explorer import load

    loaded = load(str(BUNDLED["classroom"]))
    source = D.open_source("shapes", limit=6)
    x3, kept = E.tokens(loaded, source, 2, kind)
    x, kept_store = E.store_tokens(loaded, source, tmp_path / "store", 2, kind)
    assert isinstance(x, np.memmap) and kept_store == kept
    np.testing.assert_allclose(x, x3.reshape(-1, x3.shape[-1]), rtol=0, atol=1e-5)
    bigger = D.open_source("shapes", limit=9)
    E.store_tokens(loaded, bigger, tmp_path / "store", 2, kind)  # appends the other images
    again, kept_again = E.store_tokens(loaded, source, tmp_path / "store", 2, kind)
    assert sorted(kept_again) == kept
    order = np.argsort(kept_again)
    t = x3.shape[1]
    np.testing.assert_allclose(again.reshape(len(kept), t, -1)[order], x3, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="state"):
        E.store_tokens(loaded, source, tmp_path / "store", 3, kind)  # the store holds state 2 only
