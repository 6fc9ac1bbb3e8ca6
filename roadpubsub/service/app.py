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
``GET /health``, ``GET /metrics``         status; Prometheus text
``GET /openapi.json``                     this API's OpenAPI 3.1 description
``GET /``, ``GET /network.geojson``       the live map (offline: roads from the service)
``WS /events``                            the map's stream: messages with place and
                                          deliveries
========================================  ===============================================

Each request is applied by one thread in arrival order (batches whole or not at all;
runs of queued moves or publishes together, see :mod:`~roadpubsub.service.applier`) and
answered only after its log record is fsynced. WebSocket clients receive a
message's deliveries after that point too, so nothing pushed can be lost by a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from index.events import BodyParser, RequestError, parse_ids
from pruning.deliveries import Deliveries
from roadnet.errors import InputError, format_error
from roadpubsub.service import faults
from roadpubsub.service.answers import dumps
from roadpubsub.service.applier import Applier
from roadpubsub.service.geo import lonlat_of, roads_geojson
from roadpubsub.service.hotpath import HotRoutes, decode_body
from roadpubsub.service.metrics import Metrics, rss_bytes, thread_cpu
from roadpubsub.service.mqtt import MqttConnector
from roadpubsub.service.openapi import openapi_document
from roadpubsub.service.resilience import Watchman
from roadpubsub.service.state import Applied, ServiceState, deliveries_json, topk_json

__all__ = ["DeliveryHub", "build_app"]

#: Deliveries a WebSocket client may fall behind by before it is disconnected.
QUEUE_LIMIT = 10_000


class DeliveryHub:
    """WebSocket clients and what each wants: every delivery, or one subscription's."""

    def __init__(self) -> None:
        self.clients: dict[asyncio.Queue[list[dict[str, Any]] | None], int | None] = {}

    def push(self, deliveries: list[dict[str, Any]]) -> None:
        """Queue deliveries for every interested client (never blocks)."""
        if not deliveries or not self.clients:
            return
        for queue, want in list(self.clients.items()):
            mine = deliveries if want is None else \
                [d for d in deliveries if d["subscription_id"] == want]
            if not mine:
                continue
            if queue.qsize() >= QUEUE_LIMIT:
                self.clients.pop(queue, None)
                queue.put_nowait(None)  # too slow: the sender closes the socket
            else:
                queue.put_nowait(mine)


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

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and self.hot is not None:
            found = self.hot.route(scope["method"], scope["path"])
            if found is not None:
                await self.hot.handle(found[0], found[1], receive, send)
                return
        await super().__call__(scope, receive, send)


def _message_events(state: ServiceState, done: Applied) -> list[dict[str, Any]]:
    """One event per new message: its place and its deliveries (for the live map)."""
    assert done.messages is not None
    ids, points = done.messages
    lonlat = lonlat_of(state.index.network, points)
    found = done.deliveries if done.deliveries is not None else None
    out = []
    for k, m in enumerate(ids.tolist()):
        mine = [] if found is None else deliveries_json(Deliveries(
            *(a[found.message_id == m] for a in (found.message_id, found.subscription_id,
                                                  found.distance, found.score))))
        out.append({"type": "message", "id": m, "lon": float(lonlat[k, 0]),
                    "lat": float(lonlat[k, 1]), "deliveries": mine})
    return out


