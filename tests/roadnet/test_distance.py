"""Network distances between edge points agree with networkx, on tiny and real networks."""

from __future__ import annotations

from collections.abc import Callable

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roadpubsub.roadnet.dijkstra_kernels import (
    BucketQueue,
    SearchGraph,
    SearchQuery,
    SearchWorkspace,
    _heap_pop,
    _heap_push,
    bucket_dijkstra_kernel,
    dijkstra_kernel,
    reset_kernel,
)
from roadpubsub.roadnet.distance import (
    NodeSearch,
    dead_ends,
    distances_from_point,
    distances_to_point,
    network_distance,
)
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork

INF = float("inf")
PROPERTY = settings(max_examples=20, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


# ----------------------------------------------------------------------------- reference
def reference_graph(net: RoadNetwork, edges: np.ndarray | None = None) -> nx.DiGraph:
    """The network's arcs (of ``edges`` only, if given) as a networkx DiGraph on the same
    node indices, the shortest of parallel arcs kept."""
    e = np.arange(net.n_edges) if edges is None else np.asarray(edges)
    two = net.edge_twoway[e]
    tails = np.concatenate([net.edge_u[e], net.edge_v[e][two]]).astype(np.int64)
    heads = np.concatenate([net.edge_v[e], net.edge_u[e][two]]).astype(np.int64)
    weights = np.concatenate([net.edge_length[e], net.edge_length[e][two]])
    key = tails * net.n_nodes + heads
    order = np.lexsort((weights, key))
    first = np.ones(order.size, dtype=bool)
    first[1:] = key[order][1:] != key[order][:-1]
    keep = order[first]
    G = nx.DiGraph()
    G.add_nodes_from(range(net.n_nodes))
    G.add_weighted_edges_from(zip(tails[keep].tolist(), heads[keep].tolist(),
                                  weights[keep].tolist(), strict=True))
    return G


def reference_distances(G: nx.DiGraph, net: RoadNetwork, p: EdgePoints, qs: EdgePoints, *,
                        cutoff: float | None = None) -> np.ndarray:
    """Distances from point p to each point of qs, written independently of roadnet.

    A route leaves p's edge at one of its ends (towards v always, towards u where the
    edge is two-way or p stands on u), follows shortest node paths, and enters q's edge at
    one of its ends (from u always, from v where two-way or q stands on v, i.e. at a
    positive full length); or it stays on
    a shared edge.
    """
    e, o = int(p.edge[0]), float(p.offset[0])
    length = float(net.edge_length[e])
    two = net.edge_twoway
    exits = {int(net.edge_v[e]): length - o}
    if two[e] or o == 0.0:
        u = int(net.edge_u[e])
        exits[u] = min(o, exits.get(u, INF))
    # One Dijkstra from a temporary source joined to the exits at their costs.
    source = -1
    G.add_weighted_edges_from((source, x, cx) for x, cx in exits.items())
    try:
        dist = nx.single_source_dijkstra_path_length(G, source, cutoff=cutoff)
    finally:
        G.remove_node(source)
    out = np.full(len(qs), INF)
    for i, (f, r) in enumerate(zip(qs.edge.tolist(), qs.offset.tolist(), strict=True)):
        best = dist.get(int(net.edge_u[f]), INF) + r
        if two[f] or (r == float(net.edge_length[f]) and r > 0.0):
            best = min(best, dist.get(int(net.edge_v[f]), INF) + float(net.edge_length[f]) - r)
        if f == e:
            if r >= o:
                best = min(best, r - o)
            elif two[e]:
                best = min(best, o - r)
        out[i] = best
    if cutoff is not None:
        out[out > cutoff] = INF
    return out


def assert_distances_equal(got: np.ndarray, want: np.ndarray) -> None:
    assert np.array_equal(np.isinf(got), np.isinf(want)), (got, want)
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-9, atol=1e-6)


def edge_point_strategy(net: RoadNetwork) -> st.SearchStrategy[tuple[int, float]]:
    """(edge, offset): uniform edges; offsets anywhere, often exactly at an end."""
    frac = st.one_of(st.sampled_from([0.0, 1.0]), st.floats(0.0, 1.0))
    return st.tuples(st.integers(0, net.n_edges - 1), frac).map(
        lambda ef: (ef[0], ef[1] * float(net.edge_length[ef[0]])))


