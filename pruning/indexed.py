"""Prune-then-verify matchers over the basic (BIAB) and enhanced (EIAB) architectures.

For each message: Algorithm 1 (:mod:`roadpubsub.pruning.algorithm1`) over the index's postings, the
same distance and prefix tests (Lemmas 1 and 3) over the index's small delta of recent
subscriptions, then Algorithm 2 (:mod:`roadpubsub.pruning.algorithm2`) with the one scoring
implementation (:mod:`roadpubsub.pruning.similarity`). The whole per-message loop runs compiled, in
chunks of messages, so a message costs no Python work. Results equal the reference
matcher's.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NamedTuple

import numba
import numpy as np
import numpy.typing as npt

from roadpubsub.index.base import SubscriptionIndex
from roadpubsub.index.bia import BasicIndex
from roadpubsub.index.eia import EnhancedIndex
from roadpubsub.index.limits import distance_upper_bound_kernel
from roadpubsub.index.model import InvalidMessageError, Messages
from roadpubsub.index.slot_record import (
    CHAIN_INT32_COLUMN,
    FACT_COLUMNS,
    RECORD_WIDTH,
    SUB_COLUMNS,
    TEXT_INT32_COLUMN,
    text_span,
)
from roadpubsub.pruning.algorithm1 import (
    CANDIDATES,
    COUNTER_NAMES,
    EDGE_RECORD_WIDTH,
    MAX_STAMP,
    bia_candidates,
    edge_record,
    eia_candidates,
    network_lower_bound,
)
from roadpubsub.pruning.algorithm2 import VerifySearch, score_candidates, verify_candidates
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.pruning.kernel_args import (
    BiaCellArrays,
    BoundArrays,
    DeltaArrays,
    EdgeArrays,
    EiaCellArrays,
    GraphArrays,
    IndexArrays,
    LaneArrays,
    LayoutArrays,
    MatchLimits,
    MessageArrays,
    MessageProbe,
    OutputArrays,
    QueueArrays,
    ScratchArrays,
    SlotArrays,
)
from roadpubsub.pruning.lanes import (
    CallTiming,
    LaneClock,
    assemble_kernel,
    delivery_starts,
    guided_runs,
)
from roadpubsub.pruning.similarity import tsim_kernel, tsim_span_kernel
from roadpubsub.roadnet._prefetch import prefetch
from roadpubsub.roadnet.dijkstra_kernels import BucketQueue
from roadpubsub.roadnet.distance import NodeSearch, dead_ends
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.network import spatial_order
from roadpubsub.roadnet.settings import DEFAULTS

__all__ = ["STAT_NAMES", "IndexMatcher", "MatchStats", "default_threads"]

#: Per-message statistics: the pruning counters, then verification figures.
STAT_NAMES = (*COUNTER_NAMES, "deliveries", "vertices_settled", "candidates_verified")
_DELIVERIES = len(COUNTER_NAMES)
_SETTLED = _DELIVERIES + 1
_VERIFIED = _DELIVERIES + 2
# Columns of the slot record (index.slot_record), constants for the kernel.
ALPHA_COLUMN = len(FACT_COLUMNS) + SUB_COLUMNS.index("alpha")
TAU_COLUMN = len(FACT_COLUMNS) + SUB_COLUMNS.index("tau")
CHAIN_OFFSET_COLUMN = FACT_COLUMNS.index("chain_offset")
#: Passing edge groups Algorithm 1 (EIA) collects before scanning their postings.
_PASS_BATCH = 1024
#: How many candidates (or postings) ahead the kernels prefetch a row's data.
_AHEAD = 16
_CANDIDATES = CANDIDATES

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
#: The result's columns: message id, subscription id, distance (m), score.
_Result = tuple[IntArray, IntArray, FloatArray, FloatArray]
#: A lane keeps its output buffers for the next call (no page faults on reuse) unless
#: it filled more rows than this (about 33 bytes each) in the last one.
_KEPT_OUT_ROWS = 1 << 22


@dataclass(frozen=True, eq=False)
class MatchStats:
    """Per-message counters: ``values[i, j]`` is statistic ``names[j]`` of message i."""

    message_id: IntArray
    values: IntArray
    names: tuple[str, ...] = STAT_NAMES

    def column(self, name: str) -> IntArray:
        """One statistic for every message."""
        return self.values[:, self.names.index(name)]

    def totals(self) -> dict[str, int]:
        """Each statistic summed over the messages."""
        return {n: int(v) for n, v in zip(self.names, self.values.sum(axis=0), strict=True)}


@numba.njit(cache=True, nogil=True)
def _delta_candidates(  # pragma: no cover - compiled
    probe: MessageProbe, bounds: BoundArrays, delta: DeltaArrays, cell_lb: FloatArray,
    term_mark: IntArray, stamp: int, limits: MatchLimits, out_rows: IntArray,
    out_limit: FloatArray,
) -> int:
    """Recent subscriptions passing Lemma 1 (distance <= DNlimit) and Lemma 3 (a shared
    keyword, or the wildcard); ``cell_lb``: dNmin(c, m) of every cell (Eq. 5 and the
    border bound, as Algorithm 1 computed it for this message)."""
    m_cell, m_x, m_y, m_din = probe.cell, probe.x, probe.y, probe.din_in
    kappa, D_col, eta_col = bounds.kappa, bounds.D_t[m_cell], bounds.eta_t[m_cell]
    slack_abs, slack_rel = limits.slack_abs, limits.slack_rel
    d_x, d_y, d_cell, d_din_out = delta.x, delta.y, delta.cell, delta.din_out
    d_limit, d_wild, d_kw_ptr, d_kw_terms = (delta.dn_limit, delta.wildcard, delta.kw_ptr,
                                             delta.kw_terms)
    n = 0
    for r in range(d_x.size):
        c = d_cell[r]
        lim = d_limit[r]
        keep_at = lim + slack_abs + slack_rel * abs(lim)
        # Lemma 2 first, as Algorithm 1 prunes a cell: dNmin(c, m) bounds dN from every
        # point of an edge of cell c (its box holds the edges' boxes; the slack covers
        # the rounding, as there), so a row whose cell lies beyond its limit is passed
        # over with one load instead of its own distance. A moving fleet keeps tens of
        # thousands of rows here between compactions, each scanned for every message.
        if cell_lb[c] > keep_at:
            continue
        dx = d_x[r] - m_x
        dy = d_y[r] - m_y
        de = np.sqrt(dx * dx + dy * dy)
        lb = network_lower_bound(de, c == m_cell, kappa, eta_col[c], d_din_out[r], D_col[c],
                                 m_din)
        if lb > keep_at:
            continue
        shares = d_wild[r]
        k = d_kw_ptr[r]
        while not shares and k < d_kw_ptr[r + 1]:
            t = d_kw_terms[k]
            shares = t < term_mark.size and term_mark[t] == stamp
            k += 1
        if shares:
            out_rows[n] = r
            out_limit[n] = lim
            n += 1
    return n


@numba.njit(cache=True, nogil=True)
def _match_batch(  # pragma: no cover - compiled
    is_eia: bool, start: int, stop: int, order: IntArray, msg: MessageArrays,
    index: IndexArrays, weights: FloatArray, limits: MatchLimits, search: VerifySearch,
    lane: LaneArrays, stamp: int, n_out: int,
) -> tuple[int, int, int]:
    """Match messages ``order[start:stop]``; stop early when the buffers might overflow.

    Two phases over the chunk: first Algorithm 1 and the verification limits for every
    message (the postings stay in cache), then Algorithm 2 for every message (the graph
    stays in cache), scoring from the TSIM computed for the limits (a little faster than
    interleaving the phases per message; BENCHMARKS.md).

    Returns (next position in ``order``, rows written to ``lane.out``, stamp); next ==
    start means the output buffers must grow. Statistics (``lane.stats``, a row per
    message) and output rows name messages by input index. ``limits.phases`` < 3 stops
    each message early, for :meth:`IndexMatcher.phase_seconds`: 1 after its candidates
    (Algorithm 1 and the delta scan), 2 after their TSIM and limits (nothing searched,
    nothing written).
    """
    bounds, slots, delta = index.bounds, index.slots, index.delta
    scratch, queue, out, stats = lane.scratch, lane.queue, lane.out, lane.stats
    dmax, tolerance, phases = limits.dmax, limits.tolerance, limits.phases
    slack_abs, slack_rel = limits.slack_abs, limits.slack_rel
    m_chain, m_chain_offset, m_x, m_y = msg.chain, msg.chain_offset, msg.x, msg.y
    m_cell, m_din, m_kw_ptr, m_kw_terms = msg.cell, msg.din_in, msg.kw_ptr, msg.kw_terms
    s_rec, s_rec_int = slots.record, slots.record_int
    s_kw_ptr, s_kw_terms = slots.kw_ptr, slots.kw_terms
    d_chain, d_chain_offset, d_alpha, d_tau = (delta.chain, delta.chain_offset, delta.alpha,
                                               delta.tau)
    d_kw_ptr, d_kw_terms = delta.kw_ptr, delta.kw_terms
    cand, cand_dnub, cand_lb = scratch.cand, scratch.cand_dnub, scratch.cand_lb
    term_mark = scratch.term_mark
    term_slots, d_rows, d_lim = scratch.term_slots, scratch.d_rows, scratch.d_lim
    q_ptr, q_row, q_src, q_edge, q_off = (queue.ptr, queue.row, queue.src, queue.edge,
                                          queue.offset)
    q_lim, q_alpha, q_tau, q_tsim, q_dist = (queue.limit, queue.alpha, queue.tau, queue.tsim,
                                             queue.dist)
    out_msg, out_src, out_row, out_dist, out_score = (out.msg, out.src, out.row, out.dist,
                                                      out.score)
    capacity = out_msg.size
    q_capacity = q_row.size
    # Phase 1: candidates and their verification limits, queued per message.
    q_n = 0
    end = stop
    for p in range(start, stop):
        i = order[p]
        stamp += 1
        counters = stats[i]
        n_terms = 1
        term_slots[0] = 0  # the wildcard
        for k in range(m_kw_ptr[i], m_kw_ptr[i + 1]):
            t = m_kw_terms[k]
            term_slots[n_terms] = t + 1
            n_terms += 1
            if t < term_mark.size:
                term_mark[t] = stamp
        probe = MessageProbe(m_cell[i], m_x[i], m_y[i], m_din[i], term_slots[:n_terms])
        if is_eia:
            n_main = eia_candidates(probe, bounds, index.eia_cells, index.edges, index.layout,
                                    slots, limits, scratch, stamp, counters)
        else:
            n_main = bia_candidates(probe, bounds, index.bia_cells, index.edges, index.layout,
                                    slots, limits, scratch, stamp, counters)
        n_delta = _delta_candidates(probe, bounds, delta, scratch.cell_lb, term_mark, stamp,
                                    limits, d_rows, d_lim)
        counters[_CANDIDATES] += n_delta
        n_cand = n_main + n_delta
        if q_n + n_cand > q_capacity or n_out + q_n + n_cand > capacity:
            # Undo this message's counters; it is matched by the next call.
            for j in range(counters.size):
                counters[j] = 0
            end = p
            break
        q_ptr[p - start] = q_n
        if phases == 1:
            continue
        # Verification limits. EIA knows each candidate's exact TSIM before any distance is
        # computed, so the exact distance limit of the pair (Eq. 13 with TSIM in place of
        # TUB, never above DNUB) bounds its search; BIA has no such bound and uses Dmax.
        # A candidate whose limit is below 0 cannot be delivered at any distance, nor can
        # one (EIA) whose lower bound on dN from Algorithm 1 exceeds that limit: the same
        # test as Lemma 6 with the exact limit in place of DNUB(s|t), with the same slack
        # for the bound's rounding (module pruning.algorithm1), so it drops no pair the
        # search would deliver. On the dense workload the search then gets 2,909 of the
        # 4,624 candidates per message instead of 3,880 (BENCHMARKS.md).
        for j in range(n_cand):
            if j < n_main:
                # Each candidate's row of the slot record (alpha, tau, chain point and
                # where its keywords start; read by Algorithm 1 for EIA, so often still
                # cached) and its keywords are cache misses: start loading those of
                # candidates a few places ahead. The keywords' span comes from the row
                # (index.slot_record.text_span), not from kw_ptr (one miss fewer).
                if j + _AHEAD < n_main:
                    prefetch(s_rec, RECORD_WIDTH * int(cand[j + _AHEAD]))
                if j + _AHEAD // 2 < n_main:
                    r_half = int(cand[j + _AHEAD // 2])
                    prefetch(s_kw_terms, text_span(s_rec_int[r_half, TEXT_INT32_COLUMN],
                                                   s_kw_ptr, r_half)[0])
                r = int(cand[j])
                k0, k1 = text_span(s_rec_int[r, TEXT_INT32_COLUMN], s_kw_ptr, r)
                tsim = tsim_span_kernel(s_kw_terms, weights, k0, k1, term_mark, stamp)
                alpha, tau = s_rec[r, ALPHA_COLUMN], s_rec[r, TAU_COLUMN]
                lim = dmax
                if is_eia:
                    lim = min(cand_dnub[j], distance_upper_bound_kernel(
                        alpha, tau - tolerance, tsim, dmax))
                lim = lim + slack_abs + slack_rel * abs(lim)
                if lim < 0.0 or (is_eia and cand_lb[j] > lim):
                    continue
                q_edge[q_n] = s_rec_int[r, CHAIN_INT32_COLUMN]
                q_off[q_n] = s_rec[r, CHAIN_OFFSET_COLUMN]
                q_src[q_n] = 0
            else:
                r = int(d_rows[j - n_main])
                tsim = tsim_kernel(d_kw_ptr, d_kw_terms, weights, r, term_mark, stamp)
                alpha, tau = d_alpha[r], d_tau[r]
                lim = d_lim[j - n_main]
                if is_eia:
                    lim = min(lim, distance_upper_bound_kernel(alpha, tau - tolerance, tsim,
                                                               dmax))
                lim = lim + slack_abs + slack_rel * abs(lim)
                if lim < 0.0:
                    continue
                q_edge[q_n] = d_chain[r]
                q_off[q_n] = d_chain_offset[r]
                q_src[q_n] = 1
            q_row[q_n] = r
            q_lim[q_n] = min(lim, dmax)
            q_alpha[q_n] = alpha
            q_tau[q_n] = tau
            q_tsim[q_n] = tsim
            q_n += 1
        stats[i][_VERIFIED] = q_n - q_ptr[p - start]
    q_ptr[end - start] = q_n
    if phases < 3:
        return end, n_out, stamp
    # Phase 2: Algorithm 2 per message, then the delivery rule on the queued TSIMs.
    for p in range(start, end):
        i = order[p]
        a = q_ptr[p - start]
        n = q_ptr[p - start + 1] - a
        stats[i][_SETTLED] = verify_candidates(
            search, m_chain[i], m_chain_offset[i], q_edge[a:], q_off[a:], q_lim[a:], n,
            q_dist[a:])
        before = n_out
        n_out = score_candidates(q_dist[a:], q_alpha[a:], q_tau[a:], q_tsim[a:], n, dmax,
                                 tolerance, out_row, out_dist, out_score, n_out)
        for k in range(before, n_out):
            j = a + out_row[k]
            out_row[k] = q_row[j]
            out_src[k] = q_src[j]
            out_msg[k] = i
        stats[i][_DELIVERIES] = n_out - before
    return end, n_out, stamp


def default_threads() -> int:
    """Cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class _Batch(NamedTuple):
    """What every lane of one :meth:`IndexMatcher.match` call shares: the index's kind,
    the batch's order and messages, the index's arrays, the term weights, the limits, the
    verification graph and the per-message statistics."""

    is_eia: bool
    order: IntArray
    msg: MessageArrays
    arrays: IndexArrays
    weights: FloatArray
    limits: MatchLimits
    net: GraphArrays
    stats: IntArray


