"""A bounded load generator for ``roadpubsub serve`` (loopback only).

It replays a mixed stream against a running service: by default 80% moves, 15% publishes
of messages with 5-25 real tweet keywords, 5% subscribes and unsubscribes, each a single
request, from ``clients`` concurrent keep-alive connections; or (``batch > 1``) batches of
moves only. Events are built before the clock starts (locations and
keywords from :func:`roadpubsub.index.workload.generate_workload`), and the run stops after
``events`` requests or ``seconds``, whichever comes first.

The HTTP client is a minimal HTTP/1.1 keep-alive client over asyncio streams: on a 2-core
machine a general-purpose client would spend more CPU per request than the server.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from roadpubsub.index.workload import generate_workload
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.network import RoadNetwork

__all__ = ["LoadReport", "ServiceDownError", "build_stream", "check_loopback", "get_health",
           "run_load"]

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def check_loopback(url: str) -> tuple[str, int]:
    """(host, port) of ``url``; anything but a loopback address is refused."""
    parts = urlsplit(url)
    if parts.scheme != "http" or parts.hostname not in _LOOPBACK:
        msg = f"the load generator only targets http://127.0.0.1 (loopback), got {url!r}"
        raise InputError(msg)
    return parts.hostname or "127.0.0.1", parts.port or 80


class ServiceDownError(InputError):
    """No service answers at the load generator's URL (one line, with a hint)."""


def _down(url: str, exc: BaseException) -> ServiceDownError:
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    msg = f"no service answers at {url}: {reason or type(exc).__name__}"
    return ServiceDownError(msg, hint="start it with 'roadpubsub serve --state DIR', or "
                                      "give its address with --url")


def get_health(url: str, *, timeout: float = 30.0) -> dict[str, Any]:
    """``GET /health`` of the service at ``url`` (loopback only), with the standard library
    (the load generator needs nothing beyond a plain install).

    Raises
    ------
    ServiceDownError
        Nothing listens there, or the answer is not the service's health.
    """
    import http.client

    host, port = check_loopback(url)
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", "/health")
        answer = conn.getresponse()
        body = answer.read()
        if answer.status != 200:
            msg = f"/health answered {answer.status}"
            raise ServiceDownError(msg)
        out = json.loads(body)
    except ServiceDownError as exc:
        raise _down(url, exc) from exc
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise _down(url, exc) from exc
    finally:
        conn.close()
    if not isinstance(out, dict):
        raise _down(url, ValueError("/health did not answer a JSON object"))
    return out


