"""The hot routes of the live service as plain ASGI: the events the load is made of.

``POST /messages``, ``POST /subscriptions``, ``PUT /subscriptions/{id}/location`` and
``DELETE /subscriptions/{id}`` are answered here, before Starlette's middleware, routing
and Request objects (a third of the event loop's Python time per request under the mixed
load); every other route, and the OpenAPI description of these, stays with Starlette.
The answers and the errors are those of the Starlette handlers: the same bodies, the
same statuses, the same messages naming the field and the value.

Each request makes one asyncio future; the apply thread hands its result to the log,
which resolves the future once an fsync covers the record
(:meth:`~roadpubsub.service.wal.WriteAheadLog.resolve_when_durable`): one wake-up of the
event loop per fsync for all the requests it covers, instead of one when the request is
applied and another when it is durable.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import orjson

from index.events import RequestError, parse_ids
from roadnet.errors import InputError, format_error
from roadpubsub.service import faults
from roadpubsub.service.answers import dumps
from roadpubsub.service.applier import Applier
from roadpubsub.service.metrics import Metrics
from roadpubsub.service.state import Applied, ServiceState

__all__ = ["HotRoutes"]

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

_JSON_HEADERS = b"application/json"


class _Reply:
    """The apply thread's side of one request: its result goes to the log, which resolves
    ``fut`` once durable; a refusal goes straight to the loop."""

    __slots__ = ("_done", "fut", "loop", "state")

    def __init__(self, fut: asyncio.Future[Any], loop: asyncio.AbstractEventLoop,
                 state: ServiceState) -> None:
        self.fut = fut
        self.loop = loop
        self.state = state
        self._done = False

    def set_result(self, applied: Applied) -> None:
        self._done = True
        self.state.wal.resolve_when_durable(applied.seq, self.fut, self.loop, applied)

    def set_exception(self, exc: BaseException) -> None:
        self._done = True
        self.loop.call_soon_threadsafe(_reject, self.fut, exc)

    def done(self) -> bool:
        return self._done


def _reject(fut: asyncio.Future[Any], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)


class _DisconnectedError(Exception):
    """The client went away before its body arrived."""


async def _body(receive: Receive) -> Any:
    chunks: list[bytes] = []
    while True:
        event = await receive()
        if event["type"] == "http.disconnect":
            raise _DisconnectedError
        chunks.append(event.get("body", b""))
        if not event.get("more_body", False):
            break
    return decode_body(chunks[0] if len(chunks) == 1 else b"".join(chunks))


def decode_body(raw: bytes) -> Any:
    """A request body's JSON (the hot routes' and the Starlette routes' one decoder)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass  # integers beyond 64 bits or NaN: let the checks name the field
    try:
        return json.loads(raw)
    except ValueError as exc:
        msg = f"the body is not valid JSON: {exc}"
        raise RequestError(msg, status=400) from exc


async def _answer(send: Send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-length", str(len(body)).encode()),
                            (b"content-type", _JSON_HEADERS)]})
    await send({"type": "http.response.body", "body": body})


class HotRoutes:
    """Answers the hot routes (see the module docstring); ``announce`` gets each durable
    publish (WebSocket clients, the map, the broker)."""

    def __init__(self, state: ServiceState, applier: Applier, metrics: Metrics,
                 announce: Callable[[Applied], None]) -> None:
        self.state = state
        self.applier = applier
        self.metrics = metrics
        self.announce = announce

    def route(self, method: str, path: str) -> tuple[str, str | None] | None:
        """(kind, the path's id text) of a hot route, or None."""
        if path == "/messages":
            return ("publish", None) if method == "POST" else None
        if path == "/subscriptions":
            return ("subscribe", None) if method == "POST" else None
        if not path.startswith("/subscriptions/"):
            return None
        rest = path[15:]
        if method == "PUT" and rest.endswith("/location"):
            sid = rest[:-9]
            return ("move", sid) if sid and "/" not in sid else None
        if method == "DELETE" and rest and "/" not in rest:
            return ("unsubscribe", rest)
        return None

    async def handle(self, kind: str, sid_text: str | None, receive: Receive, send: Send
                     ) -> None:
        t0 = time.perf_counter()
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Applied] = loop.create_future()
        reply = _Reply(fut, loop, self.state)
        try:
            # concurrent: uvicorn hands the app one request of a connection at a time,
            # so no queued request has been answered (applier.by_kind)
            if kind == "move":
                sid = parse_ids(sid_text or "")
                self.applier.move(await _body(receive), path_id=sid, reply=reply,
                                  concurrent=True)
            elif kind == "publish":
                self.applier.publish(await _body(receive), reply=reply, concurrent=True)
            elif kind == "subscribe":
                body = await _body(receive)
                state, parser = self.state, self.applier.parser
                self.applier.call(lambda: state.subscribe(parser.subscriptions(body)),
                                  reply=reply, kind=kind, concurrent=True)
            else:
                ids = np.array([parse_ids(sid_text or "")], dtype=np.int64)
                self.applier.call(lambda: self.state.unsubscribe(ids), reply=reply,
                                  kind=kind, concurrent=True)
            done = await fut
        except (RequestError, InputError) as exc:
            status = exc.status if isinstance(exc, RequestError) else 422
            self.metrics.error(status)
            await _answer(send, status, orjson.dumps({"error": format_error(exc)}))
            return
        except _DisconnectedError:
            return
        self.metrics.observe(kind, time.perf_counter() - t0)
        if faults.armed:
            faults.fault("before-answer")
        if kind == "publish":
            self.announce(done)
        await _answer(send, 201 if kind == "subscribe" else 200, dumps(done.body))
