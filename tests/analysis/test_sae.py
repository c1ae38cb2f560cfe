"""The SAEs against overcomplete's TopKSAE / BatchTopKSAE from the same weights, batches and Adam; their identities;
steering to a feature's own value leaves the logits bit-identical."""

from __future__ import annotations

import matplotlib
import pytest
import torch

from vit_explorer.analysis import sae as S

matplotlib.cm.get_cmap = matplotlib.colormaps.get_cmap  # overcomplete's visualisation calls the removed function
from overcomplete.sae import BatchTopKSAE, TopKSAE  # noqa: E402
from overcomplete.sae.modules import TieableEncoder  # noqa: E402

D, M, K, N, STEPS = 12, 48, 4, 32, 25


class _Centred(torch.nn.Module):
    """overcomplete's SAE on x - b_dec, plus b_dec: Gao et al.'s pre-encoder bias, which overcomplete leaves out."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.b_dec = torch.nn.Parameter(torch.zeros(D))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        _, z, x_hat = self.inner(x - self.b_dec)
        return z, x_hat + self.b_dec


def _pair(kind: str) -> tuple[S.SAE, _Centred]:
    ours = S.SAE(D, M, K, kind)
    with torch.no_grad():
        ours.b_enc.normal_(0, 0.1)
        ours.b_dec.normal_(0, 0.1)
    encoder = TieableEncoder(D, M, bias=True)
    cls = TopKSAE if kind == "topk" else BatchTopKSAE
    inner = cls(D, M, top_k=K if kind == "topk" else K * N, encoder_module=encoder)
    ref = _Centred(inner)
    with torch.no_grad():
        encoder.weight.copy_(ours.W_enc.t())
        encoder.bias.copy_(ours.b_enc)
        inner.dictionary._weights.copy_(ours.W_dec)
        ref.b_dec.copy_(ours.b_dec)
    return ours, ref


def _batches() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    basis = torch.randn(M, D, generator=g)
    out = []
    for _ in range(STEPS):
        codes = torch.rand(N, M, generator=g) * (torch.rand(N, M, generator=g) < 0.1)
        out.append(codes @ basis + 0.5)
    return out


@pytest.mark.parametrize("kind", ["topk", "batchtopk"])
def test_matches_overcomplete(kind: str) -> None:
    ours, ref = _pair(kind)
    batches = _batches()
    losses = list(S.train(ours, batches, torch.optim.Adam(ours.parameters(), lr=1e-2)))
    ref.train()
    opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    ref_losses = []
    for x in batches:
        opt.zero_grad()
        _, x_hat = ref(x)
        loss = (x - x_hat).square().mean()
        loss.backward()
        opt.step()
        ref_losses.append(float(loss))
    inner = ref.inner
    with torch.no_grad():
        ref_dec = inner.dictionary._weights / (inner.dictionary._weights.norm(dim=1, keepdim=True) + S.EPS)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), atol=1e-5, rtol=0)
    torch.testing.assert_close(ours.W_enc.detach(), inner.encoder.weight.detach().t(), atol=1e-5, rtol=0)
    torch.testing.assert_close(ours.b_enc.detach(), inner.encoder.bias.detach(), atol=1e-5, rtol=0)
    torch.testing.assert_close(ours.W_dec.detach(), ref_dec, atol=1e-5, rtol=0)
    torch.testing.assert_close(ours.b_dec.detach(), ref.b_dec.detach(), atol=1e-5, rtol=0)
    assert losses[-1] < losses[0]
    if kind == "batchtopk":
        torch.testing.assert_close(ours.threshold, inner.running_threshold, atol=1e-5, rtol=0)
    ours.eval()
    inner.eval()
    x = batches[0]
    torch.testing.assert_close(ours(x)[0], ref(x)[0], atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind", S.KINDS)
def test_identities(kind: str) -> None:
    sae = S.SAE(D, M, K, kind)
    batches = _batches()
    list(S.train(sae, batches, torch.optim.Adam(sae.parameters(), lr=1e-2)))
    torch.testing.assert_close(sae.W_dec.norm(dim=1), torch.ones(M), atol=1e-6, rtol=0)
    sae.train()
    z, _ = sae(batches[0])
    assert (z >= 0).all()
    l0 = (z > 0).sum(dim=1).float()
    if kind == "batchtopk":
        assert int((z > 0).sum()) <= K * N
    else:
        assert (l0 <= K).all() and l0.mean() > K - 1  # ReLU may leave fewer than k positive
        assert ((z != 0).sum(dim=1) <= K).all()


def test_topk_keeps_exactly_k_positive() -> None:
    sae = S.SAE(D, M, K)
    with torch.no_grad():
        sae.b_enc.fill_(10.0)  # every pre-code positive
    z, _ = sae(torch.randn(N, D))
    assert ((z > 0).sum(dim=1) == K).all()


def test_matryoshka_prefixes() -> None:
    assert S.SAE(D, M, K, "matryoshka").prefixes() == [6, 12, 24, 48]
    assert S.SAE(D, M, K).prefixes() == [M]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="kind"):
        S.SAE(D, M, K, "relu")
    with pytest.raises(ValueError, match="k must"):
        S.SAE(D, M, M + 1)


def test_steering_own_value_is_identity(model) -> None:
    x = torch.randn(2, 3, *model.config.image_size)
    sae = S.SAE(model.config.embed_dim, 4 * model.config.embed_dim, 3).eval()
    site = S.state_site(1)
    clean = model(x)
    for feature in range(5):
        steered = model.run_with_hooks(x, fwd_hooks=[(site, S.steer(sae, feature, None))])
        assert torch.equal(clean, steered)
    _, cache = model.run_with_cache(x, names_filter=[site])
    z = sae.encode(cache[site].reshape(-1, model.config.embed_dim))
    silent = int((z == 0).all(dim=0).nonzero()[0]) if (z == 0).all(dim=0).any() else None
    if silent is not None:  # ablating a feature that never fires is clamping it to its own value
        assert torch.equal(clean, model.run_with_hooks(x, fwd_hooks=[(site, S.steer(sae, silent, 0.0))]))
    active = int(z.sum(dim=0).argmax())
    moved = model.run_with_hooks(x, fwd_hooks=[(site, S.steer(sae, active, 50.0))])
    assert not torch.allclose(clean, moved)
