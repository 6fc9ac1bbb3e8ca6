"""Routes and areas as sets of road-segment pieces (issue 32's foundation).

The distance from a set is checked against an exhaustive computation: the minimum, over
every piece's two ends, of the point-to-point distance of :mod:`roadpubsub.roadnet.distance` (a
reverse search from the message), and 0 when the message lies on a piece. That minimum
is exact: from a point at offset x of a piece [a, b], leaving by edge_v costs length - x
(smallest at b), leaving by edge_u costs x (smallest at a), and the run along the
message's own edge is smallest at the end nearest the message or is 0 on the piece; the
tests also sample interior points to see none is nearer. :func:`segment_set_distances`
computes it differently (one forward multi-source search from the pieces).
"""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import pytest
import shapely
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyproj import CRS, Transformer

from roadpubsub.roadnet.distance import (
    NodeSearch,
    distances_to_point,
    entry_costs,
    exit_costs,
    network_distance,
)
from roadpubsub.roadnet.errors import InvalidLocationError
from roadpubsub.roadnet.locations import EdgePoints, point_xy
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.segment_sets import (
    SegmentSet,
    SegmentSets,
    area_from_geojson,
    piece_distances_to_target,
    route_from_lonlat,
    route_from_nodes,
    route_through_points,
    segment_set_distances,
)

# ----------------------------------------------------------------------------- helpers


def grid(nx_: int, ny_: int, *, directed: bool = False, oneway: tuple[int, ...] = (),
         step: float = 100.0) -> RoadNetwork:
    """A grid of nx_ by ny_ nodes, ids 10 * i + 1 (i = x + nx_ * y), edges ``step`` long:
    every route between two corners has many shortest ways (the ties of grid networks)."""
    ids = np.arange(nx_ * ny_)
    lon = 0.01 + (ids % nx_) * 0.0009
    lat = 0.01 + (ids // nx_) * 0.0009
    u, v = [], []
    for i in range(ids.size):
        if i % nx_ < nx_ - 1:
            u.append(i)
            v.append(i + 1)
        if i // nx_ < ny_ - 1:
            u.append(i)
            v.append(i + nx_)
    ow = np.zeros(len(u), dtype=bool)
    ow[list(oneway)] = True
    return RoadNetwork.from_arrays(node_ids=ids * 10 + 1, node_lon=lon, node_lat=lat,
                                   edge_u_ids=np.array(u) * 10 + 1,
                                   edge_v_ids=np.array(v) * 10 + 1,
                                   edge_length=np.full(len(u), step), edge_oneway=ow,
                                   directed=directed, name="grid")


def exhaustive(network: RoadNetwork, s: SegmentSet, targets: EdgePoints) -> np.ndarray:
    """dN(set, m) per target: the minimum over the pieces' ends of the point distance,
    0 on a piece (see the module docstring for why that is exact)."""
    starts, ends = s.endpoints()
    both = EdgePoints.concat([starts, ends])
    out = np.empty(len(targets))
    for j in range(len(targets)):
        m = targets[j]
        d = float(distances_to_point(network, m, both).min())
        on = (s.edge == m.edge[0]) & (s.start <= m.offset[0]) & (m.offset[0] <= s.end)
        out[j] = 0.0 if on.any() else d
    return out


@st.composite
def small_networks(draw: st.DrawFn) -> RoadNetwork:
    """Random small graphs whose lengths are multiples of 10 m (many equal shortest paths),
    with parallel edges, one-way streets, a few zero-length and loop edges."""
    n = draw(st.integers(2, 7))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    lon = 0.01 + rng.uniform(0, 0.005, n)
    lat = 0.01 + rng.uniform(0, 0.005, n)
    m = draw(st.integers(1, 3 * n))
    u = rng.integers(0, n, m)
    v = rng.integers(0, n, m)
    loops = rng.random(m) < 0.9
    v = np.where((u == v) & loops, (v + 1) % n, v)
    length = rng.choice([0, 10, 20, 30, 40], m, p=[0.06, 0.34, 0.3, 0.2, 0.1]).astype(float)
    ids = rng.permutation(np.arange(n) * 7 + 3)  # original ids in no particular order
    return RoadNetwork.from_arrays(
        node_ids=ids, node_lon=lon, node_lat=lat, edge_u_ids=ids[u], edge_v_ids=ids[v],
        edge_length=length, edge_oneway=rng.random(m) < 0.35,
        directed=draw(st.booleans()), name="small")


def random_set(network: RoadNetwork, rng: np.random.Generator, k: int) -> SegmentSet:
    """k random pieces: whole edges, points, pieces from or to an end, anything."""
    e = rng.integers(0, network.n_edges, k)
    length = network.edge_length[e]
    x = rng.choice([0.0, 0.5, 1.0, -1.0], (2, k), p=[0.2, 0.1, 0.2, 0.5])
    x = np.where(x < 0, np.round(rng.random((2, k)) * 4) / 4, x)
    a, b = np.sort(x, axis=0) * length
    return SegmentSet.of(network, e, a, b)


def random_targets(network: RoadNetwork, rng: np.random.Generator, k: int,
                   s: SegmentSet) -> EdgePoints:
    """k targets: at edge ends, halfway, random, and on the set's own edges."""
    e = rng.integers(0, network.n_edges, k)
    same = rng.random(k) < 0.4
    e = np.where(same, s.edge[rng.integers(0, len(s), k)], e)
    frac = rng.choice([0.0, 1.0, 0.25, -1.0], k, p=[0.15, 0.15, 0.2, 0.5])
    frac = np.where(frac < 0, rng.random(k), frac)
    return EdgePoints.of(e, frac * network.edge_length[e])


# ----------------------------------------------------------------------------- the rule


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_networks(), st.integers(0, 2**32 - 1), st.integers(1, 6))
def test_set_distance_equals_the_exhaustive_minimum(network: RoadNetwork, seed: int,
                                                    k: int) -> None:
    """Forward multi-source search == min over piece ends of the point distance (and 0 on
    a piece), directed and undirected; interior points are never nearer."""
    rng = np.random.default_rng(seed)
    s = random_set(network, rng, k)
    targets = random_targets(network, rng, 8, s)
    got = segment_set_distances(network, s, targets)
    want = exhaustive(network, s, targets)
    np.testing.assert_array_equal(got, want)
    # The argument behind ``exhaustive``: no point inside a piece is nearer.
    inner = rng.random(k)
    points = EdgePoints.of(s.edge, s.start + inner * (s.end - s.start))
    for j in range(len(targets)):
        d = distances_to_point(network, targets[j], points)
        assert np.all(d >= want[j])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_networks(), st.integers(0, 2**32 - 1))
