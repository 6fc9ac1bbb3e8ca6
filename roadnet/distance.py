"""Exact network distances between edge points: one Dijkstra kernel for the whole project.

An edge point p = (edge e, offset o metres from e's first node u) is left towards v at cost
``length - o`` and, where e may be travelled from v to u, towards u at cost ``o`` (its *exit*
costs); it is reached from u at cost ``o`` and, on a two-way edge, from v at cost
``length - o`` (its *entry* costs). A point-to-point distance is the best of a node path
between an exit and an entry, or the direct run along a shared edge.

Every matcher, the cell-bound precompute and the Spark jobs call :class:`NodeSearch`, so the
same floating-point sums give the same distances everywhere: a node's settled distance is the
minimum over its settled predecessors and does not depend on where a search stops.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import numpy.typing as npt

from roadnet.locations import EdgePoints
from roadnet.network import Adjacency, RoadNetwork

__all__ = [
    "NodeSearch",
    "SearchResult",
    "distances_from_point",
    "distances_to_point",
    "entry_costs",
    "exit_costs",
    "network_distance",
    "point_distances_from_nodes",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@numba.njit(cache=True, nogil=True)
def _dijkstra(  # pragma: no cover - compiled
    indptr: IntArray,
    indices: npt.NDArray[np.int32],
    weights: FloatArray,
    seed_nodes: IntArray,
    seed_dist: FloatArray,
    limit: float,
    target_nodes: IntArray,
    dist: FloatArray,
    settled: npt.NDArray[np.bool_],
    is_target: npt.NDArray[np.bool_],
    heap_d: FloatArray,
    heap_n: IntArray,
    touched: IntArray,
) -> tuple[int, int]:
    """Multi-source Dijkstra with a binary heap, bounded by ``limit``.

    Only nodes with a tentative distance <= limit are ever recorded. When ``target_nodes``
    is non-empty the search stops once all of them are settled. Returns (number of touched
    nodes written to ``touched``, number of settled nodes). ``dist``/``settled`` must come
    in all-inf/all-False and are left filled for the touched nodes.
    """
    n_touched = 0
    size = 0
    remaining = 0
    for t in target_nodes:
        if not is_target[t]:
            is_target[t] = True
            remaining += 1
    for i in range(seed_nodes.size):
        s = seed_nodes[i]
        d0 = seed_dist[i]
        if d0 > limit or d0 >= dist[s]:
            continue
        if dist[s] == np.inf:
            touched[n_touched] = s
            n_touched += 1
        dist[s] = d0
        # push
        pos = size
        size += 1
        while pos > 0:
            parent = (pos - 1) >> 1
            if heap_d[parent] <= d0:
                break
            heap_d[pos] = heap_d[parent]
            heap_n[pos] = heap_n[parent]
            pos = parent
        heap_d[pos] = d0
        heap_n[pos] = s
    n_settled = 0
    use_targets = target_nodes.size > 0
    while size > 0:
        d = heap_d[0]
        x = heap_n[0]
        # pop
        size -= 1
        last_d = heap_d[size]
        last_n = heap_n[size]
        pos = 0
        while True:
            child = 2 * pos + 1
            if child >= size:
                break
            if child + 1 < size and heap_d[child + 1] < heap_d[child]:
                child += 1
            if heap_d[child] >= last_d:
                break
            heap_d[pos] = heap_d[child]
            heap_n[pos] = heap_n[child]
            pos = child
        if size > 0:
            heap_d[pos] = last_d
            heap_n[pos] = last_n
        if settled[x] or d > dist[x]:
            continue
        settled[x] = True
        n_settled += 1
        if use_targets and is_target[x]:
            remaining -= 1
            if remaining == 0:
                break
        for a in range(indptr[x], indptr[x + 1]):
            y = indices[a]
            nd = d + weights[a]
            if nd < dist[y] and nd <= limit:
                if dist[y] == np.inf:
                    touched[n_touched] = y
                    n_touched += 1
                dist[y] = nd
                pos = size
                size += 1
                while pos > 0:
                    parent = (pos - 1) >> 1
                    if heap_d[parent] <= nd:
                        break
                    heap_d[pos] = heap_d[parent]
                    heap_n[pos] = heap_n[parent]
                    pos = parent
                heap_d[pos] = nd
                heap_n[pos] = y
    for t in target_nodes:
        is_target[t] = False
    return n_touched, n_settled


@numba.njit(cache=True, nogil=True)
def _reset(dist: FloatArray, settled: npt.NDArray[np.bool_], touched: IntArray,
           n: int) -> None:  # pragma: no cover - compiled
    for i in range(n):
        x = touched[i]
        dist[x] = np.inf
        settled[x] = False


@dataclass(frozen=True, slots=True)
class SearchResult:
    """Outcome of one :meth:`NodeSearch.run`.

    ``dist`` is the search's dense workspace (metres, ``inf`` where not reached) and is only
    valid until the next ``run`` of the same search; ``touched`` lists the reached nodes.
    Distances of settled nodes are exact; when the search stopped early on its targets,
    read only the targets.
    """

    dist: FloatArray
    touched: IntArray
    n_settled: int


class NodeSearch:
    """Reusable bounded Dijkstra over one traversal direction of a network.

    ``reverse=False`` measures distances *from* the seeds along the arcs; ``reverse=True``
    measures distances *to* the seeds (it runs on the turned-around arcs). A search owns its
    workspace (O(nodes + arcs) memory, allocated once); each run costs only what it touches.
    Not thread-safe: use one per thread or task.
    """

    def __init__(self, network: RoadNetwork, *, reverse: bool = False) -> None:
        self.network = network
        self.reverse = reverse
        self.adjacency: Adjacency = network.adjacency(reverse=reverse)
        n = network.n_nodes
        arcs = self.adjacency.indices.size
        self._dist = np.full(n, np.inf)
        self._settled = np.zeros(n, dtype=bool)
        self._is_target = np.zeros(n, dtype=bool)
        self._heap_d = np.empty(arcs + n + 2, dtype=np.float64)
        self._heap_n = np.empty(arcs + n + 2, dtype=np.int64)
        self._touched = np.empty(n, dtype=np.int64)
        self._n_touched = 0
        self._no_targets = np.empty(0, dtype=np.int64)

    def run(
        self,
        seed_nodes: npt.ArrayLike,
        seed_dist: npt.ArrayLike,
        *,
        limit: float = np.inf,
        targets: npt.ArrayLike | None = None,
    ) -> SearchResult:
        """Settle nodes in distance order from the seeds, up to ``limit`` metres.

        Parameters
        ----------
        seed_nodes, seed_dist
            Start nodes and their initial distances in metres (>= 0).
        limit
            Nodes farther than this are not recorded.
        targets
            Stop as soon as all these nodes are settled (or the limit is passed).
        """
        _reset(self._dist, self._settled, self._touched, self._n_touched)
        self._n_touched = 0
        tg = self._no_targets if targets is None else np.asarray(targets, dtype=np.int64)
        adj = self.adjacency
        n_touched, n_settled = _dijkstra(
            adj.indptr, adj.indices, adj.weights,
            np.asarray(seed_nodes, dtype=np.int64), np.asarray(seed_dist, dtype=np.float64),
            float(limit), tg, self._dist, self._settled, self._is_target,
            self._heap_d, self._heap_n, self._touched,
        )
        self._n_touched = n_touched
        return SearchResult(self._dist, self._touched[:n_touched], n_settled)


def exit_costs(network: RoadNetwork, points: EdgePoints) -> tuple[IntArray, FloatArray,
                                                                  IntArray, FloatArray]:
    """Nodes a point can leave by and the cost to get there: (v, length - o), (u, o).

    The second pair costs ``inf`` where the edge cannot be travelled from v to u.
    """
    e = points.edge
    o = points.offset
    length = network.edge_length[e]
    cost_u = np.where(network.edge_twoway[e], o, np.inf)
    return (network.edge_v[e].astype(np.int64), length - o,
            network.edge_u[e].astype(np.int64), cost_u)


def entry_costs(network: RoadNetwork, points: EdgePoints) -> tuple[IntArray, FloatArray,
                                                                   IntArray, FloatArray]:
    """Nodes a point can be reached from and the cost from there: (u, o), (v, length - o).

    The second pair costs ``inf`` where the edge cannot be travelled from v to u.
    """
    e = points.edge
    o = points.offset
    length = network.edge_length[e]
    cost_v = np.where(network.edge_twoway[e], length - o, np.inf)
    return (network.edge_u[e].astype(np.int64), o,
            network.edge_v[e].astype(np.int64), cost_v)


def _shared_edge_run(
    network: RoadNetwork, edge: int, start: FloatArray | float, end: FloatArray | float,
    same: npt.NDArray[np.bool_],
) -> FloatArray:
    """Distance along ``edge`` from offset ``start`` to offset ``end`` where ``same``; else inf."""
    ahead = np.asarray(end, dtype=np.float64) - np.asarray(start, dtype=np.float64)
    back = -ahead if bool(network.edge_twoway[edge]) else np.inf
    return np.where(same, np.where(ahead >= 0, ahead, back), np.inf)


def point_distances_from_nodes(
    network: RoadNetwork, dist: FloatArray, points: EdgePoints, *, toward_points: bool
) -> FloatArray:
    """Combine node distances with the points' entry or exit costs.

    ``toward_points=True``: ``dist`` holds distances from an origin to nodes; the result is
    origin -> point. ``False``: ``dist`` holds distances from nodes to an origin; the result
    is point -> origin. Shared-edge runs are not included (see :func:`distances_to_point`).
    """
    a, ca, b, cb = (entry_costs if toward_points else exit_costs)(network, points)
    return np.minimum(dist[a] + ca, dist[b] + cb)


def distances_to_point(
    network: RoadNetwork,
    target: EdgePoints,
    sources: EdgePoints,
    *,
    limit: float = np.inf,
    search: NodeSearch | None = None,
) -> FloatArray:
    """Network distance from each source point to one target point, in metres.

    ``inf`` where the target is unreachable or farther than ``limit``. This is the
    direction the matchers use: from a subscription's location to a message's location.
    """
    if len(target) != 1:
        msg = f"target must be a single edge point, got {len(target)}"
        raise ValueError(msg)
    search = search or NodeSearch(network, reverse=True)
    if not search.reverse:
        msg = "distances_to_point needs a reverse NodeSearch"
        raise ValueError(msg)
    a, ca, b, cb = entry_costs(network, target)
    res = search.run(np.r_[a, b], np.r_[ca, cb], limit=limit)
    via_nodes = point_distances_from_nodes(network, res.dist, sources, toward_points=False)
    e = int(target.edge[0])
    direct = _shared_edge_run(network, e, sources.offset, float(target.offset[0]),
                              sources.edge == e)
    out = np.minimum(via_nodes, direct)
    out[out > limit] = np.inf
    return out


def distances_from_point(
    network: RoadNetwork,
    source: EdgePoints,
    targets: EdgePoints,
    *,
    limit: float = np.inf,
    search: NodeSearch | None = None,
) -> FloatArray:
    """Network distance from one source point to each target point, in metres."""
    if len(source) != 1:
        msg = f"source must be a single edge point, got {len(source)}"
        raise ValueError(msg)
    search = search or NodeSearch(network, reverse=False)
    if search.reverse:
        msg = "distances_from_point needs a forward NodeSearch"
        raise ValueError(msg)
    a, ca, b, cb = exit_costs(network, source)
    res = search.run(np.r_[a, b], np.r_[ca, cb], limit=limit)
    via_nodes = point_distances_from_nodes(network, res.dist, targets, toward_points=True)
    e = int(source.edge[0])
    direct = _shared_edge_run(network, e, float(source.offset[0]), targets.offset,
                              targets.edge == e)
    out = np.minimum(via_nodes, direct)
    out[out > limit] = np.inf
    return out


def network_distance(network: RoadNetwork, p: EdgePoints, q: EdgePoints) -> float:
    """Network distance from edge point p to edge point q in metres (inf if unreachable)."""
    return float(distances_to_point(network, q, p)[0])
