"""BIA and EIA deliver exactly what the reference matcher delivers.

Property tests on tiny random graphs (parallel edges, disconnected parts, one-way streets,
zero-length edges, curved edges shorter than their chord) and on samples of the real
networks, with alpha in {0, 1}, tau <= alpha, borderline scores and points sharing an edge.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import assert_same, dmax_at_a_pair_distance, scenarios, with_borderline_taus

from roadpubsub.index.bia import BasicIndex
from roadpubsub.index.eia import EnhancedIndex
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.workload import generate_workload
from roadpubsub.pruning.brute import match_brute
from roadpubsub.pruning.indexed import IndexMatcher

ARCHITECTURES = (EnhancedIndex, BasicIndex)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenarios(), st.sampled_from(["none", "tau", "tau and dmax"]))
def test_indexes_equal_reference_on_tiny_graphs(scenario, borderline: str) -> None:
    network, subs, messages, weights, dmax, capacity = scenario
    if borderline == "tau and dmax":
        # Pairs exactly at distance Dmax, and scores exactly at tau: the two edges of the
        # delivery rule, where a last-bit difference in a distance would flip a decision.
        dmax = dmax_at_a_pair_distance(network, subs, messages, weights, dmax)
    if borderline != "none":
        subs = with_borderline_taus(network, subs, messages, weights, dmax)
    want = match_brute(network, subs, messages, weights, dmax_m=dmax)
    spatial = SpatialIndex.build(network, capacity=capacity)
    for arch in ARCHITECTURES:
        got = (_m := IndexMatcher(arch(spatial, subs, weights, dmax_m=dmax))).match(messages)
        stats = _m.stats
        assert_same(got, want)
        assert stats.totals()["deliveries"] == len(want)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenarios(), st.sampled_from(["none", "tau and dmax"]))
def test_recent_subscriptions_equal_reference_on_tiny_graphs(scenario, borderline: str
                                                             ) -> None:
    """Half of the subscriptions subscribed after the build: they are matched from the
    delta (Lemma 2 per row's cell, then its own bound), at the same borderline scores
    and distances."""
    network, subs, messages, weights, dmax, capacity = scenario
    if borderline != "none":
        dmax = dmax_at_a_pair_distance(network, subs, messages, weights, dmax)
        subs = with_borderline_taus(network, subs, messages, weights, dmax)
    want = match_brute(network, subs, messages, weights, dmax_m=dmax)
    spatial = SpatialIndex.build(network, capacity=capacity)
    k = len(subs) // 2
    for arch in ARCHITECTURES:
        index = arch(spatial, subs.take(np.arange(k)), weights, dmax_m=dmax)
        index.subscribe(subs.take(np.arange(k, len(subs))))
        assert len(index.delta) == len(subs) - k
        assert_same(IndexMatcher(index).match(messages), want)


@pytest.mark.parametrize("alpha, tau", [(0.0, 0.25), (1.0, 0.8), (0.7, 0.5), (0.5, 0.7)])
def test_alpha_extremes_and_tau_below_alpha_on_california(california, alpha, tau) -> None:
    """alpha = 0 and 1 and tau <= alpha (wildcard prefixes) on a real network."""
    wl = generate_workload(california, n_subscriptions=20_000, n_messages=30, seed=11,
                           alpha=alpha, alpha_spread=0.0, tau=tau, tau_spread=0.0)
    dmax = 30_000.0
    want = match_brute(california, wl.subscriptions, wl.messages, wl.weights, dmax_m=dmax)
    spatial = SpatialIndex.build(california, capacity=200)
    for arch in ARCHITECTURES:
        index = arch(spatial, wl.subscriptions, wl.weights, dmax_m=dmax)
        got = IndexMatcher(index).match(wl.messages)
        assert_same(got, want)
    assert len(want) > 0


@pytest.mark.parametrize("directed", [False, True])
def test_indexes_equal_reference_on_andorra(andorra, directed) -> None:
    network = andorra.with_direction(directed=directed)
    wl = generate_workload(network, n_subscriptions=3000, n_messages=30, seed=5,
                           alpha_spread=0.5, tau_spread=0.3)
    dmax = 3000.0
    want = match_brute(network, wl.subscriptions, wl.messages, wl.weights, dmax_m=dmax)
    spatial = SpatialIndex.build(network, capacity=80)
    for arch in ARCHITECTURES:
        got = IndexMatcher(arch(spatial, wl.subscriptions, wl.weights,
                                   dmax_m=dmax)).match(wl.messages)
        assert_same(got, want)
    assert len(want) > 0


def test_indexes_equal_reference_on_rome_sample(rome) -> None:
    """A paper-like workload on the paper-scale network (default ~256 cells)."""
    wl = generate_workload(rome, n_subscriptions=60_000, n_messages=12, seed=2)
    dmax = 5000.0
    want = match_brute(rome, wl.subscriptions, wl.messages, wl.weights, dmax_m=dmax)
    spatial = SpatialIndex.build(rome)
    assert 200 <= spatial.cells.n_cells <= 320
    for arch in ARCHITECTURES:
        got = (_m := IndexMatcher(arch(spatial, wl.subscriptions, wl.weights,
                                       dmax_m=dmax))).match(wl.messages)
        stats = _m.stats
        assert_same(got, want)
        assert stats.totals()["cells_pruned_lemma2"] > 0
    assert len(want) > 0
