"""Crowds: many subscriptions around the messages, where EIA's verification drops every
candidate whose lower bound on dN exceeds its exact distance limit (from its TSIM).

The drop must never lose a pair: the inputs put the bound as close to the distance as it
gets (straight roads whose lengths equal their chords, so kappa * dE is dN up to
rounding), scores exactly at tau, Dmax exactly at a pair's distance, alpha in {0, 1},
and keyword weights over many decades. (Replacing the drop's test by one 0.001% stricter
makes the first test fail: it reaches the edge of the bound.)
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import assert_same, dmax_at_a_pair_distance, with_borderline_taus

from roadpubsub.index.bia import BasicIndex
from roadpubsub.index.eia import EnhancedIndex
from roadpubsub.index.model import Messages, Subscriptions
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.terms import TermWeights
from roadpubsub.index.workload import generate_workload, hotspot, hotspots
from roadpubsub.pruning.brute import match_brute
from roadpubsub.pruning.indexed import IndexMatcher
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork

_M_PER_DEGREE = 111_000.0


@st.composite
def crowds(draw: st.DrawFn) -> tuple[RoadNetwork, Subscriptions, Messages, TermWeights,
                                     float, int]:
    """A straight road (sometimes with a side branch), a crowd of subscriptions on it and
    messages among them."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = draw(st.integers(2, 9))
    step = draw(st.sampled_from([1e-4, 1e-3, 5e-3]))
    lon = 0.01 + step * np.arange(n)
    lat = np.full(n, 0.01)
    u = np.arange(n - 1)
    v = u + 1
    if draw(st.booleans()):  # a side branch off the middle, at a right angle
        lon = np.append(lon, lon[n // 2])
        lat = np.append(lat, 0.01 + step)
        u = np.append(u, n // 2)
        v = np.append(v, n)
    length = np.hypot(lon[u] - lon[v], lat[u] - lat[v]) * _M_PER_DEGREE
    network = RoadNetwork.from_arrays(
        node_ids=np.arange(lon.size) * 3 + 1, node_lon=lon, node_lat=lat,
        edge_u_ids=u * 3 + 1, edge_v_ids=v * 3 + 1, edge_length=length,
        edge_oneway=rng.random(u.size) < 0.2, directed=draw(st.booleans()), name="line")
    decades = draw(st.sampled_from([(-0.7, 0.5), (-6.0, 6.0), (-150.0, 150.0)]))
    vocab = [f"t{i}" for i in range(6)]
    w = 10.0 ** rng.uniform(*decades, len(vocab))
    weights = TermWeights({t: float(x) for t, x in zip(vocab, w, strict=True)})
    n_subs = draw(st.integers(5, 60))
    e = rng.integers(0, network.n_edges, n_subs)
    frac = rng.choice([0.0, 1.0, 0.5, -1.0], n_subs, p=[0.15, 0.15, 0.1, 0.6])
    frac = np.where(frac < 0, rng.random(n_subs), frac)
    subs = Subscriptions.from_rows(
        ids=rng.permutation(10 * n_subs)[:n_subs],
        points=EdgePoints.of(e, frac * network.edge_length[e]),
        keywords=[list(rng.choice(vocab, rng.integers(1, 5), replace=False))
                  for _ in range(n_subs)],
        alpha=rng.choice([0.0, 1.0, 0.2, 0.5, 0.9], n_subs),
        tau=rng.choice([0.1, 0.4, 0.6, 0.8, 1.0], n_subs), weights=weights)
    n_msgs = draw(st.integers(1, 5))
    pick = rng.integers(0, n_subs, n_msgs)
    # Messages stand on subscriptions' points, on their edges, or at nodes.
    where = rng.integers(0, 3, n_msgs)
    medge = subs.points.edge[pick]
    moff = np.select([where == 0, where == 1], [subs.points.offset[pick],
                                                network.edge_length[medge] * rng.random(n_msgs)],
                     0.0)
    messages = Messages.from_rows(
        ids=np.arange(n_msgs), points=EdgePoints.of(medge, moff),
        keywords=[list(rng.choice(vocab, rng.integers(1, 6), replace=False))
                  for _ in range(n_msgs)], weights=weights)
    dmax = float(np.sum(length)) * draw(st.sampled_from([0.3, 0.7, 1.5]))
    return network, subs, messages, weights, dmax, draw(st.integers(1, 8))


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(crowds(), st.sampled_from(["tau", "tau and dmax"]))
def test_crowds_on_straight_roads_equal_reference(crowd, borderline: str) -> None:
    network, subs, messages, weights, dmax, capacity = crowd
    if borderline == "tau and dmax":
        dmax = dmax_at_a_pair_distance(network, subs, messages, weights, dmax)
    subs = with_borderline_taus(network, subs, messages, weights, dmax)
    want = match_brute(network, subs, messages, weights, dmax_m=dmax)
    spatial = SpatialIndex.build(network, capacity=capacity)
    for arch in (EnhancedIndex, BasicIndex):
        got = (_m := IndexMatcher(arch(spatial, subs, weights, dmax_m=dmax))).match(messages)
        stats = _m.stats
        assert_same(got, want)
        totals = stats.totals()
        assert totals["deliveries"] <= totals["candidates_verified"] <= totals["candidates"]


def test_the_drop_engages_on_a_hotspot_and_loses_nothing(andorra) -> None:
    """On a crowd in Andorra a good share of EIA's candidates never reaches the search,
    and the deliveries are still the reference's."""
    wl = generate_workload(andorra, n_subscriptions=6000, n_messages=20, seed=4)
    wl = hotspot(wl, andorra, share=0.6, radius_m=800.0, seed=4)
    dmax = 2000.0
    want = match_brute(andorra, wl.subscriptions, wl.messages, wl.weights, dmax_m=dmax)
    spatial = SpatialIndex.build(andorra, capacity=80)
    index = EnhancedIndex(spatial, wl.subscriptions, wl.weights, dmax_m=dmax)
    got = (_m := IndexMatcher(index)).match(wl.messages)
    stats = _m.stats
    assert_same(got, want)
    totals = stats.totals()
    assert len(want) > 100
    assert totals["candidates_verified"] < 0.9 * totals["candidates"]


def test_hot_spots_with_alpha_and_tau_over_their_range_equal_reference(andorra) -> None:
    """The second dense shape (index.workload.hotspots: tight crowds whose alpha and tau
    span [0, 1], so that some are delivered without a shared keyword and some only on an
    exact text match): EIA, on one thread and two, and BIA deliver what brute force
    does; the crowds are where the generator says."""
    wl = generate_workload(andorra, n_subscriptions=6000, n_messages=24, seed=5)
    wl = hotspots(wl, andorra, spots=3, share=0.5, radius_m=400.0, spread_m=3000.0,
                  seed=5)
    subs = wl.subscriptions
    moved = subs.alpha != generate_workload(andorra, n_subscriptions=6000, n_messages=0,
                                            seed=5).subscriptions.alpha
    assert 0.4 < moved.mean() < 0.6
    assert subs.alpha[moved].min() < 0.05 and subs.alpha[moved].max() > 0.95
    assert subs.tau[moved].min() < 0.05 and subs.tau[moved].max() > 0.95
    dmax = 2000.0
    want = match_brute(andorra, subs, wl.messages, wl.weights, dmax_m=dmax)
    assert len(want) > 500
    spatial = SpatialIndex.build(andorra, capacity=80)
    for arch, threads in ((EnhancedIndex, 1), (EnhancedIndex, 2), (BasicIndex, 1)):
        got = IndexMatcher(arch(spatial, subs, wl.weights, dmax_m=dmax),
                           threads=threads).match(wl.messages)
        assert_same(got, want)


def test_subscriptions_with_many_keywords_equal_reference(andorra) -> None:
    """Subscriptions of up to 12 keywords, whose span the slot record cannot hold (more
    than 7: the matcher reads the keyword pointers instead), among short ones."""
    wl = generate_workload(andorra, n_subscriptions=3000, n_messages=16, seed=6)
    wl = hotspot(wl, andorra, share=0.7, radius_m=800.0, seed=6)
    rng = np.random.default_rng(6)
    subs, msgs = wl.subscriptions, wl.messages
    pool = np.unique(msgs.kw_terms)
    rows = []
    for r in range(len(subs)):
        own = subs.kw_terms[subs.kw_ptr[r]:subs.kw_ptr[r + 1]]
        if r % 2:
            extra = rng.choice(pool, int(rng.integers(3, 10)), replace=False)
            own = np.union1d(own, extra)
        rows.append(np.asarray(own, dtype=np.int32))
    ptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum([len(k) for k in rows], out=ptr[1:])
    long_subs = Subscriptions(subs.ids, subs.points, subs.alpha, np.minimum(subs.tau, 0.5),
                              ptr, np.concatenate(rows))
    assert (np.diff(ptr) > 7).sum() > 200
    dmax = 2000.0
    want = match_brute(andorra, long_subs, msgs, wl.weights, dmax_m=dmax)
    assert len(want) > 200
    spatial = SpatialIndex.build(andorra, capacity=80)
    got = IndexMatcher(EnhancedIndex(spatial, long_subs, wl.weights, dmax_m=dmax)).match(msgs)
    assert_same(got, want)
