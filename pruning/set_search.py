"""One reverse search from a message that stops as soon as every candidate set is decided.

dN(S, m) is the minimum, over the pieces of S, of a node distance to m plus the piece's
exit cost to that node (or the direct run along m's own edge). A reverse Dijkstra from m
settles nodes in distance order, so once it has settled a node at distance d, every exit
still to come costs at least d: a set whose best value so far is at most d is final.
:func:`set_search_kernel` stops when the next node to settle lies beyond every candidate's
*cap*, the smaller of its best value and its own limit (the largest distance at which it
could still be delivered); a set whose value exceeds its limit is not deliverable.
Node distances are the same sums as the reference's search (lengths on the grid of
:mod:`roadpubsub.roadnet.lengths`), so the values are the reference's bit for bit.

The exits live in a table built once per batch of sets (:func:`set_exit_table`), and a
search links the exits of its candidates by node (:func:`link_exits`) instead of sorting
them: no allocation and no Python per message.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np
import numpy.typing as npt

from roadpubsub.roadnet.distance import exit_costs
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.segment_sets import SegmentSets

__all__ = ["SetCandidates", "SetExits", "SetSearchGraph", "SetSearchWork", "link_exits",
           "set_exit_table", "set_search_kernel", "unlink_exits"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class SetSearchGraph(NamedTuple):
    """The reverse adjacency (arcs turned around: distances *to* the message), CSR."""

    indptr: IntArray
    indices: npt.NDArray[np.int32]
    weights: FloatArray


class SetExits(NamedTuple):
    """Every set's exits: set s leaves at ``node[j]`` for ``cost[j]`` metres for j in
    ``ptr[s]:ptr[s + 1]`` (one exit per node and set, the cheapest); ``owner[j]`` is s."""

    ptr: IntArray
    node: IntArray
    cost: FloatArray
    owner: IntArray

    @property
    def nbytes(self) -> int:
        """Memory of the table in bytes."""
        return sum(int(a.nbytes) for a in self)


class SetCandidates(NamedTuple):
    """The sets one search decides: ``sets[:k]``; ``slot[s]`` is s's place q in them
    (-1 for every other set, restored by the caller); per place, ``best[q]`` (in: +inf or
    a value known already, out: the smallest exit value found) and ``limit[q]``."""

    sets: IntArray
    slot: IntArray
    best: FloatArray
    limit: FloatArray


class SetSearchWork(NamedTuple):
    """Workspaces: ``dist`` (n, all +inf between calls), ``exit_head`` (n, all -1 between
    calls) and ``exit_next`` (one per exit of the table), heap arrays (arcs + n + 2 each),
    ``touched`` (n), ``seed_nodes``/``seed_dist`` (2 each)."""

    dist: FloatArray
    exit_head: IntArray
    exit_next: IntArray
    heap_d: FloatArray
    heap_n: IntArray
    touched: IntArray
    seed_nodes: IntArray
    seed_dist: FloatArray

    @classmethod
    def of(cls, n_nodes: int, n_arcs: int, n_exits: int) -> SetSearchWork:
        """Fresh workspaces for a graph of ``n_nodes`` nodes and ``n_arcs`` arcs and a
        table of ``n_exits`` exits."""
        return cls(np.full(n_nodes, np.inf), np.full(n_nodes, -1, np.int64),
                   np.empty(n_exits, np.int64), np.empty(n_arcs + n_nodes + 2),
                   np.empty(n_arcs + n_nodes + 2, np.int64), np.empty(n_nodes, np.int64),
                   np.empty(2, np.int64), np.empty(2))


def set_exit_table(network: RoadNetwork, sets: SegmentSets) -> SetExits:
    """The exits of every set: both ends of every piece by both their exits (the four
    values the reference adds to a node distance), the cheapest per (set, node).

    Keeping only the cheapest cost per node is exact: d + c is monotone in c also in
    floating point (rounding to nearest is monotone), so min over c of (d + c) is
    d + min c, whatever the node distance d turns out to be.
    """
    parts = []
    all_owner = sets.owner.astype(np.int64)
    lo = 0
    while lo < len(sets):  # in chunks of about 2M pieces: the temporaries stay small
        hi = int(np.searchsorted(sets.ptr, sets.ptr[lo] + 2_000_000, side="right")) - 1
        hi = min(max(hi, lo + 1), len(sets))
        a, b = int(sets.ptr[lo]), int(sets.ptr[hi])
        edge, start, end = sets.edge[a:b], sets.start[a:b], sets.end[a:b]
        v1, c1, u1, d1 = exit_costs(network, EdgePoints(edge, end))
        v0, c0, u0, d0 = exit_costs(network, EdgePoints(edge, start))
        owner = np.tile(all_owner[a:b], 4)
        node = np.r_[v1, u1, v0, u0].astype(np.int64)
        cost = np.r_[c1, d1, c0, d0]
        ok = np.isfinite(cost)  # a one-way edge cannot be left backwards
        owner, node, cost = owner[ok], node[ok], cost[ok]
        order = np.lexsort((cost, node, owner))  # by set, node, then cost
        owner, node, cost = owner[order], node[order], cost[order]
        first = np.ones(owner.size, dtype=bool)
        first[1:] = (owner[1:] != owner[:-1]) | (node[1:] != node[:-1])
        parts.append((owner[first], node[first], cost[first]))
        lo = hi
    owner = np.concatenate([p[0] for p in parts]) if parts else np.empty(0, np.int64)
    node = np.concatenate([p[1] for p in parts]) if parts else np.empty(0, np.int64)
    cost = np.concatenate([p[2] for p in parts]) if parts else np.empty(0)
    ptr = np.zeros(len(sets) + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner, minlength=len(sets)), out=ptr[1:])
    return SetExits(ptr, node, cost, owner)


@numba.njit(cache=True, nogil=True, inline="always")
def link_exits(exits: SetExits, cand: SetCandidates, k: int,
               work: SetSearchWork) -> None:  # pragma: no cover - compiled
    """Chain the exits of ``cand.sets[:k]`` by node (``exit_head``/``exit_next``)."""
    head, nxt = work.exit_head, work.exit_next
    for q in range(k):
        s = cand.sets[q]
        for j in range(exits.ptr[s], exits.ptr[s + 1]):
            x = exits.node[j]
            nxt[j] = head[x]
            head[x] = j


@numba.njit(cache=True, nogil=True, inline="always")
def unlink_exits(exits: SetExits, cand: SetCandidates, k: int,
                 work: SetSearchWork) -> None:  # pragma: no cover - compiled
    """Restore ``exit_head`` to all -1 after :func:`link_exits`."""
    for q in range(k):
        s = cand.sets[q]
        for j in range(exits.ptr[s], exits.ptr[s + 1]):
            work.exit_head[exits.node[j]] = -1


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


@numba.njit(cache=True, nogil=True, inline="always")
def _relax(work: SetSearchWork, size: int, n_touched: int, y: int, nd: float,
           cap: float) -> tuple[int, int]:  # pragma: no cover - compiled
    """Offer distance ``nd`` to node ``y`` (a seed or an arc's head): recorded and queued
    when it improves and is within the cap. Returns (heap size, nodes touched)."""
    dist = work.dist
    if nd < dist[y] and nd <= cap:
        if dist[y] == np.inf:
            work.touched[n_touched] = y
            n_touched += 1
        dist[y] = nd
        size = _push(work.heap_d, work.heap_n, size, nd, y)
    return size, n_touched


@numba.njit(cache=True, nogil=True, inline="always")
def _largest_cap(cand: SetCandidates, k: int) -> float:  # pragma: no cover - compiled
    top = -np.inf
    for q in range(k):
        c = min(cand.best[q], cand.limit[q])
        if c > top:
            top = c
    return top


@numba.njit(cache=True, nogil=True)
def set_search_kernel(  # pragma: no cover - compiled
    graph: SetSearchGraph, exits: SetExits, cand: SetCandidates, k: int,
    work: SetSearchWork, n_seeds: int,
) -> int:
    """Lower ``cand.best[:k]`` to the smallest exit value found by a reverse search from
    the first ``n_seeds`` of ``work.seed_nodes``/``seed_dist``, stopping once the next
    node lies beyond every candidate's cap; returns the nodes settled. The candidates'
    exits must be linked (:func:`link_exits`); ``dist`` is restored."""
    best, slot = cand.best, cand.slot
    n_touched = 0
    size = 0
    cap = _largest_cap(cand, k)
    for i in range(n_seeds):
        size, n_touched = _relax(work, size, n_touched, work.seed_nodes[i],
                                 work.seed_dist[i], cap)
    settled = 0
    while size > 0:
        d = work.heap_d[0]
        x = work.heap_n[0]
        size = _pop(work.heap_d, work.heap_n, size)
        if d > work.dist[x]:
            continue  # a stale entry
        if d > cap:
            break
        settled += 1
        j = work.exit_head[x]
        recompute = False
        while j >= 0:
            q = slot[exits.owner[j]]
            v = d + exits.cost[j]
            if v < best[q]:
                # Only the candidate holding the cap can lower it (caps only fall).
                recompute = recompute or min(best[q], cand.limit[q]) == cap
                best[q] = v
            j = work.exit_next[j]
        if recompute:
            cap = _largest_cap(cand, k)
        for a in range(graph.indptr[x], graph.indptr[x + 1]):
            size, n_touched = _relax(work, size, n_touched, graph.indices[a],
                                     d + graph.weights[a], cap)
    for i in range(n_touched):
        work.dist[work.touched[i]] = np.inf
    return settled
