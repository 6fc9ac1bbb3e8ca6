"""The recent deliveries of the live service, by delivery sequence number (issue 30).

Every delivery has a ``seq``: 1, 2, 3, ... across the service, without gap, in the order
the service made them (see :mod:`roadpubsub.service.deliveries_log`, which stores it). The
:class:`DeliveryJournal` keeps the last ``retain`` of them in memory, one chunk per log
record, so that a stream (``WS /deliveries?after=SEQ``, ``GET /deliveries/stream``) can
resume after any ``seq`` still held, and the webhook outbox can be fed in order.

A chunk becomes readable only once its log record is durable (``durable`` of
:meth:`DeliveryJournal.read`): nothing is sent that a crash could take back, and a seq is
never shown for a delivery a restart would number otherwise. The apply thread appends;
readers on the event loop and the webhook feeder read under a lock that covers only a
look-up of chunk references (chunks are never changed once appended).

Retention, by count and by age together: the chunks of at least the last ``retain``
deliveries are kept (:attr:`~roadpubsub.roadnet.settings.Settings.stream_retention_deliveries`),
older ones are dropped whole; and with ``retain_s`` > 0
(:attr:`~roadpubsub.roadnet.settings.Settings.stream_retention_s`) a chunk is dropped too once it
has been held that many seconds (counted from when the service applied it, or from the start
for the deliveries read back from the log at a start). Neither bound drops a chunk holding a
delivery to a webhook that the feeder has not queued yet (:attr:`DeliveryJournal.hold`): its
deliveries would never reach the outbox although their publish was answered. The feeder
runs after a record is durable, on another thread than the apply thread, so it lags by the
records in flight, and by more while the outbox is slow or failing; what is held for it
beyond the bounds is counted in :meth:`DeliveryJournal.status` (``/health``'s ``stream``,
``/metrics``' ``roadpubsub_stream_held_for_webhooks``) and dropped once it is queued.
A start or a reload rebuilds the journal with the last ``retain`` deliveries only (a reload
keeps :attr:`DeliveryJournal.hold`); the feeder reads the older ones it has not queued back
from the deliveries log (:class:`~roadpubsub.service.streams.WebhookFeeder`).
Asking for ``after`` below :meth:`DeliveryJournal.oldest` - 1 is refused with
:class:`ResumeTooOldError` (the HTTP answer 410 names the oldest ``seq`` still held).
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from roadpubsub.index.events import RequestError

__all__ = ["Chunk", "DeliveryJournal", "ResumeTooOldError", "Want"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
#: Which deliveries a reader wants: all (None), one subscription id, or a test of ids.
Want = int | Callable[[int], bool] | None


class ResumeTooOldError(RequestError):
    """A stream asked to resume after a seq older than the journal holds (410)."""

    hint = "resume from the oldest seq still held, and read older ones with GET /messages/{id}"


@dataclass(frozen=True, eq=False)
class Chunk:
    """The deliveries of one log record: seq ``first``, ``first + 1``, ... in row order.

    ``hooks``: the rows whose subscription had a webhook when the record was applied, and
    their URLs (None: no row had one).
    """

    first: int
    log_seq: int
    message_id: IntArray
    subscription_id: IntArray
    distance: FloatArray
    score: FloatArray
    hooks: tuple[IntArray, list[str]] | None = None

    def __len__(self) -> int:
        return int(self.message_id.size)

    @property
    def last(self) -> int:
        """The seq of the last row."""
        return self.first + len(self) - 1

    def rows(self, mask: npt.NDArray[np.bool_] | None, start: int) -> list[dict[str, Any]]:
        """Delivery objects of rows ``start:`` (those of ``mask`` when given)."""
        idx = np.arange(start, len(self)) if mask is None else \
            start + np.flatnonzero(mask[start:])
        return [{"seq": q, "message_id": m, "subscription_id": s, "distance": x, "score": y}
                for q, m, s, x, y in zip(
                    (self.first + idx).tolist(), self.message_id[idx].tolist(),
                    self.subscription_id[idx].tolist(), self.distance[idx].tolist(),
                    self.score[idx].tolist(), strict=True)]


def _mask(chunk: Chunk, want: Want) -> npt.NDArray[np.bool_] | None:
    if want is None:
        return None
    sid = chunk.subscription_id
    if isinstance(want, int):
        return sid == want
    uniq, inverse = np.unique(sid, return_inverse=True)
    keep = np.fromiter((want(s) for s in uniq.tolist()), dtype=bool, count=uniq.size)
    return keep[inverse]


class DeliveryJournal:
    """The last ``retain`` deliveries (at least), those of the last ``retain_s`` seconds
    only when ``retain_s`` > 0, as chunks, by seq.

    Attributes
    ----------
    hold
        The seq through which the webhook feeder has queued deliveries in the outbox (None:
        no feeder); neither bound drops a chunk holding a later one that has webhook rows.
    hooked_dropped
        The last seq of the last chunk with webhook rows dropped (0: none).
    """

    def __init__(self, *, retain: int, next_seq: int = 1, retain_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.retain = max(1, int(retain))
        self.retain_s = max(0.0, float(retain_s))
        self.hold: int | None = None
        self.hooked_dropped = 0  # the last seq of the last dropped chunk with webhook rows
        self._clock = clock
        self._chunks: list[Chunk] = []
        self._firsts: list[int] = []
        self._added: list[float] = []  # the clock when each chunk was appended
        self._held = 0
        self._next = int(next_seq)  # the seq the next delivery gets
        self._lock = threading.Lock()

    def renewed(self, *, next_seq: int) -> DeliveryJournal:
        """An empty journal with the same bounds, clock and hold, starting at ``next_seq``
        (the state's load: the deliveries before it count as dropped)."""
        fresh = DeliveryJournal(retain=self.retain, next_seq=next_seq, retain_s=self.retain_s,
                                clock=self._clock)
        fresh.hold = self.hold
        fresh.hooked_dropped = next_seq - 1  # not read back: any of them may have had one
        return fresh

    def _drop_first(self) -> None:
        if self._chunks[0].hooks is not None:
            self.hooked_dropped = self._chunks[0].last
        self._held -= len(self._chunks[0])
        del self._chunks[0]
        del self._firsts[0]
        del self._added[0]

    def _droppable(self, chunk: Chunk) -> bool:
        """Whether the webhook feeder is done with ``chunk``, or has nothing to queue from
        it (under the lock)."""
        return self.hold is None or chunk.last <= self.hold or chunk.hooks is None

    def _trim(self) -> None:
        """Drop the first chunks past the count bound or the age bound, except those the
        webhook feeder still needs (under the lock)."""
        chunks = self._chunks
        limit = self._clock() - self.retain_s if self.retain_s else None
        while chunks and self._droppable(chunks[0]) and (
                (len(chunks) > 1 and self._held - len(chunks[0]) >= self.retain)
                or (limit is not None and self._added[0] < limit)):
            self._drop_first()

    # ------------------------------------------------------------ apply thread
    def append(self, chunk: Chunk) -> None:
        """Add the deliveries of one log record (their seqs follow the last one's)."""
        if not len(chunk):
            return
        if chunk.first != self._next:
            msg = f"delivery seq {chunk.first} appended where {self._next} was due"
            raise RuntimeError(msg)
        with self._lock:
            self._chunks.append(chunk)
            self._firsts.append(chunk.first)
            self._added.append(self._clock())
            self._held += len(chunk)
            self._next = chunk.last + 1
            self._trim()

    # ------------------------------------------------------------ readers
    @property
    def next_seq(self) -> int:
        """The seq the next delivery will get (the last one's + 1)."""
        return self._next

    def oldest(self) -> int:
        """The oldest seq held (``next_seq`` when none is)."""
        with self._lock:
            self._trim()
            return self._chunks[0].first if self._chunks else self._next

    def status(self) -> dict[str, int | None]:
        """What is held: ``held`` deliveries from seq ``oldest``, ``next_seq``, the seq the
        webhook feeder queued through (``fed_through``, None without webhooks), and
        ``held_for_webhooks``: the deliveries held only because the feeder has not queued
        them yet (the bounds alone would have dropped them)."""
        with self._lock:
            self._trim()
            held = self._held
            oldest = self._chunks[0].first if self._chunks else self._next
            keep = 0  # the deliveries the bounds alone keep: the last chunks, whole
            limit = self._clock() - self.retain_s if self.retain_s else None
            for k in range(len(self._chunks) - 1, -1, -1):
                if keep >= self.retain or (limit is not None and self._added[k] < limit):
                    break
                keep += len(self._chunks[k])
            return {"held": held, "oldest": oldest, "next_seq": self._next,
                    "fed_through": self.hold, "held_for_webhooks": held - keep}

    def check_after(self, after: int) -> None:
        """Refuse (410) a resume point older than what is held."""
        oldest = self.oldest()
        if after < oldest - 1:
            bound = f"the last {self.retain:,} deliveries"
            if self.retain_s:
                bound += f", held {self.retain_s:g} s at most"
            msg = (f"deliveries after seq {after} are no longer held: the oldest seq still "
                   f"held is {oldest} (retention: {bound}); resume with after={oldest - 1}")
            raise ResumeTooOldError(msg, status=410)

    def durable_head(self, durable: int) -> int:
        """The seq of the last delivery whose log record is durable (log seq <= ``durable``)."""
        with self._lock:
            for c in reversed(self._chunks):
                if c.log_seq <= durable:
                    return c.last
            return self._chunks[0].first - 1 if self._chunks else self._next - 1

    def chunks_after(self, after: int, durable: int) -> list[Chunk]:
        """The chunks holding seqs above ``after``, up to the last durable one (log seq <=
        ``durable``), in order.

        Raises
        ------
        ResumeTooOldError
            ``after`` is older than what is held.
        """
        self.check_after(after)
        with self._lock:
            k = max(0, bisect.bisect_right(self._firsts, after) - 1)
            out = []
            for c in self._chunks[k:]:
                if c.log_seq > durable:
                    break
                if c.last > after:
                    out.append(c)
            return out

    def read(self, after: int, want: Want, durable: int, limit: int
             ) -> tuple[list[dict[str, Any]], int]:
        """Up to about ``limit`` wanted deliveries with seq above ``after`` whose records
        are durable, in seq order, and the seq read through (the next ``after``: past
        the unwanted ones too).

        Raises
        ------
        ResumeTooOldError
            ``after`` is older than what is held.
        """
        items: list[dict[str, Any]] = []
        through = after
        for c in self.chunks_after(after, durable):
            start = max(0, through + 1 - c.first)
            mask = _mask(c, want)
            rows = c.rows(mask, start)
            if len(items) + len(rows) > limit and items:
                break  # the next read takes this chunk (a chunk is never split but alone)
            items.extend(rows)
            through = c.last
            if len(items) >= limit:
                break
        return items, through
