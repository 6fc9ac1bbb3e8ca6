"""Compiled updates of the delta's buffers (:class:`roadpubsub.index.delta.DeltaBuffer`).

A live service moves one vehicle per request. Written with numpy, a move was some forty
operations on one-element arrays (id lookups in the slots and the delta, a validated copy
of the slot's row, a merge into the delta's id order that copied the whole order): a fixed
cost of about 0.15 ms per move whatever its size. Here the lookups are one kernel call and
the writes another, over any number of rows; Python computes only the point facts and the
limits (:meth:`roadpubsub.index.spatial.SpatialIndex.facts`,
:func:`roadpubsub.index.limits.location_aware_prefixes`,
the same functions every other update uses) and grows the buffers when they are full.

Every index given to these kernels is checked first: ids are looked up here (an unknown id
gets -1, never an index), slots and delta rows come from those lookups, and the buffers'
capacities are checked before anything is written (a short buffer writes nothing).
Internal to the package (no ``__all__``): :meth:`roadpubsub.index.base.SubscriptionIndex.move` and
:class:`roadpubsub.index.delta.DeltaBuffer` call them.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np
import numpy.typing as npt

F = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
B = npt.NDArray[np.bool_]


class DeltaBufferArrays(NamedTuple):
    """A delta's buffers at full capacity (rows beyond its length are free space)."""

    ids: I64
    edge: I32
    offset: F
    alpha: F
    tau: F
    dn_limit: F
    wildcard: B
    x: F
    y: F
    cell: I32
    din_out: F
    din_in: F
    chain: I32
    chain_offset: F
    ptr: I64  # keyword CSR pointers, capacity + 1
    terms: I32
    by_id: I64  # rows in id order
    ids_sorted: I64  # = ids[by_id]


class SlotSource(NamedTuple):
    """An index's slots: what a moved slot row takes into the delta, and the id lookup."""

    ids: I64
    alpha: F
    tau: F
    kw_ptr: I64
    kw_terms: I32
    active: B
    sorted_ids: I64
    id_order: I64  # slot of each sorted id


class MovedRows(NamedTuple):
    """Moved subscriptions: new points and facts; where each is (from
    :func:`lookup_kernel`); DNlimit and wildcard flags of the slot rows, in row order."""

    edge: I32
    offset: F
    x: F
    y: F
    cell: I32
    din_out: F
    din_in: F
    chain: I32
    chain_offset: F
    slot: I64
    drow: I64
    dn_limit: F
    wildcard: B


@numba.njit(cache=True, nogil=True)
def _find(sorted_values: I64, order: I64, n: int, x: int) -> int:
    pos = np.searchsorted(sorted_values[:n], x)
    if pos < n and sorted_values[pos] == x:
        return int(order[pos])
    return -1


# The per-request kernels below (lookup, merge, relocate, drop) hold the GIL (no nogil):
# a call lasts microseconds, and a thread that releases the GIL for so little waits about
# 100 µs to get it back from a busy thread (the live service's apply thread against its
# event loop); measured: 5-6% less server CPU per request.
@numba.njit(cache=True)
def lookup_kernel(slots: SlotSource, delta: DeltaBufferArrays, n: int, ids: I64,
                  slot_out: I64, drow_out: I64) -> int:
    """Active slot and delta row of each id (-1: not there); returns how many ids are in
    neither. ``n``: the delta's rows."""
    missing = 0
    n_slots = slots.sorted_ids.size
    # Many ids are searched in ascending order: each binary search then walks the path
    # the previous one left in cache (10,000 random ids in 1M: several times faster).
    order = np.argsort(ids) if ids.size >= 256 else np.arange(ids.size)
    for j in range(ids.size):
        i = order[j]
        s = _find(slots.sorted_ids, slots.id_order, n_slots, ids[i])
        if s >= 0 and not slots.active[s]:
            s = -1
        d = _find(delta.ids_sorted, delta.by_id, n, ids[i])
        slot_out[i] = s
        drow_out[i] = d
        if s < 0 and d < 0:
            missing += 1
    return missing


@numba.njit(cache=True)
def merge_ids_kernel(buf: DeltaBufferArrays, n_old: int, n_new: int) -> None:
    """Merge rows ``n_old .. n_new - 1`` (ids new to the delta) into the id order of the
    first ``n_old`` rows, in place (the buffers hold ``n_new`` rows or more)."""
    k = n_new - n_old
    if k <= 0:
        return
    new_rows = n_old + np.argsort(buf.ids[n_old:n_new], kind="mergesort")
    i = n_old - 1
    j = k - 1
    w = n_new - 1
    while j >= 0:
        r = new_rows[j]
        if i >= 0 and buf.ids_sorted[i] > buf.ids[r]:
            buf.ids_sorted[w] = buf.ids_sorted[i]
            buf.by_id[w] = buf.by_id[i]
            i -= 1
        else:
            buf.ids_sorted[w] = buf.ids[r]
            buf.by_id[w] = r
            j -= 1
        w -= 1


