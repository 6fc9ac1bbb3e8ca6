"""The road network as a networkx DiGraph whose listed points split their edges.

Independent of the project's distance code: the reference matcher (``conftest``) and the
verification tests (``test_algorithms``) measure distances on it with networkx.
"""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np

from roadpubsub.roadnet.network import RoadNetwork

__all__ = ["split_graph"]


def split_graph(network: RoadNetwork, on_edge: dict[int, list[tuple[float, object]]], *,
                node_mask: np.ndarray | None = None) -> nx.DiGraph:
    """Nodes ``("n", node)`` and one node per listed point; arcs weighted in metres.

    ``on_edge[e]`` lists (offset in metres, label) of the points on edge e. ``node_mask``
    keeps only edges whose both ends are selected. Places at one offset are one place,
    even on a one-way edge: a point at offset 0 stands on u, one at the full length on v.
    A zero-length edge keeps its two nodes apart (its points stand on u).
    """
    arcs: dict[tuple[object, object], float] = {}

    def add(a: object, b: object, w: float) -> None:
        if a != b and w < arcs.get((a, b), np.inf):
            arcs[(a, b)] = w

    for e in range(network.n_edges):
        u, v = int(network.edge_u[e]), int(network.edge_v[e])
        if node_mask is not None and not (node_mask[u] and node_mask[v]):
            continue
        length = float(network.edge_length[e])
        two_way = not (network.directed and bool(network.edge_oneway[e]))
        pts = sorted(on_edge.get(e, []), key=lambda p: p[0])
        chain: list[tuple[float, object]] = [(0.0, ("n", u)), *pts, (length, ("n", v))]
        for (o1, a), (o2, b) in itertools.pairwise(chain):
            add(a, b, o2 - o1)
            same_place = o2 == o1 and not (b == ("n", v) and length == 0.0)
            if two_way or same_place:
                add(b, a, o2 - o1)
    graph = nx.DiGraph()
    graph.add_weighted_edges_from((a, b, w) for (a, b), w in arcs.items())
    return graph
