"""Chain graphs give the same distances as the raw graph, bit for bit, with far fewer junctions.

Lengths and offsets lie on the grid of :mod:`roadpubsub.roadnet.lengths`, so adding whole chains or
edge by edge must give identical floats; these tests compare with ``==``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roadpubsub.roadnet.chains import build_chain_graph
from roadpubsub.roadnet.distance import NodeSearch, distances_from_point, distances_to_point
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork


def _points(network: RoadNetwork, rng: np.random.Generator, k: int) -> EdgePoints:
    e = rng.integers(0, network.n_edges, k)
    frac = np.where(rng.random(k) < 0.2, rng.integers(0, 2, k), rng.random(k))
    return EdgePoints.of(e, frac * network.edge_length[e])


def _compare(network: RoadNetwork, *, sources: int, limit: float, seed: int = 0) -> None:
    graph = build_chain_graph(network)
    rng = np.random.default_rng(seed)
    pts = _points(network, rng, 400)
    raw_search = NodeSearch(network, reverse=True)
    chain_search = NodeSearch(graph, reverse=True)
    for i in range(sources):
        target = pts[np.array([i])]
        want = distances_to_point(network, target, pts, limit=limit, search=raw_search)
        got = distances_to_point(graph, target, pts, limit=limit, search=chain_search)
        np.testing.assert_array_equal(got, want)
        fwd = distances_from_point(graph, target, pts, limit=limit)
        np.testing.assert_array_equal(fwd, distances_from_point(network, target, pts,
                                                                limit=limit))


def test_rome_chains_contract_three_quarters_of_the_nodes(rome) -> None:
    graph = build_chain_graph(rome)
    assert graph.junction.sum() < 0.3 * rome.n_nodes
    # Every edge's length is accounted for exactly once along its chain.
    per_chain = np.bincount(graph.edge_chain, weights=rome.edge_length,
                            minlength=graph.n_chains)
    np.testing.assert_array_equal(per_chain, graph.edge_length)
    _compare(rome, sources=15, limit=4000.0)


@pytest.mark.parametrize("directed", [False, True])
def test_andorra_chains_respect_one_way_streets(andorra, directed) -> None:
    _compare(andorra.with_direction(directed=directed), sources=25, limit=np.inf, seed=3)


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 12), directed=st.booleans())
def test_tiny_graphs_with_rings_loops_and_parallel_edges(seed, n, directed) -> None:
    rng = np.random.default_rng(seed)
    # A path (many degree-2 nodes), plus random extra edges, self-loops and a separate ring.
    u = list(range(n - 1)) + list(rng.integers(0, n, 3))
    v = list(range(1, n)) + list(rng.integers(0, n, 3))
    ring = [n, n + 1, n + 2]
    u += ring
    v += [n + 1, n + 2, n]
    ids = np.arange(n + 3)
    network = RoadNetwork.from_arrays(
        node_ids=ids, node_lon=rng.uniform(0, 0.01, ids.size),
        node_lat=rng.uniform(0, 0.01, ids.size), edge_u_ids=u, edge_v_ids=v,
        edge_length=rng.uniform(0, 300, len(u)), edge_oneway=rng.random(len(u)) < 0.4,
        directed=directed)
    _compare(network, sources=6, limit=np.inf, seed=seed)
