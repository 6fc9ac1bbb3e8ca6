"""kill -9 under load, several rounds: nothing acknowledged is lost, nothing is delivered
twice, and every delivery equals the reference matcher's replay of the logged events.

Four client threads drive a real server (two change subscriptions, two publish), each
recording the log sequence number of every acknowledged event. The server is killed with
SIGKILL at a random moment (snapshots every 40 events and deliveries-log segments every 15
messages, so kills land inside both), restarted, and checked:

* every acknowledged seq is within the recovered log, and the in-flight requests (at most
  one per client) are found in it or not: a publish by ``GET /messages/{id}``, a
  subscription change by the state it leaves; the log's remaining gaps are theirs;
* the live subscriptions equal the reference replay's (ids, places, keywords, alpha, tau,
  expiry);
* the deliveries log on disk holds each logged message exactly once, with the reference
  matcher's deliveries (bit-identical distances and scores), and so did every answer.

Subscriptions that expire are created before the first kill and never moved or deleted, so
that an in-flight change is never confused with an expiry.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from live import DMAX_M, Server, location_of, message_rows, subscription_rows, tweet_weights
from oracle import Oracle, as_deliveries, assert_same

from roadpubsub.index.io import read_deliveries
from roadpubsub.index.workload import Workload
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork

ROUNDS = 5
Event = tuple[str, list[dict[str, Any]]]


class Mutator(threading.Thread):
    """Subscribes, moves (single and batches) and unsubscribes its own subscriptions."""

    def __init__(self, url: str, pool: list[dict[str, Any]], live: set[int],
                 moves: EdgePoints, network: RoadNetwork, seed: int) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.pool = {r["id"]: r for r in pool}
        self.live = live            # ids this client owns and believes live
        self.moves = moves
        self.network = network
        self.rng = random.Random(seed)
        self.acked: list[tuple[int, Event]] = []
        self.in_flight: Event | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as c:
            while not self.stop.is_set():
                event, call = self._next(c)
                self.in_flight = event
                try:
                    r = call()
                except httpx.HTTPError:
                    return  # killed: the event stays in flight
                assert r.status_code in (200, 201), r.text
                self.in_flight = None
                self.acked.append((r.json()["seq"], event))
                self.apply(event)

    def apply(self, event: Event) -> None:
        op, rows = event
        if op == "subscribe":
            self.live.update(r["id"] for r in rows)
        elif op == "unsubscribe":
            self.live.difference_update(r["id"] for r in rows)

    def _loc(self) -> dict[str, Any]:
        return location_of(self.network, self.moves, self.rng.randrange(len(self.moves)))

    def _next(self, c: httpx.Client) -> tuple[Event, Any]:
        rng = self.rng
        free = sorted(set(self.pool) - self.live)
        live = sorted(self.live)
        p = rng.random()
        if (p < 0.2 or len(live) < 5) and free:
            rows = [self.pool[i] for i in rng.sample(free, min(len(free), rng.randint(1, 10)))]
            return ("subscribe", rows), lambda: c.post("/subscriptions", json=rows)
        if p < 0.45:
            sid = rng.choice(live)
            loc = self._loc()
            return (("move", [{"id": sid, **loc}]),
                    lambda: c.put(f"/subscriptions/{sid}/location", json=loc))
        if p < 0.85:
            rows = [{"id": i, **self._loc()} for i in rng.sample(live, min(len(live),
                                                                          rng.randint(2, 40)))]
            return ("move", rows), lambda: c.post("/subscriptions/moves", json=rows)
        sid = rng.choice(live)
        return ("unsubscribe", [{"id": sid}]), lambda: c.delete(f"/subscriptions/{sid}")


class Publisher(threading.Thread):
    """Publishes batches of 1-5 messages with unique ids and increasing times."""

    def __init__(self, url: str, messages: list[dict[str, Any]], ids: itertools.count,
                 clock: itertools.count, seed: int) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.messages = messages
        self.ids = ids
        self.clock = clock
        self.rng = random.Random(seed)
        self.acked: list[tuple[int, Event]] = []
        self.answers: list[dict[str, Any]] = []
        self.in_flight: Event | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as c:
            while not self.stop.is_set():
                rows = [{**self.rng.choice(self.messages), "id": next(self.ids),
                         "time": float(next(self.clock))}
                        for _ in range(self.rng.randint(1, 5))]
                self.in_flight = ("publish", rows)
                try:
                    r = c.post("/messages", json=rows)
                except httpx.HTTPError:
                    return
                assert r.status_code == 200, r.text
                self.in_flight = None
                self.acked.append((r.json()["seq"], ("publish", rows)))
                self.answers.extend(r.json()["deliveries"])


def _deliveries_log(folder: Path) -> tuple[Deliveries, list[int]]:
    import pyarrow.parquet as pq

    d = folder / "deliveries"
    parts = [Deliveries(**read_deliveries(p)) for p in sorted(d.glob("*.parquet"))
             if not p.name.endswith(".published.parquet")]
    published = [m for p in sorted(d.glob("*.published.parquet"))
                 for m in pq.read_table(p).column("message_id").to_pylist()]
    return Deliveries.concat(parts), published


def _server_subs(c: httpx.Client) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    after = None
    while True:
        page = c.get("/subscriptions", params={"limit": 5000} | (
            {"after": after} if after is not None else {})).json()["subscriptions"]
        if not page:
            return out
        out.update((r["id"], r) for r in page)
        after = page[-1]["id"]


def _logged(c: httpx.Client, event: Event, server: dict[int, dict[str, Any]]
            ) -> tuple[bool, int | None]:
    """Whether an in-flight event is in the recovered log, and its seq when known."""
    op, rows = event
    if op == "publish":
        r = c.get(f"/messages/{rows[0]['id']}")
        return (True, r.json()["seq"]) if r.status_code == 200 else (False, None)
    first = rows[0]
    if op == "subscribe":
        return first["id"] in server, None
    if op == "unsubscribe":
        return first["id"] not in server, None
    now = server[first["id"]]
    return (now["u"], now["v"], now["offset"]) == (first["u"], first["v"],
                                                    first["offset"]), None


def _merged(events: list[Event]) -> Event:
    """One log record: its events' rows as one event (they are all of one kind)."""
    return events[0][0], [r for _, rows in events for r in rows]