def to_points(pairs: list[tuple[int, float]]) -> EdgePoints:
    return EdgePoints.of([e for e, _ in pairs], [o for _, o in pairs])


# ----------------------------------------------------------------------------- real networks
@pytest.fixture(scope="module")
def reference(real_networks: Callable[[str], RoadNetwork]
              ) -> Callable[[str, bool], tuple[RoadNetwork, nx.DiGraph, NodeSearch]]:
    """(network, its networkx graph, a forward search), built once per network/direction."""
    cache: dict[tuple[str, bool], tuple[RoadNetwork, nx.DiGraph, NodeSearch]] = {}

    def get(name: str, directed: bool) -> tuple[RoadNetwork, nx.DiGraph, NodeSearch]:
        if (name, directed) not in cache:
            net = real_networks(name).with_direction(directed=directed)
            cache[(name, directed)] = (net, reference_graph(net), NodeSearch(net))
        return cache[(name, directed)]
    return get


@pytest.mark.parametrize("directed", [False, True], ids=["undirected", "directed"])
@pytest.mark.parametrize("name", ["andorra", "california", "west_oakland", "helsinki"])
@PROPERTY
@given(data=st.data())
def test_matches_networkx(reference: Callable[[str, bool], tuple[RoadNetwork, nx.DiGraph,
                                                                 NodeSearch]],
                          name: str, directed: bool, data: st.DataObject) -> None:
    net, G, search = reference(name, directed)
    points = edge_point_strategy(net)
    p = to_points([data.draw(points, label="p")])
    qs_list = data.draw(st.lists(points, min_size=1, max_size=4), label="qs")
    # Always include a point on p's own edge, the case with a direct run.
    qs_list.append((int(p.edge[0]), data.draw(st.floats(0.0, 1.0))
                    * float(net.edge_length[p.edge[0]])))
    qs = to_points(qs_list)
    want = reference_distances(G, net, p, qs)
    assert_distances_equal(distances_from_point(net, p, qs, search=search), want)
    # The reverse search agrees, point by point.
    back = NodeSearch(net, reverse=True)
    for i in range(len(qs)):
        got = distances_to_point(net, qs[i], p, search=back)[0]
        assert_distances_equal(np.array([got]), want[i:i + 1])


ROME_LIMIT_M = 2_500.0


@pytest.fixture(scope="module")
def rome_region(rome: RoadNetwork) -> tuple[np.ndarray, np.ndarray, nx.DiGraph, NodeSearch]:
    """Central Rome for bounded searches: (edges to start from, edges to aim at, networkx
    graph of the region, forward search on the whole network).

    Starts lie within 1 km of the centre. Any route of at most ROME_LIMIT_M from there
    stays within 1 km + ROME_LIMIT_M / kappa of the centre (dN >= kappa * dE), inside the
    region's radius, so the region's graph gives the whole network's bounded distances.
    """
    cx, cy = float(np.median(rome.node_x)), float(np.median(rome.node_y))
    r = np.hypot(rome.node_x - cx, rome.node_y - cy)
    start_r, region_r = 1_000.0, 4_000.0
    assert start_r + ROME_LIMIT_M / rome.kappa < region_r - 10.0
    region = (r[rome.edge_u] < region_r) & (r[rome.edge_v] < region_r)
    start = (r[rome.edge_u] < start_r) & (r[rome.edge_v] < start_r)
    region_edges = np.flatnonzero(region)
    return (np.flatnonzero(start), region_edges, reference_graph(rome, region_edges),
            NodeSearch(rome))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_rome_bounded_matches_networkx(
    rome: RoadNetwork, rome_region: tuple[np.ndarray, np.ndarray, nx.DiGraph, NodeSearch],
    data: st.DataObject,
) -> None:
    """Rome (paper scale), distances bounded by ROME_LIMIT_M around its centre."""
    starts, targets, G, search = rome_region
    frac = st.one_of(st.sampled_from([0.0, 1.0]), st.floats(0.0, 1.0))
    e = starts[data.draw(st.integers(0, starts.size - 1), label="p edge")]
    p = EdgePoints.of([e], [data.draw(frac) * rome.edge_length[e]])
    picks = targets[data.draw(st.lists(st.integers(0, targets.size - 1), min_size=6,
                                       max_size=6), label="q edges")]
    qs = EdgePoints.of(picks, np.array([data.draw(frac) for _ in picks])
                       * rome.edge_length[picks])
    want = reference_distances(G, rome, p, qs, cutoff=ROME_LIMIT_M)
    got = distances_from_point(rome, p, qs, limit=ROME_LIMIT_M, search=search)
    assert_distances_equal(got, want)


