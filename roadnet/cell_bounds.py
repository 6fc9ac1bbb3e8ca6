"""Cell-pair distance bounds (paper Sec. IV, component (c); Eqs. 3-6), made provably safe.

For cells ci, cj the table holds

* ``dE_min[i, j]``, ``dE_max[i, j]``: Euclidean min and max distance between the regions;
* ``D[i, j]``: the least network distance from a border vertex of ci to one of cj (one
  multi-source Dijkstra per cell, :func:`border_distance_row`, the function the Spark job
  distributes). ``D[i, i] = 0``.
* ``eta_minus[i, j]`` (Eq. 3): the paper takes the minimum dN/dE ratio over *sampled*
  point pairs, which can over-estimate the true minimum and lose deliveries. Ours is
  ``max(kappa, D[i, j] / dE_max[i, j])``: every path from ci to cj is at least D long and
  spans at most dE_max, and kappa bounds the ratio for every pair of edge points, so
  dN(p, q) >= eta_minus * dE(p, q) holds for all p in ci, q in cj.
* ``eta_plus[i, j]`` (Eq. 4): an estimate for analysis only, never used to prune.

Per node, ``din_out`` is the network distance to the nearest border vertex and ``din_in``
the distance from it (equal when undirected). A path from an interior node must reach a
border vertex of its own cell before any other cell's, so the nearest border vertex of any
cell is one of its own. Together they give the additive bound used by the pruning layer:
dN(s, m) >= din_out(s) + D[cs, cm] + din_in(m) for s, m in different cells.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numba
import numpy as np
import numpy.typing as npt

from roadpubsub.roadnet.cells import Cells
from roadpubsub.roadnet.chains import ChainGraph, ChainTables, build_chain_graph, chain_position
from roadpubsub.roadnet.distance import NodeSearch, entry_costs_at, exit_costs_at
from roadpubsub.roadnet.locations import (
    EdgeGeometry,
    EdgePoints,
    check_edge_ids,
    edge_geometry,
    xy_on_edge,
)
from roadpubsub.roadnet.network import RoadNetwork

__all__ = [
    "CellBounds",
    "PointColumns",
    "PointTables",
    "bbox_distance_tables",
    "border_distance_row",
    "cell_graph",
    "compute_cell_bounds",
    "node_border_distances",
    "point_facts",
    "point_tables",
    "reduce_border_distances",
]

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class CellBounds:
    """The cell-pair bound table and per-node border distances (metres)."""

    kappa: float
    D: FloatArray
    D_far: FloatArray
    dE_min: FloatArray
    dE_max: FloatArray
    eta_minus: FloatArray
    eta_plus: FloatArray
    din_out: FloatArray
    din_in: FloatArray

    @property
    def n_cells(self) -> int:
        """Number of cells."""
        return int(self.D.shape[0])

    def to_arrays(self) -> dict[str, npt.NDArray[np.generic]]:
        """Named arrays (for saving)."""
        return {"kappa": np.array(self.kappa), "D": self.D, "D_far": self.D_far,
                "dE_min": self.dE_min, "dE_max": self.dE_max, "eta_minus": self.eta_minus,
                "eta_plus": self.eta_plus, "din_out": self.din_out, "din_in": self.din_in}

    @classmethod
    def from_arrays(cls, arrays: dict[str, npt.NDArray[np.generic]]) -> CellBounds:
        """Inverse of :meth:`to_arrays`."""
        fields = ("D", "D_far", "dE_min", "dE_max", "eta_minus", "eta_plus", "din_out",
                  "din_in")
        return cls(kappa=float(arrays["kappa"]),
                   **{k: np.asarray(arrays[k], dtype=np.float64) for k in fields})

    @classmethod
    def from_rows(
        cls, network: RoadNetwork, cells: Cells, D: FloatArray, D_far: FloatArray
    ) -> CellBounds:
        """Assemble the table from the rows of :func:`border_distance_row` (one per cell)."""
        dE_min, dE_max = bbox_distance_tables(cells.bbox)
        kappa = network.kappa
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(np.isfinite(D) & (dE_max > 0), D / dE_max, 0.0)
            centre = 0.5 * (cells.bbox[:, :2] + cells.bbox[:, 2:])
            centre_dist = np.hypot(*(centre[:, None, :] - centre[None, :, :]).transpose(2, 0, 1))
            far_ratio = np.where(np.isfinite(D_far), D_far / np.maximum(centre_dist, 1.0), 0.0)
        eta_minus = np.maximum(kappa, ratio)
        np.fill_diagonal(eta_minus, kappa)
        eta_plus = np.maximum(eta_minus, far_ratio)
        din_out, din_in = node_border_distances(network, cells)
        return cls(kappa=kappa, D=D, D_far=D_far, dE_min=dE_min, dE_max=dE_max,
                   eta_minus=eta_minus, eta_plus=eta_plus, din_out=din_out, din_in=din_in)


def bbox_distance_tables(bbox: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Euclidean min and max distance (metres) between every pair of boxes, (c, c) each."""
    x0, y0, x1, y1 = (bbox[:, k] for k in range(4))
    gap_x = np.maximum(0.0, np.maximum(x0[:, None] - x1[None, :], x0[None, :] - x1[:, None]))
    gap_y = np.maximum(0.0, np.maximum(y0[:, None] - y1[None, :], y0[None, :] - y1[:, None]))
    span_x = np.maximum(x1[:, None] - x0[None, :], x1[None, :] - x0[:, None])
    span_y = np.maximum(y1[:, None] - y0[None, :], y1[None, :] - y0[:, None])
    return np.hypot(gap_x, gap_y), np.hypot(span_x, span_y)


