"""The id helpers of :mod:`roadpubsub.index.model`."""

from __future__ import annotations

import numpy as np
import pytest

from roadpubsub.index.model import has_repeats

TOP = 2**63 - 1


@pytest.mark.parametrize(("ids", "want"), [
    ([], False),
    ([7], False),
    ([3, 1, 2], False),
    ([5, 1, 2, 5], True),  # the twins at both ends
    ([1, 2, 3, 3], True),  # the twins last
    ([TOP, TOP - 1, -TOP - 1], False),  # the extremes apart, no overflow in the compare
    ([TOP - 1, 0, TOP, TOP], True),
    ([-(2**63), 4, -(2**63)], True),
    ([-1, 1, -2, 2], False),
])
def test_has_repeats(ids: list[int], want: bool) -> None:
    arr = np.array(ids, dtype=np.int64)
    assert has_repeats(arr) is want
    assert has_repeats(arr) == (np.unique(arr).size < arr.size)


def test_has_repeats_leaves_its_input_unsorted() -> None:
    arr = np.array([9, 3, 9, 1], dtype=np.int64)
    assert has_repeats(arr)
    assert arr.tolist() == [9, 3, 9, 1]
