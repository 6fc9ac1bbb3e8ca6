"""Loopback ports for the servers the tests start (uvicorn, Mosquitto, a Spark master).

A port probed with ``bind(("127.0.0.1", 0))`` comes from the kernel's ephemeral range, the
same range that outgoing connections draw their source ports from. Between the probe and the
server's own bind, any connection on the machine (the service's MQTT client, an HTTP client
polling another server) may take that port, and the server then fails with "address already
in use" (seen once in CI). Ports are therefore drawn below the ephemeral range, where the
kernel never hands out source ports.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_LOWEST = 10_000
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_draw = random.Random()


def _ephemeral_low() -> int:
    try:
        return int(_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default; other systems fall back to a bind-0 probe below


def _is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback TCP port free now, outside the ephemeral range when there is room."""
    low = _ephemeral_low()
    if low - _LOWEST >= 1000:
        for _ in range(500):
            port = _draw.randrange(_LOWEST, low)
            if _is_free(port):
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