# ----------------------------------------------------------------------------- tiny graphs
def tiny(edges: list[tuple[int, int, float]], *, oneway: list[bool] | None = None,
         directed: bool = False, n_nodes: int | None = None) -> RoadNetwork:
    """Nodes 0..n-1 on a small circle near (10 E, 50 N); edges (u, v, length in metres)."""
    n = n_nodes or 1 + max(max(u, v) for u, v, _ in edges)
    angle = np.linspace(0, 2 * np.pi, n, endpoint=False)
    return RoadNetwork.from_arrays(
        node_ids=np.arange(n), node_lon=10 + 0.001 * np.cos(angle),
        node_lat=50 + 0.001 * np.sin(angle),
        edge_u_ids=[u for u, _, _ in edges], edge_v_ids=[v for _, v, _ in edges],
        edge_length=[w for _, _, w in edges], edge_oneway=oneway, directed=directed)


def d(net: RoadNetwork, p: tuple[int, float], q: tuple[int, float]) -> float:
    return network_distance(net, to_points([p]), to_points([q]))


def test_same_edge() -> None:
    net = tiny([(0, 1, 100.0)])
    assert d(net, (0, 20.0), (0, 70.0)) == pytest.approx(50.0)
    assert d(net, (0, 70.0), (0, 20.0)) == pytest.approx(50.0)
    assert d(net, (0, 30.0), (0, 30.0)) == 0.0


def test_same_edge_shortcut_around() -> None:
    """Two points far apart on a long edge are closer through the rest of the graph."""
    net = tiny([(0, 1, 1000.0), (1, 2, 10.0), (2, 0, 10.0)])
    assert d(net, (0, 5.0), (0, 995.0)) == pytest.approx(5 + 20 + 5)


def test_parallel_edges() -> None:
    net = tiny([(0, 1, 100.0), (0, 1, 300.0)])
    # p on the long edge at 100 m from node 0, q on the short edge at 30 m from node 0.
    assert d(net, (1, 100.0), (0, 30.0)) == pytest.approx(130.0)
    # Node to node always takes the shorter parallel edge.
    assert d(net, (1, 0.0), (1, 300.0)) == pytest.approx(100.0)
    assert d(net, (0, 0.0), (0, 100.0)) == pytest.approx(100.0)


def test_disconnected_parts_are_inf() -> None:
    net = tiny([(0, 1, 100.0), (2, 3, 100.0)])
    assert d(net, (0, 10.0), (1, 10.0)) == INF
    qs = EdgePoints.of([0, 1, 1], [50.0, 0.0, 100.0])
    got = distances_from_point(net, EdgePoints.of([0], [10.0]), qs)
    np.testing.assert_array_equal(got, [40.0, INF, INF])
    got = distances_to_point(net, EdgePoints.of([0], [10.0]), qs)
    np.testing.assert_array_equal(got, [40.0, INF, INF])


def test_isolated_node_and_limit() -> None:
    net = tiny([(0, 1, 100.0), (1, 2, 100.0)], n_nodes=4)  # node 3 has no edge
    qs = EdgePoints.of([0, 1, 1], [90.0, 50.0, 100.0])
    p = EdgePoints.of([0], [0.0])
    np.testing.assert_allclose(distances_from_point(net, p, qs), [90.0, 150.0, 200.0])
    np.testing.assert_array_equal(distances_from_point(net, p, qs, limit=150.0),
                                  [90.0, 150.0, INF])
    np.testing.assert_array_equal(distances_to_point(net, EdgePoints.of([1], [100.0]),
                                                     EdgePoints.of([0, 1], [0.0, 90.0]),
                                                     limit=50.0), [INF, 10.0])


