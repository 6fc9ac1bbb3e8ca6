"""Edge points: snapping lon/lat and projected points, (u, v, offset) naming, positions."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyproj import Transformer

from roadpubsub.roadnet.errors import InvalidLocationError
from roadpubsub.roadnet.locations import EdgePoints, locate_lonlat, locate_uv, locate_xy, point_xy
from roadpubsub.roadnet.network import RoadNetwork

UTM33 = "EPSG:32633"
X0, Y0 = 290_000.0, 4_640_000.0  # near Rome, in UTM 33N metres


def metric_network(nodes: dict[int, tuple[float, float]],
                   edges: list[tuple[int, int, float, list[tuple[float, float]] | None]],
                   *, oneway: list[bool] | None = None, directed: bool = False) -> RoadNetwork:
    """A network laid out in UTM 33N metres (offsets from X0, Y0); edge polylines optional."""
    to_lonlat = Transformer.from_crs(UTM33, "EPSG:4326", always_xy=True)
    ids = sorted(nodes)
    lon, lat = to_lonlat.transform([X0 + nodes[i][0] for i in ids],
                                   [Y0 + nodes[i][1] for i in ids])
    lines = [[nodes[u], *(via or []), nodes[v]] for u, v, _, via in edges]
    ptr = np.cumsum([0] + [len(line) for line in lines])
    pts = np.array([p for line in lines for p in line], dtype=float)
    glon, glat = to_lonlat.transform(X0 + pts[:, 0], Y0 + pts[:, 1])
    return RoadNetwork.from_arrays(
        node_ids=ids, node_lon=lon, node_lat=lat, edge_u_ids=[e[0] for e in edges],
        edge_v_ids=[e[1] for e in edges], edge_length=[e[2] for e in edges],
        edge_oneway=oneway, geom_ptr=ptr, geom_lonlat=np.column_stack([glon, glat]),
        directed=directed, crs=UTM33)


@pytest.fixture(scope="module")
def grid() -> RoadNetwork:
    """0 -(100 m)- 1 -(100 m)- 2, a parallel long road 1 = 2 and a curved edge 2 ~ 3."""
    nodes = {10: (0.0, 0.0), 11: (100.0, 0.0), 12: (200.0, 0.0), 13: (200.0, 200.0)}
    edges = [
        (10, 11, 100.0, None),
        (11, 12, 100.0, None),
        (11, 12, 180.0, [(150.0, -60.0)]),          # a parallel detour south
        (12, 13, 400.0, [(300.0, 0.0), (300.0, 200.0)]),  # polyline 400 m, length 400 m
    ]
    return metric_network(nodes, edges, oneway=[False, True, False, False], directed=True)


# ----------------------------------------------------------------------------- lon/lat
@pytest.mark.parametrize("name", ["andorra", "california", "west_oakland"])
def test_node_positions_snap_onto_themselves(real_networks: Callable[[str], RoadNetwork],
                                             name: str) -> None:
    net = real_networks(name)
    rng = np.random.default_rng(1)
    # Nodes with an edge (all of them, in these networks), a random sample.
    nodes = rng.choice(net.n_nodes, size=min(300, net.n_nodes), replace=False)
    pts, dist = locate_lonlat(net, net.node_lon[nodes], net.node_lat[nodes])
    assert dist.max() < 1e-3  # metres: only the projection round trip
    xy = point_xy(net, pts)
    np.testing.assert_allclose(xy[:, 0], net.node_x[nodes], atol=1e-3)
    np.testing.assert_allclose(xy[:, 1], net.node_y[nodes], atol=1e-3)
    # The edge found touches the node, and the offset puts the point at that end.
    eu, ev = net.edge_u[pts.edge], net.edge_v[pts.edge]
    assert np.all((eu == nodes) | (ev == nodes))
    at_u = (eu == nodes) & np.isclose(pts.offset, 0.0, atol=1e-6)
    at_v = (ev == nodes) & np.isclose(pts.offset, net.edge_length[pts.edge], atol=1e-6)
    assert np.all(at_u | at_v | (net.edge_length[pts.edge] == 0))


def test_random_points_round_trip(real_networks: Callable[[str], RoadNetwork]) -> None:
    net = real_networks("andorra")
    rng = np.random.default_rng(2)
    e = rng.integers(0, net.n_edges, 500)
    pts = EdgePoints.of(e, rng.random(500) * net.edge_length[e])
    xy = point_xy(net, pts)
    again, dist = locate_xy(net, xy[:, 0], xy[:, 1])
    assert dist.max() < 1e-6
    np.testing.assert_allclose(point_xy(net, again), xy, atol=1e-6)


def test_far_points_are_named(west_oakland: RoadNetwork) -> None:
    lon = [west_oakland.node_lon[0], 0.0, west_oakland.node_lon[0] + 1.0]
    lat = [west_oakland.node_lat[0], 0.0, west_oakland.node_lat[0]]
    with pytest.raises(InvalidLocationError, match=r"farther than 250 m.*: 1, 2$"):
        locate_lonlat(west_oakland, lon, lat)
    with pytest.raises(InvalidLocationError, match=r": msg-b, msg-c$"):
        locate_lonlat(west_oakland, lon, lat, labels=["msg-a", "msg-b", "msg-c"])
    # A larger snap distance accepts them.
    locate_lonlat(west_oakland, lon[:1], lat[:1], max_snap_m=1.0)


def test_invalid_lonlat_is_named(west_oakland: RoadNetwork) -> None:
    with pytest.raises(InvalidLocationError, match=r"invalid lon/lat: 0, 2$"):
        locate_lonlat(west_oakland, [np.nan, -122.29, -122.29], [37.8, 37.8, 95.0])


def test_many_bad_rows_are_summarised(west_oakland: RoadNetwork) -> None:
    with pytest.raises(InvalidLocationError, match=re.escape("(and 5 more)")):
        locate_lonlat(west_oakland, np.zeros(15), np.zeros(15))


def test_empty_input(grid: RoadNetwork) -> None:
    pts, dist = locate_xy(grid, [], [])
    assert len(pts) == 0 and dist.size == 0
    assert point_xy(grid, pts).shape == (0, 2)


# ----------------------------------------------------------------------------- projected
def test_locate_xy_on_a_curved_edge(grid: RoadNetwork) -> None:
    # Half-way along the polyline 12 ~ 3: (300, 0) is 100 m in, (300, 100) is 200 m in.
    pts, dist = locate_xy(grid, [X0 + 305.0, X0 + 300.0], [Y0 + 100.0, Y0 + 0.0])
    np.testing.assert_array_equal(pts.edge, [3, 3])
    np.testing.assert_allclose(pts.offset, [200.0, 100.0], atol=1e-6)
    np.testing.assert_allclose(dist, [5.0, 0.0], atol=1e-6)


def test_locate_scales_offsets_to_the_edge_length() -> None:
    """An edge 250 m long drawn as a 100 m line: offsets are in the edge's metres."""
    net = metric_network({1: (0.0, 0.0), 2: (100.0, 0.0)}, [(1, 2, 250.0, None)])
    pts, _ = locate_xy(net, [X0 + 40.0], [Y0 + 3.0])
    np.testing.assert_allclose(pts.offset, [100.0], atol=1e-6)
    np.testing.assert_allclose(point_xy(net, pts), [[X0 + 40.0, Y0]], atol=1e-6)


