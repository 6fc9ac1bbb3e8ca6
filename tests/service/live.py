"""Helpers of the live-service tests: a server subprocess, request rows from workloads."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from ports import free_port

from roadpubsub.index.io import messages_table, subscriptions_table
from roadpubsub.index.terms import TermWeights
from roadpubsub.index.workload import Workload
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork

DMAX_M = 3000.0


class Server:
    """``roadpubsub serve`` in a subprocess; stopped (or killed) by the fixture."""

    def __init__(self, state_dir: Path, *extra: str) -> None:
        self.state_dir = state_dir
        self.extra = extra
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = state_dir.parent / f"{state_dir.name}-server.log"

    def start(self, timeout: float = 120.0) -> Server:
        """Start and wait for ``/health``; on a lost port race, retry on another port."""
        for _ in range(3):
            mark = self.log.stat().st_size if self.log.exists() else 0
            try:
                return self._start(timeout)
            except RuntimeError:
                tail = self.log.read_bytes()[mark:]
                if b"address already in use" not in tail:
                    raise
            self.port = free_port()
            self.url = f"http://127.0.0.1:{self.port}"
        return self._start(timeout)

    def _start(self, timeout: float) -> Server:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "roadpubsub", "serve", "--state", str(self.state_dir),
                 "--port", str(self.port), "--quiet", *self.extra],
                stdout=log, stderr=log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"server did not start: {self.log.read_text()[-3000:]}")

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM and wait (a clean stop); SIGKILL if it hangs."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def client(self) -> Any:
        return httpx.Client(base_url=self.url, timeout=60)


def tweet_weights(tweets: list[list[str]]) -> TermWeights:
    """The service's initial weights (every call a fresh, equal copy)."""
    return TermWeights.from_idf(tweets)


def subscription_rows(wl: Workload, network: RoadNetwork, *, lonlat: bool = False
                      ) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = subscriptions_table(
        wl.subscriptions, network=network, weights=wl.weights, lonlat=lonlat).to_pylist()
    return rows


def message_rows(wl: Workload, network: RoadNetwork, *, lonlat: bool = False
                 ) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = messages_table(
        wl.messages, network=network, weights=wl.weights, lonlat=lonlat).to_pylist()
    return rows


def location_of(network: RoadNetwork, points: EdgePoints, i: int) -> dict[str, Any]:
    e = int(points.edge[i])
    return {"u": int(network.node_ids[network.edge_u[e]]),
            "v": int(network.node_ids[network.edge_v[e]]),
            "offset": float(points.offset[i])}


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
