"""A webhook receiver for the tests: a real loopback HTTP server a test starts, stops and
scripts (500, 429 with ``Retry-After``, slow answers). It verifies every signature with the
documented recipe and deduplicates on ``RoadPubSub-Delivery-Id`` as a real receiver would.
"""

from __future__ import annotations

import os
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
from ports import free_port

from roadpubsub.service.webhooks import verify_signature

__all__ = ["SECRET", "Receiver", "secret_file", "wait_for"]

SECRET = b"test-secret-0123456789"


def wait_for(condition: Callable[[], Any], timeout: float, what: str, *,
             every: float = 0.02) -> None:
    """Poll ``condition`` every ``every`` seconds; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every)


def secret_file(folder: Path) -> Path:
    """:data:`SECRET` in a 0600 file, as ``--webhook-secret-file`` wants it."""
    path = folder / "hook-secret"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, SECRET)
    os.close(fd)
    return path


class Receiver:
    """A loopback HTTP receiver; ``script(n)`` -> (status, headers, delay) for request n."""

    def __init__(self, port: int | None = None, *,
                 script: Callable[[int], tuple[int, dict[str, str], float]] | None = None,
                 tls: ssl.SSLContext | None = None) -> None:
        self.port = port or free_port()
        self.tls = tls
        self.script = script or (lambda n: (200, {}, 0.0))
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []  # every request, including refused ones
        self.accepted: list[int] = []  # seqs of answered-200 requests, in arrival order
        self.bad_signatures = 0
        self.server: ThreadingHTTPServer | None = None

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                ok = verify_signature(SECRET, self.headers.get("RoadPubSub-Timestamp", ""),
                                      body, self.headers.get("RoadPubSub-Signature", ""))
                ids = [int(x) for x in self.headers["RoadPubSub-Delivery-Id"].split(",")]
                with receiver.lock:
                    n = len(receiver.requests)
                    receiver.requests.append({"ids": ids, "at": time.monotonic(),
                                              "host": self.headers["Host"], "body": body})
                    receiver.bad_signatures += not ok
                status, headers, delay = receiver.script(n)
                time.sleep(delay)
                if status == 200:
                    assert [d["seq"] for d in orjson.loads(body)["deliveries"]] == ids
                    with receiver.lock:
                        receiver.accepted += ids
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        if self.tls is not None:
            self.server.socket = self.tls.wrap_socket(self.server.socket, server_side=True)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def deduplicated(self) -> list[int]:
        """What a receiver deduplicating on the delivery id processes, in order."""
        seen: set[int] = set()
        out = []
        with self.lock:
            for seq in self.accepted:
                if seq not in seen:
                    seen.add(seq)
                    out.append(seq)
        return out
