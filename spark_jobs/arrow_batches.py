"""Arrow tables of the Spark tasks' rows <-> the columnar batches of ``index`` and
``pruning``: subscriptions of every kind and messages (frame rows of
:mod:`roadpubsub.spark_jobs.cell_frames`), deliveries and top-k events (task outputs).

A task's result must not depend on the order Spark hands it its rows, so each reader
sorts them first: subscriptions and messages by id, stream messages by their place in the
input files, deliveries by (message, subscription), events in the canonical order of
:class:`roadpubsub.pruning.topk_events.TopkEvents`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from roadpubsub.index.kinds import BooleanSubscriptions, TopkSubscriptions
from roadpubsub.index.model import Messages, Subscriptions
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.pruning.topk_events import TopkEvents
from roadpubsub.roadnet.locations import EdgePoints

__all__ = [
    "EVENT_ORDER",
    "boolean_from_arrow",
    "deliveries_from_arrow",
    "deliveries_table",
    "events_from_arrow",
    "events_table",
    "messages_from_arrow",
    "ordered_messages_from_arrow",
    "subscriptions_from_arrow",
    "topk_from_arrow",
]

#: Sort keys of a task's top-k event rows, most significant first: the canonical order is
#: (seq, phase, subscription_id), and a subscription's events of one (seq, phase) keep
#: their task order ``ord`` (evict before insert).
EVENT_ORDER = ("seq", "phase", "subscription_id", "ord")
_EVENT_NAMES = np.array(["evict", "insert"], dtype=object)


def _keyword_csr(col: pa.ChunkedArray | pa.Array
                 ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]:
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    lengths = np.asarray(pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False),
                         dtype=np.int64)
    ptr = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=ptr[1:])
    terms = np.asarray(pc.list_flatten(arr).to_numpy(zero_copy_only=False), dtype=np.int32)
    return ptr, terms


def _np(table: pa.Table, name: str, dtype: type) -> npt.NDArray[Any]:
    return np.asarray(table.column(name).to_numpy(), dtype=dtype)


def _sorted(table: pa.Table, keys: Sequence[str]) -> pa.Table:
    """``table`` sorted by the int64 columns ``keys``, most significant first (stable)."""
    order = np.lexsort([_np(table, k, np.int64) for k in reversed(keys)])
    return table.take(pa.array(order))


def _rows(table: pa.Table, keys: Sequence[str] = ("id",)
          ) -> tuple[pa.Table, EdgePoints, npt.NDArray[np.int64], npt.NDArray[np.int32]]:
    """Frame rows sorted by ``keys``, with their places and keyword CSR."""
    table = _sorted(table, keys)
    ptr, terms = _keyword_csr(table.column("keywords"))
    points = EdgePoints(_np(table, "edge", np.int32), _np(table, "offset", np.float64))
    return table, points, ptr, terms


def subscriptions_from_arrow(table: pa.Table) -> Subscriptions:
    """Subscriptions of frame rows (:data:`roadpubsub.spark_jobs.cell_frames.SUBSCRIPTION_SCHEMA`
    columns), sorted by id."""
    t, points, ptr, terms = _rows(table)
    return Subscriptions(_np(t, "id", np.int64), points, _np(t, "alpha", np.float64),
                         _np(t, "tau", np.float64), ptr, terms)


def boolean_from_arrow(table: pa.Table) -> BooleanSubscriptions:
    """Boolean subscriptions of frame rows (``id``, ``edge``, ``offset``, ``radius``,
    ``keywords``), sorted by id."""
    t, points, ptr, terms = _rows(table)
    return BooleanSubscriptions(_np(t, "id", np.int64), points, _np(t, "radius", np.float64),
                                ptr, terms)


def topk_from_arrow(table: pa.Table) -> TopkSubscriptions:
    """Top-k subscriptions of frame rows (``id``, ``edge``, ``offset``, ``alpha``, ``k``,
    ``keywords``), sorted by id."""
    t, points, ptr, terms = _rows(table)
    return TopkSubscriptions(_np(t, "id", np.int64), points, _np(t, "alpha", np.float64),
                             _np(t, "k", np.int64), ptr, terms)


def messages_from_arrow(table: pa.Table) -> Messages:
    """Messages of frame rows, sorted by id."""
    t, points, ptr, terms = _rows(table)
    return Messages(_np(t, "id", np.int64), points, ptr, terms)


def ordered_messages_from_arrow(table: pa.Table) -> Messages:
    """Messages of ordered frame rows
    (:data:`roadpubsub.spark_jobs.cell_frames.ORDERED_MESSAGE_SCHEMA`), in stream (file) order."""
    t, points, ptr, terms = _rows(table, ("o_file", "o_block", "o_row"))
    return Messages(_np(t, "id", np.int64), points, ptr, terms)


def deliveries_table(d: Deliveries) -> pa.Table:
    """A task's deliveries as rows of :data:`roadpubsub.spark_jobs.match_plan.DELIVERY_SCHEMA`."""
    return pa.table({"message_id": pa.array(d.message_id, pa.int64()),
                     "subscription_id": pa.array(d.subscription_id, pa.int64()),
                     "distance": pa.array(d.distance, pa.float64()),
                     "score": pa.array(d.score, pa.float64())})


def deliveries_from_arrow(table: pa.Table) -> Deliveries:
    """Delivery rows, sorted by (message, subscription)."""
    t = _sorted(table, ("message_id", "subscription_id"))
    return Deliveries(_np(t, "message_id", np.int64), _np(t, "subscription_id", np.int64),
                      _np(t, "distance", np.float64), _np(t, "score", np.float64))


def events_table(events: TopkEvents) -> pa.Table:
    """A task's top-k events as rows (with ``phase`` and the task order ``ord``)."""
    return pa.table({
        "seq": pa.array(events.seq, pa.int64()),
        "phase": pa.array(events.phase.astype(np.int32)),
        "ord": pa.array(np.arange(len(events), dtype=np.int64)),
        "event": pa.array(_EVENT_NAMES[events.event].astype(str).tolist()
                          if len(events) else [], pa.string()),
        "message_id": pa.array(events.message_id, pa.int64()),
        "subscription_id": pa.array(events.subscription_id, pa.int64()),
        "rank": pa.array(events.rank, pa.int64()),
        "score": pa.array(events.score, pa.float64()),
        "distance": pa.array(events.distance, pa.float64())})


def events_from_arrow(table: pa.Table | None) -> TopkEvents:
    """Event rows of :func:`events_table`, in :data:`EVENT_ORDER` (none: no events)."""
    if table is None or table.num_rows == 0:
        return TopkEvents.empty()
    e = _sorted(table, EVENT_ORDER)
    names = np.asarray(e.column("event").to_pylist(), dtype=object)
    return TopkEvents(
        _np(e, "seq", np.int64), _np(e, "phase", np.int8),
        (names == "insert").astype(np.int8), _np(e, "message_id", np.int64),
        _np(e, "subscription_id", np.int64), _np(e, "rank", np.int64),
        _np(e, "score", np.float64), _np(e, "distance", np.float64))
