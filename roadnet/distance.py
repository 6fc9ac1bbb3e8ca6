"""Exact network distances between edge points: Dijkstra kernels for the whole project.

An edge point p = (edge e, offset o metres from e's first node u) is left towards v at cost
``length - o`` and, where e may be travelled from v to u, towards u at cost ``o`` (its *exit*
costs); it is reached from u at cost ``o`` and, on a two-way edge, from v at cost
``length - o`` (its *entry* costs). A point-to-point distance is the best of a node path
between an exit and an entry, or the direct run along a shared edge.

The reference matcher, the cell-bound precompute and the Spark jobs call :class:`NodeSearch`
(:func:`~roadpubsub.roadnet.dijkstra_kernels.dijkstra_kernel`, a 4-ary heap); the verification of
the
indexed matchers runs :func:`~roadpubsub.roadnet.dijkstra_kernels.bucket_dijkstra_kernel`, the same
search with a bucket queue. Both give the same floating-point sums everywhere: a node's
final distance is the minimum over its final predecessors and depends neither on the order
they are scanned in nor on where a search stops. The two kernels also check each other,
since the indexed matchers are tested against the reference.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import numpy.typing as npt

from roadpubsub.roadnet.dijkstra_kernels import (
    SearchGraph,
    SearchQuery,
    SearchWorkspace,
    dijkstra_kernel,
    distances_to_target_kernel,
    reset_kernel,
)
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import Adjacency, Topology

__all__ = [
    "NodeSearch",
    "SearchResult",
    "dead_ends",
    "distances_from_point",
    "distances_to_point",
    "entry_costs",
    "entry_costs_at",
    "exit_costs",
    "exit_costs_at",
    "network_distance",
    "point_distances_from_nodes",
    "point_distances_to_target",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


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


def dead_ends(adjacency: Adjacency) -> npt.NDArray[np.int32]:
    """Per node, its only neighbour if every arc of the node leads to that one node, else -1.

    For :func:`dijkstra_kernel`'s ``dead_end_to`` (computed on the arcs the search uses).
    """
    indptr, indices = adjacency.indptr, adjacency.indices
    n = indptr.size - 1
    out = np.full(n, -1, dtype=np.int32)
    degree = np.diff(indptr)
    has_arcs = degree > 0
    first = np.zeros(n, dtype=np.int64)
    first[has_arcs] = indices[indptr[:-1][has_arcs]]
    tail = np.repeat(np.arange(n), degree)
    differs = np.zeros(n, dtype=bool)
    np.logical_or.at(differs, tail, indices != first[tail])
    single = has_arcs & ~differs
    out[single] = first[single]
    return out


class NodeSearch:
    """Reusable bounded Dijkstra over one traversal direction of a network.

    ``reverse=False`` measures distances *from* the seeds along the arcs; ``reverse=True``
    measures distances *to* the seeds (it runs on the turned-around arcs). A search owns its
    workspace (O(nodes + arcs) memory, allocated once); each run costs only what it touches.
    Not thread-safe: use one per thread or task.
    """

    def __init__(self, network: Topology, *, reverse: bool = False) -> None:
        self.network = network
        self.reverse = reverse
        self.adjacency: Adjacency = network.adjacency(reverse=reverse)
        n = network.n_nodes
        arcs = self.adjacency.indices.size
        self._dist = np.full(n, np.inf)
        self._target_ws = np.full(n, -np.inf)
        self._heap_d = np.empty(arcs + n + 2, dtype=np.float64)
        self._heap_n = np.empty(arcs + n + 2, dtype=np.int64)
        self._touched = np.empty(n, dtype=np.int64)
        self._n_touched = 0
        self._no_targets = np.empty(0, dtype=np.int64)
        self._no_dead_ends = np.empty(0, dtype=np.int32)
        self._no_limits = np.empty(0, dtype=np.float64)

    def workspace(self) -> SearchWorkspace:
        """Workspace arrays (dist, target_ws, heap_d, heap_n, touched) for compiled callers.

        They are reset first. A caller running :func:`dijkstra_kernel` on them must restore
        ``dist`` to all-inf (:func:`reset_kernel` over the touched nodes) before returning.
        """
        reset_kernel(self._dist, self._touched, self._n_touched)
        self._n_touched = 0
        return SearchWorkspace(self._dist, self._target_ws, self._heap_d, self._heap_n,
                               self._touched)

    def run(
        self,
        seed_nodes: npt.ArrayLike,
        seed_dist: npt.ArrayLike,
        *,
        limit: float = np.inf,
        targets: npt.ArrayLike | None = None,
        target_limits: npt.ArrayLike | None = None,
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
        target_limits
            Per target, the largest distance of interest (default ``limit``): the search
            also stops once every unsettled target is farther than its own limit.
        """
        reset_kernel(self._dist, self._touched, self._n_touched)
        self._n_touched = 0
        if targets is None:
            tg, tl = self._no_targets, self._no_limits
        else:
            tg = np.asarray(targets, dtype=np.int64)
            tl = (np.full(tg.size, float(limit)) if target_limits is None
                  else np.asarray(target_limits, dtype=np.float64))
        adj = self.adjacency
        n_touched, n_settled = dijkstra_kernel(
            SearchGraph(adj.indptr, adj.indices, adj.weights, self._no_dead_ends),
            SearchQuery(np.asarray(seed_nodes, dtype=np.int64),
                        np.asarray(seed_dist, dtype=np.float64), float(limit), tg, tl),
            SearchWorkspace(self._dist, self._target_ws, self._heap_d, self._heap_n,
                            self._touched),
        )
        self._n_touched = n_touched
        return SearchResult(self._dist, self._touched[:n_touched], n_settled)


