"""Which points lie inside a polygon: the projector's lasso selection, without Qt."""

from __future__ import annotations

import numpy as np


def inside(points: np.ndarray, polygon: np.ndarray) -> np.ndarray:
    """(M,) bool: which of the (M, 2) points lie inside the (V, 2) polygon (closed implicitly; even-odd rule, so a
    self-crossing freehand lasso selects what it encloses an odd number of times). Fewer than 3 vertices enclose
    nothing."""
    pts = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    poly = np.asarray(polygon, dtype=np.float64).reshape(-1, 2)
    result = np.zeros(len(pts), dtype=bool)
    if len(poly) < 3:
        return result
    px, py = pts[:, 0], pts[:, 1]
    # a ray from each point towards +x crosses an edge (a, b) when the edge straddles the point's y and the crossing
    # lies right of the point; one edge at a time keeps the memory O(M) for a lasso of hundreds of vertices
    for (ax, ay), (bx, by) in zip(poly, np.roll(poly, -1, axis=0), strict=True):
        if ay == by:  # horizontal: straddles no y (half-open rule below)
            continue
        straddles = (ay > py) != (by > py)
        crossing = ax + (py - ay) * (bx - ax) / (by - ay)
        result ^= straddles & (px < crossing)
    return result
