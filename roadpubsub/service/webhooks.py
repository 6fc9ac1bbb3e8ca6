"""Webhooks: URL checks, the signing secret and the sender that drains the outbox.

Request sent to an endpoint (one POST per batch of at most ``webhook_batch_max`` deliveries):

- body: UTF-8 JSON ``{"deliveries": [{"seq", "message_id", "subscription_id", "distance",
  "score"}, ...]}``, the delivery objects of every other answer and push (integer ids), in
  ``seq`` order (a replayed dead letter comes again with its old ``seq``);
- ``RoadPubSub-Delivery-Id: 17,18,19``: the ``seq`` of each delivery of the body, in order,
  comma separated. A receiver deduplicates on each ``seq``: it processes a delivery whose
  ``seq`` it has not recorded yet and skips the others (a batch can arrive again after a
  timeout or a crash of the service: delivery is at least once);
- ``RoadPubSub-Timestamp: <Unix seconds, integer>`` and
  ``RoadPubSub-Signature: sha256=<hex>`` where the hex is
  ``HMAC-SHA256(secret, timestamp.encode() + b"." + raw_body)``; a receiver recomputes it with
  :func:`hmac.compare_digest` and refuses a timestamp older than a few minutes (replay);
- the ``Host`` header (and the TLS server name) of the URL, while the connection goes to the
  address checked at send time (a DNS answer that changed to a private address after the
  subscription was accepted is refused then: DNS rebinding).

An answer 2xx acknowledges the batch. Connection errors, timeouts, 408, 429 and 5xx are
retried: after attempt ``k`` the sender waits ``uniform(0, min(cap, base * 2**(k-1)))``
seconds (exponential backoff with full jitter), at least the ``Retry-After`` of a 429/503
(seconds or an HTTP date, capped at ``webhook_backoff_cap_s``). After
``webhook_max_attempts`` attempts, or when the oldest delivery of the batch has been queued
longer than ``webhook_max_age_s``, the batch goes to the dead-letter record. Other answers
(3xx: redirects are not followed; 4xx) and a URL refused at send time are dead at once.

Concurrency: one thread runs its own asyncio loop; each endpoint (its URL) has its own task
with one request in flight, so one endpoint's deliveries arrive in seq order and a dead or
slow endpoint only waits on itself. Outbox writes run in the loop's default executor.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import os
import random
import secrets
import socket
import ssl
import stat
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson

from roadpubsub.roadnet.errors import InputError, RoadPubSubError
from roadpubsub.roadnet.settings import DEFAULTS, Settings
from roadpubsub.service.outbox import Outbox, OutboxEntry, Queued

__all__ = [
    "WebhookSecretError",
    "WebhookSender",
    "WebhookService",
    "WebhookURLError",
    "check_webhook_url",
    "load_webhook_secret",
    "sign_body",
    "verify_signature",
]

Resolver = Callable[[str, int], Sequence[str]]
_METADATA = {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
_PRIVATE_NETS = [ipaddress.ip_network(n) for n in
                 ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")]
_RETRY_STATUSES = {408, 429, 500, 502, 503, 504}


class WebhookURLError(InputError):
    """A webhook URL that is refused (the message names it and the reason)."""


class WebhookSecretError(RoadPubSubError, ValueError):
    """A webhook secret file that is unsafe or empty."""


def _system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def _refusal(addr: ipaddress.IPv4Address | ipaddress.IPv6Address, allow_private: bool) -> str:
    """Why ``addr`` is refused, or "" when it is allowed."""
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    if addr in _METADATA:
        return "the cloud metadata address"
    if addr.is_link_local:
        return "a link-local address"
    if addr.is_multicast:
        return "a multicast address"
    if addr.is_unspecified:
        return "the unspecified address"
    if addr.is_loopback:
        return "" if allow_private else "a loopback address (allowed with --webhook-allow-private)"
    if any(addr in net for net in _PRIVATE_NETS):
        return "" if allow_private else "a private address (allowed with --webhook-allow-private)"
    if addr.is_reserved or addr.is_private or not addr.is_global:
        # documentation, benchmarking, shared (CGNAT) and future-use ranges among others
        return "a reserved address"
    return ""


@dataclass(frozen=True, slots=True)
class _Target:
    """Where a URL's POST goes: the checked address, and what the request names."""

    scheme: str
    host: str
    port: int
    address: str
    path: str


