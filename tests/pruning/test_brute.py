"""The reference matcher: the paper's worked example, agreement with an independent
networkx computation on real networks (undirected and directed), and property tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roadpubsub.index.model import Messages, Subscriptions
from roadpubsub.index.terms import TermWeights
from roadpubsub.index.workload import generate_workload
from roadpubsub.pruning.brute import BruteMatcher, match_brute
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.pruning.matchers import MATCHERS, build_matcher
from roadpubsub.pruning.similarity import delivered, spatio_textual_similarity, text_similarity
from roadpubsub.roadnet.distance import distances_to_point
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork

Reference = dict[tuple[int, int], tuple[float, float]]


def line_network(lengths: list[float], *, oneway: list[bool] | None = None,
                 directed: bool = False) -> RoadNetwork:
    """Nodes 1..k+1 in a row joined by edges of the given lengths (metres)."""
    k = len(lengths)
    ids = np.arange(1, k + 2)
    return RoadNetwork.from_arrays(
        node_ids=ids, node_lon=12.0 + 0.01 * ids, node_lat=np.full(k + 1, 42.0),
        edge_u_ids=ids[:-1], edge_v_ids=ids[1:], edge_length=lengths, edge_oneway=oneway,
        directed=directed, name="line")


def assert_agree(got: Deliveries, ref: Reference, subs: Subscriptions, dmax: float,
                 *, tol: float = 1e-6) -> None:
    """Same delivered pairs, distances and scores, except pairs within rounding of a limit."""
    tau = dict(zip(subs.ids.tolist(), subs.tau.tolist(), strict=True))
    mine = {(m, s): (d, sc) for m, s, d, sc in zip(got.message_id.tolist(),
                                                   got.subscription_id.tolist(),
                                                   got.distance.tolist(), got.score.tolist(),
                                                   strict=True)}
    assert len(mine) == len(got), "duplicate deliveries"
    for key in mine.keys() ^ ref.keys():
        d, sc = mine.get(key) or ref[key]
        borderline = abs(sc - tau[key[1]]) < tol or abs(d - dmax) < tol
        assert borderline, (key, "brute" if key in mine else "reference", d, sc, tau[key[1]])
    for key in mine.keys() & ref.keys():
        # Exact: lengths lie on roadpubsub.roadnet.lengths' grid.
        assert mine[key][0] == ref[key][0], key
        assert mine[key][1] == pytest.approx(ref[key][1], rel=1e-9, abs=tol), key


# ----------------------------------------------------------------------------- worked example
def test_paper_worked_example() -> None:
    """Paper Sec. III-B: s1 = ({t1, t3}, l1, 0.4, 0.7), m1 = {t1, t2, t3}, dN/Dmax = 0.45:
    SIM(s1, m1) = 0.4 * 0.55 + 0.6 * 1 = 0.82 >= 0.7, so m1 is delivered to s1."""
    dmax = 1000.0
    net = line_network([1000.0, 2000.0])
    weights = TermWeights({"t1": 0.5, "t2": 0.3, "t3": 0.3, "t4": 0.2})
    subs = Subscriptions.from_rows(
        ids=[1, 2, 3, 4],
        points=EdgePoints.of([0, 0, 0, 1], [0.0, 0.0, 0.0, 2000.0]),
        keywords=[["t1", "t3"], ["t1", "t3"], ["t1", "t4"], ["t1", "t3"]],
        alpha=[0.4, 0.4, 0.4, 0.4], tau=[0.7, 0.83, 0.7, 0.1], weights=weights)
    messages = Messages.from_rows(ids=[1], points=EdgePoints.of([0], [450.0]),
                                  keywords=[["t1", "t2", "t3"]], weights=weights)
    d = match_brute(net, subs, messages, weights, dmax_m=dmax)
    # s1 gets m1 with SIM 0.82; s2 (tau 0.83) does not; s3 (TSIM 0.5 / 0.7) scores
    # 0.4 * 0.55 + 0.6 * 0.714 = 0.649 < 0.7; s4 is 2,550 m away, beyond Dmax.
    assert d.subscription_id.tolist() == [1]
    assert d.message_id.tolist() == [1]
    assert d.distance.tolist() == [450.0]
    assert d.score[0] == pytest.approx(0.82, abs=1e-12)
    # The same numbers from the scoring functions directly.
    tsim = text_similarity(subs, np.array([0, 2]), messages.keywords(0), weights.weights)
    np.testing.assert_allclose(tsim, [1.0, 0.5 / 0.7])
    sim = spatio_textual_similarity(np.array([0.4]), np.array([450.0]), dmax, tsim[:1])
    assert sim[0] == pytest.approx(0.82)
    assert delivered(sim, np.array([0.7]), np.array([450.0]), dmax).tolist() == [True]


def test_direction_counts_from_subscription_to_message() -> None:
    # One-way 1 -> 2 -> 3; a subscription behind the message reaches it, one ahead cannot.
    net = line_network([100.0, 100.0], oneway=[True, True], directed=True)
    weights = TermWeights({"a": 1.0})
    subs = Subscriptions.from_rows(ids=[1, 2], points=EdgePoints.of([0, 1], [10.0, 50.0]),
                                   keywords=[["a"], ["a"]], alpha=[0.5, 0.5], tau=[0.5, 0.5],
                                   weights=weights)
    messages = Messages.from_rows(ids=[7], points=EdgePoints.of([0], [60.0]),
                                  keywords=[["a"]], weights=weights)
    d = match_brute(net, subs, messages, weights, dmax_m=500.0)
    assert d.subscription_id.tolist() == [1]
    assert d.distance.tolist() == [50.0]
    undirected = match_brute(net.with_direction(directed=False), subs, messages, weights,
                             dmax_m=500.0)
    assert undirected.subscription_id.tolist() == [1, 2]
    assert undirected.distance.tolist() == [50.0, 90.0]


def test_shared_edge_and_limits() -> None:
    net = line_network([1000.0, 10.0])
    weights = TermWeights({"a": 1.0, "b": 1.0})
    # Same edge, 300 m apart: direct run; the way round via the nodes would be longer.
    subs = Subscriptions.from_rows(
        ids=[1, 2, 3], points=EdgePoints.of([0, 0, 1], [600.0, 1000.0, 10.0]),
        keywords=[["a"], ["a", "b"], ["b"]], alpha=[1.0, 0.0, 0.0], tau=[0.7, 0.5, 1.0],
        weights=weights)
    messages = Messages.from_rows(ids=[1, 2], points=EdgePoints.of([0, 0], [300.0, 990.0]),
                                  keywords=[["a"], ["b"]], weights=weights)
    d = match_brute(net, subs, messages, weights, dmax_m=1000.0)
    got = {(m, s): (dist, sc) for m, s, dist, sc in zip(
        d.message_id.tolist(), d.subscription_id.tolist(), d.distance.tolist(),
        d.score.tolist(), strict=True)}
    # m1 -> s1: 300 m, alpha 1: SIM 0.7 exactly (delivered at tau 0.7 with the tolerance).
    assert got[(1, 1)][0] == 300.0 and got[(1, 1)][1] == pytest.approx(0.7)
    assert got[(1, 2)] == (700.0, 0.5)  # TSIM 0.5, alpha 0
    assert (2, 3) in got and got[(2, 3)][0] == 20.0
    assert (1, 3) not in got  # TSIM 0 with alpha 0


def test_message_far_from_both_ends_of_its_edge() -> None:
    """Dmax shorter than the way to either end node: only the message's own edge counts."""
    net = line_network([1000.0, 1000.0])
    weights = TermWeights({"a": 1.0})
    subs = Subscriptions.from_rows(ids=[1, 2, 3], points=EdgePoints.of([0, 0, 1],
                                                                       [560.0, 300.0, 0.0]),
                                   keywords=[["a"]] * 3, alpha=[0.5] * 3, tau=[0.5] * 3,
                                   weights=weights)
    messages = Messages.from_rows(ids=[9], points=EdgePoints.of([0], [500.0]),
                                  keywords=[["a"]], weights=weights)
    matcher = BruteMatcher(net, subs, weights, dmax_m=100.0)
    d = matcher.match(messages)
    assert d.pairs() == {(9, 1)}
    assert d.distance.tolist() == [60.0]
    assert matcher.counters is not None and matcher.counters.settled.tolist() == [0]


