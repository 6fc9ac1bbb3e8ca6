"""A small MQTT 3.1.1 client that works on batches: what the connector and the fleet
benchmark need, and no Python per packet beyond slicing bytes.

A general client (paho) runs one interpreted call chain per packet each way: at 10,000
moves/s plus 18,000 deliveries/s that alone is most of a core. Here the reader thread
splits everything one ``recv`` brought into packets and hands the PUBLISH packets to one
callback as a list, the PUBACKs to another; the caller encodes many packets and writes
them with one ``sendall``. Only QoS 0 and 1 are used (the connector subscribes with QoS 1,
so the broker never sends QoS 2).

The session is persistent when ``clean=False``: after a broken connection the client
reconnects with the same id, subscribes again and calls ``on_connect`` (the connector
sends again the deliveries the broker had not acknowledged, with the DUP flag), while the
broker sends again the events the client had not acknowledged.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable

__all__ = ["PUBACK", "Publish", "WireClient", "puback", "publish1", "publish_packet"]

CONNECT, CONNACK, PUBLISH, PUBACK, SUBSCRIBE, SUBACK = 0x10, 0x20, 0x30, 0x40, 0x82, 0x90
PINGREQ, PINGRESP, DISCONNECT = 0xC0, 0xD0, 0xE0

#: One received PUBLISH: (topic, payload, packet id (0 for QoS 0), QoS).
Publish = tuple[bytes, bytes, int, int]

_CONNACK_REASONS = {1: "unacceptable protocol version", 2: "identifier rejected",
                    3: "server unavailable", 4: "bad user name or password",
                    5: "not authorized"}


def _length(n: int) -> bytes:
    """MQTT's variable-length remaining-length field."""
    out = bytearray()
    while True:
        n, digit = divmod(n, 128)
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _text(b: bytes) -> bytes:
    return len(b).to_bytes(2, "big") + b


def publish_packet(topic: bytes, payload: bytes, pid: int, *, qos: int = 1,
                   dup: bool = False) -> bytes:
    """One PUBLISH packet (``pid`` is ignored with QoS 0)."""
    head = _text(topic) + (pid.to_bytes(2, "big") if qos else b"")
    return (bytes((PUBLISH | (qos << 1) | (8 if dup else 0),)) + _length(len(head) + len(payload))
            + head + payload)


def publish1(topic: bytes, payload: bytes, pid: int) -> bytes:
    """:func:`publish_packet` with QoS 1, not a duplicate (the deliveries' hot path)."""
    n = len(topic) + len(payload) + 4
    if n < 0x80:
        size = bytes((n,))
    elif n < 0x4000:
        size = bytes(((n & 0x7F) | 0x80, n >> 7))
    else:
        size = _length(n)
    return b"\x32%b%b%b%b%b" % (size, len(topic).to_bytes(2, "big"), topic,
                                pid.to_bytes(2, "big"), payload)


def puback(pid: int) -> bytes:
    """One PUBACK packet."""
    return b"\x40\x02" + pid.to_bytes(2, "big")


def connect_packet(client_id: str, *, clean: bool, keepalive: int, username: str | None,
                   password: str | None) -> bytes:
    flags = 0x02 if clean else 0
    payload = _text(client_id.encode())
    if username is not None:
        flags |= 0x80
        payload += _text(username.encode())
        if password is not None:
            flags |= 0x40
            payload += _text(password.encode())
    var = _text(b"MQTT") + bytes((4, flags)) + keepalive.to_bytes(2, "big")
    return bytes((CONNECT,)) + _length(len(var) + len(payload)) + var + payload


def split_packets(buf: bytearray) -> tuple[list[tuple[int, bytes]], int]:
    """The complete packets at the start of ``buf`` as (first byte, body), and the bytes
    they take (a packet cut by the end of ``buf`` waits for the next read)."""
    out: list[tuple[int, bytes]] = []
    pos, end = 0, len(buf)
    while pos + 2 <= end:
        first = buf[pos]
        n, shift, k = 0, 0, pos + 1
        while True:
            if k >= end:
                return out, pos
            b = buf[k]
            n |= (b & 0x7F) << shift
            k += 1
            if not b & 0x80:
                break
            shift += 7
            if shift > 21:
                msg = "malformed MQTT remaining length"
                raise ConnectionError(msg)
        if k + n > end:
            break
        out.append((first, bytes(buf[k:k + n])))
        pos = k + n
    return out, pos


