"""Transport limits of the live service: the outermost layer of every request.

:class:`TransportLimitsMiddleware` wraps the whole ASGI application (the hot routes of
:mod:`roadpubsub.service.hotpath` too) and answers, each with one JSON ``{"error": ...}``:

======  ================================================================================
status  when
======  ================================================================================
413     the body is longer than ``max_body_bytes``: refused from ``Content-Length``
        before a byte of it is read, or, for a chunked body, as soon as it passes the
        limit (never more than the limit is held); the connection is closed
431     the request line and headers are longer than ``max_header_bytes``
408     the body did not arrive in full within ``body_timeout_s`` of the request's start;
        the connection is closed
429     the client made more than ``rate_limit_burst`` requests at once or more than
        ``rate_limit_per_s`` on average (a token bucket), with ``Retry-After`` seconds;
        ``/health`` is exempt; or it holds ``ws_max_per_client`` WebSockets already
503     ``ws_max_total`` WebSockets are open already
======  ================================================================================

A client is the SHA-256 of its bearer token (of its ``Authorization`` header's value when
that is not ``Bearer``), or its peer address when it sends none: the limits hold before
anyone is authenticated, and a token's rate is its own wherever it connects from. The
headers are read in one pass (:func:`~roadpubsub.service.access.read_head`), left in the
scope for the access gate with the token's hash, which it looks the token up by.

The body is read whole here, within its limits, before the application runs, so that no
handler waits on a slow client and no limit depends on how a handler reads.

The server's own protocol (:func:`guarded_http_protocol`) bounds what the middleware
cannot see: a request head that never ends (431 once past ``max_header_bytes``, however it
is cut into packets, and never held whole) or that trickles in (408 after
``body_timeout_s``). uvicorn's ``limit_concurrency``, ``backlog`` and
``timeout_keep_alive`` come from the same settings (:func:`uvicorn_options`).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import math
import time
from dataclasses import dataclass, fields
from typing import Any, cast

import orjson
from starlette.types import ASGIApp as App
from starlette.types import Message, Receive, Scope, Send

from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.settings import DEFAULTS, Settings
from roadpubsub.service.access import HEAD, HEAD_FIELDS, read_head

__all__ = ["TransportLimits", "TransportLimitsMiddleware", "add_limit_arguments",
           "client_key", "guarded_http_protocol", "limits_from_args", "uvicorn_options"]


#: Most clients whose token buckets are remembered (the oldest are forgotten past it).
_BUCKETS_KEPT = 65_536


@dataclass(frozen=True, slots=True, kw_only=True)
class TransportLimits:
    """The limits (see :class:`roadpubsub.roadnet.settings.Settings` for each field's meaning)."""

    max_body_bytes: int = DEFAULTS.max_body_bytes
    max_header_bytes: int = DEFAULTS.max_header_bytes
    body_timeout_s: float = DEFAULTS.body_timeout_s
    ws_max_per_client: int = DEFAULTS.ws_max_per_client
    ws_max_total: int = DEFAULTS.ws_max_total
    ws_buffer_deliveries: int = DEFAULTS.ws_buffer_deliveries
    ws_buffer_bytes: int = DEFAULTS.ws_buffer_bytes
    ws_max_message_bytes: int = DEFAULTS.ws_max_message_bytes
    rate_limit_per_s: float = DEFAULTS.rate_limit_per_s
    rate_limit_burst: int = DEFAULTS.rate_limit_burst
    max_connections: int = DEFAULTS.max_connections
    listen_backlog: int = DEFAULTS.listen_backlog
    keep_alive_timeout_s: float = DEFAULTS.keep_alive_timeout_s

    def __post_init__(self) -> None:
        lows = {"max_header_bytes": 1024, "rate_limit_per_s": 0}
        seconds = ("body_timeout_s", "keep_alive_timeout_s")  # > 0
        for f in fields(self):
            value = getattr(self, f.name)
            low = lows.get(f.name, 1)
            if f.name in seconds:
                bad, rule = not value > 0, "> 0"
            else:
                bad, rule = value < low, f">= {low}"
            if bad or not math.isfinite(value):
                msg = f"{_FLAGS[f.name]} must be a finite number {rule}, got {value!r}"
                raise InputError(msg)

    @classmethod
    def from_settings(cls, settings: Settings = DEFAULTS) -> TransportLimits:
        """The limits of ``settings``."""
        return cls(**{f.name: getattr(settings, f.name) for f in fields(cls)})


# flag, type, metavar, help (the default is added from DEFAULTS)
_FLAG_SPECS: dict[str, tuple[str, type, str, str]] = {
    "max_body_bytes": ("--max-body-bytes", int, "N",
                       "largest request body (413 past it, refused before it is read)"),
    "max_header_bytes": ("--max-header-bytes", int, "N",
                         "largest request line and headers (431 past it)"),
    "body_timeout_s": ("--body-timeout", float, "S",
                       "seconds a request may take to arrive in full (408, then closed)"),
    "ws_max_per_client": ("--ws-max-per-client", int, "N",
                          "open WebSockets per client (Authorization value or address)"),
    "ws_max_total": ("--ws-max-total", int, "N", "open WebSockets in all"),
    "ws_buffer_deliveries": ("--ws-buffer", int, "N",
                             "deliveries a WebSocket client may fall behind by before it "
                             "is closed with code 1013 (reconnect)"),
    "ws_buffer_bytes": ("--ws-buffer-bytes", int, "N",
                        "bytes a WebSocket client may fall behind by (same rule)"),
    "ws_max_message_bytes": ("--ws-max-message-bytes", int, "N",
                             "largest message a WebSocket client may send"),
    "rate_limit_per_s": ("--rate-limit", float, "R",
                         "requests per second per client, on average (0: no limit; 429 "
                         "with Retry-After past it)"),
    "rate_limit_burst": ("--rate-burst", int, "N", "requests a client may make at once"),
    "max_connections": ("--max-connections", int, "N",
                        "connections and requests in flight in all (503 past it)"),
    "listen_backlog": ("--backlog", int, "N", "connections the kernel queues"),
    "keep_alive_timeout_s": ("--keep-alive-timeout", float, "S",
                             "seconds an idle keep-alive connection is held open"),
}
_FLAGS = {name: spec[0] for name, spec in _FLAG_SPECS.items()}


def add_limit_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``serve`` flags of the transport limits (defaults from ``DEFAULTS``)."""
    g = parser.add_argument_group("transport limits")
    for name, (flag, kind, metavar, text) in _FLAG_SPECS.items():
        default = getattr(DEFAULTS, name)
        shown = f"{default:,}" if kind is int else f"{default:g}"
        g.add_argument(flag, dest=name, type=kind, default=default, metavar=metavar,
                       help=f"{text} (default {shown})")


def limits_from_args(args: argparse.Namespace) -> TransportLimits:
    """The limits given by :func:`add_limit_arguments`'s flags."""
    return TransportLimits(**{name: getattr(args, name) for name in _FLAG_SPECS})


def uvicorn_options(limits: TransportLimits) -> dict[str, Any]:
    """``uvicorn.run`` keywords that carry the limits into the server itself."""
    try:
        http: Any = guarded_http_protocol(limits)
    except ImportError:  # no httptools: h11, whose own limit on a head is set below
        http = "h11"
    return {"limit_concurrency": limits.max_connections, "backlog": limits.listen_backlog,
            "timeout_keep_alive": limits.keep_alive_timeout_s,
            "h11_max_incomplete_event_size": limits.max_header_bytes,
            "ws_max_size": limits.ws_max_message_bytes, "http": http}


_AUTH, _DIGEST = HEAD_FIELDS[b"authorization"], len(HEAD_FIELDS) + 1
_LENGTH, _CHUNKED = HEAD_FIELDS[b"content-length"], HEAD_FIELDS[b"transfer-encoding"]


def _head(scope: Scope) -> list[Any]:
    head: list[Any] | None = scope.get(HEAD)
    if head is None:
        head = scope[HEAD] = read_head(scope["headers"])
    return head


def client_key(scope: Scope) -> bytes | str:
    """Who a request is for the limits: its bearer token's SHA-256 (bytes), the hash of
    its other ``Authorization`` value, or its peer address."""
    head = _head(scope)
    digest: bytes | None = head[_DIGEST]
    if digest is not None:
        return digest
    if head[_AUTH] is not None:
        return "t:" + hashlib.blake2b(head[_AUTH], digest_size=16).hexdigest()
    client = scope.get("client")
    return "a:" + (client[0] if client else "?")


def _error(msg: str) -> bytes:
    return orjson.dumps({"error": msg})


async def _refuse(send: Send, status: int, msg: str, *, close: bool,
                  headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = _error(msg)
    head = [(b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode())]
    if close:  # uvicorn closes the connection after this answer (the body stays unread)
        head.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status,
                "headers": head + (headers or [])})
    await send({"type": "http.response.body", "body": body})