def test_normalized_merges_without_changing_distances(network: RoadNetwork,
                                                      seed: int) -> None:
    """Merged pieces are sorted, disjoint per edge (not even touching), cover the same
    offsets, and give the same distances."""
    rng = np.random.default_rng(seed)
    s = random_set(network, rng, 8)
    n = s.normalized()
    assert np.all(np.diff(n.edge) >= 0)
    same_edge = n.edge[1:] == n.edge[:-1]
    assert np.all(n.start[1:][same_edge] > n.end[:-1][same_edge])
    for _ in range(20):  # a random probe is on a merged piece iff on an original one
        i = int(rng.integers(0, len(s)))
        o = float(rng.choice([s.start[i], s.end[i], rng.random() * network.edge_length[
            s.edge[i]]]))
        e = s.edge[i]
        before = np.any((s.edge == e) & (s.start <= o) & (o <= s.end))
        after = np.any((n.edge == e) & (n.start <= o) & (o <= n.end))
        assert before == after
    targets = random_targets(network, rng, 8, s)
    np.testing.assert_array_equal(segment_set_distances(network, n, targets),
                                  segment_set_distances(network, s, targets))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_networks(), st.integers(0, 2**32 - 1))
def test_limit_keeps_a_distance_exactly_at_it(network: RoadNetwork, seed: int) -> None:
    """With limit = one target's exact distance it is kept; beyond the limit is inf."""
    rng = np.random.default_rng(seed)
    s = random_set(network, rng, 3)
    targets = random_targets(network, rng, 10, s)
    full = segment_set_distances(network, s, targets)
    finite = full[np.isfinite(full)]
    limit = float(np.median(finite)) if finite.size else 0.0
    got = segment_set_distances(network, s, targets, limit=limit)
    np.testing.assert_array_equal(got, np.where(full <= limit, full, np.inf))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_networks(), st.integers(0, 2**32 - 1))
