"""Subscriptions located on routes and areas in the reference matchers (issue 32).

The reference's deliveries are checked against a direct computation pair by pair: dN from
the set by :func:`roadpubsub.roadnet.segment_sets.segment_set_distances` (a forward multi-source
search; the matcher runs one reverse search per message instead), dN from a point by
:func:`roadpubsub.roadnet.distance.network_distance`, then SIM and the threshold test (or the radius
and the keywords). Messages lie on routes (distance 0), Dmax sits exactly at a set's
distance and some taus exactly at a score; point subscriptions are unchanged.
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from split_graph import split_graph
from strategies import assert_same, random_points, tiny_network

from roadpubsub.index.kinds import BooleanSubscriptions
from roadpubsub.index.model import Messages, Subscriptions
from roadpubsub.index.terms import TermWeights
from roadpubsub.pruning.brute import BruteMatcher
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.pruning.kinds_reference import BooleanBruteMatcher
from roadpubsub.pruning.set_locations import SetLocations
from roadpubsub.pruning.similarity import delivered, spatio_textual_similarity, text_similarity
from roadpubsub.roadnet.distance import network_distance
from roadpubsub.roadnet.errors import InputError, InvalidLocationError
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.segment_sets import SegmentSet, route_through_points, segment_set_distances

VOCAB = [f"t{i}" for i in range(6)]


def random_set(network: RoadNetwork, rng: np.random.Generator) -> SegmentSet:
    k = int(rng.integers(1, 5))
    e = rng.integers(0, network.n_edges, k)
    x = rng.choice([0.0, 1.0, -1.0], (2, k), p=[0.25, 0.25, 0.5])
    x = np.where(x < 0, rng.random((2, k)), x)
    a, b = np.sort(x, axis=0) * network.edge_length[e]
    return SegmentSet.of(network, e, a, b)


def distances(network: RoadNetwork, subs_points: EdgePoints, sets: dict[int, SegmentSet],
              messages: Messages) -> np.ndarray:
    """dN per (subscription row, message), computed pair by pair."""
    out = np.empty((len(subs_points), len(messages)))
    for r in range(len(subs_points)):
        for j in range(len(messages)):
            m = messages.points[j]
            out[r, j] = (segment_set_distances(network, sets[r], m)[0] if r in sets
                         else network_distance(network, subs_points[r], m))
    return out


def expected_threshold(subs: Subscriptions, messages: Messages, weights: TermWeights,
                       d: np.ndarray, dmax: float) -> Deliveries:
    parts = []
    for j in range(len(messages)):
        for r in range(len(subs)):
            if not d[r, j] <= dmax:
                continue
            tsim = text_similarity(subs, np.array([r]), messages.keywords(j), weights.weights)
            dist = np.array([d[r, j]])
            score = spatio_textual_similarity(subs.alpha[r:r + 1], dist, dmax, tsim)
            if delivered(score, subs.tau[r:r + 1], dist, dmax)[0]:
                parts.append(Deliveries(np.array([messages.ids[j]]), subs.ids[r:r + 1],
                                        dist, score))
    return Deliveries.concat(parts)


def taus_at_scores(subs: Subscriptions, messages: Messages, weights: TermWeights,
                   d: np.ndarray, dmax: float, rng: np.random.Generator) -> Subscriptions:
    """``subs`` with taus drawn from a few values, every other delivered pair's score
    (with taus near zero) put as its subscription's tau: τ exactly at a score."""
    loose = expected_threshold(subs, messages, weights, d, dmax)
    tau = rng.choice([0.05, 0.5, 0.9, 1.0], len(subs))
    row_of = {int(i): r for r, i in enumerate(subs.ids)}
    for sid, score in zip(loose.subscription_id[::2], loose.score[::2], strict=True):
        if 0 < score <= 1:
            tau[row_of[int(sid)]] = score
    return Subscriptions(subs.ids, subs.points, subs.alpha, tau, subs.kw_ptr, subs.kw_terms)


def messages_on_sets(rng: np.random.Generator, sets: dict[int, SegmentSet],
                     main: np.ndarray, k: int, weights: TermWeights) -> Messages:
    """``2 k`` messages of four keywords: ``k`` on a piece of a set drawn at random (dN 0),
    then ``k`` at the start of random edges of ``main``."""
    on = [sets[r] for r in rng.choice(sorted(sets), k)]
    i = [int(rng.integers(0, len(s))) for s in on]
    me = np.r_[[s.edge[j] for s, j in zip(on, i, strict=True)], rng.choice(main, k)]
    mo = np.r_[[s.start[j] + rng.random() * (s.end[j] - s.start[j])
                for s, j in zip(on, i, strict=True)], np.zeros(k)]
    return Messages.from_rows(ids=np.arange(2 * k), points=EdgePoints.of(me, mo),
                              keywords=[list(rng.choice(VOCAB, 4, replace=False))
                                        for _ in range(2 * k)], weights=weights)