def border_distance_row(
    network: RoadNetwork,
    cells: Cells,
    cell: int,
    *,
    search: NodeSearch | None = None,
    limit: float = np.inf,
) -> tuple[FloatArray, FloatArray]:
    """One row of the table: least and largest border-to-border distance from ``cell``.

    One multi-source Dijkstra from all border vertices of ``cell`` (forward arcs), on the
    cell graph (:func:`cell_graph`) unless another ``search`` is given.

    Parameters
    ----------
    limit
        Stop the search at this radius (metres); unreached cells get ``D = limit``, which is
        still a lower bound.

    Returns
    -------
    (D_row, D_far_row)
        ``D_row[j]``: least distance to a border vertex of cell j (inf if unreachable, 0 for
        ``j == cell``). ``D_far_row[j]``: the largest such distance over j's border vertices
        that were reached (for the eta+ estimate; nan if none).
    """
    search = search or NodeSearch(cell_graph(network, cells), reverse=False)
    border = cells.border_of(cell)
    if border.size == 0:
        return reduce_border_distances(cells, np.empty(0), cell, limit=limit)
    graph = search.network
    res = search.run(graph.from_network_nodes(border), np.zeros(border.size), limit=limit)
    d = res.dist[graph.from_network_nodes(cells.border_nodes)]
    return reduce_border_distances(cells, d, cell, limit=limit)


def reduce_border_distances(
    cells: Cells, d: FloatArray, cell: int, *, limit: float = np.inf
) -> tuple[FloatArray, FloatArray]:
    """Row ``cell`` of (D, D_far) from distances at ``cells.border_nodes`` (metres).

    ``d[k]`` is the distance from ``cell``'s border vertices to ``cells.border_nodes[k]``
    (inf if unreached). Per cell: the least and the largest reached distance over its
    border vertices. With a finite ``limit``, farther nodes count as unreached and D is
    capped at the limit (still a lower bound). Shared by every engine that computes rows.
    """
    n_cells = cells.n_cells
    if cells.border_of(cell).size == 0:
        row = np.full(n_cells, np.inf)
        row[cell] = 0.0
        return row, np.full(n_cells, np.nan)
    d = np.where(d <= limit, d, np.inf)
    has = np.diff(cells.border_ptr) > 0
    starts = cells.border_ptr[:-1][has]
    row = np.full(n_cells, np.inf)
    row[has] = np.minimum.reduceat(d, starts)
    far = np.full(n_cells, np.nan)
    far_vals = np.maximum.reduceat(np.where(np.isfinite(d), d, -np.inf), starts)
    far[has] = np.where(np.isfinite(far_vals), far_vals, np.nan)
    if np.isfinite(limit):
        row = np.minimum(row, limit)
    row[cell] = 0.0
    return row, far


class PointColumns(NamedTuple):
    """What :func:`point_facts` writes per point: projected x, y (metres), cell, din out
    of and into the point's cell (metres), chain and position along it (metres)."""

    x: FloatArray
    y: FloatArray
    cell: npt.NDArray[np.int32]
    din_out: FloatArray
    din_in: FloatArray
    chain: npt.NDArray[np.int32]
    chain_offset: FloatArray


class PointTables(NamedTuple):
    """What :func:`point_facts` reads: the polylines, the cell graph's chains, each
    edge's cell and each node's border distances (metres)."""

    geometry: EdgeGeometry
    chains: ChainTables
    edge_cell: npt.NDArray[np.int32]
    din_out: FloatArray
    din_in: FloatArray


@numba.njit(cache=True, nogil=True)
def _point_facts_kernel(  # pragma: no cover - compiled
    edge: npt.NDArray[np.int32], offset: FloatArray, t: PointTables, out: PointColumns
) -> None:
    c = t.chains
    for i in range(edge.size):
        e, o = edge[i], offset[i]
        out.x[i], out.y[i] = xy_on_edge(t.geometry, e, o)
        out.cell[i] = t.edge_cell[e]
        chain, pos = chain_position(c, e, o)
        out.chain[i], out.chain_offset[i] = chain, pos
        # din_out of a point: the cheaper way out to a border vertex, through either end
        # of its chain (no border vertex lies inside a chain); din_in the same inwards.
        a, ca, b, cb = exit_costs_at(chain, pos, c.chain_u, c.chain_v, c.chain_length,
                                     c.chain_twoway)
        out.din_out[i] = min(ca + t.din_out[c.junction_node[a]],
                             cb + t.din_out[c.junction_node[b]])
        a, ca, b, cb = entry_costs_at(chain, pos, c.chain_u, c.chain_v, c.chain_length,
                                      c.chain_twoway)
        out.din_in[i] = min(t.din_in[c.junction_node[a]] + ca,
                            t.din_in[c.junction_node[b]] + cb)


