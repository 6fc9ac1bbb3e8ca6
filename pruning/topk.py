"""Top-k sliding-window matching over :class:`~index.topk.TopkIndex`: prune, verify, buffer.

Per arriving message m (after the expiry of message seq - W, :func:`~pruning.topk_buffers.
expire`), a subscription s needs m only when SIM(s, m) >= theta(s), its buffer threshold
(:mod:`pruning.topk_buffers`): a threshold subscription with tau = theta(s). So the pruning
is PSTPSN's:

1. cell ci is skipped when dNmin(ci, m) > Dmax, or when UB(ci, m) (:mod:`index.topk`)
   is below the smallest theta of its subscriptions. The cell's subscriptions are kept
   ordered by a snapshot of their thresholds, re-sorted every ``resort_every`` messages; a
   snapshot only ever lies below the current threshold (thresholds rise between sorts,
   and a cell where one fell is scanned whole until the next sort), so the scan of a cell
   stops at the first snapshot above UB;
2. s is skipped when its exact TSIM leaves no distance at which SIM >= theta(s)
   (DNUB, Eq. 13, with theta(s) for tau_e and the exact TSIM for TUB), or when its own
   distance lower bound exceeds that DNUB (kappa dE in m's cell, else the larger of
   eta- dE and din_out + D + din_in);
3. the survivors' exact dN come from Algorithm 2's bounded search, each limited by its
   DNUB; SIM from the shared kernels; :func:`~pruning.topk_buffers.offer` does the rest.

Rounding: the bound comparisons of steps 1-2 keep a pair when lb <= limit + 1 um + 1e-9
limit (Algorithm 1's rule). UB is compared with theta after adding SIM_SLACK = 2^-48:
SIM and UB are each 6 rounded operations on values in [0, 2] (at most 2^-52 each), so
fl(SIM) <= fl(UB) + 12 * 2^-52 < fl(UB) + 2^-48 whenever the exact SIM <= the exact UB,
which holds because the slackened dNmin is <= dN. DNUB's own widening is argued in
:mod:`index.limits` (DNUB_NUMERATOR_SLACK), for tau_e = theta(s), the same float the
offer compares with.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np
import numpy.typing as npt

from index.kinds import TopkSubscriptions
from index.limits import distance_upper_bound_kernel
from index.model import Messages
from index.spatial import SpatialIndex
from index.terms import TermWeights
from index.topk import TopkIndex
from pruning.algorithm1 import cell_lower_bounds
from pruning.algorithm2 import verify_candidates
from pruning.boolean import (
    CellBoundArrays,
    cell_bound_arrays,
    message_arrays,
    verification_graph,
    verify_scratch,
)
from pruning.boolean import VerifyScratch as _Scratch
from pruning.kernel_args import GraphArrays, MessageArrays
from pruning.similarity import sim_kernel, tsim_kernel
from pruning.topk_buffers import (
    STAT_NAMES,
    EventArrays,
    ForwardArrays,
    ReevalScratch,
    TopkState,
    TopkSubArrays,
    WindowArrays,
    expire,
    offer,
)
from pruning.topk_events import TopkEvents
from roadnet.distance import NodeSearch
from roadnet.network import RoadNetwork
from roadnet.settings import DEFAULTS

__all__ = ["SIM_SLACK", "TopkCellArrays", "TopkIndexMatcher"]

F = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

#: Added to a cell's score upper bound before comparing it with thresholds (see above).
SIM_SLACK = 2.0**-48


class TopkCellArrays(NamedTuple):
    """Per cell: its rows' range in the order arrays, alpha range; cells per keyword."""

    cell_ptr: I64
    min_alpha: F
    max_alpha: F
    term_ptr: I64
    term_cell: npt.NDArray[np.int32]
    mark: I64


@numba.njit(cache=True, inline="always")
def _keep(lb: float, limit: float, slack_abs: float, slack_rel: float
          ) -> bool:  # pragma: no cover - compiled
    return lb <= limit + slack_abs + slack_rel * abs(limit)


