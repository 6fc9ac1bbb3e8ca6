"""Per-subscription result buffers of the top-k index: a partial k-skyband with a threshold.

Each subscription s keeps, best first by key (SIM, arrival number; the newer wins ties),
a buffer B(s) and a threshold theta(s) with the invariant (Skype, Theorem 6.1):

    B(s) holds every window message m with dN(s, m) <= Dmax, SIM(s, m) >= theta(s) that
    is in the k-skyband of s: fewer than k newer window messages score at least as much.

A message outside the k-skyband can never be in the top-k again (its k dominators are
newer, so they stay in the window at least as long and outrank it), and one scoring below
theta(s) is below every buffered entry. So whenever B(s) holds at least k entries, or
theta(s) = -inf, the top-k is the first min(k, |B(s)|) entries. Only when an expiry leaves
fewer than k entries with theta(s) > -inf is the window re-scored for s
(:func:`reevaluate`); the cost-based choice of Skype is replaced by a fixed capacity C
(:func:`roadpubsub.index.topk.buffer_capacity`):

* :func:`offer` inserts a message scoring >= theta(s), raising the dominance count of every
  entry it outranks and dropping those it makes k-dominated. While the buffer then holds
  more than C entries and dropping all entries of the lowest score leaves at least k,
  they are dropped and theta(s) becomes the next float above that score: the invariant
  holds again and the top-k is intact. A new message is always in the k-skyband (no
  message is newer), so every message scoring >= theta(s) must be offered; a high
  theta(s), the C-th best buffered score, is what keeps offers few.
* :func:`expire` removes the expired message; the entry at rank k + 1, if any, moves up.

Subscriptions are found at expiry through buckets by the arrival number of their oldest
buffered entry (a doubly linked list per window position), never by scanning them all.
Every decision compares floats exactly as the reference does, so the events are equal.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np
import numpy.typing as npt

from roadpubsub.pruning.similarity import sim_kernel, tsim_kernel
from roadpubsub.pruning.topk_events import EVENT_EVICT, EVENT_INSERT
from roadpubsub.roadnet.dijkstra_kernels import (
    SearchGraph,
    SearchQuery,
    SearchWorkspace,
    dijkstra_kernel,
    reset_kernel,
)

__all__ = ["EventArrays", "ForwardArrays", "ReevalScratch", "TopkState", "TopkSubArrays",
           "WindowArrays", "expire", "join", "offer", "reevaluate", "relink", "relink_all",
           "withdraw"]

F = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
B = npt.NDArray[np.bool_]

#: Counters of :class:`TopkState` ``stats``, by index.
STAT_NAMES = ("reevaluations", "cells_scanned", "subscriptions_checked", "candidates",
              "offers", "settled", "search_radius_m")
REEVALUATIONS, CELLS_SCANNED, SUBS_CHECKED, CANDIDATES, OFFERS, SETTLED, RADIUS = range(7)


class TopkSubArrays(NamedTuple):
    """The subscriptions: position and din_out (m), cell, chain point, alpha, k, keywords,
    buffer slots."""

    x: F
    y: F
    din_out: F
    cell: I32
    chain: I32
    chain_offset: F
    alpha: F
    k: I64
    kw_ptr: I64
    kw_terms: I32
    buf_ptr: I64
    cap: I64


class TopkState(NamedTuple):
    """What changes as messages arrive: thresholds, buffers, expiry buckets, cell order."""

    theta: F
    size: I64
    b_seq: I64
    b_score: F
    b_dist: F
    b_dom: I64
    head: I64
    nxt: I64
    prv: I64
    where: I64
    cell_order: I64
    order_theta: F
    cell_dirty: B
    counter: I64  # [0]: next arrival number, [1]: next mark stamp
    stats: I64


class WindowArrays(NamedTuple):
    """The last W messages by arrival number modulo W: id, chain point, keywords."""

    seq: I64
    mid: I64
    chain: I32
    offset: F
    nterms: I64
    terms: npt.NDArray[np.int32]


class ForwardArrays(NamedTuple):
    """Forward arcs and edges of the chain graph, and a search workspace on them."""

    indptr: I64
    indices: I32
    weights: F
    edge_u: I32
    edge_v: I32
    edge_length: F
    edge_twoway: B
    dist: F
    target_ws: F
    heap_d: F
    heap_n: I64
    touched: I64


class ReevalScratch(NamedTuple):
    """Buffers of one re-evaluation (W entries each) and the keyword marks."""

    seq: I64
    score: F
    dist: F
    bit: I64
    term_mark: I64


class EventArrays(NamedTuple):
    """Events found (row = subscription row, mid = message id)."""

    seq: I64
    phase: npt.NDArray[np.int8]
    event: npt.NDArray[np.int8]
    mid: I64
    row: I64
    rank: I64
    score: F
    dist: F


@numba.njit(cache=True, nogil=True, inline="always")
def _emit(ev: EventArrays, n: int, seq: int, phase: int, kind: int, mid: int, row: int,
          rank: int, score: float, dist: float) -> int:  # pragma: no cover - compiled
    ev.seq[n] = seq
    ev.phase[n] = phase
    ev.event[n] = kind
    ev.mid[n] = mid
    ev.row[n] = row
    ev.rank[n] = rank
    ev.score[n] = score
    ev.dist[n] = dist
    return n + 1


@numba.njit(cache=True, nogil=True)
def relink(st: TopkState, sub: TopkSubArrays, s: int, window: int) -> None:  # pragma: no cover
    """File s in the bucket of its oldest buffered arrival number (none when empty)."""
    old = st.where[s]
    if old >= 0:
        p, q = st.prv[s], st.nxt[s]
        if p >= 0:
            st.nxt[p] = q
        else:
            st.head[old % window] = q
        if q >= 0:
            st.prv[q] = p
        st.where[s] = -1
    n = st.size[s]
    if n == 0:
        return
    base = sub.buf_ptr[s]
    oldest = st.b_seq[base]
    for j in range(base + 1, base + n):
        oldest = min(oldest, st.b_seq[j])
    b = oldest % window
    st.nxt[s] = st.head[b]
    st.prv[s] = -1
    if st.head[b] >= 0:
        st.prv[st.head[b]] = s
    st.head[b] = s
    st.where[s] = oldest


@numba.njit(cache=True, nogil=True, inline="always")
def _trim(b_score: F, base: int, n: int, cap: int, k: int) -> tuple[int, float]:  # pragma: no cover
    """Drop whole lowest-score groups from a buffer of n entries while it holds more than
    ``cap`` and more than k would stay; (entries left, score of the last group dropped or
    NaN). A k-skyband holds at most k entries of one score (of equal scores the newer
    dominates), so the buffer never needs more than max(cap, 2k - 1) + 1 slots."""
    low = np.nan
    while n > cap:
        g = b_score[base + n - 1]
        m = n - 1
        while m > 0 and b_score[base + m - 1] == g:
            m -= 1
        if m < k:
            break
        n = m
        low = g
    return n, low


@numba.njit(cache=True, nogil=True)
def offer(st: TopkState, sub: TopkSubArrays, win: WindowArrays, s: int, t: int,
          score: float, dist: float, ev: EventArrays, n_ev: int) -> int:  # pragma: no cover
    """Offer the arriving message t (score, dist) to s; returns the new event count."""
    if not score >= st.theta[s]:
        return n_ev
    window = win.seq.size
    base = sub.buf_ptr[s]
    cap = sub.cap[s]
    n = st.size[s]
    k = sub.k[s]
    st.stats[OFFERS] += 1
    p = 0  # the newest message outranks every entry of a score <= its own
    while p < n and st.b_score[base + p] > score:
        p += 1
    if p < k:
        if n >= k:
            e = base + k - 1
            n_ev = _emit(ev, n_ev, t, 1, EVENT_EVICT, win.mid[st.b_seq[e] % window], s, k,
                         st.b_score[e], st.b_dist[e])
        n_ev = _emit(ev, n_ev, t, 1, EVENT_INSERT, win.mid[t % window], s, p + 1, score, dist)
    # Entries from p on are outranked by the new message: one more dominator each; the
    # k-dominated ones leave (compacted forwards), the rest move down one place.
    w = p
    for j in range(p, n):
        e = base + j
        if st.b_dom[e] + 1 < k:
            d = base + w
            st.b_seq[d] = st.b_seq[e]
            st.b_score[d] = st.b_score[e]
            st.b_dist[d] = st.b_dist[e]
            st.b_dom[d] = st.b_dom[e] + 1
            w += 1
    for j in range(base + w - 1, base + p - 1, -1):
        st.b_seq[j + 1] = st.b_seq[j]
        st.b_score[j + 1] = st.b_score[j]
        st.b_dist[j + 1] = st.b_dist[j]
        st.b_dom[j + 1] = st.b_dom[j]
    st.b_seq[base + p] = t
    st.b_score[base + p] = score
    st.b_dist[base + p] = dist
    st.b_dom[base + p] = 0
    n_new, low = _trim(st.b_score, base, w + 1, cap, k)
    if low == low:  # dropped: nothing of a score <= low is kept any more
        st.theta[s] = np.nextafter(low, np.inf)
    st.size[s] = n_new
    if n == 0 or n_new != n + 1:  # an entry left (or the first came): the oldest may change
        relink(st, sub, s, window)
    return n_ev


@numba.njit(cache=True, nogil=True)
def expire(st: TopkState, sub: TopkSubArrays, win: WindowArrays, fw: ForwardArrays,
           sc: ReevalScratch, weights: F, dmax: float, s: int, x: int, t: int,
           ev: EventArrays, n_ev: int) -> int:  # pragma: no cover - compiled
    """Message x leaves the window as t arrives: drop it from s, refill; new event count."""
    window = win.seq.size
    base = sub.buf_ptr[s]
    n = st.size[s]
    k = sub.k[s]
    q = -1
    for j in range(n):
        if st.b_seq[base + j] == x:
            q = j
            break
    if q < 0:
        relink(st, sub, s, window)
        return n_ev
    score, dist = st.b_score[base + q], st.b_dist[base + q]
    for j in range(base + q, base + n - 1):  # x is the oldest: it dominates no one
        st.b_seq[j] = st.b_seq[j + 1]
        st.b_score[j] = st.b_score[j + 1]
        st.b_dist[j] = st.b_dist[j + 1]
        st.b_dom[j] = st.b_dom[j + 1]
    n -= 1
    st.size[s] = n
    if q < k:
        n_ev = _emit(ev, n_ev, t, 0, EVENT_EVICT, win.mid[x % window], s, q + 1, score, dist)
        if n >= k:
            e = base + k - 1
            n_ev = _emit(ev, n_ev, t, 0, EVENT_INSERT, win.mid[st.b_seq[e] % window], s, k,
                         st.b_score[e], st.b_dist[e])
        elif st.theta[s] > -np.inf:
            # The buffer ran dry: keep k more entries from now on (up to its slots), so
            # a subscription whose top-k turns over fast is re-evaluated less often.
            sub.cap[s] = min(sub.cap[s] + k, sub.buf_ptr[s + 1] - base - 2)
            reevaluate(st, sub, win, fw, sc, weights, dmax, s, t, t - window + 1)
            for j in range(n, min(k, st.size[s])):
                e = base + j
                n_ev = _emit(ev, n_ev, t, 0, EVENT_INSERT, win.mid[st.b_seq[e] % window], s,
                             j + 1, st.b_score[e], st.b_dist[e])
    relink(st, sub, s, window)
    return n_ev


@numba.njit(cache=True, nogil=True)
def reevaluate(st: TopkState, sub: TopkSubArrays, win: WindowArrays, fw: ForwardArrays,
               sc: ReevalScratch, weights: F, dmax: float, s: int, t: int,
               oldest: int) -> None:  # pragma: no cover - compiled
    """Rebuild B(s) and theta(s) from the window's messages ``oldest`` .. t - 1.

    One forward search from s bounded by Dmax gives the exact dN to every window message
    (grid lengths: the same sums as the reverse searches of the reference and of the
    verification); SIM comes from the shared kernels. The k-skyband is then taken in key
    order with a Fenwick tree over arrival order (dominators = earlier in key order and
    newer), keeping the best C entries as :func:`offer` would.
    """
    window = win.seq.size
    st.stats[REEVALUATIONS] += 1
    e, o = sub.chain[s], sub.chain_offset[s]
    seeds = np.empty(2, dtype=np.int64)
    seed_d = np.empty(2)
    seeds[0] = fw.edge_v[e]
    seed_d[0] = fw.edge_length[e] - o
    n_seeds = 1
    if fw.edge_twoway[e] or o == 0.0:
        seeds[1] = fw.edge_u[e]
        seed_d[1] = o
        n_seeds = 2
    no_t = np.empty(0, dtype=np.int64)
    n_touched, _ = dijkstra_kernel(
        SearchGraph(fw.indptr, fw.indices, fw.weights,
                    np.empty(0, dtype=np.int32)),  # no dead ends skipped
        SearchQuery(seeds[:n_seeds], seed_d[:n_seeds], dmax, no_t, np.empty(0)),
        SearchWorkspace(fw.dist, fw.target_ws, fw.heap_d, fw.heap_n, fw.touched))
    nc = 0
    alpha = sub.alpha[s]
    for seq in range(t - 1, max(oldest, 0) - 1, -1):  # newest first
        j = seq % window
        if win.seq[j] != seq:
            continue
        me, mo = win.chain[j], win.offset[j]
        length = fw.edge_length[me]
        d = fw.dist[fw.edge_u[me]] + mo
        if fw.edge_twoway[me] or (mo == length and length > 0.0):
            d = min(d, fw.dist[fw.edge_v[me]] + (length - mo))
        if me == e:
            ahead = mo - o
            if ahead >= 0.0:
                d = min(d, ahead)
            elif fw.edge_twoway[me]:
                d = min(d, -ahead)
        if not d <= dmax:
            continue
        st.counter[1] += 1
        stamp = st.counter[1]
        for q in range(win.nterms[j]):
            sc.term_mark[win.terms[j, q]] = stamp
        tsim = tsim_kernel(sub.kw_ptr, sub.kw_terms, weights, s, sc.term_mark, stamp)
        sc.seq[nc] = seq
        sc.score[nc] = sim_kernel(alpha, d, dmax, tsim)
        sc.dist[nc] = d
        nc += 1
    reset_kernel(fw.dist, fw.touched, n_touched)
    order = np.argsort(-sc.score[:nc], kind="mergesort")  # stable: ties stay newest first
    for j in range(nc + 1):
        sc.bit[j] = 0
    base = sub.buf_ptr[s]
    room = sub.buf_ptr[s + 1] - base - 1
    k = sub.k[s]
    n = 0
    for i in range(nc):
        j = order[i]  # position in arrival order, newest first: dominators have smaller j
        dom = 0
        a = j  # Fenwick prefix count over positions < j
        while a > 0:
            dom += sc.bit[a]
            a -= a & (-a)
        a = j + 1
        while a <= nc:
            sc.bit[a] += 1
            a += a & (-a)
        if dom >= k:
            continue
        d = base + n
        st.b_seq[d] = sc.seq[j]
        st.b_score[d] = sc.score[j]
        st.b_dist[d] = sc.dist[j]
        st.b_dom[d] = dom
        n += 1
        if n >= room:  # > max(cap, 2k): _trim surely drops the lowest score group below
            break
    n, low = _trim(st.b_score, base, n, sub.cap[s], k)
    theta = -np.inf if low != low else np.nextafter(low, np.inf)
    if theta < st.theta[s]:
        st.cell_dirty[sub.cell[s]] = True  # the cell's order by threshold is stale
    st.theta[s] = theta
    st.size[s] = n


@numba.njit(cache=True, nogil=True)
def relink_all(st: TopkState, sub: TopkSubArrays, window: int) -> None:  # pragma: no cover
    """File every subscription in its expiry bucket afresh (after rows were renumbered)."""
    st.head[:] = -1
    st.nxt[:] = -1
    st.prv[:] = -1
    st.where[:] = -1
    for s in range(sub.k.size):
        relink(st, sub, s, window)


@numba.njit(cache=True, nogil=True)
def withdraw(st: TopkState, sub: TopkSubArrays, win: WindowArrays, s: int, seq: int,
             phase: int, ev: EventArrays, n_ev: int) -> int:  # pragma: no cover - compiled
    """Take s out of matching: its top-k is evicted from the bottom rank up (each evict's
    rank is then valid when replayed), its buffer emptied, its threshold +inf (no message
    is ever offered to it again, and every cell bound skips it)."""
    window = win.seq.size
    base = sub.buf_ptr[s]
    for j in range(min(sub.k[s], st.size[s]) - 1, -1, -1):
        e = base + j
        n_ev = _emit(ev, n_ev, seq, phase, EVENT_EVICT, win.mid[st.b_seq[e] % window], s,
                     j + 1, st.b_score[e], st.b_dist[e])
    st.size[s] = 0
    st.theta[s] = np.inf
    relink(st, sub, s, window)  # empty: leaves its bucket
    return n_ev


@numba.njit(cache=True, nogil=True)
def join(st: TopkState, sub: TopkSubArrays, win: WindowArrays, fw: ForwardArrays,
         sc: ReevalScratch, weights: F, dmax: float, rows: I64, seq: int, phase: int,
         ev: EventArrays, n_ev: int) -> int:  # pragma: no cover - compiled
    """New rows take their buffers from the whole window (messages ``counter[0] - W`` ..
    ``counter[0] - 1``) by :func:`reevaluate`; their top-k is emitted as inserts at ranks
    1, 2, ... (each rank valid when replayed)."""
    window = win.seq.size
    t = st.counter[0]
    for i in range(rows.size):
        s = rows[i]
        reevaluate(st, sub, win, fw, sc, weights, dmax, s, t, t - window)
        base = sub.buf_ptr[s]
        for j in range(min(sub.k[s], st.size[s])):
            e = base + j
            n_ev = _emit(ev, n_ev, seq, phase, EVENT_INSERT, win.mid[st.b_seq[e] % window],
                         s, j + 1, st.b_score[e], st.b_dist[e])
        relink(st, sub, s, window)
    return n_ev
