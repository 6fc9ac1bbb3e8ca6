"""The hot routes' answers in one socket write (roadpubsub/service/onewrite.py), on
uvicorn's own request cycle with a transport that records its calls."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from roadpubsub.service.onewrite import HOLD, one_write_protocol

httptools_impl = pytest.importorskip("uvicorn.protocols.http.httptools_impl")
flow_control = pytest.importorskip("uvicorn.protocols.http.flow_control")


class _Transport:
    def __init__(self) -> None:
        self.calls: list[tuple[str, bytes]] = []

    def write(self, data: bytes) -> None:
        self.calls.append(("write", bytes(data)))

    def close(self) -> None:
        self.calls.append(("close", b""))

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _cycle(transport: _Transport, *, keep_alive: bool = True, held: bool = True) -> Any:
    """uvicorn's request cycle, of the protocol's class when ``held``."""
    log = logging.getLogger("test-onewrite")
    scope = {"type": "http", "method": "POST", "path": "/messages", "http_version": "1.1"}
    cycle = httptools_impl.RequestResponseCycle(
        scope=scope, transport=transport, flow=flow_control.FlowControl(transport),
        logger=log, access_logger=log, access_log=False, default_headers=[],
        message_event=asyncio.Event(), expect_100_continue=False, keep_alive=keep_alive,
        on_response=lambda: None)
    if held:
        proto = one_write_protocol()
        assert proto is not None
        cycle.__class__ = proto.one_write_cycle
    return cycle


def _answer(body: bytes, *, hold: bool) -> list[dict[str, Any]]:
    start: dict[str, Any] = {"type": "http.response.start", "status": 200,
                             "headers": [(b"content-length", str(len(body)).encode()),
                                         (b"content-type", b"application/json")]}
    if hold:
        start[HOLD] = True
    return [start, {"type": "http.response.body", "body": body}]


async def _send_all(cycle: Any, messages: list[dict[str, Any]]) -> None:
    for m in messages:
        await cycle.send(m)


@pytest.mark.parametrize("keep_alive", [True, False])
def test_held_answer_is_one_write_of_the_same_bytes(keep_alive: bool) -> None:
    body = b'{"deliveries":[]}'
    plain, held = _Transport(), _Transport()
    plain_cycle = _cycle(plain, keep_alive=keep_alive)  # unmarked: passed through
    held_cycle = _cycle(held, keep_alive=keep_alive)
    asyncio.run(_send_all(plain_cycle, _answer(body, hold=False)))
    asyncio.run(_send_all(held_cycle, _answer(body, hold=True)))
    plain_writes = [d for k, d in plain.calls if k == "write"]
    assert len(plain_writes) == 2  # uvicorn alone: headers, then body
    assert held.calls[0] == ("write", b"".join(plain_writes))
    assert held.calls[1:] == ([] if keep_alive else [("close", b"")])
    assert held_cycle.response_complete and held_cycle.transport is held


def test_a_body_longer_than_its_length_is_still_refused() -> None:
    held = _Transport()
    start, body = _answer(b"{}", hold=True)
    body["body"] = b"{}{}"
    with pytest.raises(RuntimeError, match="longer than Content-Length"):
        asyncio.run(_send_all(_cycle(held), [start, body]))


def test_a_start_after_a_held_one_replaces_it() -> None:
    held = _Transport()
    start, _ = _answer(b"{}", hold=True)
    error = {"type": "http.response.start", "status": 500,
             "headers": [(b"content-length", b"5")]}
    asyncio.run(_send_all(_cycle(held), [start, error,
                                         {"type": "http.response.body", "body": b"error"}]))
    writes = [d for k, d in held.calls if k == "write"]
    assert writes[0].startswith(b"HTTP/1.1 500 ") and writes[-1] == b"error"


def test_protocol_class_is_uvicorns() -> None:
    proto = one_write_protocol()
    assert proto is not None and issubclass(proto, httptools_impl.HttpToolsProtocol)
