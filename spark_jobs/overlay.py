"""The border overlay graph: border-to-border shortest paths without the interior nodes.

Vertices are the border vertices of the PMR cells (:mod:`roadpubsub.roadnet.cells`). For each cell c
and each ordered pair (b1, b2) of c's border vertices, a *shortcut* arc b1 -> b2 weighs the
shortest distance from b1 to b2 using only c's edges (a Dijkstra on c's subgraph,
:func:`cell_shortcuts`). Any path between two border vertices splits into maximal runs of
edges of one cell; each run starts and ends at border vertices of its cell (where it
enters from or leaves to another cell, or at the path's ends), so it is no shorter than
that cell's shortcut. Hence overlay distances equal network distances between border
vertices, and a multi-source search on the overlay from the border vertices of cell i
gives row i of the cell-pair table (:func:`overlay_cell_bounds`), the same as
:func:`roadpubsub.roadnet.cell_bounds.border_distance_row` on the whole network.

Floating point: a shortcut is a partial sum, so an overlay distance adds the same arc
lengths as the network search but grouped differently. Every length is a multiple of
2**-26 m (:mod:`roadpubsub.roadnet.lengths`) and sums of such values below 2**27 m are exact in any
grouping, so the tables are bit-identical (DIMACS and OSM alike).

This module is the pure-local reference of the overlay computation; the ``graphframes``
engine (:mod:`roadpubsub.spark_jobs.graphframes_engine`) computes the shortcuts with
:func:`cell_shortcuts` inside Spark tasks and the overlay search with GraphFrames Pregel.
Every search here is :class:`roadpubsub.roadnet.distance.NodeSearch`, the project's one Dijkstra.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from roadpubsub.roadnet.cell_bounds import CellBounds, reduce_border_distances
from roadpubsub.roadnet.cells import Cells
from roadpubsub.roadnet.distance import NodeSearch
from roadpubsub.roadnet.network import RoadNetwork

__all__ = [
    "Shortcuts",
    "border_rows",
    "cell_shortcuts",
    "cell_subnetwork",
    "clique_shortcuts",
    "edges_subnetwork",
    "lightest_arcs",
    "overlay_cell_bounds",
    "overlay_network",
    "overlay_shortcuts",
    "region_shortcuts",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Shortcuts = tuple[IntArray, IntArray, FloatArray]


def _bare_network(*, node_ids: IntArray, x: FloatArray, y: FloatArray, u: IntArray,
                  v: IntArray, length: FloatArray, oneway: npt.NDArray[np.bool_], crs: str,
                  directed: bool, name: str) -> RoadNetwork:
    """A RoadNetwork of given arrays with straight edge geometry (for searches only)."""
    m = int(length.size)
    gxy = np.empty((2 * m, 2), dtype=np.float64)
    gxy[0::2, 0], gxy[0::2, 1] = x[u], y[u]
    gxy[1::2, 0], gxy[1::2, 1] = x[v], y[v]
    zeros = np.zeros(node_ids.size)
    return RoadNetwork(
        node_ids=node_ids.astype(np.int64), node_lon=zeros, node_lat=zeros,
        node_x=x, node_y=y, edge_u=u.astype(np.int32), edge_v=v.astype(np.int32),
        edge_length=np.asarray(length, dtype=np.float64),
        edge_oneway=np.asarray(oneway, dtype=bool),
        geom_ptr=np.arange(0, 2 * m + 1, 2, dtype=np.int64), geom_xy=gxy, crs=crs,
        directed=directed, name=name)


def edges_subnetwork(network: RoadNetwork, edges: IntArray, *, name: str
                     ) -> tuple[RoadNetwork, IntArray]:
    """The subgraph of the given edges, compactly numbered: (sub, nodes), ``sub``'s node
    k being ``network``'s node ``nodes[k]`` (lengths, one-way flags and direction kept)."""
    e = np.asarray(edges, dtype=np.int64)
    nodes = np.unique(np.concatenate([network.edge_u[e], network.edge_v[e]]).astype(np.int64))
    u = np.searchsorted(nodes, network.edge_u[e])
    v = np.searchsorted(nodes, network.edge_v[e])
    sub = _bare_network(node_ids=nodes, x=network.node_x[nodes], y=network.node_y[nodes],
                        u=u, v=v, length=network.edge_length[e],
                        oneway=network.edge_oneway[e], crs=network.crs,
                        directed=network.directed, name=name)
    return sub, nodes