def build_app(state: ServiceState, *, group_max: int = 64,
              mqtt: tuple[str, int] | None = None, mqtt_prefix: str = "roadpubsub",
              on_shutdown: Callable[[], None] | None = None) -> Starlette:
    """The ASGI application serving ``state``; ``group_max`` requests at most are applied
    together (see :mod:`roadpubsub.service.applier`); ``mqtt`` (host, port) connects the
    broker connector (:mod:`roadpubsub.service.mqtt`)."""
    parser = BodyParser(state.index.network, max_snap_m=state.options.max_snap_m, kinds=True,
                        dmax_m=state.index.dmax_m)
    applier = Applier(state, parser, group_max=group_max)
    watchman = Watchman(state, applier)
    metrics = Metrics()
    hub = DeliveryHub()
    events = DeliveryHub()  # the live map's stream: messages with their deliveries
    cache: dict[str, bytes] = {}
    bridges: list[_LoopBridge] = []

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
        return decode_body(await request.body())

    async def post_subscriptions(request: Request) -> Response:
        t0 = time.perf_counter()
        body = await body_of(request)
        done = await apply("subscribe", applier.call(
            lambda: state.subscribe(parser.subscriptions(body)), concurrent=True), t0)
        return _JSONResponse(done.body, status_code=201)

    async def list_subscriptions(request: Request) -> Response:
        q = request.query_params
        after = parse_ids(q["after"], what="'after' id") if "after" in q else None
        limit = parse_ids(q.get("limit", "1000"), what="'limit'")
        if not 1 <= limit <= 100_000:
            msg = f"'limit' must lie in [1, 100000], got {limit}"
            raise RequestError(msg, status=400)
        rows = await run(lambda: state.list_subscriptions(after=after, limit=limit))
        return _JSONResponse({"subscriptions": rows})

    async def get_subscription(request: Request) -> Response:
        sid = parse_ids(request.path_params["sid"])

        def read() -> list[dict[str, Any]]:
            ids = np.array([sid], dtype=np.int64)
            state._require_live(ids)
            return state.subscription_rows(ids)

        rows = await run(read)
        return _JSONResponse(rows[0])

    async def delete_subscription(request: Request) -> Response:
        t0 = time.perf_counter()
        sid = parse_ids(request.path_params["sid"])
        done = await apply("unsubscribe", applier.call(
            lambda: state.unsubscribe(np.array([sid], dtype=np.int64)), concurrent=True),
            t0)
        return _JSONResponse(done.body)

    async def put_location(request: Request) -> Response:
        t0 = time.perf_counter()
        sid = parse_ids(request.path_params["sid"])
        body = await body_of(request)
        done = await apply("move", applier.move(body, path_id=sid, concurrent=True), t0)
        return _JSONResponse(done.body)

    async def post_moves(request: Request) -> Response:
        t0 = time.perf_counter()
        body = await body_of(request)
        done = await apply("move", applier.move(body, concurrent=True), t0)
        return _JSONResponse(done.body)

    async def post_messages(request: Request) -> Response:
        t0 = time.perf_counter()
        body = await body_of(request)
        done = await apply("publish", applier.publish(body, concurrent=True), t0)
        announce(done)
        return _JSONResponse(done.body)

    def announce(done: Applied) -> None:
        """Durable deliveries to WebSocket clients, the map and the broker."""
        if done.deliveries is not None and len(done.deliveries) and (
                hub.clients or connector):  # the objects only when someone takes them
            found = deliveries_json(done.deliveries)
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

    async def get_message(request: Request) -> Response:
        mid = parse_ids(request.path_params["mid"], what="message id")
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
        return PlainTextResponse(metrics.render(state),
                                 media_type="text/plain; version=0.0.4; charset=utf-8")

    async def openapi(request: Request) -> Response:
        return _JSONResponse(openapi_document())

    async def index_page(request: Request) -> Response:
        return FileResponse(_STATIC / "index.html", media_type="text/html")

    async def map_script(request: Request) -> Response:
        return FileResponse(_STATIC / "map.js", media_type="text/javascript")

    async def network_geojson(request: Request) -> Response:
        if "roads" not in cache:  # built once, off the event loop (Rome: seconds)
            cache["roads"] = await asyncio.to_thread(
                lambda: json.dumps(roads_geojson(state.index.network)).encode())
        return Response(cache["roads"], media_type="application/geo+json")

    async def events_ws(websocket: WebSocket) -> None:
        await stream(websocket, events, None)

    async def deliveries_ws(websocket: WebSocket) -> None:
        raw = websocket.query_params.get("subscription")
        want: int | None = None
        if raw is not None:
            try:
                want = parse_ids(raw)
            except RequestError as exc:
                await websocket.accept()  # so that the client reads why
                await websocket.close(code=1008, reason=str(exc)[:120])
                return
        await stream(websocket, hub, want)

    async def stream(websocket: WebSocket, to: DeliveryHub, want: int | None) -> None:
        await websocket.accept()
        queue: asyncio.Queue[list[dict[str, Any]] | None] = asyncio.Queue()
        to.clients[queue] = want

        async def drain() -> None:  # notices a client that closes
            try:
                while True:
                    await websocket.receive_text()
            except WebSocketDisconnect:
                queue.put_nowait(None)

        reader = asyncio.create_task(drain())
        try:
            while True:
                batch = await queue.get()
                if batch is None:
                    break
                for d in batch:
                    await websocket.send_json(d)
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            to.clients.pop(queue, None)
            reader.cancel()
            with contextlib.suppress(RuntimeError):
                await websocket.close()

    def push_local(done: Applied) -> None:
        if done.deliveries is not None and len(done.deliveries):
            hub.push(deliveries_json(done.deliveries))
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
                              on_applied=from_broker, prefix=mqtt_prefix)
            await asyncio.to_thread(c.start)
            connector.append(c)
        watchman.start()
        try:
            yield
        finally:
            await asyncio.to_thread(watchman.stop)
            if connector:
                await asyncio.to_thread(connector[0].stop)
            await run(state.close)
            applier.stop()
            if on_shutdown is not None:
                on_shutdown()

    routes = [
        Route("/subscriptions", post_subscriptions, methods=["POST"]),
        Route("/subscriptions", list_subscriptions, methods=["GET"]),
        Route("/subscriptions/moves", post_moves, methods=["POST"]),
        Route("/subscriptions/{sid}", get_subscription, methods=["GET"]),
        Route("/subscriptions/{sid}", delete_subscription, methods=["DELETE"]),
        Route("/subscriptions/{sid}/location", put_location, methods=["PUT"]),
        Route("/messages", post_messages, methods=["POST"]),
        Route("/messages/{mid}", get_message, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics_text, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        WebSocketRoute("/deliveries", deliveries_ws),
        Route("/", index_page, methods=["GET"]),
        Route("/static/map.js", map_script, methods=["GET"]),
        Route("/network.geojson", network_geojson, methods=["GET"]),
        WebSocketRoute("/events", events_ws),
    ]
    app = _ServiceApp(routes=routes, lifespan=lifespan,
                      exception_handlers={RequestError: refuse, InputError: refuse})
    app.hot = HotRoutes(state, applier, metrics, announce)
    app.state.service = state
    app.state.hub = hub
    app.state.metrics = metrics
    app.state.applier = applier
    app.state.watchman = watchman
    return app