def _resolve(url: str, *, allow_private: bool, resolver: Resolver | None) -> _Target:
    """Parse ``url``, resolve its host and check every address; the first one is used."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        msg = f"webhook URL {url!r} is refused: {exc}"
        raise WebhookURLError(msg) from exc
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        msg = f"webhook URL {url!r} is refused: scheme {parts.scheme!r} is not http or https"
        raise WebhookURLError(msg)
    if parts.username is not None or parts.password is not None:
        msg = f"webhook URL {url!r} is refused: it carries a user name or password"
        raise WebhookURLError(msg)
    host = parts.hostname
    if not host:
        msg = f"webhook URL {url!r} is refused: it has no host"
        raise WebhookURLError(msg)
    port = port if port is not None else (443 if scheme == "https" else 80)
    try:
        addresses = list((resolver or _system_resolver)(host, port))
    except OSError as exc:
        msg = f"webhook URL {url!r} is refused: host {host!r} does not resolve ({exc})"
        raise WebhookURLError(msg) from exc
    if not addresses:
        msg = f"webhook URL {url!r} is refused: host {host!r} does not resolve"
        raise WebhookURLError(msg)
    for text in addresses:
        try:
            addr = ipaddress.ip_address(text.split("%", 1)[0])
        except ValueError as exc:
            msg = f"webhook URL {url!r} is refused: {host!r} resolved to {text!r}"
            raise WebhookURLError(msg) from exc
        reason = _refusal(addr, allow_private)
        if reason:
            msg = f"webhook URL {url!r} is refused: {host!r} resolves to {addr}, {reason}"
            raise WebhookURLError(msg)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return _Target(scheme=scheme, host=host, port=port, address=addresses[0], path=path)


def check_webhook_url(url: str, *, allow_private: bool,
                      resolver: Resolver | None = None) -> str:
    """Check a webhook URL when a subscription sets it; returns it unchanged.

    Parameters
    ----------
    url
        The URL the subscriber gave.
    allow_private
        Whether loopback and private addresses (10/8, 172.16/12, 192.168/16, fc00::/7) are
        allowed (``--webhook-allow-private``). Link-local (169.254/16 with the cloud metadata
        address, fe80::/10), multicast, unspecified and reserved addresses are always refused.
    resolver
        ``(host, port) -> addresses``; the system's ``getaddrinfo`` by default (tests stub it).

    Raises
    ------
    WebhookURLError
        Not http(s), a user name or password in it, no host, a host that does not resolve,
        or one resolved address refused (every address is checked).
    """
    _resolve(url, allow_private=allow_private, resolver=resolver)
    return url


def load_webhook_secret(path: Path) -> bytes:
    """Read the webhook signing secret from ``path``, creating it (mode 0600) when absent.

    The secret is the file's bytes with surrounding whitespace stripped.

    Raises
    ------
    WebhookSecretError
        The file is readable or writable by others than its owner, or empty.
    """
    path = Path(path)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, secrets.token_hex(32).encode() + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        msg = (f"webhook secret file {path} is accessible to other users "
               f"(mode {stat.S_IMODE(mode):o}); chmod 600 it")
        raise WebhookSecretError(msg)
    secret = path.read_bytes().strip()
    if not secret:
        msg = f"webhook secret file {path} is empty"
        raise WebhookSecretError(msg)
    return secret


def sign_body(secret: bytes, timestamp: int, body: bytes) -> str:
    """The ``RoadPubSub-Signature`` value: ``sha256=`` + hex HMAC of ``b"<ts>." + body``."""
    digest = hmac.new(secret, str(timestamp).encode() + b"." + body, hashlib.sha256)
    return "sha256=" + digest.hexdigest()


def verify_signature(secret: bytes, timestamp: str, body: bytes, signature: str, *,
                     max_age_s: float = 300.0, now: float | None = None) -> bool:
    """The receiver's check: signature matches and the timestamp is recent (the recipe)."""
    try:
        ts = int(timestamp)
    except ValueError:
        return False
    if abs((time.time() if now is None else now) - ts) > max_age_s:
        return False
    return hmac.compare_digest(sign_body(secret, ts, body), signature)