def test_zero_length_edges() -> None:
    net = tiny([(0, 1, 100.0), (1, 2, 0.0), (2, 3, 50.0)])
    assert d(net, (0, 40.0), (1, 0.0)) == pytest.approx(60.0)
    assert d(net, (1, 0.0), (1, 0.0)) == 0.0
    assert d(net, (0, 40.0), (2, 10.0)) == pytest.approx(70.0)
    assert d(net, (2, 10.0), (0, 40.0)) == pytest.approx(70.0)


def test_loop_edge() -> None:
    net = tiny([(0, 1, 100.0), (1, 1, 40.0)])
    assert d(net, (0, 0.0), (1, 10.0)) == pytest.approx(110.0)
    assert d(net, (0, 0.0), (1, 30.0)) == pytest.approx(110.0)  # round the loop backwards
    assert d(net, (1, 5.0), (1, 35.0)) == pytest.approx(10.0)


def test_one_way_edges() -> None:
    """A one-way street 0 -> 1 and a two-way detour 1 - 2 - 0."""
    edges = [(0, 1, 100.0), (1, 2, 100.0), (2, 0, 100.0)]
    oneway = [True, False, False]
    undirected = tiny(edges, oneway=oneway)
    directed = tiny(edges, oneway=oneway, directed=True)
    p, q = (0, 20.0), (0, 70.0)
    assert d(undirected, p, q) == pytest.approx(50.0)
    assert d(undirected, q, p) == pytest.approx(50.0)
    assert d(directed, p, q) == pytest.approx(50.0)
    # Backwards on the one-way street means going round: 30 + 200 + 20.
    assert d(directed, q, p) == pytest.approx(250.0)
    # A point on the two-way edge 1 - 2 leaves towards node 2 (90 m), goes on to node 0
    # (100 m), then 50 m along the one-way street.
    assert d(directed, (1, 10.0), (0, 50.0)) == pytest.approx(190.0 + 50.0)


def test_points_on_the_end_nodes_of_a_one_way_edge() -> None:
    """A point at offset 0 of a one-way edge stands on u and may leave by u's other roads;
    one at its full length stands on v and is reached from v directly."""
    edges = [(0, 1, 100.0), (0, 2, 30.0), (2, 1, 30.0)]
    net = tiny(edges, oneway=[True, False, False], directed=True)
    assert d(net, (0, 0.0), (1, 10.0)) == pytest.approx(10.0)   # straight down 0 - 2
    # From node 2: to node 1 is 30 m, and there the point at the end of 0 -> 1 already is;
    # 1 m before it means entering at node 0 (30 m back) and running 99 m.
    assert d(net, (1, 30.0), (0, 100.0)) == pytest.approx(30.0)
    assert d(net, (1, 30.0), (0, 99.0)) == pytest.approx(30.0 + 99.0)


def test_one_way_dead_end_is_unreachable() -> None:
    net = tiny([(0, 1, 100.0), (1, 2, 50.0)], oneway=[True, True], directed=True)
    assert d(net, (1, 10.0), (0, 10.0)) == INF
    assert d(net, (0, 10.0), (1, 10.0)) == pytest.approx(100.0)


def test_undirected_is_symmetric_and_searches_are_checked() -> None:
    net = tiny([(0, 1, 100.0), (1, 2, 70.0), (2, 0, 30.0), (2, 3, 5.0)])
    rng = np.random.default_rng(7)
    e = rng.integers(0, net.n_edges, 20)
    pts = EdgePoints.of(e, rng.random(20) * net.edge_length[e])
    for i in range(len(pts)):
        fwd = distances_from_point(net, pts[i], pts)
        back = distances_to_point(net, pts[i], pts)
        np.testing.assert_allclose(fwd, back, rtol=1e-12, atol=1e-9)
    with pytest.raises(ValueError, match="single edge point"):
        distances_from_point(net, pts[:2], pts)
    with pytest.raises(ValueError, match="reverse NodeSearch"):
        distances_to_point(net, pts[0], pts, search=NodeSearch(net))
    with pytest.raises(ValueError, match="forward NodeSearch"):
        distances_from_point(net, pts[0], pts, search=NodeSearch(net, reverse=True))