def test_empty_inputs_counters_and_registry() -> None:
    net = line_network([100.0])
    weights = TermWeights({"a": 1.0})
    subs = Subscriptions.from_rows(ids=[5], points=EdgePoints.of([0], [0.0]),
                                   keywords=[["a"]], alpha=[0.5], tau=[0.5], weights=weights)
    none = Messages.from_rows(ids=[], points=EdgePoints.of([], []), keywords=[],
                              weights=weights)
    matcher = build_matcher("brute", net, subs, weights, dmax_m=50.0)
    assert isinstance(matcher, BruteMatcher) and "brute" in MATCHERS
    assert len(matcher.match(none)) == 0
    msgs = Messages.from_rows(ids=[1, 2], points=EdgePoints.of([0, 0], [10.0, 90.0]),
                              keywords=[["a"], ["zzz"]], weights=weights)
    d = matcher.match(msgs)
    assert d.pairs() == {(1, 5)}
    c = matcher.counters
    assert c is not None
    assert c.message_id.tolist() == [1, 2]
    assert c.candidates.tolist() == [1, 0]  # the second message is 90 m away (> Dmax)
    assert c.deliveries.tolist() == [1, 0]
    assert np.all(c.settled >= 1)
    with pytest.raises(ValueError, match="unknown index"):
        build_matcher("nope", net, subs, weights, dmax_m=50.0)
    with pytest.raises(ValueError, match="dmax"):
        BruteMatcher(net, subs, weights, dmax_m=0.0)


