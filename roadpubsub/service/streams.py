"""Resumable delivery streams and the webhook feed of the live service (issue 30).

``WS /deliveries?after=SEQ[&subscription=ID]`` and ``GET /deliveries/stream`` (Server-Sent
Events, resuming from ``Last-Event-ID`` or ``after``) send every delivery with a seq above
``SEQ`` that the reader may see, in seq order, then go on live. Both read the
:class:`~roadpubsub.service.journal.DeliveryJournal` with a cursor: the backlog and the
live part are the same reads, so there is no seam where a delivery could be lost or sent
twice, and a reader holds at most one batch (``stream_batch`` deliveries) in memory however
slow it is. A reader whose cursor falls out of the retention is closed (WebSocket code
1013 with the reason; SSE: an ``event: resume`` naming the cursor, then the end of the
stream); resuming there answers 410 naming the oldest seq still held.

Only deliveries whose log record is durable are read (nothing a crash could take back).
Readers wake when a publish is announced (:class:`Pulse`), and look again every second
whatever happens (publishes applied from the broker, a reload after a log failure).

:class:`WebhookFeeder` moves the deliveries to subscriptions with a ``webhook`` from the
journal to the durable outbox (:mod:`roadpubsub.service.outbox`), in seq order, once their
record is durable; a publish is answered only after its webhook deliveries are in the
outbox. At a start and after a reload it first queues every logged delivery to a webhook
above the outbox's highest seq (a crash between the log's fsync and the outbox's, or an
outbox that failed), read back from the deliveries log where the journal no longer holds
it, whatever the retention. Receivers deduplicate on the seq.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import numpy as np

from roadpubsub.index.events import RequestError, parse_ids
from roadpubsub.roadnet.settings import DEFAULTS
from roadpubsub.service.integrity import StateDamageError
from roadpubsub.service.journal import ResumeTooOldError, Want
from roadpubsub.service.outbox import OutboxEntry
from roadpubsub.service.state import ServiceState

__all__ = ["RESUME_CLOSE", "Pulse", "WebhookFeeder", "resume_point", "sse_events",
           "ws_resume"]

#: Close code of a resumable WebSocket stream whose reader fell out of the retention:
#: 1013, "try again later" (the reason names the seq to resume after).
RESUME_CLOSE = 1013
_POLL_S = 1.0


class Pulse:
    """Wakes stream readers (on the event loop) when deliveries may have become durable."""

    def __init__(self) -> None:
        self._event: asyncio.Event | None = None

    def current(self) -> asyncio.Event:
        """The event the next :meth:`kick` sets (take it before reading)."""
        if self._event is None:
            self._event = asyncio.Event()
        return self._event

    def kick(self) -> None:
        """Wake every reader waiting now."""
        event, self._event = self._event, None
        if event is not None:
            event.set()


def resume_point(text: str | None, *, what: str) -> int | None:
    """A resume seq from a query parameter or ``Last-Event-ID`` (None when absent)."""
    if text is None or text == "":
        return None
    return parse_ids(text, what=what)


async def _wait(event: asyncio.Event, timeout: float, also: asyncio.Event | None = None
                ) -> None:
    """Wait for ``event`` (or ``also``) at most ``timeout`` seconds."""
    waits = [asyncio.ensure_future(event.wait())]
    if also is not None:
        waits.append(asyncio.ensure_future(also.wait()))
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


def _fell_behind(exc: ResumeTooOldError, cursor: int) -> str:
    return f"fell behind the retention after seq {cursor}: {exc}"


async def ws_resume(websocket: Any, state: ServiceState, pulse: Pulse, want: Want,
                    after: int, *, batch: int, still_valid: Callable[[], bool]) -> None:
    """Serve an accepted WebSocket: deliveries after ``after``, then live (one JSON text
    per delivery, with its ``seq``)."""
    from starlette.websockets import WebSocketDisconnect

    gone = asyncio.Event()

    async def drain() -> None:  # notices a client that closes
        try:
            while True:
                await websocket.receive_text()
        except (WebSocketDisconnect, RuntimeError):
            gone.set()

    reader = asyncio.create_task(drain())
    code, reason = 1000, ""
    cursor = after
    try:
        while not gone.is_set():
            wake = pulse.current()
            if not still_valid():
                code, reason = 1008, "the token was revoked"
                break
            try:
                items, through = state.journal.read(cursor, want, state.wal.durable_seq,
                                                    batch)
            except ResumeTooOldError as exc:
                code, reason = RESUME_CLOSE, _fell_behind(exc, cursor)
                break
            for item in items:
                await websocket.send_text(json.dumps(item, separators=(",", ":")))
            if through == cursor:
                await _wait(wake, _POLL_S, gone)
            cursor = through
    except (WebSocketDisconnect, RuntimeError, OSError):
        gone.set()
    finally:
        reader.cancel()
        with contextlib.suppress(RuntimeError, WebSocketDisconnect, OSError):
            await websocket.close(code=code, reason=reason[:120])


async def sse_events(state: ServiceState, pulse: Pulse, want: Want, after: int, *,
                     batch: int, keepalive_s: float, still_valid: Callable[[], bool]
                     ) -> AsyncIterator[bytes]:
    """The Server-Sent Events of a stream: ``id: <seq>`` and ``data: <delivery JSON>`` per
    delivery; a comment line after ``keepalive_s`` of silence; ``event: resume`` with
    ``{"after": SEQ}`` before the end when the reader fell out of the retention."""
    yield b"retry: 1000\n\n"
    cursor = after
    idle = 0.0
    while True:
        wake = pulse.current()
        if not still_valid():
            yield b'event: error\ndata: {"error": "the token was revoked"}\n\n'
            return
        try:
            items, through = state.journal.read(cursor, want, state.wal.durable_seq, batch)
        except ResumeTooOldError as exc:
            body = json.dumps({"after": cursor, "error": _fell_behind(exc, cursor)})
            yield f"event: resume\ndata: {body}\n\n".encode()
            return
        if items:
            idle = 0.0
            yield "".join(f"id: {d['seq']}\ndata: {json.dumps(d, separators=(',', ':'))}\n\n"
                          for d in items).encode()
        if through == cursor:
            await _wait(wake, _POLL_S)
            idle += _POLL_S  # an upper bound: a wake-up with nothing new counts whole
            if idle >= keepalive_s:
                idle = 0.0
                yield b": keepalive\n\n"
        cursor = through


class WebhookFeeder:
    """Queues durable deliveries to webhook subscriptions in the outbox, in seq order.

    ``queue``: the outbox's durable append (``WebhookService.queue``); ``high_seq``: the
    highest seq the outbox ever held (where feeding resumes after a start); ``batch``:
    deliveries per outbox write when catching up from the deliveries log.

    At a start and after a reload (:meth:`~roadpubsub.service.state_open.StateOpening.
    recover`) the journal holds only the last deliveries; those above :attr:`fed` it no
    longer holds (logged durably, but a crash or an outbox failure came before they were
    queued) are read back from the deliveries log, one segment at a time, and queued
    first, in seq order: each seq once, however many there are.
    """

    def __init__(self, state: ServiceState, queue: Callable[[list[OutboxEntry]], None],
                 high_seq: int, *, batch: int = DEFAULTS.webhook_recover_batch) -> None:
        self.state = state
        self._queue = queue
        self.fed = int(high_seq)  # every delivery <= fed is in the outbox or needs none
        state.journal.hold = self.fed  # the age bound keeps what is not fed yet
        self._lock = threading.Lock()
        self._batch = max(1, int(batch))
        self.queued = 0
        self.recovered = 0  # of :attr:`queued`: read back from the deliveries log

    def _put(self, entries: list[OutboxEntry]) -> None:
        """Queue ``entries`` (in seq order) and count them fed (under the lock)."""
        self._queue(entries)
        self.queued += len(entries)
        self.fed = max(self.fed, entries[-1].seq)
        self.state.journal.hold = self.fed

    def _log_seq_of(self, seq: int) -> int:
        """The log seq of the record holding delivery ``seq`` (0: not known): that of the
        message whose first delivery is the last at or before it."""
        best, message = 0, None
        for m, first in list(self.state.dseq_of.items()):  # a copy: the apply thread adds
            if best < first <= seq:
                best, message = first, m
        known = None if message is None else self.state.messages.get(message)
        return 0 if known is None else int(known[0])

    def _from_log(self, through: int) -> None:
        """Queue the logged webhook deliveries of seqs ``fed + 1`` to ``through`` (the
        journal dropped them before they were fed), read from the deliveries log, one
        segment and at most ``batch`` deliveries at a time (under the lock).

        The URL is the subscription's webhook now (a start or a reload rebuilt it from the
        snapshot and the log); a subscription removed since has none any more, and its
        deliveries are not queued (as those of a subscription without a webhook).

        Raises
        ------
        OSError
            The outbox could not be written (what was queued before is counted).
        StateDamageError
            A segment of the deliveries log is damaged (nothing is skipped).
        """
        start, hooks = self.fed, self.state.webhook_of
        before = self.queued
        if not hooks:  # no subscription has a webhook: nothing to read back
            self.fed = through
            self.state.journal.hold = self.fed
            return
        for seqs, d in self.state.dlog.deliveries_after(
                self.fed, from_log_seq=self._log_seq_of(self.fed + 1)):
            n = int(np.searchsorted(seqs, through, side="right"))
            entries: list[OutboxEntry] = []
            for k, (seq, sid) in enumerate(zip(seqs[:n].tolist(),
                                               d.subscription_id[:n].tolist(), strict=True)):
                url = hooks.get(sid)
                if url is None:  # no webhook (or removed since: its URL is gone)
                    continue
                entries.append(OutboxEntry(seq=seq, subscription_id=sid,
                                           message_id=int(d.message_id[k]),
                                           distance=float(d.distance[k]),
                                           score=float(d.score[k]), url=url))
                if len(entries) >= self._batch:
                    self._put(entries)
                    entries = []
            if entries:
                self._put(entries)
            if n:
                self.fed = max(self.fed, int(seqs[n - 1]))
            if n < seqs.size:
                break
        self.recovered += self.queued - before
        if self.queued > before:
            print(f"roadpubsub serve: queued {self.queued - before} webhook deliveries of "
                  f"seq {start + 1}-{through} read back from the deliveries log (logged, "
                  "not yet in the outbox)", file=sys.stderr, flush=True)
        if self.fed < through:  # never guessed: the log must hold what the journal dropped
            print(f"roadpubsub serve: the deliveries log ends at seq {self.fed}; webhook "
                  f"deliveries {self.fed + 1}-{through} are not in it and are not queued",
                  file=sys.stderr, flush=True)
            self.fed = through
        self.state.journal.hold = self.fed

    def feed(self) -> int:
        """Queue what is durable beyond :attr:`fed` (blocking: fsyncs; any thread): first
        what the journal no longer holds (read back from the deliveries log), then the
        journal's chunks.

        Raises
        ------
        OSError
            The outbox could not be written (nothing more is counted as fed).
        StateDamageError
            A segment of the deliveries log to read back is damaged.
        """
        with self._lock:
            journal = self.state.journal
            journal.hold = self.fed  # a reload's journal holds from here on too
            before = self.queued
            if self.fed < journal.hooked_dropped:  # not held since a start or a reload
                self._from_log(journal.hooked_dropped)
            oldest = journal.oldest()
            if self.fed < oldest - 1:  # dropped: queued, or without a webhook row
                self.fed = oldest - 1
            chunks = journal.chunks_after(self.fed, self.state.wal.durable_seq)
            entries: list[OutboxEntry] = []
            for c in chunks:
                if c.hooks is None:
                    continue
                rows, urls = c.hooks
                for r, url in zip(rows.tolist(), urls, strict=True):
                    seq = c.first + r
                    if seq > self.fed:
                        entries.append(OutboxEntry(
                            seq=seq, subscription_id=int(c.subscription_id[r]),
                            message_id=int(c.message_id[r]),
                            distance=float(c.distance[r]), score=float(c.score[r]),
                            url=url))
            if entries:
                self._put(entries)
            if chunks:
                self.fed = max(self.fed, chunks[-1].last)
            journal.hold = self.fed
            return self.queued - before

    def feed_through(self, seq: int) -> None:
        """:meth:`feed` unless every delivery up to ``seq`` is fed already."""
        if self.fed < seq:
            self.feed()

    async def before_answer(self, seq: int) -> None:
        """Wait until deliveries up to ``seq`` are in the outbox (a publish's answer).

        Raises
        ------
        RequestError
            503: the outbox could not be written (the deliveries are logged; they are
            queued once it can be, every second, at a reload and at the next start), or a
            segment of the deliveries log to read back is damaged (named).
        """
        if self.fed >= seq:
            return
        try:
            await asyncio.to_thread(self.feed_through, seq)
        except OSError as exc:
            msg = (f"the message is logged, but its webhook deliveries could not be queued "
                   f"({exc}); they are queued once the outbox can be written (retried "
                   "every second, and at the next start of the service)")
            raise RequestError(msg, status=503) from exc
        except StateDamageError as exc:
            msg = (f"the message is logged, but earlier webhook deliveries could not be read "
                   f"back from the deliveries log: {exc}")
            raise RequestError(msg, status=503) from exc
