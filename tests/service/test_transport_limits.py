"""The transport limits of ``roadpubsub serve`` against hostile clients (raw sockets,
httpx, websockets) on a real server: each is refused with its status and one JSON message,
the server's memory stays within 200 MB of where it was (its peak too, from
/proc/<pid>/status), and afterwards ``/health`` is ok and a normal write still works."""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from live import Server, message_rows, subscription_rows
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from roadpubsub.index.workload import Workload
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.service.fanout import DeliveryHub
from roadpubsub.service.limits import TransportLimits

MB = 2**20
_ids = itertools.count(10_000_000)


def memory(server: Server) -> tuple[int, int]:
    """(resident, peak resident) bytes of the server process."""
    assert server.proc is not None
    status = Path(f"/proc/{server.proc.pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return (int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024)


def assert_bounded(server: Server, before: tuple[int, int]) -> None:
    rss, peak = memory(server)
    ceiling = before[0] + 200 * MB
    assert rss <= ceiling and peak <= max(before[1], ceiling), (before, rss, peak)


def assert_healthy(server: Server, workload: Workload, network: RoadNetwork) -> None:
    """``/health`` ok, and a new subscription and a message are applied."""
    with httpx.Client(base_url=server.url, timeout=600) as c:
        assert c.get("/health").json()["status"] == "ok"
        row = {**subscription_rows(workload, network)[0], "id": next(_ids)}
        r = c.post("/subscriptions", json=row)
        assert r.status_code == 201, r.text
        r = c.post("/messages", json={**message_rows(workload, network)[0], "id": next(_ids)})
        assert r.status_code == 200, r.text


def _connect(server: Server) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=30)


def _answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of one answer read off a raw socket."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed without an answer: {data!r}"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    headers = dict((k.lower(), v.strip()) for k, v in (x.split(":", 1) for x in lines[1:]))
    while len(body) < int(headers.get("content-length", 0)):
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(lines[0].split()[1]), headers, body


def _send_in_background(sock: socket.socket, pieces: Any) -> tuple[threading.Thread, list[int]]:
    """Send ``pieces`` on a thread (until the server closes); the list gets the count."""
    sent = [0]

    def run() -> None:
        try:
            for piece in pieces:
                sock.sendall(piece)
                sent[0] += len(piece)
        except OSError:
            pass  # the server closed the connection: what the limit should do

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, sent


def _error_of(body: bytes) -> str:
    message = json.loads(body)["error"]
    assert isinstance(message, str) and message
    return message


@pytest.fixture
def http_server(serve: Any) -> Server:
    server: Server = serve("--body-timeout", "2")
    return server


