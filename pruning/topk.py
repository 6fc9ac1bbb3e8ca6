"""Top-k sliding-window matching over :class:`~roadpubsub.index.topk.TopkIndex`: prune, verify,
buffer.

Per arriving message m (after the expiry of message seq - W,
:func:`~roadpubsub.pruning.topk_buffers.expire`), a subscription s needs m only when SIM(s, m) >=
theta(s), its buffer threshold
(:mod:`roadpubsub.pruning.topk_buffers`): a threshold subscription with tau = theta(s). So the
pruning is PSTPSN's, over the cells ci with dNmin(ci, m) <= Dmax, in two paths that together
reach every row of those cells at most once:

1. keyword path: the rows sharing a keyword with m, found through the (keyword, cell)
   postings of the index, are marked seen and checked with their exact TSIM;
2. text-free path: every other row has TSIM = 0 exactly (no shared weight is summed), so
   SIM <= UB0(s, m) = alpha(s) * spro, spro = 1 - dNmin(ci, m) / Dmax; a row whose
   threshold is above UB0 + SIM_SLACK is skipped. The cell's rows are kept ordered by a
   snapshot of their key theta / alpha (-inf for alpha < 2^-20), re-sorted every
   ``resort_every`` messages; a snapshot only ever lies below the current key
   (thresholds rise between sorts, and a cell where one fell is scanned whole until the
   next sort), so the scan stops at the first snapshot above the cut
   spro (1 + 2^-20) + 2^-20. Past it, theta / alpha > spro + 2^-21 (one rounding of the
   quotient), so theta > alpha spro + alpha 2^-21 >= alpha spro + 2^-41 (alpha >= 2^-20):
   far above UB0 + SIM_SLACK's rounding (below);
3. a checked row is dropped when its TSIM leaves no distance at which SIM >= theta(s)
   (DNUB, Eq. 13, with theta(s) for tau_e and the exact TSIM for TUB), or when its own
   distance lower bound exceeds that DNUB (kappa dE in m's cell, else the larger of
   eta- dE and din_out + D + din_in);
4. the survivors' exact dN come from Algorithm 2's bounded search, limited by the largest
   of their DNUBs; SIM from the shared kernels; :func:`~roadpubsub.pruning.topk_buffers.offer` does
   the rest.

Rows are numbered by cell inside the matcher, so a cell's rows and buffers lie together.

Rounding: the bound comparisons of steps 1-3 keep a pair when lb <= limit + 1 um + 1e-9
limit (Algorithm 1's rule). UB0 is compared with theta after adding SIM_SLACK = 2^-48:
SIM and UB0 are each at most 6 rounded operations on values in [0, 2] (at most 2^-52
each), so fl(SIM) <= fl(UB0) + 12 * 2^-52 < fl(UB0) + 2^-48 whenever the exact SIM <= the
exact UB0, which holds because the slackened dNmin is <= dN. DNUB's own widening is argued
in :mod:`roadpubsub.index.limits` (DNUB_NUMERATOR_SLACK), for tau_e = theta(s), the same float the
offer compares with.

Subscriptions come and go between pushes (:meth:`TopkIndexMatcher.add_subscriptions`,
:meth:`TopkIndexMatcher.remove_subscriptions`) and expire (``expires_at`` with the
messages' ``times``); see those methods and :mod:`roadpubsub.pruning.topk_events` for the events.
"""

from __future__ import annotations

from collections.abc import Sequence

import numba
import numpy as np
import numpy.typing as npt

from roadpubsub.index.kinds import TopkSubscriptions
from roadpubsub.index.model import Messages
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.terms import TermWeights
from roadpubsub.index.topk import DEFAULT_BUFFER_EXTRA, TopkIndex
from roadpubsub.pruning.algorithm2 import VerifySearch
from roadpubsub.pruning.boolean import (
    cell_bound_arrays,
    message_arrays,
    verification_graph,
    verify_scratch,
)
from roadpubsub.pruning.kinds_reference import check_window
from roadpubsub.pruning.topk_buffers import (
    STAT_NAMES,
    EventArrays,
    ForwardArrays,
    ReevalScratch,
    TopkState,
    TopkSubArrays,
    WindowArrays,
    join,
    relink_all,
    withdraw,
)
from roadpubsub.pruning.topk_events import TopkEvents
from roadpubsub.pruning.topk_kernels import (
    KillLists,
    TopkArrays,
    TopkCellArrays,
    push_messages,
    resort_cells,
)
from roadpubsub.roadnet.distance import NodeSearch
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.lengths import check_dmax
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.settings import DEFAULTS