# ----------------------------------------------------------------------------- targets
def test_dead_ends() -> None:
    """A spur, a spur of parallel edges, a one-way cul-de-sac and a loop."""
    # 0 - 1 - 2 - 0 is a triangle; 3 hangs off 1; 4 hangs off 2 by two parallel edges;
    # 5 -> 0 is one way; 6 has a loop besides its edge to 0.
    net = tiny([(0, 1, 10.0), (1, 2, 10.0), (2, 0, 10.0), (1, 3, 5.0), (2, 4, 5.0),
                (2, 4, 7.0), (5, 0, 3.0), (6, 0, 4.0), (6, 6, 2.0)],
               oneway=[False] * 6 + [True, False, False], directed=True)
    index = net.node_index(np.arange(7))  # the network renumbers its nodes

    def by_id(found: np.ndarray) -> list[int]:
        return [int(net.node_ids[x]) if x >= 0 else -1 for x in found[index]]

    # Node 5 only leaves to 0; nothing leaves 0 for 5, so on the reversed arcs 5 has none.
    assert by_id(dead_ends(net.adjacency())) == [-1, -1, -1, 1, 2, 0, -1]
    assert by_id(dead_ends(net.adjacency(reverse=True))) == [-1, -1, -1, 1, 2, -1, -1]


@st.composite
def target_searches(draw: st.DrawFn) -> tuple[RoadNetwork, list[int], list[int], list[float]]:
    """A random small graph (spurs, one-way streets, parallel edges), seeds and targets."""
    n = draw(st.integers(2, 12))
    edges = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1),
                                     st.sampled_from([0.0, 1.0, 2.5, 10.0, 40.0])),
                          min_size=1, max_size=2 * n))
    oneway = draw(st.lists(st.booleans(), min_size=len(edges), max_size=len(edges)))
    net = tiny(edges, oneway=oneway, directed=draw(st.booleans()), n_nodes=n)
    seeds = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=2))
    targets = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=6))
    limits = draw(st.lists(st.sampled_from([0.0, 2.5, 11.0, 30.0, 1e9]),
                           min_size=len(targets), max_size=len(targets)))
    return net, seeds, targets, limits


@given(case=target_searches(), reverse=st.booleans())
@PROPERTY
def test_target_search_with_dead_end_skipping_is_exact(case, reverse: bool) -> None:
    """Every target within its limit gets exactly the distance of a full search."""
    net, seeds, targets, limits = case
    full = NodeSearch(net, reverse=reverse)
    want = full.run(seeds, np.zeros(len(seeds))).dist.copy()
    search = NodeSearch(net, reverse=reverse)
    adj = search.adjacency
    dist, target_ws, heap_d, heap_n, touched = search.workspace()
    tg = np.asarray(targets, dtype=np.int64)
    tl = np.asarray(limits)
    dijkstra_kernel(
        SearchGraph(adj.indptr, adj.indices, adj.weights, dead_ends(adj)),
        SearchQuery(np.asarray(seeds, dtype=np.int64), np.zeros(len(seeds)), float(tl.max()),
                    tg, tl),
        SearchWorkspace(dist, target_ws, heap_d, heap_n, touched))
    for t, lim in zip(targets, limits, strict=True):
        if want[t] <= lim:
            assert dist[t] == want[t]
        else:
            assert dist[t] > lim
    assert np.all(target_ws == -np.inf)  # the workspace is restored


@given(case=target_searches(), reverse=st.booleans(),
       width=st.sampled_from([0.3, 1.0, 2.5, 7.0, 1000.0]))
