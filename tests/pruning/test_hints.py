"""The prefetch hint compiles for any 1-d array and index type, reads nothing and never
faults, even for an index past the end."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from pruning.hints import prefetch


@numba.njit
def _sum_with_hints(values, rows):  # pragma: no cover - compiled
    total = 0.0
    for j in range(rows.size):
        prefetch(values, rows[j] + 1_000_000)  # far past the end: only a hint
        prefetch(rows, j + 3)
        total += values[rows[j]]
    return total


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.int8])
def test_prefetch_changes_nothing(dtype) -> None:
    values = np.arange(50).astype(dtype)
    rows = np.array([3, 1, 49, 0], dtype=np.int32)
    assert _sum_with_hints(values, rows) == float(values[rows].astype(np.float64).sum())


def test_prefetch_wants_a_1d_array_and_an_integer() -> None:
    @numba.njit
    def bad(values):  # pragma: no cover - compiled
        prefetch(values, 0.5)

    with pytest.raises(numba.core.errors.TypingError):
        bad(np.zeros(3))
