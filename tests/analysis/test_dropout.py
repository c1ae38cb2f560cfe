import pytest
import torch

from vit_explorer.analysis.dropout import dropout_demo

from .conftest import make_model


def test_dropout_on_real_embeddings() -> None:
    model = make_model("cls")
    with torch.no_grad():
        embedded = model.forward_intermediates(torch.randn(4, 3, *model.config.image_size), capture=("with_pos",))
    demo = dropout_demo(embedded["with_pos"], p=0.1)
    assert demo.zeros_before == 0.0 and demo.zeros_eval == 0.0 and demo.eval_unchanged
    assert demo.zeros_train == pytest.approx(0.1, abs=0.02)  # 4 x 25 x 64 values
    assert demo.scale_error < 1e-5


def test_zeros_already_in_the_input_are_counted() -> None:
    x = torch.ones(100, 100)
    x[:, :20] = 0
    demo = dropout_demo(x, p=0.5, seed=1)
    assert demo.zeros_before == pytest.approx(0.2)
    assert demo.zeros_train == pytest.approx(0.2 + 0.8 * 0.5, abs=0.03)
    assert demo.scale_error < 1e-6


def test_bad_probability() -> None:
    with pytest.raises(ValueError, match="dropout probability"):
        dropout_demo(torch.ones(3), p=1.0)
