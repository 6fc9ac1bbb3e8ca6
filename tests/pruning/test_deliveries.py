"""The deliveries' sort order equals np.lexsort's, on the packed path and the fallback."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roadpubsub.pruning.deliveries import Deliveries, sort_order

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


_MAX = int(np.iinfo(np.int64).max)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(-(2**62), 2**62), st.integers(-(2**62), 2**62)),
                max_size=60),
       st.integers(0, 2**62), st.integers(1, 2**40))
def test_sort_order_equals_lexsort_on_wide_ids(pairs: list[tuple[int, int]], base: int,
                                               spread: int) -> None:
    """Ids over the whole int64 range, and ids squeezed into a narrow band far from zero
    (the packed path), with repeats (the stable order of equal pairs)."""
    mid = np.array([p[0] for p in pairs], dtype=np.int64)
    sid = np.array([p[1] for p in pairs], dtype=np.int64)
    np.testing.assert_array_equal(sort_order(mid, sid), np.lexsort((sid, mid)))
    narrow_m = (mid % spread + base).astype(np.int64) if mid.size else mid
    narrow_s = (sid % 7 - base).astype(np.int64) if sid.size else sid
    twice_m = np.concatenate([narrow_m, narrow_m[::-1]])
    twice_s = np.concatenate([narrow_s, narrow_s[::-1]])
    np.testing.assert_array_equal(sort_order(twice_m, twice_s), np.lexsort((twice_s, twice_m)))


@pytest.mark.parametrize("m_span", [7, 49, 127])
def test_sort_order_at_the_exact_packing_limit(m_span: int) -> None:
    """(message range) * (subscription range) == 2**63 - 1 exactly (7 * 73 * 127 * ...
    divides it): packing must still order correctly; one more subscription id and it must
    fall back."""
    assert _MAX % m_span == 0
    s_span = _MAX // m_span
    lo = -(2**62)
    mid = np.array([m_span - 1, 0, m_span - 1, 0, 1, 1], dtype=np.int64) + lo
    sid = np.array([0, s_span - 1, s_span - 1, 0, s_span // 2, s_span // 2 - 1],
                   dtype=np.int64) + lo
    np.testing.assert_array_equal(sort_order(mid, sid), np.lexsort((sid, mid)))
    sid2 = sid.copy()
    sid2[2] += 1  # range now s_span + 1: the product exceeds int64
    np.testing.assert_array_equal(sort_order(mid, sid2), np.lexsort((sid2, mid)))


@pytest.mark.parametrize("dtype", [np.int32, np.int16, np.uint32, np.uint64])
def test_sort_order_of_other_integer_ids_equals_lexsort(dtype: type[np.integer]) -> None:
    # The key is packed in int64 whatever the ids' type (int32 ids used to wrap); uint64
    # ids above int64's range go to lexsort.
    info = np.iinfo(dtype)
    mid = np.array([info.max, 0, info.max, 3, 0], dtype=dtype)
    sid = np.array([0, info.max, 5, info.max, 2], dtype=dtype)
    got = sort_order(mid, sid)  # type: ignore[arg-type]
    np.testing.assert_array_equal(got, np.lexsort((sid, mid)))
    assert got.dtype == np.int64
