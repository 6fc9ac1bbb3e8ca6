"""The slots' record (roadpubsub.index.slot_record): one 64-byte row per slot holding what matching
reads per candidate, of which the facts and the subscriptions' alpha and tau are views.
It must stay equal to them through builds, updates, compaction, save and load."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from roadpubsub.index.bia import BasicIndex
from roadpubsub.index.eia import EnhancedIndex
from roadpubsub.index.slot_record import (
    CHAIN_INT32_COLUMN,
    FACT_COLUMNS,
    SUB_COLUMNS,
    TEXT_INT32_COLUMN,
    aligned_rows,
    pack_text_span,
    text_span,
)
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.store import load_index
from roadpubsub.index.workload import generate_workload


def _assert_record_matches(index) -> None:  # type: ignore[no-untyped-def]
    record = index.slot_record
    n = len(index.subs)
    assert record.shape == (n, 8) and record.ctypes.data % 64 == 0
    for k, name in enumerate(FACT_COLUMNS):
        column = getattr(index.facts, name)
        np.testing.assert_array_equal(record[:, k], column)
        assert np.shares_memory(record, column)
    for k, name in enumerate(SUB_COLUMNS, start=len(FACT_COLUMNS)):
        column = getattr(index.subs, name)
        np.testing.assert_array_equal(record[:, k], column)
        assert np.shares_memory(record, column)
    ints = record.view(np.int32)
    np.testing.assert_array_equal(ints[:, CHAIN_INT32_COLUMN], index.facts.chain)
    assert index.facts.chain.dtype == np.int32
    # The keywords' span, packed where it fits (the matcher reads it instead of kw_ptr).
    kw_ptr = index.subs.kw_ptr
    for r in range(n):
        assert text_span(int(ints[r, TEXT_INT32_COLUMN]), kw_ptr, r) == (kw_ptr[r],
                                                                         kw_ptr[r + 1])
    assert (ints[:, TEXT_INT32_COLUMN] >= 0).all() or n == 0
    # What it holds equals what the spatial index computes for the slots' points.
    fresh = index.spatial.facts(index.subs.points)
    for name in ("x", "y", "din_out", "din_in", "chain_offset", "chain"):
        np.testing.assert_array_equal(getattr(index.facts, name), getattr(fresh, name))


@pytest.mark.parametrize("arch", [EnhancedIndex, BasicIndex], ids=["eia", "bia"])
def test_the_record_follows_builds_updates_compaction_and_files(andorra, arch,
                                                                tmp_path) -> None:
    wl = generate_workload(andorra, n_subscriptions=1500, n_messages=5, seed=4,
                           alpha_spread=0.4, tau_spread=0.3)
    subs = wl.subscriptions
    half = np.arange(len(subs)) < 1000
    index = arch(SpatialIndex.build(andorra, capacity=80), subs.take(np.flatnonzero(half)),
                 wl.weights, dmax_m=3000.0)
    _assert_record_matches(index)
    # Memory held counts the record's whole buffer (its padding too), not its views.
    record = index.slot_record
    views = [getattr(index.facts, k) for k in (*FACT_COLUMNS, "chain")] + \
        [getattr(index.subs, k) for k in SUB_COLUMNS]
    assert sum(v.size * v.itemsize for v in views) < record.nbytes
    index.auto_compact = False
    index.subscribe(subs.take(np.flatnonzero(~half)))
    index.unsubscribe(subs.ids[:10])
    _assert_record_matches(index)
    index.compact()
    assert len(index.subs) == len(subs) - 10
    _assert_record_matches(index)
    path = index.save(tmp_path / "i.npz")
    loaded = load_index(path)
    _assert_record_matches(loaded)
    np.testing.assert_array_equal(loaded.slot_record[:, :7], index.slot_record[:, :7])
    # Facts or slots set by other means are packed on first use.
    loaded.facts = dataclasses.replace(loaded.facts, x=loaded.facts.x.copy())
    _assert_record_matches(loaded)


@pytest.mark.parametrize("n", [0, 1, 5, 1000])
def test_aligned_rows_start_on_a_cache_line(n) -> None:
    for _ in range(5):
        rows = aligned_rows(n, 8)
        assert rows.shape == (n, 8) and rows.flags.c_contiguous
        if n:
            assert rows.ctypes.data % 64 == 0


def test_a_span_that_does_not_fit_falls_back_to_the_pointers() -> None:
    kw_ptr = np.array([0, 8, 9, 2**28 + 1], dtype=np.int64)
    assert pack_text_span(0, 7) == 7 << 28 and text_span(7 << 28, kw_ptr, 0) == (0, 7)
    assert pack_text_span(5, 5) == 5 and text_span(5, kw_ptr, 0) == (5, 5)
    for start, stop in ((0, 8), (2**28 - 1, 2**28), (2**28, 2**28 + 1)):
        assert pack_text_span(start, stop) == -1
    assert text_span(-1, kw_ptr, 0) == (0, 8)
    assert text_span(-1, kw_ptr, 2) == (9, 2**28 + 1)