class _SendError(Exception):
    """A failed POST: whether to retry, and the Retry-After seconds if any."""

    def __init__(self, reason: str, *, retry: bool, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry = retry
        self.retry_after = retry_after


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


@dataclass(slots=True)
class _Stats:
    sent: int = 0
    retried: int = 0
    dead: int = 0
    last_error: str = ""
    wake: asyncio.Event = field(default_factory=asyncio.Event)


class WebhookSender:
    """Drains an :class:`Outbox`: POSTs batches per endpoint from its own thread and loop.

    Parameters
    ----------
    outbox
        The durable queue; the sender acknowledges and dead-letters through it.
    secret
        The signing secret (:func:`load_webhook_secret`).
    settings
        Batch size, timeout, attempts, age limit and backoff (the ``webhook_*`` fields).
    allow_private
        Passed to the send-time address check (``--webhook-allow-private``).
    resolver
        ``(host, port) -> addresses`` for the send-time check; the system's by default.
    ssl_context
        TLS context for https endpoints; the system's default trust by default.
    """

    def __init__(self, outbox: Outbox, *, secret: bytes, settings: Settings = DEFAULTS,
                 allow_private: bool = DEFAULTS.webhook_allow_private,
                 resolver: Resolver | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.outbox = outbox
        self._secret = secret
        self._settings = settings
        self._allow_private = allow_private
        self._resolver = resolver
        self._ssl = ssl_context
        self._stats: dict[str, _Stats] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._random = random.Random()

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start the sender thread; pending deliveries of the outbox are sent at once."""
        loop = asyncio.new_event_loop()
        self._loop = loop
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()

        self._thread = threading.Thread(target=run, name="webhook-sender", daemon=True)
        self._thread.start()
        ready.wait()
        self.outbox.on_append = self._notify
        self._notify(set(self.outbox.endpoints()))

    def stop(self, timeout: float = 10.0) -> None:
        """Stop sending (requests in flight are abandoned; they stay queued) and join."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self.outbox.on_append = None

        async def cancel_all() -> None:
            tasks = list(self._tasks.values())
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await loop.shutdown_default_executor()  # outbox writes under way complete

        asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(timeout)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        loop.close()
        self._loop = self._thread = None

    def _notify(self, urls: set[str]) -> None:
        loop = self._loop
        if loop is not None and urls:
            loop.call_soon_threadsafe(self._wake, urls)

    def _wake(self, urls: set[str]) -> None:
        for url in urls:
            self._stat(url).wake.set()
            task = self._tasks.get(url)
            if task is None or task.done():
                self._tasks[url] = asyncio.get_running_loop().create_task(self._drain(url))

    def _stat(self, url: str) -> _Stats:
        stats = self._stats.get(url)
        if stats is None:
            stats = self._stats[url] = _Stats()
        return stats

    # --- API for the service -----------------------------------------------------------------
    def metrics(self) -> dict[str, dict[str, Any]]:
        """Per endpoint: ``queued``, ``sent``, ``retried``, ``dead``, ``oldest_queued_age_s``.

        Also ``last_error``: why the last attempt failed ("" if none yet).

        ``sent``, ``retried`` and ``dead`` count deliveries since this sender started;
        ``queued`` counts the pending ones in the outbox.
        """
        now = time.time()
        out: dict[str, dict[str, Any]] = {}
        for url in sorted(set(self._stats) | set(self.outbox.endpoints())):
            stats = self._stats.get(url) or _Stats()
            oldest = self.outbox.oldest_queued_at(url)
            out[url] = {"queued": self.outbox.pending(url), "sent": stats.sent,
                        "retried": stats.retried, "dead": stats.dead,
                        "last_error": stats.last_error,
                        "oldest_queued_age_s": 0.0 if oldest is None else max(0.0, now - oldest)}
        return out

    def dead_letters(self) -> list[dict[str, Any]]:
        """The dead-letter record (see :meth:`Outbox.dead_letters`)."""
        return self.outbox.dead_letters()

    def replay(self, ids: Sequence[int]) -> int:
        """Re-queue dead letters by id; they are sent again (see :meth:`Outbox.replay`)."""
        return self.outbox.replay(ids)

    # --- sending -----------------------------------------------------------------------------
    async def _drain(self, url: str) -> None:
        try:
            await self._drain_loop(url)
        except OSError as exc:
            # The outbox could not be written: this endpoint stops; the failure is reported
            # in ``metrics()`` and what was not acknowledged stays queued for the next start.
            self._stat(url).last_error = f"outbox write failed: {exc}"
            raise

    async def _drain_loop(self, url: str) -> None:
        stats = self._stat(url)
        loop = asyncio.get_running_loop()
        s = self._settings
        attempt = 0
        while True:
            stats.wake.clear()
            batch = await loop.run_in_executor(None, self.outbox.peek, url, s.webhook_batch_max)
            if not batch:
                await stats.wake.wait()
                continue
            try:
                await self._post(url, batch)
            except _SendError as failure:
                stats.last_error = failure.reason
                attempt += 1
                too_old = time.time() - batch[0].queued_at > s.webhook_max_age_s
                if not failure.retry or attempt >= s.webhook_max_attempts or too_old:
                    reason = f"{failure.reason} (after {attempt} attempt(s))"
                    await loop.run_in_executor(None, self.outbox.dead, url, batch, reason)
                    stats.dead += len(batch)
                    attempt = 0
                    continue
                stats.retried += len(batch)
                ceiling = min(s.webhook_backoff_cap_s,
                              s.webhook_backoff_base_s * 2 ** (attempt - 1))
                delay = self._random.uniform(0.0, ceiling)
                if failure.retry_after is not None:
                    delay = max(delay, min(failure.retry_after, s.webhook_backoff_cap_s))
                await asyncio.sleep(delay)
                continue
            attempt = 0
            await loop.run_in_executor(None, self.outbox.ack, url, batch[-1].pos)
            stats.sent += len(batch)

    def _request(self, target: _Target, batch: list[Queued]) -> bytes:
        body = orjson.dumps({"deliveries": [q.entry.delivery() for q in batch]})
        timestamp = int(time.time())
        default_port = 443 if target.scheme == "https" else 80
        host = f"[{target.host}]" if ":" in target.host else target.host
        if target.port != default_port:
            host += f":{target.port}"
        head = (f"POST {target.path} HTTP/1.1\r\nHost: {host}\r\n"
                "Content-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n"
                "User-Agent: roadpubsub-webhooks\r\n"
                f"RoadPubSub-Delivery-Id: {','.join(str(q.entry.seq) for q in batch)}\r\n"
                f"RoadPubSub-Timestamp: {timestamp}\r\n"
                f"RoadPubSub-Signature: {sign_body(self._secret, timestamp, body)}\r\n\r\n")
        return head.encode("latin-1") + body

    async def _post(self, url: str, batch: list[Queued]) -> None:
        loop = asyncio.get_running_loop()
        try:
            # Resolved and checked again now; the connection goes to that checked address.
            target = await loop.run_in_executor(
                None, lambda: _resolve(url, allow_private=self._allow_private,
                                       resolver=self._resolver))
        except WebhookURLError as exc:
            raise _SendError(str(exc), retry=False) from exc
        request = self._request(target, batch)
        tls = None
        if target.scheme == "https":
            tls = self._ssl or ssl.create_default_context()
        writer = None
        try:
            async with asyncio.timeout(self._settings.webhook_timeout_s):
                reader, writer = await asyncio.open_connection(
                    target.address, target.port, ssl=tls,
                    server_hostname=target.host if tls is not None else None)
                writer.write(request)
                await writer.drain()
                status_line = await reader.readline()
                headers: dict[str, str] = {}
                for _ in range(100):
                    line = await reader.readline()
                    if line in (b"\r\n", b"\n", b""):
                        break
                    name, _, value = line.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
        except TimeoutError as exc:
            raise _SendError(f"no answer within {self._settings.webhook_timeout_s} s",
                           retry=True) from exc
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            raise _SendError(f"connection failed: {exc!r}", retry=True) from exc
        finally:
            if writer is not None:
                writer.close()
        fields = status_line.decode("latin-1").split()
        if len(fields) < 2 or not fields[1].isdigit():
            raise _SendError(f"not an HTTP answer: {status_line[:80]!r}", retry=True)
        status = int(fields[1])
        if 200 <= status < 300:
            return
        retry = status in _RETRY_STATUSES or status >= 500
        raise _SendError(f"HTTP {status}", retry=retry,
                       retry_after=_retry_after(headers.get("retry-after")))


class WebhookService:
    """The service's one handle on webhooks: URL check, outbox and sender of a state folder.

    Parameters
    ----------
    state_dir
        The service's state folder; the outbox lives in ``state_dir/outbox``.
    secret_file
        ``--webhook-secret-file``; ``state_dir/webhook-secret`` (created, mode 0600) if None.
    allow_private
        ``--webhook-allow-private``.
    settings
        The ``webhook_*`` defaults.
    resolver
        ``(host, port) -> addresses``; the system's by default (tests stub it).

    Raises
    ------
    WebhookSecretError
        The secret file is unsafe or empty.
    OutboxDamagedError
        The outbox cannot be recovered (the message names the file and offset).
    """

    def __init__(self, state_dir: Path, *, secret_file: Path | None = None,
                 allow_private: bool = DEFAULTS.webhook_allow_private,
                 settings: Settings = DEFAULTS, resolver: Resolver | None = None) -> None:
        state_dir = Path(state_dir)
        secret = load_webhook_secret(secret_file or state_dir / "webhook-secret")
        self._allow_private = allow_private
        self._resolver = resolver
        self.outbox = Outbox(state_dir / "outbox", segment_bytes=settings.webhook_segment_bytes,
                             memory_per_endpoint=settings.webhook_memory_per_endpoint)
        self.sender = WebhookSender(self.outbox, secret=secret, settings=settings,
                                    allow_private=allow_private, resolver=resolver)

    def check_url(self, url: str) -> str:
        """:func:`check_webhook_url` with this service's options (call when subscribing)."""
        return check_webhook_url(url, allow_private=self._allow_private,
                                 resolver=self._resolver)

    def queue(self, entries: Sequence[OutboxEntry]) -> None:
        """Queue deliveries durably (fsynced); call before answering the publish."""
        self.outbox.append(entries)

    def start(self) -> None:
        """Start sending (what the outbox recovered is sent first)."""
        self.sender.start()

    def stop(self) -> None:
        """Stop sending and close the outbox files (pending deliveries stay queued)."""
        self.sender.stop()
        self.outbox.close()

    def metrics(self) -> dict[str, dict[str, Any]]:
        """Per endpoint counters (see :meth:`WebhookSender.metrics`)."""
        return self.sender.metrics()

    def dead_letters(self) -> list[dict[str, Any]]:
        """The dead-letter record, for ``GET /webhooks/dead``."""
        return self.outbox.dead_letters()

    def replay(self, ids: Sequence[int]) -> int:
        """Re-queue dead letters by id; returns how many were found."""
        return self.outbox.replay(ids)