__all__ = ["TopkIndexMatcher"]

F = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

class TopkIndexMatcher:
    """Exact top-k sliding-window matching through :class:`~roadpubsub.index.topk.TopkIndex`.

    Parameters
    ----------
    network, subs, weights, dmax_m, window
        As for :class:`~roadpubsub.pruning.kinds_reference.TopkBruteMatcher`.
    spatial
        Cells and bounds to reuse; built when omitted.
    resort_every
        Messages between two re-sorts of the cells' subscriptions by threshold (>= 1).
    buffer_extra
        Result-buffer entries kept beyond k (:func:`~roadpubsub.index.topk.buffer_capacity`): the
        results do not depend on it, the work does.
    expires_at
        Per subscription, the instant (seconds, as the ``times`` of :meth:`push`; NaN or
        omitted: never) from which it is withdrawn (see :meth:`push`).

    Messages are fed in stream order through :meth:`push`; subscriptions come and go
    between calls through :meth:`add_subscriptions` and :meth:`remove_subscriptions`;
    :meth:`results` reads the current top-k. ``stats`` counts the work.
    """

    name = "topk"

    def __init__(self, network: RoadNetwork, subs: TopkSubscriptions, weights: TermWeights,
                 *, dmax_m: float, window: int, spatial: SpatialIndex | None = None,
                 resort_every: int = 64,
                 bucket_width_m: float = DEFAULTS.bucket_width_m,
                 expires_at: npt.ArrayLike | None = None,
                 buffer_extra: int = DEFAULT_BUFFER_EXTRA) -> None:
        self.spatial = spatial or SpatialIndex.build(network)
        self.weights = weights
        self.dmax_m = check_dmax(dmax_m)
        self.window = w = check_window(window)
        self.resort_every = max(int(resort_every), 1)
        self.buffer_extra = int(buffer_extra)
        self.bucket_width_m = float(bucket_width_m)
        self._search, self._net, self._buckets = verification_graph(
            self.spatial, dmax_m=self.dmax_m, bucket_width_m=self.bucket_width_m)
        g = self.spatial.graph
        fsearch = NodeSearch(g, reverse=False)
        adj = fsearch.adjacency
        dist, target_ws, heap_d, heap_n, touched = fsearch.workspace()
        self._forward_search = fsearch  # owns the workspace
        self._fw = ForwardArrays(adj.indptr, adj.indices, adj.weights, g.edge_u, g.edge_v,
                                 g.edge_length, g.edge_twoway, dist, target_ws, heap_d,
                                 heap_n, touched)
        self._cb = cell_bound_arrays(self.spatial)
        self._win = WindowArrays(np.full(w, -1, np.int64), np.zeros(w, np.int64),
                                 np.zeros(w, np.int32), np.zeros(w), np.zeros(w, np.int64),
                                 np.zeros((w, 8), np.int32))
        self._counter = np.zeros(2, np.int64)
        self._stats = np.zeros(len(STAT_NAMES), np.int64)
        self._since_sort = 0
        self._install(subs, _expiry_column(expires_at, len(subs)), None)

    # ------------------------------------------------------------------ set-up
    def _install(self, subs: TopkSubscriptions, expires: F,
                 carry: tuple[TopkState, TopkSubArrays, I64] | None) -> I64:
        """Index ``subs`` and make a fresh state; ``carry`` = (old state, old buffer
        pointers, source row of each new row or -1): rows with a source keep its buffer,
        threshold and expiry bucket; the others start empty.

        Rows are renumbered by cell (stably) first, so that the rows a message's cells
        hold, and their buffers, lie together in memory.
        """
        cell = self.spatial.facts(subs.points).cell
        if np.any(np.diff(cell) < 0):
            perm = np.argsort(cell, kind="stable")
            subs, expires = subs.take(perm), expires[perm]
            if carry is not None:
                carry = (carry[0], carry[1], carry[2][perm])
        ix = TopkIndex.build(self.spatial, subs, self.weights, dmax_m=self.dmax_m,
                             window=self.window, buffer_extra=self.buffer_extra)
        self.index, self.subs = ix, subs
        self._expires = expires
        n, n_cells = len(subs), self.spatial.cells.n_cells
        f = ix.facts
        self._sub = TopkSubArrays(f.x, f.y, f.din_out, f.cell, f.chain, f.chain_offset,
                                  subs.alpha, subs.k, subs.kw_ptr, subs.kw_terms, ix.buf_ptr,
                                  ix.buf_cap)
        self._cells = TopkCellArrays(ix.cell_ptr, ix.cell_min_alpha, ix.cell_max_alpha,
                                     ix.term_ptr, ix.term_cell, ix.pair_ptr, ix.pair_row,
                                     np.zeros(n, np.int64))
        slots = int(ix.buf_ptr[-1])
        w = self.window
        st = TopkState(
            theta=np.full(n, -np.inf), size=np.zeros(n, np.int64),
            b_seq=np.zeros(slots, np.int64), b_score=np.zeros(slots),
            b_dist=np.zeros(slots), b_dom=np.zeros(slots, np.int64),
            head=np.full(w, -1, np.int64), nxt=np.full(n, -1, np.int64),
            prv=np.full(n, -1, np.int64), where=np.full(n, -1, np.int64),
            cell_order=ix.cell_row.copy(), order_theta=np.full(n, -np.inf),
            cell_dirty=np.zeros(n_cells, bool), counter=self._counter, stats=self._stats)
        if carry is not None:
            old, old_sub, src = carry
            old_ptr = old_sub.buf_ptr
            kept = np.flatnonzero(src >= 0)
            srows = src[kept]
            st.theta[kept] = old.theta[srows]
            ix.buf_cap[kept] = old_sub.cap[srows]
            st.size[kept] = old.size[srows]
            # Slots: each kept row's whole old segment (their number depends on k, W and
            # buffer_extra only).
            width = ix.buf_ptr[kept + 1] - ix.buf_ptr[kept]
            to = np.repeat(ix.buf_ptr[kept], width) + _ranges(width)
            frm = np.repeat(old_ptr[srows], width) + _ranges(width)
            for name in ("b_seq", "b_score", "b_dist", "b_dom"):
                getattr(st, name)[to] = getattr(old, name)[frm]
            relink_all(st, self._sub, w)
        resort_cells(ix.cell_ptr, subs.alpha, st)
        self.state = st
        self._rs = ReevalScratch(np.empty(w, np.int64), np.empty(w), np.empty(w),
                                 np.zeros(w + 1, np.int64),
                                 np.zeros(len(self.weights) + 1, np.int64))
        self._scratch = verify_scratch(n_cells, len(self.weights), n)
        self._cand_tsim = np.empty(max(n, 1))
        cap = max(8 * n + 64, 1 << 12)
        self._ev = EventArrays(np.empty(cap, np.int64), np.empty(cap, np.int8),
                               np.empty(cap, np.int8), np.empty(cap, np.int64),
                               np.empty(cap, np.int64), np.empty(cap, np.int64),
                               np.empty(cap), np.empty(cap))
        self._live = np.ones(n, dtype=bool)
        self._live_rows = {int(i): r for r, i in enumerate(subs.ids.tolist())}
        return (np.arange(n, dtype=np.int64) if carry is None
                else np.flatnonzero(carry[2] < 0).astype(np.int64))

    @property
    def stats(self) -> dict[str, int]:
        """Work counters since the start (re-evaluations, cells, checks, candidates)."""
        return dict(zip(STAT_NAMES, self._stats.tolist(), strict=True))

    @property
    def arrivals(self) -> int:
        """Messages pushed so far (the next message's arrival number)."""
        return int(self._counter[0])

    def live_ids(self) -> I64:
        """Ids of the subscriptions being matched, ascending."""
        return np.sort(self.subs.ids[self._live])

    def _events(self, n_ev: int) -> TopkEvents:
        ev = self._ev
        return TopkEvents(ev.seq[:n_ev].copy(), ev.phase[:n_ev].copy(), ev.event[:n_ev].copy(),
                          ev.mid[:n_ev].copy(), self.subs.ids[ev.row[:n_ev]],
                          ev.rank[:n_ev].copy(), ev.score[:n_ev].copy(),
                          ev.dist[:n_ev].copy())

    def _ensure_events(self, need: int) -> None:
        """Event buffers of at least ``need`` entries."""
        if self._ev.seq.size < need:
            cap = max(need, 2 * self._ev.seq.size)
            self._ev = EventArrays(np.empty(cap, np.int64), np.empty(cap, np.int8),
                                   np.empty(cap, np.int8), np.empty(cap, np.int64),
                                   np.empty(cap, np.int64), np.empty(cap, np.int64),
                                   np.empty(cap), np.empty(cap))

    def _rows(self, ids: npt.ArrayLike, *, missing_ok: bool) -> I64:
        """Rows of live subscription ids (unique); unknown ids raise unless ``missing_ok``."""
        q = np.unique(np.asarray(ids, dtype=np.int64))
        rows = np.array([self._live_rows.get(int(i), -1) for i in q.tolist()], np.int64)
        if rows.size:
            rows[rows >= 0] = np.where(self._live[rows[rows >= 0]], rows[rows >= 0], -1)
        if not missing_ok and np.any(rows < 0):
            msg = f"not live top-k subscriptions: ids {q[rows < 0][:10].tolist()}"
            raise InputError(msg)
        return rows[rows >= 0]

    # ------------------------------------------------------------------ subscriptions
    def add_subscriptions(self, subs: TopkSubscriptions, *,
                          expires_at: npt.ArrayLike | None = None) -> TopkEvents:
        """Start matching new subscriptions; their top-k comes from the current window.

        Each new subscription gets exactly the top-k it would hold had it been there from
        the start (its result is a function of the window alone), computed by one
        re-evaluation over the window (:func:`~roadpubsub.pruning.topk_buffers.reevaluate`); the
        others keep their buffers. The events are the inserts of the new top-k, ranks 1,
        2, ..., with ``seq`` = :attr:`arrivals` - 1 and ``phase`` 2 (after the last
        message's events). Window messages keep the term ids they arrived with, so
        ``weights`` may grow (new terms appended) but not change.

        Raises
        ------
        InputError
            An id that is already live.
        """
        if len(subs) == 0:
            return TopkEvents.empty()
        clash = np.intersect1d(subs.ids, self.subs.ids[self._live])
        if clash.size:
            msg = f"top-k subscriptions already live: ids {clash[:10].tolist()}"
            raise InputError(msg)
        live = np.flatnonzero(self._live)
        both = TopkSubscriptions.concat([self.subs.take(live), subs])
        expires = np.concatenate([self._expires[live],
                                  _expiry_column(expires_at, len(subs))])
        src = np.concatenate([live, np.full(len(subs), -1, np.int64)])
        new = self._install(both, expires, (self.state, self._sub, src))
        self._ensure_events(int(np.minimum(subs.k, self.window).sum()) + 8)
        n_ev = join(self.state, self._sub, self._win, self._fw, self._rs,
                    self.weights.weights, self.dmax_m, new, self.arrivals - 1, 2, self._ev,
                    0)
        resort_cells(self.index.cell_ptr, self.subs.alpha, self.state)
        self._since_sort = 0
        return TopkEvents.concat([self._events(n_ev)])

    def remove_subscriptions(self, ids: npt.ArrayLike, *,
                             missing_ok: bool = False) -> TopkEvents:
        """Stop matching subscriptions; the events evict their top-k, bottom rank first,
        with ``seq`` = :attr:`arrivals` - 1 and ``phase`` 2.

        Raises
        ------
        InputError
            An id that is not live (unless ``missing_ok``).
        """
        rows = self._rows(ids, missing_ok=missing_ok)
        if rows.size == 0:
            return TopkEvents.empty()
        self._ensure_events(int(np.minimum(self.subs.k[rows], self.window).sum()) + 8)
        n_ev = _withdraw_rows(self.state, self._sub, self._win, rows, self.arrivals - 1, 2,
                              self._ev)
        events = TopkEvents.concat([self._events(n_ev)])
        self._live[rows] = False
        if (~self._live).sum() > max(1024, int(self._live.sum())):  # compact
            live = np.flatnonzero(self._live)
            self._install(self.subs.take(live), self._expires[live],
                          (self.state, self._sub, live))
        return events

    def results(self, ids: npt.ArrayLike) -> list[list[tuple[int, float, float]]]:
        """Each live subscription's top-k now, best first: (message_id, score, distance).

        Raises
        ------
        InputError
            An id that is not live.
        """
        q = np.asarray(ids, dtype=np.int64)
        out = []
        st, ptr, mid, w = self.state, self.index.buf_ptr, self._win.mid, self.window
        for i in q.tolist():
            r = self._live_rows.get(int(i), -1)
            if r < 0 or not self._live[r]:
                msg = f"not a live top-k subscription: id {i}"
                raise InputError(msg)
            base = int(ptr[r])
            out.append([(int(mid[int(st.b_seq[base + j]) % w]), float(st.b_score[base + j]),
                         float(st.b_dist[base + j]))
                        for j in range(min(int(self.subs.k[r]), int(st.size[r])))])
        return out

    # ------------------------------------------------------------------ the stream
    def _grow_window(self, longest: int) -> None:
        width = self._win.terms.shape[1]
        if longest > width:
            terms = np.zeros((self.window, max(longest, 2 * width)), np.int32)
            terms[:, :width] = self._win.terms
            self._win = self._win._replace(terms=terms)

    def _kills(self, n_msg: int, times: npt.ArrayLike | None) -> tuple[I64, I64]:
        """Per message of the batch, the live rows it withdraws: those whose expires_at
        is at most the largest time so far in the batch (so at the first message, in
        stream order, whose time reaches it)."""
        ptr = np.zeros(n_msg + 1, np.int64)
        if times is None:
            return ptr, np.empty(0, np.int64)
        tm = np.asarray(times, dtype=np.float64)
        if tm.shape != (n_msg,) or np.isnan(tm).any():
            msg = f"times must be {n_msg} numbers, one per message, none NaN"
            raise InputError(msg)
        rows = np.flatnonzero(self._live & ~np.isnan(self._expires))
        if rows.size == 0 or n_msg == 0:
            return ptr, np.empty(0, np.int64)
        first = np.searchsorted(np.maximum.accumulate(tm), self._expires[rows], side="left")
        hit = first < n_msg
        rows, first = rows[hit], first[hit]
        order = np.lexsort((rows, first))
        np.cumsum(np.bincount(first, minlength=n_msg), out=ptr[1:])
        self._live[rows] = False
        # Room for the most evicts one message's withdrawals can emit, beyond the 4 per
        # subscription of an arrival (see _push).
        per = np.bincount(first, weights=np.minimum(self.subs.k[rows], self.window),
                          minlength=n_msg)
        self._ensure_events(4 * len(self.subs) + 8 + int(per.max(initial=0)))
        return ptr, rows[order].astype(np.int64)

    def push(self, messages: Messages, *, times: npt.ArrayLike | None = None,
             keywords: Sequence[Sequence[str]] | None = None) -> TopkEvents:
        """Process ``messages`` in order; the events they cause.

        ``times`` (seconds, one per message, optional: the clock of
        :mod:`roadpubsub.pruning.expiry`) applies ``expires_at``: a subscription is withdrawn at the
        first message (in stream order) whose time is at least its ``expires_at``:
        before that message's expiry phase, its top-k is evicted (phase 0, bottom rank
        first) and it is offered no message again. Without ``times`` no subscription
        expires. ``keywords`` (the messages' strings) is not needed: the vocabulary is
        the one the matcher was built with (the signature of every top-k matcher,
        :class:`roadpubsub.pruning.mixed.TopkMatcher`).
        """
        n_msg = len(messages)
        kill_ptr, kill_row = self._kills(n_msg, times)
        if n_msg == 0:
            return TopkEvents.empty()
        self._grow_window(int(np.diff(messages.kw_ptr).max(initial=0)))
        msg = message_arrays(self.spatial, messages)
        search = VerifySearch(self._net, self._search.workspace(), self._buckets,
                              self._scratch.t_nodes, self._scratch.t_limits)
        kills = KillLists(kill_ptr, kill_row)
        parts: list[TopkEvents] = []
        start = 0
        while start < n_msg:
            if self._since_sort >= self.resort_every:
                resort_cells(self.index.cell_ptr, self.subs.alpha, self.state)
                self._since_sort = 0
            stop = min(n_msg, start + self.resort_every - self._since_sort)
            tk = TopkArrays(self._cb, self._cells, self._sub, self.state, self._win,
                            self._fw, self._rs, self.weights.weights, self.dmax_m)
            nxt, n_ev = push_messages(start, stop, messages.ids, msg, tk, search,
                                      self._scratch, self._cand_tsim, self._ev, kills)
            self._since_sort += nxt - start
            start = nxt
            if n_ev:
                parts.append(self._events(n_ev))
        return TopkEvents.concat(parts)


@numba.njit(cache=True, nogil=True)
def _withdraw_rows(st: TopkState, sub: TopkSubArrays, win: WindowArrays, rows: I64,
                   seq: int, phase: int, ev: EventArrays) -> int:  # pragma: no cover
    n_ev = 0
    for i in range(rows.size):
        n_ev = withdraw(st, sub, win, rows[i], seq, phase, ev, n_ev)
    return n_ev


def _ranges(width: I64) -> I64:
    """0 .. w - 1 for each w of ``width``, concatenated."""
    total = int(width.sum())
    starts = np.repeat(np.cumsum(width) - width, width)
    return np.arange(total, dtype=np.int64) - starts


def _expiry_column(expires_at: npt.ArrayLike | None, n: int) -> F:
    """expires_at as n floats (NaN: never), or one clear error."""
    if expires_at is None:
        return np.full(n, np.nan)
    e = np.asarray(expires_at, dtype=np.float64)
    if e.shape != (n,):
        msg = f"expires_at must hold one number per subscription ({n}), got shape {e.shape}"
        raise InputError(msg)
    return e.copy()