@st.composite
def set_scenarios(draw: st.DrawFn) -> tuple:
    network = tiny_network(draw)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    weights = TermWeights({t: float(w) for t, w in zip(VOCAB, rng.uniform(0.2, 3, 6),
                                                       strict=True)})
    n = int(rng.integers(1, 12))
    points = random_points(rng, network, n)
    set_rows = np.flatnonzero(rng.random(n) < 0.6)
    sets = {int(r): random_set(network, rng) for r in set_rows}
    keywords = [list(rng.choice(VOCAB, rng.integers(1, 4), replace=False)) for _ in range(n)]
    n_msg = int(rng.integers(1, 6))
    mp = random_points(rng, network, n_msg)
    # Messages often on a set's piece (distance 0 from it).
    if sets:
        on = rng.random(n_msg) < 0.4
        pick = [sets[int(r)] for r in rng.choice(set_rows, n_msg)]
        k = [int(rng.integers(0, len(s))) for s in pick]
        e = np.array([s.edge[i] for s, i in zip(pick, k, strict=True)])
        o = np.array([s.start[i] + rng.random() * (s.end[i] - s.start[i])
                      for s, i in zip(pick, k, strict=True)])
        mp = EdgePoints.of(np.where(on, e, mp.edge), np.where(on, o, mp.offset))
    messages = Messages.from_rows(ids=np.arange(n_msg) + 100, points=mp, weights=weights,
                                  keywords=[list(rng.choice(VOCAB, rng.integers(0, 5),
                                                            replace=False))
                                            for _ in range(n_msg)])
    d = distances(network, points, sets, messages)
    # Dmax exactly at one set row's distance, when there is a positive finite one.
    sd = d[set_rows] if set_rows.size else np.empty(0)
    pos = sd[np.isfinite(sd) & (sd > 0)]
    dmax = float(np.median(pos)) if pos.size else float(draw(st.sampled_from([50.0, 500.0])))
    alpha = rng.choice([0.0, 0.3, 0.5, 1.0], n)
    subs = Subscriptions.from_rows(ids=rng.permutation(1000)[:n], points=points,
                                   keywords=keywords, alpha=alpha, tau=np.full(n, 1e-6),
                                   weights=weights)
    # Some taus exactly at a score a pair reaches.
    subs = taus_at_scores(subs, messages, weights, d, dmax, rng)
    return network, subs, sets, messages, weights, dmax, d


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(set_scenarios())
def test_threshold_reference_with_sets(scenario: tuple) -> None:
    network, subs, sets, messages, weights, dmax, d = scenario
    rows = sorted(sets)
    loc = SetLocations.of(rows, [sets[r] for r in rows])
    got = BruteMatcher(network, subs, weights, dmax_m=dmax, set_locations=loc).match(messages)
    assert_same(got, expected_threshold(subs, messages, weights, d, dmax))
    # Point rows: exactly what the matcher gives without any set.
    plain = BruteMatcher(network, subs, weights, dmax_m=dmax).match(messages)
    point_ids = set(np.delete(subs.ids, rows).tolist())
    assert ({p for p in got.pairs() if p[1] in point_ids}
            == {p for p in plain.pairs() if p[1] in point_ids})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(set_scenarios(), st.integers(0, 2**32 - 1))
def test_boolean_reference_with_sets(scenario: tuple, seed: int) -> None:
    network, subs, sets, messages, weights, dmax, d = scenario
    rng = np.random.default_rng(seed)
    n = len(subs)
    # Radii 0, Dmax, random, or exactly a distance of the row.
    radius = rng.choice([0.0, dmax, -1.0], n, p=[0.2, 0.2, 0.6])
    radius = np.where(radius < 0, rng.random(n) * dmax, radius)
    for r in range(n):
        fin = d[r][np.isfinite(d[r]) & (d[r] <= dmax)]
        if fin.size and rng.random() < 0.5:
            radius[r] = fin[0]
    bsubs = BooleanSubscriptions(subs.ids, subs.points, radius, subs.kw_ptr, subs.kw_terms)
    rows = sorted(sets)
    loc = SetLocations.of(rows, [sets[r] for r in rows])
    got = BooleanBruteMatcher(network, bsubs, weights, dmax_m=dmax,
                              set_locations=loc).match(messages)
    want = set()
    for j in range(len(messages)):
        held = set(messages.keywords(j).tolist())
        for r in range(n):
            if d[r, j] <= radius[r] and set(bsubs.keywords(r).tolist()) <= held:
                want.add((int(messages.ids[j]), int(subs.ids[r])))
    assert got.pairs() == want
    dist_of = {(int(m), int(s)): float(x) for m, s, x in
               zip(got.message_id, got.subscription_id, got.distance, strict=True)}
    row_of = {int(i): r for r, i in enumerate(subs.ids)}
    msg_of = {int(i): j for j, i in enumerate(messages.ids)}
    for (m, s), x in dist_of.items():
        assert x == d[row_of[s], msg_of[m]]


