"""Resumable delivery streams (issue 30) against a real server: ``WS /deliveries?after=SEQ``
and ``GET /deliveries/stream`` (Server-Sent Events with ``Last-Event-ID``).

Readers are cut at random moments while messages are published and resume from the last
seq they saw; what each received, end to end, must be the deliveries log's (read from the
Parquet segments on disk after a clean stop) for what it asked, with no gap and no
duplicate. Also: the retention's 410 naming the oldest seq held (by count, and by age
with the count), the map's events carrying each delivery's seq, and access control.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow.parquet as pq
import pytest
import websockets.sync.client as websockets_sync
from live import message_rows, subscription_rows
from websockets.exceptions import ConnectionClosed, InvalidStatus

from roadpubsub.index.workload import Workload
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.service.access import TokenStore
from roadpubsub.service.journal import Chunk, DeliveryJournal, ResumeTooOldError

Row = tuple[int, int, int, float, float]  # seq, message_id, subscription_id, distance, score


def _row(d: dict[str, Any]) -> Row:
    return (int(d["seq"]), int(d["message_id"]), int(d["subscription_id"]),
            float(d["distance"]), float(d["score"]))


def _log_rows(folder: Path) -> list[Row]:
    """Every delivery of the deliveries log on disk, by seq."""
    rows: list[Row] = []
    for p in sorted((folder / "deliveries").glob("*.parquet")):
        if p.name.endswith(".published.parquet"):
            continue
        t = pq.read_table(p).to_pydict()
        rows += list(zip(t["seq"], t["message_id"], t["subscription_id"], t["distance"],
                         t["score"], strict=True))
    return sorted(rows)


def _h(token: str | None) -> dict[str, str]:
    return {} if token is None else {"Authorization": f"Bearer {token}"}


class _Reader(threading.Thread):
    """A client that reads a stream, drops the connection at random moments and resumes
    after the last seq it received, until it has reached ``target`` (set at the end)."""

    def __init__(self, base: str, *, sse: bool, subscription: int | None, seed: int,
                 token: str | None = None) -> None:
        super().__init__(daemon=True)
        self.base, self.sse, self.subscription = base, sse, subscription
        self.rng = random.Random(seed)
        self.token = token
        self.got: list[Row] = []
        self.last = 0
        self.target: int | None = None
        self.resumes = 0
        self.error: BaseException | None = None

    def done(self) -> bool:
        return self.target is not None and self.last >= self.target

    def run(self) -> None:
        try:
            while not self.done():
                # deliveries before the next cut (one subscription's are few: cut more
                # often, so that it too resumes many times whatever the timing)
                budget = self.rng.randint(1, 60 if self.subscription is None else 6)
                self._ws(budget) if not self.sse else self._sse(budget)
                self.resumes += 1
                time.sleep(self.rng.random() * 0.05)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _take(self, d: dict[str, Any]) -> None:
        self.got.append(_row(d))
        self.last = int(d["seq"])

    def _ws(self, budget: int) -> None:
        q = f"after={self.last}" + (f"&subscription={self.subscription}"
                                    if self.subscription is not None else "")
        url = self.base.replace("http", "ws") + "/deliveries?" + q
        # close_timeout: a cut, not a polite close (the socket is simply dropped)
        with websockets_sync.connect(url, open_timeout=30, close_timeout=0.1,
                                     additional_headers=_h(self.token)) as ws:
            deadline = time.monotonic() + self.rng.random() * 2
            while budget > 0 and not self.done() and time.monotonic() < deadline:
                try:
                    self._take(json.loads(ws.recv(timeout=0.2)))
                    budget -= 1
                except TimeoutError:
                    continue
                except ConnectionClosed:
                    return

    def _sse(self, budget: int) -> None:
        try:
            self._sse_once(budget)
        except httpx.ReadTimeout:
            # the answer's head not within 0.5 s (a loaded server): a cut like any other;
            # the next connection resumes after the last seq taken
            return

    def _sse_once(self, budget: int) -> None:
        params = {} if self.subscription is None else {"subscription": self.subscription}
        headers = {"Last-Event-ID": str(self.last), **_h(self.token)}
        deadline = time.monotonic() + self.rng.random() * 2
        with httpx.stream("GET", self.base + "/deliveries/stream", params=params,
                          headers=headers, timeout=httpx.Timeout(30, read=0.5)) as r:
            assert r.status_code == 200, r.status_code
            event: dict[str, str] = {}
            try:
                for line in r.iter_lines():
                    if line == "":
                        if "data" in event and event.get("event", "message") == "message":
                            d = json.loads(event["data"])
                            assert int(event["id"]) == d["seq"]
                            self._take(d)
                            budget -= 1
                        event = {}
                        if budget <= 0 or self.done() or time.monotonic() > deadline:
                            return
                    elif not line.startswith(":"):
                        key, _, value = line.partition(":")
                        event[key] = value[1:] if value.startswith(" ") else value
            except httpx.ReadTimeout:
                return  # nothing for a while: cut here and resume


def test_streams_resume_after_random_cuts(serve: Any, workload: Workload,
                                         andorra: RoadNetwork, service_dir: Path) -> None:
    server = serve()
    subs = subscription_rows(workload, andorra)
    msgs = message_rows(workload, andorra)
    with server.client() as c:
        for k in range(0, len(subs), 500):
            assert c.post("/subscriptions", json=subs[k:k + 500]).status_code == 201
        # a first part before any reader: the backlog each reader starts with
        first = c.post("/messages", json=msgs[:60]).json()["deliveries"]
        assert [d["seq"] for d in first] == list(range(1, len(first) + 1))
        watched = Counter(d["subscription_id"] for d in first).most_common(1)[0][0]
        readers = [_Reader(server.url, sse=sse, subscription=sub, seed=i)
                   for i, (sse, sub) in enumerate([(False, None), (False, watched),
                                                   (True, None), (True, watched)])]
        for r in readers:
            r.start()
        answers = list(first)
        rng = random.Random(5)
        k = 60
        while k < len(msgs):  # the rest while the readers are cut and resume
            n = rng.randint(1, 12)
            r = c.post("/messages", json=msgs[k:k + n])
            assert r.status_code == 200, r.text
            answers += r.json()["deliveries"]
            k += n
            time.sleep(rng.random() * 0.02)
        # a repeat: its recorded deliveries with their seqs, nothing new
        again = c.post("/messages", json=msgs[3]).json()["deliveries"]
        assert again == [d for d in first if d["message_id"] == msgs[3]["id"]]
        assert c.get(f"/messages/{msgs[3]['id']}").json()["deliveries"] == again
    head = max(d["seq"] for d in answers)
    mine = max(d["seq"] for d in answers if d["subscription_id"] == watched)
    for r in readers:
        r.target = mine if r.subscription is not None else head
    for r in readers:
        r.join(600)  # a loaded machine: each resume costs a connection
        assert not r.is_alive() and r.error is None, (r.sse, r.subscription, r.error,
                                                      r.last, r.target, r.resumes)
    server.stop()
    log = _log_rows(service_dir)
    assert [row[0] for row in log] == list(range(1, head + 1))  # numbered without gap
    assert sorted(map(_row, answers)) == log  # the answers carried the logged seqs
    for r in readers:
        want = [row for row in log if r.subscription in (None, row[2])]
        assert r.resumes > 3, (r.sse, r.subscription, r.resumes)
        assert r.got == want, (r.sse, r.subscription, len(r.got), len(want))

    # a restart numbers on from the log: the next delivery gets head + 1
    server = serve()
    with server.client() as c:
        nxt = c.post("/messages", json=[{**m, "id": m["id"] + 10**6} for m in msgs[:20]])
        seqs = [d["seq"] for d in nxt.json()["deliveries"]]
        assert seqs == list(range(head + 1, head + 1 + len(seqs))) and seqs


def test_resume_older_than_retention(serve: Any, workload: Workload,
                                     andorra: RoadNetwork) -> None:
    server = serve("--stream-retention", "50")
    subs = subscription_rows(workload, andorra)
    msgs = message_rows(workload, andorra)
    with server.client() as c:
        assert c.post("/subscriptions", json=subs[:1000]).status_code == 201
        total = 0
        for m in msgs[:200]:
            total += len(c.post("/messages", json=m).json()["deliveries"])
        assert total > 120  # the retention of 50 dropped some
        r = c.get("/deliveries/stream", headers={"Last-Event-ID": "0"})
        assert r.status_code == 410
        oldest = int(r.json()["error"].split("oldest seq still held is ")[1].split()[0])
        assert 1 < oldest <= total - 49
        with pytest.raises(InvalidStatus) as refused:
            websockets_sync.connect(server.url.replace("http", "ws") + "/deliveries?after=0",
                                    open_timeout=30)
        assert refused.value.response.status_code == 410
        # from the oldest held on: every delivery up to the head, in order
        url = server.url.replace("http", "ws") + f"/deliveries?after={oldest - 1}"
        with websockets_sync.connect(url, open_timeout=30) as ws:
            seqs = [json.loads(ws.recv(timeout=10))["seq"] for _ in range(total - oldest + 1)]
        assert seqs == list(range(oldest, total + 1))
        assert c.get("/deliveries/stream", params={"after": "x"}).status_code == 400
        assert c.get("/deliveries/stream", params={"subscription": "x1"}).status_code == 400


def _oldest_held(c: httpx.Client) -> int:
    r = c.get("/deliveries/stream", headers={"Last-Event-ID": "0"})
    assert r.status_code == 410, r.status_code
    return int(r.json()["error"].split("oldest seq still held is ")[1].split()[0])


def test_retention_by_age_together_with_count(serve: Any, workload: Workload,
                                              andorra: RoadNetwork) -> None:
    server = serve("--stream-retention", "50", "--stream-retention-seconds", "5")
    subs = subscription_rows(workload, andorra)
    msgs = iter(message_rows(workload, andorra))
    ws_base = server.url.replace("http", "ws")
    with server.client() as c:
        assert c.post("/subscriptions", json=subs[:1000]).status_code == 201

        def publish(deliveries: int) -> list[int]:
            seqs: list[int] = []
            while len(seqs) < deliveries:
                seqs += [d["seq"] for d in c.post("/messages", json=next(msgs)).json()[
                    "deliveries"]]
            return seqs

        first = publish(120)
        # young deliveries: the count bound decides (the last 50, whole messages)
        assert 1 < _oldest_held(c) <= first[-1] - 49
        time.sleep(5.5)
        second = publish(5)  # a few young ones (far fewer than 50) after old ones
        assert _oldest_held(c) == second[0]  # the old ones went by age
        with pytest.raises(InvalidStatus) as refused:
            websockets_sync.connect(f"{ws_base}/deliveries?after={second[0] - 2}",
                                    open_timeout=30)
        assert refused.value.response.status_code == 410
        with websockets_sync.connect(f"{ws_base}/deliveries?after={second[0] - 1}",
                                     open_timeout=30) as ws:
            got = [json.loads(ws.recv(timeout=10))["seq"] for _ in second]
        assert got == second
        time.sleep(5.5)  # nothing new: every held one ages out; resuming at the head works
        assert _oldest_held(c) == second[-1] + 1
        with c.stream("GET", "/deliveries/stream", params={"after": second[-1]}) as r:
            assert r.status_code == 200
    bad = subprocess.run([sys.executable, "-m", "roadpubsub", "serve", "--state",
                          str(server.state_dir), "--stream-retention-seconds", "-1"],
                         capture_output=True, text=True, timeout=300, check=False)
    assert bad.returncode != 0 and "--stream-retention-seconds must be >= 0" in bad.stderr


def _drain(url: str, token: str) -> list[dict[str, Any]]:
    """Everything a stream sends until it is quiet for 2 s."""
    out = []
    with websockets_sync.connect(url, open_timeout=30, close_timeout=0.1,
                                 additional_headers=_h(token)) as conn:
        try:
            while True:
                out.append(json.loads(conn.recv(timeout=2)))
        except TimeoutError:
            return out


def test_stream_access(serve: Any, service_dir: Path, workload: Workload,
                       andorra: RoadNetwork) -> None:
    store = TokenStore(service_dir)
    subs = subscription_rows(workload, andorra)
    _, admin = store.create("admin")
    _, alice = store.create("subscriber", subscriptions=(subs[0]["id"],))
    _, publisher = store.create("publisher")
    server = serve()
    ws = server.url.replace("http", "ws")
    with server.client() as c:
        assert c.post("/subscriptions", json=subs[:1000], headers=_h(admin)).status_code == 201
        for m in message_rows(workload, andorra)[:100]:
            assert c.post("/messages", json=m, headers=_h(admin)).status_code == 200
        own, foreign = subs[0]["id"], subs[1]["id"]
        for token, params, status in (
                (None, {}, 401), (None, {"subscription": own}, 401),
                (alice, {"subscription": foreign}, 403), (publisher, {}, 403),
                (alice, {"subscription": own, "after": 0}, 200),
                (alice, {"after": 0}, 200), (admin, {"after": 0}, 200)):
            with httpx.stream("GET", server.url + "/deliveries/stream", params=params,
                              headers=_h(token), timeout=30) as r:
                # (a 200 is a stream without end: never read in the message)
                assert r.status_code == status, (token, params, r.status_code)
            query = "&".join(f"{k}={v}" for k, v in {"after": 0, **params}.items())
            try:
                with websockets_sync.connect(f"{ws}/deliveries?{query}", open_timeout=30,
                                             additional_headers=_h(token)):
                    got = 101
            except InvalidStatus as exc:
                got = exc.response.status_code
            assert got == (101 if status == 200 else status), (token, params, got)
        # a subscriber without a subscription id: its own deliveries only
        everything = _drain(f"{ws}/deliveries?after=0", admin)
        mine = _drain(f"{ws}/deliveries?after=0", alice)
        assert mine == [d for d in everything if d["subscription_id"] == own]
        assert len(everything) > len(mine)
        assert np.all(np.diff([d["seq"] for d in everything]) == 1)
        for token, status in ((None, 401), (alice, 403), (publisher, 403), (admin, 200)):
            assert c.get("/webhooks/dead", headers=_h(token)).status_code == status
            r = c.post("/webhooks/replay", json={"ids": [1]}, headers=_h(token))
            assert r.status_code == status, r.text


def test_map_events_carry_each_delivery_seq(serve: Any, workload: Workload,
                                            andorra: RoadNetwork) -> None:
    server = serve()
    subs = subscription_rows(workload, andorra)
    with server.client() as c:
        assert c.post("/subscriptions", json=subs[:1000]).status_code == 201
        with websockets_sync.connect(server.url.replace("http", "ws") + "/events",
                                     open_timeout=30) as events:
            time.sleep(0.5)  # registered before the first publish
            answered = []
            for m in message_rows(workload, andorra)[:20]:
                answered += c.post("/messages", json=m).json()["deliveries"]
            pushed: list[dict[str, Any]] = []
            seen = 0
            while seen < 20:
                event = json.loads(events.recv(timeout=30))
                if event.get("type") == "message":
                    seen += 1
                    pushed += event["deliveries"]
    assert answered and sorted(pushed, key=lambda d: d["seq"]) == answered


def _chunk(first: int, n: int) -> Chunk:
    ids = np.arange(first, first + n, dtype=np.int64)  # every row to a webhook
    return Chunk(first, first, ids, ids, np.ones(n), np.ones(n),
                 (np.arange(n), ["http://x/h"] * n))


def test_journal_age_bound_keeps_what_the_webhook_feeder_has_not_queued() -> None:
    now = [100.0]
    journal = DeliveryJournal(retain=1_000, retain_s=10.0, clock=lambda: now[0])
    journal.append(_chunk(1, 3))
    now[0] = 105.0
    journal.append(_chunk(4, 2))
    journal.hold = 2  # the feeder queued through seq 2: the chunk 1-3 is not all fed
    now[0] = 112.0
    assert journal.oldest() == 1  # aged, but held for the feeder
    journal.hold = 3
    assert journal.oldest() == 4
    with pytest.raises(ResumeTooOldError, match="oldest seq still held is 4"):
        journal.check_after(2)
    renewed = journal.renewed(next_seq=6)
    assert (renewed.retain, renewed.retain_s, renewed.hold) == (1_000, 10.0, 3)
    now[0] = 116.0
    assert journal.oldest() == 4  # aged, seqs 4-5 not fed yet
    journal.hold = None  # no feeder (webhooks off)
    assert journal.oldest() == 6 and journal.chunks_after(5, durable=10) == []
    unbounded = DeliveryJournal(retain=1_000, clock=lambda: now[0])  # retain_s 0: no age
    unbounded.append(_chunk(1, 3))
    now[0] = 1e9
    assert unbounded.oldest() == 1