def test_reverse_finish_at_pieces_equals_forward(network: RoadNetwork, seed: int) -> None:
    """The reference matcher's side (reverse search from the message, finished at pieces)
    equals the forward multi-source search, piece by piece."""
    rng = np.random.default_rng(seed)
    s = random_set(network, rng, 5)
    for m in (random_targets(network, rng, 4, s)[j] for j in range(4)):
        search = NodeSearch(network, reverse=True)
        a, ca, b, cb = entry_costs(network, m)
        seeds, costs = np.r_[a, b], np.r_[ca, cb]
        ok = np.isfinite(costs)
        res = search.run(seeds[ok], costs[ok])
        per_piece = piece_distances_to_target(network, res.dist, m, s.edge, s.start, s.end)
        for i in range(len(s)):
            one = SegmentSet.of(network, s.edge[i:i + 1], s.start[i:i + 1], s.end[i:i + 1])
            assert per_piece[i] == segment_set_distances(network, one, m)[0]


def test_direction_is_from_the_set_to_the_message() -> None:
    """On a directed network dN runs from the set to m, as from a point subscription to m:
    a one-way street ahead of the set is near, behind it far."""
    net = grid(3, 1, directed=True, oneway=(0, 1))  # 1 -> 11 -> 21, one way
    e0 = int(np.flatnonzero(net.node_ids[net.edge_u] == 1)[0])
    e1 = int(np.flatnonzero(net.node_ids[net.edge_u] == 11)[0])
    s = SegmentSet.of(net, [e0], [20.0], [60.0])
    m = EdgePoints.of([e0, e0, e0, e1], [70.0, 10.0, 40.0, 30.0])
    d = segment_set_distances(net, s, m)
    np.testing.assert_array_equal(d, [10.0, np.inf, 0.0, 70.0])
    # The point convention: a point subscription at the piece's end gives the same.
    assert network_distance(net, EdgePoints.of([e0], [60.0]), m[3]) == 70.0
    assert network_distance(net, EdgePoints.of([e0], [20.0]), m[1]) == np.inf
    # Undirected: behind the set is 10 m back along the edge.
    und = net.with_direction(directed=False)
    assert segment_set_distances(und, SegmentSet.of(und, [e0], [20.0], [60.0]),
                                 m[1])[0] == 10.0


def test_a_piece_starting_on_a_one_way_edges_first_node_leaves_by_it() -> None:
    """A piece from offset 0 of a one-way edge stands on its first node (the point rule of
    exit_costs): a message behind that node is reached without going round."""
    net = grid(3, 1, directed=True, oneway=(1,))  # 11 -> 21 one way; 1 - 11 two-way
    e0 = int(np.flatnonzero(net.node_ids[net.edge_u] == 1)[0])
    e1 = int(np.flatnonzero(net.node_ids[net.edge_u] == 11)[0])
    s = SegmentSet.of(net, [e1], [0.0], [50.0])
    assert segment_set_distances(net, s, EdgePoints.of([e0], [30.0]))[0] == 70.0
    s2 = SegmentSet.of(net, [e1], [5.0], [50.0])
    assert segment_set_distances(net, s2, EdgePoints.of([e0], [30.0]))[0] == np.inf


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(("edge", "start", "end", "words"), [
    ([0, 99], [0.0, 0.0], [1.0, 1.0], "row 1: edge = 99"),
    ([0], [-1.0], [1.0], "row 0: start = -1.0"),
    ([0, 1], [0.0, np.nan], [1.0, 2.0], "row 1: start = nan"),
    ([0], [0.0], [100.5], "row 0: end = 100.5 lies beyond its edge"),
    ([0, 1], [0.0, 50.0], [1.0, 40.0], "row 1: start = 50.0 lies beyond the piece's end"),
    ([], [], [], "at least one piece"),
    ([0, 1], [0.0], [1.0, 2.0], "one row per piece"),
])
def test_invalid_pieces_name_field_and_row(edge: list[int], start: list[float],
                                           end: list[float], words: str) -> None:
    net = grid(3, 3)
    with pytest.raises(InvalidLocationError, match=words.replace("(", r"\(")):
        SegmentSet.of(net, np.asarray(edge, dtype=np.int64), start, end)