def test_point_xy_at_the_ends(grid: RoadNetwork) -> None:
    e = np.arange(grid.n_edges)
    start = point_xy(grid, EdgePoints.of(e, np.zeros(e.size)))
    end = point_xy(grid, EdgePoints.of(e, grid.edge_length))
    np.testing.assert_allclose(start, np.column_stack([grid.node_x, grid.node_y])[grid.edge_u])
    np.testing.assert_allclose(end, np.column_stack([grid.node_x, grid.node_y])[grid.edge_v])


# ----------------------------------------------------------------------------- (u, v, offset)
def test_locate_uv(grid: RoadNetwork) -> None:
    pts = locate_uv(grid, [10, 11], [11, 10], [30.0, 30.0])
    np.testing.assert_array_equal(pts.edge, [0, 0])
    # (v, u) naming measures the offset from the other end.
    np.testing.assert_allclose(pts.offset, [30.0, 70.0])


def test_locate_uv_flips_on_a_real_network(california: RoadNetwork) -> None:
    rng = np.random.default_rng(3)
    e = rng.choice(california.n_edges, size=200, replace=False)
    u, v = california.node_ids[california.edge_u[e]], california.node_ids[california.edge_v[e]]
    off = rng.random(200) * california.edge_length[e]
    fwd = locate_uv(california, u, v, off)
    back = locate_uv(california, v, u, california.edge_length[e] - off)
    # Parallel edges may make another, shorter, edge the match; compare positions then.
    np.testing.assert_allclose(point_xy(california, fwd), point_xy(california, back),
                               atol=1e-6)
    same = fwd.edge == e
    assert same.mean() > 0.95
    np.testing.assert_allclose(fwd.offset[same], off[same])