class WireClient:
    """One MQTT connection (see the module docstring).

    Parameters
    ----------
    host, port
        The broker.
    client_id
        The session's id.
    clean
        False: a persistent session (reconnects resume it).
    username, password
        Credentials (None: anonymous).
    tls_ca
        A CA certificate file: TLS, checking the broker's certificate.
    keepalive
        Seconds; a PINGREQ goes every half of it.
    on_publish
        Called in the reader thread with the PUBLISH packets of one read, in order.
    on_puback
        Called in the reader thread with the packet ids of the PUBACKs of one read.
    on_connect
        Called after each reconnection (not the first connection) and resubscription.
    """

    def __init__(self, host: str, port: int, *, client_id: str, clean: bool = True,
                 username: str | None = None, password: str | None = None,
                 tls_ca: str | None = None, keepalive: int = 30,
                 on_publish: Callable[[list[Publish]], None] | None = None,
                 on_puback: Callable[[list[int]], None] | None = None,
                 on_connect: Callable[[], None] | None = None) -> None:
        self.host, self.port = host, port
        self.client_id = client_id
        self.clean = clean
        self.username, self.password = username, password
        self.tls_ca = tls_ca
        self.keepalive = keepalive
        self.on_publish = on_publish
        self.on_puback = on_puback
        self.on_connect = on_connect
        self.reconnects = 0
        self._filters: list[tuple[bytes, int]] = []
        self._sock: socket.socket | None = None
        self._wlock = threading.Lock()
        self._suback = threading.Event()
        self._closing = threading.Event()
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------------ connection
    def _open(self, timeout: float) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls_ca is not None:
            ctx = ssl.create_default_context(cafile=self.tls_ca)
            sock = ctx.wrap_socket(sock, server_hostname=self.host)
        sock.sendall(connect_packet(self.client_id, clean=self.clean,
                                    keepalive=self.keepalive, username=self.username,
                                    password=self.password))
        head = b""
        while len(head) < 4:
            chunk = sock.recv(4 - len(head))
            if not chunk:
                msg = "the broker closed the connection before its CONNACK"
                raise ConnectionError(msg)
            head += chunk
        if head[0] != CONNACK:
            msg = f"the broker answered packet type {head[0] >> 4}, not CONNACK"
            raise ConnectionError(msg)
        if head[3] != 0:
            reason = _CONNACK_REASONS.get(head[3], f"code {head[3]}")
            raise ConnectionRefusedError(reason)
        sock.settimeout(None)
        return sock

    def connect(self, timeout: float = 30.0) -> None:
        """Connect (raises OSError, or ConnectionRefusedError naming the broker's reason)
        and start the reader and keep-alive threads."""
        self._sock = self._open(timeout)
        for target, name in ((self._read_loop, "mqtt-read"), (self._ping_loop, "mqtt-ping")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def subscribe(self, filters: list[str], *, qos: int = 1, timeout: float = 30.0) -> None:
        """Subscribe to ``filters`` (kept for reconnections); waits for the SUBACK."""
        new = [(f.encode(), qos) for f in filters]
        self._filters.extend(new)
        self._suback.clear()
        self.send(self._subscribe_packet(new))
        if not self._suback.wait(timeout):
            msg = "the broker did not acknowledge the subscription"
            raise ConnectionError(msg)

    @staticmethod
    def _subscribe_packet(filters: list[tuple[bytes, int]]) -> bytes:
        body = (1).to_bytes(2, "big") + b"".join(_text(f) + bytes((q,)) for f, q in filters)
        return bytes((SUBSCRIBE,)) + _length(len(body)) + body

    def send(self, data: bytes) -> bool:
        """Write ``data`` (whole packets); False when the connection is down (the caller
        keeps what needs acknowledging, and sends it again after reconnecting)."""
        with self._wlock:
            sock = self._sock
            if sock is None:
                return False
            try:
                sock.sendall(data)
            except OSError:
                return False
        return True

    def close(self) -> None:
        """Disconnect cleanly and stop the threads."""
        self._closing.set()
        self.send(bytes((DISCONNECT, 0)))
        with self._wlock:
            sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout=5)

    # ------------------------------------------------------------------ threads
    def _ping_loop(self) -> None:
        while not self._closing.wait(self.keepalive / 2):
            self.send(bytes((PINGREQ, 0)))

    def _read_loop(self) -> None:
        while not self._closing.is_set():
            sock = self._sock
            if sock is not None:
                try:
                    self._read(sock)
                except (OSError, ConnectionError):
                    pass
                except Exception as exc:  # a callback's bug: say it, start afresh
                    # (the broker sends again what was not acknowledged)
                    print(f"roadpubsub: mqtt: {type(exc).__name__}: {exc}; reconnecting",
                          file=sys.stderr, flush=True)
            if self._closing.is_set():
                return
            self._reconnect()

    def _read(self, sock: socket.socket) -> None:
        buf = bytearray()
        while True:
            chunk = sock.recv(1 << 18)
            if not chunk:
                return
            buf += chunk
            packets, used = split_packets(buf)
            del buf[:used]
            pubs: list[Publish] = []
            acks: list[int] = []
            for first, body in packets:
                kind = first & 0xF0
                if kind == PUBLISH:
                    qos = (first >> 1) & 3
                    n = int.from_bytes(body[:2], "big")
                    if qos:
                        pubs.append((body[2:2 + n], body[4 + n:],
                                     int.from_bytes(body[2 + n:4 + n], "big"), qos))
                    else:
                        pubs.append((body[2:2 + n], body[2 + n:], 0, 0))
                elif kind == PUBACK:
                    acks.append(int.from_bytes(body[:2], "big"))
                elif kind == SUBACK:
                    if any(b == 0x80 for b in body[2:]):
                        continue  # refused filter: subscribe() times out and says so
                    self._suback.set()
            if pubs and self.on_publish is not None:
                self.on_publish(pubs)
            if acks and self.on_puback is not None:
                self.on_puback(acks)

    def _reconnect(self) -> None:
        with self._wlock:
            old, self._sock = self._sock, None
        if old is not None:
            old.close()
        delay = 0.2
        while not self._closing.is_set():
            try:
                sock = self._open(30.0)
            except OSError:
                self._closing.wait(delay)
                delay = min(delay * 2, 5.0)
                continue
            with self._wlock:
                self._sock = sock
            self.reconnects += 1
            if self._filters:
                self.send(self._subscribe_packet(self._filters))
            if self.on_connect is not None:
                self.on_connect()
            return


def wait_until(predicate: Callable[[], bool], timeout: float, step: float = 0.01) -> bool:
    """Poll ``predicate`` until true or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(step)
    return True
