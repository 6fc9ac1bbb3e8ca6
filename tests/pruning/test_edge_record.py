"""The EIA's per-edge rows (:func:`roadpubsub.pruning.algorithm1.edge_record`).

The edge loop of Algorithm 1 replaces the paper's per-edge SIM test (lines 14-17, three
loads from the edge statistics) by one comparison with the row's similarity limit. That
is exact only if every bound above the limit is one the SIM test prunes: these tests fail
if the limit is moved below the SIM test's threshold, on values drawn around it and at
the edges (alpha 0 or 1, tau_e above 1 or below 0, empty edges).
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from roadpubsub.index.eia import EnhancedIndex
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.workload import generate_workload
from roadpubsub.pruning.algorithm1 import EDGE_RECORD_WIDTH, edge_record, similarity_prunes
from roadpubsub.pruning.indexed import IndexMatcher

unit = st.floats(0.0, 1.0)


def limit_of(dmax: float, a_min: float, a_max: float, tau_e: float) -> float:
    rec = edge_record(np.zeros((1, 4)), np.zeros(1), np.array([a_min]), np.array([a_max]),
                      np.array([tau_e]), dmax)
    return float(rec[0, 5])


@settings(max_examples=400, deadline=None)
@given(st.floats(1.0, 1e6), unit, unit, st.floats(-0.5, 1.5),
       st.lists(st.floats(0.0, 4.0), min_size=1, max_size=5))
def test_every_bound_above_the_limit_is_pruned_by_the_sim_test(
        dmax: float, a: float, b: float, tau_e: float, steps: list[float]) -> None:
    a_min, a_max = min(a, b), max(a, b)
    lim = limit_of(dmax, a_min, a_max, tau_e)
    if lim == math.inf:
        return
    base = max(lim, 0.0)
    above = [math.nextafter(base, math.inf), base * (1.0 + 1e-15), base + 1e-9,
             *(base + s * dmax for s in steps), 1e300]
    for x in above:
        if x > lim:
            assert similarity_prunes(x, dmax, a_min, a_max, tau_e), (lim, x)
    if lim >= 0.0:
        assert similarity_prunes(lim, dmax, a_min, a_max, tau_e)
    else:
        assert lim == -1.0 and similarity_prunes(0.0, dmax, a_min, a_max, tau_e)


@settings(max_examples=200, deadline=None)
@given(st.floats(1.0, 1e6), st.floats(0.01, 1.0), st.floats(0.0, 1.0),
       st.floats(0.0, 0.99))
def test_the_limit_is_tight(dmax: float, a: float, b: float, tau_e: float) -> None:
    """Not a safety property: a limit far above the threshold would keep edges the SIM
    test prunes (the shortcut would be exact, and useless)."""
    a_min, a_max = a, max(a, b)
    lim = limit_of(dmax, a_min, a_max, tau_e)
    assert 0.0 <= lim < math.inf
    below = lim * (1.0 - 1e-9) - 1e-6
    if below > 0.0:
        assert not similarity_prunes(below, dmax, a_min, a_max, tau_e)


def test_special_edges() -> None:
    # No subscription on the edge (inf/-inf statistics): never pruned.
    assert limit_of(5000.0, math.inf, -math.inf, math.inf) == math.inf
    # alpha 0: SIM is the text alone, up to 1 at any distance.
    assert limit_of(5000.0, 0.0, 0.0, 0.9) == math.inf
    # tau_e above 1 + slack: pruned at any distance.
    assert limit_of(5000.0, 0.0, 0.5, 1.5) == -1.0
    # alpha 1, tau_e 0.5: beyond Dmax / 2 the distance part falls below tau_e.
    lim = limit_of(5000.0, 1.0, 1.0, 0.5)
    assert abs(lim - 2500.0) < 1e-5 and similarity_prunes(lim, 5000.0, 1.0, 1.0, 0.5)


def test_rows_hold_the_boxes_and_border_distances(andorra) -> None:
    """The row copies the spatial index's box and din_out (the edge's lower bound is then
    the one it was), 64-byte aligned; the matcher rebuilds it for new statistics."""
    wl = generate_workload(andorra, n_subscriptions=2000, n_messages=5, seed=3)
    spatial = SpatialIndex.build(andorra, capacity=200)
    index = EnhancedIndex(spatial, wl.subscriptions, wl.weights, dmax_m=3000.0)
    matcher = IndexMatcher(index)
    rec = matcher._edge_record()
    assert rec.shape == (andorra.n_edges, EDGE_RECORD_WIDTH)
    assert rec.ctypes.data % 64 == 0
    np.testing.assert_array_equal(rec[:, :4], spatial.edge_bbox)
    np.testing.assert_array_equal(rec[:, 4], spatial.edge_din_out)
    assert matcher._edge_record() is rec
    index.compact()
    index.unsubscribe(wl.subscriptions.ids[:10])
    index.compact()  # new postings and statistics: a new row set
    assert matcher._edge_record() is not rec
