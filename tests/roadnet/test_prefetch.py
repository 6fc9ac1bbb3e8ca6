"""The kernels' prefetch hint: compiles for the arrays they pass and never reads or
writes an element, whatever the index."""

from __future__ import annotations

import numba
import numpy as np

from roadpubsub.roadnet._prefetch import prefetch


@numba.njit(cache=False)
def _sum_with_prefetch(a, b, flags, ahead):  # type: ignore[no-untyped-def]
    total = 0.0
    for i in range(a.size):
        prefetch(a, i + ahead)
        prefetch(b, 4 * (i + ahead))
        prefetch(flags, i - ahead)
        total += a[i]
    return total


def test_prefetch_changes_nothing_for_any_index() -> None:
    a = np.arange(10.0)
    b = np.arange(40.0).reshape(10, 4)
    flags = np.zeros(10, dtype=np.bool_)
    before = (a.copy(), b.copy(), flags.copy())
    for ahead in (0, 3, 9, 10, 10**12, -(10**12)):
        assert _sum_with_prefetch(a, b, flags, ahead) == 45.0
    np.testing.assert_array_equal(a, before[0])
    np.testing.assert_array_equal(b, before[1])
    np.testing.assert_array_equal(flags, before[2])
    empty = np.empty(0)
    assert _sum_with_prefetch(empty, b, flags, 1) == 0.0
