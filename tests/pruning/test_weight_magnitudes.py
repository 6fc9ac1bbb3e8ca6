"""Exact under keyword weights of any magnitude (issue 14, item 1).

The text bounds (TUB, DNUB, TSIMlimit) once came from differences of one running sum over
all subscriptions: a heavy weight in an early row wiped out the digits of later rows, and
EIA lost pairs whose score was exactly tau. These tests draw weights over at least twelve
orders of magnitude, put heavy rows before light ones, and set tau exactly at scores.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import assert_same, scenarios, with_borderline_taus

from roadpubsub.index.bia import BasicIndex
from roadpubsub.index.eia import EnhancedIndex
from roadpubsub.index.limits import location_aware_prefixes
from roadpubsub.index.model import Subscriptions
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.terms import TermWeights
from roadpubsub.index.workload import generate_workload
from roadpubsub.pruning.brute import match_brute
from roadpubsub.pruning.indexed import IndexMatcher
from roadpubsub.pruning.similarity import text_similarity

ARCHITECTURES = (EnhancedIndex, BasicIndex)

#: (lowest, highest) decade of the drawn weights: 12 to 580 orders of magnitude.
DECADES = [(-6.0, 6.0), (-8.0, 20.0), (-150.0, 150.0), (-290.0, 290.0)]


def heavy_rows_first(subs: Subscriptions, weights: TermWeights) -> Subscriptions:
    """The same subscriptions, those with the heaviest keywords first (the old failure)."""
    w = weights.weights[subs.kw_terms]
    heaviest = np.maximum.reduceat(w, subs.kw_ptr[:-1])
    return subs.take(np.argsort(-heaviest, kind="stable"))


def reweighted(weights: TermWeights, rng: np.random.Generator, lo: float, hi: float
               ) -> TermWeights:
    """The same vocabulary (same term ids) with weights log-uniform in [10^lo, 10^hi]."""
    w = 10.0 ** rng.uniform(lo, hi, len(weights))
    return TermWeights(dict(zip(weights.terms, w.tolist(), strict=True)))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.sampled_from(DECADES).flatmap(lambda d: scenarios(weight_decades=d)),
       st.booleans())
def test_indexes_equal_reference_whatever_the_weights(scenario, borderline: bool) -> None:
    network, subs, messages, weights, dmax, capacity = scenario
    subs = heavy_rows_first(subs, weights)
    if borderline:
        subs = with_borderline_taus(network, subs, messages, weights, dmax)
    want = match_brute(network, subs, messages, weights, dmax_m=dmax)
    spatial = SpatialIndex.build(network, capacity=capacity)
    for arch in ARCHITECTURES:
        got = IndexMatcher(arch(spatial, subs, weights, dmax_m=dmax)).match(messages)
        assert_same(got, want)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(DECADES), st.integers(0, 2**32 - 1))
def test_tub_bounds_every_tsim(decades: tuple[float, float], seed: int) -> None:
    """TUB(s|t) >= TSIM(s, m) for every m whose first shared keyword (weight order) is t."""
    rng = np.random.default_rng(seed)
    vocab = [f"t{i}" for i in range(12)]
    weights = TermWeights(dict(zip(vocab, (10.0 ** rng.uniform(*decades, 12)).tolist(),
                                   strict=True)))
    n = 200
    keywords = [list(rng.choice(vocab, rng.integers(1, 9), replace=False)) for _ in range(n)]
    from roadpubsub.roadnet.locations import EdgePoints

    subs = heavy_rows_first(Subscriptions.from_rows(
        ids=np.arange(n), points=EdgePoints.of(np.zeros(n, np.int64), np.zeros(n)),
        keywords=keywords, alpha=np.full(n, 0.5), tau=np.full(n, 0.9), weights=weights),
        weights)
    rank = weights.rank()
    lap = location_aware_prefixes(subs, weights.weights, rank, dmax_m=1000.0)
    # Every keyword of every row, in weight order, with its TUB (prefix or not).
    full = location_aware_prefixes(
        Subscriptions(subs.ids, subs.points, np.zeros(n), np.full(n, 1e-300), subs.kw_ptr,
                      subs.kw_terms), weights.weights, rank, dmax_m=1000.0)
    assert lap.row.size <= full.row.size
    for _ in range(30):
        message = rng.choice(len(vocab), rng.integers(1, 6), replace=False).astype(np.int32)
        tsim = text_similarity(subs, np.arange(n), np.sort(message), weights.weights)
        shared = np.isin(full.term, message)
        # The first shared keyword of each row in weight order has the largest TUB.
        first_tub = np.full(n, -1.0)
        np.maximum.at(first_tub, full.row[shared], full.tub[shared])
        rows = first_tub >= 0
        assert (first_tub[rows] >= tsim[rows]).all()


@pytest.mark.parametrize("decades", [(-6.0, 6.0), (-6.0, 16.0)])
def test_andorra_with_weights_over_many_decades(andorra, decades) -> None:
    """Real roads and tweet keywords, weights re-drawn over 12 and 22 decades, tau exactly
    at half of the deliverable scores, the heaviest subscriptions first."""
    wl = generate_workload(andorra, n_subscriptions=3000, n_messages=40, seed=7,
                           alpha_spread=0.5, tau_spread=0.3)
    weights = reweighted(wl.weights, np.random.default_rng(3), *decades)
    dmax = 3000.0
    subs = heavy_rows_first(wl.subscriptions, weights)
    subs = with_borderline_taus(andorra, subs, wl.messages, weights, dmax)
    want = match_brute(andorra, subs, wl.messages, weights, dmax_m=dmax)
    assert len(want) > 20
    spatial = SpatialIndex.build(andorra, capacity=80)
    for arch in ARCHITECTURES:
        got = IndexMatcher(arch(spatial, subs, weights, dmax_m=dmax)).match(wl.messages)
        assert_same(got, want)
