"""The compiled steps of :class:`~roadpubsub.pruning.topk.TopkIndexMatcher`: a message's arrival
(the keyword and text-free paths, verification, offers), a run of messages, and the
re-sort of each cell's rows by theta / alpha.

The pruning they apply and why its rounding is safe are argued in :mod:`roadpubsub.pruning.topk`.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np
import numpy.typing as npt

from roadpubsub.index.limits import distance_upper_bound_kernel
from roadpubsub.pruning.algorithm1 import cell_lower_bounds
from roadpubsub.pruning.algorithm2 import VerifySearch, verify_candidates
from roadpubsub.pruning.boolean import CellBoundArrays
from roadpubsub.pruning.boolean import VerifyScratch as _Scratch
from roadpubsub.pruning.kernel_args import MessageArrays
from roadpubsub.pruning.similarity import sim_kernel, tsim_kernel
from roadpubsub.pruning.topk_buffers import (
    EventArrays,
    ForwardArrays,
    ReevalScratch,
    TopkState,
    TopkSubArrays,
    WindowArrays,
    expire,
    offer,
    withdraw,
)

__all__ = ["SIM_SLACK", "KillLists", "TopkArrays", "TopkCellArrays", "push_messages",
           "resort_cells"]

F = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

#: Added to a text-free score upper bound before comparing it with thresholds (the bound
#: is argued in :mod:`roadpubsub.pruning.topk`).
SIM_SLACK = 2.0**-48
#: Relative and absolute margin of the text-free path's cut, and the smallest alpha keyed
#: by theta / alpha (see :mod:`roadpubsub.pruning.topk`).
KEY_MARGIN = 2.0**-20


class TopkCellArrays(NamedTuple):
    """Per cell: its rows' range in the order arrays, alpha range; per keyword the cells
    holding it and, per such (keyword, cell) pair, the rows; a stamp per row."""

    cell_ptr: I64
    min_alpha: F
    max_alpha: F
    term_ptr: I64
    term_cell: npt.NDArray[np.int32]
    pair_ptr: I64
    pair_row: I64
    seen: I64


class TopkArrays(NamedTuple):
    """What the top-k matcher's kernels work on: cell bounds and cells, subscriptions,
    their state and the window, the forward search and re-evaluation scratch, the term
    weights and Dmax (m)."""

    cb: CellBoundArrays
    cells: TopkCellArrays
    sub: TopkSubArrays
    st: TopkState
    win: WindowArrays
    fw: ForwardArrays
    rs: ReevalScratch
    weights: F
    dmax: float


class KillLists(NamedTuple):
    """Per message i, the subscription rows ``row[ptr[i]:ptr[i + 1]]`` withdrawn before it."""

    ptr: I64
    row: I64


@numba.njit(cache=True, inline="always")
def _keep(lb: float, limit: float, slack_abs: float, slack_rel: float
          ) -> bool:  # pragma: no cover - compiled
    return lb <= limit + slack_abs + slack_rel * abs(limit)


@numba.njit(cache=True, nogil=True, inline="always")
def _consider(  # pragma: no cover - compiled
    s: int, tsim: float, theta: float, same: bool, eta: float, dcm: float, i: int,
    msg: MessageArrays, tk: TopkArrays, sc: _Scratch, cand_tsim: F, n_cand: int,
) -> int:
    """Steps 2-3 for row s and message i with the exact TSIM: a candidate (appended) or
    not. ``same``, ``eta`` and ``dcm`` are the cell pair's (s's cell, i's cell) bounds."""
    sub, cb = tk.sub, tk.cb
    lim = distance_upper_bound_kernel(sub.alpha[s], theta, tsim, tk.dmax)
    if lim < 0.0:
        return n_cand
    dx = sub.x[s] - msg.x[i]
    dy = sub.y[s] - msg.y[i]
    de = np.sqrt(dx * dx + dy * dy)
    lb_s = cb.kappa * de if same else max(eta * de, sub.din_out[s] + dcm + msg.din_in[i])
    if not _keep(lb_s, lim, cb.slack_abs, cb.slack_rel):
        return n_cand
    sc.cand_row[n_cand] = s
    sc.cand_edge[n_cand] = sub.chain[s]
    sc.cand_offset[n_cand] = sub.chain_offset[s]
    sc.cand_limit[n_cand] = lim
    cand_tsim[n_cand] = tsim
    return n_cand + 1


