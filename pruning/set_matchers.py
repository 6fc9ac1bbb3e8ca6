"""Indexed matching of subscriptions located on routes and areas (issue 32).

The set side of the matchers, beside the point indexes (it shares only their public
names: the cells and bounds of :class:`~roadpubsub.index.spatial.SpatialIndex`, the network's
reverse
adjacency and exit costs, the scores of :mod:`roadpubsub.pruning.similarity`).

Per message m:

1. **Candidates** (:func:`~roadpubsub.index.set_cells.set_term_candidates`): every set filed
   under one of m's keywords, or in an always list, whose lower bound LB(S, m), the
   minimum over the set's cells of the point index's cell bound
   (:func:`~roadpubsub.pruning.algorithm1.cell_lower_bounds`), is within the limit (Dmax; for
   boolean subscriptions the largest radius), each once. Which keywords file a set
   (:func:`_threshold_filing`, :func:`_boolean_filing`) is decided once per batch so that
   every set left out would fail step 2 anyway: the keywords are the lever, since a
   cell bound lets a large share of long routes and large areas through.
2. **Pruning** without a search: a threshold subscription is dropped when even at distance
   LB it would not be delivered (SIM falls as the distance grows, also in floating point,
   so the test with LB is an upper bound: :func:`~roadpubsub.pruning.similarity.delivered`); a
   boolean one when LB exceeds its radius or the message lacks one of its keywords.
3. **Verification**: one reverse search from m (:mod:`roadpubsub.pruning.set_search`) that stops as
   soon as every remaining candidate is decided: its best exit so far is below the next
   node's distance, or the next node lies beyond the candidate's own limit (its radius,
   or for a threshold one the distance beyond which SIM provably falls below tau:
   :func:`reach_limits`). The direct runs along m's own edge come from
   :func:`~roadpubsub.roadnet.segment_sets.piece_distances_to_target`. Each exit value is a node
   distance plus the exit cost the reference adds, so dN(S, m) is the reference's bit for
   bit, and so are the scores and the delivery rule (the kernels of
   :mod:`roadpubsub.pruning.similarity`): the result equals
   :class:`~roadpubsub.pruning.brute.BruteMatcher` and
   :class:`~roadpubsub.pruning.kinds_reference.BooleanBruteMatcher` with ``set_locations``.

Steps 1-3 and the scoring run in one compiled kernel per batch (:func:`_set_match_kernel`):
no Python per message or per candidate. The two kinds differ only in the scoring step
(the prefilter with LB, the limit, the final rule), chosen by a flag of the rows. Every
index the kernel reads is checked before it runs (:func:`_checked_messages`, the
constructors), since compiled code does not check bounds.

A message with no candidate costs one pass over the occupied cells and no search.
:class:`PointsAndSets` joins a point matcher and a set matcher of one kind into one
``match(messages) -> Deliveries``; :func:`split_set_rows` splits a batch for it.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol, TypeVar

import numba
import numpy as np
import numpy.typing as npt

from roadpubsub.index.kinds import BooleanSubscriptions
from roadpubsub.index.model import KeywordRows, Messages, Subscriptions
from roadpubsub.index.set_cells import (
    CandidateWork,
    SetCellIndex,
    SetTermPostings,
    set_candidates,
    set_term_candidates,
)
from roadpubsub.index.spatial import PointFacts, SpatialIndex
from roadpubsub.index.terms import TermWeights
from roadpubsub.pruning.algorithm1 import cell_lower_bounds
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.pruning.kinds_reference import holds_all_keywords
from roadpubsub.pruning.set_locations import SetLocations
from roadpubsub.pruning.set_search import (
    SetCandidates,
    SetExits,
    SetSearchGraph,
    SetSearchWork,
    link_exits,
    set_exit_table,
    set_search_kernel,
    unlink_exits,
)
from roadpubsub.pruning.similarity import (
    delivered_kernel,
    sim_kernel,
    tsim_kernel,
    tsim_span_kernel,
)
from roadpubsub.roadnet.distance import entry_costs
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.lengths import check_dmax
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.segment_sets import SegmentSets, piece_distances_to_target
from roadpubsub.roadnet.settings import DEFAULTS

__all__ = ["PointsAndSets", "SetBooleanMatcher", "SetThresholdMatcher", "SetVerifier",
           "reach_limit_kernel", "reach_limits", "split_set_rows"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
Rows = TypeVar("Rows", bound=KeywordRows)


class _Matches(Protocol):
    def match(self, messages: Messages) -> Deliveries: ...


def split_set_rows(subs: Rows, locations: SetLocations) -> tuple[Rows, Rows, SegmentSets]:
    """(point rows, set rows, their sets in the same order) of a batch.

    Raises
    ------
    InputError
        A set row outside the batch.
    """
    locations.check_rows(len(subs))
    is_set = np.zeros(len(subs), dtype=bool)
    is_set[locations.rows] = True
    order = np.argsort(locations.rows, kind="stable")
    return (subs.take(np.flatnonzero(~is_set)), subs.take(locations.rows[order]),
            locations.sets.take(order))


class _MessageArgs(NamedTuple):
    """Per message: cell, projected x/y and din_in (the cell bound's inputs), edge and
    offset on the network, keyword CSR (every value checked by :func:`_checked_messages`)."""

    cell: IntArray
    x: FloatArray
    y: FloatArray
    din_in: FloatArray
    edge: IntArray
    offset: FloatArray
    kw_ptr: IntArray
    kw_terms: npt.NDArray[np.int32]


class _BoundArgs(NamedTuple):
    """The point index's cell bounds (columns of D and eta_minus by message cell) and the
    per-message output ``cell_lb``."""

    kappa: float
    D_t: FloatArray
    eta_t: FloatArray
    bbox: FloatArray
    cell_lb: FloatArray


class _NetArgs(NamedTuple):
    """The edges (for the message's entry costs) and the sets' pieces filed by edge (for
    the direct runs along the message's own edge): pieces ``piece_ptr[e]:piece_ptr[e+1]``
    lie on edge e, each of set ``piece_set`` over ``[piece_start, piece_end]``."""

    edge_u: npt.NDArray[np.int32]
    edge_v: npt.NDArray[np.int32]
    edge_length: FloatArray
    edge_twoway: npt.NDArray[np.bool_]
    piece_ptr: IntArray
    piece_set: IntArray
    piece_start: FloatArray
    piece_end: FloatArray


class _RowArgs(NamedTuple):
    """One kind's rows (set i is row i): ``boolean`` picks the scoring step; ``limit`` is
    the candidates' bound limit (Dmax, or the largest radius); ``mark`` a term workspace
    (all 0 between messages), ``tsim`` one per set."""

    boolean: bool
    alpha: FloatArray
    tau: FloatArray
    radius: FloatArray
    kw_ptr: IntArray
    kw_terms: npt.NDArray[np.int32]
    weights: FloatArray
    dmax: float
    tolerance: float
    limit: float
    mark: IntArray
    tsim: FloatArray


class _Out(NamedTuple):
    """Deliveries found (message index, row, distance, score) and the counters
    (candidates, verified, searches, settled)."""

    msg: IntArray
    row: IntArray
    distance: FloatArray
    score: FloatArray
    stats: IntArray


@numba.njit(cache=True, nogil=True, inline="always")
def reach_limit_kernel(alpha: float, tau: float, tsim: float, dmax: float,
                       tolerance: float) -> float:  # pragma: no cover - compiled
    """A distance beyond which a threshold row is provably not delivered (see
    :func:`reach_limits`).

    Rounding: SIM(d) = alpha * (1 - d / Dmax) + (1 - alpha) * TSIM is non-increasing in d
    in floating point too (each operation, rounded to nearest, is monotone in its
    argument), and so is the rule's ``d <= Dmax``; so the rule failing at the next float
    above the solved d fails at every larger d, which is all the search needs. The
    solved d itself may be off by rounding: it is only kept when that check holds.
    """
    if not alpha > 0.0:
        return dmax
    d = dmax * (1.0 - (tau - tolerance - (1.0 - alpha) * tsim) / alpha)
    if not np.isfinite(d):
        d = dmax
    d = min(max(d, 0.0), dmax)
    beyond = np.nextafter(d, np.inf)
    if delivered_kernel(sim_kernel(alpha, beyond, dmax, tsim), tau, beyond, dmax, tolerance):
        return dmax
    return d


@numba.njit(cache=True, nogil=True)
def _reach_limits_rows(alpha: FloatArray, tau: FloatArray, tsim: FloatArray, dmax: float,
                       tolerance: float, out: FloatArray) -> None:  # pragma: no cover
    for i in range(alpha.size):
        out[i] = reach_limit_kernel(alpha[i], tau[i], tsim[i], dmax, tolerance)


def reach_limits(alpha: FloatArray, tau: FloatArray, tsim: FloatArray, dmax: float,
                 tolerance: float) -> FloatArray:
    """Per threshold candidate, a distance beyond which it is provably not delivered.

    Solving SIM(d) = tau - tolerance for d gives the candidate; it is kept only where the
    delivery rule fails at the next float above it (SIM falls as d grows, also in floating
    point, so it fails at every larger d); elsewhere (alpha = 0, rounding) Dmax.
    """
    a, t, s = (np.ascontiguousarray(v, dtype=np.float64) for v in (alpha, tau, tsim))
    out = np.empty(a.size)
    _reach_limits_rows(a, t, s, float(dmax), float(tolerance), out)
    return out


@numba.njit(cache=True, nogil=True, inline="always")
def _direct_run(twoway: bool, target_offset: float, start: float,
                end: float) -> float:  # pragma: no cover - compiled
    """dN from a piece [start, end] of the message's own edge to the message along that
    edge alone: 0 on the piece, else the shorter run from either end (backwards only on
    a two-way edge). The reference's sums (``distance_to_target_kernel`` with no node
    reached, :func:`~roadpubsub.roadnet.segment_sets.piece_distances_to_target`):
    one subtraction each, so bit for bit."""
    if start <= target_offset <= end:
        return 0.0
    best = np.inf
    for p in (start, end):
        ahead = target_offset - p
        if ahead >= 0.0:
            best = min(best, ahead)
        elif twoway:
            best = min(best, -ahead)
    return best


@numba.njit(cache=True, nogil=True)
def _set_match_kernel(  # pragma: no cover - compiled
    msgs: _MessageArgs, bounds: _BoundArgs, net: _NetArgs, rows: _RowArgs,
    post: SetTermPostings, cwork: CandidateWork, exits: SetExits, graph: SetSearchGraph,
    cand: SetCandidates, swork: SetSearchWork, out: _Out, first: int,
) -> tuple[int, int]:
    """Match messages ``first, first + 1, ...`` against the rows' sets until done or until
    ``out`` could overflow (one message adds at most one delivery per set); returns (the
    next message, deliveries written). Workspaces are restored."""
    n_out = 0
    n_sets = cand.slot.size
    mark = rows.mark
    for i in range(first, msgs.edge.size):
        if n_out + n_sets > out.row.size:
            return i, n_out
        # 1. Candidates: filed under one of the message's terms (or always), LB(S, m)
        # within the limit.
        c = msgs.cell[i]
        cell_lower_bounds(c, msgs.x[i], msgs.y[i], msgs.din_in[i], bounds.kappa,
                          bounds.D_t[c], bounds.eta_t[c], bounds.bbox, bounds.cell_lb)
        k = set_term_candidates(post, bounds.cell_lb, rows.limit, msgs.kw_terms,
                                msgs.kw_ptr[i], msgs.kw_ptr[i + 1], cwork)
        out.stats[0] += k
        if k == 0:
            continue
        # 2. The scoring step's prefilter at distance LB (a lower bound, lowered by the
        # slack: every test below is monotone in the distance, so passing it is
        # necessary for delivery at the exact distance).
        for j in range(msgs.kw_ptr[i], msgs.kw_ptr[i + 1]):
            mark[msgs.kw_terms[j]] = 1
        nk = 0
        for q in range(k):
            s = cwork.sets[q]
            lb = cwork.bound[q]
            if rows.boolean:
                keep = lb <= rows.radius[s] and holds_all_keywords(
                    rows.kw_ptr, rows.kw_terms, s, mark, 1)
                lim = rows.radius[s]
                ts = 1.0
            else:
                ts = tsim_kernel(rows.kw_ptr, rows.kw_terms, rows.weights, s, mark, 1)
                keep = delivered_kernel(sim_kernel(rows.alpha[s], lb, rows.dmax, ts),
                                        rows.tau[s], lb, rows.dmax, rows.tolerance)
                lim = reach_limit_kernel(rows.alpha[s], rows.tau[s], ts, rows.dmax,
                                         rows.tolerance)
            if keep:
                cand.sets[nk] = s
                cand.slot[s] = nk
                cand.best[nk] = np.inf
                cand.limit[nk] = lim
                rows.tsim[nk] = ts
                nk += 1
        for j in range(msgs.kw_ptr[i], msgs.kw_ptr[i + 1]):
            mark[msgs.kw_terms[j]] = 0
        if nk == 0:
            continue
        out.stats[1] += nk
        out.stats[2] += 1
        # 3. Verification: the direct runs first (a message on a set decides it at 0, and
        # the search stops sooner), then one reverse search seeded with the message's
        # entry costs (those of roadnet.distance.entry_costs).
        e = msgs.edge[i]
        o = msgs.offset[i]
        twoway = net.edge_twoway[e]
        for p in range(net.piece_ptr[e], net.piece_ptr[e + 1]):
            q = cand.slot[net.piece_set[p]]
            if q >= 0:
                v = _direct_run(twoway, o, net.piece_start[p], net.piece_end[p])
                if v < cand.best[q]:
                    cand.best[q] = v
        length = net.edge_length[e]
        swork.seed_nodes[0] = net.edge_u[e]
        swork.seed_dist[0] = o
        swork.seed_nodes[1] = net.edge_v[e]
        swork.seed_dist[1] = (length - o if twoway or (o == length and length > 0.0)
                              else np.inf)
        link_exits(exits, cand, nk, swork)
        out.stats[3] += set_search_kernel(graph, exits, cand, nk, swork, 2)
        unlink_exits(exits, cand, nk, swork)
        # 4. The scoring step's rule at the exact distance (beyond a candidate's limit it
        # provably fails).
        for q in range(nk):
            s = cand.sets[q]
            cand.slot[s] = -1
            d = cand.best[q]
            if not d <= cand.limit[q]:
                continue
            if rows.boolean:
                hit = d <= rows.radius[s]
                score = 1.0
            else:
                score = sim_kernel(rows.alpha[s], d, rows.dmax, rows.tsim[q])
                hit = delivered_kernel(score, rows.tau[s], d, rows.dmax, rows.tolerance)
            if hit:
                out.msg[n_out] = i
                out.row[n_out] = s
                out.distance[n_out] = d
                out.score[n_out] = score
                n_out += 1
    return msgs.edge.size, n_out


@numba.njit(cache=True, nogil=True, inline="always")
def _fails_at_zero(alpha: float, tau: float, tsim: float, dmax: float,
                   tolerance: float) -> bool:  # pragma: no cover - compiled
    """Whether a threshold row of TSIM at most ``tsim`` is provably never delivered.

    At distance 0 the score is the largest it can be: SIM(d) is non-increasing in d in
    floating point (:func:`reach_limit_kernel`), and non-decreasing in TSIM (a product by
    1 - alpha >= 0 and a sum, each rounded monotonically). So a score below tau -
    tolerance here fails step 2's prefilter (``delivered_kernel`` at LB >= 0) for every
    distance and every TSIM up to ``tsim``. A NaN score (a row whose weights sum to 0)
    is not claimed to fail: such a row is filed as if it could be delivered.
    """
    return sim_kernel(alpha, 0.0, dmax, tsim) < tau - tolerance


@numba.njit(cache=True, nogil=True)
def _threshold_filing(  # pragma: no cover - compiled
    alpha: FloatArray, tau: FloatArray, kw_ptr: IntArray, kw_terms: npt.NDArray[np.int32],
    weights: FloatArray, dmax: float, tolerance: float, freq: IntArray, mark: IntArray,
    posted: npt.NDArray[np.bool_], always: npt.NDArray[np.bool_],
) -> None:
    """Which keywords file each threshold row (``posted``, per keyword entry) and which
    rows go in the always lists (``always``); ``mark`` (all 0) is restored.

    Safety: a row sharing no keyword with the message has TSIM as summed with nothing
    marked; when that fails :func:`_fails_at_zero` the row needs a shared keyword. The
    keywords left unfiled, U, are grown greedily (the most frequent first: they cost
    the most postings) while a message sharing *all* of U still fails. TSIM sums the
    row's weights in the row's order, and a sum of non-negative floats in one order
    over a subset of the marked terms is at most the sum over all of them (each partial
    sum is, rounding being monotone), so any message sharing only keywords of U has a
    TSIM at most TSIM(U) and fails too: a message the row can be delivered to shares a
    filed keyword, and the row is listed. A row with every keyword in U is never
    delivered and is filed nowhere (step 2 would drop it for every message).
    """
    stamp = 1
    order = np.empty(kw_terms.size, np.int64)
    for s in range(alpha.size):
        a, b = kw_ptr[s], kw_ptr[s + 1]
        ts = tsim_span_kernel(kw_terms, weights, a, b, mark, stamp)
        if not _fails_at_zero(alpha[s], tau[s], ts, dmax, tolerance):
            always[s] = True
            continue
        # The row's entries by frequency, most frequent first (ties: lower term first).
        n = b - a
        for j in range(n):
            order[j] = a + j
        for j in range(1, n):
            x = order[j]
            q = j
            while q > 0 and (freq[kw_terms[order[q - 1]]] < freq[kw_terms[x]] or (
                    freq[kw_terms[order[q - 1]]] == freq[kw_terms[x]]
                    and kw_terms[order[q - 1]] > kw_terms[x])):
                order[q] = order[q - 1]
                q -= 1
            order[q] = x
        for q in range(n):
            j = order[q]
            t = kw_terms[j]
            if mark[t] == stamp:  # a repeated keyword already left in U
                continue
            mark[t] = stamp
            ts = tsim_span_kernel(kw_terms, weights, a, b, mark, stamp)
            if not _fails_at_zero(alpha[s], tau[s], ts, dmax, tolerance):
                mark[t] = 0
                posted[j] = True
        for j in range(a, b):
            mark[kw_terms[j]] = 0


@numba.njit(cache=True, nogil=True)
def _boolean_filing(  # pragma: no cover - compiled
    kw_ptr: IntArray, kw_terms: npt.NDArray[np.int32], freq: IntArray,
    posted: npt.NDArray[np.bool_], always: npt.NDArray[np.bool_],
) -> None:
    """Each boolean row filed under its rarest keyword (ties: the lower term id): it is
    delivered only to messages holding every one of its keywords
    (``holds_all_keywords`` in step 2), so such a message holds that one. A row without
    keywords holds them all vacuously: always."""
    for s in range(kw_ptr.size - 1):
        a, b = kw_ptr[s], kw_ptr[s + 1]
        if a == b:
            always[s] = True
            continue
        best = a
        for j in range(a + 1, b):
            t, u = kw_terms[j], kw_terms[best]
            if freq[t] < freq[u] or (freq[t] == freq[u] and t < u):
                best = j
        posted[best] = True


def _file_rows(index: SetCellIndex, rows: _RowArgs) -> SetTermPostings:
    """The keyword postings of one kind's rows (:func:`_threshold_filing`,
    :func:`_boolean_filing`), term ids below ``rows.mark.size``."""
    n, n_terms = rows.kw_ptr.size - 1, int(rows.mark.size)
    freq = np.bincount(rows.kw_terms, minlength=n_terms).astype(np.int64)
    posted = np.zeros(rows.kw_terms.size, dtype=bool)
    always = np.zeros(n, dtype=bool)
    if rows.boolean:
        _boolean_filing(rows.kw_ptr, rows.kw_terms, freq, posted, always)
    else:
        _threshold_filing(rows.alpha, rows.tau, rows.kw_ptr, rows.kw_terms, rows.weights,
                          rows.dmax, rows.tolerance, freq, rows.mark, posted, always)
    owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(rows.kw_ptr))
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner[posted], minlength=n), out=ptr[1:])
    return index.term_postings(ptr, rows.kw_terms[posted].astype(np.int64), always, n_terms)


def _checked_term_postings(post: SetTermPostings, n_terms: int, n_cells: int,
                           n_sets: int) -> SetTermPostings:
    """``post`` after checking every index the kernel reads with it (term ids of the
    messages are below ``n_terms``; cells index the cell bounds; sets the workspaces).

    Raises
    ------
    InputError
        Postings that do not fit the rows, cells or sets.
    """
    def csr(ptr: IntArray, size: int, n: int) -> bool:
        return (ptr.ndim == 1 and ptr.size == n + 1 and int(ptr[0]) == 0
                and int(ptr[-1]) == size and bool(np.all(np.diff(ptr) >= 0)))

    def within(a: IntArray, n: int) -> bool:
        return a.size == 0 or (int(a.min()) >= 0 and int(a.max()) < n)

    ok = (csr(post.term_ptr, post.ent_cell.size, n_terms)
          and csr(post.ent_ptr, post.ent_set.size, post.ent_cell.size)
          and csr(post.always_ptr, post.always_set.size, n_cells)
          and within(post.ent_cell, n_cells) and within(post.ent_set, n_sets)
          and within(post.always_set, n_sets) and within(post.always_occupied, n_cells))
    if not ok:
        msg = (f"set keyword postings must fit {n_terms} terms, {n_cells} cells and "
               f"{n_sets} sets")
        raise InputError(msg)
    return post


def _checked_rows(n: int, kw_ptr: IntArray, kw_terms: npt.NDArray[np.int32],
                  n_terms: int, what: str) -> None:
    """Raise InputError unless ``kw_ptr``/``kw_terms`` is a CSR of ``n`` rows of term ids
    below ``n_terms`` (the kernel indexes with them unchecked)."""
    ok = (kw_ptr.ndim == 1 and kw_ptr.size == n + 1 and (n + 1 == 0 or kw_ptr[0] == 0)
          and kw_ptr[-1] == kw_terms.size and bool(np.all(np.diff(kw_ptr) >= 0)))
    if not ok or (kw_terms.size and not (kw_terms.min() >= 0 and kw_terms.max() < n_terms)):
        msg = f"{what}: keyword rows must be a CSR of term ids below {n_terms}"
        raise InputError(msg)


class SetVerifier:
    """Candidates and exact distances of segment sets for one message at a time.

    Parameters
    ----------
    network
        The network the sets lie on.
    sets
        The sets (set i is the location of subscription row i of the caller's batch).
    spatial
        Cells and bounds of ``network`` (built when omitted).
    """

    def __init__(self, network: RoadNetwork, sets: SegmentSets, *,
                 spatial: SpatialIndex | None = None) -> None:
        self.network, self.sets = network, sets
        self.spatial = spatial or SpatialIndex.build(network)
        if self.spatial.cells.edge_cell.size != network.n_edges:
            msg = "the spatial index belongs to another network (edge counts differ)"
            raise InputError(msg)
        edge = sets.edge.astype(np.int64)
        if edge.size and not (edge.min() >= 0 and edge.max() < network.n_edges):
            msg = f"segment sets: piece edges must lie in [0, {network.n_edges})"
            raise InputError(msg)
        #: The sets filed by cell.
        self.index = SetCellIndex.build(self.spatial.cells, sets)
        self._post = self.index.postings()
        b = self.spatial.bounds
        # Column cm of D and eta_minus (from every cell to the message's), contiguous.
        self._D_t = np.ascontiguousarray(b.D.T)
        self._eta_t = np.ascontiguousarray(b.eta_minus.T)
        self._cell_lb = np.empty(self.spatial.cells.n_cells)
        self._bounds = _BoundArgs(float(b.kappa), self._D_t, self._eta_t,
                                  np.ascontiguousarray(self.spatial.cells.bbox,
                                                       dtype=np.float64), self._cell_lb)
        self._work = CandidateWork.of(len(sets))
        rev = network.adjacency(reverse=True)
        self._graph = SetSearchGraph(rev.indptr, rev.indices, rev.weights)
        #: Every set's exits (node, cost), built once.
        self.exits = set_exit_table(network, sets)
        self._work_search = SetSearchWork.of(network.n_nodes, int(rev.indices.size),
                                             int(self.exits.node.size))
        n = len(sets)
        self._cand = SetCandidates(np.empty(n, np.int64), np.full(n, -1, np.int64),
                                   np.empty(n), np.empty(n))
        by_edge = np.argsort(edge, kind="stable")
        piece_ptr = np.zeros(network.n_edges + 1, dtype=np.int64)
        np.cumsum(np.bincount(edge, minlength=network.n_edges), out=piece_ptr[1:])
        self._net = _NetArgs(network.edge_u, network.edge_v, network.edge_length,
                             network.edge_twoway, piece_ptr,
                             sets.owner.astype(np.int64)[by_edge],
                             np.ascontiguousarray(sets.start[by_edge], dtype=np.float64),
                             np.ascontiguousarray(sets.end[by_edge], dtype=np.float64))
        self._no_nodes = np.full(network.n_nodes, np.inf)  # direct runs only

    @property
    def nbytes(self) -> int:
        """Memory of the set index, the sets' pieces and exits and the pieces by edge in
        bytes (not the shared cells, nor the per-matcher search workspaces)."""
        s, net = self.sets, self._net
        return self.index.nbytes + self.exits.nbytes + sum(int(a.nbytes) for a in (
            s.ptr, s.edge, s.start, s.end, net.piece_ptr, net.piece_set, net.piece_start,
            net.piece_end))

    def message_facts(self, messages: Messages) -> PointFacts:
        """Cell, position and din_in of each message."""
        return self.spatial.facts(messages.points)

    def cell_bounds(self, facts: PointFacts, i: int) -> FloatArray:
        """dNmin(c, m) of every cell c for message i of ``facts`` (the point index's cell
        bound, :func:`~roadpubsub.pruning.algorithm1.cell_lower_bounds`; a view reused per call)."""
        c = int(facts.cell[i])
        cell_lower_bounds(c, float(facts.x[i]), float(facts.y[i]), float(facts.din_in[i]),
                          self.spatial.bounds.kappa, self._D_t[c], self._eta_t[c],
                          self.spatial.cells.bbox, self._cell_lb)
        return self._cell_lb

    def candidates(self, facts: PointFacts, i: int, limit: float
                   ) -> tuple[IntArray, FloatArray]:
        """(sets, lower bounds) of the sets whose LB is within ``limit`` of message i of
        ``facts`` (each once; bounds already lowered by the slack)."""
        k = set_candidates(self._post, self.cell_bounds(facts, i), float(limit), self._work)
        return self._work.sets[:k].copy(), self._work.bound[:k].copy()

    def distances(self, point: EdgePoints, cand: IntArray, limits: FloatArray
                  ) -> tuple[FloatArray, int]:
        """(dN from each candidate set to the message at ``point``, +inf where it exceeds
        the candidate's limit; nodes settled by the one search).

        A plain (per message, from Python) use of the search the matchers' kernel runs:
        the direct runs from
        :func:`~roadpubsub.roadnet.segment_sets.piece_distances_to_target` with no node
        reached, then :func:`~roadpubsub.pruning.set_search.set_search_kernel`.
        """
        cand = np.asarray(cand, dtype=np.int64)
        if np.unique(cand).size != cand.size or (cand.size and not (
                cand.min() >= 0 and cand.max() < len(self.sets))):
            msg = f"candidates must be distinct sets of the {len(self.sets)}"
            raise InputError(msg)
        sets, net, c, k = self.sets, self.network, self._cand, cand.size
        limits = np.asarray(limits, dtype=np.float64)
        c.sets[:k] = cand
        c.slot[cand] = np.arange(k)
        c.best[:k] = np.inf
        c.limit[:k] = limits
        try:
            on = np.flatnonzero(sets.edge == point.edge[0])
            on = on[c.slot[sets.owner[on]] >= 0]
            if on.size:
                run = piece_distances_to_target(net, self._no_nodes, point, sets.edge[on],
                                                sets.start[on], sets.end[on])
                np.minimum.at(c.best, c.slot[sets.owner[on]], run)
            ua, ca, ub, cb = entry_costs(net, point)
            w = self._work_search
            w.seed_nodes[:] = (ua[0], ub[0])
            w.seed_dist[:] = (ca[0], cb[0])
            link_exits(self.exits, c, k, w)
            settled = set_search_kernel(self._graph, self.exits, c, k, w, 2)
            unlink_exits(self.exits, c, k, w)
            best = c.best[:k].copy()
        finally:
            c.slot[cand] = -1
        best[best > limits] = np.inf
        return best, int(settled)

    def term_postings(self, rows: _RowArgs) -> SetTermPostings:
        """The rows' sets filed by keyword and cell (one kind's rows, set i is row i),
        checked for :meth:`match`."""
        post = _file_rows(self.index, rows)
        return _checked_term_postings(post, int(rows.mark.size),
                                      self.spatial.cells.n_cells, len(self.sets))

    def match(self, messages: Messages, rows: _RowArgs,
              post: SetTermPostings) -> tuple[Deliveries, IntArray]:
        """Deliveries (subscription ids are row numbers) of ``messages`` to the rows
        (one kind's, :class:`_RowArgs`, filed as ``post`` by :meth:`term_postings`)
        through the one kernel, and the counters (candidates, verified, searches,
        settled)."""
        facts = self.message_facts(messages)
        msgs = _checked_messages(self.network, messages, facts, rows.mark.size)
        n_sets = len(self.sets)
        cap = max(2 * n_sets, 4096)
        out = _Out(np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(cap),
                   np.empty(cap), np.zeros(4, np.int64))
        parts: list[Deliveries] = []
        first = 0
        while first < len(messages):
            first, n = _set_match_kernel(msgs, self._bounds, self._net, rows, post,
                                         self._work, self.exits, self._graph, self._cand,
                                         self._work_search, out, first)
            if n:
                parts.append(Deliveries(messages.ids[out.msg[:n]], out.row[:n].copy(),
                                        out.distance[:n].copy(), out.score[:n].copy()))
        return Deliveries.concat(parts), out.stats


def _checked_messages(network: RoadNetwork, messages: Messages, facts: PointFacts,
                      n_terms: int) -> _MessageArgs:
    """The kernel's message arrays, every index checked (the kernel reads them unchecked).

    Raises
    ------
    InputError
        An edge outside the network, an offset outside its edge, or keyword rows that are
        not a CSR of term ids (terms beyond ``n_terms`` are unknown: dropped, they match
        no subscription keyword).
    """
    edge = messages.points.edge.astype(np.int64)
    offset = np.ascontiguousarray(messages.points.offset, dtype=np.float64)
    n = edge.size
    if n and not (edge.min() >= 0 and edge.max() < network.n_edges):
        msg = f"messages: edges must lie in [0, {network.n_edges})"
        raise InputError(msg)
    if n and not bool(np.all((offset >= 0.0) & (offset <= network.edge_length[edge]))):
        msg = "messages: offsets must lie on their edges"
        raise InputError(msg)
    kw_ptr = messages.kw_ptr.astype(np.int64)
    kw_terms = messages.kw_terms.astype(np.int32)
    _checked_rows(n, kw_ptr, kw_terms, np.iinfo(np.int32).max, "messages")
    known = (kw_terms >= 0) & (kw_terms < n_terms)
    if not known.all():  # keep only the known terms, the CSR rebuilt
        row = np.repeat(np.arange(n), np.diff(kw_ptr))[known]
        kw_terms = kw_terms[known]
        kw_ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(row, minlength=n), out=kw_ptr[1:])
    return _MessageArgs(facts.cell.astype(np.int64), np.ascontiguousarray(facts.x),
                        np.ascontiguousarray(facts.y), np.ascontiguousarray(facts.din_in),
                        edge, offset, kw_ptr, kw_terms)


def _stats() -> dict[str, int]:
    return {"messages": 0, "candidates": 0, "verified": 0, "searches": 0, "settled": 0}


def _count(stats: dict[str, int], n_messages: int, counters: IntArray) -> None:
    stats["messages"] += n_messages
    for name, v in zip(("candidates", "verified", "searches", "settled"), counters,
                       strict=True):
        stats[name] += int(v)


def _renamed(found: Deliveries, ids: IntArray) -> Deliveries:
    """``found`` (subscription ids are row numbers) with the rows' ids, sorted."""
    return Deliveries.concat([Deliveries(found.message_id, ids[found.subscription_id],
                                         found.distance, found.score)]) if len(found) \
        else Deliveries.empty()


class _SetRowsMatcher:
    """What the threshold and boolean set matchers share: the rows filed by keyword and
    cell once built, and the match through the verifier (subclasses set ``subs``,
    ``verifier`` and ``_rows``, then call :meth:`_file`)."""

    subs: Subscriptions | BooleanSubscriptions
    verifier: SetVerifier
    _rows: _RowArgs

    def _file(self) -> None:
        #: The sets filed by keyword and cell.
        self.term_postings = self.verifier.term_postings(self._rows)
        self.stats = _stats()

    def match(self, messages: Messages) -> Deliveries:
        """Deliveries sorted by (message_id, subscription_id)."""
        if len(self.subs) == 0 or len(messages) == 0:
            return Deliveries.empty()
        found, counters = self.verifier.match(messages, self._rows, self.term_postings)
        _count(self.stats, len(messages), counters)
        return _renamed(found, self.subs.ids)


class SetThresholdMatcher(_SetRowsMatcher):
    """Threshold subscriptions located on segment sets, matched through the set index.

    Parameters
    ----------
    network, weights
        The road network and the vocabulary of ``subs``.
    subs
        The subscriptions (each row's point is not used).
    sets
        Row i's location is set i (``len(sets) == len(subs)``).
    dmax_m
        Dmax in metres.
    spatial
        Cells and bounds to share with the point indexes (built when omitted).
    tolerance
        The delivery rule's score tolerance (:func:`~roadpubsub.pruning.similarity.delivered`).

    Attributes
    ----------
    stats
        Work since the start: messages, candidates (sets filed under one of the
        message's keywords or always, within the bound), verified (left after the score
        bound), searches, settled nodes.
    """

    name = "sets"

    def __init__(self, network: RoadNetwork, subs: Subscriptions, sets: SegmentSets,
                 weights: TermWeights, *, dmax_m: float, spatial: SpatialIndex | None = None,
                 tolerance: float = DEFAULTS.score_tolerance) -> None:
        if len(sets) != len(subs):
            msg = f"one set per subscription is needed: {len(sets)} sets, {len(subs)} rows"
            raise InputError(msg)
        self.dmax_m = check_dmax(dmax_m)
        self.subs, self.weights, self.tolerance = subs, weights, float(tolerance)
        self.verifier = SetVerifier(network, sets, spatial=spatial)
        w = np.ascontiguousarray(weights.weights, dtype=np.float64)
        n = len(subs)
        kw_ptr, kw_terms = subs.kw_ptr.astype(np.int64), subs.kw_terms.astype(np.int32)
        _checked_rows(n, kw_ptr, kw_terms, w.size, "threshold subscriptions")
        self._rows = _RowArgs(False, np.ascontiguousarray(subs.alpha, dtype=np.float64),
                              np.ascontiguousarray(subs.tau, dtype=np.float64),
                              np.empty(0), kw_ptr, kw_terms, w, self.dmax_m, self.tolerance,
                              self.dmax_m, np.zeros(w.size + 1, np.int64), np.empty(n))
        self._file()


class SetBooleanMatcher(_SetRowsMatcher):
    """Boolean subscriptions located on segment sets, matched through the set index.

    Parameters as :class:`SetThresholdMatcher` (``subs`` boolean; every radius at most
    Dmax). Deliveries carry the distance and a score of 1.0.
    """

    name = "sets"

    def __init__(self, network: RoadNetwork, subs: BooleanSubscriptions, sets: SegmentSets,
                 weights: TermWeights, *, dmax_m: float,
                 spatial: SpatialIndex | None = None) -> None:
        if len(sets) != len(subs):
            msg = f"one set per subscription is needed: {len(sets)} sets, {len(subs)} rows"
            raise InputError(msg)
        self.dmax_m = check_dmax(dmax_m)
        if np.any(subs.radius > self.dmax_m):
            msg = f"boolean radii must be at most Dmax = {self.dmax_m:g} m"
            raise InputError(msg)
        self.subs, self.weights = subs, weights
        self.verifier = SetVerifier(network, sets, spatial=spatial)
        n = len(subs)
        kw_ptr, kw_terms = subs.kw_ptr.astype(np.int64), subs.kw_terms.astype(np.int32)
        _checked_rows(n, kw_ptr, kw_terms, len(weights) + 1, "boolean subscriptions")
        radius = np.ascontiguousarray(subs.radius, dtype=np.float64)
        self._rows = _RowArgs(True, np.empty(0), np.empty(0), radius, kw_ptr, kw_terms,
                              np.empty(0), self.dmax_m, 0.0,
                              float(radius.max(initial=0.0)),
                              np.zeros(len(weights) + 1, np.int64), np.empty(n))
        self._file()


class PointsAndSets:
    """One kind's point matcher and set matcher as one: ``match`` joins their deliveries
    (sorted by message and subscription); ``stats`` is the point matcher's,
    ``set_stats`` the set matcher's counters.

    Parameters
    ----------
    points, sets
        Matchers with ``match(messages) -> Deliveries`` (None: no such rows).
    """

    def __init__(self, points: _Matches | None, sets: _Matches | None) -> None:
        self.points, self.sets = points, sets

    @property
    def stats(self) -> Any:
        """The point matcher's ``stats`` (None without one)."""
        return getattr(self.points, "stats", None)

    @property
    def set_stats(self) -> dict[str, int]:
        """The set matcher's counters (empty without one)."""
        return dict(getattr(self.sets, "stats", None) or {})

    def match(self, messages: Messages) -> Deliveries:
        """Deliveries of both, sorted by (message_id, subscription_id)."""
        parts = [m.match(messages) for m in (self.points, self.sets) if m is not None]
        parts = [p for p in parts if len(p)]
        return parts[0] if len(parts) == 1 else Deliveries.concat(parts)
