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
by more than its send buffer is closed with code 1013, :data:`SLOW_READER_CLOSE`.

Every route but ``/health`` and the map's page and script needs ``Authorization: Bearer
TOKEN`` once the state folder holds a token (WebSocket: that header, or the subprotocols
``bearer`` and the token); each token's role and ids are checked
(:mod:`~roadpubsub.service.access`): 401 without a valid token, 403 outside its rights.
Requests of admin tokens take the grouped paths below; a publisher's publish and a
subscriber's subscribe are checked and applied one request at a time on the apply thread.

Each request is applied by one thread in arrival order (batches whole or not at all;
runs of queued moves or publishes together, see :mod:`~roadpubsub.service.applier`) and
answered only after its log record is fsynced. WebSocket clients receive a
message's deliveries after that point too, so nothing pushed can be lost by a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    JSONResponse,
    PlainTextResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from roadpubsub.index.events import BodyParser, RequestError, parse_ids
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.roadnet.errors import InputError, format_error
from roadpubsub.roadnet.settings import DEFAULTS
from roadpubsub.service import faults
from roadpubsub.service.access import ADMIN, OPEN, PRINCIPAL, AccessGate, Guard, Principal
from roadpubsub.service.answers import dumps
from roadpubsub.service.applier import Applier
from roadpubsub.service.geo import lonlat_of, roads_geojson
from roadpubsub.service.hotpath import HotRoutes, decode_body_async
from roadpubsub.service.metrics import Metrics, rss_bytes, thread_cpu
from roadpubsub.service.mqtt import MqttConnector
from roadpubsub.service.openapi import openapi_document
from roadpubsub.service.resilience import Watchman
from roadpubsub.service.state import Applied, ServiceState, deliveries_json, topk_json
from roadpubsub.service.streams import (
    Pulse,
    WebhookFeeder,
    resume_point,
    sse_events,
    ws_resume,
)
from roadpubsub.service.webhooks import WebhookService

__all__ = ["DeliveryHub", "build_app"]

#: Close code of a WebSocket client that fell too far behind (its send buffer passed
#: ``ws_buffer_deliveries`` or ``ws_buffer_bytes``): 1013, "try again later" (RFC 6455's
#: registry): it should reconnect; the deliveries it missed are in ``GET /messages/{id}``.
SLOW_READER_CLOSE = 1013
#: Seconds a dropped client is given to take its close frame before its socket is ended.
_CLOSE_GRACE_S = 10.0


def _text(item: dict[str, Any]) -> str:
    # Starlette's send_json encoding, done once per push for all clients
    return json.dumps(item, separators=(",", ":"), ensure_ascii=False)


#: What a WebSocket client wants: everything (None), one subscription id, or a test of ids
#: (a subscriber token's own).
Want = int | Callable[[int], bool] | None


class _Client:
    """One WebSocket client's send buffer: JSON texts not yet sent."""

    __slots__ = ("dropped", "gone", "items", "nbytes", "over", "ready", "revoked", "want")

    def __init__(self, want: Want) -> None:
        self.want = want
        self.revoked = False  # its token was revoked: closed with 1008
        self.items: deque[str] = deque()
        self.nbytes = 0
        self.ready = asyncio.Event()  # items to send
        self.over = asyncio.Event()  # dropped or gone: the connection ends
        self.dropped = False  # fell behind: closed with SLOW_READER_CLOSE
        self.gone = False  # the client closed


