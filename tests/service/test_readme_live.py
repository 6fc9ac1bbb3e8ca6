"""The README's "Run it live" Python blocks, run exactly as written against a real service.

Each ``py`` block preceded by ``<!-- tested: NAME ... -->`` in README.md is extracted and run
as its own ``python`` subprocess (reading its URL, token, secret file and port from the
environment variables the block names), against a real ``roadpubsub serve`` on loopback with
a token, the README's own subscriptions and messages:

- ``resume``: started with ``LAST_SEQ`` in the middle of subscription 1's deliveries, it
  prints every later one, in seq order, then one published while it runs (live);
- ``receiver``: the service POSTs subscription 1's webhook deliveries to it through a
  recording relay of the test; it prints each once, the service's delivery objects; the
  relay's recorded requests, sent again, are accepted as signed and refused (401) with one
  byte of the body or the timestamp changed.
"""

from __future__ import annotations

import ast
import http.client
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from ports import free_port

from roadpubsub.service.access import TokenStore

README = Path(__file__).resolve().parents[2] / "README.md"
_BLOCK = re.compile(r"<!-- tested: (\w+) [^\n]*-->\n```py\n(.*?)```", re.S)

# The README's own rows (its curl lines), subscription 1 with a webhook added here.
SUBSCRIPTIONS = [
    {"id": 1, "lon": 1.5218, "lat": 42.5063, "keywords": ["delay", "flight"], "alpha": 0.5,
     "tau": 0.3},
    {"id": 2, "lon": 1.53, "lat": 42.51, "keywords": ["bags"], "alpha": 0.9, "tau": 0.5,
     "expires_at": 2000000000}]


def _message(i: int) -> dict[str, Any]:
    return {"id": 10 + i, "lon": 1.522, "lat": 42.507,
            "keywords": ["flight", "delay", "late", "bags"]}


def readme_blocks() -> dict[str, str]:
    """The README's tested ``py`` blocks by name."""
    return dict(_BLOCK.findall(README.read_text(encoding="utf-8")))


def test_readme_marks_its_live_blocks() -> None:
    blocks = readme_blocks()
    assert set(blocks) == {"resume", "receiver", "route"}, set(blocks)  # route: test_sets_readme
    untested = README.read_text(encoding="utf-8").count("```py\n") - len(blocks)
    assert untested == 0, "a py block of README.md has no <!-- tested: --> marker"


class _Lines:
    """A block run as a subprocess; its printed deliveries collected by a thread."""

    def __init__(self, script: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1", **env})
        self.printed: list[dict[str, Any]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.printed.append(ast.literal_eval(line))

    def wait_for(self, count: int, timeout: float = 60) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while len(self.printed) < count:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                err = self.proc.stderr.read() if self.proc.poll() is not None else ""
                msg = f"{len(self.printed)} of {count} printed; exit {self.proc.poll()}: {err}"
                raise AssertionError(msg)
            time.sleep(0.05)
        return list(self.printed)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)


@pytest.fixture
def blocks(tmp_path: Path) -> Iterator[Callable[[str, dict[str, str]], _Lines]]:
    started: list[_Lines] = []

    def run(name: str, env: dict[str, str]) -> _Lines:
        script = tmp_path / f"readme_{name}.py"
        script.write_text(readme_blocks()[name], encoding="utf-8")
        started.append(_Lines(script, env))
        return started[-1]

    yield run
    for lines in started:
        lines.stop()


def _post(port: int, path: str, body: bytes, headers: dict[str, str]) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", path, body, headers)
        answer = conn.getresponse()
        answer.read()
        return answer.status
    finally:
        conn.close()


class _Relay:
    """Forwards each POST unchanged to the receiver and records it with the answer."""

    def __init__(self, target: int) -> None:
        self.seen: list[tuple[dict[str, str], bytes, int]] = []
        relay = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                headers = {k: v for k, v in self.headers.items()
                           if k.lower().startswith("roadpubsub-") or k.lower() == "content-type"}
                status = _post(target, self.path, body, headers)
                relay.seen.append((headers, body, status))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _listening(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline, f"nothing listens on {port}"
            time.sleep(0.05)


def test_readme_resume_and_receiver_blocks(serve: Any, service_dir: Path,
                                           blocks: Callable[[str, dict[str, str]], _Lines]
                                           ) -> None:
    _, token = TokenStore(service_dir).create("admin")
    auth = {"Authorization": f"Bearer {token}"}
    server = serve("--webhook-allow-private", "--webhook-batch-max", "3")
    port = free_port()
    receiver = blocks("receiver", {"SECRET_FILE": str(service_dir / "webhook-secret"),
                                   "PORT": str(port)})
    _listening(port)
    relay = _Relay(port)
    try:
        with server.client() as c:
            subs = [{**SUBSCRIPTIONS[0], "webhook": relay.url}, SUBSCRIPTIONS[1]]
            assert c.post("/subscriptions", json=subs, headers=auth).status_code == 201
            mine: list[dict[str, Any]] = []  # subscription 1's deliveries, as answered
            for i in range(8):
                answer = c.post("/messages", json=_message(i), headers=auth)
                assert answer.status_code == 200, answer.text
                mine += [d for d in answer.json()["deliveries"] if d["subscription_id"] == 1]
            assert len(mine) == 8

            # the webhook receiver: each delivery printed once, the answer's objects
            assert receiver.wait_for(len(mine)) == mine
            assert {status for *_, status in relay.seen} == {200}
            headers, body, _ = relay.seen[0]
            assert _post(port, "/", body, headers) == 200  # the real signed body, again
            flipped = body.replace(b'"seq":', b'"seq": ', 1)  # one byte more, same JSON
            assert flipped != body and _post(port, "/", flipped, headers) == 401
            stale = {**headers, "RoadPubSub-Timestamp":
                     str(int(headers["RoadPubSub-Timestamp"]) - 1)}
            assert _post(port, "/", body, stale) == 401
            time.sleep(0.5)
            assert len(receiver.printed) == len(mine)  # the batch sent again: deduplicated

            # resuming: everything after the seq it names, in order, then live
            last = mine[2]["seq"]
            resume = blocks("resume", {"ROADPUBSUB_WS": server.url.replace("http", "ws"),
                                       "TOKEN": token, "LAST_SEQ": str(last)})
            assert resume.wait_for(len(mine) - 3) == mine[3:]
            answer = c.post("/messages", json=_message(8), headers=auth).json()
            (live,) = [d for d in answer["deliveries"] if d["subscription_id"] == 1]
            assert resume.wait_for(len(mine) - 2) == [*mine[3:], live]
            time.sleep(0.5)
            assert len(resume.printed) == len(mine) - 2  # nothing twice, nothing else
    finally:
        relay.stop()
