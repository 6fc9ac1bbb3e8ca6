"""What every route of the live service works with, in one typed object.

:func:`~roadpubsub.service.app.build_app` makes one :class:`Service` and stores it as
``app.state.service``; the module-level handlers of :mod:`roadpubsub.service.routes` and
:mod:`~roadpubsub.service.hotpath` take it with :func:`service_of`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response

from roadpubsub.index.events import RequestError
from roadpubsub.roadnet.errors import format_error
from roadpubsub.service.access import OPEN, PRINCIPAL, AccessGate, Guard, Principal
from roadpubsub.service.answers import dumps
from roadpubsub.service.applier import Applier
from roadpubsub.service.bodies import decode_body_async
from roadpubsub.service.dispatch import Dispatch, Event
from roadpubsub.service.fanout import Fanout
from roadpubsub.service.metrics import Metrics
from roadpubsub.service.resilience import Watchman
from roadpubsub.service.state import ServiceState
from roadpubsub.service.streams import WebhookFeeder
from roadpubsub.service.webhooks import WebhookService

__all__ = ["JSONAnswer", "Service", "body_of", "dispatched", "refuse", "service_of", "who"]


@dataclass
class Service:
    """The live service's objects, shared by its routes.

    Attributes
    ----------
    state
        The service state (touched on the apply thread only, but for reads that are safe
        from the event loop).
    applier, dispatch
        The apply thread and the one path of events into it.
    guard, gate
        Authorization against the owners; authentication (None: nobody is asked for a
        token).
    metrics, watchman
        Request figures; the disk prober and reloader.
    fanout
        Live readers of durable publishes (WebSocket clients, the map, the broker).
    webhooks, feeder
        The webhook sender and the outbox feed (None: webhooks are off).
    cache
        Answers built once (the map's roads).
    """

    state: ServiceState
    applier: Applier
    dispatch: Dispatch
    guard: Guard
    gate: AccessGate | None
    metrics: Metrics
    watchman: Watchman
    fanout: Fanout
    webhooks: WebhookService | None = None
    feeder: WebhookFeeder | None = None
    cache: dict[str, bytes] = field(default_factory=dict)


def service_of(conn: HTTPConnection) -> Service:
    """The :class:`Service` of a request's or WebSocket's application."""
    service: Service = conn.app.state.service
    return service


def who(conn: HTTPConnection) -> Principal:
    """The caller the access gate authenticated (everything when there is no gate)."""
    principal: Principal = conn.scope.get(PRINCIPAL, OPEN)
    return principal


async def body_of(request: Request) -> Any:
    """The request's JSON body (:func:`~roadpubsub.service.bodies.decode_body`)."""
    opts = service_of(request).state.options
    return await decode_body_async(await request.body(), max_depth=opts.max_json_depth,
                                   thread_bytes=opts.decode_thread_bytes)


async def dispatched(request: Request, kind: str, *, ids: list[int] | None = None,
                     path_id: int | None = None, body: Any = None, row_ids: bool = False,
                     status: int = 200) -> Response:
    """Answer an event route: the caller's role checked (on ``ids`` too), the body read
    (unless given: an unsubscribe's ids), the event run through the one
    :class:`~roadpubsub.service.dispatch.Dispatch` path and timed in the metrics.

    Parameters
    ----------
    kind
        The event kind (:data:`~roadpubsub.service.dispatch.EVENT_KINDS`).
    ids
        Ids from the path the caller must be allowed to touch.
    path_id
        A move's subscription id from the path.
    body
        The event's body when it is not the request's.
    row_ids
        Check the ids of a batch's rows before the body is parsed (a batch of moves).
    status
        The answer's status.
    """
    t0 = time.perf_counter()
    service = service_of(request)
    principal = who(request)
    service.guard.check(principal, kind, ids or ())
    if body is None:
        body = await body_of(request)
    if row_ids:
        service.guard.row_ids(principal, body)
    done = await service.dispatch.run(Event(kind, body, principal, path_id))
    service.metrics.observe(kind, time.perf_counter() - t0)
    return JSONAnswer(done.body, status_code=status)


class JSONAnswer(JSONResponse):
    """JSON answers rendered by orjson (the json module's encoder was a fifth of the event
    loop's own Python time under the mixed load, most of it the deliveries lists)."""

    def render(self, content: Any) -> bytes:
        return dumps(content)


async def refuse(request: Request, exc: Exception) -> Response:
    """The answer of a refused request: ``{"error": ...}`` with its status (422 for an
    input error), counted in the metrics."""
    status = exc.status if isinstance(exc, RequestError) else 422
    service_of(request).metrics.error(status)
    return JSONAnswer({"error": format_error(exc)}, status_code=status)