# ----------------------------------------------------------------------------- real networks
REGIONS = {  # network -> (region radius, Dmax), metres
    "rome": (1_500.0, 1_000.0),
    "andorra": (2_000.0, 1_500.0),
    "california": (20_000.0, 10_000.0),
}


@pytest.mark.parametrize("directed", [False, True], ids=["undirected", "directed"])
@pytest.mark.parametrize("name", sorted(REGIONS))
def test_agrees_with_networkx(name: str, directed: bool,
                              real_networks: Callable[[str], RoadNetwork],
                              reference: Callable[..., Reference],
                              make_region_workload: Callable[..., Any]) -> None:
    network = real_networks(name).with_direction(directed=directed)
    radius, dmax = REGIONS[name]
    rng = np.random.default_rng(sum(map(ord, name)) + directed)
    subs, messages, weights, centre = make_region_workload(
        network, rng, n_subs=300, n_messages=20, radius_m=radius)
    got = match_brute(network, subs, messages, weights, dmax_m=dmax)
    # Every path of length <= Dmax from the region stays within Dmax / kappa of it.
    reach = radius + dmax / network.kappa * 1.01 + 100.0
    mask = np.hypot(network.node_x - centre[0], network.node_y - centre[1]) <= reach
    ref = reference(network, subs, messages, weights, dmax_m=dmax, node_mask=mask)
    assert len(ref) >= 20, "the sample should produce deliveries"
    assert_agree(got, ref, subs, dmax)


def test_candidates_match_a_full_scan(rome: RoadNetwork) -> None:
    """The per-edge candidate lookup misses nothing: compare with distances to all subs."""
    w = generate_workload(rome, n_subscriptions=30_000, n_messages=15, seed=3,
                          tweets=[["a", "b"], ["b", "c"], ["c", "a", "d"]],
                          alpha=0.9, tau=0.3)
    dmax = 3_000.0
    subs, msgs, weights = w.subscriptions, w.messages, w.weights
    got = match_brute(rome, subs, msgs, weights, dmax_m=dmax)
    parts = []
    for i in range(len(msgs)):
        point = msgs.points[np.array([i])]
        dist = distances_to_point(rome, point, subs.points, limit=dmax)
        rows = np.flatnonzero(np.isfinite(dist))
        tsim = text_similarity(subs, rows, msgs.keywords(i), weights.weights)
        score = spatio_textual_similarity(subs.alpha[rows], dist[rows], dmax, tsim)
        hit = delivered(score, subs.tau[rows], dist[rows], dmax)
        parts.append(Deliveries(np.full(int(hit.sum()), msgs.ids[i]), subs.ids[rows[hit]],
                                dist[rows][hit], score[hit]))
    full = Deliveries.concat(parts)
    assert len(full) > 100
    np.testing.assert_array_equal(got.message_id, full.message_id)
    np.testing.assert_array_equal(got.subscription_id, full.subscription_id)
    np.testing.assert_array_equal(got.distance, full.distance)
    np.testing.assert_array_equal(got.score, full.score)