class _Buckets:
    """Token buckets by client: ``burst`` tokens, refilled at ``rate`` per second."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = float(burst)
        self.state: dict[bytes | str, list[float]] = {}

    def take(self, key: bytes | str) -> float:
        """0 when the request may go on, else the seconds until it could."""
        now = time.monotonic()
        b = self.state.get(key)
        if b is None:
            if len(self.state) >= _BUCKETS_KEPT:  # forget the oldest half (full again)
                for old in list(self.state)[: _BUCKETS_KEPT // 2]:
                    del self.state[old]
            b = self.state[key] = [self.burst, now]
        tokens = min(self.burst, b[0] + (now - b[1]) * self.rate)
        b[1] = now
        if tokens >= 1.0:
            b[0] = tokens - 1.0
            return 0.0
        b[0] = tokens
        return (1.0 - tokens) / self.rate


class _Late:
    """The body timer's callback: cancels the reading task, and says it did."""

    __slots__ = ("cancelling", "fired", "task")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.cancelling = task.cancelling()
        self.fired = False

    def __call__(self) -> None:
        self.fired = True
        self.task.cancel()


class TransportLimitsMiddleware:
    """The limits of :class:`TransportLimits` around ``app`` (see the module docstring)."""

    def __init__(self, app: App, limits: TransportLimits) -> None:
        self.app = app
        self.limits = limits
        self.buckets = _Buckets(limits.rate_limit_per_s, limits.rate_limit_burst) \
            if limits.rate_limit_per_s > 0 else None
        self.ws_open: dict[bytes | str, int] = {}
        self.ws_total = 0

    def __getattr__(self, name: str) -> Any:  # app.state, app.hot ... of the wrapped app
        return getattr(self.app, name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "websocket":
            await self._websocket(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    def _too_fast(self, scope: Scope, key: bytes | str | None = None) -> float:
        if self.buckets is None or scope["path"] == "/health":
            return 0.0
        return self.buckets.take(client_key(scope) if key is None else key)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        lim = self.limits
        headers = scope["headers"]
        size = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"") \
            + 4 * len(headers)
        for name, value in headers:
            size += len(name) + len(value)
        if size > lim.max_header_bytes:
            msg = f"the request's headers are {size:,} bytes; at most " \
                  f"{lim.max_header_bytes:,} are accepted"
            await _refuse(send, 431, msg, close=True)
            return
        head = scope[HEAD] = read_head(headers)  # within the limit: read once, for all
        length: bytes | None = head[_LENGTH]
        chunked = head[_CHUNKED] is not None
        wait = self._too_fast(scope)
        if wait:
            msg = f"too many requests: at most {lim.rate_limit_per_s:g} per second " \
                  f"(bursts of {lim.rate_limit_burst:,}); retry after {math.ceil(wait)} s"
            await _refuse(send, 429, msg, close=False,
                          headers=[(b"retry-after", str(math.ceil(wait)).encode())])
            return
        if length is None and not chunked:  # no body (HTTP/1.1): nothing to wait for
            await self.app(scope, receive, send)
            return
        if length is not None and length.isdigit() and int(length) > lim.max_body_bytes:
            msg = f"the body is {int(length):,} bytes; at most {lim.max_body_bytes:,} " \
                  "are accepted"
            await _refuse(send, 413, msg, close=True)
            return
        body = await self._read_body(scope, receive, send)
        if body is None:
            return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _read_body(self, scope: Scope, receive: Receive, send: Send) -> bytes | None:
        """The whole body within the limits, or None once answered (or gone)."""
        lim = self.limits
        chunks: list[bytes] = []
        total = 0
        # a bare timer that cancels this task: asyncio.timeout's bookkeeping cost four
        # times as much, on every request with a body (most arrive whole at once)
        task = asyncio.current_task()
        assert task is not None
        late = _Late(task)
        # the task's loop: get_running_loop() asks the kernel for the pid (a fork check)
        timer = task.get_loop().call_later(lim.body_timeout_s, late)
        try:
            while True:
                event = await receive()
                if event["type"] == "http.disconnect":
                    return None
                chunk = event.get("body", b"")
                total += len(chunk)
                if total > lim.max_body_bytes:
                    chunks.clear()
                    msg = f"the body is longer than {lim.max_body_bytes:,} bytes, the " \
                          "most accepted"
                    await _refuse(send, 413, msg, close=True)
                    return None
                if chunk:
                    chunks.append(chunk)
                if not event.get("more_body", False):
                    break
        except asyncio.CancelledError:
            # ours (the timer's) unless the task was cancelled from elsewhere too
            if not late.fired or task.uncancel() > late.cancelling:
                raise
            chunks.clear()
            msg = f"the body did not arrive within {lim.body_timeout_s:g} s ({total:,} " \
                  "bytes came)"
            await _refuse(send, 408, msg, close=True)
            return None
        finally:
            timer.cancel()
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        lim = self.limits
        key = client_key(scope)
        status = 0
        retry = self._too_fast(scope, key)
        if retry:
            status, msg = 429, f"too many requests: retry after {math.ceil(retry)} s"
        elif self.ws_open.get(key, 0) >= lim.ws_max_per_client:
            status, msg = 429, f"this client holds {lim.ws_max_per_client} WebSocket " \
                               "connections already, the most allowed"
        elif self.ws_total >= lim.ws_max_total:
            status, msg = 503, f"{lim.ws_max_total} WebSocket connections are open " \
                               "already, the most allowed"
        if status:
            await self._deny(scope, receive, send, status, msg, retry)
            return
        self.ws_open[key] = self.ws_open.get(key, 0) + 1
        self.ws_total += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.ws_total -= 1
            left = self.ws_open[key] - 1
            if left:
                self.ws_open[key] = left
            else:
                del self.ws_open[key]

    @staticmethod
    async def _deny(scope: Scope, receive: Receive, send: Send, status: int, msg: str,
                    retry: float) -> None:
        await receive()  # websocket.connect
        if "websocket.http.response" not in scope.get("extensions", {}):
            await send({"type": "websocket.close", "code": 1008, "reason": msg[:120]})
            return
        body = _error(msg)
        headers = [(b"content-type", b"application/json"),
                   (b"content-length", str(len(body)).encode())]
        if retry:
            headers.append((b"retry-after", str(math.ceil(retry)).encode()))
        await send({"type": "websocket.http.response.start", "status": status,
                    "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})


class _HeadWithBody:
    """The transport as one request's response cycle sees it: the head of an answer with
    a ``content-length`` waits for the first bytes of its body, and both leave in one
    write.

    uvicorn writes a head and its body apart: two system calls, each made holding the
    GIL (a loopback write costs about 6 µs warm, more in the service's cold caches),
    and two segments for the client to wake up to. A head waits only when a body must
    follow it (a length is declared and the request is not ``HEAD``); a ``100
    Continue``, a chunked answer and everything else pass straight through, and
    ``close`` sends a waiting head first (an application that fails after its head).
    """

    __slots__ = ("_head", "_hold", "_transport")

    def __init__(self, transport: asyncio.Transport, *, hold: bool) -> None:
        self._transport = transport
        self._hold = hold
        self._head: bytes | None = None

    def write(self, data: bytes) -> None:
        head = self._head
        if head is not None:
            self._head = None
            self._transport.writelines((head, data))
        elif self._hold and data[:9] == b"HTTP/1.1 " and data[9:12] != b"100":
            self._hold = False  # one head per cycle
            if b"\r\ncontent-length: " in data:
                self._head = data
            else:
                self._transport.write(data)
        else:
            self._transport.write(data)

    def close(self) -> None:
        head, self._head = self._head, None
        if head is not None:
            self._transport.write(head)
        self._transport.close()

    def __getattr__(self, name: str) -> Any:  # is_closing, get_extra_info, ...
        return getattr(self._transport, name)


def guarded_http_protocol(limits: TransportLimits) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol that bounds a request head's bytes and time.

    uvicorn collects a head without limit and waits for it without end (its keep-alive
    timer stops at the first byte): here a head still incomplete after
    ``max_header_bytes`` is answered 431, and one still incomplete after
    ``body_timeout_s`` 408; the connection is closed either way.
    """
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class GuardedHttpToolsProtocol(HttpToolsProtocol):
        _head_bytes = 0
        _in_head = False
        _head_timer: asyncio.TimerHandle | None = None

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._in_head = True
            self._head_bytes = 0

        def on_headers_complete(self) -> None:
            self._end_head()
            before = self.cycle
            super().on_headers_complete()
            cycle = self.cycle
            if cycle is not None and cycle is not before and not cycle.response_started:
                # a stand-in: whatever else the cycle asks of it goes to the transport
                cycle.transport = cast(asyncio.Transport, _HeadWithBody(
                    self.transport, hold=self.scope["method"] != "HEAD"))

        def _end_head(self) -> None:
            self._in_head = False
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._in_head:  # counts only packets that left the head unfinished
                # the clock starts at the first packet that leaves a head unfinished: a
                # head that arrives whole (nearly every one) arms and cancels no timer
                if self._head_timer is None:
                    self._head_timer = self.loop.call_later(limits.body_timeout_s,
                                                            self._late_head)
                self._head_bytes += len(data)
                if self._head_bytes > limits.max_header_bytes:
                    self._cut(431, f"the request's headers are longer than "
                                   f"{limits.max_header_bytes:,} bytes, the most accepted")

        def connection_lost(self, exc: Exception | None) -> None:
            self._end_head()
            super().connection_lost(exc)

        def _late_head(self) -> None:
            self._head_timer = None
            if self._in_head:
                self._cut(408, f"the request's headers did not arrive within "
                               f"{limits.body_timeout_s:g} s")

        def _cut(self, status: int, msg: str) -> None:
            self._end_head()
            if self.transport.is_closing():
                return
            if self.cycle is None or self.cycle.response_complete:  # no answer under way
                body = _error(msg)
                reason = {408: b"Request Timeout",
                          431: b"Request Header Fields Too Large"}[status]
                self.transport.write(
                    b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\nconnection: close\r\n\r\n%s"
                    % (status, reason, len(body), body))
            self.transport.close()

    return GuardedHttpToolsProtocol
