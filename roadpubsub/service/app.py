"""The HTTP and WebSocket interface of the live service (Starlette; run it with uvicorn).

Routes (bodies and answers are JSON; field names are those of the Parquet schemas):

========================================  ===============================================
``POST /subscriptions``                   one subscription or a batch (array)
``GET /subscriptions``                    live subscriptions by id (``after``, ``limit``)
``GET /subscriptions/{id}``               one subscription
``DELETE /subscriptions/{id}``            unsubscribe
``PUT /subscriptions/{id}/location``      move one (``lon``/``lat`` or ``u``/``v``/``offset``)
``POST /subscriptions/moves``             a batch of moves, applied in one index update
``POST /messages``                        publish one message or a batch; the answer lists
                                          the deliveries
``GET /messages/{id}``                    a published message's deliveries
``WS /deliveries[?subscription=ID]``      deliveries pushed as messages are matched
``WS /deliveries?after=SEQ[&subscription=ID]``  every delivery after SEQ, then live
                                          (:mod:`~roadpubsub.service.streams`)
``GET /deliveries/stream``                the same as Server-Sent Events (``after`` or
                                          ``Last-Event-ID``; ``subscription``)
``GET /webhooks/dead``                    webhook deliveries given up (admin)
``POST /webhooks/replay``                 re-queue dead letters ``{"ids": [...]}`` (admin)
``GET /health``, ``GET /metrics``         status; Prometheus text
``GET /openapi.json``                     this API's OpenAPI 3.1 description
``GET /``, ``GET /network.geojson``       the live map (offline: roads from the service)
``WS /events``                            the map's stream: messages with place and
                                          deliveries
========================================  ===============================================

Every request first passes the transport limits (:mod:`roadpubsub.service.limits`: body
and header bytes, time, rate, WebSocket connections); a WebSocket client that falls behind
by more than its send buffer is closed with code 1013,
:data:`~roadpubsub.service.fanout.SLOW_READER_CLOSE`.

Every route but ``/health`` and the map's page and script needs ``Authorization: Bearer
TOKEN`` once the state folder holds a token (WebSocket: that header, or the subprotocols
``bearer`` and the token); each token's role and ids are checked
(:mod:`~roadpubsub.service.access`): 401 without a valid token, 403 outside its rights.
Requests of admin tokens take the grouped paths below; a publisher's publish and a
subscriber's subscribe are checked and applied one request at a time on the apply thread.

Each request is applied by one thread in arrival order (batches whole or not at all;
runs of queued moves or publishes together, see :mod:`~roadpubsub.service.applier`) and
answered only after its log record is fsynced and its webhook deliveries are in the outbox
(:mod:`~roadpubsub.service.dispatch`, the one path of HTTP, WebSocket and MQTT events).
WebSocket clients receive a message's deliveries after that point too, so nothing pushed
can be lost by a crash.

The handlers are module-level functions by subject (:mod:`roadpubsub.service.routes`,
:mod:`~roadpubsub.service.hotpath`) that find the service's objects in
``app.state.service`` (:class:`~roadpubsub.service.context.Service`); this module only
wires them: the route table and the lifespan.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute

from roadpubsub.index.events import BodyParser, RequestError, parse_ids
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.settings import DEFAULTS
from roadpubsub.service import hotpath
from roadpubsub.service.access import OPEN, PRINCIPAL, AccessGate, Guard
from roadpubsub.service.applier import Applier
from roadpubsub.service.context import JSONAnswer, Service, refuse
from roadpubsub.service.dispatch import Dispatch
from roadpubsub.service.fanout import Fanout
from roadpubsub.service.integrity import StateDamageError
from roadpubsub.service.metrics import Metrics
from roadpubsub.service.mqtt import MqttConnector
from roadpubsub.service.resilience import Watchman
from roadpubsub.service.results import Applied
from roadpubsub.service.routes.map import index_page, map_script, network_geojson
from roadpubsub.service.routes.messages import get_message, post_messages
from roadpubsub.service.routes.status import health, metrics_text, openapi
from roadpubsub.service.routes.streams import (
    deliveries_sse,
    deliveries_ws,
    events_ws,
    websocket_only,
)
from roadpubsub.service.routes.subscriptions import (
    delete_subscription,
    get_subscription,
    list_subscriptions,
    post_moves,
    post_subscriptions,
    put_location,
)
from roadpubsub.service.routes.webhooks import webhooks_dead, webhooks_replay
from roadpubsub.service.state import ServiceState
from roadpubsub.service.streams import WebhookFeeder
from roadpubsub.service.webhooks import WebhookService

__all__ = ["build_app"]


class _ServiceApp(Starlette):
    """Starlette, with the hot routes answered first in plain ASGI
    (:mod:`roadpubsub.service.hotpath`)."""

    service: Service | None = None
    gate: AccessGate | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.gate is not None and scope["type"] != "lifespan":
            if not await self.gate.admit(scope, receive, send):
                return
            if "roadpubsub.cors" in scope:
                send = self.gate.cors_send(scope["roadpubsub.cors"], send)
        if scope["type"] == "http" and self.service is not None:
            found = hotpath.route(scope["method"], scope["path"])
            if found is not None:
                await hotpath.handle(self.service, found[0], found[1], receive, send,
                                     scope.get(PRINCIPAL, OPEN))
                return
        await super().__call__(scope, receive, send)


_ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]


def _route(path: str, **handlers: Callable[[Request], Any]) -> Route:
    """One route per path, whatever the method: ``OPTIONS`` and a 405 name every method
    the path has in ``Allow`` (Starlette's route per method named only its own)."""
    if "GET" in handlers:
        handlers["HEAD"] = handlers["GET"]
    allow = ", ".join([*handlers, "OPTIONS"])

    async def endpoint(request: Request) -> Response:
        handler = handlers.get(request.method)
        if handler is not None:
            answer: Response = await handler(request)
            return answer
        if request.method == "OPTIONS":
            for name, text in request.path_params.items():  # the ids of the path too
                parse_ids(text, what=f"'{name}' id")
            return Response(status_code=204, headers={"Allow": allow})
        msg = f"{request.method} is not allowed on {path}; allowed: {allow}"
        return JSONAnswer({"error": msg}, status_code=405, headers={"Allow": allow})

    return Route(path, endpoint, methods=_ALL_METHODS)


ROUTES = [
    _route("/subscriptions", POST=post_subscriptions, GET=list_subscriptions),
    _route("/subscriptions/moves", POST=post_moves),
    _route("/subscriptions/{sid}", GET=get_subscription, DELETE=delete_subscription),
    _route("/subscriptions/{sid}/location", PUT=put_location),
    _route("/messages", POST=post_messages),
    _route("/messages/{mid}", GET=get_message),
    _route("/health", GET=health),
    _route("/metrics", GET=metrics_text),
    _route("/openapi.json", GET=openapi),
    WebSocketRoute("/deliveries", deliveries_ws),
    _route("/deliveries", GET=websocket_only),
    _route("/deliveries/stream", GET=deliveries_sse),
    _route("/webhooks/dead", GET=webhooks_dead),
    _route("/webhooks/replay", POST=webhooks_replay),
    _route("/", GET=index_page),
    _route("/static/map.js", GET=map_script),
    _route("/network.geojson", GET=network_geojson),
    WebSocketRoute("/events", events_ws),
    _route("/events", GET=websocket_only),
]


async def _feed_webhooks(state: ServiceState, feeder: WebhookFeeder) -> None:
    """Queue durable webhook deliveries every second: at a start whatever a crash left
    unqueued, and whatever an outbox failure left behind."""
    while True:
        if feeder.fed < state.journal.durable_head(state.wal.durable_seq):
            try:
                await asyncio.to_thread(feeder.feed)
            except OSError as exc:
                print(f"roadpubsub serve: the webhook outbox could not be written "
                      f"({exc}); retried in a second", file=sys.stderr, flush=True)
            except StateDamageError as exc:  # reported, never skipped: retried, as is
                print(f"roadpubsub serve: webhook deliveries cannot be read back ({exc}); "
                      "retried in a second", file=sys.stderr, flush=True)
        await asyncio.sleep(1.0)


def _lifespan(service: Service, mqtt: tuple[str, int] | None, mqtt_prefix: str,
              mqtt_options: dict[str, Any] | None,
              on_shutdown: Callable[[], None] | None) -> Any:
    """Start the broker connector, the prober and the webhooks; stop them in reverse and
    close the state (a snapshot)."""
    state, webhooks, feeder = service.state, service.webhooks, service.feeder

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        connector = None
        if mqtt is not None:
            loop = asyncio.get_running_loop()

            def from_broker(done: Applied) -> None:  # the connector published already
                loop.call_soon_threadsafe(service.fanout.local, done)

            connector = MqttConnector(mqtt[0], mqtt[1], dispatch=service.dispatch,
                                      prefix=mqtt_prefix, on_applied=from_broker,
                                      **(mqtt_options or {}))
            await asyncio.to_thread(connector.start)
            service.fanout.connector = connector
            service.metrics.extra.append(connector.metric_lines)
        service.watchman.start()
        feeding = None
        if webhooks is not None and feeder is not None:
            await asyncio.to_thread(feeder.feed)  # what a crash left unqueued, first
            await asyncio.to_thread(webhooks.start)
            feeding = asyncio.create_task(_feed_webhooks(state, feeder))
        service.metrics.gc_pauses.install()
        try:
            yield
        finally:
            service.metrics.gc_pauses.remove()  # first: nothing below may leave it behind
            if feeding is not None:
                feeding.cancel()
            if webhooks is not None:
                await asyncio.to_thread(webhooks.stop)
            await asyncio.to_thread(service.watchman.stop)
            if connector is not None:
                await asyncio.to_thread(connector.stop)
            await asyncio.wrap_future(service.applier.call(state.close))
            service.applier.stop()
            if on_shutdown is not None:
                on_shutdown()

    return lifespan


def build_app(state: ServiceState, *, group_max: int = DEFAULTS.group_max,
              group_wait_ms: float = DEFAULTS.group_wait_ms,
              mqtt: tuple[str, int] | None = None, mqtt_prefix: str = DEFAULTS.mqtt_prefix,
              on_shutdown: Callable[[], None] | None = None,
              ws_buffer_deliveries: int = DEFAULTS.ws_buffer_deliveries,
              ws_buffer_bytes: int = DEFAULTS.ws_buffer_bytes,
              gate: AccessGate | None = None, mqtt_options: dict[str, Any] | None = None,
              webhooks: WebhookService | None = None) -> Starlette:
    """The ASGI application serving ``state``; ``group_max`` requests at most are applied
    together, waiting up to ``group_wait_ms`` for more while pipelined events keep
    arriving (see :mod:`roadpubsub.service.applier`); ``mqtt`` (host, port) connects the
    broker connector (:mod:`roadpubsub.service.mqtt`, with ``mqtt_options``: its
    credentials and TLS); ``gate`` authenticates every request
    (:mod:`roadpubsub.service.access`; None: nobody is asked for a token); a WebSocket
    client further behind than ``ws_buffer_deliveries`` or ``ws_buffer_bytes`` is closed
    with :data:`~roadpubsub.service.fanout.SLOW_READER_CLOSE`. The transport limits wrap
    it (:mod:`roadpubsub.service.limits`). ``webhooks``: subscriptions may carry a
    ``webhook`` URL, their deliveries are queued in its outbox before a publish is
    answered and sent by it (None: a ``webhook`` field is refused)."""
    opts = state.options
    parser = BodyParser(state.index.network, max_snap_m=opts.max_snap_m, kinds=True,
                        dmax_m=state.index.dmax_m, max_keywords=opts.max_keywords,
                        max_keyword_bytes=opts.max_keyword_bytes,
                        max_batch_rows=opts.max_batch_rows,
                        max_set_points=opts.set_max_points,
                        max_set_pieces=opts.set_max_pieces,
                        max_set_batch_points=opts.set_batch_points)
    applier = Applier(state, parser, group_max=group_max, wait_ms=group_wait_ms)
    guard = Guard(state, parser, gate.store if gate is not None else None)
    feeder = None if webhooks is None else \
        WebhookFeeder(state, webhooks.queue, webhooks.outbox.high_seq)
    state.check_webhook = None if webhooks is None else webhooks.check_url
    fanout = Fanout(state, max_deliveries=ws_buffer_deliveries, max_bytes=ws_buffer_bytes)
    service = Service(state=state, applier=applier, guard=guard, gate=gate,
                      dispatch=Dispatch(state, applier, guard, feeder=feeder,
                                        announce=fanout.announce),
                      metrics=Metrics(), watchman=Watchman(state, applier), fanout=fanout,
                      webhooks=webhooks, feeder=feeder)
    app = _ServiceApp(routes=ROUTES,
                      lifespan=_lifespan(service, mqtt, mqtt_prefix, mqtt_options,
                                         on_shutdown),
                      exception_handlers={RequestError: refuse, InputError: refuse})
    app.service = service
    app.gate = gate
    app.state.service = service
    return app