def test_locate_uv_takes_the_shortest_parallel_edge(grid: RoadNetwork) -> None:
    pts = locate_uv(grid, [11], [12], [50.0])
    np.testing.assert_array_equal(pts.edge, [1])


def test_locate_uv_one_way_direction() -> None:
    nodes = {1: (0.0, 0.0), 2: (100.0, 0.0)}
    directed = metric_network(nodes, [(1, 2, 100.0, None)], oneway=[True], directed=True)
    with pytest.raises(InvalidLocationError, match=r"not an edge of the network: 0$"):
        locate_uv(directed, [2], [1], [10.0])
    undirected = directed.with_direction(directed=False)
    np.testing.assert_allclose(locate_uv(undirected, [2], [1], [10.0]).offset, [90.0])


def test_locate_uv_errors_name_rows(grid: RoadNetwork) -> None:
    with pytest.raises(InvalidLocationError, match=r"unknown node ids: s2$"):
        locate_uv(grid, [10, 11, 99], [11, 12, 10], [1.0, 1.0, 1.0], labels=["s0", "s1", "s2"])
    with pytest.raises(InvalidLocationError, match=r"not an edge of the network: 1$"):
        locate_uv(grid, [10, 10], [11, 13], [1.0, 1.0])
    with pytest.raises(InvalidLocationError, match=r"outside their edge's length: 0, 2$"):
        locate_uv(grid, [10, 10, 10], [11, 11, 11], [-1.0, 50.0, 100.5])
    with pytest.raises(InvalidLocationError, match=r"missing offset: 1$"):
        locate_uv(grid, [10, 10], [11, 11], [1.0, np.nan])
    # Within the tolerance, offsets are clipped onto the edge.
    pts = locate_uv(grid, [10, 10], [11, 11], [-1e-9, 100.0 + 1e-9])
    np.testing.assert_array_equal(pts.offset, [0.0, 100.0])


# ----------------------------------------------------------------------------- EdgePoints
def test_edge_points_container() -> None:
    pts = EdgePoints.of([1, 2, 3], [0.5, 1.5, 2.5])
    assert len(pts) == 3
    assert pts.edge.dtype == np.int32 and pts.offset.dtype == np.float64
    one = pts[1]
    assert len(one) == 1 and one.edge[0] == 2 and one.offset[0] == 1.5
    np.testing.assert_array_equal(pts[1:].edge, [2, 3])
    np.testing.assert_array_equal(pts[np.array([True, False, True])].edge, [1, 3])
    with pytest.raises(ValueError, match="one shape"):
        EdgePoints(np.zeros(2, dtype=np.int32), np.zeros(3))