@numba.njit(cache=True)
def relocate_kernel(buf: DeltaBufferArrays, n: int, nk: int, slots: SlotSource,
                    moved: MovedRows) -> tuple[int, int]:
    """Give delta rows their new points in place; deactivate moved slots and append them
    to the delta with their keywords, alpha and tau (rows in ``moved`` order) and merge
    their ids into the delta's id order. Returns the delta's new (rows, keywords); when
    the buffers are too small, writes nothing and returns (-rows needed, keywords needed).
    """
    rows_needed = n
    terms_needed = nk
    for i in range(moved.drow.size):
        if moved.drow[i] < 0:
            s = moved.slot[i]
            rows_needed += 1
            terms_needed += slots.kw_ptr[s + 1] - slots.kw_ptr[s]
    if rows_needed > buf.ids.size or terms_needed > buf.terms.size:
        return -rows_needed, terms_needed
    w = n
    t = 0
    for i in range(moved.drow.size):
        r = moved.drow[i]
        if r < 0:
            s = moved.slot[i]
            r = w
            w += 1
            slots.active[s] = False
            buf.ids[r] = slots.ids[s]
            buf.alpha[r] = slots.alpha[s]
            buf.tau[r] = slots.tau[s]
            buf.dn_limit[r] = moved.dn_limit[t]
            buf.wildcard[r] = moved.wildcard[t]
            t += 1
            a = slots.kw_ptr[s]
            b = slots.kw_ptr[s + 1]
            start = buf.ptr[r]
            for j in range(b - a):
                buf.terms[start + j] = slots.kw_terms[a + j]
            buf.ptr[r + 1] = start + (b - a)
        buf.edge[r] = moved.edge[i]
        buf.offset[r] = moved.offset[i]
        buf.x[r] = moved.x[i]
        buf.y[r] = moved.y[i]
        buf.cell[r] = moved.cell[i]
        buf.din_out[r] = moved.din_out[i]
        buf.din_in[r] = moved.din_in[i]
        buf.chain[r] = moved.chain[i]
        buf.chain_offset[r] = moved.chain_offset[i]
    merge_ids_kernel(buf, n, w)
    return w, terms_needed


@numba.njit(cache=True)
def drop_rows_kernel(buf: DeltaBufferArrays, n: int, drop: I64) -> tuple[int, int]:
    """Remove rows ``drop`` (ascending, unique, each below ``n``: checked by the caller)
    in place, keeping the others in their order, and their id order; returns the delta's
    new (rows, keywords).

    An unsubscribe of a recent subscription removes one row: this moves the rows after it
    up by one, field by field, where :meth:`roadpubsub.index.delta.DeltaBuffer.keep` gathers every
    row of every field (a delta of 40,000 rows: about 1 ms per unsubscribe).
    """
    k = drop.size
    if k == 0:
        return n, int(buf.ptr[n])
    w = drop[0]
    tw = buf.ptr[w]
    j = 0
    for r in range(w, n):
        if j < k and drop[j] == r:
            j += 1
            continue
        # w < r here, and ptr[w + 1] is written after ptr[r] and ptr[r + 1] are read
        a = buf.ptr[r]
        b = buf.ptr[r + 1]
        for t in range(a, b):
            buf.terms[tw + t - a] = buf.terms[t]
        tw += b - a
        buf.ptr[w + 1] = tw
        buf.ids[w] = buf.ids[r]
        buf.edge[w] = buf.edge[r]
        buf.offset[w] = buf.offset[r]
        buf.alpha[w] = buf.alpha[r]
        buf.tau[w] = buf.tau[r]
        buf.dn_limit[w] = buf.dn_limit[r]
        buf.wildcard[w] = buf.wildcard[r]
        buf.x[w] = buf.x[r]
        buf.y[w] = buf.y[r]
        buf.cell[w] = buf.cell[r]
        buf.din_out[w] = buf.din_out[r]
        buf.din_in[w] = buf.din_in[r]
        buf.chain[w] = buf.chain[r]
        buf.chain_offset[w] = buf.chain_offset[r]
        w += 1
    # the id order loses the dropped rows; a kept row moves up by the drops before it
    q = 0
    for p in range(n):
        row = buf.by_id[p]
        before = np.searchsorted(drop, row)
        if before < k and drop[before] == row:
            continue
        buf.by_id[q] = row - before
        buf.ids_sorted[q] = buf.ids_sorted[p]
        q += 1
    return n - k, int(tw)
