"""The fleet benchmark: vehicles report their positions over MQTT, sensors publish
messages, and every delivery travels back over MQTT (loopback only, bounded).

One run starts a real Mosquitto (``/usr/sbin/mosquitto`` on a free loopback port, with its
own temporary configuration, password file and ACL), serves a fresh copy of a service
folder with ``roadpubsub serve --mqtt`` pointing at it, and drives it for ``--seconds``:

* ``--vehicles`` subscriptions (ids ``0 .. n - 1`` of the folder) drive along the
  network's roads (a random walk at 8-16 m/s) and each reports its position ``--rate``
  times a second on its own topic ``roadpubsub/moves/{id}`` (QoS 1);
* ``--messages`` messages a second of 5-25 real tweet keywords are published on
  ``roadpubsub/messages`` (QoS 1);
* every vehicle reads its own ``roadpubsub/deliveries/{id}`` topic (QoS 1), and one
  observer reads ``roadpubsub/deliveries/#`` (every delivery) to time and count them all.

With ``--push all`` (the default) the service publishes every delivery, the other
subscriptions' too, though nobody reads their topics. With ``--push vehicles`` it is served
with ``--mqtt-push chosen`` and the vehicles are subscribed again with ``"mqtt": true``
before the run (the same rows otherwise; timed apart as ``setup_s``): only their
deliveries are published, the others recorded all the same, and the observer then sees
the vehicles' deliveries only.

The generator is light: a few connections publish on behalf of all vehicles (the broker's
ACL lets the generator's user write every vehicle's topic), packets are encoded in
batches and written with one ``sendall`` per tick, and the broker's acknowledgements and
the deliveries are read in batches (:mod:`roadpubsub.service.mqtt_wire`).

It reports moves and messages sent and applied per second, the backlog (events sent and
not yet acknowledged by the service) every second, end-to-end latencies (a message's
publication on MQTT to a delivery's arrival on MQTT: every delivery, each message's first,
and the vehicles' own), the service's CPU per event by thread, its RSS, and the CPU share
of the broker, the generator and the service; deliveries recorded (matched) per second
and pushed per second apart. After the run it checks that every delivery the service
recorded to a pushed subscription (every one with ``--push all``, the vehicles' with
``--push vehicles``) arrived at the observer, once, and that nothing else did
(``missing_deliveries``, ``duplicate_deliveries``, ``unexpected_deliveries``); latency
percentiles are over the deliveries that arrived. The report (one JSON line on stdout)
and the summary line on stderr name the mode (``push``). Run it as::

    python -m roadpubsub.bench.fleet --template /work/bench/tpl \\
        --network ../shared/data/dimacs/rome.gr.gz --vehicles 10000 --messages 100 \\
        --seconds 60 --push vehicles

``--push vehicles`` needs the template's subscriptions ``0 .. n - 1`` to be point
subscriptions, and no other subscription to say ``"mqtt": true`` (a template made with
``roadpubsub create`` says nothing).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import orjson

from roadpubsub.bench.live import stop_servers
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.settings import DEFAULTS
from roadpubsub.service.mqtt_wire import Publish, WireClient, puback, publish_packet

__all__ = ["Broker", "FleetDriver", "VehicleWalk", "run_fleet"]

MOSQUITTO = "/usr/sbin/mosquitto"
#: Hard bounds: a run never exceeds them whatever the flags say.
MAX_SECONDS, MAX_VEHICLES, MAX_MESSAGES_PER_S = 600.0, 200_000, 5_000
SERVICE_USER, FLEET_USER = "roadpubsub", "fleet"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu(pid: int | str = "self") -> float:
    """utime + stime of a process (Linux /proc), seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss(pid: int | str = "self") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