@numba.njit(cache=True, nogil=True)
def _arrive(  # pragma: no cover - compiled
    i: int, t: int, msg: MessageArrays, tk: TopkArrays, search: VerifySearch, sc: _Scratch,
    cand_tsim: F, ev: EventArrays, n_ev: int,
) -> int:
    """Offer message i (arrival number t) to every subscription it may matter to."""
    cb, cells, sub, st, win = tk.cb, tk.cells, tk.sub, tk.st, tk.win
    weights, dmax = tk.weights, tk.dmax
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
    n_cand = 0
    # Keyword path: every row of a cell within reach sharing a keyword with m, through
    # the (keyword, cell) postings; each is marked seen and checked with its exact TSIM.
    n_terms = cells.term_ptr.size - 1
    for q in range(msg.kw_ptr[i], msg.kw_ptr[i + 1]):
        term = msg.kw_terms[q]
        if term >= n_terms:
            continue
        for g in range(cells.term_ptr[term], cells.term_ptr[term + 1]):
            c = cells.term_cell[g]
            if not _keep(sc.cell_lb[c], dmax, cb.slack_abs, cb.slack_rel):
                continue
            same = c == mc
            eta = cb.eta_t[mc, c]
            dcm = cb.D_t[mc, c]
            for p in range(cells.pair_ptr[g], cells.pair_ptr[g + 1]):
                s = cells.pair_row[p]
                if cells.seen[s] == stamp:
                    continue
                cells.seen[s] = stamp
                theta = st.theta[s]
                if theta == np.inf:
                    continue
                st.stats[2] += 1
                tsim = tsim_kernel(sub.kw_ptr, sub.kw_terms, weights, s, sc.term_mark, stamp)
                n_cand = _consider(s, tsim, theta, same, eta, dcm, i, msg, tk, sc, cand_tsim,
                                   n_cand)
    # Text-free path: every other row has TSIM = 0 exactly (no shared weight is summed;
    # its keyword weights are positive), so SIM <= alpha (1 - dNmin / Dmax) =: UB0; rows
    # are scanned in the order of their key snapshot theta / alpha up to the cut
    # (see the module docstring).
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
        cut = spro * (1.0 + KEY_MARGIN) + KEY_MARGIN
        dirty = st.cell_dirty[c]
        same = c == mc
        eta = cb.eta_t[mc, c]
        dcm = cb.D_t[mc, c]
        for p in range(cells.cell_ptr[c], cells.cell_ptr[c + 1]):
            if not dirty and st.order_theta[p] > cut:
                break
            s = st.cell_order[p]
            theta = st.theta[s]
            if theta > sub.alpha[s] * spro + SIM_SLACK or cells.seen[s] == stamp:
                continue
            st.stats[2] += 1
            n_cand = _consider(s, 0.0, theta, same, eta, dcm, i, msg, tk, sc, cand_tsim,
                               n_cand)
    if n_cand == 0:
        return n_ev
    st.stats[3] += n_cand
    radius = 0.0
    for j in range(n_cand):
        radius = max(radius, sc.cand_limit[j])
    st.stats[6] += int(radius)
    st.stats[5] += verify_candidates(search, msg.chain[i], msg.chain_offset[i], sc.cand_edge,
                                     sc.cand_offset, sc.cand_limit, n_cand, sc.cand_dist)
    for j in range(n_cand):
        d = sc.cand_dist[j]
        if not d <= dmax:
            continue
        s = sc.cand_row[j]
        score = sim_kernel(sub.alpha[s], d, dmax, cand_tsim[j])
        n_ev = offer(st, sub, win, s, t, score, d, ev, n_ev)
    return n_ev


@numba.njit(cache=True, nogil=True)
def push_messages(  # pragma: no cover - compiled
    start: int, stop: int, ids: I64, msg: MessageArrays, tk: TopkArrays,
    search: VerifySearch, sc: _Scratch, cand_tsim: F, ev: EventArrays, kills: KillLists,
) -> tuple[int, int]:
    """Messages start .. stop - 1 in order, while the events surely fit; (next, n_events).

    Before message i, the rows ``kills.row[kills.ptr[i]:kills.ptr[i + 1]]`` (subscriptions
    whose ``expires_at`` the message's time reaches) are withdrawn.
    """
    sub, st, win, fw, rs = tk.sub, tk.st, tk.win, tk.fw, tk.rs
    weights, dmax = tk.weights, tk.dmax
    kill_ptr, kill_row = kills.ptr, kills.row
    window = win.seq.size
    n_subs = sub.k.size
    n_ev = 0
    i = start
    while i < stop:
        kc = 0
        for q in range(kill_ptr[i], kill_ptr[i + 1]):
            kc += min(sub.k[kill_row[q]], st.size[kill_row[q]])
        if n_ev + 4 * n_subs + 8 + kc > ev.seq.size:
            break
        t = st.counter[0]
        for q in range(kill_ptr[i], kill_ptr[i + 1]):
            s = kill_row[q]
            if st.theta[s] < np.inf:  # not withdrawn already
                n_ev = withdraw(st, sub, win, s, t, 0, ev, n_ev)
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
        n_ev = _arrive(i, t, msg, tk, search, sc, cand_tsim, ev, n_ev)
        st.counter[0] = t + 1
        i += 1
    return i, n_ev


@numba.njit(cache=True, nogil=True, inline="always")
def _order_key(theta: float, alpha: float) -> float:  # pragma: no cover - compiled
    """theta / alpha, the text-free path's key; -inf (always scanned) when alpha < 2^-20
    and theta < inf."""
    if alpha >= KEY_MARGIN:
        return theta / alpha
    return np.inf if theta == np.inf else -np.inf


@numba.njit(cache=True, nogil=True)
def resort_cells(cell_ptr: I64, alpha: F, st: TopkState) -> None:  # pragma: no cover - compiled
    """Order each cell's rows by their current key theta / alpha; clear the dirty flags."""
    for c in range(cell_ptr.size - 1):
        a, b = cell_ptr[c], cell_ptr[c + 1]
        if b - a > 1:
            rows = st.cell_order[a:b].copy()
            key = np.empty(b - a)
            for q in range(b - a):
                key[q] = _order_key(st.theta[rows[q]], alpha[rows[q]])
            order = np.argsort(key, kind="mergesort")
            for q in range(b - a):
                st.cell_order[a + q] = rows[order[q]]
                st.order_theta[a + q] = key[order[q]]
        elif b - a == 1:
            r = st.cell_order[a]
            st.order_theta[a] = _order_key(st.theta[r], alpha[r])
        st.cell_dirty[c] = False
