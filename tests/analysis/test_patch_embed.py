import numpy as np
import pytest
import torch

from vit_explorer.analysis.patch_embed import embedding_components, unfold_difference

from .conftest import make_model


def test_components_are_the_covariance_eigenvectors(layout_name: str) -> None:
    model = make_model(layout_name)
    comps, share = embedding_components(model, k=5)
    p, c = model.config.patch_size, model.config.in_chans
    assert comps.shape == (5, p, p, c)
    weight = model.patch_embed.proj.weight.detach().double().numpy()  # (D, C, P, P)
    samples = weight.reshape(weight.shape[0], -1)
    cov = np.cov(samples, rowvar=False)
    values, vectors = np.linalg.eigh(cov)  # ascending
    for i in range(5):
        want = vectors[:, -1 - i].reshape(c, p, p).transpose(1, 2, 0)
        got = comps[i].double().numpy()
        assert min(np.abs(got - want).max(), np.abs(got + want).max()) < 1e-4  # up to sign
        assert float(share[i]) == pytest.approx(values[-1 - i] / values.sum(), rel=1e-4)


def test_conv_equals_unfold_plus_linear() -> None:
    model = make_model("cls")
    images = torch.randn(2, 3, *model.config.image_size)
    assert unfold_difference(model, images) < 1e-5
    # and both equal the by-hand linear map of one patch
    p = model.config.patch_size
    w, bias = model.patch_embed.proj.weight.detach(), model.patch_embed.proj.bias.detach()
    with torch.no_grad():
        stem = model.patch_embed(images)
    r, c = 2, 3
    patch = images[1, :, r * p:(r + 1) * p, c * p:(c + 1) * p]
    for d in (0, 17):
        assert float(stem[1, d, r, c]) == pytest.approx(float((w[d] * patch).sum() + bias[d]), abs=1e-5)


def test_conv_stem_has_no_linear_patch_embedding() -> None:
    with pytest.raises(ValueError, match="convolutional stem"):
        embedding_components(make_model("cls", stem="conv"))