def test_json_round_trip_and_other_network_refused() -> None:
    net = grid(3, 3)
    r = route_from_nodes(net, [1, 11, 41], start_m=25.0, end_m=75.0)
    data = r.to_json(net)
    assert data["node_paths"] == [[1, 11, 41]]
    assert data["length_m"] == 150.0
    back = SegmentSet.from_json(net, data)
    np.testing.assert_array_equal(back.edge, r.edge)
    np.testing.assert_array_equal(back.start, r.start)
    np.testing.assert_array_equal(back.end, r.end)
    data["segments"][0]["u"] = 71
    with pytest.raises(InvalidLocationError, match="segment 0"):
        SegmentSet.from_json(net, data)


def test_segment_sets_batch() -> None:
    net = grid(3, 3)
    a = route_from_nodes(net, [1, 11, 21])
    b = SegmentSet.of(net, [3], [10.0], [20.0])
    batch = SegmentSets.of_sets([a, b])
    assert len(batch) == 2
    np.testing.assert_array_equal(batch.owner, [0, 0, 1])
    np.testing.assert_array_equal(batch.take([1]).edge, [3])
    np.testing.assert_array_equal(batch.set(0).start, a.start)
    with pytest.raises(InvalidLocationError, match="ptr"):
        SegmentSets(np.array([0, 0]), np.empty(0, np.int32), np.empty(0), np.empty(0))


# ----------------------------------------------------------------------------- routes


def test_route_from_nodes_offsets_follow_travel() -> None:
    """Offsets are from the earlier node in travel; an edge travelled v -> u is stored
    from its own edge_u."""
    net = grid(3, 3)
    r = route_from_nodes(net, [41, 11, 1], start_m=30.0, end_m=60.0)
    e = r.edge.astype(int)
    assert list(net.node_ids[net.edge_u[e]]) == [11, 1]  # stored u -> v, travelled back
    np.testing.assert_array_equal(r.start, [0.0, 40.0])
    np.testing.assert_array_equal(r.end, [70.0, 100.0])
    one = route_from_nodes(net, [1, 11], start_m=10.0, end_m=30.0)
    np.testing.assert_array_equal([one.start[0], one.end[0]], [10.0, 30.0])


@pytest.mark.parametrize(("args", "words"), [
    (([1],), "at least two nodes"),
    (([1, 999],), "position 1: unknown node id 999"),
    (([1, 41],), "positions 0 -> 1: no edge from node 1 to node 41"),
    (([1, 11], 200.0), "start_m = 200.0"),
    (([1, 11], 60.0, 30.0), "beyond end_m"),
])
def test_route_from_nodes_errors(args: tuple, words: str) -> None:
    net = grid(3, 3)
    ids, *rest = args
    kw = dict(zip(("start_m", "end_m"), rest, strict=False))
    with pytest.raises(InvalidLocationError, match=words):
        route_from_nodes(net, ids, **kw)


def test_one_way_node_path_only_forwards() -> None:
    net = grid(3, 1, directed=True, oneway=(0,))
    route_from_nodes(net, [1, 11])
    with pytest.raises(InvalidLocationError, match="no edge from node 11 to node 1"):
        route_from_nodes(net, [11, 1])