def cell_subnetwork(network: RoadNetwork, cells: Cells, cell: int
                    ) -> tuple[RoadNetwork, IntArray]:
    """The subgraph of one cell's edges, compactly numbered.

    Returns
    -------
    (sub, nodes)
        ``sub`` holds only the cell's edges (lengths in metres, one-way flags and
        direction as in ``network``); its node k is ``network``'s node ``nodes[k]``.
    """
    return edges_subnetwork(network, np.flatnonzero(cells.edge_cell == cell),
                            name=f"{network.name} cell {cell}")


def clique_shortcuts(network: RoadNetwork, edges: IntArray, border: IntArray, *,
                     name: str = "") -> Shortcuts:
    """Shortcut arcs (src, dst, metres) between the ``border`` nodes of a set of edges.

    The weight of b1 -> b2 is the shortest distance from b1 to b2 travelling only along
    ``edges`` (one Dijkstra per border node, forward arcs); unreachable pairs and
    b1 == b2 are left out. Each weight is the length of a real path, so adding such arcs
    to the overlay never lowers a distance below the network's.
    """
    if border.size < 2:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty.copy(), np.empty(0)
    sub, nodes = edges_subnetwork(network, edges, name=name or f"{network.name} part")
    return _clique(sub, nodes, border)


def _clique(sub: RoadNetwork, nodes: IntArray, border: IntArray) -> Shortcuts:
    """Border-to-border distances in ``sub`` (node k of sub is node ``nodes[k]``)."""
    local = np.searchsorted(nodes, border)
    search = NodeSearch(sub, reverse=False)
    src: list[IntArray] = []
    dst: list[IntArray] = []
    weight: list[FloatArray] = []
    for k in range(local.size):
        others = np.delete(local, k)
        res = search.run(local[k:k + 1], np.zeros(1), targets=others)
        d = res.dist[others]
        ok = np.isfinite(d)
        src.append(np.full(int(ok.sum()), border[k], dtype=np.int64))
        dst.append(np.delete(border, k)[ok].astype(np.int64))
        weight.append(d[ok].copy())
    return np.concatenate(src), np.concatenate(dst), np.concatenate(weight)


def region_shortcuts(network: RoadNetwork, cells: Cells, region: IntArray,
                     arcs: Shortcuts) -> Shortcuts:
    """Shortcut arcs between the border vertices of a region (a set of cells), from the
    shortcut arcs of its cells.

    The region's border vertices are the border vertices of its cells that also border
    a cell outside it. Their distances inside the region are searched on ``arcs`` (the
    cells' cliques, :func:`cell_shortcuts`, or any exact shortcuts inside the region),
    not on the road edges: by the overlay argument of the module docstring restricted to
    the region, the two are equal, and the clique graph is far smaller.
    """
    region = np.asarray(region, dtype=np.int64)
    inside = np.zeros(cells.n_cells, dtype=bool)
    inside[region] = True
    owner = np.repeat(np.arange(cells.n_cells), np.diff(cells.border_ptr))
    in_nodes = np.unique(cells.border_nodes[inside[owner]])
    out_nodes = np.unique(cells.border_nodes[~inside[owner]])
    border = np.intersect1d(in_nodes, out_nodes).astype(np.int64)
    src, dst, w = arcs
    if border.size < 2 or src.size == 0:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty.copy(), np.empty(0)
    nodes = np.unique(np.concatenate([src, dst, border])).astype(np.int64)
    sub = _bare_network(node_ids=nodes, x=network.node_x[nodes], y=network.node_y[nodes],
                        u=np.searchsorted(nodes, src), v=np.searchsorted(nodes, dst),
                        length=w, oneway=np.ones(w.size, dtype=bool), crs=network.crs,
                        directed=True, name=f"{network.name} region")
    return _clique(sub, nodes, border)