@numba.njit(cache=True, nogil=True)
def _arrive(  # pragma: no cover - compiled
    i: int, t: int, msg: MessageArrays, cb: CellBoundArrays, cells: TopkCellArrays,
    sub: TopkSubArrays, st: TopkState, win: WindowArrays, net: GraphArrays, ws: tuple,
    buckets: tuple, bucket_width: float, sc: _Scratch, cand_tsim: F, weights: F,
    dmax: float, ev: EventArrays, n_ev: int,
) -> int:
    """Offer message i (arrival number t) to every subscription it may matter to."""
    mc = msg.cell[i]
    mx, my, m_din = msg.x[i], msg.y[i], msg.din_in[i]
    cell_lower_bounds(mc, mx, my, m_din, cb.kappa, cb.D_t[mc], cb.eta_t[mc], cb.cell_bbox,
                      sc.cell_lb)
    st.counter[1] += 1
    stamp = st.counter[1]
    for q in range(msg.kw_ptr[i], msg.kw_ptr[i + 1]):
        term = msg.kw_terms[q]
        if term < sc.term_mark.size:
            sc.term_mark[term] = stamp
        if term < cells.term_ptr.size - 1:
            for g in range(cells.term_ptr[term], cells.term_ptr[term + 1]):
                cells.mark[cells.term_cell[g]] = stamp
    n_cand = 0
    n_cells = cells.cell_ptr.size - 1
    for c in range(n_cells):
        if cells.cell_ptr[c + 1] == cells.cell_ptr[c]:
            continue
        lb = sc.cell_lb[c]
        if not _keep(lb, dmax, cb.slack_abs, cb.slack_rel):
            continue
        st.stats[1] += 1
        low = max(lb - cb.slack_abs - cb.slack_rel * abs(lb), 0.0)
        spro = 1.0 - low / dmax
        tub = 1.0 if cells.mark[c] == stamp else 0.0
        a0, a1 = cells.min_alpha[c], cells.max_alpha[c]
        ub = max(a0 * spro + (1.0 - a0) * tub, a1 * spro + (1.0 - a1) * tub) + SIM_SLACK
        dirty = st.cell_dirty[c]
        same = c == mc
        eta = cb.eta_t[mc, c]
        dcm = cb.D_t[mc, c]
        for p in range(cells.cell_ptr[c], cells.cell_ptr[c + 1]):
            if not dirty and st.order_theta[p] > ub:
                break
            s = st.cell_order[p]
            theta = st.theta[s]
            if theta > ub:
                continue
            st.stats[2] += 1
            tsim = tsim_kernel(sub.kw_ptr, sub.kw_terms, weights, s, sc.term_mark, stamp)
            lim = distance_upper_bound_kernel(sub.alpha[s], theta, tsim, dmax)
            if lim < 0.0:
                continue
            dx = sub.x[s] - mx
            dy = sub.y[s] - my
            de = np.sqrt(dx * dx + dy * dy)
            lb_s = cb.kappa * de if same else max(eta * de, sub.din_out[s] + dcm + m_din)
            if not _keep(lb_s, lim, cb.slack_abs, cb.slack_rel):
                continue
            sc.cand_row[n_cand] = s
            sc.cand_edge[n_cand] = sub.chain[s]
            sc.cand_offset[n_cand] = sub.chain_offset[s]
            sc.cand_limit[n_cand] = lim
            cand_tsim[n_cand] = tsim
            n_cand += 1
    if n_cand == 0:
        return n_ev
    st.stats[3] += n_cand
    verify_candidates(net, ws, msg.chain[i], msg.chain_offset[i], sc.cand_edge,
                      sc.cand_offset, sc.cand_limit, n_cand, sc.t_nodes, sc.t_limits,
                      sc.cand_dist, buckets, bucket_width)
    for j in range(n_cand):
        d = sc.cand_dist[j]
        if not d <= dmax:
            continue
        s = sc.cand_row[j]
        score = sim_kernel(sub.alpha[s], d, dmax, cand_tsim[j])
        n_ev = offer(st, sub, win, s, t, score, d, ev, n_ev)
    return n_ev


