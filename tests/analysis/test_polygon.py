"""The lasso's point-in-polygon test: equal to scikit-image's `points_in_poly` on random polygons, and right on
shapes whose answer is known."""

from __future__ import annotations

import numpy as np
from skimage.measure import points_in_poly

from vit_explorer.analysis.polygon import inside


def test_square_and_concave_shape() -> None:
    square = np.array([[0, 0], [2, 0], [2, 2], [0, 2]])
    points = np.array([[1, 1], [3, 1], [-1, 1], [1, 3], [1.9, 0.1]])
    assert inside(points, square).tolist() == [True, False, False, False, True]
    u_shape = np.array([[0, 0], [3, 0], [3, 3], [2, 3], [2, 1], [1, 1], [1, 3], [0, 3]])  # the notch is outside
    assert inside(np.array([[0.5, 2], [1.5, 2], [2.5, 2], [1.5, 0.5]]), u_shape).tolist() == [True, False, True, True]


def test_too_few_vertices_enclose_nothing() -> None:
    points = np.random.default_rng(0).normal(size=(10, 2))
    assert not inside(points, np.zeros((0, 2))).any()
    assert not inside(points, np.array([[0, 0], [1, 1]])).any()
    assert inside(np.zeros((0, 2)), np.array([[0, 0], [1, 0], [0, 1]])).shape == (0,)


def test_equals_scikit_image_on_random_freehand_polygons() -> None:
    rng = np.random.default_rng(1337)
    points = rng.uniform(-1.5, 1.5, size=(5000, 2))
    for _ in range(20):
        # a wobbly closed loop, as a hand draws it (star-shaped here; self-crossing below)
        angles = np.sort(rng.uniform(0, 2 * np.pi, 60))
        radii = rng.uniform(0.3, 1.2, 60)
        polygon = np.stack([radii * np.cos(angles), radii * np.sin(angles)], axis=1)
        assert np.array_equal(inside(points, polygon), points_in_poly(points, polygon))
    bow_tie = np.array([[0, 0], [1, 1], [1, 0], [0, 1]])  # self-crossing: even-odd, like scikit-image
    assert np.array_equal(inside(points, bow_tie), points_in_poly(points, bow_tie))