def test_grid_tie_rule_by_hand() -> None:
    """On a 3x3 grid (ids 1, 11, 21 along the bottom row, 61, 71, 81 along the top).

    From node 1 (edge 1-11 at offset 0) to node 81 (edge 71-81 at 100): six ways of 400 m;
    leaving edge 1-11 by node 11 and entering 71-81 from 71 passes the fewest nodes
    (11, 41, 71), so it wins over the lexicographically smaller 1, 11, 21, 51, 81.
    From the middle of 1-11 to the middle of 51-81: 11, 21, 51 and 11, 41, 51 tie in
    length and node count; the smaller ids win.
    """
    net = grid(3, 3)

    def edge(a: int, b: int) -> int:
        return int(np.flatnonzero((net.node_ids[net.edge_u] == a)
                                  & (net.node_ids[net.edge_v] == b))[0])

    r = route_through_points(net, EdgePoints.of([edge(1, 11), edge(71, 81)], [0.0, 100.0]))
    assert r.to_json(net)["node_paths"] == [[11, 41, 71]]
    assert r.length_m == 400.0
    r2 = route_through_points(net, EdgePoints.of([edge(1, 11), edge(51, 81)], [50.0, 50.0]))
    assert r2.to_json(net)["node_paths"] == [[11, 21, 51]]
    assert r2.length_m == 300.0
    np.testing.assert_array_equal(r2.edge, [edge(1, 11), edge(11, 21), edge(21, 51),
                                            edge(51, 81)])
    np.testing.assert_array_equal(r2.start, [50.0, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(r2.end, [100.0, 100.0, 100.0, 50.0])
    # Backwards (81 side to 1 side) the smaller ids win again: 51, 21, 11 vs 51, 41, 11.
    r3 = route_through_points(net, EdgePoints.of([edge(51, 81), edge(1, 11)], [50.0, 50.0]))
    assert r3.to_json(net)["node_paths"] == [[51, 21, 11]]


def test_direct_run_wins_a_tie_with_nodes() -> None:
    """From one end of an edge to the other the direct run and the way through its two
    nodes are equally long; the direct run (no node) wins. Backwards on a one-way edge
    with no way round, the next waypoint cannot be reached."""
    net = grid(2, 1)
    r = route_through_points(net, EdgePoints.of([0, 0], [0.0, 100.0]))
    assert r.to_json(net)["node_paths"] == [[]]
    np.testing.assert_array_equal([r.start[0], r.end[0]], [0.0, 100.0])
    one = grid(2, 1, directed=True, oneway=(0,))
    with pytest.raises(InvalidLocationError, match=r"waypoints 0 -> 1: .* cannot be reached"):
        route_through_points(one, EdgePoints.of([0, 0], [70.0, 20.0]))


def _expected_leg(network: RoadNetwork, p: EdgePoints, q: EdgePoints
                  ) -> tuple[float, tuple[int, ...] | None]:
    """(shortest distance, node ids of the way the tie rule picks; () for the direct run),
    by enumerating every simple path."""
    d = network_distance(network, p, q)
    ep, op, eq, oq = int(p.edge[0]), float(p.offset[0]), int(q.edge[0]), float(q.offset[0])
    if ep == eq:
        ahead = oq - op
        direct = ahead if ahead >= 0 else (-ahead if network.edge_twoway[ep] else np.inf)
        if direct <= d:
            return d, ()
    adj = network.adjacency()
    g = nx.DiGraph()
    best_w: dict[tuple[int, int], float] = {}
    for x in range(network.n_nodes):
        for a in range(adj.indptr[x], adj.indptr[x + 1]):
            y = int(adj.indices[a])
            w = float(adj.weights[a])
            best_w[(x, y)] = min(best_w.get((x, y), np.inf), w)
            g.add_edge(x, y)
    g.add_nodes_from(range(network.n_nodes))
    v, cv, u, cu = exit_costs(network, p)
    a_, ca, b_, cb = entry_costs(network, q)
    ids = network.node_ids
    cands = []
    for s, cs in ((int(v[0]), float(cv[0])), (int(u[0]), float(cu[0]))):
        for t, ct in ((int(a_[0]), float(ca[0])), (int(b_[0]), float(cb[0]))):
            if not (np.isfinite(cs) and np.isfinite(ct)):
                continue
            paths = [[s]] if s == t else list(nx.all_simple_paths(g, s, t))
            for path in paths:
                total = cs + sum(best_w[(x, y)] for x, y in itertools.pairwise(path)) + ct
                if total == d:
                    cands.append((len(path), tuple(int(ids[x]) for x in path)))
    return d, (min(cands)[1] if cands else None)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_networks(), st.integers(0, 2**32 - 1))
def test_route_legs_follow_the_tie_rule(network: RoadNetwork, seed: int) -> None:
    """Each leg is a shortest way (pieces sum to the point distance exactly) and its node
    path is the one the tie rule picks among all simple paths; consecutive pieces join."""
    rng = np.random.default_rng(seed)
    k = 3
    e = rng.integers(0, network.n_edges, k)
    frac = rng.choice([0.0, 1.0, 0.5, -1.0], k, p=[0.2, 0.2, 0.2, 0.4])
    frac = np.where(frac < 0, rng.random(k), frac)
    pts = EdgePoints.of(e, frac * network.edge_length[e])
    wants = [_expected_leg(network, pts[i], pts[i + 1]) for i in range(k - 1)]
    if not all(np.isfinite(d) for d, _ in wants):
        with pytest.raises(InvalidLocationError, match="cannot be reached"):
            route_through_points(network, pts)
        return
    r = route_through_points(network, pts)
    data = r.to_json(network)
    assert [tuple(p) for p in data["node_paths"]] == [w for _, w in wants]
    # The pieces of each leg: one for a direct run, else nodes + 1; their lengths sum to d.
    pos = 0
    for (d, path) in wants:
        n = 1 if not path else len(path) + 1
        leg = slice(pos, pos + n)
        assert float(np.sum(r.end[leg] - r.start[leg])) == d
        pos += n
    assert pos == len(r)


def test_route_from_lonlat_snaps_and_reports() -> None:
    net = grid(3, 3)
    line = {"type": "LineString", "coordinates": [[0.01, 0.0100001], [0.0118, 0.0118]]}
    r = route_from_lonlat(net, line)
    assert r.kind == "route"
    assert r.length_m == pytest.approx(400.0, abs=0.05)
    with pytest.raises(InvalidLocationError, match=r"at least two \[lon, lat\] positions"):
        route_from_lonlat(net, [[0.01, 0.01]])
    with pytest.raises(InvalidLocationError, match="at least two waypoints"):
        route_through_points(net, EdgePoints.of([0], [0.0]))
    with pytest.raises(InvalidLocationError, match="LineString"):
        route_from_lonlat(net, {"type": "Point", "coordinates": [0.01, 0.01]})
    with pytest.raises(InvalidLocationError, match="waypoint 1"):
        route_from_lonlat(net, [[0.01, 0.01], [0.5, 0.5]])


# ----------------------------------------------------------------------------- areas


def _to_lonlat(network: RoadNetwork, geom: shapely.Geometry) -> shapely.Geometry:
    tr = Transformer.from_crs(CRS.from_user_input(network.crs), CRS.from_epsg(4326),
                              always_xy=True)
    return shapely.transform(geom, lambda c: np.column_stack(tr.transform(c[:, 0], c[:, 1])))


def test_area_clips_a_crossing_edge_by_hand() -> None:
    """A square around node 1 of a grid: each of its two edges counts from the node to the
    boundary, the offset matching the geometry's position."""
    net = grid(3, 3)
    x, y = float(net.node_x[net.node_ids == 1][0]), float(net.node_y[net.node_ids == 1][0])
    square = shapely.box(x - 30, y - 30, x + 30, y + 30)
    a = area_from_geojson(net, shapely.geometry.mapping(_to_lonlat(net, square)))
    assert a.kind == "area" and len(a) == 2
    np.testing.assert_array_equal(a.start, [0.0, 0.0])
    xy = point_xy(net, EdgePoints(a.edge, a.end))
    # The piece ends lie on the square's boundary (projection round trip: micrometres).
    assert np.allclose(shapely.distance(shapely.points(xy), square.exterior), 0, atol=1e-3)


def test_area_errors() -> None:
    net = grid(3, 3)
    with pytest.raises(InvalidLocationError, match="Polygon"):
        area_from_geojson(net, {"type": "LineString", "coordinates": [[0, 0], [1, 1]]})
    with pytest.raises(InvalidLocationError, match="no road"):
        area_from_geojson(net, shapely.geometry.mapping(shapely.box(5, 5, 5.1, 5.1)))
    bow = {"type": "Polygon", "coordinates": [[[0.01, 0.01], [0.02, 0.02], [0.02, 0.01],
                                               [0.01, 0.02], [0.01, 0.01]]]}
    with pytest.raises(InvalidLocationError, match="invalid polygon"):
        area_from_geojson(net, bow)
    with pytest.raises(InvalidLocationError, match="not a GeoJSON"):
        area_from_geojson(net, {"type": "Polygon"})


# ----------------------------------------------------------------------------- real networks


def _check_against_exhaustive(network: RoadNetwork, s: SegmentSet, targets: EdgePoints,
                              *, limit: float = np.inf) -> np.ndarray:
    got = segment_set_distances(network, s, targets, limit=limit)
    want = exhaustive(network, s, targets)
    np.testing.assert_array_equal(got, np.where(want <= limit, want, np.inf))
    return got


def _near_targets(network: RoadNetwork, s: SegmentSet, rng: np.random.Generator, k: int
                  ) -> EdgePoints:
    """Targets on the set's pieces, at their ends, and on edges next to them."""
    i = rng.integers(0, len(s), k)
    on = EdgePoints.of(s.edge[i], s.start[i] + rng.random(k) * (s.end[i] - s.start[i]))
    nodes = np.unique(np.r_[network.edge_u[s.edge], network.edge_v[s.edge]])
    near_edges = np.flatnonzero(np.isin(network.edge_u, nodes) | np.isin(network.edge_v, nodes))
    e = rng.choice(near_edges, k)
    frac = rng.choice([0.0, 1.0, -1.0], k, p=[0.2, 0.2, 0.6])
    frac = np.where(frac < 0, rng.random(k), frac)
    return EdgePoints.concat([on, EdgePoints.of(e, frac * network.edge_length[e])])


@pytest.mark.parametrize("directed", [False, True])
def test_andorra_route_legs_and_distances(andorra: RoadNetwork, directed: bool) -> None:
    """A route through waypoints on Andorra's roads (one-way streets count when directed):
    each leg is exactly the point distance between its snapped waypoints, a message on
    the route is at 0, others match the exhaustive minimum, with and without a limit set
    exactly at one of them."""
    net = andorra.with_direction(directed=directed)
    rng = np.random.default_rng(7)
    biggest = np.bincount(net.components()[1]).argmax()
    edges = np.flatnonzero(net.components()[1][net.edge_u] == biggest)
    e = rng.choice(edges, 6)
    pts = EdgePoints.of(e, rng.random(6) * net.edge_length[e])
    try:
        r = route_through_points(net, pts)
    except InvalidLocationError:
        pytest.skip("waypoints in one-way dead ends")  # not expected with this seed
    assert len(r) >= 50
    starts = np.r_[0, np.cumsum([1 if p.size == 0 else p.size + 1 for p in r.node_paths])]
    for i in range(len(pts) - 1):
        leg = slice(int(starts[i]), int(starts[i + 1]))
        assert float(np.sum(r.end[leg] - r.start[leg])) == network_distance(net, pts[i],
                                                                            pts[i + 1])
    targets = _near_targets(net, r, rng, 60)
    got = _check_against_exhaustive(net, r, targets)
    assert np.all(got[:60] == 0.0)  # the first 60 lie on the route
    positive = got[np.isfinite(got) & (got > 0)]
    assert positive.size
    _check_against_exhaustive(net, r, targets, limit=float(np.median(positive)))


def test_rome_route_of_thousands_of_segments(rome: RoadNetwork) -> None:
    """A route across Rome through 12 waypoints (thousands of pieces): legs exact, the
    waypoints themselves at 0, messages near the route as the exhaustive minimum."""
    rng = np.random.default_rng(3)
    labels = rome.components()[1]
    main = np.flatnonzero(labels == np.bincount(labels).argmax())
    # Twelve junctions of the main component, spread west to east across the middle.
    x = rome.node_x[main]
    pick = main[np.argsort(x)][(np.linspace(0.3, 0.7, 12) * main.size).astype(int)]
    r = route_from_lonlat(rome, {"type": "LineString", "coordinates": np.column_stack(
        [rome.node_lon[pick], rome.node_lat[pick]]).tolist()})
    assert len(r) >= 1000
    data = r.to_json(rome)
    assert sum(len(p) for p in data["node_paths"]) >= 1000
    targets = _near_targets(rome, r, rng, 40)
    got = _check_against_exhaustive(rome, r, targets)
    assert np.all(got[:40] == 0.0)
    _check_against_exhaustive(rome, r, targets, limit=250.0)


def test_one_segment_route_on_rome(rome: RoadNetwork) -> None:
    e = int(np.argmax(rome.edge_length))
    r = route_through_points(rome, EdgePoints.of([e, e], [0.0, rome.edge_length[e] / 2]))
    assert len(r) == 1 and r.node_paths[0].size == 0
    rng = np.random.default_rng(1)
    _check_against_exhaustive(rome, r, _near_targets(rome, r, rng, 30))


def test_andorra_area_clips_every_edge_exactly(andorra: RoadNetwork) -> None:
    """A disc (and a ring with a hole) over Andorra's curved roads: every sampled road
    point clearly inside is on a piece, every one clearly outside is not, whole edges
    inside are [0, length]; distances from the area match the exhaustive minimum."""
    x0, y0 = float(np.median(andorra.node_x)), float(np.median(andorra.node_y))
    disc = shapely.Point(x0, y0).buffer(400.0)
    ring = shapely.Point(x0, y0).buffer(700.0).difference(shapely.Point(x0, y0).buffer(300))
    for shape_xy in (disc, ring):
        area = area_from_geojson(andorra, shapely.geometry.mapping(_to_lonlat(andorra,
                                                                              shape_xy)))
        assert len(area) >= 20
        # Sample every edge near the shape at 41 fractions.
        cand = np.flatnonzero(np.hypot(andorra.node_x[andorra.edge_u] - x0,
                                       andorra.node_y[andorra.edge_u] - y0) < 2000)
        f = np.linspace(0, 1, 41)
        e = np.repeat(cand, f.size)
        off = np.tile(f, cand.size) * andorra.edge_length[e]
        xy = point_xy(andorra, EdgePoints.of(e, off))
        pts = shapely.points(xy)
        gap = shapely.distance(pts, shape_xy.boundary)
        inside = shapely.contains(shape_xy, pts) & (gap > 0.05)
        outside = ~shapely.covers(shape_xy, pts) & (gap > 0.05)
        offs = EdgePoints.of(e, off).offset
        covered = np.zeros(e.size, dtype=bool)
        for k in range(len(area)):
            covered |= (e == area.edge[k]) & (area.start[k] <= offs) & (offs <= area.end[k])
        assert inside.sum() > 100 and outside.sum() > 100
        assert np.all(covered[inside])
        assert not np.any(covered[outside])
        # Edges wholly inside are whole pieces.
        whole = [k for k in np.unique(e) if inside[e == k].all()]
        for k in whole:
            row = np.flatnonzero(area.edge == k)
            assert row.size == 1
            assert (area.start[row[0]], area.end[row[0]]) == (0.0, andorra.edge_length[k])
        rng = np.random.default_rng(5)
        directed = andorra.with_direction(directed=True)
        for net in (andorra, directed):
            _check_against_exhaustive(net, area, _near_targets(net, area, rng, 40))


def test_area_touching_roads_in_one_point_only_holds_no_road() -> None:
    """A triangle with one corner exactly on a junction, the rest in an empty block: the
    roads there meet it in a single point, a part of no length, which is left out."""
    net = grid(3, 3)
    k = int(np.flatnonzero(net.node_ids == 41)[0])
    lon, lat = float(net.node_lon[k]), float(net.node_lat[k])
    tri = {"type": "Polygon", "coordinates": [[[lon, lat], [lon + 0.0006, lat + 0.0002],
                                               [lon + 0.0002, lat + 0.0006], [lon, lat]]]}
    with pytest.raises(InvalidLocationError, match="no road"):
        area_from_geojson(net, tri)
    # Grown to reach across edge 41-51, it holds that edge's part inside.
    tri["coordinates"][0][1] = [lon + 0.0006, lat - 0.0002]
    a = area_from_geojson(net, tri)
    assert len(a) == 1 and a.start[0] == 0.0 and 0 < a.end[0] < 100.0
    assert list(net.node_ids[[net.edge_u[a.edge[0]], net.edge_v[a.edge[0]]]]) == [41, 51]


def test_random_routes_between_places(andorra: RoadNetwork) -> None:
    """Routes between random places: lengths in range, each the route its two waypoints
    resolve to, reproducible by seed; an impossible range is an error, not a hang."""
    from roadpubsub.roadnet.errors import InputError
    from roadpubsub.roadnet.segment_sets import random_routes

    got = random_routes(andorra, 12, seed=3, min_m=1500.0, max_m=4000.0)
    assert len(got) == 12
    for route, ends in got:
        assert 1500.0 <= route.length_m <= 4000.0
        again = route_through_points(andorra, ends)
        np.testing.assert_array_equal(again.edge, route.edge)
        np.testing.assert_array_equal(again.start, route.start)
        np.testing.assert_array_equal(again.end, route.end)
    same = random_routes(andorra, 12, seed=3, min_m=1500.0, max_m=4000.0)
    assert all(np.array_equal(a.edge, b.edge) for (a, _), (b, _) in zip(got, same, strict=True))
    with pytest.raises(InputError, match="only 0 of 2 routes"):
        random_routes(andorra, 2, min_m=1e7, max_m=2e7, max_tries=20)
    with pytest.raises(InputError, match="0 < min <= max"):
        random_routes(andorra, 2, min_m=10.0, max_m=5.0)