class DeliveryHub:
    """WebSocket clients and what each wants: every delivery, or one subscription's.

    Each client's buffer holds at most ``max_deliveries`` items and ``max_bytes`` bytes of
    JSON; a client that would pass either is dropped: its buffer is freed at once and its
    socket closed with :data:`SLOW_READER_CLOSE`.
    """

    def __init__(self, *, max_deliveries: int = DEFAULTS.ws_buffer_deliveries,
                 max_bytes: int = DEFAULTS.ws_buffer_bytes) -> None:
        # what each wants: None everything, an id, or a test of ids (a token's own)
        self.clients: dict[_Client, Want] = {}
        self.max_deliveries = max_deliveries
        self.max_bytes = max_bytes
        self.dropped = 0

    def add(self, want: Want) -> _Client:
        """A new client's buffer (``want``: one subscription id, a test of ids, or None
        for all)."""
        client = _Client(want)
        self.clients[client] = want
        return client

    def push(self, deliveries: list[dict[str, Any]]) -> None:
        """Queue deliveries for every interested client (never blocks)."""
        if not deliveries or not self.clients:
            return
        every: list[str] | None = None
        for client, want in list(self.clients.items()):
            if want is None:
                if every is None:
                    every = [_text(d) for d in deliveries]
                mine = every
            elif isinstance(want, int):
                mine = [_text(d) for d in deliveries if d["subscription_id"] == want]
            else:
                mine = [_text(d) for d in deliveries if want(d["subscription_id"])]
            if not mine:
                continue
            size = sum(map(len, mine))  # ASCII: characters are bytes
            if len(client.items) + len(mine) > self.max_deliveries or \
                    client.nbytes + size > self.max_bytes:
                self.clients.pop(client, None)  # too slow: freed now, closed by its sender
                client.items.clear()
                client.nbytes = 0
                client.dropped = True
                client.over.set()
                self.dropped += 1
            else:
                client.items.extend(mine)
                client.nbytes += size
            client.ready.set()


_STATIC = Path(__file__).with_name("static")


class _LoopBridge:
    """Results of the apply thread handed to the event loop in bunches.

    ``asyncio.wrap_future`` wakes the loop once per request; the apply thread finishes a
    run of queued requests at once, so here the first result of a bunch wakes the loop and
    the others ride along.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()
        self._done: list[tuple[asyncio.Future[Any], Future[Any]]] = []

    def wrap(self, fut: Future[Any]) -> asyncio.Future[Any]:
        """An asyncio future of the loop with ``fut``'s outcome."""
        mine: asyncio.Future[Any] = self.loop.create_future()
        fut.add_done_callback(lambda f: self._finished(mine, f))
        return mine

    def _finished(self, mine: asyncio.Future[Any], fut: Future[Any]) -> None:
        with self._lock:
            self._done.append((mine, fut))
            first = len(self._done) == 1
        if first:
            self.loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:
            done, self._done = self._done, []
        for mine, fut in done:
            if mine.done():
                continue
            exc = fut.exception()
            if exc is not None:
                mine.set_exception(exc)
            else:
                mine.set_result(fut.result())


class _JSONResponse(JSONResponse):
    """JSON answers rendered by orjson (the json module's encoder was a fifth of the event
    loop's own Python time under the mixed load, most of it the deliveries lists)."""

    def render(self, content: Any) -> bytes:
        return dumps(content)