@dataclass(eq=False)
class _Lane:
    """What one matching thread owns: a search workspace, buckets and scratch arrays."""

    search: NodeSearch
    buckets: BucketQueue
    scratch: ScratchArrays | None = None
    queue: QueueArrays | None = None
    capacity: tuple[int, int, int] | None = None
    stamp: int = 0
    out_capacity: int = 1 << 16
    out: OutputArrays | None = None


class IndexMatcher:
    """Matches messages against a :class:`BasicIndex` or an :class:`EnhancedIndex`.

    Parameters
    ----------
    index
        The subscription index (it may change between calls to :meth:`match`).
    slack_abs, slack_rel
        Rounding slack of the bound comparisons (metres and fraction of the limit).
    chunk
        Messages per compiled call (progress is reported per chunk).
    hilbert_order
        Match a batch in Hilbert order of the messages' locations (faster; the result is
        the same). False keeps the input order.
    bucket_width_m
        Bucket width of the verification search, metres (> 0; the result is the same).
    threads
        Threads matching one batch (>= 1; default: every core this process may use). The
        threads take runs of the Hilbert-ordered batch from one queue (long runs first,
        short ones last: :func:`~roadpubsub.pruning.lanes.guided_runs`), each with scratch arrays of
        its own, then copy their deliveries into the result in parallel
        (:func:`~roadpubsub.pruning.lanes.assemble_kernel`); the compiled loops hold no GIL. The
        result is the same, in the same order, for any count. :attr:`last_timing` says
        where the last call's time went.
    """

    def __init__(
        self,
        index: SubscriptionIndex,
        *,
        slack_abs: float = DEFAULTS.bound_slack_m,
        slack_rel: float = DEFAULTS.bound_slack_rel,
        chunk: int = DEFAULTS.match_batch,
        hilbert_order: bool = True,
        bucket_width_m: float = DEFAULTS.bucket_width_m,
        threads: int | None = None,
    ) -> None:
        if not isinstance(index, EnhancedIndex | BasicIndex):
            msg = f"IndexMatcher needs an EnhancedIndex or a BasicIndex, got {type(index)}"
            raise TypeError(msg)
        self.index = index
        self.slack_abs = float(slack_abs)
        self.slack_rel = float(slack_rel)
        self.chunk = int(chunk)
        self.hilbert_order = bool(hilbert_order)
        if not (np.isfinite(bucket_width_m) and bucket_width_m > 0):
            msg = f"bucket_width_m must be a positive number of metres, got {bucket_width_m!r}"
            raise InputError(msg)
        self.bucket_width_m = float(bucket_width_m)
        self.threads = default_threads() if threads is None else int(threads)
        if self.threads < 1:
            msg = f"threads must be >= 1, got {threads!r}"
            raise InputError(msg)
        self._lanes: list[_Lane] = []
        self._edge_rec: tuple[tuple[Any, ...], FloatArray] | None = None
        self._executor: tuple[ThreadPoolExecutor, int, int] | None = None
        #: Where the last :meth:`match` call's time went (threads, serial part).
        self.last_timing: CallTiming | None = None
        #: Per-message statistics of the last :meth:`match` call (None before the first).
        self.stats: MatchStats | None = None
        self._dead_end_to = dead_ends(self._lane(0).search.adjacency)
        bounds = index.spatial.bounds
        # Rows are message cells: D_t[cm][ci] = D(ci, cm), contiguous per message cell.
        self._D_t = np.ascontiguousarray(bounds.D.T)
        self._eta_t = np.ascontiguousarray(bounds.eta_minus.T)

    def _edge_record(self) -> FloatArray:
        """The EIA's per-edge rows (:func:`~roadpubsub.pruning.algorithm1.edge_record`), rebuilt
        when
        the index's edge statistics or boxes are new arrays (a rebuild of the postings
        replaces them; nothing writes them in place). The key holds the arrays
        themselves, so their ids cannot be reused while it lives."""
        index = self.index
        sp = index.spatial
        key = (sp.edge_bbox, sp.edge_din_out, index.edge_min_alpha, index.edge_max_alpha,
               index.edge_min_tau_e, index.dmax_m)
        cached = self._edge_rec
        if cached is None or len(cached[0]) != len(key) \
                or any(a is not b for a, b in zip(cached[0][:-1], key[:-1], strict=True)) \
                or cached[0][-1] != key[-1]:
            cached = (key, edge_record(*key))
            self._edge_rec = cached
        return cached[1]

    def _lane(self, k: int) -> _Lane:
        """Thread k's search workspace, buckets and scratch (made on first use)."""
        while len(self._lanes) <= k:
            search = NodeSearch(self.index.spatial.graph, reverse=True)
            # Verification limits never exceed Dmax (fixed per index): buckets up to there
            # (at most 4M, 32 MiB: a search needing more falls back to the heap, as one
            # needing more entries than the heap holds does).
            n_buckets = min(int(self.index.dmax_m / self.bucket_width_m) + 3, 1 << 22)
            buckets = BucketQueue(np.empty(n_buckets, dtype=np.int64),
                                  np.empty(search.workspace().heap_d.size, dtype=np.int64),
                                  self.bucket_width_m)
            self._lanes.append(_Lane(search, buckets))
        return self._lanes[k]

    def _scratch(self, lane: _Lane) -> ScratchArrays:
        """Scratch arrays of the compiled loop, reused while the index still fits them.

        Updates between calls (a subscribe grows the delta by one row) must not cost a new
        set of slot-sized arrays: the delta and vocabulary get headroom, and the stamps
        keep counting up, so marks left by earlier calls never match a later message.
        """
        index = self.index
        n_cells = index.spatial.cells.n_cells
        m = index.network.n_edges
        n_slots = len(index.subs)
        n_delta = len(index.delta)
        n_terms = len(index.weights)
        cap = lane.capacity
        if cap is not None and cap[0] == n_slots and cap[1] >= n_delta and cap[2] >= n_terms:
            assert lane.scratch is not None
            return lane.scratch
        delta_cap = 2 * n_delta + 256 if cap is None or cap[1] < n_delta else cap[1]
        terms_cap = n_terms + n_terms // 8 + 64 if cap is None or cap[2] < n_terms else cap[2]
        most = n_slots + delta_cap + 1
        # What the delta or the vocabulary sizes grows with them; the slot-sized marks
        # and candidates stay (a new zeroed mark array costs its pages' first touches,
        # about 17 ms at 1M slots, on the apply thread of a service whose delta grows),
        # and so do the stamps, so marks left by earlier calls never match.
        grown = lane.scratch if cap is not None and cap[0] == n_slots else None
        if grown is None:
            lane.stamp = 0
            grown = ScratchArrays(
                cell_lb=np.empty(n_cells), cell_state=np.empty(n_cells, dtype=np.int8),
                cell_tsum=np.empty(n_cells), edge_tsum=np.empty(m),
                edge_stamp=np.zeros(m, dtype=np.int64),
                mark=np.zeros(n_slots + 1, dtype=np.int64),
                cand=np.empty(n_slots + 1, dtype=np.int32), cand_dnub=np.empty(n_slots + 1),
                cand_lb=np.empty(n_slots + 1),
                term_mark=np.empty(0, dtype=np.int64),
                term_slots=np.empty(1, dtype=np.int64),  # grown per batch as needed
                d_rows=np.empty(0, dtype=np.int64), d_lim=np.empty(0),
                t_nodes=np.empty(0, dtype=np.int64), t_limits=np.empty(0),
                pass_eg=np.empty(_PASS_BATCH, dtype=np.int64),
                pass_cell=np.empty(_PASS_BATCH, dtype=np.int64), pass_lb=np.empty(_PASS_BATCH),
            )
        if grown.term_mark.size != terms_cap:
            grown = grown._replace(term_mark=np.zeros(terms_cap, dtype=np.int64))
        if grown.d_rows.size != delta_cap + 1:
            grown = grown._replace(
                d_rows=np.empty(delta_cap + 1, dtype=np.int64), d_lim=np.empty(delta_cap + 1),
                t_nodes=np.empty(2 * most, dtype=np.int64), t_limits=np.empty(2 * most))
            # The verification queue of a chunk: any one message's candidates fit.
            lane.queue = QueueArrays(
                np.empty(self.chunk + 1, dtype=np.int64), np.empty(most, dtype=np.int64),
                np.empty(most, dtype=np.int8), np.empty(most, dtype=np.int32),
                *(np.empty(most) for _ in range(6)),
            )
        lane.scratch = grown
        lane.capacity = (n_slots, delta_cap, terms_cap)
        return grown

    def verification_floor(self, messages: Messages, deliveries: Deliveries, *,
                           clock: Callable[[], float] = time.perf_counter
                           ) -> tuple[float, int]:
        """Seconds and junctions settled by the verification of ``messages`` if the
        matcher knew their ``deliveries`` in advance (from :meth:`match`): one search per
        message with the delivered subscriptions as its only candidates, each limited to
        its own distance, on one thread and in the compiled kernel the matcher verifies
        with (:func:`~roadpubsub.pruning.algorithm2.verify_known`). A lower bound of what any
        pruning leaves verification to pay; it checks the distances it finds. The
        seconds are those of the kernel by ``clock`` (``time.thread_time``: its CPU
        time).

        Raises
        ------
        InputError
            A delivery names a subscription that is not in the index's slots, or its
            distance differs from the one the floor's search finds.
        """
        from roadpubsub.pruning.algorithm2 import verify_known

        index = self.index
        slot = index._slot_of(deliveries.subscription_id)
        if (slot < 0).any():
            msg = "verification_floor: deliveries of subscriptions outside the index's slots"
            raise InputError(msg)
        mf = index.spatial.facts(messages.points)
        first = np.searchsorted(deliveries.message_id, messages.ids, side="left")
        end = np.searchsorted(deliveries.message_id, messages.ids, side="right")
        if first.size and (first[0] != 0 or end[-1] != len(deliveries)
                           or not np.array_equal(end[:-1], first[1:])):
            msg = ("verification_floor: the messages must be those of the deliveries, in "
                   "increasing id order")
            raise InputError(msg)
        ptr = np.append(first, end[-1:]).astype(np.int64) if first.size \
            else np.zeros(1, dtype=np.int64)
        f = index.facts
        edge, offset = f.chain[slot], f.chain_offset[slot]
        limit = np.ascontiguousarray(deliveries.distance, dtype=np.float64)
        most = int(np.diff(ptr).max(initial=0))
        lane = self._lane(0)
        adj = lane.search.adjacency
        graph = index.spatial.graph
        net = GraphArrays(adj.indptr, adj.indices, adj.weights, graph.edge_u, graph.edge_v,
                          graph.edge_length, graph.edge_twoway, self._dead_end_to)
        t_nodes, t_limits = np.empty(2 * most + 2, dtype=np.int64), np.empty(2 * most + 2)
        out = np.empty(limit.size)
        t0 = clock()
        verify = VerifySearch(net, lane.search.workspace(), lane.buckets, t_nodes, t_limits)
        settled = verify_known(verify, mf.chain.astype(np.int64), mf.chain_offset, ptr, edge,
                               offset, limit, out)
        seconds = clock() - t0
        if not np.array_equal(out, limit):
            msg = "verification_floor: a delivered distance differs from the floor's search"
            raise InputError(msg)
        return seconds, int(settled)

    def match(
        self,
        messages: Messages,
        *,
        progress: Callable[[int], None] | None = None,
    ) -> Deliveries:
        """Deliveries of a batch of messages, sorted by (message_id, subscription_id); the
        per-message statistics of the call in :attr:`stats`.

        Raises
        ------
        InvalidSubscriptionError, InvalidMessageError
            Messages whose points are off the index's network or whose keyword ids the
            index's weights do not hold (checked before any compiled code runs).
        """
        t_call = time.perf_counter()
        shared, longest = self._batch(messages)
        n = len(messages)
        stats = shared.stats
        # Lanes (threads) pull runs of consecutive positions of the Hilbert order from one
        # queue: long runs first (each keeps its locality), short ones last so that the
        # lanes end together whatever the messages cost (lanes.guided_runs). Stats rows are
        # per message, so lanes never share one. The deliveries are then put together in
        # parallel too: each lane copies its own blocks to their places in the result.
        n_lanes = max(1, min(self.threads, math.ceil(n / 16)))
        slot_ids, delta_ids = self.index.subs.ids, self.index.delta.ids
        clocks = [LaneClock() for _ in range(n_lanes)]
        if n_lanes == 1:
            t_par = time.perf_counter()
            outs = [self._run_lane(0, [(0, n)], longest, shared, progress, clocks[0])]
            par = time.perf_counter() - t_par
            starts, total = delivery_starts(messages.ids, stats[:, _DELIVERIES])
            result = self._new_result(total)
            t_par = time.perf_counter()
            self._assemble(outs[0], starts, messages.ids, slot_ids, delta_ids, result,
                           clocks[0])
            par += time.perf_counter() - t_par
        else:
            outs, result, par = self._run_lanes(n_lanes, messages.ids, longest, shared,
                                                clocks)
            if progress is not None:
                progress(n)
        for k, (_, rows) in enumerate(outs):
            if rows > _KEPT_OUT_ROWS:  # a batch with millions of deliveries: let them go
                self._lanes[k].out = None
        wall = time.perf_counter() - t_call
        self.last_timing = CallTiming(wall, wall - par, clocks)
        self.stats = MatchStats(messages.ids.copy(), stats)
        return Deliveries(*result)

    def phase_seconds(self, messages: Messages, *,
                      clock: Callable[[], float] = time.thread_time) -> dict[str, float]:
        """Seconds of one thread's matching of ``messages`` up to each phase, by ``clock``
        (``time.thread_time``: its CPU time), in the matcher's own compiled loop stopped
        early: ``candidates`` (Algorithm 1 and the recent subscriptions' scan),
        ``limits`` (and each candidate's TSIM and verification limit), ``all`` (and the
        search, the scoring and the output rows, without the result's assembly).

        Raises
        ------
        InvalidSubscriptionError, InvalidMessageError
            As :meth:`match`.

        Examples
        --------
        >>> from roadpubsub.index.model import Messages, Subscriptions
        >>> from roadpubsub.index.terms import TermWeights
        >>> from roadpubsub.roadnet.locations import EdgePoints
        >>> from roadpubsub.roadnet.network import RoadNetwork
        >>> from roadpubsub.pruning.matchers import build_matcher
        >>> net = RoadNetwork.from_arrays(node_ids=[1, 2], node_lon=[0.0, 0.01],
        ...     node_lat=[0.0, 0.0], edge_u_ids=[1], edge_v_ids=[2], edge_length=[1000.0],
        ...     edge_oneway=[False], directed=False, name="x")
        >>> w = TermWeights({"a": 1.0, "b": 1.0})
        >>> subs = Subscriptions.from_rows(ids=[7, 8], points=EdgePoints.of([0, 0], [100.0, 900.0]),
        ...     keywords=[["a"], ["b"]], alpha=[0.5, 0.5], tau=[0.5, 0.9], weights=w)
        >>> msgs = Messages.from_rows(ids=[1], points=EdgePoints.of([0], [150.0]),
        ...     keywords=[["a"]], weights=w)
        >>> m = build_matcher("eia", net, subs, w, dmax_m=1000.0, threads=1)
        >>> sorted(m.phase_seconds(msgs))
        ['all', 'candidates', 'limits']
        """
        shared, longest = self._batch(messages)
        n = len(messages)
        out: dict[str, float] = {}
        for name, phases in (("candidates", 1), ("limits", 2), ("all", 3)):
            t0 = clock()
            stopped = shared._replace(limits=shared.limits._replace(phases=phases))
            self._run_lane(0, [(0, n)], longest, stopped, None, LaneClock())
            out[name] = clock() - t0
        return out

    def _batch(self, messages: Messages) -> tuple[_Batch, int]:
        """What every lane of a call on ``messages`` shares, and their longest keyword
        row plus one (checked first: see :meth:`match`)."""
        index = self.index
        sp = index.spatial
        index.check_points(messages.points, labels=messages.ids, what="messages")
        terms = messages.kw_terms
        if terms.size and (int(terms.min()) < 0 or int(terms.max()) >= len(index.weights)):
            problem = "invalid messages: keyword ids unknown to the index's weights"
            raise InvalidMessageError(problem)
        mf = sp.facts(messages.points)
        msg = MessageArrays(mf.chain, mf.chain_offset, mf.x, mf.y, mf.cell, mf.din_in,
                            messages.kw_ptr, messages.kw_terms)
        bounds = BoundArrays(sp.bounds.kappa, self._D_t, self._eta_t, sp.cells.bbox)
        edges = EdgeArrays(sp.edge_bbox, sp.edge_din_out, index.edge_min_alpha,
                           index.edge_max_alpha, index.edge_min_tau_e,
                           self._edge_record() if isinstance(index, EnhancedIndex)
                           else np.empty((0, EDGE_RECORD_WIDTH)))
        lay = index.layout
        layout = LayoutArrays(lay.term_ptr, lay.grp_cell, lay.grp_value, lay.grp_start,
                              lay.eg_edge, lay.eg_value, lay.eg_start, lay.post_slot,
                              lay.post_value)
        none = np.empty(0)
        is_eia = isinstance(index, EnhancedIndex)
        eia_cells = EiaCellArrays(index.cell_dn_limit if isinstance(index, EnhancedIndex)
                                  else none)
        bia_cells = (BiaCellArrays(index.cell_min_alpha, index.cell_max_alpha,
                                   index.cell_min_tau_e)
                     if isinstance(index, BasicIndex) else BiaCellArrays(none, none, none))
        record = index.slot_record  # first: it may repack subs and facts
        s = index.subs
        slots = SlotArrays(record, record.view(np.int32), index.active, s.kw_ptr, s.kw_terms)
        d = index.delta
        df = index.delta_facts
        delta = DeltaArrays(df.x, df.y, df.cell, df.din_out, index.delta_dn_limit,
                            index.delta_wildcard, df.chain, df.chain_offset, d.alpha, d.tau,
                            d.kw_ptr, d.kw_terms)
        lane0 = self._lane(0)
        adj = lane0.search.adjacency
        graph = sp.graph
        net_arrays = GraphArrays(adj.indptr, adj.indices, adj.weights, graph.edge_u,
                                 graph.edge_v, graph.edge_length, graph.edge_twoway,
                                 self._dead_end_to)
        kw_ptr = messages.kw_ptr
        longest = (int(kw_ptr[1] - kw_ptr[0]) if kw_ptr.size == 2
                   else int(np.diff(kw_ptr).max(initial=0))) + 1
        stats = np.zeros((len(messages), len(STAT_NAMES)), dtype=np.int64)
        # Matching in Hilbert order of the messages' locations, neighbouring messages read
        # the same postings, bounds and part of the road graph, and find them in cache:
        # on Rome with 1M subscriptions, a batch of 1,000 messages matched 17% (EIA) to
        # 30% (BIA) faster than in input order. The output is sorted by message anyway.
        order = (spatial_order(mf.x, mf.y) if self.hilbert_order
                 else np.arange(len(messages), dtype=np.int64))
        shared = _Batch(is_eia, order, msg,
                        IndexArrays(bounds, edges, layout, eia_cells, bia_cells, slots, delta),
                        index.weights.weights,
                        MatchLimits(float(index.dmax_m), float(index.tolerance),
                                    self.slack_abs, self.slack_rel),
                        net_arrays, stats)
        return shared, longest

    def _run_lanes(self, n_lanes: int, message_ids: IntArray, longest: int, shared: _Batch,
                   clocks: list[LaneClock]
                   ) -> tuple[list[tuple[OutputArrays, int]], _Result, float]:
        """Match and assemble a batch on ``n_lanes`` threads: the calling thread is lane 0,
        the matcher's own pool runs the others. Each lane matches runs of the batch until
        none is left, then waits for the others at a barrier, whose last comer lays the
        result out (:func:`~roadpubsub.pruning.lanes.delivery_starts`); then each lane copies its
        own
        deliveries there. No thread is started and the caller is not woken between the
        two steps. Returns the lanes' outputs, the result's columns and the wall time of
        the parallel part."""
        n = message_ids.size
        runs = iter(guided_runs(n, n_lanes, largest=self.chunk, smallest=min(8, self.chunk)))
        stats = shared.stats
        s_ids, d_ids = self.index.subs.ids, self.index.delta.ids
        for k in range(n_lanes):
            self._lane(k)
        layout: dict[str, Any] = {}

        def lay_out() -> None:
            starts, total = delivery_starts(message_ids, stats[:, _DELIVERIES])
            layout["starts"], layout["result"] = starts, self._new_result(total)

        barrier = threading.Barrier(n_lanes, action=lay_out)

        def lane(k: int) -> tuple[OutputArrays, int]:
            try:
                part = self._run_lane(k, runs, longest, shared, None, clocks[k])
                barrier.wait()
                self._assemble(part, layout["starts"], message_ids, s_ids, d_ids,
                               layout["result"], clocks[k])
            except BaseException:
                barrier.abort()  # the other lanes stop waiting
                raise
            return part

        t_par = time.perf_counter()
        futures = [self._pool(n_lanes - 1).submit(lane, k) for k in range(1, n_lanes)]
        outs: list[tuple[OutputArrays, int]] = []
        errors: list[BaseException] = []
        for k in range(n_lanes):
            try:
                outs.append(lane(0) if k == 0 else futures[k - 1].result())
            except BaseException as exc:  # re-raised below, the cause first
                errors.append(exc)
        par = time.perf_counter() - t_par
        if errors:
            raise next((e for e in errors if not isinstance(e, threading.BrokenBarrierError)),
                       errors[0])
        return outs, layout["result"], par

    def _pool(self, workers: int) -> ThreadPoolExecutor:
        """The matcher's pool of ``workers`` threads, kept between calls (a fresh one in a
        forked child, whose copy of the pool has no threads)."""
        pool = self._executor
        if pool is None or pool[1] != os.getpid() or pool[2] < workers:
            if pool is not None and pool[1] == os.getpid():
                pool[0].shutdown(wait=False)
            self._executor = (ThreadPoolExecutor(max_workers=workers,
                                                 thread_name_prefix="roadpubsub-lane"),
                              os.getpid(), workers)
        assert self._executor is not None
        return self._executor[0]

    @staticmethod
    def _new_result(total: int) -> _Result:
        return (np.empty(total, dtype=np.int64), np.empty(total, dtype=np.int64),
                np.empty(total), np.empty(total))

    @staticmethod
    def _assemble(part: tuple[OutputArrays, int], starts: IntArray, message_ids: IntArray,
                  slot_ids: IntArray, delta_ids: IntArray,
                  result: _Result, clock: LaneClock) -> None:
        out, n_out = part
        with clock:
            assemble_kernel(out, n_out, starts, message_ids, slot_ids, delta_ids, *result)

    def _run_lane(self, k: int, runs: Iterable[tuple[int, int]], longest: int, shared: _Batch,
                  progress: Callable[[int], None] | None, clock: LaneClock
                  ) -> tuple[OutputArrays, int]:
        """Match runs ``(start, stop)`` of positions of the batch's order on lane k (taken
        one by one from ``runs``, which other lanes may share); the lane's output buffers
        and how many rows it wrote, one block per message."""
        with clock:
            return self._run_lane_runs(k, runs, longest, shared, progress)

    def _run_lane_runs(self, k: int, runs: Iterable[tuple[int, int]], longest: int,
                       shared: _Batch, progress: Callable[[int], None] | None
                       ) -> tuple[OutputArrays, int]:
        lane = self._lane(k)
        scratch = self._scratch(lane)
        if scratch.term_slots.size < longest:  # kept between calls: the compiled loop
            # writes a message's term slots at [0, its keywords + 1), never past longest
            scratch = lane.scratch = scratch._replace(
                term_slots=np.empty(max(longest, 64), dtype=np.int64))
        verify = VerifySearch(shared.net, lane.search.workspace(), lane.buckets,
                              scratch.t_nodes, scratch.t_limits)
        if lane.out is None or lane.out.msg.size != lane.out_capacity:
            lane.out = self._new_out(lane.out_capacity)
        out = lane.out
        n_out = 0
        for start, stop in runs:
            n_out, out = self._run_span(lane, start, stop, scratch, verify, out, n_out,
                                        shared, progress)
        lane.out = out
        return out, n_out

    def _run_span(self, lane: _Lane, start: int, stop: int, scratch: ScratchArrays,
                  verify: VerifySearch, out: OutputArrays, n_out: int, shared: _Batch,
                  progress: Callable[[int], None] | None) -> tuple[int, OutputArrays]:
        queue = lane.queue
        assert queue is not None
        i = start
        while i < stop:
            end = min(i + self.chunk, stop)
            if lane.stamp + (end - i) >= MAX_STAMP:
                # Marks hold the stamp in their high bits (pruning.algorithm1.MARK_SHIFT):
                # start the stamps again from clean marks before they could overflow.
                for marks in (scratch.mark, scratch.term_mark, scratch.edge_stamp):
                    marks.fill(0)
                lane.stamp = 0
            nxt, n_out, lane.stamp = _match_batch(
                shared.is_eia, i, end, shared.order, shared.msg, shared.arrays, shared.weights,
                shared.limits, verify, LaneArrays(scratch, queue, out, shared.stats),
                lane.stamp, n_out)
            if progress is not None and nxt > i:
                progress(nxt - i)
            if nxt == i:  # output buffers full: grow and resume
                index = self.index
                lane.out_capacity = 2 * out[0].size + len(index.subs) + len(index.delta)
                grown = self._new_out(lane.out_capacity)
                for old, new in zip(out, grown, strict=True):
                    np.copyto(np.asarray(new)[:n_out], np.asarray(old)[:n_out])
                out = grown
            i = nxt
        return n_out, out

    @staticmethod
    def _new_out(capacity: int) -> OutputArrays:
        return OutputArrays(np.empty(capacity, dtype=np.int64), np.empty(capacity, dtype=np.int8),
                            np.empty(capacity, dtype=np.int64), np.empty(capacity),
                            np.empty(capacity))
