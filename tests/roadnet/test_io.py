"""Loading networks: DIMACS, Li et al., .npz round trips and the suffix dispatch."""

from __future__ import annotations

import gzip
import time
from pathlib import Path

import numpy as np
import pytest

from roadpubsub.roadnet.errors import NetworkFormatError, UnsupportedNetworkFormatError
from roadpubsub.roadnet.io import SUPPORTED_SUFFIXES, load_network
from roadpubsub.roadnet.network import RoadNetwork


def assert_same_network(a: RoadNetwork, b: RoadNetwork) -> None:
    for field in ("node_ids", "node_lon", "node_lat", "node_x", "node_y", "edge_u", "edge_v",
                  "edge_length", "edge_oneway", "geom_ptr", "geom_xy"):
        left, right = getattr(a, field), getattr(b, field)
        assert left.dtype == right.dtype, field
        np.testing.assert_array_equal(left, right, err_msg=field)
    assert (a.crs, a.directed, a.name) == (b.crs, b.directed, b.name)


# ----------------------------------------------------------------------------- Rome
def test_rome_counts(rome: RoadNetwork) -> None:
    assert rome.n_nodes == 234_496
    assert rome.n_edges == 258_193
    assert rome.name == "rome.gr.gz"
    assert not rome.directed
    # Every arc of the file has its twin: no one-way segments.
    assert int(rome.edge_oneway.sum()) == 0
    count, labels = rome.components()
    assert rome.n_nodes - int(np.bincount(labels).max()) == 2_946
    assert count > 1
    assert rome.crs == "EPSG:32633"  # UTM zone of Rome
    west, south, east, north = rome.extent_lonlat()
    assert 12.0 < west < 12.5 < east < 13.0
    assert 41.5 < south < 41.9 < north < 42.3
    # Arc weights are whole metres, at least 1.
    assert rome.edge_length.min() >= 1
    np.testing.assert_array_equal(rome.edge_length, np.round(rome.edge_length))


def test_rome_npz_round_trip(rome: RoadNetwork, tmp_path: Path) -> None:
    saved = rome.save(tmp_path / "rome")  # the suffix is added
    assert saved.name == "rome.npz"
    start = time.perf_counter()
    again = load_network(saved)
    elapsed = time.perf_counter() - start
    assert_same_network(rome, again)
    assert elapsed < 10.0  # loose: a reload is meant to take well under 2 s
    # No temporary file is left behind by the atomic write.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rome.npz"]


def test_rome_directed_view(rome: RoadNetwork) -> None:
    directed = rome.with_direction(directed=True)
    assert directed.directed and directed.n_edges == rome.n_edges
    assert rome.with_direction(directed=False) is rome


# ----------------------------------------------------------------------------- Li et al.
def test_california_counts(california: RoadNetwork) -> None:
    assert california.n_nodes == 21_048
    assert california.n_edges == 21_693
    assert not california.edge_oneway.any()
    # Lengths were recomputed in metres from degrees: California roads are tens of km
    # long in total per thousand edges, never degrees-sized.
    assert 1_000 < california.total_length_m / 1000 < 1_000_000
    assert california.edge_length.max() > 1.0
    west, south, east, north = california.extent_lonlat()
    assert -125 < west < east < -113 and 32 < south < north < 43


# ----------------------------------------------------------------------------- DIMACS
def _write_dimacs(tmp_path: Path, arcs: list[tuple[int, int, int]],
                  nodes: list[tuple[int, int, int]], *, gz: bool = False) -> Path:
    gr = f"c tiny\np sp {len(nodes)} {len(arcs)}\n" + "".join(
        f"a {u} {v} {w}\n" for u, v, w in arcs)
    co = f"c tiny\np aux sp co {len(nodes)}\n" + "".join(
        f"v {i} {x} {y}\n" for i, x, y in nodes)
    if gz:
        path = tmp_path / "tiny.gr.gz"
        path.write_bytes(gzip.compress(gr.encode()))
        (tmp_path / "tiny.co.gz").write_bytes(gzip.compress(co.encode()))
    else:
        path = tmp_path / "tiny.gr"
        path.write_text(gr)
        (tmp_path / "tiny.co").write_text(co)
    return path


NODES = [(1, 12_000_000, 41_000_000), (2, 12_001_000, 41_000_000),
         (3, 12_002_000, 41_000_000), (4, 12_002_000, 41_001_000)]


