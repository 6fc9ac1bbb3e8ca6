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


def _cycle_class(base: Any) -> type:
    class OneWriteCycle(base):  # type: ignore[misc]
        """uvicorn's request cycle; a start message marked :data:`HOLD` waits for its
        body (a class of its own, set on the cycle: no closure per request)."""

        _held: dict[str, Any] | None = None

        async def send(self, message: dict[str, Any]) -> None:
            held = self._held
            if held is not None and message["type"] == "http.response.body":
                self._held = None
                real: Any = self.transport  # type: ignore[has-type]
                collector = _Collector(real)
                self.transport = collector
                try:
                    await base.send(self, held)
                    await base.send(self, message)
                finally:
                    self.transport = real
                    collector.flush()
                return
            if message.get(HOLD) and message["type"] == "http.response.start":
                self._held = message
                return
            # a start after a held one (the app failed in between: uvicorn's 500) replaces
            # it, as nothing of the held answer has been written
            self._held = None
            await base.send(self, message)

    return OneWriteCycle


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
    cycle_class = _cycle_class(RequestResponseCycle)

    class OneWriteProtocol(HttpToolsProtocol):  # type: ignore[misc]
        one_write_cycle = cycle_class

        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            cycle = self.cycle
            # an upgrade returns before a cycle is made: the last one is already swapped
            if cycle is not None and type(cycle) is RequestResponseCycle:
                cycle.__class__ = cycle_class

    return OneWriteProtocol
