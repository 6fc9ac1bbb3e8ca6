"""One 64-byte record per slot: what matching reads of a candidate, in one cache line.

Algorithm 1 reads a posting's subscription position and din_out (Lemma 6); the
verification limits then read its alpha, tau and point on the chain graph. At millions of
slots each of these was a cache miss in its own array: six or seven lines per candidate.
Here they share one row of an (n, 8) float64 array, aligned to 64 bytes:

====== ===================================================
column field
====== ===================================================
0-4    x, y, din_out, din_in, chain_offset (metres)
5, 6   alpha, tau
7      chain (int32, the low half); the high half: the slot's keywords
       (:func:`text_span`)
====== ===================================================

The slots' :class:`~roadpubsub.index.spatial.PointFacts` and the alpha and tau of their
:class:`~roadpubsub.index.model.Subscriptions` become column views of the record, so it replaces
those arrays (4 bytes of padding per slot more) and a write through a view is a write to
the record. The file format is unchanged: views are saved like any array.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import numba
import numpy as np
import numpy.typing as npt

from roadpubsub.index.model import Subscriptions
from roadpubsub.index.spatial import PointFacts

__all__ = ["CHAIN_INT32_COLUMN", "FACT_COLUMNS", "RECORD_WIDTH", "SUB_COLUMNS",
           "TEXT_INT32_COLUMN", "aligned_rows", "pack_slot_record", "pack_text_span",
           "text_span"]

FloatArray = npt.NDArray[np.float64]

#: Float64 columns of the facts, then of the subscriptions' parameters.
FACT_COLUMNS = ("x", "y", "din_out", "din_in", "chain_offset")
SUB_COLUMNS = ("alpha", "tau")
#: Float64 columns per row (64 bytes).
RECORD_WIDTH = 8
#: The chain's column in the record viewed as (n, 16) int32.
CHAIN_INT32_COLUMN = 2 * (RECORD_WIDTH - 1)
#: The column (int32 view) of the slot's keyword span, packed by :func:`pack_text_span`.
TEXT_INT32_COLUMN = CHAIN_INT32_COLUMN + 1
# A span packs its start in the low 28 bits and its length in the next 3 (bit 31 stays
# clear, so a packed span is >= 0 and -1 means "read kw_ptr").
_SPAN_BITS = 28
_SPAN_MASK = (1 << _SPAN_BITS) - 1
_SPAN_MAX_LENGTH = 7


@numba.njit(cache=True, nogil=True, inline="always")
def pack_text_span(start: int, stop: int) -> int:  # pragma: no cover - compiled
    """The int32 the record holds for keywords ``kw_terms[start:stop]`` of a slot: the
    span itself when it fits (start < 2**28, at most 7 keywords), else -1 (the reader
    falls back to the keyword CSR's pointers)."""
    n = stop - start
    if start < 0 or n < 0 or n > _SPAN_MAX_LENGTH or stop > _SPAN_MASK:
        return -1
    return start | (n << _SPAN_BITS)


@numba.njit(cache=True, nogil=True, inline="always")
def text_span(packed: int, kw_ptr: npt.NDArray[np.int64], row: int
              ) -> tuple[int, int]:  # pragma: no cover - compiled
    """(start, stop) of slot ``row``'s keywords in ``kw_terms``, from the record's packed
    span (no read of ``kw_ptr``, a cache miss per candidate at millions of slots) or, when
    it did not fit (-1), from ``kw_ptr``."""
    if packed >= 0:
        start = packed & _SPAN_MASK
        return start, start + (packed >> _SPAN_BITS)
    return kw_ptr[row], kw_ptr[row + 1]


def _unchecked(cls: type, values: dict[str, Any]) -> Any:
    """A frozen dataclass from already-checked arrays (no __post_init__)."""
    obj: Any = object.__new__(cls)
    for name, value in values.items():
        object.__setattr__(obj, name, value)
    return obj


@numba.njit(cache=True, nogil=True)
def _fill_rows(record: FloatArray, ints: npt.NDArray[np.int32], facts: tuple,
               params: tuple, chain: npt.NDArray[np.int32],
               kw_ptr: npt.NDArray[np.int64]) -> None:  # pragma: no cover
    x, y, din_out, din_in, chain_offset = facts
    alpha, tau = params
    for i in range(record.shape[0]):
        record[i, 0] = x[i]
        record[i, 1] = y[i]
        record[i, 2] = din_out[i]
        record[i, 3] = din_in[i]
        record[i, 4] = chain_offset[i]
        record[i, 5] = alpha[i]
        record[i, 6] = tau[i]
        ints[i, CHAIN_INT32_COLUMN] = chain[i]
        ints[i, TEXT_INT32_COLUMN] = pack_text_span(kw_ptr[i], kw_ptr[i + 1])


def aligned_rows(n: int, width: int, *, line: int = 64) -> FloatArray:
    """An empty (n, width) float64 array whose first row starts on a ``line``-byte
    boundary (a large ``np.empty`` starts 16 bytes past a page: 64-byte rows would then
    each straddle two cache lines)."""
    per_line = line // 8
    buf = np.empty(n * width + per_line)
    skip = (-buf.ctypes.data % line) // 8
    return buf[skip:skip + n * width].reshape(n, width)


def pack_slot_record(subs: Subscriptions, facts: PointFacts
                     ) -> tuple[Subscriptions, PointFacts, FloatArray]:
    """The slots' record, and ``subs`` and ``facts`` with the record's fields as views.

    Each source array is copied in and let go in turn, so that packing holds at most one
    more slot-sized array at a time when the caller keeps no other reference to them.
    """
    n = len(subs)
    record = aligned_rows(n, RECORD_WIDTH)
    ints = record.view(np.int32)
    f = {fd.name: getattr(facts, fd.name) for fd in fields(facts)}
    s = {fd.name: getattr(subs, fd.name) for fd in fields(subs)}
    del facts, subs
    # Row by row in one compiled pass (column by column, numpy wrote each row's line seven
    # times: 2 s for 4M slots loaded from a file, against 0.2 s).
    _fill_rows(record, ints, tuple(np.asarray(f.pop(k), dtype=np.float64)
                                   for k in FACT_COLUMNS),
               tuple(np.asarray(s.pop(k), dtype=np.float64) for k in SUB_COLUMNS),
               np.asarray(f.pop("chain"), dtype=np.int32),
               np.asarray(s["kw_ptr"], dtype=np.int64))
    f.update({name: record[:, k] for k, name in enumerate(FACT_COLUMNS)})
    f["chain"] = ints[:, CHAIN_INT32_COLUMN]
    s.update({name: record[:, k] for k, name in enumerate(SUB_COLUMNS,
                                                           start=len(FACT_COLUMNS))})
    return _unchecked(Subscriptions, s), _unchecked(PointFacts, f), record
