"""``roadpubsub serve`` with boolean range and top-k subscriptions (issue 21) on Andorra:
the batch CLI's deliveries and top-k events, the reference matchers' under subscriptions
that join, move, leave and expire mid-stream, bad requests, and kill -9 restarts."""

from __future__ import annotations

import json
import random
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow.parquet as pq
import pytest
import websockets.sync.client as websockets_sync
from live import DMAX_M, Server, location_of, message_rows, subscription_rows, tweet_weights
from oracle import as_deliveries, assert_same
from oracle_kinds import KindsOracle, topk_rows

from roadpubsub.cli import main
from roadpubsub.index.eia import EnhancedIndex
from roadpubsub.index.io import read_deliveries, write_weights
from roadpubsub.index.model import Subscriptions
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.workload import Workload
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.service.state import create_state

WINDOW = 25


@pytest.fixture(scope="session")
def kinds_template(andorra: RoadNetwork, tweets: list[list[str]],
                   tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A service folder on Andorra with a top-k window of WINDOW messages."""
    folder = tmp_path_factory.mktemp("kinds") / "svc"
    empty = Subscriptions(np.empty(0, np.int64), EdgePoints.of([], []), np.empty(0),
                          np.empty(0), np.zeros(1, np.int64), np.empty(0, np.int32))
    index = EnhancedIndex(SpatialIndex.build(andorra), empty, tweet_weights(tweets),
                          dmax_m=DMAX_M)
    create_state(folder, index, window=WINDOW)
    _warm_kernels(index.spatial, tweets)
    return folder


def _warm_kernels(spatial: SpatialIndex, tweets: list[list[str]]) -> None:
    """Compile the threshold, boolean and top-k kernels here (numba caches them on disk),
    so that a server's first message does not compile them inside a request's timeout."""
    from roadpubsub.index.kinds import BooleanSubscriptions, TopkSubscriptions
    from roadpubsub.pruning.indexed import IndexMatcher
    from roadpubsub.pruning.live_kinds import LiveBoolean
    from roadpubsub.pruning.live_topk import LiveTopk

    w = tweet_weights(tweets)
    pts = EdgePoints.of([0, 0], [0.0, 0.0])
    index = EnhancedIndex(spatial, Subscriptions(
        np.array([1]), pts[:1], np.array([0.5]), np.array([0.1]), np.array([0, 1]),
        np.zeros(1, np.int32)), w, dmax_m=DMAX_M)
    terms = np.zeros(1, np.int32)
    one = np.array([0, 1], np.int64)
    b = LiveBoolean(spatial, w, dmax_m=DMAX_M, subs=BooleanSubscriptions(
        np.array([1]), pts[:1], np.array([100.0]), one, terms))
    t = LiveTopk(spatial, w, dmax_m=DMAX_M, window=1, subs=TopkSubscriptions(
        np.array([1]), pts[:1], np.array([0.5]), np.array([1]), one, terms))
    from roadpubsub.index.model import Messages

    word = w.terms[0]
    msgs = Messages.from_rows(ids=[1, 2], points=pts, keywords=[[word], [word]], weights=w)
    b.match(msgs)
    t.push(msgs, keywords=[[word], [word]])
    IndexMatcher(index).match(msgs)


@pytest.fixture
def kinds_server(kinds_template: Path, tmp_path: Path, servers: list[Server]
                 ) -> Callable[..., Server]:
    def start(*extra: str) -> Server:
        folder = tmp_path / "svc"
        if not folder.exists():
            shutil.copytree(kinds_template, folder)
        server = _Patient(folder, *extra)
        servers.append(server)
        return server.start()
    return start


class _Patient(Server):
    """A server whose clients wait up to 5 minutes (a cold numba cache compiles the
    kernels in the first request; on a loaded machine that can pass a minute)."""

    def client(self) -> Any:
        return httpx.Client(base_url=self.url, timeout=300)


def kind_rows(wl: Workload, network: RoadNetwork, *, n: int, seed: int,
              shares: tuple[float, float, float] = (0.5, 0.3, 0.2)) -> list[dict[str, Any]]:
    """Subscriptions of the three kinds, mixed: boolean ones take 1-2 keywords of a real
    message (so that some hold all of them) and radii from 0 to Dmax, top-k ones k 1-4."""
    rng = np.random.default_rng(seed)
    base = subscription_rows(wl, network)
    msgs = message_rows(wl, network)
    kinds = rng.choice(["threshold", "boolean", "topk"], n, p=list(shares))
    out = []
    for r, kind in zip(base[:n], kinds.tolist(), strict=True):
        if kind == "threshold":
            out.append({**r, "kind": "threshold"} if rng.random() < 0.5 else dict(r))
            continue
        words = msgs[int(rng.integers(len(msgs)))]["keywords"]
        if kind == "boolean":
            picked = rng.choice(words, min(len(words), int(rng.integers(1, 3))),
                                replace=False).tolist()
            radius = float(rng.choice([0.0, DMAX_M, float(rng.uniform(0, DMAX_M))],
                                      p=[0.05, 0.05, 0.9]))
            out.append({**{k: r[k] for k in ("id", "u", "v", "offset")}, "keywords": picked,
                        "kind": "boolean", "radius": radius})
        else:
            kw = r["keywords"] if rng.random() < 0.5 else words[:3]
            out.append({**{k: r[k] for k in ("id", "u", "v", "offset")}, "keywords": kw,
                        "kind": "topk", "k": int(rng.integers(1, 5)), "alpha": r["alpha"]})
    return out


def _collect(url: str, out: list[dict[str, Any]], ready: threading.Event,
             stop: threading.Event) -> None:
    with websockets_sync.connect(url, open_timeout=30) as ws:
        ready.set()
        while not stop.is_set():
            try:
                out.append(json.loads(ws.recv(timeout=0.2)))
            except TimeoutError:
                continue


def _file_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of a subscriptions file with a kind column (every field present)."""
    return [{"id": r["id"], "u": r["u"], "v": r["v"], "offset": r["offset"],
             "keywords": r["keywords"], "kind": r.get("kind") or "threshold",
             "alpha": r.get("alpha"), "tau": r.get("tau"), "radius": r.get("radius"),
             "k": r.get("k"), "expires_at": r.get("expires_at")} for r in rows]


def test_kinds_match_the_batch_cli(kinds_server: Any, workload: Workload,
                                   andorra: RoadNetwork, andorra_path: Path,
                                   tweets: list[list[str]], tmp_path: Path) -> None:
    server = kinds_server()
    c = server.client()
    subs = kind_rows(workload, andorra, n=700, seed=1)
    # Some threshold and boolean ones expire for the messages' times (base + 1, 2, ...),
    # far beyond the server's clock: the messages' times decide, as in the batch CLI. (A
    # top-k one leaves only when the server's clock purges it: test_validation.py.)
    base = float(int(time.time()) + 10**7)
    for j, r in enumerate(subs):
        if j % 7 == 3 and r.get("kind") != "topk":
            r["expires_at"] = base + 20 + (j * 13) % 120
    for k in range(0, len(subs), 250):
        r = c.post("/subscriptions", json=subs[k:k + 250])
        assert r.status_code == 201, r.text
    health = c.get("/health").json()
    kinds = {k: sum((s.get("kind") or "threshold") == k for s in subs)
             for k in ("threshold", "boolean", "topk")}
    assert health["kinds"] == kinds and health["window"] == WINDOW
    b = next(s for s in subs if s.get("kind") == "boolean")
    got = c.get(f"/subscriptions/{b['id']}").json()
    assert (got["kind"], got["radius"], got["alpha"], got["tau"], got["k"]) == (
        "boolean", b["radius"], None, None, None)
    assert (got["u"], got["v"], got["offset"]) == (b["u"], b["v"], b["offset"])

    ws_url = server.url.replace("http", "ws") + "/deliveries"
    stop = threading.Event()
    every: list[dict[str, Any]] = []
    ready = threading.Event()
    t = threading.Thread(target=_collect, args=(ws_url, every, ready, stop), daemon=True)
    t.start()
    assert ready.wait(30)

    msgs = [{**m, "time": base + i + 1} for i, m in enumerate(message_rows(workload,
                                                                            andorra)[:160])]
    delivered: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    for m in msgs[:40]:
        r = c.post("/messages", json=m)
        assert r.status_code == 200, r.text
        delivered += r.json()["deliveries"]
        events += r.json().get("topk", [])
    for k in range(40, len(msgs), 30):
        r = c.post("/messages", json=msgs[k:k + 30])
        assert r.status_code == 200, r.text
        delivered += r.json()["deliveries"]
        events += r.json().get("topk", [])
    served = as_deliveries(delivered)
    boolean_ids = {s["id"] for s in subs if s.get("kind") == "boolean"}
    n_bool = int(np.isin(served.subscription_id, list(boolean_ids)).sum())
    assert n_bool > 15 and len(events) > 100  # the comparisons below mean something
    assert all(d["score"] == 1.0 for d in delivered if d["subscription_id"] in boolean_ids)
    assert {e["event"] for e in events} == {"insert", "evict"}
    # evictions as the window slides: a message older than the arriving one leaves a top-k
    assert any(e["event"] == "evict" and e["message_id"] != e["arrival_id"] for e in events)
    expiring = {s["id"] for s in subs if s.get("expires_at") is not None}
    # some expiring subscriptions matched early messages and none a message at or after
    # its expires_at
    when = {m["id"]: m["time"] for m in msgs}
    exp = {s["id"]: s["expires_at"] for s in subs if s["id"] in expiring}
    assert any(d["subscription_id"] in exp for d in delivered)
    assert all(when[d["message_id"]] < exp[d["subscription_id"]]
               for d in delivered if d["subscription_id"] in exp)

    # a repeated message: the same deliveries and top-k events, nothing new
    rich = next(m for m in msgs if any(e["arrival_id"] == m["id"] for e in events))
    again = c.post("/messages", json=rich).json()
    assert again["duplicates"] == [rich["id"]]
    assert again["topk"] == [e for e in events if e["arrival_id"] == rich["id"]]
    assert c.get(f"/messages/{rich['id']}").json()["topk"] == again["topk"]

    # the batch CLI (indexes, then every kind's reference) on the same events
    (tmp_path / "subs.json").write_text(json.dumps(_file_rows(subs)))
    (tmp_path / "msgs.json").write_text(json.dumps(msgs))
    weights_file = write_weights(tweet_weights(tweets), tmp_path / "w.parquet")
    for index in ("eia", "brute"):
        out, tout = tmp_path / f"d-{index}.parquet", tmp_path / f"t-{index}.parquet"
        assert main(["match", "--network", str(andorra_path), "--subscriptions",
                     str(tmp_path / "subs.json"), "--messages", str(tmp_path / "msgs.json"),
                     "--weights", str(weights_file), "--dmax", str(DMAX_M), "--window",
                     str(WINDOW), "--index", index, "--quiet", "--out", str(out),
                     "--topk-out", str(tout)]) == 0
        assert_same(served, Deliveries(**read_deliveries(out)), f"service vs CLI {index}")
        cli = pq.read_table(tout).to_pylist()
        want = sorted((e["event"], e["message_id"], e["subscription_id"], e["rank"],
                       e["score"], e["distance"], msgs[e["seq"]]["id"]) for e in cli)
        assert sorted(topk_rows(events)) == want, f"top-k events vs CLI {index}"

    # each top-k subscription's current top-k is the one the events build
    final: dict[int, list[int]] = {}
    for e in sorted(cli, key=lambda e: e["seq"]):  # the CLI's canonical order
        top = final.setdefault(e["subscription_id"], [])
        if e["event"] == "insert":
            top.insert(e["rank"] - 1, e["message_id"])
        else:
            assert top.pop(e["rank"] - 1) == e["message_id"]
    for s in [s for s in subs if s.get("kind") == "topk" and s["id"] not in expiring][:15]:
        now = c.get(f"/subscriptions/{s['id']}").json()
        assert [x["message_id"] for x in now["topk"]] == final.get(s["id"], [])
        assert [x["rank"] for x in now["topk"]] == list(range(1, len(now["topk"]) + 1))

    # pushed over WebSocket: every delivery and top-k event once
    for _ in range(100):
        if len(every) >= len(served) + len(events):
            break
        time.sleep(0.1)
    stop.set()
    t.join(10)
    assert_same(as_deliveries([d for d in every if "event" not in d]), served, "WebSocket")
    assert sorted(topk_rows([d for d in every if "event" in d])) == sorted(topk_rows(events))


def _check_state(c: httpx.Client, oracle: KindsOracle) -> None:
    """Live subscriptions (fields by kind) and every top-k equal the reference's."""
    rows: dict[int, dict[str, Any]] = {}
    after = None
    while True:
        page = c.get("/subscriptions", params={"limit": 300} | (
            {"after": after} if after is not None else {})).json()["subscriptions"]
        if not page:
            break
        rows.update((r["id"], r) for r in page)
        after = page[-1]["id"]
    want = oracle.subs()
    assert set(rows) == set(want), "live subscriptions differ"
    for sid, w in want.items():
        got = rows[sid]
        fields = {"boolean": ("u", "v", "offset", "radius", "expires_at"),
                  "topk": ("u", "v", "offset", "alpha", "k", "expires_at")}.get(
            w.get("kind") or "threshold", ("u", "v", "offset", "alpha", "tau", "expires_at"))
        for f in fields:
            assert got[f] == w.get(f), (sid, f, got[f], w.get(f))
        assert sorted(got["keywords"]) == sorted(w["keywords"])
        if sid in oracle.topk:
            assert [x["message_id"] for x in got["topk"]] == oracle.results(sid), sid


class _Client:
    """Sends events one by one and replays each acknowledged one into the reference;
    when the server is killed it restarts it and re-sends the event in flight (a publish
    is then answered from the log, a subscribe or unsubscribe may be refused as done)."""

    def __init__(self, server: Server, oracle: KindsOracle) -> None:
        self.server, self.oracle = server, oracle
        self.c = server.client()
        self.restarts = 0
        self.answers: dict[int, dict[str, Any]] = {}

    def send(self, op: str, rows: list[dict[str, Any]]) -> None:
        for attempt in range(3):
            try:
                r = self._call(op, rows)
            except httpx.HTTPError:
                self.server.proc.wait(timeout=60)  # type: ignore[union-attr]
                self.server.start()
                self.restarts += 1
                continue
            done_before = attempt > 0 and (
                (op == "subscribe" and r.status_code == 409)
                or (op == "unsubscribe" and r.status_code == 404))
            assert r.status_code in (200, 201) or done_before, r.text
            self.oracle.apply(op, rows)
            if op == "publish":
                body = r.json()
                for m in rows:
                    self.answers[m["id"]] = {
                        "deliveries": [d for d in body["deliveries"]
                                       if d["message_id"] == m["id"]],
                        "topk": [e for e in body.get("topk", [])
                                 if e["arrival_id"] == m["id"]]}
                self.check(rows)
            return
        raise AssertionError("the server did not come back")

    def _call(self, op: str, rows: list[dict[str, Any]]) -> httpx.Response:
        c = self.c
        if op == "subscribe":
            return c.post("/subscriptions", json=rows)
        if op == "unsubscribe":
            return c.delete(f"/subscriptions/{rows[0]['id']}")
        if op == "move":
            if len(rows) == 1:
                loc = {k: rows[0][k] for k in ("u", "v", "offset")}
                return c.put(f"/subscriptions/{rows[0]['id']}/location", json=loc)
            return c.post("/subscriptions/moves", json=rows)
        return c.post("/messages", json=rows)

    def check(self, rows: list[dict[str, Any]]) -> None:
        for m in rows:
            got = self.answers[m["id"]]
            assert_same(as_deliveries(got["deliveries"]), self.oracle.deliveries[m["id"]],
                        f"message {m['id']}")
            assert topk_rows(got["topk"]) == self.oracle.events[m["id"]], m["id"]


def _stream(wl: Workload, network: RoadNetwork, moves: EdgePoints, *, n_events: int,
            seed: int) -> list[tuple[str, list[dict[str, Any]]]]:
    """Mixed events: subscribes of every kind (some expiring), moves, unsubscribes and
    publishes with increasing times; top-k and boolean subscriptions join mid-stream."""
    rng = random.Random(seed)
    pool = kind_rows(wl, network, n=600, seed=seed, shares=(0.3, 0.35, 0.35))
    # message times base + 0, 1, ...: far beyond the server's clock, which purges only the
    # subscriptions that expired long ago (expires_at 1.0); the others expire for the
    # messages' times (no delivery at or after it) and stay live
    base = float(int(time.time()) + 10**7)
    for r in pool:
        x = rng.random()
        if x < 0.2:
            r["expires_at"] = base + rng.randint(20, 120)
        elif x < 0.3:
            r["expires_at"] = 1.0
    msgs = message_rows(wl, network)
    live: list[int] = []
    events: list[tuple[str, list[dict[str, Any]]]] = [("subscribe", pool[:200])]
    live += [r["id"] for r in pool[:200]]
    nxt, clock, mid = 200, 0, 0
    for _ in range(n_events):
        p = rng.random()
        if p < 0.15 and nxt < len(pool):
            rows = pool[nxt:nxt + rng.randint(1, 15)]
            nxt += len(rows)
            live += [r["id"] for r in rows]
            events.append(("subscribe", rows))
        elif p < 0.35 and live:
            ids = rng.sample(live, min(len(live), rng.choice([1, 1, 5, 20])))
            events.append(("move", [{"id": i, **location_of(network, moves, rng.randrange(
                len(moves)))} for i in ids]))
        elif p < 0.42 and live:
            i = live.pop(rng.randrange(len(live)))
            events.append(("unsubscribe", [{"id": i}]))
        else:
            rows = []
            for _ in range(rng.choice([1, 1, 1, 3])):
                clock += rng.choice([0, 1, 2])
                rows.append({**msgs[mid % len(msgs)], "id": 50_000 + mid,
                             "time": base + clock})
                mid += 1
            events.append(("publish", rows))
    return events


def _expired_aware(events: list[tuple[str, list[dict[str, Any]]]]
                   ) -> list[tuple[str, list[dict[str, Any]]]]:
    """Drop moves and unsubscribes of subscriptions purged by then (the service refuses
    them as unknown, rightly): a publish purges those whose expires_at the clock passed."""
    expires: dict[int, float | None] = {}
    gone: set[int] = set()
    out = []
    for op, rows in events:
        if op == "subscribe":
            expires.update((r["id"], r.get("expires_at")) for r in rows)
        elif op == "publish":
            now = time.time()
            gone |= {i for i, e in expires.items() if e is not None and e <= now}
        else:
            rows = [r for r in rows if r["id"] not in gone]
            if not rows:
                continue
            if op == "unsubscribe":
                gone.add(rows[0]["id"])
        out.append((op, rows))
    return out


def test_kinds_mid_stream_changes_equal_the_references(
        kinds_server: Any, workload: Workload, andorra: RoadNetwork, move_points: EdgePoints,
        tweets: list[list[str]]) -> None:
    """Subscriptions of every kind join, move, leave and expire between messages; every
    answer equals the reference matchers' (top-k: the documented window rule); a clean
    restart keeps the window and every top-k."""
    server = kinds_server("--snapshot-every", "25")
    oracle = KindsOracle(andorra, tweet_weights(tweets), dmax_m=DMAX_M, window=WINDOW)
    client = _Client(server, oracle)
    events = _expired_aware(_stream(workload, andorra, move_points, n_events=130, seed=4))
    for op, rows in events[:90]:
        client.send(op, rows)
    _check_state(client.c, oracle)
    assert sum(len(a["topk"]) for a in client.answers.values()) > 50
    assert sum(len(a["deliveries"]) for a in client.answers.values()) > 25
    server.stop()
    server.start()
    _check_state(client.c, oracle)
    for op, rows in events[90:]:
        client.send(op, rows)
    _check_state(client.c, oracle)


def test_kinds_survive_kill_9(kinds_server: Any, workload: Workload, andorra: RoadNetwork,
                              move_points: EdgePoints, tweets: list[list[str]]) -> None:
    """kill -9 twice at random moments (snapshots every 7 events, deliveries segments every 4
    messages): after each restart the subscriptions of every kind, the top-k window and
    every top-k are the acknowledged ones, a re-sent message gets its first answer, and
    the deliveries and top-k logs hold each message's once."""
    server = kinds_server("--snapshot-every", "7", "--flush-every", "4")
    oracle = KindsOracle(andorra, tweet_weights(tweets), dmax_m=DMAX_M, window=WINDOW)
    client = _Client(server, oracle)
    events = _expired_aware(_stream(workload, andorra, move_points, n_events=130, seed=9))
    rng = random.Random(21)
    kills = 0
    killer: threading.Timer | None = None

    def kill() -> None:
        nonlocal kills
        server.kill()
        kills += 1

    for i, (op, rows) in enumerate(events):
        idle = killer is None or not killer.is_alive()
        if idle and kills < 2 and i > 20 and rng.random() < 0.06:
            killer = threading.Timer(rng.uniform(0.0, 0.15), kill)
            killer.start()
        client.send(op, rows)
    if killer is not None:
        killer.join()
    assert kills >= 2 and client.restarts >= 2
    if server.proc is not None and server.proc.poll() is not None:
        server.start()
    _check_state(client.c, oracle)
    # a re-sent message: its first answer, and no new log record
    last = client.c.get("/health").json()["seq"]
    sent = [m for op, rows in events if op == "publish" for m in rows]
    for m in rng.sample(sent, 10):
        body = client.c.post("/messages", json=m).json()
        assert body["duplicates"] == [m["id"]]
        assert topk_rows(body.get("topk", [])) == oracle.events[m["id"]]
        assert_same(as_deliveries(body["deliveries"]), oracle.deliveries[m["id"]], "repeat")
    assert client.c.get("/health").json()["seq"] == last
    # the logs on disk, once the server stops cleanly (it completes them)
    server.stop()
    folder = server.state_dir
    on_disk = Deliveries.concat([Deliveries(**read_deliveries(p)) for p in sorted(
        (folder / "deliveries").glob("*.parquet")) if not p.name.endswith(".published.parquet")])
    assert_same(on_disk, Deliveries.concat([oracle.deliveries[m["id"]] for m in sent]),
                "deliveries log")
    logged = [r for p in sorted((folder / "topk").glob("*.parquet"))
              for r in pq.read_table(p).to_pylist()]
    assert sorted(topk_rows(logged)) == sorted(e for m in sent for e in oracle.events[m["id"]])


BAD = [
    ({"kind": "range"}, ["'kind'", "'range'"]),
    ({"kind": 3}, ["'kind'", "3"]),
    ({"kind": "boolean"}, ["'radius'", "None", "without a radius"]),
    ({"kind": "boolean", "radius": 3500.0}, ["'radius'", "3500.0", "Dmax"]),
    ({"kind": "boolean", "radius": -1.0}, ["'radius'", "-1.0"]),
    ({"kind": "boolean", "radius": "far"}, ["'radius'", "'far'"]),
    ({"kind": "boolean", "radius": 10.0, "alpha": 0.5}, ["'alpha'", "0.5", "boolean"]),
    ({"kind": "boolean", "radius": 10.0, "k": 2}, ["'k'", "2"]),
    ({"radius": 10.0}, ["'radius'", "10.0", "threshold"]),
    ({"kind": "threshold", "k": 3}, ["'k'", "3", "threshold"]),
    ({"kind": "topk", "alpha": 0.5}, ["'k'", "None", "without k"]),
    ({"kind": "topk", "alpha": 0.5, "k": 0}, ["'k'", "0", "k < 1"]),
    ({"kind": "topk", "alpha": 0.5, "k": 2.5}, ["'k'", "2.5", "whole"]),
    ({"kind": "topk", "k": 2}, ["'alpha'", "None"]),
    ({"kind": "topk", "alpha": 1.5, "k": 2}, ["'alpha'", "1.5"]),
    ({"kind": "topk", "alpha": 0.5, "k": 2, "tau": 0.3}, ["'tau'", "0.3", "top-k"]),
    ({"kind": "topk", "alpha": 0.5, "k": 2, "radius": 5.0}, ["'radius'", "5.0"]),
    ({"tau": None}, ["'tau'", "None", "threshold"]),
]


def test_kinds_bad_subscriptions(kinds_server: Any, workload: Workload,
                                 andorra: RoadNetwork) -> None:
    """Every bad kind and field combination: 422 naming the row, field and value; the
    batch is refused whole; the rules are those of the batch reader."""
    server = kinds_server()
    c = server.client()
    good = subscription_rows(workload, andorra)[:2]
    plain = {k: good[1][k] for k in ("id", "u", "v", "offset", "keywords")}
    for change, fragments in BAD:
        base = {**good[1]} if change.get("kind") in (None, "threshold") else dict(plain)
        bad = {**base, **change}
        r = c.post("/subscriptions", json=[good[0], bad])
        assert r.status_code == 422, (change, r.text)
        for f in ["row 1", *fragments]:
            assert f in r.json()["error"], (change, f, r.json())
    assert c.get(f"/subscriptions/{good[0]['id']}").status_code == 404
    # ids are unique across kinds; moves and deletes reach every kind
    b = {**plain, "kind": "boolean", "radius": 100.0}
    assert c.post("/subscriptions", json=b).status_code == 201
    r = c.post("/subscriptions", json={**good[1], "kind": "threshold"})
    assert r.status_code == 409 and str(good[1]["id"]) in r.json()["error"]
    t = {**plain, "id": 77, "kind": "topk", "k": 3, "alpha": 0.4}
    assert c.post("/subscriptions", json=t).status_code == 201
    loc = {k: good[0][k] for k in ("u", "v", "offset")}
    assert c.post("/subscriptions/moves", json=[{"id": 77, **loc},
                                                {"id": b["id"], **loc}]).status_code == 200
    assert c.get("/subscriptions/77").json()["offset"] == loc["offset"]
    assert c.get("/subscriptions/77").json()["topk"] == []
    assert c.delete("/subscriptions/77").status_code == 200
    assert c.get("/subscriptions/77").status_code == 404
    assert c.get("/health").json()["kinds"] == {"threshold": 0, "boolean": 1, "topk": 0}


def test_serve_window_is_fixed_at_creation(andorra_path: Path, tmp_path: Path,
                                           tweets: list[list[str]]) -> None:
    """--window is stored in DIR; a subscriptions file with a kind column seeds every kind;
    --window on an existing DIR is refused."""
    from roadpubsub.cli import build_parser
    from roadpubsub.cli.serve import _create
    from roadpubsub.service.state import ServiceState

    weights = write_weights(tweet_weights(tweets), tmp_path / "w.parquet")
    sub_file = tmp_path / "subs.json"
    sub_file.write_text(json.dumps([
        {"id": 1, "lon": 1.5218, "lat": 42.5063, "keywords": ["delay"], "kind": "boolean",
         "radius": 500.0, "alpha": None, "tau": None, "k": None},
        {"id": 2, "lon": 1.5218, "lat": 42.5063, "keywords": ["delay"], "kind": "topk",
         "radius": None, "alpha": 0.5, "tau": None, "k": 2},
        {"id": 3, "lon": 1.5218, "lat": 42.5063, "keywords": ["delay"], "kind": None,
         "radius": None, "alpha": 0.5, "tau": 0.4, "k": None}]))
    folder = tmp_path / "live"
    args = build_parser().parse_args([
        "serve", "--state", str(folder), "--network", str(andorra_path), "--weights",
        str(weights), "--dmax", str(DMAX_M), "--window", "7", "--subscriptions",
        str(sub_file)])
    _create(args, folder)  # what 'serve' does on a new folder before it listens
    state = ServiceState.open(folder)
    try:
        assert state.window == 7
        assert state.subscription_count() == {"threshold": 1, "boolean": 1, "topk": 1}
        rows = state.subscription_rows(np.array([1, 2, 3]))
        assert [r["kind"] for r in rows] == ["boolean", "topk", "threshold"]
        assert rows[0]["radius"] == 500.0 and rows[1]["k"] == 2 and rows[1]["topk"] == []
    finally:
        state.close()
    assert json.loads((folder / "manifest.json").read_text())["window"] == 7
    assert main(["serve", "--state", str(folder), "--window", "9", "--quiet"]) == 2