@numba.njit(cache=True, nogil=True, inline="always")
def exit_costs_at(  # pragma: no cover - compiled
    e: int, o: float, edge_u: npt.NDArray[np.int32], edge_v: npt.NDArray[np.int32],
    edge_length: FloatArray, edge_twoway: npt.NDArray[np.bool_],
) -> tuple[int, float, int, float]:
    """The nodes a point ``o`` metres along edge ``e`` can leave by, and the cost to get
    there: (v, length - o), then (u, o), that one ``inf`` unless the edge runs v -> u or
    the point stands on u (offset 0: there even on a one-way edge)."""
    length = edge_length[e]
    back = o if edge_twoway[e] or o == 0.0 else np.inf
    return edge_v[e], length - o, edge_u[e], back


@numba.njit(cache=True, nogil=True, inline="always")
def entry_costs_at(  # pragma: no cover - compiled
    e: int, o: float, edge_u: npt.NDArray[np.int32], edge_v: npt.NDArray[np.int32],
    edge_length: FloatArray, edge_twoway: npt.NDArray[np.bool_],
) -> tuple[int, float, int, float]:
    """The nodes a point ``o`` metres along edge ``e`` can be reached from, and the cost
    from there: (u, o), then (v, length - o), that one ``inf`` unless the edge runs
    v -> u or the point stands on v (offset = length > 0; on a zero-length edge it
    stands on u)."""
    length = edge_length[e]
    back = length - o if edge_twoway[e] or (o == length and length > 0.0) else np.inf
    return edge_u[e], o, edge_v[e], back


@numba.njit(cache=True, nogil=True)
def _end_costs_kernel(  # pragma: no cover - compiled
    edge: npt.NDArray[np.int32], offset: FloatArray, edge_u: npt.NDArray[np.int32],
    edge_v: npt.NDArray[np.int32], edge_length: FloatArray,
    edge_twoway: npt.NDArray[np.bool_], leaving: bool,
) -> tuple[IntArray, FloatArray, IntArray, FloatArray]:
    n = edge.size
    first = np.empty(n, dtype=np.int64)
    first_cost = np.empty(n)
    second = np.empty(n, dtype=np.int64)
    second_cost = np.empty(n)
    for i in range(n):
        if leaving:
            first[i], first_cost[i], second[i], second_cost[i] = exit_costs_at(
                edge[i], offset[i], edge_u, edge_v, edge_length, edge_twoway)
        else:
            first[i], first_cost[i], second[i], second_cost[i] = entry_costs_at(
                edge[i], offset[i], edge_u, edge_v, edge_length, edge_twoway)
    return first, first_cost, second, second_cost


def exit_costs(network: Topology, points: EdgePoints, *, local: EdgePoints | None = None
               ) -> tuple[IntArray, FloatArray, IntArray, FloatArray]:
    """Nodes a point can leave by and the cost to get there: (v, length - o), (u, o).

    The second pair costs ``inf`` where the edge cannot be travelled from v to u (unless
    the point stands on u). ``local`` may pass ``network.to_local(points)`` when the
    caller has it already.
    """
    loc = network.to_local(points) if local is None else local
    return _end_costs_kernel(  # type: ignore[no-any-return]
        np.ascontiguousarray(loc.edge, dtype=np.int32),
        np.ascontiguousarray(loc.offset, dtype=np.float64), network.edge_u, network.edge_v,
        network.edge_length, network.edge_twoway, True)