@numba.njit(cache=True, nogil=True)
def _push(  # pragma: no cover - compiled
    start: int, stop: int, ids: I64, msg: MessageArrays, cb: CellBoundArrays,
    cells: TopkCellArrays, sub: TopkSubArrays, st: TopkState, win: WindowArrays,
    fw: ForwardArrays, rs: ReevalScratch, net: GraphArrays, ws: tuple, buckets: tuple,
    bucket_width: float, sc: _Scratch, cand_tsim: F, weights: F, dmax: float,
    ev: EventArrays,
) -> tuple[int, int]:
    """Messages start .. stop - 1 in order, while the events surely fit; (next, n_events)."""
    window = win.seq.size
    n_subs = sub.k.size
    n_ev = 0
    i = start
    while i < stop and n_ev + 4 * n_subs + 8 <= ev.seq.size:
        t = st.counter[0]
        x = t - window
        if x >= 0:
            s = st.head[x % window]
            while s >= 0:
                nx = st.nxt[s]  # s moves to another bucket (its entries are all newer)
                n_ev = expire(st, sub, win, fw, rs, weights, dmax, s, x, t, ev, n_ev)
                s = nx
        j = t % window
        win.seq[j] = t
        win.mid[j] = ids[i]
        win.chain[j] = msg.chain[i]
        win.offset[j] = msg.chain_offset[i]
        nt = 0
        for q in range(msg.kw_ptr[i], msg.kw_ptr[i + 1]):
            win.terms[j, nt] = msg.kw_terms[q]
            nt += 1
        win.nterms[j] = nt
        n_ev = _arrive(i, t, msg, cb, cells, sub, st, win, net, ws, buckets, bucket_width,
                       sc, cand_tsim, weights, dmax, ev, n_ev)
        st.counter[0] = t + 1
        i += 1
    return i, n_ev


@numba.njit(cache=True, nogil=True)
def _resort(cell_ptr: I64, st: TopkState) -> None:  # pragma: no cover - compiled
    """Order each cell's rows by their current threshold; clear the dirty flags."""
    for c in range(cell_ptr.size - 1):
        a, b = cell_ptr[c], cell_ptr[c + 1]
        if b - a > 1:
            rows = st.cell_order[a:b].copy()
            th = st.theta[rows]
            order = np.argsort(th, kind="mergesort")
            for q in range(b - a):
                st.cell_order[a + q] = rows[order[q]]
                st.order_theta[a + q] = th[order[q]]
        elif b - a == 1:
            st.order_theta[a] = st.theta[st.cell_order[a]]
        st.cell_dirty[c] = False