def _replay(network: RoadNetwork, tweets: list[list[str]], log: list[Event]) -> Oracle:
    oracle = Oracle(network, tweet_weights(tweets), dmax_m=DMAX_M)
    for op, rows in log:
        oracle.apply(op, rows)
    return oracle


def _check(oracle: Oracle, server: dict[int, dict[str, Any]], logged_messages: list[int],
           on_disk: Deliveries, published: list[int]) -> None:
    assert set(oracle.subs) == set(server), "live subscriptions differ"
    for sid, want in oracle.subs.items():
        got = server[sid]
        for f in ("u", "v", "offset", "alpha", "tau", "expires_at"):
            assert got[f] == want.get(f), (sid, f, got[f], want.get(f))
        assert sorted(got["keywords"]) == sorted(want["keywords"])
    assert sorted(published) == sorted(logged_messages), "published ids differ from the log"
    want_all = Deliveries.concat([oracle.deliveries[m] for m in logged_messages])
    assert_same(on_disk, want_all, "deliveries log vs reference replay")


@pytest.mark.slow
def test_kill_9_under_load_recovers_exactly(
        service_dir: Path, servers: list[Server], workload: Workload, move_points: EdgePoints,
        andorra: RoadNetwork, tweets: list[list[str]]) -> None:
    rng = random.Random(2026)
    # compactions every few dozen changes: kills land during background builds too
    server = Server(service_dir, "--snapshot-every", "40", "--flush-every", "15",
                    "--compact-delta", "60")
    servers.append(server)
    server.start()
    subs = subscription_rows(workload, andorra)
    msgs = message_rows(workload, andorra)
    # Static subscriptions, some expiring while messages (times 1, 2, 3, ...) flow.
    static = subs[:300]
    expiry = np.random.default_rng(5).choice([0.0, 1.0], len(static), p=[0.6, 0.4])
    static = [{**s, "expires_at": float(rng.randint(50, 3000)) if e else None}
              for s, e in zip(static, expiry.tolist(), strict=True)]
    # log record seq -> the events it holds (queued moves or publishes share a record)
    history: dict[int, list[Event]] = {}
    with server.client() as c:
        r = c.post("/subscriptions", json=static)
        assert r.status_code == 201
        history[r.json()["seq"]] = [("subscribe", static)]
    own = [set(), set()]
    pools = [subs[300:900], subs[900:1500]]
    ids = itertools.count(10_000)
    clock = itertools.count(1)
    answers: list[dict[str, Any]] = []
    snapshots_seen = 0
    compactions_seen = 0
    for round_no in range(ROUNDS):
        clients: list[Any] = [
            Mutator(server.url, pools[k], own[k], move_points, andorra, seed=100 * round_no + k)
            for k in range(2)]
        clients += [Publisher(server.url, msgs, ids, clock, seed=100 * round_no + 10 + k)
                    for k in range(2)]
        for t in clients:
            t.start()
        time.sleep(rng.uniform(0.8, 3.0))
        with server.client() as c:
            compactions_seen += c.get("/health").json()["compactions"]
        time.sleep(rng.uniform(0.0, 0.3))
        server.kill()
        for t in clients:
            t.stop.set()
            t.join(60)
            assert not t.is_alive()
        server.start()
        with server.client() as c:
            last = c.get("/health").json()["seq"]
            for t in clients:
                for seq, event in t.acked:
                    assert seq <= last, f"acknowledged seq {seq} lost (log ends at {last})"
                    record = history.setdefault(seq, [])
                    assert all(e[0] == event[0] in ("move", "publish") for e in record), \
                        f"seq {seq} acknowledged for {record} and {event}"
                    record.append(event)
                if isinstance(t, Publisher):
                    answers.extend(t.answers)
            server_subs = _server_subs(c)
            unresolved: list[tuple[Any, Event, int]] = []
            for t in clients:
                if t.in_flight is None:
                    continue
                logged, seq = _logged(c, t.in_flight, server_subs)
                if not logged:
                    continue
                if seq is not None:
                    history.setdefault(seq, []).append(t.in_flight)
                else:
                    after = max((q for q, _ in t.acked), default=0)
                    unresolved.append((t, t.in_flight, after))
            gaps = sorted(set(range(1, last + 1)) - set(history))
            assert len(gaps) <= len(unresolved), (gaps, unresolved)
            # Where each logged in-flight change can sit: a gap, or (a move) a move record
            # written after its client's last acknowledged event.
            places = [[g for g in gaps if g > after] + (
                [q for q in sorted(history) if q > after and history[q][0][0] == "move"]
                if event[0] == "move" else []) for _, event, after in unresolved]
            on_disk, published = _deliveries_log(service_dir)
            logged_messages = [r["id"] for s in sorted(history) for e in history[s]
                               for r in e[1] if e[0] == "publish"]
            errors = []
            tried = 0
            for choice in itertools.product(*places):
                used = [q for q in choice if q in gaps]
                if sorted(set(used)) != gaps:
                    continue  # every gap holds an in-flight event
                if any(used.count(q) > 1 and event[0] != "move"
                       for (_, event, _), q in zip(unresolved, choice, strict=True)):
                    continue  # only queued moves share a record
                tried += 1
                trial = {q: list(v) for q, v in history.items()}
                for (_, event, _), q in zip(unresolved, choice, strict=True):
                    trial.setdefault(q, []).append(event)
                oracle = _replay(andorra, tweets, [_merged(trial[q]) for q in sorted(trial)])
                try:
                    _check(oracle, server_subs, logged_messages, on_disk, published)
                except AssertionError as exc:
                    errors.append(exc)
                    continue
                history = trial
                break
            else:
                raise errors[0] if errors else AssertionError(f"no placement of {unresolved}")
            for t, event, _ in unresolved:
                t.apply(event)
            # every acknowledged answer was the reference's too
            answered = as_deliveries(answers)
            mids = np.unique(answered.message_id)
            assert_same(answered, Deliveries.concat([oracle.deliveries[m] for m in
                                                     mids.tolist()]), "answers")
            # a message re-sent after the crash gets the same deliveries, not a duplicate
            again = c.post("/messages", json=history[max(
                s for s in history if history[s][0][0] == "publish")][0][1]).json()
            assert again["duplicates"] and c.get("/health").json()["seq"] == last
            manifest_seq = c.get("/health").json()["snapshot_seq"]
            snapshots_seen += manifest_seq > 0
            print(f"round {round_no}: log ends at {last}, snapshot at {manifest_seq}, "
                  f"{len(server_subs)} live, {len(logged_messages)} messages, "
                  f"{len(on_disk)} deliveries, in flight logged {len(unresolved)} + "
                  f"{sum(t.in_flight is not None for t in clients)} in flight, "
                  f"{tried} placement(s) tried, {sum(len(v) > 1 for v in history.values())} "
                  "shared records")
    assert snapshots_seen >= 2, "the kills never followed a snapshot"
    assert compactions_seen >= 2, "no compaction happened under load"
    assert len(history) > 200
    assert any(len(v) > 1 for v in history.values()), "no request was ever grouped"
