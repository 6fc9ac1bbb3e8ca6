"""The Hilbert order of points (what the matchers sort messages by, for locality)."""

from __future__ import annotations

import numpy as np
import pytest

from roadpubsub.roadnet.network import hilbert_key, spatial_order


@pytest.mark.parametrize("order", [1, 3, 5])
def test_hilbert_keys_walk_a_full_grid_one_step_at_a_time(order) -> None:
    """On the 2^order x 2^order grid every key is used once, and consecutive keys are
    neighbouring cells: the curve's defining property."""
    side = 1 << order
    gx, gy = np.meshgrid(np.arange(side, dtype=np.float64), np.arange(side, dtype=np.float64))
    x, y = gx.ravel(), gy.ravel()
    key = hilbert_key(x, y, order=order)
    np.testing.assert_array_equal(np.sort(key), np.arange(side * side))
    walk = np.argsort(key)
    steps = np.abs(np.diff(x[walk])) + np.abs(np.diff(y[walk]))
    np.testing.assert_array_equal(steps, np.ones(side * side - 1))


def test_spatial_order_is_a_permutation_that_ignores_scale() -> None:
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=5000) * 1e4, rng.normal(size=5000) * 3e3
    order = spatial_order(x, y)
    np.testing.assert_array_equal(np.sort(order), np.arange(x.size))
    np.testing.assert_array_equal(spatial_order(4 * x, 4 * y), order)
    np.testing.assert_array_equal(spatial_order(x[:1], y[:1]), [0])
