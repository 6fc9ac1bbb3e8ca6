"""One reverse search from a message that stops as soon as every candidate set is decided.

dN(S, m) is the minimum, over the pieces of S, of a node distance to m plus the piece's
exit cost to that node (or the direct run along m's own edge). A reverse Dijkstra from m
settles nodes in distance order, so once it has settled a node at distance d, every exit
still to come costs at least d: a set whose best value so far is at most d is final.
:func:`set_search_kernel` stops when the next node to settle lies beyond every candidate's
*cap*, the smaller of its best value and its own limit (the largest distance at which it
could still be delivered); a set whose value exceeds its limit is not deliverable and
comes back as +inf. Node distances are the same sums as the reference's search (lengths on
the grid of :mod:`roadpubsub.roadnet.lengths`), so the values are the reference's bit for bit.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np
import numpy.typing as npt

__all__ = ["SetExits", "SetSearchGraph", "SetSearchWork", "set_search_kernel"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class SetSearchGraph(NamedTuple):
    """The reverse adjacency (arcs turned around: distances *to* the message), CSR."""

    indptr: IntArray
    indices: npt.NDArray[np.int32]
    weights: FloatArray


class SetExits(NamedTuple):
    """The candidates' exits, sorted by node: exit j leaves set ``owner[j]`` (a local
    candidate index) at ``node[j]`` for ``cost[j]`` metres; ``limit`` per candidate."""

    node: IntArray
    owner: IntArray
    cost: FloatArray
    limit: FloatArray


class SetSearchWork(NamedTuple):
    """Workspaces: ``dist`` (n, all +inf between calls), ``head`` (n, all -1), heap
    arrays (arcs + n + 2 each), ``touched`` (n)."""

    dist: FloatArray
    head: IntArray
    heap_d: FloatArray
    heap_n: IntArray
    touched: IntArray

    @classmethod
    def of(cls, n_nodes: int, n_arcs: int) -> SetSearchWork:
        """Fresh workspaces for a graph of ``n_nodes`` nodes and ``n_arcs`` arcs."""
        return cls(np.full(n_nodes, np.inf), np.full(n_nodes, -1, np.int64),
                   np.empty(n_arcs + n_nodes + 2), np.empty(n_arcs + n_nodes + 2, np.int64),
                   np.empty(n_nodes, np.int64))


@numba.njit(cache=True, nogil=True, inline="always")
def _push(heap_d: FloatArray, heap_n: IntArray, size: int, d: float,
          x: int) -> int:  # pragma: no cover - compiled
    i = size
    heap_d[i] = d
    heap_n[i] = x
    while i > 0:
        p = (i - 1) >> 1
        if heap_d[p] <= heap_d[i]:
            break
        heap_d[p], heap_d[i] = heap_d[i], heap_d[p]
        heap_n[p], heap_n[i] = heap_n[i], heap_n[p]
        i = p
    return size + 1


@numba.njit(cache=True, nogil=True, inline="always")
def _pop(heap_d: FloatArray, heap_n: IntArray, size: int) -> int:  # pragma: no cover
    """Remove the root (the caller read it); returns the new size."""
    size -= 1
    heap_d[0] = heap_d[size]
    heap_n[0] = heap_n[size]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and heap_d[c + 1] < heap_d[c]:
            c += 1
        if heap_d[i] <= heap_d[c]:
            break
        heap_d[c], heap_d[i] = heap_d[i], heap_d[c]
        heap_n[c], heap_n[i] = heap_n[i], heap_n[c]
        i = c
    return size


@numba.njit(cache=True, nogil=True)
def _largest_cap(best: FloatArray, limit: FloatArray) -> float:  # pragma: no cover
    top = -np.inf
    for s in range(best.size):
        c = min(best[s], limit[s])
        if c > top:
            top = c
    return top


@numba.njit(cache=True, nogil=True)
def set_search_kernel(  # pragma: no cover - compiled
    graph: SetSearchGraph, seed_nodes: IntArray, seed_dist: FloatArray, exits: SetExits,
    best: FloatArray, work: SetSearchWork,
) -> int:
    """Lower ``best`` (per candidate: +inf, or a value known already, e.g. a direct run)
    to the smallest exit value found by a reverse search from the seeds, stopping once
    the next node lies beyond every candidate's cap; returns the nodes settled.
    Workspaces are restored."""
    dist, head, heap_d, heap_n, touched = (work.dist, work.head, work.heap_d, work.heap_n,
                                           work.touched)
    node, owner, cost, limit = exits.node, exits.owner, exits.cost, exits.limit
    for j in range(node.size):
        if head[node[j]] < 0:
            head[node[j]] = j
    n_touched = 0
    size = 0
    cap = _largest_cap(best, limit)
    for i in range(seed_nodes.size):
        x = seed_nodes[i]
        d = seed_dist[i]
        if d < dist[x] and d <= cap:
            if dist[x] == np.inf:
                touched[n_touched] = x
                n_touched += 1
            dist[x] = d
            size = _push(heap_d, heap_n, size, d, x)
    settled = 0
    while size > 0:
        d = heap_d[0]
        x = heap_n[0]
        size = _pop(heap_d, heap_n, size)
        if d > dist[x]:
            continue  # a stale entry
        if d > cap:
            break
        settled += 1
        j = head[x]
        if j >= 0:
            lowered = False
            while j < node.size and node[j] == x:
                v = d + cost[j]
                s = owner[j]
                if v < best[s]:
                    best[s] = v
                    lowered = True
                j += 1
            if lowered:
                cap = _largest_cap(best, limit)
        for a in range(graph.indptr[x], graph.indptr[x + 1]):
            y = graph.indices[a]
            nd = d + graph.weights[a]
            if nd < dist[y] and nd <= cap:
                if dist[y] == np.inf:
                    touched[n_touched] = y
                    n_touched += 1
                dist[y] = nd
                size = _push(heap_d, heap_n, size, nd, y)
    for i in range(n_touched):
        dist[touched[i]] = np.inf
    for j in range(node.size):
        head[node[j]] = -1
    return settled