def cell_shortcuts(network: RoadNetwork, cells: Cells, cell: int) -> Shortcuts:
    """Shortcut arcs of one cell: (src, dst, metres) between its border vertices.

    ``src`` and ``dst`` are node indices of ``network``; the weight is the shortest
    distance from src to dst travelling only along the cell's edges (forward arcs).
    Unreachable pairs and src == dst are left out.
    """
    return clique_shortcuts(network, np.flatnonzero(cells.edge_cell == cell),
                            cells.border_of(cell), name=f"{network.name} cell {cell}")


def overlay_shortcuts(network: RoadNetwork, cells: Cells,
                      progress: Callable[[int], None] | None = None) -> Shortcuts:
    """All cells' shortcuts, keeping the lightest arc per (src, dst)."""
    parts = []
    for c in range(cells.n_cells):
        parts.append(cell_shortcuts(network, cells, c))
        if progress is not None:
            progress(1)
    src = np.concatenate([p[0] for p in parts])
    dst = np.concatenate([p[1] for p in parts])
    w = np.concatenate([p[2] for p in parts])
    return lightest_arcs(src, dst, w)


def lightest_arcs(src: IntArray, dst: IntArray, w: FloatArray) -> Shortcuts:
    """One arc per (src, dst): the lightest, sorted by (src, dst)."""
    order = np.lexsort((w, dst, src))
    src, dst, w = src[order], dst[order], w[order]
    first = np.ones(src.size, dtype=bool)
    first[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
    return src[first], dst[first], w[first]


def overlay_network(network: RoadNetwork, cells: Cells, shortcuts: Shortcuts
                    ) -> tuple[RoadNetwork, IntArray]:
    """The overlay as a directed network: (overlay, vertices).

    Overlay node k is ``network``'s border vertex ``vertices[k]``; every shortcut is a
    one-way arc of the overlay.
    """
    vertices = np.flatnonzero(cells.node_is_border).astype(np.int64)
    src, dst, w = shortcuts
    overlay = _bare_network(
        node_ids=vertices, x=network.node_x[vertices], y=network.node_y[vertices],
        u=np.searchsorted(vertices, src), v=np.searchsorted(vertices, dst), length=w,
        oneway=np.ones(w.size, dtype=bool), crs=network.crs, directed=True,
        name=f"{network.name} border overlay")
    return overlay, vertices


def border_rows(cells: Cells, d: FloatArray, cell: int, *, limit: float = np.inf
                ) -> tuple[FloatArray, FloatArray]:
    """Row ``cell`` of (D, D_far):
    :func:`roadpubsub.roadnet.cell_bounds.reduce_border_distances`."""
    return reduce_border_distances(cells, d, cell, limit=limit)


def overlay_cell_bounds(
    network: RoadNetwork,
    cells: Cells,
    *,
    limit: float = np.inf,
    shortcuts: Shortcuts | None = None,
    progress: Callable[[int], None] | None = None,
) -> CellBounds:
    """The cell-pair table computed on the border overlay, in this process.

    Same result as :func:`roadpubsub.roadnet.cell_bounds.compute_cell_bounds`, bit for bit (see the
    module docstring).

    Parameters
    ----------
    limit
        Search radius in metres, as in :func:`~roadpubsub.roadnet.cell_bounds.border_distance_row`.
    shortcuts
        Precomputed :func:`overlay_shortcuts` (computed here when omitted).
    progress
        Called with 1 after each row.
    """
    if shortcuts is None:
        shortcuts = overlay_shortcuts(network, cells)
    overlay, vertices = overlay_network(network, cells, shortcuts)
    search = NodeSearch(overlay, reverse=False)
    at_border = np.searchsorted(vertices, cells.border_nodes)
    n = cells.n_cells
    D = np.empty((n, n))
    D_far = np.empty((n, n))
    for i in range(n):
        seeds = np.searchsorted(vertices, cells.border_of(i))
        res = search.run(seeds, np.zeros(seeds.size), limit=limit)
        D[i], D_far[i] = border_rows(cells, res.dist[at_border], i, limit=limit)
        if progress is not None:
            progress(1)
    return CellBounds.from_rows(network, cells, D, D_far)