@pytest.mark.parametrize("gz", [False, True])
def test_dimacs_pairs_twin_arcs(tmp_path: Path, gz: bool) -> None:
    arcs = [(1, 2, 84), (2, 1, 84),     # two-way
            (2, 3, 90),                 # one-way 2 -> 3
            (3, 4, 111), (4, 3, 120),   # different weights: two one-way edges
            (1, 2, 84)]                 # a parallel one-way duplicate
    net = load_network(_write_dimacs(tmp_path, arcs, NODES, gz=gz))
    assert net.n_nodes == 4
    edges = sorted(zip(net.node_ids[net.edge_u].tolist(), net.node_ids[net.edge_v].tolist(),
                       net.edge_length.tolist(), net.edge_oneway.tolist(), strict=True))
    assert edges == [(1, 2, 84.0, False), (1, 2, 84.0, True), (2, 3, 90.0, True),
                     (3, 4, 111.0, True), (4, 3, 120.0, True)]


def test_dimacs_missing_companion(tmp_path: Path) -> None:
    path = _write_dimacs(tmp_path, [(1, 2, 5)], NODES)
    (tmp_path / "tiny.co").unlink()
    with pytest.raises(FileNotFoundError, match=r"tiny\.co"):
        load_network(path)


def test_dimacs_malformed(tmp_path: Path) -> None:
    path = _write_dimacs(tmp_path, [(1, 2, 5)], NODES)
    path.write_text("p sp 4 1\na 1 two 5\n")
    with pytest.raises(NetworkFormatError, match=r"tiny\.gr"):
        load_network(path)
    path.write_text("c nothing here\n")
    with pytest.raises(NetworkFormatError, match="no 'a' lines"):
        load_network(path)


def test_dimacs_unknown_node(tmp_path: Path) -> None:
    path = _write_dimacs(tmp_path, [(1, 9, 5)], NODES)
    with pytest.raises(NetworkFormatError, match="unknown nodes"):
        load_network(path)


# ----------------------------------------------------------------------------- Li format
def test_li_tiny(tmp_path: Path) -> None:
    (tmp_path / "t.cnode").write_text("0 -122.0 37.0\n1 -122.001 37.0\n2 -122.001 37.001\n")
    (tmp_path / "t.cedge").write_text("0 0 1 0.001\n1 1 2 0.001\n")
    net = load_network(tmp_path / "t.cnode")
    assert (net.n_nodes, net.n_edges) == (3, 2)
    # 0.001 degree of longitude at 37 N is about 88.8 m; of latitude about 111.2 m.
    np.testing.assert_allclose(sorted(net.edge_length), [88.8, 111.2], atol=0.2)


def test_li_malformed(tmp_path: Path) -> None:
    (tmp_path / "t.cnode").write_text("0 -122.0 37.0\n1 oops 37.0\n")
    (tmp_path / "t.cedge").write_text("0 0 1 0.001\n")
    with pytest.raises(NetworkFormatError, match=r"t\.cnode"):
        load_network(tmp_path / "t.cnode")


# ----------------------------------------------------------------------------- dispatch
def test_unsupported_suffix(tmp_path: Path) -> None:
    path = tmp_path / "roads.shp"
    path.write_text("x")
    with pytest.raises(UnsupportedNetworkFormatError, match=r"\.shp"):
        load_network(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"nowhere\.gr"):
        load_network(tmp_path / "nowhere.gr")


def test_every_suffix_is_dispatched() -> None:
    assert {".npz", ".gr", ".gr.gz", ".cnode", ".osm", ".osm.bz2", ".xml", ".osm.pbf", ".pbf",
            ".graphml"} == set(SUPPORTED_SUFFIXES)


def test_directed_flag_applies_to_every_reader(tmp_path: Path) -> None:
    path = _write_dimacs(tmp_path, [(1, 2, 84), (2, 3, 90)], NODES)
    assert load_network(path, directed=True).directed
    saved = load_network(path).save(tmp_path / "t.npz")
    assert load_network(saved, directed=True).directed
    assert not load_network(saved).directed


def test_npz_bad_version(tmp_path: Path) -> None:
    path = _write_dimacs(tmp_path, [(1, 2, 84)], NODES)
    saved = load_network(path).save(tmp_path / "t.npz")
    with np.load(saved) as data:
        arrays = {k: data[k] for k in data.files}
    arrays["meta"] = np.array('{"version": 999, "crs": "EPSG:32633", "directed": false, '
                              '"name": "x"}')
    np.savez(saved, **arrays)
    with pytest.raises(NetworkFormatError, match="version"):
        load_network(saved)


def test_load_network_takes_an_osmnx_graph(shared) -> None:
    """The design card loads road graphs through osmnx: its graph objects are accepted."""
    import osmnx as ox

    from roadpubsub.roadnet.osm import from_osmnx_graph

    graph = ox.graph_from_xml(shared("osm/West-Oakland.osm.bz2"))
    got = load_network(graph)
    want = from_osmnx_graph(graph)
    assert got.n_edges == want.n_edges > 0
    np.testing.assert_array_equal(got.edge_length, want.edge_length)
    assert load_network(graph, directed=True).directed
    with pytest.raises(TypeError, match="osmnx MultiDiGraph"):
        load_network(42)  # type: ignore[arg-type]
