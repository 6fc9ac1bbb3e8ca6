"""The hot routes of the live service as plain ASGI: the events the load is made of.

``POST /messages``, ``POST /subscriptions``, ``PUT /subscriptions/{id}/location`` and
``DELETE /subscriptions/{id}`` are answered here, before Starlette's middleware, routing
and Request objects (a third of the event loop's Python time per request under the mixed
load); every other route, and the OpenAPI description of these, stays with Starlette.
The answers and the errors are those of the Starlette handlers
(:mod:`roadpubsub.service.routes`): the same bodies, the same statuses, the same messages
naming the field and the value.

Each request goes through :meth:`~roadpubsub.service.dispatch.Dispatch.run`: one asyncio
future, resolved by the log once an fsync covers the record (one wake-up of the event
loop per fsync for all the requests it covers).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import orjson

from roadpubsub.index.events import RequestError, parse_ids
from roadpubsub.roadnet.errors import InputError, format_error
from roadpubsub.roadnet.settings import DEFAULTS
from roadpubsub.service.access import ADMIN, OPEN, Principal
from roadpubsub.service.answers import dumps
from roadpubsub.service.bodies import decode_body_async
from roadpubsub.service.context import Service
from roadpubsub.service.dispatch import Event

__all__ = ["handle", "route"]

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

_JSON_HEADERS = b"application/json"


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


async def _answer(send: Send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-length", str(len(body)).encode()),
                            (b"content-type", _JSON_HEADERS)]})
    await send({"type": "http.response.body", "body": body})


def route(method: str, path: str) -> tuple[str, str | None] | None:
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


async def handle(service: Service, kind: str, sid_text: str | None, receive: Receive,
                 send: Send, principal: Principal = OPEN) -> None:
    """Answer one hot request (``kind`` and ``sid_text`` from :func:`route`)."""
    t0 = time.perf_counter()
    opts = service.state.options
    try:
        if principal.role != ADMIN:  # not the admin's fast path: the role and the path's
            # id checked before the body and before existence; the body's ids on the
            # apply thread (Guard)
            service.guard.check(principal, kind, [] if sid_text is None
                                else [parse_ids(sid_text)])
        sid = None if sid_text is None else parse_ids(sid_text)
        if kind == "unsubscribe":
            body: Any = np.array([sid], dtype=np.int64)
        else:
            body = await _body(receive, max_depth=opts.max_json_depth,
                               thread_bytes=opts.decode_thread_bytes)
        # concurrent: uvicorn hands the app one request of a connection at a time, so no
        # queued request has been answered (applier.by_kind)
        done = await service.dispatch.run(Event(kind, body, principal, sid))
    except (RequestError, InputError) as exc:
        status = exc.status if isinstance(exc, RequestError) else 422
        service.metrics.error(status)
        await _answer(send, status, orjson.dumps({"error": format_error(exc)}))
        return
    except _DisconnectedError:
        return
    service.metrics.observe(kind, time.perf_counter() - t0)
    await _answer(send, 201 if kind == "subscribe" else 200, dumps(done.body))