class _Client(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection as an asyncio protocol: a request is one
    pre-encoded write, an answer is found by its Content-Length in the bytes received
    (no line-by-line reads; the generator shares the server's two cores)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self.lost: BaseException | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: BaseException | None) -> None:
        self.lost = exc or ConnectionResetError("the server closed the connection")
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(self.lost)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0 or self.waiter is None:
            return
        head = bytes(self.buf[:end]).lower()
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip() == b"content-length":
                length = int(value)
        total = end + 4 + length
        if len(self.buf) < total:
            return
        status = int(head[9:12])
        body = bytes(self.buf[end + 4:total])
        del self.buf[:total]
        waiter, self.waiter = self.waiter, None
        if not waiter.done():
            waiter.set_result((status, body))


class _Connection:
    """One keep-alive HTTP/1.1 connection."""

    def __init__(self, host: str, port: int, token: str | None = None) -> None:
        self.host = host
        self.port = port
        self.proto: _Client | None = None
        auth = f"Authorization: Bearer {token}\r\n" if token else ""
        self.prefix = f"HTTP/1.1\r\nHost: {host}\r\n{auth}".encode()

    def encode(self, method: str, path: str, body: bytes | None = None) -> bytes:
        """The bytes of one request."""
        head = f"{method} {path} ".encode() + self.prefix
        if body is None:
            return head + b"\r\n"
        return (head + b"Content-Type: application/json\r\nContent-Length: "
                + str(len(body)).encode() + b"\r\n\r\n" + body)

    async def send(self, raw: bytes) -> tuple[int, bytes]:
        """Send a pre-encoded request; (status, body) of the answer."""
        if self.proto is None:
            loop = asyncio.get_running_loop()
            _, self.proto = await loop.create_connection(_Client, self.host, self.port)
        proto = self.proto
        if proto.lost is not None:
            raise proto.lost
        assert proto.transport is not None
        fut: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
        proto.waiter = fut
        proto.transport.write(raw)
        return await fut

    async def request(self, method: str, path: str, body: bytes | None = None
                      ) -> tuple[int, bytes]:
        return await self.send(self.encode(method, path, body))

    def close(self) -> None:
        if self.proto is not None and self.proto.transport is not None:
            self.proto.transport.close()


@dataclass
class LoadReport:
    """What a run measured (seconds; latencies per kind)."""

    seconds: float = 0.0
    client_cpu_s: float = 0.0  # this process's CPU during the run (not the stream's build)
    requests: int = 0
    events: int = 0  # rows (a batch of moves counts each move)
    errors: dict[int, int] = field(default_factory=dict)
    latency: dict[str, list[float]] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "seconds": round(self.seconds, 3), "client_cpu_s": round(self.client_cpu_s, 3),
            "requests": self.requests,
            "events": self.events,
            "requests_per_second": round(self.requests / self.seconds, 1),
            "events_per_second": round(self.events / self.seconds, 1),
            "errors": self.errors, "latency_ms": {}}
        for kind, values in sorted(self.latency.items()):
            a = np.asarray(values) * 1e3
            out["latency_ms"][kind] = {"n": int(a.size),
                                       "p50": round(float(np.percentile(a, 50)), 3),
                                       "p99": round(float(np.percentile(a, 99)), 3),
                                       "max": round(float(a.max()), 3)}
        return out


@dataclass
class Stream:
    """Pre-built request bodies."""

    moves: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    subscriptions: list[dict[str, Any]]

    def __post_init__(self) -> None:
        # JSON encoded before the clock starts; a message's id is spliced in per request
        self.move_bodies = [json.dumps(m).encode() for m in self.moves]
        self.message_tails = [json.dumps(m).encode()[1:] for m in self.messages]


def build_stream(network: RoadNetwork, *, n_points: int, n_messages: int, first_new_id: int,
                 seed: int) -> Stream:
    """Locations to move to, messages (5-25 tweet keywords) and new subscriptions."""
    wl = generate_workload(network, n_subscriptions=n_points, n_messages=n_messages,
                           seed=seed)
    pts = wl.subscriptions.points
    e = pts.edge.astype(np.int64)
    u = network.node_ids[network.edge_u[e]].tolist()
    v = network.node_ids[network.edge_v[e]].tolist()
    off = pts.offset.tolist()
    moves = [{"u": a, "v": b, "offset": c} for a, b, c in zip(u, v, off, strict=True)]
    terms = wl.weights.terms
    s = wl.subscriptions
    subs = [{"id": first_new_id + i, **moves[i],
             "keywords": [terms[t] for t in s.keywords(i).tolist()],
             "alpha": float(s.alpha[i]), "tau": float(s.tau[i])} for i in range(len(s))]
    m = wl.messages
    me = m.points.edge.astype(np.int64)
    messages = [{"u": int(network.node_ids[network.edge_u[me[i]]]),
                 "v": int(network.node_ids[network.edge_v[me[i]]]),
                 "offset": float(m.points.offset[i]),
                 "keywords": [terms[t] for t in m.keywords(i).tolist()]}
                for i in range(len(m))]
    return Stream(moves, messages, subs)


async def _mixed_client(conn: _Connection, stream: Stream, state: dict[str, Any],
                        report: LoadReport, rng: random.Random, *, existing: int,
                        mix: tuple[float, float, float], deadline: float, budget: list[int]
                        ) -> None:
    moves_p, publish_p, _ = mix
    while budget[0] > 0 and time.perf_counter() < deadline:
        budget[0] -= 1
        p = rng.random()
        if p < moves_p:
            kind = "move"
            sid = rng.randrange(existing)
            body = stream.move_bodies[rng.randrange(len(stream.move_bodies))]
            call = conn.request("PUT", f"/subscriptions/{sid}/location", body)
        elif p < moves_p + publish_p:
            kind = "publish"
            state["message_id"] += 1
            tail = stream.message_tails[rng.randrange(len(stream.message_tails))]
            body = b'{"id":' + str(state["message_id"]).encode() + b"," + tail
            call = conn.request("POST", "/messages", body)
        elif state["live"] and rng.random() < 0.5:
            kind = "unsubscribe"
            sid = state["live"].pop(rng.randrange(len(state["live"])))
            call = conn.request("DELETE", f"/subscriptions/{sid}")
        else:
            kind = "subscribe"
            if state["next_sub"] >= len(stream.subscriptions):
                continue
            row = stream.subscriptions[state["next_sub"]]
            state["next_sub"] += 1
            call = conn.request("POST", "/subscriptions", json.dumps(row).encode())
        t0 = time.perf_counter()
        status, _ = await call
        report.latency.setdefault(kind, []).append(time.perf_counter() - t0)
        report.requests += 1
        if status >= 300:
            report.errors[status] = report.errors.get(status, 0) + 1
            continue
        report.events += 1
        if kind == "subscribe":
            state["live"].append(row["id"])


def _move_batches(stream: Stream, rng: random.Random, *, existing: int, batch: int,
                  count: int) -> list[bytes]:
    """``count`` JSON bodies of ``batch`` moves each (random live ids, stream locations)."""
    n = len(stream.moves)
    bodies = []
    for _ in range(count):
        ids = rng.sample(range(existing), min(batch, existing))
        start = rng.randrange(n)
        rows = [{"id": i, **stream.moves[(start + k) % n]} for k, i in enumerate(ids)]
        bodies.append(json.dumps(rows).encode())
    return bodies


async def _batch_client(conn: _Connection, bodies: list[bytes], report: LoadReport,
                        rng: random.Random, stream: Stream, *, existing: int, batch: int,
                        deadline: float, budget: list[int]) -> None:
    k = rng.randrange(len(bodies))
    while budget[0] > 0 and time.perf_counter() < deadline:
        size = min(batch, budget[0], existing)
        budget[0] -= size
        k = (k + 1) % len(bodies)
        body = bodies[k] if size == min(batch, existing) else _move_batches(
            stream, rng, existing=existing, batch=size, count=1)[0]
        t0 = time.perf_counter()
        status, _ = await conn.request("POST", "/subscriptions/moves", body)
        report.latency.setdefault("move_batch", []).append(time.perf_counter() - t0)
        report.requests += 1
        if status >= 300:
            report.errors[status] = report.errors.get(status, 0) + 1
        else:
            report.events += size


async def _run(url: str, stream: Stream, *, existing: int, clients: int, batch: int,
               events: int, seconds: float, mix: tuple[float, float, float], seed: int,
               first_message_id: int, token: str | None) -> LoadReport:
    host, port = check_loopback(url)
    report = LoadReport()
    budget = [events]
    conns = [_Connection(host, port, token) for _ in range(clients)]
    state: dict[str, Any] = {"message_id": first_message_id, "live": [], "next_sub": 0}
    bodies: list[bytes] = []
    if batch > 1:  # encoded before the clock starts, as the single events are built
        n_bodies = max(1, min(-(-events // batch), 4 * clients, 32))
        bodies = _move_batches(stream, random.Random(seed), existing=existing, batch=batch,
                               count=n_bodies)
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    deadline = t0 + seconds
    if batch > 1:
        tasks = [_batch_client(c, bodies, report, random.Random(seed + k), stream,
                               existing=existing, batch=batch, deadline=deadline,
                               budget=budget) for k, c in enumerate(conns)]
    else:
        tasks = [_mixed_client(c, stream, state, report, random.Random(seed + k),
                               existing=existing, mix=mix, deadline=deadline, budget=budget)
                 for k, c in enumerate(conns)]
    try:
        await asyncio.gather(*tasks)
    finally:
        for c in conns:
            c.close()
    report.seconds = time.perf_counter() - t0
    report.client_cpu_s = time.process_time() - cpu0
    return report


def run_load(url: str, stream: Stream, *, existing: int, clients: int = 8, batch: int = 1,
             events: int = 10_000, seconds: float = 60.0,
             mix: tuple[float, float, float] = (0.80, 0.15, 0.05), seed: int = 0,
             first_message_id: int = 10**12, token: str | None = None) -> LoadReport:
    """Drive the service at ``url`` (loopback only) and measure it.

    Parameters
    ----------
    url
        ``http://127.0.0.1:PORT`` of a running service.
    stream
        Bodies from :func:`build_stream` (on the service's network).
    existing
        Subscriptions ``0 .. existing - 1`` exist (moves pick among them).
    clients
        Concurrent connections.
    batch
        Moves per request; > 1 sends batches of moves only (bodies encoded before the
        clock starts, cycled through).
    events
        Most rows to send (> 0); ``seconds`` bounds the run too.
    mix
        Shares of moves, publishes and subscribe/unsubscribe events.
    token
        A bearer token sent with every request (an admin's: the stream touches any id);
        None for a service without tokens.
    """
    if events < 1 or seconds <= 0 or clients < 1 or batch < 1:
        msg = "events, clients and batch must be >= 1 and seconds > 0"
        raise InputError(msg)
    try:
        return asyncio.run(_run(url, stream, existing=existing, clients=clients,
                                batch=batch, events=events, seconds=seconds, mix=mix,
                                seed=seed, first_message_id=first_message_id,
                                token=token))
    except OSError as exc:  # refused, reset: the service is down or went away
        raise _down(url, exc) from exc