class TopkIndexMatcher:
    """Exact top-k sliding-window matching through :class:`~index.topk.TopkIndex`.

    Parameters
    ----------
    network, subs, weights, dmax_m, window
        As for :class:`~pruning.kinds_reference.TopkBruteMatcher`.
    spatial
        Cells and bounds to reuse; built when omitted.
    resort_every
        Messages between two re-sorts of the cells' subscriptions by threshold (>= 1).

    Messages are fed in stream order through :meth:`push`; ``stats`` counts the work.
    """

    name = "topk"

    def __init__(self, network: RoadNetwork, subs: TopkSubscriptions, weights: TermWeights,
                 *, dmax_m: float, window: int, spatial: SpatialIndex | None = None,
                 resort_every: int = 64,
                 bucket_width_m: float = DEFAULTS.bucket_width_m) -> None:
        self.spatial = spatial or SpatialIndex.build(network)
        self.index = ix = TopkIndex.build(self.spatial, subs, weights, dmax_m=dmax_m,
                                          window=window)
        self.subs, self.weights, self.dmax_m, self.window = subs, weights, ix.dmax_m, ix.window
        self.resort_every = max(int(resort_every), 1)
        self.bucket_width_m = float(bucket_width_m)
        self._search, self._net, self._buckets = verification_graph(
            self.spatial, dmax_m=self.dmax_m, bucket_width_m=self.bucket_width_m)
        n, n_cells = len(subs), self.spatial.cells.n_cells
        f = ix.facts
        self._sub = TopkSubArrays(f.x, f.y, f.din_out, f.cell, f.chain, f.chain_offset,
                                  subs.alpha, subs.k, subs.kw_ptr, subs.kw_terms, ix.buf_ptr)
        self._cells = TopkCellArrays(ix.cell_ptr, ix.cell_min_alpha, ix.cell_max_alpha,
                                     ix.term_ptr, ix.term_cell, np.zeros(n_cells, np.int64))
        slots = int(ix.buf_ptr[-1])
        w = self.window
        self.state = TopkState(
            theta=np.full(n, -np.inf), size=np.zeros(n, np.int64),
            b_seq=np.zeros(slots, np.int64), b_score=np.zeros(slots),
            b_dist=np.zeros(slots), b_dom=np.zeros(slots, np.int64),
            head=np.full(w, -1, np.int64), nxt=np.full(n, -1, np.int64),
            prv=np.full(n, -1, np.int64), where=np.full(n, -1, np.int64),
            cell_order=ix.cell_row.copy(), order_theta=np.full(n, -np.inf),
            cell_dirty=np.zeros(n_cells, bool), counter=np.zeros(2, np.int64),
            stats=np.zeros(len(STAT_NAMES), np.int64))
        self._win = self._window_arrays(8)
        g = self.spatial.graph
        fsearch = NodeSearch(g, reverse=False)
        adj = fsearch.adjacency
        dist, target_ws, heap_d, heap_n, touched = fsearch.workspace()
        self._forward_search = fsearch  # owns the workspace
        self._fw = ForwardArrays(adj.indptr, adj.indices, adj.weights, g.edge_u, g.edge_v,
                                 g.edge_length, g.edge_twoway, dist, target_ws, heap_d,
                                 heap_n, touched)
        self._rs = ReevalScratch(np.empty(w, np.int64), np.empty(w), np.empty(w),
                                 np.zeros(w + 1, np.int64), np.zeros(len(weights) + 1,
                                                                     np.int64))
        self._cb = cell_bound_arrays(self.spatial)
        self._scratch = verify_scratch(n_cells, len(weights), n)
        self._cand_tsim = np.empty(max(n, 1))
        cap = max(8 * n + 64, 1 << 12)
        self._ev = EventArrays(np.empty(cap, np.int64), np.empty(cap, np.int8),
                               np.empty(cap, np.int8), np.empty(cap, np.int64),
                               np.empty(cap, np.int64), np.empty(cap, np.int64),
                               np.empty(cap), np.empty(cap))
        self._since_sort = 0

    @property
    def stats(self) -> dict[str, int]:
        """Work counters since the start (re-evaluations, cells, checks, candidates)."""
        return dict(zip(STAT_NAMES, self.state.stats.tolist(), strict=True))

    def _window_arrays(self, width: int) -> WindowArrays:
        w = self.window
        old = getattr(self, "_win", None)
        terms = np.zeros((w, width), np.int32)
        if old is None:
            return WindowArrays(np.full(w, -1, np.int64), np.zeros(w, np.int64),
                                np.zeros(w, np.int32), np.zeros(w), np.zeros(w, np.int64),
                                terms)
        terms[:, :old.terms.shape[1]] = old.terms
        return old._replace(terms=terms)

    def push(self, messages: Messages) -> TopkEvents:
        """Process ``messages`` in order; the events they cause."""
        n_msg = len(messages)
        if n_msg == 0 or len(self.subs) == 0:
            self.state.counter[0] += n_msg
            return TopkEvents.empty()
        longest = int(np.diff(messages.kw_ptr).max(initial=0))
        if longest > self._win.terms.shape[1]:
            self._win = self._window_arrays(max(longest, 2 * self._win.terms.shape[1]))
        msg = message_arrays(self.spatial, messages)
        ws = self._search.workspace()
        parts: list[TopkEvents] = []
        start = 0
        ev = self._ev
        while start < n_msg:
            if self._since_sort >= self.resort_every:
                _resort(self.index.cell_ptr, self.state)
                self._since_sort = 0
            stop = min(n_msg, start + self.resort_every - self._since_sort)
            nxt, n_ev = _push(start, stop, messages.ids, msg, self._cb, self._cells,
                              self._sub, self.state, self._win, self._fw, self._rs, self._net,
                              ws, self._buckets, self.bucket_width_m, self._scratch,
                              self._cand_tsim, self.weights.weights, self.dmax_m, ev)
            self._since_sort += nxt - start
            start = nxt
            if n_ev:
                parts.append(TopkEvents(ev.seq[:n_ev].copy(), ev.phase[:n_ev].copy(),
                                        ev.event[:n_ev].copy(), ev.mid[:n_ev].copy(),
                                        self.subs.ids[ev.row[:n_ev]], ev.rank[:n_ev].copy(),
                                        ev.score[:n_ev].copy(), ev.dist[:n_ev].copy()))
        return TopkEvents.concat(parts)
