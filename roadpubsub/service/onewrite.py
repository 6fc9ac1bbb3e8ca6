"""uvicorn's httptools protocol with the hot routes' answers written in one socket write.

uvicorn writes an answer's status line and headers when the app sends
``http.response.start`` and the body when it sends ``http.response.body``: two writes,
each a ``send`` system call made with the GIL held that wakes the client (py-spy: about a
tenth of the GIL's time under the mixed single-event load). A start message carrying
:data:`HOLD` (the hot routes', whose body follows at once) is held back here and passed
to uvicorn together with the body while the cycle's transport collects both writes; the
joined bytes then go out in one write. uvicorn still checks the headers, the length and
keep-alive, and finishes the response as usual; every other message (Starlette's routes,
WebSocket upgrades, errors) goes through untouched. Without this protocol (another server,
Starlette's test client) the extra key is ignored and the answer is the same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["HOLD", "one_write_protocol"]

HOLD = "roadpubsub.one_write"


class _Collector:
    """Stands in for the transport while uvicorn writes one answer: writes are gathered,
    anything else (closing, flow control, extra info) reaches the real transport after
    what was gathered is written."""

    __slots__ = ("parts", "real")

    def __init__(self, real: Any) -> None:
        self.real = real
        self.parts: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.parts.append(data)

    def flush(self) -> None:
        if self.parts:
            data = self.parts[0] if len(self.parts) == 1 else b"".join(self.parts)
            self.parts.clear()
            self.real.write(data)

    def close(self) -> None:
        self.flush()
        self.real.close()

    def __getattr__(self, name: str) -> Any:
        self.flush()
        return getattr(self.real, name)


def _one_write_send(cycle: Any) -> Callable[[dict[str, Any]], Any]:
    send = cycle.send  # uvicorn's bound method
    held: list[dict[str, Any]] = []

    async def one_write_send(message: dict[str, Any]) -> None:
        if held:
            start = held.pop()
            real = cycle.transport
            collector = _Collector(real)
            cycle.transport = collector
            try:
                await send(start)
                await send(message)
            finally:
                cycle.transport = real
                collector.flush()
            return
        if message["type"] == "http.response.start" and message.get(HOLD):
            held.append(message)
            return
        await send(message)

    return one_write_send


def one_write_protocol() -> type | None:
    """uvicorn's httptools protocol class with held answers written once, or None when
    httptools (or the uvicorn internals this relies on) is not there."""
    try:
        from uvicorn.protocols.http.httptools_impl import (
            HttpToolsProtocol,
            RequestResponseCycle,
        )
    except ImportError:
        return None
    if not hasattr(RequestResponseCycle, "send"):
        return None

    class OneWriteProtocol(HttpToolsProtocol):  # type: ignore[misc]
        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            cycle = getattr(self, "cycle", None)
            # an upgrade returns before a cycle is made: the last one is already wrapped
            if (cycle is not None and "send" not in vars(cycle)
                    and hasattr(cycle, "transport")):
                cycle.send = _one_write_send(cycle)

    return OneWriteProtocol
