"""The request head read once for the transport limits and the access gate, in process:
the bearer token parsed and hashed once (the limits' client key is the gate's lookup key),
the same answers with or without the limits in front, revocation still seen within the
reload interval, and the body timer's 408 (and an outside cancellation left alone).
The same layers on a real server against hostile clients: test_access.py and
test_transport_limits.py."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from roadpubsub.service import access
from roadpubsub.service.access import (
    ADMIN,
    HEAD_FIELDS,
    PRINCIPAL,
    AccessGate,
    TokenStore,
    bearer_of,
    hash_token,
    read_head,
)
from roadpubsub.service.limits import TransportLimits, TransportLimitsMiddleware, client_key

_AUTH = HEAD_FIELDS[b"authorization"]


def _scope(auth: bytes | None = None, *, method: str = "PUT",
           path: str = "/subscriptions/5/location", **extra: Any) -> dict[str, Any]:
    headers = [(b"host", b"127.0.0.1:8765")]
    if auth is not None:
        headers.append((b"authorization", auth))
    headers += [(b"content-type", b"application/json"), (b"content-length", b"2")]
    return {"type": "http", "method": method, "path": path, "raw_path": path.encode(),
            "query_string": b"", "headers": headers, "client": ("127.0.0.1", 40000),
            **extra}


class _Inner:
    """The routes' stand-in: the gate, then an answer naming the principal."""

    def __init__(self, gate: AccessGate) -> None:
        self.gate = gate

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if not await self.gate.admit(scope, receive, send):
            return
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body",
                    "body": scope[PRINCIPAL].token_id.encode()})


async def _call(app: Any, scope: dict[str, Any]) -> tuple[int, bytes]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent[0]["status"], sent[1]["body"]


def test_the_head_and_the_bearer_token() -> None:
    for value in (b"Bearer tok", b"bearer   tok", b"  BEARER tok  "):
        assert bearer_of(value) == b"tok", value
    for value in (b"Bearertok", b"Bearer", b"Bearer   ", b"Basic tok", b"", b"Bearer\ttok",
                  None):
        assert bearer_of(value) is None, value
    head = read_head([(b"authorization", b"Basic x"), (b"Origin", b"http://evil"),
                      (b"authorization", b"Bearer tok"), (b"host", b"h")])
    assert head[_AUTH] == b"Bearer tok"  # the last value, as every layer reads it
    assert head[HEAD_FIELDS[b"host"]] == b"h" and head[HEAD_FIELDS[b"origin"]] is None
    assert head[-2:] == [b"tok", hash_token(b"tok")]
    assert read_head([(b"authorization", b"Basic x")])[-2:] == [None, None]


def test_the_client_key_is_the_token_hash() -> None:
    key = client_key(_scope(b"Bearer rps_secret"))
    assert key == hash_token(b"rps_secret") == client_key(_scope(b"bearer  rps_secret"))
    assert key != client_key(_scope(b"Bearer rps_other"))
    other = client_key(_scope(b"Basic rps_secret"))  # hashed too: no secret kept
    assert isinstance(other, str) and "rps_secret" not in other
    assert client_key(_scope()) == "a:127.0.0.1"


@pytest.mark.parametrize("limits", [True, False], ids=["behind-limits", "gate-alone"])
def test_one_hash_per_request_and_revocation(tmp_path: Path, limits: bool,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    admin_id, admin = TokenStore(tmp_path).create(ADMIN)
    other_id, other = TokenStore(tmp_path).create(ADMIN)
    store = TokenStore(tmp_path)  # the service's, as it runs
    app: Any = _Inner(AccessGate(store))
    if limits:
        app = TransportLimitsMiddleware(app, TransportLimits())
    hashed: list[bytes] = []

    def counting(token: str | bytes) -> bytes:
        hashed.append(token if isinstance(token, bytes) else token.encode())
        return hash_token(token)

    monkeypatch.setattr(access, "hash_token", counting)
    for token, token_id in ((admin, admin_id), (other, other_id)):
        hashed.clear()
        assert asyncio.run(_call(app, _scope(b"Bearer " + token.encode()))) == (
            200, token_id.encode())
        assert hashed == [token.encode()]  # read once, hashed once, looked up by it
    assert asyncio.run(_call(app, _scope(b"Bearer rps_nope")))[0] == 401
    assert asyncio.run(_call(app, _scope()))[0] == 401
    assert asyncio.run(_call(app, _scope(b"Basic " + admin.encode())))[0] == 401

    TokenStore(tmp_path).revoke(admin_id)  # another process: the CLI
    monkeypatch.setattr(access, "RELOAD_SECONDS", 0.0)
    time.sleep(0.01)
    assert asyncio.run(_call(app, _scope(b"Bearer " + admin.encode())))[0] == 401
    assert asyncio.run(_call(app, _scope(b"Bearer " + other.encode())))[0] == 200


def test_the_body_timer(tmp_path: Path) -> None:
    gate = AccessGate(TokenStore(tmp_path))  # no token: open
    app = TransportLimitsMiddleware(_Inner(gate), TransportLimits(body_timeout_s=0.2))
    sent: list[dict[str, Any]] = []

    async def never() -> dict[str, Any]:
        await asyncio.Event().wait()
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def timed_out() -> float:
        t0 = time.monotonic()
        await app(_scope(), never, send)
        return time.monotonic() - t0

    took = asyncio.run(timed_out())
    assert sent[0]["status"] == 408 and 0.15 < took < 5
    assert b"did not arrive within 0.2 s" in sent[1]["body"]

    async def cancelled_from_outside() -> None:
        task = asyncio.ensure_future(app(_scope(), never, send))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.3)  # past the timeout: nothing more is sent

    sent.clear()
    asyncio.run(cancelled_from_outside())
    assert sent == []

    async def whole() -> None:  # a body that came whole: answered, the timer gone
        assert await _call(app, _scope()) == (200, b"")
        await asyncio.sleep(0.3)

    asyncio.run(whole())
