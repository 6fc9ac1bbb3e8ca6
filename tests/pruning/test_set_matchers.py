"""Route and area subscriptions in the index and the one matcher (issue 32).

The indexed set matchers (:mod:`roadpubsub.pruning.set_matchers`,
:mod:`roadpubsub.index.set_cells`) through
:class:`~roadpubsub.pruning.mixed.MixedMatcher` against the reference matchers with
``set_locations`` (the oracle, itself checked pair by pair in ``test_set_locations.py``):
the same deliveries with bit-identical distances and scores. Inputs are drawn to break
it: sets from one point-sized piece to the whole network, routes through many waypoints,
areas, directed and undirected tiny graphs with one-way streets and zero-length edges,
one cell per edge (capacity 1: every bound is used), messages on the sets, Dmax exactly
at a set's distance, tau exactly at a score, alpha in {0, 1}; and Andorra (a real network)
directed and undirected. The cell-pair lower bound is checked against the exact distance
directly.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import assert_same, random_points, tiny_network
from test_set_locations import (
    VOCAB,
    distances,
    expected_threshold,
    messages_on_sets,
    random_set,
    set_scenarios,
    taus_at_scores,
)

from roadpubsub.index.kinds import BooleanSubscriptions, SubscriptionSet, TopkSubscriptions
from roadpubsub.index.model import Messages, Subscriptions
from roadpubsub.index.set_cells import CandidateWork, SetCellIndex, set_candidates
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.terms import TermWeights
from roadpubsub.pruning.brute import BruteMatcher
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.pruning.indexed import IndexMatcher
from roadpubsub.pruning.kinds_reference import BooleanBruteMatcher
from roadpubsub.pruning.mixed import MixedMatcher
from roadpubsub.pruning.set_locations import SetLocations
from roadpubsub.pruning.set_matchers import PointsAndSets, SetThresholdMatcher, SetVerifier
from roadpubsub.roadnet.errors import InputError, InvalidLocationError
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.segment_sets import (
    SegmentSet,
    SegmentSets,
    area_from_geojson,
    route_through_points,
    segment_set_distances,
)

PROPS = settings(max_examples=120, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _only(subs: Subscriptions) -> SubscriptionSet:
    return SubscriptionSet.only_threshold(subs)


def _locations(sets: dict[int, SegmentSet]) -> SetLocations:
    rows = sorted(sets)
    return SetLocations.of(rows, [sets[r] for r in rows])


def big_set(network: RoadNetwork, rng: np.random.Generator) -> SegmentSet:
    """A set of any size: a random few pieces, a route through many waypoints, an area
    (a lon/lat box), every edge whole, or one point-sized piece."""
    kind = rng.choice(["pieces", "route", "area", "all", "point"])
    if kind == "route":
        k = int(rng.integers(2, 9))
        try:
            return route_through_points(network, random_points(rng, network, k))
        except InvalidLocationError:  # unreachable waypoint on a directed graph
            return random_set(network, rng)
    if kind == "area":
        lon = np.sort(0.01 + rng.uniform(0, 0.02, 2))
        lat = np.sort(0.01 + rng.uniform(0, 0.02, 2))
        box = {"type": "Polygon", "coordinates": [[[lon[0], lat[0]], [lon[1], lat[0]],
                                                   [lon[1], lat[1]], [lon[0], lat[1]],
                                                   [lon[0], lat[0]]]]}
        try:
            return area_from_geojson(network, box)
        except InvalidLocationError:  # no road inside
            return random_set(network, rng)
    if kind == "all":
        e = np.arange(network.n_edges)
        return SegmentSet.of(network, e, np.zeros(e.size), network.edge_length[e])
    if kind == "point":
        p = random_points(rng, network, 1)
        return SegmentSet.of(network, p.edge, p.offset, p.offset)
    return random_set(network, rng)


@st.composite
def big_scenarios(draw: st.DrawFn) -> tuple:
    """(network, subs, sets, messages, weights, dmax, d): like ``set_scenarios`` with sets
    of every size and more messages on them."""
    network = tiny_network(draw)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    # Weights of one magnitude, or spread over fifteen orders (TSIM's sums then round).
    scale = 10.0 ** rng.choice([0, 3, 6, 12], 6) if rng.random() < 0.3 else np.ones(6)
    weights = TermWeights({t: float(w) for t, w in zip(VOCAB, rng.uniform(0.2, 3, 6) * scale,
                                                       strict=True)})
    n = int(rng.integers(1, 10))
    points = random_points(rng, network, n)
    set_rows = np.flatnonzero(rng.random(n) < 0.7)
    sets = {int(r): big_set(network, rng) for r in set_rows}
    n_msg = int(rng.integers(1, 7))
    mp = random_points(rng, network, n_msg)
    if sets:
        on = rng.random(n_msg) < 0.5
        pick = [sets[int(r)] for r in rng.choice(set_rows, n_msg)]
        k = [int(rng.integers(0, len(s))) for s in pick]
        e = np.array([s.edge[i] for s, i in zip(pick, k, strict=True)])
        o = np.array([s.start[i] + rng.choice([0.0, 1.0, rng.random()])
                      * (s.end[i] - s.start[i]) for s, i in zip(pick, k, strict=True)])
        mp = EdgePoints.of(np.where(on, e, mp.edge), np.where(on, o, mp.offset))
    messages = Messages.from_rows(ids=np.arange(n_msg) + 100, points=mp, weights=weights,
                                  keywords=[list(rng.choice(VOCAB, rng.integers(0, 5),
                                                            replace=False))
                                            for _ in range(n_msg)])
    d = distances(network, points, sets, messages)
    sd = d[set_rows] if set_rows.size else np.empty(0)
    pos = sd[np.isfinite(sd) & (sd > 0)]
    dmax = (float(rng.choice(pos)) if pos.size
            else float(draw(st.sampled_from([50.0, 500.0]))))
    alpha = rng.choice([0.0, 1.0, 0.5], n)
    keywords = [list(rng.choice(VOCAB, rng.integers(1, 4), replace=False)) for _ in range(n)]
    subs = Subscriptions.from_rows(ids=rng.permutation(1000)[:n], points=points,
                                   keywords=keywords, alpha=alpha, tau=np.full(n, 1e-6),
                                   weights=weights)
    subs = taus_at_scores(subs, messages, weights, d, dmax, rng)
    return network, subs, sets, messages, weights, dmax, d


def _check_threshold(scenario: tuple, capacity: int) -> None:
    network, subs, sets, messages, weights, dmax, _ = scenario
    loc = _locations(sets)
    want = BruteMatcher(network, subs, weights, dmax_m=dmax, set_locations=loc).match(messages)
    spatial = SpatialIndex.build(network, capacity=capacity)
    got = MixedMatcher.build(network, _only(subs), weights, dmax_m=dmax, spatial=spatial,
                             threshold_sets=loc).deliver(messages)
    assert_same(got, want)


@PROPS
@given(set_scenarios(), st.integers(1, 4))
def test_threshold_index_equals_reference(scenario: tuple, capacity: int) -> None:
    _check_threshold(scenario, capacity)


@PROPS
@given(big_scenarios(), st.integers(1, 4))
def test_threshold_index_equals_reference_sets_of_every_size(scenario: tuple,
                                                             capacity: int) -> None:
    _check_threshold(scenario, capacity)


def check_boolean(scenario: tuple, capacity: int, seed: int, *,
                  shares: tuple[float, float, float]) -> None:
    """Boolean rows on the scenario's locations through the index against the reference:
    radii 0, Dmax or random with the probabilities ``shares``, and often exactly a
    distance of the row."""
    network, subs, sets, messages, weights, dmax, d = scenario
    rng = np.random.default_rng(seed)
    n = len(subs)
    radius = rng.choice([0.0, dmax, -1.0], n, p=list(shares))
    radius = np.where(radius < 0, rng.random(n) * dmax, radius)
    for r in range(n):
        fin = d[r][np.isfinite(d[r]) & (d[r] <= dmax)]
        if fin.size and rng.random() < 0.6:
            radius[r] = rng.choice(fin)
    bsubs = BooleanSubscriptions(subs.ids, subs.points, radius, subs.kw_ptr, subs.kw_terms)
    loc = _locations(sets)
    want = BooleanBruteMatcher(network, bsubs, weights, dmax_m=dmax,
                               set_locations=loc).match(messages)
    spatial = SpatialIndex.build(network, capacity=capacity)
    kinds = SubscriptionSet(Subscriptions.from_rows(
        ids=[], points=EdgePoints.of([], []), keywords=[], alpha=[], tau=[], weights=weights),
        bsubs, TopkSubscriptions.empty())
    got = MixedMatcher.build(network, kinds, weights, dmax_m=dmax, spatial=spatial,
                             boolean_sets=loc).deliver(messages)
    assert_same(got, want)


@PROPS
@given(big_scenarios(), st.integers(1, 4), st.integers(0, 2**32 - 1))
def test_boolean_index_equals_reference(scenario: tuple, capacity: int, seed: int) -> None:
    check_boolean(scenario, capacity, seed, shares=(0.2, 0.2, 0.6))


@PROPS
@given(big_scenarios(), st.integers(1, 4))
def test_lower_bound_never_exceeds_the_distance(scenario: tuple, capacity: int) -> None:
    """LB(S, m) <= dN(S, m) for every set and message, and the kernel lists exactly the
    sets whose bound (the plain reference :meth:`SetCellIndex.lower_bounds`) is within
    the limit, each once."""
    network, _, sets, messages, _, dmax, _ = scenario
    if not sets:
        return
    spatial = SpatialIndex.build(network, capacity=capacity)
    batch = SegmentSets.of_sets([sets[r] for r in sorted(sets)])
    index = SetCellIndex.build(spatial.cells, batch)
    verifier = SetVerifier(network, batch, spatial=spatial)
    facts = verifier.message_facts(messages)
    post, work = index.postings(), CandidateWork.of(len(batch))
    for j in range(len(messages)):
        cell_bound = verifier.cell_bounds(facts, j).copy()
        lb = index.lower_bounds(cell_bound)
        exact = np.array([segment_set_distances(network, batch.set(i), messages.points[j])[0]
                          for i in range(len(batch))])
        assert np.all(lb <= exact + 1e-9), (lb, exact)
        k = set_candidates(post, cell_bound, dmax, work)
        got = work.sets[:k]
        assert np.unique(got).size == k
        assert set(got.tolist()) == set(np.flatnonzero(lb <= dmax + 1e-6).tolist())
        np.testing.assert_allclose(work.bound[:k], np.maximum(lb[got] - 1e-6, 0.0))
        assert np.all(np.isinf(work.best))


@pytest.mark.parametrize("directed", [False, True])
def test_andorra_routes_areas_and_points(andorra: RoadNetwork, directed: bool) -> None:
    """A piece of a real network: routes of 2 to 30 waypoints, areas, and point
    subscriptions in one batch, both kinds; the index equals the reference, deliveries to
    sets happen, and the bound prunes (fewer candidates than sets x messages)."""
    net = andorra.with_direction(directed=directed)
    rng = np.random.default_rng(5)
    labels = net.components()[1]
    main = np.flatnonzero(labels[net.edge_u] == np.bincount(labels).argmax())
    n = 60
    points = EdgePoints.of(*(lambda e: (e, rng.random(n) * net.edge_length[e]))(
        rng.choice(main, n)))
    sets: dict[int, SegmentSet] = {}
    lon0, lat0 = float(np.median(net.node_lon)), float(np.median(net.node_lat))
    for r in range(0, n, 2):
        if r % 6 == 4:
            x, y = lon0 + rng.uniform(-0.05, 0.05), lat0 + rng.uniform(-0.03, 0.03)
            h = rng.uniform(0.001, 0.01)
            box = {"type": "Polygon", "coordinates": [[[x, y], [x + h, y], [x + h, y + h],
                                                       [x, y + h], [x, y]]]}
            with contextlib.suppress(InvalidLocationError):
                sets[r] = area_from_geojson(net, box)
            continue
        k = int(rng.integers(2, 30))
        e = rng.choice(main, k)
        try:
            sets[r] = route_through_points(net, EdgePoints.of(e, rng.random(k)
                                                              * net.edge_length[e]))
        except InvalidLocationError:  # a one-way dead end: the row keeps its point
            continue
    assert len(sets) > 15
    weights = TermWeights({t: 1.0 + i for i, t in enumerate(VOCAB)})
    keywords = [list(rng.choice(VOCAB, 2, replace=False)) for _ in range(n)]
    k = 40
    messages = messages_on_sets(rng, sets, main, k, weights)
    dmax = 800.0
    subs = Subscriptions.from_rows(ids=np.arange(n) + 1, points=points, keywords=keywords,
                                   alpha=np.full(n, 0.5), tau=np.full(n, 0.3),
                                   weights=weights)
    radius = rng.random(n) * dmax
    bsubs = BooleanSubscriptions(subs.ids + 1000, points, radius, subs.kw_ptr, subs.kw_terms)
    loc = _locations(sets)
    kinds = SubscriptionSet(subs, bsubs, TopkSubscriptions.empty())
    spatial = SpatialIndex.build(net)
    mixed = MixedMatcher.build(net, kinds, weights, dmax_m=dmax, spatial=spatial,
                               threshold_sets=loc, boolean_sets=loc)
    got = mixed.deliver(messages)
    want = MixedMatcher.build(net, kinds, weights, dmax_m=dmax, index="brute",
                              threshold_sets=loc, boolean_sets=loc).deliver(messages)
    assert_same(got, want)
    set_ids = set(subs.ids[sorted(sets)].tolist())
    assert sum(1 for _, s in got.pairs() if s in set_ids) > 10
    assert isinstance(mixed.threshold, PointsAndSets)
    for matcher in (mixed.threshold, mixed.boolean):
        assert isinstance(matcher, PointsAndSets)
        stats = matcher.set_stats
        assert 0 < stats["verified"] <= stats["candidates"] < len(sets) * len(messages)
    # And the reference itself against the pair-by-pair distances (threshold).
    d = distances(net, points, sets, messages)
    assert_same(BruteMatcher(net, subs, weights, dmax_m=dmax, set_locations=loc)
                .match(messages), expected_threshold(subs, messages, weights, d, dmax))


def test_no_sets_builds_the_point_matchers_alone(andorra: RoadNetwork) -> None:
    """Without set rows the entry point is the point index itself (no extra work); empty
    locations count as none; a set row outside the batch is an error."""
    w = TermWeights({"a": 1.0})
    subs = Subscriptions.from_rows(ids=[1, 2], points=EdgePoints.of([0, 1], [0.0, 0.0]),
                                   keywords=[["a"], ["a"]], alpha=[0.5, 0.5], tau=[0.1, 0.1],
                                   weights=w)
    spatial = SpatialIndex.build(andorra)
    plain = MixedMatcher.build(andorra, _only(subs), w, dmax_m=500.0, spatial=spatial)
    assert isinstance(plain.threshold, IndexMatcher)
    empty = SetLocations(np.empty(0, np.int64), SegmentSets.of_sets([]))
    same = MixedMatcher.build(andorra, _only(subs), w, dmax_m=500.0, spatial=spatial,
                              threshold_sets=empty)
    assert isinstance(same.threshold, IndexMatcher)
    s = SegmentSet.of(andorra, [3], [0.0], [1.0])
    with pytest.raises(InputError, match="row 5 is not a row of the 2"):
        MixedMatcher.build(andorra, _only(subs), w, dmax_m=500.0, spatial=spatial,
                           threshold_sets=SetLocations.of([5], [s]))
    with pytest.raises(InputError, match="one set per subscription"):
        SetThresholdMatcher(andorra, subs, SegmentSets.of_sets([s]), w, dmax_m=500.0,
                            spatial=spatial)
    # All rows on sets: no point matcher at all.
    both = MixedMatcher.build(andorra, _only(subs), w, dmax_m=500.0, spatial=spatial,
                              threshold_sets=SetLocations.of([0, 1], [s, s]))
    assert isinstance(both.threshold, PointsAndSets) and both.threshold.points is None


def test_one_way_streets_bound_and_search_direction() -> None:
    """A hand-made one-way network where the set's only exit is its edge's far end B and
    the search from the message settles the near end A first (10 m) while B's first
    tentative distance (100 m, the direct arc) is not its final one (60 m, via C): the
    search must run until both ends are settled (dN = 40 + 60 m). From the message's
    cell back to the set's there is no way at all: a bound read the wrong way round
    (message -> set) would drop the set."""
    # A=1, B=2, C=3, M=4, Z=5; the set lies on A->B at [40, 60] of 100 m.
    net = RoadNetwork.from_arrays(
        node_ids=[1, 2, 3, 4, 5], node_lon=[0.010, 0.011, 0.0115, 0.011, 0.012],
        node_lat=[0.010, 0.010, 0.0105, 0.011, 0.011],
        edge_u_ids=[1, 1, 2, 3, 2, 4], edge_v_ids=[2, 4, 3, 4, 4, 5],
        edge_length=[100.0, 10.0, 30.0, 30.0, 100.0, 150.0],
        edge_oneway=[True] * 6, directed=True, name="one-way")
    w = TermWeights({"a": 1.0})
    subs = Subscriptions.from_rows(ids=[7], points=EdgePoints.of([0], [0.0]),
                                   keywords=[["a"]], alpha=[1.0], tau=[0.01], weights=w)
    loc = SetLocations.of([0], [SegmentSet.of(net, [0], [40.0], [60.0])])
    messages = Messages.from_rows(ids=[1], points=EdgePoints.of([5], [0.0]),
                                  keywords=[["a"]], weights=w)
    want = BruteMatcher(net, subs, w, dmax_m=500.0, set_locations=loc).match(messages)
    assert want.distance.tolist() == [100.0]
    for capacity in (1, 2, 8):
        spatial = SpatialIndex.build(net, capacity=capacity)
        got = MixedMatcher.build(net, _only(subs), w, dmax_m=500.0, spatial=spatial,
                                 threshold_sets=loc).deliver(messages)
        assert_same(got, want)


def _sets_of_every_size(net: RoadNetwork, main: np.ndarray,
                        rng: np.random.Generator) -> dict[int, SegmentSet]:
    """Row -> set: a point-sized piece, one whole segment, a piece ending exactly at a
    node, routes through 2 to 200 waypoints (up to thousands of pieces), a small and a
    large area (thousands of segments) and every edge of the network."""
    sets: dict[int, SegmentSet] = {}
    e = int(rng.choice(main))
    sets[0] = SegmentSet.of(net, [e], [0.3 * net.edge_length[e]], [0.3 * net.edge_length[e]])
    e = int(rng.choice(main))
    sets[1] = SegmentSet.of(net, [e], [0.0], [net.edge_length[e]])
    e = int(rng.choice(main))
    sets[2] = SegmentSet.of(net, [e], [0.5 * net.edge_length[e]], [net.edge_length[e]])
    row = 3
    for k in (2, 5, 40, 200):
        for _ in range(10):  # a one-way dead end may leave no route: draw again
            w = rng.choice(main, k)
            try:
                sets[row] = route_through_points(
                    net, EdgePoints.of(w, rng.random(k) * net.edge_length[w]))
                break
            except InvalidLocationError:
                continue
        row += 1
    lon0, lat0 = float(np.median(net.node_lon)), float(np.median(net.node_lat))
    for h in (0.004, 0.08):
        box = {"type": "Polygon", "coordinates": [[[lon0 - h, lat0 - h], [lon0 + h, lat0 - h],
                                                   [lon0 + h, lat0 + h], [lon0 - h, lat0 + h],
                                                   [lon0 - h, lat0 - h]]]}
        sets[row] = area_from_geojson(net, box)
        row += 1
    every = np.arange(net.n_edges)
    sets[row] = SegmentSet.of(net, every, np.zeros(every.size), net.edge_length[every])
    return sets


@pytest.mark.parametrize("directed", [False, True])
def test_andorra_sets_of_every_size_at_the_edges_of_the_rules(andorra: RoadNetwork,
                                                              directed: bool) -> None:
    """Sets from one point to the whole network (thousands of segments) on a real network,
    directed and undirected, with messages on the sets and at their pieces' ends, Dmax
    exactly at a set's distance, tau exactly at scores, alpha in {0, 1}, term weights of
    magnitudes 1e-3 to 1e12, boolean radii exactly at distances: both kinds of the index
    equal the pair-by-pair reference."""
    net = andorra.with_direction(directed=directed)
    rng = np.random.default_rng(11)
    labels = net.components()[1]
    main = np.flatnonzero(labels[net.edge_u] == np.bincount(labels).argmax())
    sets = _sets_of_every_size(net, main, rng)
    sizes = sorted(len(s) for s in sets.values())
    assert sizes[0] == 1 and sizes[-1] > 1000 and sizes[-2] > 1000, sizes
    n = max(sets) + 1 + 4  # four point rows as well
    points = EdgePoints.of(*(lambda e: (e, rng.random(n) * net.edge_length[e]))(
        rng.choice(main, n)))
    weights = TermWeights({t: float(w) for t, w in zip(
        VOCAB, [1e-3, 1.0, 7.5, 3e5, 1e9, 1e12], strict=True)})
    k = 10
    messages = messages_on_sets(rng, sets, main, k, weights)
    # Two more messages at a piece's end exactly (offset = start, offset = end).
    s = sets[4]
    ends = EdgePoints.of([s.edge[0], s.edge[-1]], [s.start[0], s.end[-1]])
    msg_kw = [list(rng.choice(VOCAB, 3, replace=False)) for _ in range(2 * k + 2)]
    messages = Messages.from_rows(
        ids=np.arange(2 * k + 2), points=EdgePoints.of(np.r_[messages.points.edge, ends.edge],
                                                       np.r_[messages.points.offset,
                                                             ends.offset]),
        keywords=msg_kw, weights=weights)
    d = distances(net, points, sets, messages)
    set_d = d[sorted(sets)]
    near = set_d[np.isfinite(set_d) & (set_d > 0) & (set_d < 3000)]
    dmax = float(np.sort(near)[near.size // 2])  # exactly a set's distance
    keywords = [list(rng.choice(VOCAB, rng.integers(1, 4), replace=False)) for _ in range(n)]
    alpha = rng.choice([0.0, 1.0, 0.5], n)
    # The row and message at exactly Dmax: delivered by both kinds (alpha 0, TSIM 1).
    r0, j0 = (int(v[0]) for v in np.nonzero(d == dmax))
    keywords[r0], alpha[r0] = msg_kw[j0][:1], 0.0
    subs = Subscriptions.from_rows(ids=np.arange(n) + 1, points=points, keywords=keywords,
                                   alpha=alpha, tau=np.full(n, 1e-6), weights=weights)
    subs = taus_at_scores(subs, messages, weights, d, dmax, rng)
    radius = np.array([rng.choice(row[np.isfinite(row) & (row <= dmax)])
                       if np.any(np.isfinite(row) & (row <= dmax)) else dmax for row in d])
    radius[r0] = dmax
    radius[r0] = dmax
    bsubs = BooleanSubscriptions(subs.ids + 1000, points, radius, subs.kw_ptr, subs.kw_terms)
    loc = _locations(sets)
    kinds = SubscriptionSet(subs, bsubs, TopkSubscriptions.empty())
    spatial = SpatialIndex.build(net)
    got = MixedMatcher.build(net, kinds, weights, dmax_m=dmax, spatial=spatial,
                             threshold_sets=loc, boolean_sets=loc).deliver(messages)
    want_t = expected_threshold(subs, messages, weights, d, dmax)
    want_b = BooleanBruteMatcher(net, bsubs, weights, dmax_m=dmax,
                                 set_locations=loc).match(messages)
    assert_same(got, Deliveries.concat([want_t, want_b]))
    # The edges of the rules are really exercised.
    assert np.any(want_t.distance == dmax) and np.any(want_b.distance == dmax)
    assert set(np.unique(subs.tau)) & set(want_t.score.tolist())  # tau at a score
    assert np.any(want_t.distance == 0.0)
    assert len(want_b) > 0


def test_hostile_messages_are_refused_before_the_kernel(andorra: RoadNetwork) -> None:
    """The kernel reads indexes unchecked: a message on an edge outside the network or
    off its edge is refused with InputError, and unknown term ids are dropped."""
    w = TermWeights({"a": 1.0})
    subs = Subscriptions.from_rows(ids=[1], points=EdgePoints.of([0], [0.0]),
                                   keywords=[["a"]], alpha=[0.5], tau=[0.1], weights=w)
    s = SegmentSet.of(andorra, [3], [0.0], [1.0])
    m = SetThresholdMatcher(andorra, subs, SegmentSets.of_sets([s]), w, dmax_m=500.0)
    good = Messages.from_rows(ids=[1], points=EdgePoints.of([3], [0.5]), keywords=[["a"]],
                              weights=w)
    assert m.match(good).subscription_id.tolist() == [1]
    off = Messages(np.array([1]), EdgePoints(np.array([3], np.int32),
                                             np.array([andorra.edge_length[3] + 5.0])),
                   np.array([0, 1]), np.array([0], np.int32))
    with pytest.raises(InputError, match="offsets must lie on their edges"):
        m.match(off)
    unknown = Messages(np.array([1]), EdgePoints(np.array([3], np.int32), np.array([0.5])),
                       np.array([0, 2]), np.array([0, 70000], np.int32))
    assert m.match(unknown).subscription_id.tolist() == [1]
