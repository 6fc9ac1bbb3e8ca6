"""Compiled kernels of an index build: prefixes, posting layout and CSR gathers.

At ten million subscriptions a vectorised build spends most of its peak memory on
temporaries (a row id, a weight, a bound per keyword, each 8 bytes times 26 million, and
the sort keys of the postings). These kernels walk the rows once or twice and write only
their outputs; each reproduces its vectorised counterpart bit for bit (same operations in
the same order), which the tests check against the vectorised code. Internal to the package (no
``__all__``): :func:`index.limits.location_aware_prefixes`,
:func:`index.postings.build_posting_layout` and ``Subscriptions.take`` call them.
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

from index.limits import DNUB_NUMERATOR_SLACK, TEXT_BOUND_INFLATION, distance_upper_bound_kernel

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_U = 2.0**-53
assert DNUB_NUMERATOR_SLACK > 0  # the bound kernel below carries the rounding argument


@numba.njit(cache=True, nogil=True)
def take_csr_kernel(ptr: IntArray, values: npt.NDArray[np.int32], rows: IntArray
                    ) -> tuple[IntArray, npt.NDArray[np.int32]]:  # pragma: no cover
    """Rows ``rows`` of a CSR (ptr, values), in that order: (new ptr, new values)."""
    n = rows.size
    new_ptr = np.empty(n + 1, dtype=np.int64)
    new_ptr[0] = 0
    for i in range(n):
        r = rows[i]
        new_ptr[i + 1] = new_ptr[i] + ptr[r + 1] - ptr[r]
    out = np.empty(new_ptr[n], dtype=values.dtype)
    for i in range(n):
        r = rows[i]
        base = new_ptr[i] - ptr[r]
        for j in range(ptr[r], ptr[r + 1]):
            out[base + j] = values[j]
    return new_ptr, out


@numba.njit(cache=True, nogil=True, error_model="numpy")
def lap_kernel(kw_ptr: IntArray, kw_terms: npt.NDArray[np.int32], alpha: FloatArray,
               tau: FloatArray, weights: FloatArray, term_rank: IntArray, dmax_m: float,
               tolerance: float):  # type: ignore[no-untyped-def]  # pragma: no cover
    """The arrays of :func:`index.limits.location_aware_prefixes`, row by row.

    Per row: keywords in rank order (weight descending), suffix sums from the row's last
    keyword back (as ``row_suffix_sums``), TUB = min(suffix / wsum + allowance,
    1 + allowance) with allowance = TEXT_BOUND_INFLATION + (8k + 8) u, DNUB by the shared
    scalar kernel; the same float operations in the same order as the vectorised code.
    Returns (row, term, dnub, tub, wildcard_rows, wildcard_dnub, dn_limit).
    """
    n = alpha.size
    longest = 0
    for r in range(n):
        longest = max(longest, kw_ptr[r + 1] - kw_ptr[r])
    order = np.empty(longest, dtype=np.int64)
    suffix = np.empty(longest, dtype=np.float64)
    full = 1.0 + TEXT_BOUND_INFLATION
    # Pass 1 counts; pass 2 (fill=True) writes. No per-keyword array is kept between them.
    count = 0
    n_wild = 0
    row_o = np.empty(0, dtype=np.int64)
    term_o = np.empty(0, dtype=np.int32)
    dnub_o = np.empty(0, dtype=np.float64)
    tub_o = np.empty(0, dtype=np.float64)
    wild_o = np.empty(0, dtype=np.int64)
    wdnub_o = np.empty(0, dtype=np.float64)
    dn_limit = np.empty(n, dtype=np.float64)
    for fill in (False, True):
        if fill:
            row_o = np.empty(count, dtype=np.int64)
            term_o = np.empty(count, dtype=np.int32)
            dnub_o = np.empty(count, dtype=np.float64)
            tub_o = np.empty(count, dtype=np.float64)
            wild_o = np.empty(n_wild, dtype=np.int64)
            wdnub_o = np.empty(n_wild, dtype=np.float64)
        k_out = 0
        k_wild = 0
        for r in range(n):
            a = kw_ptr[r]
            k = kw_ptr[r + 1] - a
            # Insertion sort of the row's keywords by rank (ranks are unique).
            for i in range(k):
                j = i
                while j > 0 and term_rank[kw_terms[a + order[j - 1]]] > term_rank[kw_terms[a + i]]:
                    order[j] = order[j - 1]
                    j -= 1
                order[j] = i
            acc = 0.0
            for i in range(k - 1, -1, -1):
                acc += weights[kw_terms[a + order[i]]]
                suffix[i] = acc
            wsum = suffix[0] if k > 0 else 0.0
            allowance = TEXT_BOUND_INFLATION + (8.0 * float(k) + 8.0) * _U
            tau_e = tau[r] - tolerance
            al = alpha[r]
            for i in range(k):
                tub = min(suffix[i] / wsum + allowance, 1.0 + allowance)
                dnub = distance_upper_bound_kernel(al, tau_e, tub, dmax_m)
                if dnub >= 0.0:
                    if fill:
                        row_o[k_out] = r
                        term_o[k_out] = kw_terms[a + order[i]]
                        dnub_o[k_out] = dnub
                        tub_o[k_out] = tub
                    k_out += 1
            lim = -np.inf if al >= 1.0 else (tau_e - al) / (1.0 - al)
            if lim <= 0.0:
                if fill:
                    wild_o[k_wild] = r
                    wdnub_o[k_wild] = distance_upper_bound_kernel(al, tau_e, 0.0, dmax_m)
                k_wild += 1
            if fill:
                d = distance_upper_bound_kernel(al, tau_e, full, dmax_m)
                dn_limit[r] = d if d >= 0.0 else -1.0
        count = k_out
        n_wild = k_wild
    return row_o, term_o, dnub_o, tub_o, wild_o, wdnub_o, dn_limit


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
    """The arrays of :class:`index.postings.PostingLayout`, or ``ok = False``.

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