def test_set_locations_are_checked() -> None:
    net = RoadNetwork.from_arrays(node_ids=[1, 2], node_lon=[0.01, 0.011],
                                  node_lat=[0.01, 0.01], edge_u_ids=[1], edge_v_ids=[2],
                                  edge_length=[100.0])
    s = SegmentSet.of(net, [0], [0.0], [10.0])
    with pytest.raises(InputError, match="two sets"):
        SetLocations.of([0, 0], [s, s])
    with pytest.raises(InputError, match="one subscription row per set"):
        SetLocations(np.array([0, 1]), SetLocations.of([0], [s]).sets)
    w = TermWeights({"a": 1.0})
    subs = Subscriptions.from_rows(ids=[1], points=EdgePoints.of([0], [0.0]),
                                   keywords=[["a"]], alpha=[0.5], tau=[0.5], weights=w)
    with pytest.raises(InputError, match="row 3 is not a row of the 1"):
        BruteMatcher(net, subs, w, dmax_m=100.0, set_locations=SetLocations.of([3], [s]))


@pytest.mark.parametrize("directed", [False, True])
def test_andorra_routes_and_points_together(andorra: RoadNetwork, directed: bool) -> None:
    """Point subscriptions and route subscriptions of one batch on Andorra: the reference
    equals the pair-by-pair computation, messages on routes at 0, Dmax at a distance."""
    net = andorra.with_direction(directed=directed)
    rng = np.random.default_rng(11)
    labels = net.components()[1]
    main = np.flatnonzero(labels[net.edge_u] == np.bincount(labels).argmax())
    n = 40
    points = EdgePoints.of(*(lambda e: (e, rng.random(n) * net.edge_length[e]))(
        rng.choice(main, n)))
    sets: dict[int, SegmentSet] = {}
    for r in range(0, n, 2):
        e = rng.choice(main, 3)
        try:
            sets[r] = route_through_points(net, EdgePoints.of(e, rng.random(3)
                                                              * net.edge_length[e]))
        except InvalidLocationError:  # a one-way dead end: the row keeps its point
            continue
    weights = TermWeights({t: 1.0 + i for i, t in enumerate(VOCAB)})
    keywords = [list(rng.choice(VOCAB, 2, replace=False)) for _ in range(n)]
    # Messages on routes, and anywhere.
    k = 30
    messages = messages_on_sets(rng, sets, main, k, weights)
    d = distances(net, points, sets, messages)
    assert (d == 0).sum() >= k
    sd = d[sorted(sets)]
    dmax = float(np.median(sd[np.isfinite(sd) & (sd > 0) & (sd < 3000)]))
    subs = Subscriptions.from_rows(ids=np.arange(n) + 1, points=points, keywords=keywords,
                                   alpha=np.full(n, 0.5), tau=np.full(n, 0.3),
                                   weights=weights)
    rows = sorted(sets)
    got = BruteMatcher(net, subs, weights, dmax_m=dmax,
                       set_locations=SetLocations.of(rows, [sets[r] for r in rows])
                       ).match(messages)
    want = expected_threshold(subs, messages, weights, d, dmax)
    assert len(want) > 10
    assert_same(got, want)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_set_distance_against_networkx(data: st.DataObject) -> None:
    """dN from a set by the project's code equals networkx's multi-source Dijkstra on the
    split graph, whose sources are every listed place lying on a piece (its ends, other
    pieces' ends and messages inside it): independent of roadnet.distance."""
    network = tiny_network(data.draw)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    s = random_set(network, rng)
    mp = random_points(rng, network, 6)
    on = rng.random(6) < 0.4
    k = rng.integers(0, len(s), 6)
    mp = EdgePoints.of(np.where(on, s.edge[k], mp.edge),
                       np.where(on, s.start[k] + rng.random(6) * (s.end[k] - s.start[k]),
                                mp.offset))
    on_edge: dict[int, list[tuple[float, object]]] = {}
    for i in range(len(s)):
        on_edge.setdefault(int(s.edge[i]), []).extend(
            [(float(s.start[i]), ("a", i)), (float(s.end[i]), ("b", i))])
    for j in range(len(mp)):
        on_edge.setdefault(int(mp.edge[j]), []).append((float(mp.offset[j]), ("m", j)))
    graph = split_graph(network, on_edge)
    sources = {label for i in range(len(s)) for o, label in on_edge[int(s.edge[i])]
               if s.start[i] <= o <= s.end[i]}
    dist = nx.multi_source_dijkstra_path_length(graph, sources)
    want = np.array([dist.get(("m", j), np.inf) for j in range(len(mp))])
    np.testing.assert_array_equal(segment_set_distances(network, s, mp), want)