def entry_costs(network: Topology, points: EdgePoints, *, local: EdgePoints | None = None
                ) -> tuple[IntArray, FloatArray, IntArray, FloatArray]:
    """Nodes a point can be reached from and the cost from there: (u, o), (v, length - o).

    The second pair costs ``inf`` where the edge cannot be travelled from v to u (unless
    the point stands on v: offset = length > 0). ``local`` as in :func:`exit_costs`.
    """
    loc = network.to_local(points) if local is None else local
    return _end_costs_kernel(  # type: ignore[no-any-return]
        np.ascontiguousarray(loc.edge, dtype=np.int32),
        np.ascontiguousarray(loc.offset, dtype=np.float64), network.edge_u, network.edge_v,
        network.edge_length, network.edge_twoway, False)


def _shared_edge_run(
    network: Topology, edge: int, start: FloatArray | float, end: FloatArray | float,
    same: npt.NDArray[np.bool_],
) -> FloatArray:
    """Distance along ``edge`` from offset ``start`` to offset ``end`` where ``same``; else inf."""
    ahead = np.asarray(end, dtype=np.float64) - np.asarray(start, dtype=np.float64)
    back = -ahead if bool(network.edge_twoway[edge]) else np.inf
    return np.where(same, np.where(ahead >= 0, ahead, back), np.inf)


def point_distances_from_nodes(
    network: Topology, dist: FloatArray, points: EdgePoints, *, toward_points: bool
) -> FloatArray:
    """Combine node distances with the points' entry or exit costs.

    ``toward_points=True``: ``dist`` holds distances from an origin to nodes; the result is
    origin -> point. ``False``: ``dist`` holds distances from nodes to an origin; the result
    is point -> origin. Shared-edge runs are not included (see :func:`distances_to_point`).
    """
    a, ca, b, cb = (entry_costs if toward_points else exit_costs)(network, points)
    return np.minimum(dist[a] + ca, dist[b] + cb)


def distances_to_point(
    network: Topology,
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
        raise InputError(msg)
    search = search or NodeSearch(network, reverse=True)
    if not search.reverse:
        msg = "distances_to_point needs a reverse NodeSearch"
        raise InputError(msg)
    a, ca, b, cb = entry_costs(network, target)
    res = search.run(np.r_[a, b], np.r_[ca, cb], limit=limit)
    return point_distances_to_target(network, res.dist, target, sources, limit=limit)


def point_distances_to_target(
    network: Topology,
    dist: FloatArray,
    target: EdgePoints,
    sources: EdgePoints,
    *,
    limit: float = np.inf,
) -> FloatArray:
    """Network distance from each source point to one target point, given node distances.

    ``dist`` must hold the distances from every node to ``target`` (metres, ``inf`` where
    not reached): the workspace of a finished reverse :class:`NodeSearch` seeded with
    :func:`entry_costs` of ``target`` and bounded by ``limit``. Adds the sources' exit costs
    and the direct run along a shared edge; results above ``limit`` are ``inf``.
    """
    src = network.to_local(sources)
    tgt = network.to_local(target)
    out = np.empty(len(sources))
    distances_to_target_kernel(
        dist, src.edge, src.offset, network.edge_u, network.edge_v,
        network.edge_length, network.edge_twoway, int(tgt.edge[0]),
        float(tgt.offset[0]), float(limit), out)
    return out


def distances_from_point(
    network: Topology,
    source: EdgePoints,
    targets: EdgePoints,
    *,
    limit: float = np.inf,
    search: NodeSearch | None = None,
) -> FloatArray:
    """Network distance from one source point to each target point, in metres."""
    if len(source) != 1:
        msg = f"source must be a single edge point, got {len(source)}"
        raise InputError(msg)
    search = search or NodeSearch(network, reverse=False)
    if search.reverse:
        msg = "distances_from_point needs a forward NodeSearch"
        raise InputError(msg)
    a, ca, b, cb = exit_costs(network, source)
    res = search.run(np.r_[a, b], np.r_[ca, cb], limit=limit)
    via_nodes = point_distances_from_nodes(network, res.dist, targets, toward_points=True)
    src = network.to_local(source)
    tgt = network.to_local(targets)
    e = int(src.edge[0])
    direct = _shared_edge_run(network, e, float(src.offset[0]), tgt.offset, tgt.edge == e)
    out = np.minimum(via_nodes, direct)
    out[out > limit] = np.inf
    return out


def network_distance(network: Topology, p: EdgePoints, q: EdgePoints) -> float:
    """Network distance from edge point p to edge point q in metres (inf if unreachable)."""
    return float(distances_to_point(network, q, p)[0])