def test_large_bodies_are_refused_before_they_are_read(
        http_server: Server, workload: Workload, andorra: RoadNetwork) -> None:
    server = http_server
    assert_healthy(server, workload, andorra)
    before = memory(server)
    blob = b"{}," * (MB // 3)
    # two bodies of 100 MB at once, promised by Content-Length: 413 at once, left unread
    socks = [_connect(server) for _ in range(2)]
    senders = []
    for sock in socks:
        sock.sendall(b"POST /messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                     b"\r\nContent-Length: %d\r\n\r\n[" % (100 * MB))
        senders.append(_send_in_background(sock, itertools.repeat(blob, 100)))
    for sock, (sender, sent) in zip(socks, senders, strict=True):
        status, headers, body = _answer(sock)
        assert status == 413 and headers["connection"] == "close"
        assert "104,857,600 bytes; at most 16,777,216" in _error_of(body)
        sender.join(60)
        assert sent[0] < 100 * MB - len(blob)  # the server stopped taking it
        sock.close()
    # 100 MB chunked (no length): cut off once past the limit, never held whole
    sock = _connect(server)
    sock.sendall(b"POST /subscriptions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                 b"\r\nTransfer-Encoding: chunked\r\n\r\n")
    piece = b"%x\r\n%s\r\n" % (len(blob), blob)
    sender, sent = _send_in_background(sock, itertools.chain(
        itertools.repeat(piece, 100), [b"0\r\n\r\n"]))
    status, headers, body = _answer(sock)
    assert status == 413 and "longer than" in _error_of(body)
    sender.join(60)
    assert sent[0] < 100 * len(piece)
    sock.close()
    assert_bounded(server, before)
    assert_healthy(server, workload, andorra)


def test_large_headers_are_refused(http_server: Server, workload: Workload,
                                   andorra: RoadNetwork) -> None:
    server = http_server
    before = memory(server)
    # 64 KB in one header: 431
    sock = _connect(server)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 65536 + b"\r\n\r\n")
    status, _, body = _answer(sock)
    assert status == 431 and "headers" in _error_of(body)
    sock.close()
    # 50 MB of headers that never end: 431 long before, never held whole
    sock = _connect(server)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
    sender, sent = _send_in_background(
        sock, itertools.repeat(b"X-More: " + b"b" * 1000 + b"\r\n", 50_000))
    status, _, body = _answer(sock)
    assert status == 431 and "16,384" in _error_of(body)
    sender.join(60)
    assert sent[0] < 50 * 1010 * 1000
    sock.close()
    assert_bounded(server, before)
    assert_healthy(server, workload, andorra)


def test_slow_and_incomplete_requests_time_out(http_server: Server, workload: Workload,
                                               andorra: RoadNetwork) -> None:
    server = http_server
    # a body promised and not sent: 408 after the timeout (2 s here), then closed
    sock = _connect(server)
    sock.sendall(b"POST /messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 100\r\n\r\n{\"id\": 1")
    t0 = time.monotonic()
    status, headers, body = _answer(sock)
    assert 1.5 < time.monotonic() - t0 < 15
    assert status == 408 and headers["connection"] == "close"
    assert "did not arrive within 2 s" in _error_of(body)
    assert sock.recv(10) == b""  # closed by the server
    sock.close()
    # a head that trickles in and never ends: 408 too
    sock = _connect(server)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
    t0 = time.monotonic()
    status, _, body = _answer(sock)
    assert status == 408 and 1.5 < time.monotonic() - t0 < 15
    assert sock.recv(10) == b""
    sock.close()
    assert_healthy(server, workload, andorra)


def test_a_request_flood_is_answered_429(serve: Any, workload: Workload,
                                         andorra: RoadNetwork) -> None:
    server = serve("--rate-limit", "20", "--rate-burst", "40")
    codes: list[int] = []
    retry: list[str] = []
    t0 = time.monotonic()
    with httpx.Client(base_url=server.url, timeout=60) as c:
        for _ in range(300):
            r = c.get("/subscriptions", params={"limit": 1})
            codes.append(r.status_code)
            if r.status_code == 429:
                retry.append(r.headers["retry-after"])
                assert "too many requests" in r.json()["error"]
        elapsed = time.monotonic() - t0
        assert set(codes) == {200, 429}
        assert codes.count(200) <= 40 + 20 * elapsed + 2
        assert all(x.isdigit() and int(x) >= 1 for x in retry)
        assert c.get("/health").status_code == 200  # exempt
        # another client (another Authorization value) has its own bucket
        other = c.get("/subscriptions", params={"limit": 1},
                      headers={"Authorization": "Bearer someone-else"})
        assert other.status_code != 429
        time.sleep(int(retry[-1]) + 1)
        assert c.get("/subscriptions", params={"limit": 1}).status_code == 200
    assert_healthy(server, workload, andorra)


def test_websocket_connections_are_capped(serve: Any, workload: Workload,
                                          andorra: RoadNetwork) -> None:
    server = serve("--ws-max-per-client", "3", "--ws-max-total", "4")
    url = server.url.replace("http", "ws") + "/deliveries"

    async def run() -> None:
        mine = [await connect(url) for _ in range(3)]
        with pytest.raises(InvalidStatus) as refused:
            await connect(url)
        assert refused.value.response.status_code == 429
        assert "3 WebSocket connections" in json.loads(refused.value.response.body)["error"]
        other = await connect(url, additional_headers={"Authorization": "Bearer b"})
        with pytest.raises(InvalidStatus) as full:
            await connect(url, additional_headers={"Authorization": "Bearer c"})
        assert full.value.response.status_code == 503
        await mine.pop().close()
        await asyncio.sleep(0.5)
        mine.append(await connect(url))  # a closed one frees its place
        for ws in [*mine, other]:
            await ws.close()

    asyncio.run(run())
    assert_healthy(server, workload, andorra)


def test_a_slow_websocket_reader_is_closed_with_1013(serve: Any, workload: Workload,
                                                     andorra: RoadNetwork) -> None:
    server = serve("--ws-buffer", "2000")
    url = server.url.replace("http", "ws") + "/deliveries"
    m0 = message_rows(workload, andorra)[0]
    place = {k: m0[k] for k in ("u", "v", "offset")}
    # 1,000 boolean subscriptions at the messages' place: each message reaches them all
    subs = [{"id": 500_000 + i, **place, "keywords": [m0["keywords"][0]],
             "kind": "boolean", "radius": 1000.0} for i in range(1000)]
    with httpx.Client(base_url=server.url, timeout=600) as c:
        assert c.post("/subscriptions", json=subs).status_code == 201
        # the first publish compiles the boolean kernels on a cold cache
        assert c.post("/messages", json={**m0, "id": 1}).status_code == 200
    before = memory(server)

    async def run() -> tuple[int, int | None, list[dict[str, Any]]]:
        raw = socket.socket()
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        raw.connect(("127.0.0.1", server.port))
        slow = await connect(url, sock=raw, max_queue=4)  # reads nothing for now
        got: list[dict[str, Any]] = []
        fast = await connect(f"{url}?subscription={subs[7]['id']}")

        async def read_fast() -> None:
            while len(got) < 100:
                got.append(json.loads(await fast.recv()))

        reader = asyncio.create_task(read_fast())
        async with httpx.AsyncClient(base_url=server.url, timeout=600) as c:
            for b in range(10):  # 100 messages x 1,000 deliveries
                batch = [{**m0, "id": 1000 + 10 * b + i} for i in range(10)]
                r = await c.post("/messages", json=batch)
                assert r.status_code == 200 and len(r.json()["deliveries"]) == 10_000
            assert (await c.get("/health")).json()["status"] == "ok"
        await asyncio.wait_for(reader, 60)
        assert_bounded(server, before)
        received = 0
        code = None
        try:
            async with asyncio.timeout(60):
                while True:
                    await slow.recv()
                    received += 1
        except ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd is not None else None
        await fast.close()
        return received, code, got

    received, code, got = asyncio.run(run())
    assert code == 1013
    assert received < 100_000  # it never got them all: dropped, not buffered
    assert sorted(d["message_id"] for d in got) == list(range(1000, 1100))
    assert_healthy(server, workload, andorra)



def test_the_limits_refuse_bad_values() -> None:
    for name, bad, flag in (("max_body_bytes", 0, "--max-body-bytes"),
                            ("max_header_bytes", 100, "--max-header-bytes"),
                            ("body_timeout_s", 0.0, "--body-timeout"),
                            ("rate_limit_per_s", -1.0, "--rate-limit"),
                            ("rate_limit_burst", 0, "--rate-burst")):
        with pytest.raises(InputError, match=flag):
            TransportLimits(**{name: bad})
    assert TransportLimits(rate_limit_per_s=0).rate_limit_per_s == 0  # 0: no rate limit
    assert TransportLimits.from_settings() == TransportLimits()


def test_the_hub_counts_deliveries_and_bytes() -> None:
    hub = DeliveryHub(max_deliveries=5, max_bytes=1000)
    every, one, small = hub.add(None), hub.add(2), hub.add(None)
    d = [{"message_id": 1, "subscription_id": s, "distance": 1.5, "score": 0.5}
         for s in (1, 2, 3)]
    hub.push(d)
    assert len(every.items) == 3 and len(one.items) == 1
    assert every.nbytes == sum(len(json.dumps(x, separators=(",", ":"))) for x in d)
    hub.push(d)  # 6 > 5: the readers of everything are dropped, their buffers freed
    assert every.dropped and not every.items and every.nbytes == 0 and every.over.is_set()
    assert small.dropped and hub.dropped == 2
    assert list(hub.clients) == [one] and len(one.items) == 2 and not one.dropped
    hub = DeliveryHub(max_deliveries=1000, max_bytes=150)
    c = hub.add(None)
    hub.push(d[:2])
    assert not c.dropped and c.nbytes > 100
    hub.push(d[2:])  # about 63 bytes each: the third passes 150
    assert c.dropped


class _RecordingTransport(asyncio.Transport):
    """A connection's transport that keeps each write call's bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[bytes] = []
        self.closed = False

    def write(self, data: Any) -> None:
        self.calls.append(bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        self.calls.append(b"".join(list_of_data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 4000), "sockname": ("127.0.0.1", 8000)}.get(
            name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _writes_of(request: bytes, app: Any) -> tuple[list[bytes], bool]:
    """The write calls the server's own protocol makes on its connection for ``request``
    answered by ``app``; whether it closed the connection."""
    import uvicorn
    from uvicorn.server import ServerState

    from roadpubsub.service.limits import guarded_http_protocol

    async def run() -> tuple[list[bytes], bool]:
        config = uvicorn.Config(app, log_level="critical", lifespan="off")
        config.load()
        protocol = guarded_http_protocol(TransportLimits())(
            config=config, server_state=ServerState(), app_state={})
        transport = _RecordingTransport()
        protocol.connection_made(transport)
        protocol.data_received(request)
        for _ in range(20):
            await asyncio.sleep(0)
        closed = transport.closed
        protocol.connection_lost(None)
        return transport.calls, closed

    return asyncio.run(run())


def test_an_answer_leaves_in_one_write() -> None:
    """A head with a content-length waits for its body; everything else passes through."""
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        mode = scope["path"]
        length = [] if mode == "/chunked" else [(b"content-length", b"2")]
        await send({"type": "http.response.start", "status": 200, "headers": length})
        if mode == "/fails":
            raise RuntimeError("after the head")
        await send({"type": "http.response.body", "body": b"{}"})

    def ask(method: str, path: str, extra: bytes = b"", body: bytes = b""
            ) -> tuple[list[bytes], bool]:
        return _writes_of(f"{method} {path} HTTP/1.1\r\nhost: x\r\n".encode() + extra
                          + b"\r\n" + body, app)

    calls, closed = ask("GET", "/plain")
    assert len(calls) == 1 and not closed
    assert calls[0].startswith(b"HTTP/1.1 200 OK\r\n") and calls[0].endswith(b"\r\n\r\n{}")
    calls, _ = ask("HEAD", "/plain")  # no body follows: the head goes alone
    assert len(calls) == 1 and calls[0].endswith(b"content-length: 2\r\n\r\n")
    calls, _ = ask("GET", "/chunked")  # no length: the head is not held
    assert calls[0].endswith(b"transfer-encoding: chunked\r\n\r\n")
    assert calls[1:] == [b"2\r\n{}\r\n0\r\n\r\n"]
    calls, _ = ask("POST", "/plain", b"content-length: 2\r\nexpect: 100-continue\r\n",
                   b"{}")
    assert calls[0] == b"HTTP/1.1 100 Continue\r\n\r\n" and len(calls) == 2
    assert calls[1].endswith(b"\r\n\r\n{}")
    calls, closed = ask("GET", "/fails")  # the head is sent before the connection closes
    assert len(calls) == 1 and calls[0].endswith(b"content-length: 2\r\n\r\n") and closed
