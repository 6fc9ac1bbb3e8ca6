"""Algorithm 2, the verification phase (paper Sec. VI-B).

One Dijkstra-like expansion from the message's location on the reversed arcs (so that it
measures distances *to* the message). Each candidate brings the largest distance at which
it could still be delivered (its DNUB, or Dmax); the expansion stops as soon as every node
a candidate leaves by is settled, or every unsettled one is farther than its candidate's
limit. A candidate's distance is then exact whenever it is within its limit; beyond it the
candidate cannot be delivered and gets ``inf``. The expansion keeps its frontier in
buckets of ``bucket_width_m`` metres rather than a heap (Dial's algorithm, exact: see
:func:`~roadpubsub.roadnet.dijkstra_kernels.bucket_dijkstra_kernel`); the reference matcher keeps
the heap, so the two check each other. Candidates are scored with the kernels of
:mod:`roadpubsub.pruning.similarity`, from the exact TSIM the matcher computed while setting limits.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np
import numpy.typing as npt

from roadpubsub.pruning.kernel_args import GraphArrays
from roadpubsub.pruning.similarity import delivered_kernel, sim_kernel
from roadpubsub.roadnet.dijkstra_kernels import (
    BucketQueue,
    SearchGraph,
    SearchQuery,
    SearchWorkspace,
    bucket_dijkstra_kernel,
    dijkstra_kernel,
    distance_to_target_kernel,
    reset_kernel,
)

__all__ = ["VerifySearch", "score_candidates", "verify_candidates", "verify_known"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class VerifySearch(NamedTuple):
    """What one verification search runs on: the reversed arcs, chain edges and dead ends
    (``net``), a :class:`~roadpubsub.roadnet.distance.NodeSearch` workspace on them (``ws``,
    restored on return), the bucket queue (``queue``; a search it cannot hold runs on the heap, with
    the same distances) and the targets' scratch (``target_nodes``/``target_limits``, at
    least twice as long as a call's candidates)."""

    net: GraphArrays
    ws: SearchWorkspace
    queue: BucketQueue
    target_nodes: IntArray
    target_limits: FloatArray


@numba.njit(cache=True, nogil=True)
def verify_candidates(  # pragma: no cover - compiled
    search: VerifySearch, m_edge: int, m_offset: float,
    cand_edge: npt.NDArray[np.int32], cand_offset: FloatArray, cand_limit: FloatArray,
    n_cand: int, out_dist: FloatArray,
) -> int:
    """Distances from the first ``n_cand`` candidates to the message; returns nodes settled.

    The message stands at (``m_edge``, ``m_offset``); candidate i at (``cand_edge[i]``,
    ``cand_offset[i]``) with the largest distance of interest ``cand_limit[i]`` (m).
    ``search.target_nodes``/``target_limits`` must hold at least 2 * n_cand entries. The
    search runs on buckets of ``search.queue.width`` metres
    (:func:`~roadpubsub.roadnet.dijkstra_kernels.bucket_dijkstra_kernel`); where it cannot (too few
    buckets or entries), the heap kernel does, with the same distances.
    """
    net, ws = search.net, search.ws
    target_nodes, target_limits = search.target_nodes, search.target_limits
    graph = SearchGraph(net.indptr, net.indices, net.weights, net.dead_end_to)
    edge_u, edge_v, edge_length, edge_twoway = (net.edge_u, net.edge_v, net.edge_length,
                                                net.edge_twoway)
    dist, touched = ws.dist, ws.touched
    if n_cand == 0:
        return 0
    n_t = 0
    limit = 0.0
    for i in range(n_cand):
        e = cand_edge[i]
        lim = cand_limit[i]
        limit = max(limit, lim)
        target_nodes[n_t] = edge_v[e]
        target_limits[n_t] = lim
        n_t += 1
        if edge_twoway[e] or cand_offset[i] == 0.0:
            target_nodes[n_t] = edge_u[e]
            target_limits[n_t] = lim
            n_t += 1
    # The message is reached from u at its offset, or from v on a two-way edge (or when it
    # stands on v: offset = length > 0; on a zero-length edge it stands on u).
    seeds = np.empty(2, dtype=np.int64)
    seed_d = np.empty(2)
    seeds[0] = edge_u[m_edge]
    seed_d[0] = m_offset
    n_seeds = 1
    if edge_twoway[m_edge] or (m_offset == edge_length[m_edge] and m_offset > 0.0):
        seeds[1] = edge_v[m_edge]
        seed_d[1] = edge_length[m_edge] - m_offset
        n_seeds = 2
    query = SearchQuery(seeds[:n_seeds], seed_d[:n_seeds], limit, target_nodes[:n_t],
                        target_limits[:n_t])
    n_touched, n_settled, ok = bucket_dijkstra_kernel(graph, query, ws, search.queue)
    if not ok:
        reset_kernel(dist, touched, n_touched)
        n_touched, n_settled = dijkstra_kernel(graph, query, ws)
    for i in range(n_cand):
        d = distance_to_target_kernel(dist, cand_edge[i], cand_offset[i], edge_u, edge_v,
                                      edge_length, edge_twoway, m_edge, m_offset)
        out_dist[i] = d if d <= cand_limit[i] else np.inf
    reset_kernel(dist, touched, n_touched)
    return n_settled


@numba.njit(cache=True, nogil=True)
def score_candidates(  # pragma: no cover - compiled
    dist: FloatArray, alpha: FloatArray, tau: FloatArray, tsim: FloatArray, n: int,
    dmax: float, tolerance: float, out_index: IntArray, out_dist: FloatArray,
    out_score: FloatArray, out_at: int,
) -> int:
    """Score the first ``n`` verified candidates; append the delivered ones at ``out_at``.

    Candidate i has distance ``dist[i]`` (inf beyond its limit), preference ``alpha[i]``,
    threshold ``tau[i]`` and exact ``tsim[i]``; a delivered one writes its index i, its
    distance and its score. Returns the new end of the output.
    """
    k = out_at
    for i in range(n):
        d = dist[i]
        if not d <= dmax:
            continue
        score = sim_kernel(alpha[i], d, dmax, tsim[i])
        if delivered_kernel(score, tau[i], d, dmax, tolerance):
            out_index[k] = i
            out_dist[k] = d
            out_score[k] = score
            k += 1
    return k


@numba.njit(cache=True, nogil=True)
def verify_known(  # pragma: no cover - compiled
    search: VerifySearch, m_edge: IntArray, m_offset: FloatArray, ptr: IntArray,
    cand_edge: npt.NDArray[np.int32], cand_offset: FloatArray, cand_limit: FloatArray,
    out_dist: FloatArray,
) -> int:
    """The verification floor: :func:`verify_candidates` for each message j with only the
    points ``ptr[j]:ptr[j + 1]`` as candidates, each limited to its own distance (a
    matcher that knew the deliveries in advance could not give tighter limits). Returns
    the junctions settled in all. Benchmarks time it against the matcher."""
    settled = 0
    for j in range(m_edge.size):
        a = ptr[j]
        settled += verify_candidates(search, m_edge[j], m_offset[j], cand_edge[a:],
                                     cand_offset[a:], cand_limit[a:], ptr[j + 1] - a,
                                     out_dist[a:])
    return settled
