"""The deliveries' sort order equals np.lexsort's, on the packed path and the fallback."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pruning.deliveries import Deliveries, sort_order

_INT64 = np.iinfo(np.int64)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(-5, 40), st.integers(0, 60)), max_size=200),
    st.sampled_from([0, 1 << 20, 1 << 40, int(_INT64.max) - 100]),
)
def test_sort_order_is_lexsort(pairs: list[tuple[int, int]], shift: int) -> None:
    mid = np.array([p[0] for p in pairs], dtype=np.int64)
    sid = np.array([p[1] for p in pairs], dtype=np.int64) + np.int64(shift)
    np.testing.assert_array_equal(sort_order(mid, sid), np.lexsort((sid, mid)))


def test_sort_order_falls_back_when_the_key_would_overflow() -> None:
    # Ranges whose product exceeds int64: packing would wrap, lexsort must be used.
    mid = np.array([3, _INT64.max, _INT64.min, 3, 0], dtype=np.int64)
    sid = np.array([_INT64.min, 0, 5, _INT64.max, 7], dtype=np.int64)
    np.testing.assert_array_equal(sort_order(mid, sid), np.lexsort((sid, mid)))
    np.testing.assert_array_equal(sort_order(mid, sid), [2, 4, 0, 3, 1])


def test_concat_sorts_by_message_then_subscription() -> None:
    a = Deliveries(np.array([2, 1]), np.array([9, 4]), np.array([1.0, 2.0]),
                   np.array([0.7, 0.8]))
    b = Deliveries(np.array([1, 2]), np.array([3, 1]), np.array([3.0, 4.0]),
                   np.array([0.9, 1.0]))
    out = Deliveries.concat([a, b])
    np.testing.assert_array_equal(out.message_id, [1, 1, 2, 2])
    np.testing.assert_array_equal(out.subscription_id, [3, 4, 1, 9])
    np.testing.assert_array_equal(out.distance, [3.0, 2.0, 4.0, 1.0])
    np.testing.assert_array_equal(out.score, [0.9, 0.8, 1.0, 0.7])
