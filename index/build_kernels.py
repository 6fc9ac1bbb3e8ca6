"""Compiled kernels of the posting layout's build.

At ten million subscriptions a vectorised build spends most of its peak memory on
temporaries (a row id, a weight, a bound per keyword, each 8 bytes times 26 million, and
the sort keys of the postings). These kernels walk the postings once or twice and write
only their outputs; each reproduces its vectorised counterpart bit for bit (same
operations in the same order), which the tests check against the vectorised code. Internal
to the package (no ``__all__``): :func:`roadpubsub.index.postings.build_posting_layout` calls them.
The other build kernels sit with their subject: :func:`roadpubsub.index.limits.lap_kernel` (the
prefixes), :func:`roadpubsub.index.csr.take_csr` (keyword rows).
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@numba.njit(cache=True, nogil=True)
def _stable_desc(values: FloatArray) -> IntArray:  # pragma: no cover - compiled
    """Stable order of ``values`` descending (ties keep their order)."""
    k = values.size
    if k > 32:
        return np.argsort(-values, kind="mergesort")
    out = np.empty(k, dtype=np.int64)
    for i in range(k):
        j = i
        while j > 0 and values[out[j - 1]] < values[i]:
            out[j] = out[j - 1]
            j -= 1
        out[j] = i
    return out


@numba.njit(cache=True, nogil=True)
def layout_kernel(post_slot: IntArray, post_term_slot: IntArray, post_value: FloatArray,
                  slot_cell: npt.NDArray[np.int32], slot_edge: npt.NDArray[np.int32],
                  n_term_slots: int, edges_by_value: bool):  # type: ignore[no-untyped-def]  # pragma: no cover
    """The arrays of :class:`roadpubsub.index.postings.PostingLayout`, or ``ok = False``.

    Works when the slots are sorted by (cell, edge) and, within each term slot, the
    postings come in nondecreasing slot order (as both architectures make them); the
    caller falls back to sorting otherwise. A stable counting sort by term slot then
    leaves each term's postings in (cell, edge, input) order, so only the runs of one
    edge need sorting by value (stable, descending): exactly the order of the lexsort by
    (term slot, cell, edge, -value) with ties in input order. Returns (ok, term_ptr,
    grp_cell, grp_value, grp_start, eg_edge, eg_value, eg_start, post_slot, post_value).
    """
    p_total = post_slot.size
    n_slots = slot_cell.size
    ok = True
    for s in range(1, n_slots):
        if slot_cell[s] < slot_cell[s - 1] or (slot_cell[s] == slot_cell[s - 1]
                                               and slot_edge[s] < slot_edge[s - 1]):
            ok = False
            break
    start = np.zeros(n_term_slots + 1, dtype=np.int64)
    for p in range(p_total):
        t = post_term_slot[p]
        if t < 0 or t >= n_term_slots:
            ok = False
            break
        start[t + 1] += 1
    e_i64 = np.empty(0, dtype=np.int64)
    e_i32 = np.empty(0, dtype=np.int32)
    e_f64 = np.empty(0, dtype=np.float64)
    if not ok:
        return (False, e_i64, e_i32, e_f64, e_i64, e_i32, e_f64, e_i64, e_i32, e_f64)
    for t in range(n_term_slots):
        start[t + 1] += start[t]
    pos = start[:-1].copy()
    last = np.full(n_term_slots, -1, dtype=np.int64)
    slot = np.empty(p_total, dtype=np.int32)
    value = np.empty(p_total, dtype=np.float64)
    for p in range(p_total):
        t = post_term_slot[p]
        s = post_slot[p]
        if s < last[t]:
            ok = False
            break
        last[t] = s
        q = pos[t]
        pos[t] = q + 1
        slot[q] = s
        value[q] = post_value[p]
    if not ok:
        return (False, e_i64, e_i32, e_f64, e_i64, e_i32, e_f64, e_i64, e_i32, e_f64)
    # Count the groups (term slot, cell) and edge groups.
    n_grp = 0
    n_eg = 0
    for t in range(n_term_slots):
        for q in range(start[t], start[t + 1]):
            s = slot[q]
            if q == start[t] or slot_cell[s] != slot_cell[slot[q - 1]]:
                n_grp += 1
                n_eg += 1
            elif slot_edge[s] != slot_edge[slot[q - 1]]:
                n_eg += 1
    term_ptr = np.zeros(n_term_slots + 1, dtype=np.int64)
    grp_cell = np.empty(n_grp, dtype=np.int32)
    grp_value = np.empty(n_grp, dtype=np.float64)
    grp_start = np.empty(n_grp + 1, dtype=np.int64)
    eg_edge = np.empty(n_eg, dtype=np.int32)
    eg_value = np.empty(n_eg, dtype=np.float64)
    eg_start = np.empty(n_eg + 1, dtype=np.int64)
    g = 0
    e = 0
    for t in range(n_term_slots):
        q = start[t]
        end_t = start[t + 1]
        while q < end_t:
            cell = slot_cell[slot[q]]
            grp_cell[g] = cell
            grp_start[g] = e
            e_first = e
            gq = q
            while q < end_t and slot_cell[slot[q]] == cell:
                edge = slot_edge[slot[q]]
                a = q
                while q < end_t and slot_cell[slot[q]] == cell and slot_edge[slot[q]] == edge:
                    q += 1
                if q - a > 1:
                    o = _stable_desc(value[a:q])
                    vs = value[a:q][o]
                    ss = slot[a:q][o]
                    value[a:q] = vs
                    slot[a:q] = ss
                eg_edge[e] = edge
                eg_value[e] = value[a]
                eg_start[e] = a
                e += 1
            if edges_by_value and e - e_first > 1:
                o = _stable_desc(eg_value[e_first:e])
                sizes = np.empty(e - e_first, dtype=np.int64)
                for i in range(e - e_first):
                    nxt = eg_start[e_first + i + 1] if e_first + i + 1 < e else q
                    sizes[i] = nxt - eg_start[e_first + i]
                buf_v = np.empty(q - gq, dtype=np.float64)
                buf_s = np.empty(q - gq, dtype=np.int32)
                new_edge = eg_edge[e_first:e][o]
                new_value = eg_value[e_first:e][o]
                new_start = np.empty(e - e_first, dtype=np.int64)
                w = 0
                for i in range(e - e_first):
                    src = eg_start[e_first + o[i]]
                    new_start[i] = gq + w
                    for j in range(sizes[o[i]]):
                        buf_v[w] = value[src + j]
                        buf_s[w] = slot[src + j]
                        w += 1
                value[gq:q] = buf_v
                slot[gq:q] = buf_s
                eg_edge[e_first:e] = new_edge
                eg_value[e_first:e] = new_value
                eg_start[e_first:e] = new_start
            best = value[gq]
            for i in range(gq + 1, q):
                best = max(best, value[i])
            grp_value[g] = best
            g += 1
        term_ptr[t + 1] = g
    grp_start[n_grp] = n_eg
    eg_start[n_eg] = p_total
    return (True, term_ptr, grp_cell, grp_value, grp_start, eg_edge, eg_value, eg_start,
            slot, value)