# ----------------------------------------------------------------------------- properties
WORDS = ("a", "b", "c", "d")


@st.composite
def tiny_cases(draw: st.DrawFn) -> tuple[RoadNetwork, Subscriptions, Messages, TermWeights,
                                         float]:
    """A random multigraph (self-loops, parallel and one-way edges, zero lengths) with
    integer lengths and offsets at quarter lengths, so distances are exact."""
    n = draw(st.integers(2, 6))
    edges = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1),
                                    st.integers(0, 12), st.booleans()),
                          min_size=1, max_size=9))
    directed = draw(st.booleans())
    ids = np.arange(n) * 3 + 100
    net = RoadNetwork.from_arrays(
        node_ids=ids, node_lon=0.001 * np.arange(n), node_lat=0.0005 * (np.arange(n) % 2),
        edge_u_ids=[ids[u] for u, _, _, _ in edges], edge_v_ids=[ids[v] for _, v, _, _ in edges],
        edge_length=[float(w) for _, _, w, _ in edges],
        edge_oneway=[o for _, _, _, o in edges], directed=directed)
    n_e = len(edges)
    point = st.tuples(st.integers(0, n_e - 1), st.integers(0, 4))
    kw = st.lists(st.sampled_from(WORDS), min_size=1, max_size=4, unique=True)

    def points(draws: list[tuple[int, int]]) -> EdgePoints:
        e = np.array([p[0] for p in draws], dtype=np.int64)
        q = np.array([p[1] for p in draws], dtype=np.float64)
        return EdgePoints.of(e, q / 4 * net.edge_length[e])

    weight_values = draw(st.lists(st.sampled_from([0.25, 0.5, 1.0, 2.0, 3.0]), min_size=4,
                                  max_size=4))
    weights = TermWeights(dict(zip(WORDS, weight_values, strict=True)))
    k = draw(st.integers(1, 8))
    subs = Subscriptions.from_rows(
        ids=np.arange(k) * 2 + 1,
        points=points(draw(st.lists(point, min_size=k, max_size=k))),
        keywords=draw(st.lists(kw, min_size=k, max_size=k)),
        alpha=draw(st.lists(st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]), min_size=k,
                            max_size=k)),
        tau=draw(st.lists(st.sampled_from([0.1, 0.3, 0.5, 0.7, 0.9, 1.0]), min_size=k,
                          max_size=k)),
        weights=weights)
    j = draw(st.integers(1, 4))
    messages = Messages.from_rows(
        ids=np.arange(j) + 50, points=points(draw(st.lists(point, min_size=j, max_size=j))),
        keywords=draw(st.lists(kw, min_size=j, max_size=j)), weights=weights)
    dmax = draw(st.sampled_from([4.0, 10.0, 25.0]))
    return net, subs, messages, weights, dmax


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_cases())
def test_property_agrees_with_networkx(reference: Callable[..., Reference],
                                       case: tuple[RoadNetwork, Subscriptions, Messages,
                                                   TermWeights, float]) -> None:
    net, subs, messages, weights, dmax = case
    got = match_brute(net, subs, messages, weights, dmax_m=dmax)
    ref = reference(net, subs, messages, weights, dmax_m=dmax)
    assert_agree(got, ref, subs, dmax, tol=1e-9)
    # Every delivery honours the rule it was delivered by.
    assert np.all(got.distance <= dmax)
    tau = dict(zip(subs.ids.tolist(), subs.tau.tolist(), strict=True))
    assert all(sc >= tau[s] - 1e-9 for s, sc in zip(got.subscription_id.tolist(),
                                                     got.score.tolist(), strict=True))
    # Sorted by (message, subscription).
    order = np.lexsort((got.subscription_id, got.message_id))
    assert np.array_equal(order, np.arange(len(got)))