@PROPERTY
def test_bucket_search_gives_the_heap_search_distances(case, reverse: bool,
                                                       width: float) -> None:
    """The bucket queue (widths below, at and far above the edge lengths, where buckets
    hold many nodes and label correction rescans them) settles every target within its
    limit at exactly the full search's distance, and restores the workspace."""
    net, seeds, targets, limits = case
    want = NodeSearch(net, reverse=reverse).run(seeds, np.zeros(len(seeds))).dist.copy()
    search = NodeSearch(net, reverse=reverse)
    adj = search.adjacency
    dist, target_ws, heap_d, heap_n, touched = search.workspace()
    tg = np.asarray(targets, dtype=np.int64)
    tl = np.asarray(limits)
    # Every path here is under 1 km (at most 11 edges of 40 m): searching to 1 km, not to
    # the 1e9 m limits, keeps the bucket count small without changing any answer.
    limit = min(float(tl.max()), 1000.0)
    heads = np.empty(int(limit / width) + 3, dtype=np.int64)
    links = np.empty(heap_d.size, dtype=np.int64)
    n_touched, n_scanned, ok = bucket_dijkstra_kernel(
        SearchGraph(adj.indptr, adj.indices, adj.weights, dead_ends(adj)),
        SearchQuery(np.asarray(seeds, dtype=np.int64), np.zeros(len(seeds)), limit, tg, tl),
        SearchWorkspace(dist, target_ws, heap_d, heap_n, touched),
        BucketQueue(heads, links, width))
    assert ok and n_scanned >= 1
    for t, lim in zip(targets, limits, strict=True):
        if want[t] <= lim:
            assert dist[t] == want[t]
        else:
            assert dist[t] > lim
    assert np.all(target_ws == -np.inf)
    reached = np.flatnonzero(np.isfinite(dist))
    assert sorted(reached.tolist()) == sorted(touched[:n_touched].tolist())
    assert np.all(dist[reached] >= want[reached])  # tentative distances never undershoot


@given(case=target_searches(), reverse=st.booleans(),
       width=st.sampled_from([0.3, 1.0, 7.0, 1000.0]),
       odd=st.lists(st.sampled_from([-np.inf, -50.0, -1.0, -0.2, 0.0, 1e9]), max_size=4))
@PROPERTY
def test_bucket_search_stop_rule_with_negative_and_huge_limits(case, reverse: bool,
                                                               width: float,
                                                               odd: list[float]) -> None:
    """The stop rule keeps its targets in lists by limit bucket: limits below zero (down
    to -inf), at zero and above the search's limit, mixed with ordinary ones on repeated
    targets, still give every target within its limit its exact distance."""
    net, seeds, targets, limits = case
    targets = targets + targets[:len(odd)]
    limits = limits + odd[:len(targets) - len(limits)]
    want = NodeSearch(net, reverse=reverse).run(seeds, np.zeros(len(seeds))).dist.copy()
    search = NodeSearch(net, reverse=reverse)
    adj = search.adjacency
    dist, target_ws, heap_d, heap_n, touched = search.workspace()
    tg = np.asarray(targets, dtype=np.int64)
    tl = np.asarray(limits, dtype=np.float64)
    limit = max(min(float(tl.max()), 1000.0), 0.0)
    heads = np.empty(int(limit / width) + 3, dtype=np.int64)
    links = np.empty(heap_d.size, dtype=np.int64)
    _, _, ok = bucket_dijkstra_kernel(
        SearchGraph(adj.indptr, adj.indices, adj.weights, dead_ends(adj)),
        SearchQuery(np.asarray(seeds, dtype=np.int64), np.zeros(len(seeds)), limit, tg, tl),
        SearchWorkspace(dist, target_ws, heap_d, heap_n, touched),
        BucketQueue(heads, links, width))
    assert ok
    for t in set(targets):
        best = max(lim for t2, lim in zip(targets, limits, strict=True) if t2 == t)
        if want[t] <= min(best, limit):
            assert dist[t] == want[t]
    assert np.all(target_ws == -np.inf)


