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

from roadpubsub.index.events import RequestError, parse_ids
from roadpubsub.roadnet.errors import InputError, format_error
from roadpubsub.roadnet.settings import DEFAULTS
from roadpubsub.service import faults
from roadpubsub.service.access import ADMIN, OPEN, Guard, Principal
from roadpubsub.service.answers import dumps
from roadpubsub.service.applier import Applier
from roadpubsub.service.metrics import Metrics
from roadpubsub.service.state import Applied, ServiceState

__all__ = ["HotRoutes", "decode_body", "decode_body_async", "json_depth"]

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


async def _body(receive: Receive, *, max_depth: int = DEFAULTS.max_json_depth,
                thread_bytes: int = DEFAULTS.decode_thread_bytes) -> Any:
    chunks: list[bytes] = []
    while True:
        event = await receive()
        if event["type"] == "http.disconnect":
            raise _DisconnectedError
        chunks.append(event.get("body", b""))
        if not event.get("more_body", False):
            break
    return await decode_body_async(chunks[0] if len(chunks) == 1 else b"".join(chunks),
                                   max_depth=max_depth, thread_bytes=thread_bytes)


# Every byte but brackets and quotes, deleted before the depth is counted.
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')
_OPEN = np.zeros(256, dtype=np.int8)
_OPEN[[ord("["), ord("{")]] = 1
_OPEN[[ord("]"), ord("}")]] = -1


def json_depth(raw: bytes) -> int:
    """The deepest nesting of arrays and objects in a JSON text, without recursion and
    in C and numpy passes (about a quarter of orjson's decoding time for a batch).

    Escaped backslashes and quotes are dropped first (then every quote left opens or
    closes a string), everything but brackets and quotes next, and brackets inside
    strings do not count. Exact for JSON; only approximate for malformed text, which the
    decoders refuse anyway (and the fallback decoder's RecursionError is a 400 too).
    """
    if b"\\" in raw:
        raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    skeleton = np.frombuffer(raw.translate(None, _NOT_STRUCTURE), dtype=np.uint8)
    steps = _OPEN[skeleton]
    if b'"' in raw:
        steps[(np.cumsum(skeleton == ord('"'), dtype=np.int64) & 1).astype(bool)] = 0
    return int(np.cumsum(steps, dtype=np.int64).max(initial=0))


def decode_body(raw: bytes, *, max_depth: int = DEFAULTS.max_json_depth) -> Any:
    """A request body's JSON (the hot routes' and the Starlette routes' one decoder).

    Refused with a 400: text that is not JSON, and nesting deeper than ``max_depth``
    (counted without recursion before anything is decoded, so 100,000 brackets cost one
    linear pass). Integers beyond 64 bits, NaN and lone surrogates (``"\\ud800"``) decode
    and are named by the body's checks (:mod:`index.events`), which refuse them.
    """
    # Few brackets cannot nest deep: the common small body skips the count.
    if raw.count(b"[") + raw.count(b"{") > max_depth:
        depth = json_depth(raw)
        if depth > max_depth:
            msg = (f"the body nests arrays and objects {depth:,} deep, more than the limit "
                   f"of {max_depth}")
            raise RequestError(msg, status=400)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass  # integers beyond 64 bits, NaN or lone surrogates: let the checks name them
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        msg = f"the body is not valid JSON: {exc}"
        raise RequestError(msg, status=400) from exc


async def decode_body_async(raw: bytes, *, max_depth: int = DEFAULTS.max_json_depth,
                            thread_bytes: int = DEFAULTS.decode_thread_bytes) -> Any:
    """:func:`decode_body` in line for a small body, on a worker thread for one larger
    than ``thread_bytes`` (decoding megabytes would stall every other request)."""
    if len(raw) <= thread_bytes:
        return decode_body(raw, max_depth=max_depth)
    return await asyncio.to_thread(decode_body, raw, max_depth=max_depth)


async def _answer(send: Send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-length", str(len(body)).encode()),
                            (b"content-type", _JSON_HEADERS)]})
    await send({"type": "http.response.body", "body": body})


class HotRoutes:
    """Answers the hot routes (see the module docstring); ``announce`` gets each durable
    publish (WebSocket clients, the map, the broker)."""

    def __init__(self, state: ServiceState, applier: Applier, metrics: Metrics,
                 announce: Callable[[Applied], Any], guard: Guard | None = None) -> None:
        self.state = state
        self.applier = applier
        self.metrics = metrics
        self.announce = announce
        opts = state.options
        self._decode = {"max_depth": opts.max_json_depth,
                        "thread_bytes": opts.decode_thread_bytes}
        self.guard = guard or Guard(state, applier.parser, None)

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
        if method == "DELETE" and rest and "/" not in rest and rest != "moves":  # 405 there
            return ("unsubscribe", rest)
        return None

    async def handle(self, kind: str, sid_text: str | None, receive: Receive, send: Send,
                     principal: Principal = OPEN) -> None:
        t0 = time.perf_counter()
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Applied] = loop.create_future()
        reply = _Reply(fut, loop, self.state)
        try:
            if principal.role != ADMIN:  # not the admin's fast path: checked, owned
                await self._owned(kind, sid_text, receive, reply, principal)
            # concurrent: uvicorn hands the app one request of a connection at a time,
            # so no queued request has been answered (applier.by_kind)
            elif kind == "move":
                sid = parse_ids(sid_text or "")
                self.applier.move(await _body(receive, **self._decode), path_id=sid, reply=reply,
                                  concurrent=True)
            elif kind == "publish":
                self.applier.publish(await _body(receive, **self._decode), reply=reply,
                                     concurrent=True)
            elif kind == "subscribe":
                body = await _body(receive, **self._decode)
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
            pending = self.announce(done)  # webhook deliveries: in the outbox first
            if pending is not None:
                try:
                    await pending
                except RequestError as exc:
                    self.metrics.error(exc.status)
                    await _answer(send, exc.status, orjson.dumps({"error": format_error(exc)}))
                    return
        await _answer(send, 201 if kind == "subscribe" else 200, dumps(done.body))

    async def _owned(self, kind: str, sid_text: str | None, receive: Receive, reply: _Reply,
                     principal: Principal) -> None:
        """Submit a request of a publisher or subscriber token: the role and the path's id
        checked here (before the body and before existence), the body's ids on the apply
        thread (:class:`~roadpubsub.service.access.Guard`)."""
        guard = self.guard
        if kind == "publish":
            guard.check(principal, "publish")
            body = await _body(receive, **self._decode)
            self.applier.call(lambda: guard.publish(principal, body), reply=reply,
                              kind=kind, concurrent=True)
        elif kind == "subscribe":
            guard.check(principal, "subscribe")
            body = await _body(receive, **self._decode)
            self.applier.call(lambda: guard.subscribe(principal, body), reply=reply,
                              kind=kind, concurrent=True)
        else:
            sid = parse_ids(sid_text or "")
            guard.check(principal, kind, [sid])
            if kind == "move":
                self.applier.move(await _body(receive, **self._decode), path_id=sid, reply=reply,
                                  concurrent=True)
            else:
                ids = np.array([sid], dtype=np.int64)
                self.applier.call(lambda: self.state.unsubscribe(ids), reply=reply,
                                  kind=kind, concurrent=True)
