import pytest
import torch

from vit_explorer.data import synthetic


@pytest.mark.parametrize("variant", sorted(synthetic.VARIANTS))
def test_deterministic_balanced_and_sliceable(variant: str) -> None:
    x1, y1 = synthetic.generate(300, seed=3, variant=variant)
    x2, y2 = synthetic.generate(300, seed=3, variant=variant)
    assert x1.shape == (300, 3, 32, 32) and x1.dtype == torch.uint8
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    # the first chunk holds every class equally often, up to one image
    counts = torch.bincount(y1[: synthetic.CHUNK], minlength=len(synthetic.VARIANTS[variant]))
    assert counts.max() - counts.min() <= 1
    # a shorter request is a prefix of a longer one; another seed or split differs
    x3, _ = synthetic.generate(100, seed=3, variant=variant)
    assert torch.equal(x3, x1[:100])
    assert not torch.equal(synthetic.generate(100, seed=4, variant=variant)[0], x3)
    assert not torch.equal(synthetic.generate(100, seed=3, variant=variant, split="val")[0], x3)


def test_shapes_are_visible_and_sizes_configurable() -> None:
    x, y = synthetic.generate(64, seed=0, size=48)
    assert x.shape == (64, 3, 48, 48)
    # every image has a shape whose colour stands out: the per-image pixel spread is large
    spread = x.float().amax(dim=(1, 2, 3)) - x.float().amin(dim=(1, 2, 3))
    assert (spread > 80).all()


def test_where_label_is_the_cell_of_the_shape() -> None:
    # the shape is where the pixels differ most from the image's median colour; its centroid's cell is the label
    x, y = synthetic.generate(300, seed=1, variant="where")
    xf = x.float()
    diff = (xf - xf.flatten(2).median(dim=2).values[:, :, None, None]).abs().sum(1)  # (n, S, S)
    rows, cols = torch.meshgrid(torch.arange(32.0), torch.arange(32.0), indexing="ij")
    hits = 0
    for img, label in zip(diff, y, strict=True):
        w = (img >= img.flatten().topk(12).values[-1]).float()
        r, c = (w * rows).sum() / w.sum(), (w * cols).sum() / w.sum()
        hits += int(r * 3 // 32) * 3 + int(c * 3 // 32) == int(label)
    assert hits / len(y) > 0.95


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="variant"):
        synthetic.generate(4, variant="nope")
    with pytest.raises(ValueError, match="at least 8"):
        synthetic.generate(4, size=4)
    for n in (-1, 2.5, "10"):
        with pytest.raises(ValueError, match="number of images"):
            synthetic.generate(n)  # type: ignore[arg-type]