# ----------------------------------------------------------------------------- compiled (u, v)
@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31), k=st.integers(1, 6),
       name=st.sampled_from(["grid", "andorra", "west_oakland"]),
       near=st.sampled_from(["none", "given", "partly"]))
def test_locate_uv_compiled_equals_the_vectorised_path(
        grid: RoadNetwork, real_networks: Callable[[str], RoadNetwork], seed: int, k: int,
        name: str, near: str) -> None:
    """The compiled rows of locate_uv give the vectorised path's points, and any row it
    does not take (unknown nodes, no edge, offsets off the edge or NaN, a parallel edge to
    choose) leaves the whole call to that path: same points, same error."""
    from roadpubsub.roadnet.locations import _locate_uv_general

    net = grid if name == "grid" else real_networks(name)
    rng = np.random.default_rng(seed)
    e = rng.integers(0, net.n_edges, k)
    length = net.edge_length[e]
    u = net.node_ids[net.edge_u[e]].astype(np.int64)
    v = net.node_ids[net.edge_v[e]].astype(np.int64)
    swap = rng.random(k) < 0.4  # named from the other end
    u, v = np.where(swap, v, u), np.where(swap, u, v)
    off = rng.choice([0.0, 1.0, 0.5, rng.random()], k) * length
    bad = rng.random(k) < 0.15
    for i in np.flatnonzero(bad).tolist():
        kind = rng.integers(0, 5)
        if kind == 0:
            u[i] = int(net.node_ids.max()) + 1
        elif kind == 1:
            off[i] = np.nan
        elif kind == 2:
            off[i] = length[i] + rng.choice([1e-7, 1e-3, 5.0])
        elif kind == 3:
            off[i] = -rng.choice([1e-7, 1e-3])
        else:
            v[i] = u[i]  # rarely an edge
    xy = None
    if near != "none":
        xy = point_xy(net, EdgePoints.of(e, np.clip(off, 0, length)))
        if near == "partly":
            xy[rng.random(k) < 0.5] = np.nan
    try:
        want = _locate_uv_general(net, u, v, off, labels=None, tolerance_m=1e-6, near_xy=xy)
    except InvalidLocationError as exc:
        with pytest.raises(InvalidLocationError, match=re.escape(str(exc))):
            locate_uv(net, u, v, off, near_xy=xy)
        return
    got = locate_uv(net, u, v, off, near_xy=xy)
    np.testing.assert_array_equal(got.edge, want.edge)
    np.testing.assert_array_equal(got.offset, want.offset)


def test_points_on_edges_is_the_general_check() -> None:
    """The compiled check answers what the numpy formulation does, at the edges' ends, one
    ulp past them, for NaN and infinite offsets and ids just outside the network, and
    refuses (without casting) columns of other dtypes."""
    from roadpubsub.roadnet.locations import points_on_edges

    length = np.array([10.0, 5.0, 0.0, 7.25])
    rng = np.random.default_rng(3)
    specials = np.array([0.0, -0.0, 5.0, 10.0, 5.001, 10.001, -0.001, np.nan, np.inf,
                         -np.inf, 7.25, 2.5])
    for _ in range(400):
        k = int(rng.integers(1, 4))
        points = EdgePoints(rng.integers(-1, 5, k).astype(np.int32), rng.choice(specials, k))
        edge, offset = points.edge, points.offset  # offsets as snapped to the grid
        safe = np.clip(edge, 0, 3)
        want = bool(((edge >= 0) & (edge < 4) & (offset >= 0.0)
                     & (offset <= length[safe])).all())
        assert points_on_edges(points, length) is want
    wide = EdgePoints(np.array([2**32 + 1], dtype=np.int64), np.array([0.0]))  # type: ignore[arg-type]
    assert points_on_edges(wide, length) is False  # not cast onto edge 1
