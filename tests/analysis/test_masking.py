import pytest
import torch

from vit_explorer.analysis.masking import mask_effect, occlusion_sensitivity

from .conftest import make_model


@pytest.mark.parametrize("batch_size", [1, 5, 64])
def test_occlusion_against_one_patch_at_a_time(layout_name: str, batch_size: int) -> None:
    model = make_model(layout_name)
    image = torch.randn(1, 3, *model.config.image_size)
    got = occlusion_sensitivity(model, image, batch_size=batch_size)
    gh, gw = model.config.grid_size
    assert got.shape == (gh, gw)
    with torch.no_grad():
        base = model(image)[0].softmax(-1)
        target = int(base.argmax())
        for r in range(gh):
            for c in range(gw):
                mask = torch.zeros(gh * gw, dtype=torch.bool)
                mask[r * gw + c] = True
                masked = model(image, mask=mask)[0].softmax(-1)
                assert float(got[r, c]) == pytest.approx(float(base[target] - masked[target]), abs=1e-5)


def test_mask_effect() -> None:
    model = make_model("cls+dist")
    image = torch.randn(1, 3, *model.config.image_size)
    gh, gw = model.config.grid_size
    mask = torch.zeros(gh, gw, dtype=torch.bool)
    mask[:, : gw // 2] = True
    effect = mask_effect(model, image, mask, k=3)
    with torch.no_grad():
        before = model(image)[0].softmax(-1)
        after = model(image, mask=mask.flatten())[0].softmax(-1)
    assert effect.before.indices == sorted(range(10), key=lambda i: -float(before[i]))[:3]
    assert effect.after.indices == sorted(range(10), key=lambda i: -float(after[i]))[:3]
    assert effect.after.probs[0] == pytest.approx(float(after.max()))
    assert effect.target_drop == pytest.approx(float(before.max() - after[effect.target]))