class Broker:
    """A Mosquitto broker on a free loopback port with its own configuration: a password
    file (users ``roadpubsub`` for the service and ``fleet`` for the generator) and an ACL
    (the service reads and writes ``roadpubsub/#``; the fleet writes moves and messages and
    reads deliveries and errors). Use as a context manager."""

    def __init__(self, work: Path, *, binary: str = MOSQUITTO, inflight: int = 5000) -> None:
        self.work = work
        self.binary = binary
        self.inflight = inflight
        self.port = free_port()
        self.passwords = {SERVICE_USER: os.urandom(12).hex(), FLEET_USER: os.urandom(12).hex()}
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Broker:
        if not Path(self.binary).exists():
            msg = f"the fleet benchmark needs Mosquitto at {self.binary}"
            raise InputError(msg, hint="apt-get install mosquitto")
        self.work.mkdir(parents=True, exist_ok=True)
        pw = self.work / "passwords"
        pw.write_text("")
        pw.chmod(0o600)
        for user, password in self.passwords.items():
            subprocess.run(["mosquitto_passwd", "-b", str(pw), user, password], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        acl = self.work / "acl"
        acl.write_text(f"user {SERVICE_USER}\ntopic readwrite roadpubsub/#\n\n"
                       f"user {FLEET_USER}\ntopic write roadpubsub/moves/#\n"
                       "topic write roadpubsub/messages\ntopic read roadpubsub/deliveries/#\n"
                       "topic read roadpubsub/errors\n")
        conf = self.work / "mosquitto.conf"
        # a fleet needs a wide in-flight window towards the service: it acknowledges after
        # fsync, so the window bounds the events applied per fsync (default 20)
        conf.write_text(f"listener {self.port} 127.0.0.1\nallow_anonymous false\n"
                        f"password_file {pw}\nacl_file {acl}\n"
                        f"max_inflight_messages {self.inflight}\nmax_queued_messages 0\n"
                        "persistence false\nlog_type error\nlog_type warning\n"
                        # as root, Mosquitto would switch to its own user, who cannot read
                        # this private folder
                        + ("user root\n" if os.geteuid() == 0 else ""))
        self.proc = subprocess.Popen([self.binary, "-c", str(conf)],
                                     stdout=subprocess.DEVNULL,
                                     stderr=(self.work / "mosquitto.log").open("wb"))
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    msg = f"Mosquitto did not start (see {self.work / 'mosquitto.log'})"
                    raise RuntimeError(msg) from None
                time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def client(self, name: str, **kw: Any) -> WireClient:
        """A connection of the generator's user."""
        return WireClient("127.0.0.1", self.port, client_id=name, username=FLEET_USER,
                          password=self.passwords[FLEET_USER], **kw)


class VehicleWalk:
    """Vehicles driving along the network's arcs at 8-16 m/s, turning at random at each
    node; :meth:`step` advances every vehicle by ``seconds`` and returns where each is as
    original node ids (u, v) of its edge and the offset from u, in metres."""

    def __init__(self, network: RoadNetwork, n: int, *, seed: int = 0) -> None:
        adj = network.adjacency()
        self.indptr = adj.indptr
        self.heads = adj.indices.astype(np.int64)
        self.length = adj.weights.astype(np.float64)
        self.tails = np.repeat(np.arange(network.n_nodes, dtype=np.int64),
                               np.diff(adj.indptr))
        self.node_ids = network.node_ids
        self.arc_edge = adj.arc_edge.astype(np.int64)
        self.edge_u, self.edge_v = network.edge_u, network.edge_v
        self.edge_length = network.edge_length
        self.rng = np.random.default_rng(seed)
        self.arc = self.rng.integers(0, self.heads.size, n)
        self.pos = self.rng.random(n) * self.length[self.arc]
        self.speed = self.rng.uniform(8.0, 16.0, n)

    def step(self, seconds: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        self.pos += self.speed * seconds
        for _ in range(50):  # short arcs: a vehicle may cross several in one step
            over = np.flatnonzero(self.pos > self.length[self.arc])
            if not over.size:
                break
            self.pos[over] -= self.length[self.arc[over]]
            node = self.heads[self.arc[over]]
            start, deg = self.indptr[node], np.diff(self.indptr)[node]
            pick = start + (self.rng.random(over.size) * np.maximum(deg, 1)).astype(np.int64)
            self.arc[over] = np.where(deg > 0, pick, self.arc[over])
        np.minimum(self.pos, self.length[self.arc], out=self.pos)
        # named as the network stores the edge, with an offset the service keeps exactly
        # (it stores float32): what a client reads back is what it sent
        e = self.arc_edge[self.arc]
        forward = self.edge_u[e] == self.tails[self.arc]
        off = np.where(forward, self.pos, self.edge_length[e] - self.pos)
        off = np.clip(off.astype(np.float32), 0, self.edge_length[e].astype(np.float32))
        return (self.node_ids[self.edge_u[e]], self.node_ids[self.edge_v[e]],
                off.astype(np.float64))


@dataclass
class _Received:
    """Deliveries read by one connection: (message id, subscription id, arrival time),
    and the payloads themselves when asked for (tests compare them)."""

    rows: list[tuple[int, int, float]] = field(default_factory=list)
    bodies: list[dict[str, Any]] | None = None


class FleetDriver:
    """The generator: publishers, the vehicles' readers and the observer (see the module
    docstring). ``vehicle_ids`` report ``rate`` times a second; ``messages`` (rows with
    u, v, offset and keywords) go out ``message_rate`` a second with ids from
    ``first_message_id``."""

    def __init__(self, broker: Broker, network: RoadNetwork, vehicle_ids: np.ndarray, *,
                 rate: float, messages: list[dict[str, Any]], message_rate: float,
                 first_message_id: int, publishers: int = 2, readers: int = 2,
                 observe: bool = True, keep: bool = False, seed: int = 0) -> None:
        self.broker = broker
        self.ids = np.asarray(vehicle_ids, dtype=np.int64)
        self.rate = rate
        self.walk = VehicleWalk(network, len(self.ids), seed=seed)
        self.messages = messages
        self.message_rate = message_rate
        self.first_message_id = first_message_id
        self.topics = [b"roadpubsub/moves/%d" % i for i in self.ids.tolist()]
        self.moves_sent = 0
        self.messages_sent = 0
        self.acked = 0
        self.sent_at: dict[int, float] = {}
        self.errors: list[dict[str, Any]] = []
        self._pid = 0
        self._lock = threading.Lock()
        self.pubs = [broker.client(f"fleet-pub-{k}", on_puback=self._on_puback)
                     for k in range(max(1, publishers))]
        self.vehicle_got = _Received()
        self.all_got = _Received(bodies=[] if keep else None)
        # where each vehicle was last reported: (u, v, offset)
        self.last: list[tuple[int, int, float] | None] = [None] * len(self.ids)
        self.readers: list[WireClient] = []
        groups = np.array_split(self.ids, max(1, readers)) if len(self.ids) else []
        for k, group in enumerate(groups):
            c = broker.client(f"fleet-read-{k}")
            c.on_publish = self._reader(c, self.vehicle_got)
            self.readers.append(c)
            filters = [f"roadpubsub/deliveries/{i}" for i in group.tolist()]
            c.connect()
            for s in range(0, len(filters), 2000):
                c.subscribe(filters[s:s + 2000])
        self.observer: WireClient | None = None
        if observe:
            self.observer = broker.client("fleet-observer")
            self.observer.on_publish = self._reader(self.observer, self.all_got)
            self.observer.connect()
            self.observer.subscribe(["roadpubsub/deliveries/#", "roadpubsub/errors"])
        for p in self.pubs:
            p.connect()

    def _on_puback(self, pids: list[int]) -> None:
        with self._lock:
            self.acked += len(pids)

    def _reader(self, client: WireClient, into: _Received) -> Any:
        rows = into.rows
        bodies = into.bodies
        loads = orjson.loads

        def on_publish(pubs: list[Publish]) -> None:
            now = time.time()
            acks = []
            for topic, payload, pid, qos in pubs:
                if qos:
                    acks.append(puback(pid))
                body = loads(payload)
                if topic == b"roadpubsub/errors":
                    self.errors.append(body)
                    continue
                rows.append((body.get("arrival_id", body["message_id"]),
                             body["subscription_id"], now))
                if bodies is not None:
                    bodies.append(body)
            if acks:
                client.send(b"".join(acks))
        return on_publish

    def _packets(self, items: list[tuple[bytes, bytes]]) -> bytes:
        out = []
        pid = self._pid
        for topic, payload in items:
            pid = pid % 65535 + 1
            out.append(publish_packet(topic, payload, pid))
        self._pid = pid
        return b"".join(out)

    def run(self, seconds: float, *, tick: float = 0.005,
            sample: Any = None) -> dict[str, float]:
        """Publish for ``seconds``; ``sample(elapsed)`` is called about once a second."""
        n = len(self.ids)
        per_s = n * self.rate
        us: list[int] = []
        vs: list[int] = []
        off: list[float] = []
        step = -1
        t0 = time.monotonic()
        wall0 = time.time()
        next_sample = 1.0
        k = 0
        while True:
            elapsed = time.monotonic() - t0
            if elapsed >= seconds:
                break
            due = int(elapsed * per_s)
            batch: list[tuple[bytes, bytes]] = []
            while self.moves_sent < due:
                i = self.moves_sent
                if i // n != step:
                    step = i // n
                    u, v, o = self.walk.step(1.0 / self.rate if step else 0.0)
                    us, vs, off = u.tolist(), v.tolist(), o.tolist()
                j = i % n
                self.last[j] = (us[j], vs[j], off[j])
                batch.append((self.topics[j], b'{"u":%d,"v":%d,"offset":%s}'
                              % (us[j], vs[j], repr(off[j]).encode())))
                self.moves_sent += 1
            if batch:
                self.pubs[k % len(self.pubs)].send(self._packets(batch))
                k += 1
            due_m = int(elapsed * self.message_rate)
            mbatch = []
            now = time.time()
            while self.messages_sent < due_m:
                j = self.messages_sent
                mid = self.first_message_id + j
                row = self.messages[j % len(self.messages)]
                mbatch.append((b"roadpubsub/messages", orjson.dumps({"id": mid, **row})))
                self.sent_at[mid] = now
                self.messages_sent += 1
            if mbatch:
                self.pubs[-1].send(self._packets(mbatch))
            if sample is not None and elapsed >= next_sample:
                # on a thread of its own: a slow answer must not stall the pacing
                threading.Thread(target=sample, args=(elapsed,), daemon=True).start()
                next_sample += 1.0
            time.sleep(max(0.0, tick - (time.monotonic() - t0 - elapsed)))
        return {"seconds": time.monotonic() - t0, "wall_start": wall0}

    def close(self) -> None:
        for c in [*self.pubs, *self.readers, *([self.observer] if self.observer else [])]:
            c.close()


def _get(url: str, timeout: float = 10.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return bytes(r.read())


def _metrics(url: str, timeout: float = 60.0) -> dict[str, float]:
    """The service's /metrics samples as {"name{labels}": value}."""
    out: dict[str, float] = {}
    for line in _get(url + "/metrics", timeout).decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                continue
    return out


def _percentiles(values: np.ndarray) -> dict[str, float]:
    if not values.size:
        return {}
    p = np.percentile(values, [50, 90, 99, 99.9, 100]) * 1000
    return {k: round(float(v), 1) for k, v in zip(("p50", "p90", "p99", "p999", "max"), p,
                                                   strict=True)}


def _stage_ms(m0: dict[str, float], m1: dict[str, float]) -> dict[str, Any]:
    """Where an event's time goes inside the service between two /metrics readings: per
    kind and stage, the upper bound (ms) of the histogram bucket holding p50, p90, p99
    and the mean (see roadpubsub_mqtt_event_stage_seconds)."""
    name = "roadpubsub_mqtt_event_stage_seconds"
    out: dict[str, Any] = {}
    for kind in ("publish", "other"):
        for stage in ("applied", "durable", "sent"):
            labels = f'stage="{stage}",kind="{kind}"'
            rows = sorted((float(k.rsplit('le="', 1)[1][:-2]), v - m0.get(k, 0.0))
                          for k, v in m1.items() if k.startswith(f"{name}_bucket{{{labels},"))
            n = m1.get(f"{name}_count{{{labels}}}", 0) - m0.get(f"{name}_count{{{labels}}}", 0)
            if not rows or n <= 0:
                continue
            fig = {}
            for q in (50, 90, 99):
                le = next(b for b, c in rows if c >= n * q / 100)
                fig[f"p{q}_le"] = le * 1e3 if le != float("inf") else None
            fig["mean"] = round((m1[f"{name}_sum{{{labels}}}"] - m0.get(
                f"{name}_sum{{{labels}}}", 0.0)) / n * 1e3, 1)
            out[f"{kind}.{stage}"] = fig
    return out


def _gc(m0: dict[str, float], m1: dict[str, float]) -> dict[str, Any]:
    """The service's garbage collections between two /metrics readings, by generation."""
    out: dict[str, Any] = {}
    for g in range(3):
        lab = f'{{generation="{g}"}}'
        out[f"gen{g}"] = {
            "count": int(m1.get(f"roadpubsub_gc_collections_total{lab}", 0)
                         - m0.get(f"roadpubsub_gc_collections_total{lab}", 0)),
            "total_ms": round((m1.get(f"roadpubsub_gc_pause_seconds_total{lab}", 0)
                               - m0.get(f"roadpubsub_gc_pause_seconds_total{lab}", 0)) * 1e3, 1),
            "longest_ms_ever": round(m1.get(f"roadpubsub_gc_longest_pause_seconds{lab}", 0)
                                     * 1e3, 1)}
    return out


def _ratio(a: float, b: float) -> float:
    return round(a / b, 4) if b else 0.0


@contextmanager
def serving(template: Path, work: Path, broker: Broker, serve_args: list[str]
            ) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``roadpubsub serve`` on a fresh copy of ``template``, connected to ``broker``."""
    state = work / "state"
    shutil.rmtree(state, ignore_errors=True)
    shutil.copytree(template, state, ignore=shutil.ignore_patterns("tokens.json*"))
    port = free_port()
    env = {**os.environ, "ROADPUBSUB_MQTT_PASSWORD": broker.passwords[SERVICE_USER]}
    env.pop("ROADPUBSUB_TOKEN", None)
    with (work / "serve.log").open("wb") as log:
        srv = subprocess.Popen([sys.executable, "-m", "roadpubsub", "serve", "--state",
                                str(state.resolve()), "--port", str(port), "--mqtt",
                                f"127.0.0.1:{broker.port}", "--mqtt-user", SERVICE_USER,
                                *serve_args], env=env, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            if srv.poll() is not None:
                msg = f"the service exited with {srv.returncode} (see {work / 'serve.log'})"
                raise RuntimeError(msg)
            try:
                _get(url + "/health", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        yield srv, url
    finally:
        stop_servers(srv)


#: Fields of a subscription's row that the service computes (not part of a subscribe body).
_READ_ONLY = frozenset({"topk"})


def _request(conn: http.client.HTTPConnection, method: str, path: str,
             body: bytes | None = None) -> Any:
    headers = {"Content-Type": "application/json"} if body is not None else {}
    conn.request(method, path, body, headers)
    r = conn.getresponse()
    text = r.read()
    if r.status >= 300:
        msg = f"{method} {path}: {r.status} {text[:300]!r}"
        raise RuntimeError(msg)
    return orjson.loads(text)


def _rows_below(conn: http.client.HTTPConnection, vehicles: int) -> list[dict[str, Any]]:
    """The rows of the live subscriptions with ids in ``0 .. vehicles - 1``, by id (the
    listing, paged by ``after``, 100,000 rows a page at most)."""
    rows: list[dict[str, Any]] = []
    after = -1
    while True:
        page = _request(conn, "GET", f"/subscriptions?after={after}"
                                     f"&limit={min(100_000, max(1, vehicles - len(rows)))}"
                        )["subscriptions"]
        rows += [r for r in page if r["id"] < vehicles]
        if not page or page[-1]["id"] >= vehicles - 1:
            return rows
        after = page[-1]["id"]


def mark_vehicles(url: str, vehicles: int, *, batch: int = 1000,
                  connections: int = 4) -> float:
    """Subscribe subscriptions ``0 .. vehicles - 1`` again with ``"mqtt": true``: each
    read, removed and added back with the same id and row (location with its lon/lat,
    which tells parallel edges apart, keywords, alpha, tau, kind, radius, k, expires_at,
    webhook), ``batch`` rows a request; then every one is read back and compared, field by
    field. Returns the seconds it took.

    Raises
    ------
    InputError
        A subscription of ``0 .. vehicles - 1`` is not live, or is a route or area (its
        row's geometry is not a subscribe body's).
    RuntimeError
        The service refused a request, or a row came back changed.
    """
    t0 = time.monotonic()
    where = urlsplit(url)
    batch = max(1, min(batch, DEFAULTS.max_batch_rows))

    def connect() -> http.client.HTTPConnection:
        return http.client.HTTPConnection(where.hostname or "127.0.0.1", where.port,
                                          timeout=120)

    conn = connect()
    try:
        rows = _rows_below(conn, vehicles)
        if [r["id"] for r in rows] != list(range(vehicles)):
            msg = f"the template lacks some of the subscriptions 0 .. {vehicles - 1}"
            raise InputError(msg, hint="make the template with subscription ids from 0")
        sets = [r["id"] for r in rows if r.get("geometry") is not None]
        if sets:
            msg = (f"subscriptions {sets[:5]} are routes or areas: --push vehicles needs "
                   "point subscriptions as vehicles")
            raise InputError(msg)
        bodies = [{**{k: v for k, v in r.items() if k not in _READ_ONLY}, "mqtt": True}
                  for r in rows]
        # one DELETE per id (the service has no batch of them): a few connections at a
        # time, so the service applies them in groups
        errors: list[Exception] = []

        def delete(ids: list[int]) -> None:
            c = connect()
            try:
                for i in ids:
                    _request(c, "DELETE", f"/subscriptions/{i}")
            except Exception as exc:  # reported by the caller
                errors.append(exc)
            finally:
                c.close()

        workers = [threading.Thread(target=delete, args=(list(range(k, vehicles,
                                                                    connections)),))
                   for k in range(max(1, connections))]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        if errors:
            raise errors[0]
        # a new connection: the first one idled past the server's keep-alive meanwhile
        conn.close()
        conn = connect()
        for a in range(0, vehicles, batch):
            _request(conn, "POST", "/subscriptions", orjson.dumps(bodies[a:a + batch]))
        back = _rows_below(conn, vehicles)
        for was, now in zip(bodies, back, strict=False):
            now = {k: v for k, v in now.items() if k not in _READ_ONLY}
            if now != was:
                msg = f"subscription {was['id']} came back changed: {now} (was {was})"
                raise RuntimeError(msg)
        if len(back) != len(bodies):
            msg = f"{len(bodies)} vehicles subscribed again, {len(back)} live after"
            raise RuntimeError(msg)
    finally:
        conn.close()
    return time.monotonic() - t0


def run_fleet(*, template: Path, network: RoadNetwork, vehicles: int, rate: float,
              message_rate: float, seconds: float, work: Path, serve_args: list[str],
              drain: float = 15.0, check: bool = True, publishers: int = 2,
              observe: bool = True, seed: int = 0, push: str = "all") -> dict[str, Any]:
    """One fleet run (see the module docstring); the report as a dict. ``push``: ``all``
    or ``vehicles`` (only the vehicles' deliveries are published)."""
    from roadpubsub.service.loadgen import build_stream

    seconds = min(float(seconds), MAX_SECONDS)
    vehicles = min(int(vehicles), MAX_VEHICLES)
    message_rate = min(float(message_rate), MAX_MESSAGES_PER_S)
    n_msgs = max(1, int(message_rate * seconds) + 1)
    stream = build_stream(network, n_points=1, n_messages=min(n_msgs, 20_000),
                          first_new_id=10**12, seed=seed + 1)
    first_mid = 2 * 10**12 + int(time.time()) * 10**5  # never seen by the template
    if push not in ("all", "vehicles"):
        msg = f"push must be 'all' or 'vehicles', got {push!r}"
        raise InputError(msg)
    if push == "vehicles":
        serve_args = [*serve_args, "--mqtt-push", "chosen"]
    with Broker(work / "broker") as broker, \
            serving(template, work, broker, serve_args) as (srv, url):
        assert broker.proc is not None
        setup_s = mark_vehicles(url, vehicles) if push == "vehicles" else 0.0
        if setup_s:  # the marking's own snapshot ends before the run
            t_settle, deadline = time.monotonic(), time.monotonic() + 300
            while json.loads(_get(url + "/health")).get("snapshot_running") \
                    and time.monotonic() < deadline:
                time.sleep(0.2)
            setup_s += time.monotonic() - t_settle
        driver = FleetDriver(broker, network, np.arange(vehicles), rate=rate,
                             messages=stream.messages, message_rate=message_rate,
                             first_message_id=first_mid, publishers=publishers,
                             observe=observe, seed=seed)
        samples: list[dict[str, Any]] = []

        def sample(elapsed: float) -> None:
            try:
                m = _metrics(url, timeout=5.0)
            except OSError:
                return  # an event loop this slow: the next sample tells
            samples.append({
                "t": round(elapsed, 2), "moves_sent": driver.moves_sent,
                "messages_sent": driver.messages_sent,
                "events_acknowledged": int(m.get(
                    'roadpubsub_mqtt_events_total{stage="acknowledged"}', 0)),
                "backlog": driver.moves_sent + driver.messages_sent - int(m.get(
                    'roadpubsub_mqtt_events_total{stage="acknowledged"}', 0)),
                "pending_in_service": int(m.get("roadpubsub_mqtt_events_pending", 0)),
                "oldest_event_s": m.get("roadpubsub_mqtt_oldest_event_seconds", 0.0),
                "deliveries_queued": int(m.get(
                    'roadpubsub_mqtt_deliveries_total{stage="queued"}', 0)),
                "deliveries_inflight": int(m.get("roadpubsub_mqtt_deliveries_inflight", 0)),
                "oldest_delivery_s": m.get("roadpubsub_mqtt_oldest_queued_seconds", 0.0),
                "observed": len(driver.all_got.rows),
                "snapshots_done": int(m.get("roadpubsub_snapshots_total", 0)),
                "last_snapshot_s": round(m.get("roadpubsub_snapshot_seconds", 0.0), 2),
                "service_cpu_s": round(_cpu(srv.pid), 2),
                "broker_cpu_s": round(_cpu(broker.proc.pid), 2) if broker.proc else 0.0,
                "generator_cpu_s": round(_cpu(), 2), "load": os.getloadavg()[0]})

        health0 = json.loads(_get(url + "/health"))
        m0 = _metrics(url)
        cpu0 = {"service": _cpu(srv.pid), "broker": _cpu(broker.proc.pid),
                "generator": _cpu()}
        load0 = os.getloadavg()
        timing = driver.run(seconds, sample=sample)
        cpu1 = {"service": _cpu(srv.pid), "broker": _cpu(broker.proc.pid),
                "generator": _cpu()}
        m1 = _metrics(url)
        health1 = json.loads(_get(url + "/health"))
        # drain: everything sent acknowledged, every delivery queued acknowledged by the
        # broker and read by the observer
        sent = driver.moves_sent + driver.messages_sent
        t_end = time.monotonic()
        drained = False
        while time.monotonic() - t_end < drain:
            m = _metrics(url)
            done = m.get('roadpubsub_mqtt_events_total{stage="acknowledged"}', 0) >= sent \
                and m.get("roadpubsub_mqtt_deliveries_inflight", 1) == 0
            if done and (not observe or len(driver.all_got.rows)
                         >= m.get('roadpubsub_mqtt_deliveries_total{stage="queued"}', 0)):
                drained = True
                break
            time.sleep(0.1)
        drain_s = time.monotonic() - t_end
        m2 = _metrics(url)
        missing = None
        expected = duplicates = recorded = unexpected = 0
        not_applied: list[int] = []
        if check and observe:
            missing = 0
            want: set[tuple[int, int]] = set()
            for mid in driver.sent_at:
                try:
                    body = json.loads(_get(f"{url}/messages/{mid}"))
                except urllib.error.HTTPError as exc:
                    if exc.code != 404:
                        raise
                    not_applied.append(mid)
                    continue
                recorded += len(body["deliveries"])
                want.update((mid, d["subscription_id"]) for d in body["deliveries"]
                            if push == "all" or d["subscription_id"] < vehicles)
            expected = len(want)
            # late ones still count: a backlog left by the run drains while this waits
            deadline = time.monotonic() + drain
            while True:
                got = {(a, b) for a, b, _ in driver.all_got.rows}
                missing = len(want - got)
                if not missing or time.monotonic() > deadline:
                    break
                time.sleep(1.0)
            duplicates = len(driver.all_got.rows) - len(got)
            # pushed though not expected (--push vehicles: another subscription's)
            unexpected = len({g for g in got if g[0] in driver.sent_at} - want)
        rss_service = _rss(srv.pid)
        rss_broker = _rss(broker.proc.pid)
        driver.close()
    wall = timing["seconds"]
    load1 = os.getloadavg()
    events = m1.get('roadpubsub_mqtt_events_total{stage="acknowledged"}', 0) - m0.get(
        'roadpubsub_mqtt_events_total{stage="acknowledged"}', 0)
    moves = m1.get('roadpubsub_events_total{kind="move"}', 0) - m0.get(
        'roadpubsub_events_total{kind="move"}', 0)
    pubs = m1.get('roadpubsub_events_total{kind="publish"}', 0) - m0.get(
        'roadpubsub_events_total{kind="publish"}', 0)
    t0c, t1c = health0.get("thread_cpu_seconds", {}), health1.get("thread_cpu_seconds", {})
    per_event = {name: round((t1c[name] - t0c.get(name, 0.0)) / max(events, 1) * 1e6, 1)
                 for name in t1c if t1c[name] - t0c.get(name, 0.0) > 0.005}
    service_cpu = cpu1["service"] - cpu0["service"]
    per_event["process"] = round(service_cpu / max(events, 1) * 1e6, 1)
    all_rows = np.array([(r[0], r[2]) for r in driver.all_got.rows], dtype=np.float64) \
        .reshape(-1, 2)
    veh_rows = np.array([(r[0], r[2]) for r in driver.vehicle_got.rows], dtype=np.float64) \
        .reshape(-1, 2)

    def latencies(rows: np.ndarray) -> np.ndarray:
        sent_at = np.array([driver.sent_at.get(int(m), np.nan) for m in rows[:, 0]])
        lat = rows[:, 1] - sent_at
        return lat[~np.isnan(lat)]

    first: dict[int, float] = {}
    for mid, _, t in driver.all_got.rows:
        first[mid] = min(first.get(mid, t), t)
    first_lat = np.array([t - driver.sent_at[m] for m, t in first.items()
                          if m in driver.sent_at])
    samples.sort(key=lambda x: x["t"])
    half = [s for s in samples if s["t"] >= wall / 2]
    slope = float(np.polyfit([s["t"] for s in half], [s["backlog"] for s in half], 1)[0]) \
        if len(half) >= 3 else 0.0
    return {
        "push": push, "setup_s": round(setup_s, 1),
        "vehicles": vehicles, "rate_per_vehicle": rate, "messages_per_s_target": message_rate,
        "moves_per_s_target": vehicles * rate, "seconds": round(wall, 2),
        "load_before": [round(x, 2) for x in load0], "load_after": [round(x, 2) for x in load1],
        "moves_sent_per_s": round(driver.moves_sent / wall, 1),
        "messages_sent_per_s": round(driver.messages_sent / wall, 1),
        "moves_applied_per_s": round(moves / wall, 1),
        "messages_applied_per_s": round(pubs / wall, 1),
        "events_acknowledged_per_s": round(events / wall, 1),
        "backlog_every_5s": [s["backlog"] for s in samples][4::5],
        "backlog_end": samples[-1]["backlog"] if samples else None,
        "backlog_slope_per_s_second_half": round(slope, 1),
        "oldest_event_s_max": round(max((s["oldest_event_s"] for s in samples), default=0), 3),
        "drained": drained, "drain_s": round(drain_s, 2),
        "deliveries_pushed": int(m2.get('roadpubsub_mqtt_deliveries_total{stage="queued"}', 0)),
        "deliveries_pushed_per_s": round((m1.get(
            'roadpubsub_mqtt_deliveries_total{stage="queued"}', 0) - m0.get(
            'roadpubsub_mqtt_deliveries_total{stage="queued"}', 0)) / wall, 1),
        "deliveries_recorded_per_s": round((m1.get("roadpubsub_deliveries_total", 0)
                                            - m0.get("roadpubsub_deliveries_total", 0))
                                           / wall, 1),
        "deliveries_not_pushed_per_s": round((m1.get(
            "roadpubsub_mqtt_deliveries_unpushed_total", 0) - m0.get(
            "roadpubsub_mqtt_deliveries_unpushed_total", 0)) / wall, 1),
        "deliveries_recorded_checked": recorded,
        "deliveries_observed": len(driver.all_got.rows),
        "vehicle_deliveries": len(driver.vehicle_got.rows),
        "expected_deliveries": expected, "missing_deliveries": missing,
        "duplicate_deliveries": duplicates, "unexpected_deliveries": unexpected,
        "messages_not_applied": len(not_applied),
        "refused": int(m2.get('roadpubsub_mqtt_events_total{stage="refused"}', 0)),
        "errors_sample": driver.errors[:3],
        "latency_ms_all_deliveries": _percentiles(latencies(all_rows)),
        "latency_ms_first_delivery": _percentiles(first_lat),
        "latency_ms_vehicle_deliveries": _percentiles(latencies(veh_rows)),
        "cpu_share": {k: round((cpu1[k] - cpu0[k]) / wall, 3) for k in cpu0},
        "service_cpu_us_per_event": per_event,
        "service_stage_ms": _stage_ms(m0, m1),
        "service_gc": _gc(m0, m1),
        "apply_groups": health1.get("groups", 0) - health0.get("groups", 0),
        "snapshots": health1.get("snapshots", 0) - health0.get("snapshots", 0),
        "compactions": health1.get("compactions", 0) - health0.get("compactions", 0),
        "fsyncs": health1.get("fsyncs", 0) - health0.get("fsyncs", 0),
        "rss_mb": {"service": round(rss_service / 2**20), "broker": round(rss_broker / 2**20),
                   "generator": round(_rss() / 2**20)},
        "samples": samples,
    }


def _summary(rep: dict[str, Any]) -> str:
    """One line of a run's report for a reader."""
    lat = rep["latency_ms_all_deliveries"]
    setup = f" (vehicles marked in {rep['setup_s']} s, not timed)" \
        if rep["push"] == "vehicles" else ""
    return (f"fleet --push {rep['push']}{setup}: {rep['vehicles']} vehicles, "
            f"{rep['seconds']} s: moves applied {rep['moves_applied_per_s']}/s of "
            f"{rep['moves_per_s_target']:g}, messages {rep['messages_applied_per_s']}/s of "
            f"{rep['messages_per_s_target']:g}; deliveries recorded "
            f"{rep['deliveries_recorded_per_s']}/s, pushed {rep['deliveries_pushed_per_s']}/s"
            f"; backlog at the end {rep['backlog_end']}; missing "
            f"{rep['missing_deliveries']}, unexpected {rep['unexpected_deliveries']}; "
            f"latency p50 {lat.get('p50')} ms, p99 {lat.get('p99')} ms")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m roadpubsub.bench.fleet", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--template", required=True, type=Path,
                   help="service folder copied for each run (subscriptions 0..n-1 live)")
    p.add_argument("--network", required=True)
    p.add_argument("--vehicles", type=int, default=10_000)
    p.add_argument("--rate", type=float, default=1.0, help="reports per vehicle per second")
    p.add_argument("--messages", type=float, default=100.0, help="messages per second")
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--drain", type=float, default=15.0,
                   help="seconds to wait after the run for the backlog to clear")
    p.add_argument("--publishers", type=int, default=2)
    p.add_argument("--no-observer", action="store_true",
                   help="only the vehicles read deliveries (a lighter generator)")
    p.add_argument("--no-check", action="store_true",
                   help="skip checking every recorded delivery arrived")
    p.add_argument("--serve-args", default="", help="extra 'serve' arguments")
    p.add_argument("--push", choices=("all", "vehicles"), default="all",
                   help="whose deliveries the service publishes: every subscription's "
                        "(default) or the vehicles' only (served with --mqtt-push chosen, "
                        "the vehicles subscribed again with \"mqtt\": true before the run, "
                        "timed apart as setup_s)")
    p.add_argument("--samples", action="store_true", help="print the per-second samples")
    args = p.parse_args(argv)
    from roadpubsub.roadnet.io import load_network

    network = load_network(args.network)
    with tempfile.TemporaryDirectory(prefix="roadpubsub-fleet-") as tmp:
        for _ in range(args.runs):
            rep = run_fleet(template=args.template, network=network, vehicles=args.vehicles,
                            rate=args.rate, message_rate=args.messages, seconds=args.seconds,
                            work=Path(tmp), serve_args=args.serve_args.split(),
                            drain=args.drain, check=not args.no_check,
                            publishers=args.publishers, observe=not args.no_observer,
                            push=args.push)
            if not args.samples:
                rep.pop("samples")
            print(json.dumps(rep), flush=True)
            print(_summary(rep), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
