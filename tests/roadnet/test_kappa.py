"""kappa, the Euclidean lower-bound factor: dN(p, q) >= kappa * dE(p, q) for edge points."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyproj import Transformer

from roadpubsub.roadnet.distance import NodeSearch, distances_from_point, network_distance
from roadpubsub.roadnet.locations import EdgePoints, point_xy
from roadpubsub.roadnet.network import RoadNetwork

UTM33 = "EPSG:32633"
X0, Y0 = 290_000.0, 4_640_000.0


def check_bound(net: RoadNetwork, p: EdgePoints, qs: EdgePoints, search: NodeSearch,
                *, limit: float = np.inf) -> np.ndarray:
    """Assert the bound from p to every q; returns the network distances."""
    d_net = distances_from_point(net, p, qs, limit=limit, search=search)
    d_euc = np.hypot(*(point_xy(net, qs) - point_xy(net, p)).T)
    slack = d_net - net.kappa * d_euc
    assert (slack >= -1e-6).all(), (net.name, p, qs[np.flatnonzero(slack < -1e-6)])
    return d_net


@pytest.fixture(scope="module")
def searches(real_networks: Callable[[str], RoadNetwork]
             ) -> Callable[[str, bool], tuple[RoadNetwork, NodeSearch]]:
    cache: dict[tuple[str, bool], tuple[RoadNetwork, NodeSearch]] = {}

    def get(name: str, directed: bool) -> tuple[RoadNetwork, NodeSearch]:
        if (name, directed) not in cache:
            net = real_networks(name).with_direction(directed=directed)
            cache[(name, directed)] = (net, NodeSearch(net))
        return cache[(name, directed)]
    return get


@pytest.mark.parametrize("directed", [False, True], ids=["undirected", "directed"])
@pytest.mark.parametrize("name", ["andorra", "california", "west_oakland", "aguascalientes",
                                  "helsinki", "rome"])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), at_node=st.booleans())
def test_kappa_bound_on_real_networks(
    searches: Callable[[str, bool], tuple[RoadNetwork, NodeSearch]],
    edge_points: Callable[..., EdgePoints], name: str, directed: bool, seed: int,
    at_node: bool,
) -> None:
    """One source, 200 random targets (some on the source's own edge) per example."""
    net, search = searches(name, directed)
    rng = np.random.default_rng(seed)
    p = edge_points(net, rng, 1)
    if at_node:
        p = EdgePoints.of(p.edge, [0.0])
    qs = edge_points(net, rng, 200)
    own = EdgePoints.of(np.repeat(p.edge, 5), rng.random(5) * net.edge_length[p.edge[0]])
    qs = EdgePoints.of(np.r_[qs.edge, own.edge], np.r_[qs.offset, own.offset])
    # Rome is paper scale: bound the search (unreached targets are inf, trivially fine).
    d_net = check_bound(net, p, qs, search, limit=20_000.0 if name == "rome" else np.inf)
    assert np.isfinite(d_net[-5:]).all() or directed


@pytest.mark.parametrize("name", ["andorra", "california", "west_oakland", "aguascalientes",
                                  "helsinki", "rome"])
def test_kappa_definition(real_networks: Callable[[str], RoadNetwork], name: str) -> None:
    net = real_networks(name)
    seg = np.hypot(*np.diff(net.geom_xy, axis=0).T)
    poly = np.array([seg[a:b - 1].sum() for a, b in zip(net.geom_ptr[:-1], net.geom_ptr[1:],
                                                          strict=True)])
    ok = poly > 0
    assert net.kappa == pytest.approx(np.min(net.edge_length[ok] / poly[ok]), rel=1e-9)
    # Lengths in metres on a metric projection: close to 1, never far above it.
    assert 0.9 < net.kappa < 1.01


def _metric(nodes: dict[int, tuple[float, float]],
            edges: list[tuple[int, int, float, list[tuple[float, float]]]]) -> RoadNetwork:
    to_lonlat = Transformer.from_crs(UTM33, "EPSG:4326", always_xy=True)
    ids = sorted(nodes)
    lon, lat = to_lonlat.transform([X0 + nodes[i][0] for i in ids],
                                   [Y0 + nodes[i][1] for i in ids])
    lines = [[nodes[u], *via, nodes[v]] for u, v, _, via in edges]
    pts = np.array([p for line in lines for p in line])
    glon, glat = to_lonlat.transform(X0 + pts[:, 0], Y0 + pts[:, 1])
    return RoadNetwork.from_arrays(
        node_ids=ids, node_lon=lon, node_lat=lat, edge_u_ids=[e[0] for e in edges],
        edge_v_ids=[e[1] for e in edges], edge_length=[e[2] for e in edges],
        geom_ptr=np.cumsum([0] + [len(line) for line in lines]),
        geom_lonlat=np.column_stack([glon, glat]), crs=UTM33)


def test_curved_edge_needs_the_polyline_not_the_chord() -> None:
    """A U-shaped road whose ends are 10 m apart but which runs 1 km out and back.

    Its length/chord ratio is 201, yet its middle is 1005 m of road from node 1 and about
    1000 m away as the crow flies: a factor built from chords would claim dN >= 201 km
    there. kappa uses the polyline (2010 m), so it is 1 and the bound holds.
    """
    net = _metric({1: (0.0, 0.0), 2: (10.0, 0.0)},
                  [(1, 2, 2010.0, [(0.0, 1000.0), (10.0, 1000.0)])])
    chord_ratio = 2010.0 / 10.0
    assert net.kappa == pytest.approx(1.0, rel=1e-9)
    middle = EdgePoints.of([0], [1005.0])
    node1 = EdgePoints.of([0], [0.0])
    np.testing.assert_allclose(point_xy(net, middle), [[X0 + 5.0, Y0 + 1000.0]], atol=1e-6)
    d_net = network_distance(net, middle, node1)
    d_euc = float(np.hypot(*(point_xy(net, middle) - point_xy(net, node1))[0]))
    assert d_net == pytest.approx(1005.0)
    assert d_euc == pytest.approx(np.hypot(5.0, 1000.0))
    assert d_net >= net.kappa * d_euc - 1e-6
    assert d_net < chord_ratio * d_euc  # the chord-based factor would be unsafe
    # The ends themselves: 10 m apart, 2010 m of road either way round the U.
    assert network_distance(net, node1, EdgePoints.of([0], [2010.0])) == pytest.approx(2010.0)


def test_edge_shorter_than_its_drawing_lowers_kappa() -> None:
    """Lengths below the drawn polyline (rounded or approximate data) shrink kappa, and the
    bound still holds everywhere along such an edge."""
    net = _metric({1: (0.0, 0.0), 2: (100.0, 0.0), 3: (100.0, 100.0)},
                  [(1, 2, 50.0, []), (2, 3, 100.0, [])])
    assert net.kappa == pytest.approx(0.5, rel=1e-9)
    search = NodeSearch(net)
    offsets = np.linspace(0, 1, 11)
    qs = EdgePoints.of(np.r_[np.zeros(11), np.ones(11)],
                       np.r_[offsets * 50.0, offsets * 100.0])
    for i in range(len(qs)):
        check_bound(net, qs[i], qs, search)


def test_zero_length_edges_do_not_break_kappa() -> None:
    net = _metric({1: (0.0, 0.0), 2: (0.0, 0.0), 3: (30.0, 40.0)},
                  [(1, 2, 0.0, []), (2, 3, 50.0, [])])
    assert net.kappa == pytest.approx(1.0, rel=1e-9)
