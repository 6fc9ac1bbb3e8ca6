"""``WS /deliveries``, ``GET /deliveries/stream`` and ``WS /events``: deliveries pushed
live, resumable from a seq (:mod:`roadpubsub.service.streams`), and the map's stream."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from starlette.requests import HTTPConnection, Request
from starlette.responses import Response, StreamingResponse
from starlette.websockets import WebSocket, WebSocketDisconnect

from roadpubsub.index.events import RequestError, parse_ids
from roadpubsub.roadnet.settings import DEFAULTS
from roadpubsub.service.access import ADMIN
from roadpubsub.service.context import JSONAnswer, service_of, who
from roadpubsub.service.fanout import CLOSE_GRACE_S, SLOW_READER_CLOSE, DeliveryHub, Want
from roadpubsub.service.streams import resume_point, sse_events, ws_resume

__all__ = ["deliveries_sse", "deliveries_ws", "deny", "events_ws", "websocket_only"]


async def deny(websocket: WebSocket, exc: RequestError) -> None:
    """Refuse a WebSocket handshake with the error's HTTP status (403)."""
    answer = JSONAnswer({"error": str(exc)}, status_code=exc.status)
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(answer)
    else:
        await websocket.close(code=1008)


async def events_ws(websocket: WebSocket) -> None:
    """``WS /events``: every message with its place and deliveries (admin only)."""
    try:
        service_of(websocket).guard.check(who(websocket), "events")
    except RequestError as exc:
        await deny(websocket, exc)
        return
    await _stream(websocket, service_of(websocket).fanout.events, None)


async def deliveries_ws(websocket: WebSocket) -> None:
    """``WS /deliveries[?subscription=ID]``: deliveries as they are matched;
    ``?after=SEQ``: every stored one after SEQ first."""
    if "after" in websocket.query_params:
        await _resumable_ws(websocket)
        return
    service = service_of(websocket)
    raw = websocket.query_params.get("subscription")
    principal = who(websocket)
    want: Want = None
    try:
        service.guard.check(principal, "deliveries")
    except RequestError as exc:
        await deny(websocket, exc)
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
            service.guard.check(principal, "deliveries", [want])
        except RequestError as exc:
            await deny(websocket, exc)
            return
    elif principal.role != ADMIN:
        want = service.guard.wants(principal)  # a subscriber: its own ids' deliveries only
    await _stream(websocket, service.fanout.hub, want)


async def _stream(websocket: WebSocket, to: DeliveryHub, want: Want) -> None:
    """Send a hub client's buffer until it closes, falls behind or its token is revoked."""
    gate = service_of(websocket).gate
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
                                       CLOSE_GRACE_S)
        else:
            with contextlib.suppress(RuntimeError, WebSocketDisconnect, OSError):
                await websocket.close(code=1008 if client.revoked else 1000)


def _stream_want(conn: HTTPConnection) -> Want:
    """The deliveries a stream's caller asked for and may see (403 otherwise)."""
    guard = service_of(conn).guard
    principal = who(conn)
    guard.check(principal, "deliveries")
    raw = conn.query_params.get("subscription")
    if raw is not None:
        sid = parse_ids(raw, what="'subscription' id")
        guard.check(principal, "deliveries", [sid])
        return sid
    return None if principal.role == ADMIN else guard.wants(principal)


def _still_valid(conn: HTTPConnection) -> Callable[[], bool]:
    gate = service_of(conn).gate
    if gate is None:
        return lambda: True
    principal = who(conn)
    return lambda: gate.store.still_valid(principal)


async def _resumable_ws(websocket: WebSocket) -> None:
    service = service_of(websocket)
    state = service.state
    try:
        want = _stream_want(websocket)
        after = resume_point(websocket.query_params.get("after"), what="'after' seq")
        assert after is not None
        state.journal.check_after(after)
    except RequestError as exc:
        await deny(websocket, exc)
        return
    await websocket.accept(subprotocol=websocket.scope.get("roadpubsub.subprotocol"))
    await ws_resume(websocket, state, service.fanout.pulse, want, after,
                    batch=DEFAULTS.stream_batch, still_valid=_still_valid(websocket))


async def deliveries_sse(request: Request) -> Response:
    """``GET /deliveries/stream``: the resumable stream as Server-Sent Events."""
    service = service_of(request)
    state = service.state
    want = _stream_want(request)
    after = resume_point(request.headers.get("last-event-id"), what="'Last-Event-ID'")
    if after is None:
        after = resume_point(request.query_params.get("after"), what="'after' seq")
    if after is None:  # live from now
        after = state.journal.durable_head(state.wal.durable_seq)
    state.journal.check_after(after)
    return StreamingResponse(
        sse_events(state, service.fanout.pulse, want, after, batch=DEFAULTS.stream_batch,
                   keepalive_s=DEFAULTS.stream_keepalive_s,
                   still_valid=_still_valid(request)),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def websocket_only(request: Request) -> Response:
    """``GET`` of a WebSocket path: 426 (a bad ``subscription`` id: its 400 first)."""
    if "subscription" in request.query_params:  # the answer of a bad one as ws://
        parse_ids(request.query_params["subscription"], what="'subscription' id")
    msg = f"{request.url.path} is a WebSocket endpoint: connect with ws:// (or wss://)"
    return JSONAnswer({"error": msg}, status_code=426,
                      headers={"Upgrade": "websocket", "Connection": "Upgrade"})