class _ServiceApp(Starlette):
    """Starlette, with the hot routes answered first in plain ASGI
    (:mod:`roadpubsub.service.hotpath`)."""

    hot: HotRoutes | None = None
    gate: AccessGate | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.gate is not None and scope["type"] != "lifespan":
            if not await self.gate.admit(scope, receive, send):
                return
            if "roadpubsub.cors" in scope:
                send = self.gate.cors_send(scope["roadpubsub.cors"], send)
        if scope["type"] == "http" and self.hot is not None:
            found = self.hot.route(scope["method"], scope["path"])
            if found is not None:
                await self.hot.handle(found[0], found[1], receive, send,
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
        return _JSONResponse({"error": msg}, status_code=405, headers={"Allow": allow})

    return Route(path, endpoint, methods=_ALL_METHODS)


def _message_events(state: ServiceState, done: Applied) -> list[dict[str, Any]]:
    """One event per new message: its place and its deliveries (for the live map)."""
    assert done.messages is not None
    ids, points = done.messages
    lonlat = lonlat_of(state.index.network, points)
    found = done.deliveries if done.deliveries is not None else None
    out = []
    for k, m in enumerate(ids.tolist()):
        mine: list[dict[str, Any]] = []
        if found is not None:
            rows = found.message_id == m
            seq = None if done.delivery_seq is None else done.delivery_seq[rows]
            mine = deliveries_json(Deliveries(*(a[rows] for a in (
                found.message_id, found.subscription_id, found.distance, found.score))), seq)
        out.append({"type": "message", "id": m, "lon": float(lonlat[k, 0]),
                    "lat": float(lonlat[k, 1]), "deliveries": mine})
    return out


async def _deny(websocket: WebSocket, exc: RequestError) -> None:
    """Refuse a WebSocket handshake with the error's HTTP status (403)."""
    answer = _JSONResponse({"error": str(exc)}, status_code=exc.status)
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(answer)
    else:
        await websocket.close(code=1008)


def build_app(state: ServiceState, *, group_max: int = 64,
              mqtt: tuple[str, int] | None = None, mqtt_prefix: str = "roadpubsub",
              on_shutdown: Callable[[], None] | None = None,
              ws_buffer_deliveries: int = DEFAULTS.ws_buffer_deliveries,
              ws_buffer_bytes: int = DEFAULTS.ws_buffer_bytes,
              gate: AccessGate | None = None, mqtt_options: dict[str, Any] | None = None,
              webhooks: WebhookService | None = None) -> Starlette:
    """The ASGI application serving ``state``; ``group_max`` requests at most are applied
    together (see :mod:`roadpubsub.service.applier`); ``mqtt`` (host, port) connects the
    broker connector (:mod:`roadpubsub.service.mqtt`, with ``mqtt_options``: its
    credentials and TLS); ``gate`` authenticates every request
    (:mod:`roadpubsub.service.access`; None: nobody is asked for a token); a WebSocket
    client further behind than ``ws_buffer_deliveries`` or ``ws_buffer_bytes`` is closed
    with :data:`SLOW_READER_CLOSE`. The transport limits wrap it
    (:mod:`roadpubsub.service.limits`). ``webhooks``: subscriptions may carry a
    ``webhook`` URL, their deliveries are queued in its outbox before a publish is
    answered and sent by it (None: a ``webhook`` field is refused)."""
    opts = state.options
    parser = BodyParser(state.index.network, max_snap_m=opts.max_snap_m, kinds=True,
                        dmax_m=state.index.dmax_m, max_keywords=opts.max_keywords,
                        max_keyword_bytes=opts.max_keyword_bytes,
                        max_batch_rows=opts.max_batch_rows)
    applier = Applier(state, parser, group_max=group_max)
    guard = Guard(state, parser, gate.store if gate is not None else None)

    def who(conn: Request | WebSocket) -> Principal:
        principal: Principal = conn.scope.get(PRINCIPAL, OPEN)
        return principal
    watchman = Watchman(state, applier)
    metrics = Metrics()
    hub = DeliveryHub(max_deliveries=ws_buffer_deliveries, max_bytes=ws_buffer_bytes)
    # the live map's stream: messages with their deliveries
    events = DeliveryHub(max_deliveries=ws_buffer_deliveries, max_bytes=ws_buffer_bytes)
    cache: dict[str, bytes] = {}
    bridges: list[_LoopBridge] = []
    # resumable streams and webhooks (issue 30)
    pulse = Pulse()
    feeder = None if webhooks is None else \
        WebhookFeeder(state, webhooks.queue, webhooks.outbox.high_seq)
    state.check_webhook = None if webhooks is None else webhooks.check_url

    def bridge(fut: Future[Any]) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        if not bridges or bridges[0].loop is not loop:
            bridges[:] = [_LoopBridge(loop)]
        return bridges[0].wrap(fut)

    async def run(fn: Callable[[], Any]) -> Any:
        return await bridge(applier.call(fn))

    # The event routes below submit with concurrent=True: uvicorn hands the app one
    # request of a connection at a time, so no queued request has been answered yet
    # (applier.by_kind may order them by kind).
    async def apply(kind: str, fut: Future[Applied], t0: float) -> Applied:
        applied = await bridge(fut)
        await state.wal.wait_durable(applied.seq)
        if faults.armed:
            faults.fault("before-answer")
        metrics.observe(kind, time.perf_counter() - t0)
        return applied

    async def body_of(request: Request) -> Any:
        return await decode_body_async(await request.body(), max_depth=opts.max_json_depth,
                                       thread_bytes=opts.decode_thread_bytes)

    async def post_subscriptions(request: Request) -> Response:
        t0 = time.perf_counter()
        principal = who(request)
        guard.check(principal, "subscribe")
        body = await body_of(request)
        done = await apply("subscribe", applier.call(
            lambda: guard.subscribe(principal, body), concurrent=True), t0)
        return _JSONResponse(done.body, status_code=201)

    async def list_subscriptions(request: Request) -> Response:
        q = request.query_params
        after = parse_ids(q["after"], what="'after' id") if "after" in q else None
        limit = parse_ids(q.get("limit", "1000"), what="'limit'")
        if not 1 <= limit <= 100_000:
            msg = f"'limit' must lie in [1, 100000], got {limit}"
            raise RequestError(msg, status=400)
        principal = who(request)
        guard.check(principal, "list")
        if principal.role != ADMIN:  # a subscriber lists its own live ids only
            def own() -> list[dict[str, Any]]:
                ids = np.array(guard.owned(principal), dtype=np.int64)
                ids = ids[state._contains(ids)] if ids.size else ids
                if after is not None:
                    ids = ids[ids > after]
                return state.subscription_rows(ids[:limit]) if ids.size else []

            return _JSONResponse({"subscriptions": await run(own)})
        rows = await run(lambda: state.list_subscriptions(after=after, limit=limit))
        return _JSONResponse({"subscriptions": rows})

    async def get_subscription(request: Request) -> Response:
        sid = parse_ids(request.path_params["sid"])
        guard.check(who(request), "read", [sid])

        def read() -> list[dict[str, Any]]:
            ids = np.array([sid], dtype=np.int64)
            state._require_live(ids)
            return state.subscription_rows(ids)

        rows = await run(read)
        return _JSONResponse(rows[0])

    async def delete_subscription(request: Request) -> Response:
        t0 = time.perf_counter()
        sid = parse_ids(request.path_params["sid"])
        guard.check(who(request), "unsubscribe", [sid])
        done = await apply("unsubscribe", applier.call(
            lambda: state.unsubscribe(np.array([sid], dtype=np.int64)), concurrent=True),
            t0)
        return _JSONResponse(done.body)

    async def put_location(request: Request) -> Response:
        t0 = time.perf_counter()
        sid = parse_ids(request.path_params["sid"])
        guard.check(who(request), "move", [sid])
        body = await body_of(request)
        done = await apply("move", applier.move(body, path_id=sid, concurrent=True), t0)
        return _JSONResponse(done.body)

    async def post_moves(request: Request) -> Response:
        t0 = time.perf_counter()
        principal = who(request)
        guard.check(principal, "move")
        body = await body_of(request)
        guard.row_ids(principal, body)  # before the body is parsed or any id looked up
        done = await apply("move", applier.move(body, concurrent=True), t0)
        return _JSONResponse(done.body)

    async def post_messages(request: Request) -> Response:
        t0 = time.perf_counter()
        principal = who(request)
        guard.check(principal, "publish")
        body = await body_of(request)
        done = await apply("publish", applier.publish(body, concurrent=True)
                           if principal.role == ADMIN else applier.call(
                               lambda: guard.publish(principal, body), concurrent=True), t0)
        pending = announce(done)
        if pending is not None:
            await pending
        return _JSONResponse(done.body)

    def announce(done: Applied) -> Any:
        """Durable deliveries to WebSocket clients, the map, the broker and the streams;
        an awaitable when some go to webhooks (the answer waits until they are in the
        outbox), else None."""
        pulse.kick()
        pending = None
        if feeder is not None and state.webhook_of and done.delivery_seq is not None \
                and done.delivery_seq.size:
            pending = feeder.before_answer(int(done.delivery_seq.max()))
        if done.deliveries is not None and len(done.deliveries) and (
                hub.clients or connector):  # the objects only when someone takes them
            found = deliveries_json(done.deliveries, done.delivery_seq)
            hub.push(found)
            if connector and done.messages is not None:
                connector[0].publish_deliveries(found)
        if done.topk is not None and len(done.topk) and (hub.clients or connector):
            changes = topk_json(done.topk)  # top-k insertions and evictions, same stream
            hub.push(changes)
            if connector:
                connector[0].publish_deliveries(changes)
        if events.clients and done.messages is not None:
            events.push(_message_events(state, done))
        return pending

    async def get_message(request: Request) -> Response:
        mid = parse_ids(request.path_params["mid"], what="message id")
        guard.check(who(request), "message", [mid])
        found = state.message(mid)
        if found is None:
            msg = f"message {mid} was never published"
            raise RequestError(msg, status=404)
        return _JSONResponse(found)

    async def health(request: Request) -> Response:
        status, reason = state.health()
        return _JSONResponse({
            "status": status, "reason": reason,
            "log_bytes": state.wal.size, "max_log_bytes": state.options.max_log_bytes,
            "recoveries": state.recoveries, "disk_probes": watchman.probes,
            "last_probe_error": watchman.last_probe_error,
            "snapshot_failures": state.snapshots.failures,
            "seq": state.wal.next_seq - 1, "durable_seq": state.wal.durable_seq,
            "snapshot_seq": state.snapshot_seq,
            "subscriptions": sum(state.subscription_count().values()),
            "kinds": state.subscription_count(), "window": state.window,
            "messages": len(state.messages), "snapshot_running": state.snapshots.running,
            "recovery_seconds": round(state.recovery_seconds, 3),
            "rss_bytes": rss_bytes(), "compactions": state.compactions,
            "compaction_running": state.compactor.running,
            "last_compaction_seconds": round(state.compactor.last_seconds, 3),
            "last_compaction_adopt_seconds": round(state.compactor.last_adopt_seconds, 4),
            "delta_rows": len(state.index.delta),
            "snapshots": state.snapshots.completed,
            "last_snapshot_seconds": round(state.snapshots.last_seconds, 3),
            "grouped_requests": applier.grouped_requests, "groups": applier.groups,
            "apply_cpu_seconds": {k: round(v, 4) for k, v in applier.cpu_seconds.items()},
            "apply_requests": dict(applier.requests), "thread_cpu_seconds": thread_cpu(),
            "fsyncs": state.wal.fsyncs,
            "network": state.manifest.get("network"), "dmax_m": state.index.dmax_m},
            status_code=503 if status == "failed" else 200)

    async def metrics_text(request: Request) -> Response:
        guard.check(who(request), "metrics")
        return PlainTextResponse(metrics.render(state) + _webhook_metrics(webhooks, feeder),
                                 media_type="text/plain; version=0.0.4; charset=utf-8")

    async def openapi(request: Request) -> Response:
        guard.check(who(request), "openapi")
        return _JSONResponse(openapi_document(dmax_m=state.index.dmax_m))

    async def index_page(request: Request) -> Response:
        return FileResponse(_STATIC / "index.html", media_type="text/html")

    async def map_script(request: Request) -> Response:
        return FileResponse(_STATIC / "map.js", media_type="text/javascript")

    async def network_geojson(request: Request) -> Response:
        guard.check(who(request), "map")
        if "roads" not in cache:  # built once, off the event loop (Rome: seconds)
            cache["roads"] = await asyncio.to_thread(
                lambda: json.dumps(roads_geojson(state.index.network)).encode())
        return Response(cache["roads"], media_type="application/geo+json")

    async def events_ws(websocket: WebSocket) -> None:
        try:
            guard.check(who(websocket), "events")  # admin only: every message's place
        except RequestError as exc:
            await _deny(websocket, exc)
            return
        await stream(websocket, events, None)

    async def deliveries_ws(websocket: WebSocket) -> None:
        if "after" in websocket.query_params:
            await resumable_ws(websocket)
            return
        raw = websocket.query_params.get("subscription")
        principal = who(websocket)
        want: int | Callable[[int], bool] | None = None
        try:
            guard.check(principal, "deliveries")
        except RequestError as exc:
            await _deny(websocket, exc)
            return
        if raw is not None:
            try:
                want = parse_ids(raw)
            except RequestError as exc:
                await websocket.accept(subprotocol=websocket.scope.get(
                    "roadpubsub.subprotocol"))  # so that the client reads why
                await websocket.close(code=1008, reason=str(exc)[:120])
                return
            try:
                guard.check(principal, "deliveries", [want])
            except RequestError as exc:
                await _deny(websocket, exc)
                return
        elif principal.role != ADMIN:
            want = guard.wants(principal)  # a subscriber: its own ids' deliveries only
        await stream(websocket, hub, want)

    async def stream(websocket: WebSocket, to: DeliveryHub, want: Want) -> None:
        await websocket.accept(subprotocol=websocket.scope.get("roadpubsub.subprotocol"))
        client = to.add(want)

        async def drain() -> None:  # notices a client that closes
            try:
                while True:
                    await websocket.receive_text()
            except (WebSocketDisconnect, RuntimeError):
                client.gone = True
                client.over.set()

        async def send() -> None:
            while True:
                await client.ready.wait()
                client.ready.clear()
                if gate is not None and client.items and \
                        not gate.store.still_valid(who(websocket)):
                    client.revoked = True  # a token revoked while its stream is open
                    return
                while client.items and not client.dropped:
                    text = client.items.popleft()
                    client.nbytes -= len(text)
                    await websocket.send_text(text)

        reader = asyncio.create_task(drain())
        sender = asyncio.create_task(send())
        watch = asyncio.create_task(client.over.wait())
        try:
            # a sender stuck on a full socket still sees the drop
            await asyncio.wait({sender, watch}, return_when=asyncio.FIRST_COMPLETED)
            if sender.done() and not sender.cancelled():
                sender.exception()  # the client went away while being sent to
        finally:
            to.clients.pop(client, None)
            for task in (reader, sender, watch):
                task.cancel()
            if client.dropped:
                reason = f"fell behind by more than {to.max_deliveries} deliveries or " \
                         f"{to.max_bytes} bytes: reconnect with after=the last seq"
                with contextlib.suppress(RuntimeError, WebSocketDisconnect, TimeoutError,
                                         OSError):
                    await asyncio.wait_for(websocket.close(code=SLOW_READER_CLOSE,
                                                           reason=reason[:120]),
                                           _CLOSE_GRACE_S)
            else:
                with contextlib.suppress(RuntimeError, WebSocketDisconnect, OSError):
                    await websocket.close(code=1008 if client.revoked else 1000)

    def stream_want(conn: Request | WebSocket) -> Want:
        """The deliveries a stream's caller asked for and may see (403 otherwise)."""
        principal = who(conn)
        guard.check(principal, "deliveries")
        raw = conn.query_params.get("subscription")
        if raw is not None:
            sid = parse_ids(raw, what="'subscription' id")
            guard.check(principal, "deliveries", [sid])
            return sid
        return None if principal.role == ADMIN else guard.wants(principal)

    def still_valid(conn: Request | WebSocket) -> Callable[[], bool]:
        if gate is None:
            return lambda: True
        principal = who(conn)
        return lambda: gate.store.still_valid(principal)

    async def resumable_ws(websocket: WebSocket) -> None:
        try:
            want = stream_want(websocket)
            after = resume_point(websocket.query_params.get("after"), what="'after' seq")
            assert after is not None
            state.journal.check_after(after)
        except RequestError as exc:
            await _deny(websocket, exc)
            return
        await websocket.accept(subprotocol=websocket.scope.get("roadpubsub.subprotocol"))
        await ws_resume(websocket, state, pulse, want, after, batch=DEFAULTS.stream_batch,
                        still_valid=still_valid(websocket))

    async def deliveries_sse(request: Request) -> Response:
        want = stream_want(request)
        after = resume_point(request.headers.get("last-event-id"), what="'Last-Event-ID'")
        if after is None:
            after = resume_point(request.query_params.get("after"), what="'after' seq")
        if after is None:  # live from now
            after = state.journal.durable_head(state.wal.durable_seq)
        state.journal.check_after(after)
        return StreamingResponse(
            sse_events(state, pulse, want, after, batch=DEFAULTS.stream_batch,
                       keepalive_s=DEFAULTS.stream_keepalive_s,
                       still_valid=still_valid(request)),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    def hooks_of(request: Request) -> WebhookService:
        guard.check(who(request), "webhooks")  # admin only
        if webhooks is None:
            msg = "webhooks are not enabled on this service"
            raise RequestError(msg, status=404)
        return webhooks

    async def webhooks_dead(request: Request) -> Response:
        service = hooks_of(request)
        return _JSONResponse({"dead": await asyncio.to_thread(service.dead_letters)})

    async def webhooks_replay(request: Request) -> Response:
        service = hooks_of(request)
        body = await body_of(request)
        ids = body.get("ids") if isinstance(body, dict) else None
        if not isinstance(ids, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) and i > 0 for i in ids) \
                or len(ids) > opts.max_batch_rows:
            msg = (f"the body must be {{\"ids\": [...]}}: at most {opts.max_batch_rows} "
                   "dead-letter ids (positive integers, from GET /webhooks/dead)")
            raise RequestError(msg, status=400)
        return _JSONResponse({"replayed": await asyncio.to_thread(service.replay, ids)})

    async def feed_webhooks() -> None:
        """Queue durable webhook deliveries every second (those published through the
        broker, and at a start whatever a crash left unqueued)."""
        assert feeder is not None
        while True:
            if feeder.fed < state.journal.durable_head(state.wal.durable_seq):
                try:
                    await asyncio.to_thread(feeder.feed)
                except OSError as exc:
                    print(f"roadpubsub serve: the webhook outbox could not be written "
                          f"({exc}); retried in a second", file=sys.stderr, flush=True)
            await asyncio.sleep(1.0)

    def push_local(done: Applied) -> None:
        pulse.kick()
        if done.deliveries is not None and len(done.deliveries):
            hub.push(deliveries_json(done.deliveries, done.delivery_seq))
        if done.topk is not None and len(done.topk):
            hub.push(topk_json(done.topk))
        if events.clients and done.messages is not None:
            events.push(_message_events(state, done))

    async def refuse(request: Request, exc: Exception) -> Response:
        status = exc.status if isinstance(exc, RequestError) else 422
        metrics.error(status)
        return _JSONResponse({"error": format_error(exc)}, status_code=status)

    connector: list[MqttConnector] = []

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if mqtt is not None:
            loop = asyncio.get_running_loop()

            def from_broker(done: Applied) -> None:  # the connector published already
                loop.call_soon_threadsafe(push_local, done)

            c = MqttConnector(mqtt[0], mqtt[1], state=state, applier=applier, parser=parser,
                              on_applied=from_broker, prefix=mqtt_prefix,
                              **(mqtt_options or {}))
            await asyncio.to_thread(c.start)
            connector.append(c)
            metrics.extra.append(c.metric_lines)
        watchman.start()
        feeding = None
        if webhooks is not None and feeder is not None:
            await asyncio.to_thread(feeder.feed)  # what a crash left unqueued, first
            await asyncio.to_thread(webhooks.start)
            feeding = asyncio.create_task(feed_webhooks())
        try:
            yield
        finally:
            if feeding is not None:
                feeding.cancel()
            if webhooks is not None:
                await asyncio.to_thread(webhooks.stop)
            await asyncio.to_thread(watchman.stop)
            if connector:
                await asyncio.to_thread(connector[0].stop)
            await run(state.close)
            applier.stop()
            if on_shutdown is not None:
                on_shutdown()

    async def websocket_only(request: Request) -> Response:
        if "subscription" in request.query_params:  # the answer of a bad one as ws://
            parse_ids(request.query_params["subscription"], what="'subscription' id")
        msg = f"{request.url.path} is a WebSocket endpoint: connect with ws:// (or wss://)"
        return _JSONResponse({"error": msg}, status_code=426,
                             headers={"Upgrade": "websocket", "Connection": "Upgrade"})

    routes = [
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
    app = _ServiceApp(routes=routes, lifespan=lifespan,
                      exception_handlers={RequestError: refuse, InputError: refuse})
    app.hot = HotRoutes(state, applier, metrics, announce, guard)
    app.gate = gate
    app.state.service = state
    app.state.hub = hub
    app.state.metrics = metrics
    app.state.applier = applier
    app.state.watchman = watchman
    app.state.feeder = feeder
    return app


def _label(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _webhook_metrics(webhooks: WebhookService | None, feeder: WebhookFeeder | None) -> str:
    """Prometheus lines of the webhooks, per endpoint: queued, sent, retried, dead,
    oldest queued age."""
    if webhooks is None:
        return ""
    per = webhooks.metrics()
    out = []
    for name, key, kind, text in (
            ("queued", "queued", "gauge", "webhook deliveries waiting in the outbox"),
            ("sent_total", "sent", "counter", "webhook deliveries acknowledged (2xx)"),
            ("retried_total", "retried", "counter", "webhook deliveries sent again"),
            ("dead_total", "dead", "counter", "webhook deliveries moved to dead letters"),
            ("oldest_queued_age_seconds", "oldest_queued_age_s", "gauge",
             "age of the oldest queued webhook delivery")):
        metric = f"roadpubsub_webhook_{name}"
        out.append(f"# HELP {metric} {text} (per endpoint)")
        out.append(f"# TYPE {metric} {kind}")
        for url, m in per.items():
            out.append(f'{metric}{{endpoint="{_label(url)}"}} {m[key]}')
    if feeder is not None:
        out.append("# HELP roadpubsub_webhook_fed_seq the highest delivery seq fed to the "
                   "outbox")
        out.append("# TYPE roadpubsub_webhook_fed_seq gauge")
        out.append(f"roadpubsub_webhook_fed_seq {feeder.fed}")
    return "\n".join(out) + "\n"