def point_tables(graph: ChainGraph, cells: Cells, bounds: CellBounds) -> PointTables:
    """What :func:`point_facts` reads of a network's cells and bounds (build it once).

    ``graph`` must be ``cell_graph(graph.network, cells)``: its junctions include every
    border vertex, which the din of a point inside a chain relies on.
    """
    return PointTables(edge_geometry(graph.network), graph.tables(), cells.edge_cell,
                       bounds.din_out, bounds.din_in)


def point_facts(tables: PointTables, points: EdgePoints) -> PointColumns:
    """Position, cell, border distances (din, metres) and chain position of edge points,
    in one compiled pass (``tables`` from :func:`point_tables`).

    Raises
    ------
    InvalidLocationError
        An edge id outside the network (offsets are the caller's to check).
    """
    n = len(points)
    edge = np.ascontiguousarray(points.edge, dtype=np.int32)
    check_edge_ids(edge, tables.edge_cell.size)
    out = PointColumns(np.empty(n), np.empty(n), np.empty(n, dtype=np.int32), np.empty(n),
                       np.empty(n), np.empty(n, dtype=np.int32), np.empty(n))
    _point_facts_kernel(edge, np.ascontiguousarray(points.offset, dtype=np.float64), tables,
                        out)
    return out


def cell_graph(network: RoadNetwork, cells: Cells) -> ChainGraph:
    """The chain graph whose junctions include every border vertex (cached on the network).

    Searches between border vertices then only settle junctions, and no border vertex ever
    lies inside a chain.
    """
    # Keyed by the border set itself: equal borders give equal graphs, and object ids
    # can be reused.
    key = "cell_bounds.cell_graph:" + hashlib.sha1(cells.node_is_border.tobytes()).hexdigest()
    return network.memo(key, lambda: build_chain_graph(network, junctions=cells.node_is_border))


def node_border_distances(network: RoadNetwork, cells: Cells) -> tuple[FloatArray, FloatArray]:
    """(din_out, din_in) per node: distance to / from the nearest border vertex (metres).

    Searched on the cell graph, then filled in for the nodes inside chains from the chain's
    two junctions (no border vertex lies inside a chain).
    """
    graph = cell_graph(network, cells)
    border = graph.from_network_nodes(np.flatnonzero(cells.node_is_border))
    zeros = np.zeros(border.size)
    out = _fill_chain_interiors(
        graph, NodeSearch(graph, reverse=True).run(border, zeros).dist.copy(), leaving=True)
    if not network.directed:
        return out, out
    inn = _fill_chain_interiors(
        graph, NodeSearch(graph, reverse=False).run(border, zeros).dist.copy(), leaving=False)
    return out, inn


def _fill_chain_interiors(graph: ChainGraph, dist: FloatArray, *, leaving: bool) -> FloatArray:
    """Distances of interior chain nodes from those of the junctions at the chain's ends.

    ``dist`` is indexed by junction number; the result by network node.
    ``leaving=True``: ``dist`` is node -> border; an interior node at position p leaves by
    the chain's end (cost length - p) or, on a two-way chain, by its start (cost p).
    ``leaving=False``: ``dist`` is border -> node, entered the opposite way.
    """
    net = graph.network
    c = graph.edge_chain
    length = graph.edge_length[c]
    # Position of each edge's u and v along its chain.
    pos_u = np.where(graph.edge_forward, graph.edge_start, graph.edge_start + net.edge_length)
    pos_v = np.where(graph.edge_forward, graph.edge_start + net.edge_length, graph.edge_start)
    start = dist[graph.edge_u[c]]
    end = dist[graph.edge_v[c]]
    two = graph.edge_twoway[c]
    out = np.full(net.n_nodes, np.inf)
    out[graph.junction_node] = dist
    for node, pos in ((net.edge_u, pos_u), (net.edge_v, pos_v)):
        if leaving:
            back = two | (pos == 0.0)
            val = np.minimum(end + (length - pos), np.where(back, start + pos, np.inf))
        else:
            back = two | ((pos == length) & (length > 0.0))
            val = np.minimum(start + pos, np.where(back, end + (length - pos), np.inf))
        inner = ~graph.junction[node]
        out[node[inner]] = val[inner]
    return out


def compute_cell_bounds(
    network: RoadNetwork,
    cells: Cells,
    *,
    limit: float = np.inf,
    progress: Callable[[int], None] | None = None,
) -> CellBounds:
    """The full table, one :func:`border_distance_row` per cell, in this process.

    ``progress`` is called with 1 after each row (e.g. ``tqdm.update``).
    """
    search = NodeSearch(cell_graph(network, cells), reverse=False)
    n = cells.n_cells
    D = np.empty((n, n))
    D_far = np.empty((n, n))
    for i in range(n):
        D[i], D_far[i] = border_distance_row(network, cells, i, search=search, limit=limit)
        if progress is not None:
            progress(1)
    return CellBounds.from_rows(network, cells, D, D_far)