@pytest.mark.parametrize("width", [0.5, 3.0, 7.0, 50.0])
def test_bucket_search_stops_only_past_a_targets_bucket(width: float) -> None:
    """Node 2 is first reached at 10 m straight from the seed, then at 2 m through node 1;
    with limit 3 m the search must not stop before the bucket that holds 2 m is done."""
    net = tiny([(0, 2, 10.0), (0, 1, 1.0), (1, 2, 1.0), (2, 3, 1.0)], directed=True,
               oneway=[True] * 4, n_nodes=4)
    index = net.node_index(np.arange(4))
    search = NodeSearch(net)
    adj = search.adjacency
    dist, target_ws, heap_d, heap_n, touched = search.workspace()
    heads = np.empty(int(12.0 / width) + 3, dtype=np.int64)
    links = np.empty(heap_d.size, dtype=np.int64)
    bucket_dijkstra_kernel(
        SearchGraph(adj.indptr, adj.indices, adj.weights, np.empty(0, dtype=np.int32)),
        SearchQuery(index[:1], np.zeros(1), 12.0, index[2:3], np.array([3.0])),
        SearchWorkspace(dist, target_ws, heap_d, heap_n, touched),
        BucketQueue(heads, links, width))
    assert dist[index[2]] == 2.0


def test_bucket_search_says_when_it_cannot_run() -> None:
    """Too few buckets for the limit, or too few entries: ok is False, nothing is left
    marked, and the touched nodes are listed for the caller's reset."""
    net = tiny([(0, 1, 10.0), (1, 2, 10.0), (2, 3, 10.0), (3, 0, 10.0)], n_nodes=4)
    search = NodeSearch(net)
    adj = search.adjacency
    dist, target_ws, heap_d, heap_n, touched = search.workspace()
    seeds, zero = np.array([0]), np.zeros(1)
    tg, tl = np.array([2]), np.array([25.0])
    links = np.empty(heap_d.size, dtype=np.int64)
    no_dead_ends = np.empty(0, dtype=np.int32)
    # 25 m in buckets of 10 m needs 3 buckets (and one spare): 3 heads are too few.
    result = bucket_dijkstra_kernel(
        SearchGraph(adj.indptr, adj.indices, adj.weights, no_dead_ends),
        SearchQuery(seeds, zero, 25.0, tg, tl),
        SearchWorkspace(dist, target_ws, heap_d, heap_n, touched),
        BucketQueue(np.empty(3, dtype=np.int64), links, 10.0))
    assert result == (0, 0, False)
    assert np.all(dist == np.inf) and np.all(target_ws == -np.inf)
    # Two entries cannot hold the seed and both of its neighbours.
    n_touched, _, ok = bucket_dijkstra_kernel(
        SearchGraph(adj.indptr, adj.indices, adj.weights, no_dead_ends),
        SearchQuery(seeds, zero, 25.0, tg, tl),
        SearchWorkspace(dist, target_ws, heap_d[:2], heap_n[:2], touched),
        BucketQueue(np.empty(5, dtype=np.int64), links[:2], 10.0))
    assert not ok and np.all(target_ws == -np.inf)
    assert set(np.flatnonzero(np.isfinite(dist)).tolist()) == set(touched[:n_touched].tolist())
    reset_kernel(dist, touched, n_touched)
    assert np.all(dist == np.inf)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=1e4, allow_nan=False), min_size=1,
                max_size=200),
       st.lists(st.booleans(), min_size=1, max_size=400))
def test_heap_pops_in_order(keys: list[float], pops: list[bool]) -> None:
    """The 4-ary heap gives back every key, smallest first, under mixed pushes and pops."""
    heap_d = np.empty(len(keys))
    heap_n = np.empty(len(keys), dtype=np.int64)
    size = 0
    pending = list(range(len(keys)))
    live: list[tuple[float, int]] = []
    steps = iter(pops)
    while pending or size:
        pop = size > 0 and (not pending or next(steps, True))
        if pop:
            d, x = heap_d[0], int(heap_n[0])
            size = _heap_pop(heap_d, heap_n, size)
            assert d == min(live)[0]
            live.remove((d, x))
        else:
            x = pending.pop()
            size = _heap_push(heap_d, heap_n, size, keys[x], x)
            live.append((keys[x], x))
        assert size == len(live)
