"""The one path of events into the service, whatever the transport.

HTTP (:mod:`~roadpubsub.service.hotpath`, :mod:`~roadpubsub.service.routes`), the
WebSocket and the MQTT connector (:mod:`~roadpubsub.service.mqtt`) decode a request, check
what needs no body (the token's role, the path's id) and hand an :class:`Event` to
:class:`Dispatch`, which:

1. queues it on the apply thread (:class:`~roadpubsub.service.applier.Applier`): parsed,
   fully checked, applied and appended to the log in arrival order (a publisher's or a
   subscriber's body is checked against its token there too,
   :class:`~roadpubsub.service.access.Guard`);
2. waits until the log record is durable (:meth:`~roadpubsub.service.wal.WriteAheadLog.
   when_durable`: one wake-up of the event loop per fsync for all the requests it covers);
3. writes the webhook deliveries of a publish to the durable outbox
   (:class:`~roadpubsub.service.streams.WebhookFeeder`);
4. and only then gives back the result: the HTTP answer, the MQTT PUBACK and the pushes to
   WebSocket clients come after it, so nothing acknowledged is missing from the log or
   from the outbox after a crash.

:meth:`Dispatch.run` does all four on the event loop; the MQTT connector, which has its
own threads, calls :meth:`Dispatch.submit` and, once the log is durable,
:meth:`Dispatch.to_outbox_blocking` before it sends its PUBACKs. The log knows nothing of
either: it calls a :data:`~roadpubsub.service.wal.Sink` of this module.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from roadpubsub.service import faults
from roadpubsub.service.access import ADMIN, OPEN, Guard, Principal
from roadpubsub.service.applier import Applier
from roadpubsub.service.results import Applied
from roadpubsub.service.state import ServiceState
from roadpubsub.service.streams import WebhookFeeder
from roadpubsub.service.wal import WriteAheadLog

__all__ = ["EVENT_KINDS", "Dispatch", "Event", "durable"]

#: The kinds of :class:`Event`.
EVENT_KINDS = ("subscribe", "unsubscribe", "move", "publish")


@dataclass(slots=True)
class Event:
    """One decoded request, not yet parsed into a batch.

    Attributes
    ----------
    kind
        One of :data:`EVENT_KINDS`.
    body
        The decoded JSON body (subscribe, move, publish), or the ids (unsubscribe).
    principal
        Who sent it (an admin's body is not checked for ownership).
    path_id
        A move's subscription id from the path or the topic, or None.
    concurrent
        Whether the apply thread may order it with the other concurrent requests queued
        with it (:func:`~roadpubsub.service.applier.by_kind`).
    pipelined
        Whether its sender goes on sending without waiting for its answer (MQTT's moves
        and messages): its group may then wait a little for more to join it
        (:class:`~roadpubsub.service.applier.Applier`'s ``wait_ms``).
    """

    kind: str
    body: Any
    principal: Principal = OPEN
    path_id: int | None = None
    concurrent: bool = True
    pipelined: bool = False


class _LoopSink:
    """Hands durable results to one event loop, one wake-up per call."""

    __slots__ = ("loop",)

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def __call__(self, values: list[Any], error: BaseException | None) -> None:
        self.loop.call_soon_threadsafe(_settle_all, values, error)


def _settle_all(values: list[tuple[asyncio.Future[Any], Any]],
                error: BaseException | None) -> None:
    for fut, value in values:
        if fut.done():
            continue
        if error is None:
            fut.set_result(value)
        else:
            fut.set_exception(error)


class _Reply:
    """The apply thread's side of one request awaited on a loop: its result goes to the
    log, which hands it to the loop once durable; a refusal goes straight to the loop."""

    __slots__ = ("_done", "fut", "sink", "state")

    def __init__(self, fut: asyncio.Future[Any], sink: _LoopSink, state: ServiceState) -> None:
        self.fut = fut
        self.sink = sink
        self.state = state
        self._done = False

    def set_result(self, applied: Applied) -> None:
        self._done = True
        # The log that took the record: read now, on the apply thread, not when the
        # request was queued (a reload after a disk failure, queued before this request,
        # replaces the log, and the old one refuses every waiter as uncertain).
        self.state.wal.when_durable(applied.seq, self.sink, (self.fut, applied))

    def set_exception(self, exc: BaseException) -> None:
        self._done = True
        self.sink([(self.fut, None)], exc)

    def done(self) -> bool:
        return self._done


def durable(wal: WriteAheadLog, seq: int) -> asyncio.Future[None]:
    """A future of the running loop, done when record ``seq`` of ``wal`` is on disk."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()
    wal.when_durable(seq, _LoopSink(loop), (fut, None))
    return fut


class Dispatch:
    """Applies events for every transport (see the module docstring).

    Parameters
    ----------
    state, applier, guard
        The service state, its apply thread and the owners' checks.
    feeder
        Queues webhook deliveries in the outbox (None: no webhooks).
    announce
        Called on the event loop with each durable publish of :meth:`run`, once its
        webhook deliveries are in the outbox (WebSocket clients, the map, the broker).
    """

    def __init__(self, state: ServiceState, applier: Applier, guard: Guard, *,
                 feeder: WebhookFeeder | None = None,
                 announce: Callable[[Applied], None] | None = None) -> None:
        self.state = state
        self.applier = applier
        self.guard = guard
        self.feeder = feeder
        self.announce = announce
        self._sink: _LoopSink | None = None

    def submit(self, event: Event, reply: Any) -> None:
        """Queue ``event`` on the apply thread; ``reply`` (``set_result``,
        ``set_exception``, ``done``) gets its :class:`~roadpubsub.service.results.Applied`
        (not yet durable) or its refusal."""
        kind, body, who, concurrent = event.kind, event.body, event.principal, \
            event.concurrent
        applier, state, guard = self.applier, self.state, self.guard
        if kind == "publish":
            if who.role == ADMIN:
                applier.publish(body, reply=reply, concurrent=concurrent,
                                pipelined=event.pipelined)
            else:
                applier.call(lambda: guard.publish(who, body), reply=reply, kind=kind,
                             concurrent=concurrent)
        elif kind == "move":
            applier.move(body, path_id=event.path_id, reply=reply, concurrent=concurrent,
                         pipelined=event.pipelined)
        elif kind == "subscribe":
            if who.role == ADMIN:
                parser = applier.parser
                applier.call(lambda: state.subscribe(parser.subscriptions(body)),
                             reply=reply, kind=kind, concurrent=concurrent)
            else:
                applier.call(lambda: guard.subscribe(who, body), reply=reply, kind=kind,
                             concurrent=concurrent)
        elif kind == "unsubscribe":
            ids = np.asarray(body, dtype=np.int64)
            applier.call(lambda: state.unsubscribe(ids), reply=reply, kind=kind,
                         concurrent=concurrent)
        else:
            msg = f"unknown event kind {kind!r}; expected one of {EVENT_KINDS}"
            raise ValueError(msg)

    async def run(self, event: Event) -> Applied:
        """Apply ``event``, wait until its record is durable and its webhook deliveries
        are in the outbox, announce a publish, and return the result.

        Raises
        ------
        RequestError, InputError
            The event was refused (nothing of it applied), or (503) the log or the outbox
            failed.
        """
        loop = asyncio.get_running_loop()
        sink = self._sink
        if sink is None or sink.loop is not loop:
            sink = self._sink = _LoopSink(loop)
        fut: asyncio.Future[Applied] = loop.create_future()
        self.submit(event, _Reply(fut, sink, self.state))
        done = await fut
        if faults.armed:
            faults.fault("before-answer")
        if event.kind == "publish":
            await self.to_outbox(done)
            if self.announce is not None:
                self.announce(done)
        return done

    def _outbox_seq(self, done: Applied) -> int | None:
        """The highest delivery seq of ``done`` that may go to a webhook, or None."""
        if self.feeder is None or not self.state.webhook_of or done.delivery_seq is None \
                or not done.delivery_seq.size:
            return None
        return int(done.delivery_seq.max())

    async def to_outbox(self, done: Applied) -> None:
        """Wait until the webhook deliveries of a durable ``done`` are in the outbox
        (raises :class:`~roadpubsub.index.events.RequestError` 503 when it cannot be
        written)."""
        seq = self._outbox_seq(done)
        if seq is not None:
            assert self.feeder is not None
            await self.feeder.before_answer(seq)

    def to_outbox_blocking(self, done: Sequence[Applied]) -> None:
        """:meth:`to_outbox` of durable results, on the calling thread (the MQTT
        connector's, before its PUBACKs).

        Raises
        ------
        OSError
            The outbox could not be written.
        """
        seqs = [s for s in map(self._outbox_seq, done) if s is not None]
        if seqs:
            assert self.feeder is not None
            self.feeder.feed_through(max(seqs))
