"""Webhooks of the live service (issue 30), end to end: a real ``roadpubsub serve``
subprocess, real loopback HTTP receivers started here (:class:`hooks.Receiver`),
a kill -9 of the service in the middle.

A subscription carries ``webhook``; its deliveries go to the outbox before the publish is
answered and are POSTed in batches signed with the service's secret. The receivers are
down for a while, answer 500, 429 with ``Retry-After`` and slowly; every delivery of the
log to a webhook subscription must arrive at its endpoint, in seq order, exactly once
after deduplication on ``RoadPubSub-Delivery-Id``, across the kill. A dead endpoint ends
in the dead-letter record (``GET /webhooks/dead``, replayable) and never slows the others.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq
from hooks import Receiver, secret_file, wait_for
from live import message_rows, subscription_rows

from roadpubsub.index.workload import Workload
from roadpubsub.roadnet.network import RoadNetwork


def _log_rows(folder: Path) -> list[tuple[int, int, int]]:
    """(seq, message_id, subscription_id) of every logged delivery, by seq."""
    rows = []
    for p in sorted((folder / "deliveries").glob("*.parquet")):
        if not p.name.endswith(".published.parquet"):
            t = pq.read_table(p).to_pydict()
            rows += list(zip(t["seq"], t["message_id"], t["subscription_id"], strict=True))
    return sorted(rows)


FLAGS = ("--webhook-allow-private", "--webhook-max-attempts", "1000",
         "--webhook-backoff-base", "0.05", "--webhook-backoff-cap", "1.0",
         "--webhook-timeout", "1.0", "--webhook-batch-max", "20")


def test_webhooks_arrive_once_in_order_across_kill(serve: Any, service_dir: Path,
                                                   workload: Workload, andorra: RoadNetwork,
                                                   tmp_path: Path, receivers: list[Receiver]
                                                   ) -> None:
    def flaky(n: int) -> tuple[int, dict[str, str], float]:
        # 500s, 429 with Retry-After, slow answers past the service's 1 s timeout
        if n % 7 == 3:
            return 500, {}, 0.0
        if n % 11 == 5:
            return 429, {"Retry-After": "1"}, 0.0
        if n % 13 == 6:
            return 200, {}, 1.5  # processed, but the service timed out: sent again
        return 200, {}, 0.02

    good = [Receiver(script=flaky), Receiver(script=flaky)]  # down until started below
    receivers.extend(good)
    secret = secret_file(tmp_path)
    flags = (*FLAGS, "--webhook-secret-file", str(secret))
    server = serve(*flags)
    subs = subscription_rows(workload, andorra)
    msgs = message_rows(workload, andorra)
    for i, row in enumerate(subs):
        if i % 3 == 0:
            row["webhook"] = good[i % 2].url
    with server.client() as c:
        refused = c.post("/subscriptions", json={**subs[1], "webhook": "ftp://x/y"})
        assert refused.status_code == 422 and "webhook" in refused.text
        for k in range(0, len(subs), 500):
            assert c.post("/subscriptions", json=subs[k:k + 500]).status_code == 201
        assert c.get(f"/subscriptions/{subs[0]['id']}").json()["webhook"] == good[0].url
        assert "webhook" not in c.get(f"/subscriptions/{subs[1]['id']}").json()
        for k in range(0, 150, 10):  # the receivers are down: all queued
            assert c.post("/messages", json=msgs[k:k + 10]).status_code == 200
        good[0].start()
        for k in range(150, 250, 10):
            assert c.post("/messages", json=msgs[k:k + 10]).status_code == 200
        wait_for(lambda: len(good[0].accepted) > 50, 60, "the first deliveries")
    server.kill()  # with deliveries queued, batches in flight and a receiver down
    good[1].start()
    server = serve(*flags)
    with server.client() as c:
        assert c.get(f"/subscriptions/{subs[0]['id']}").json()["webhook"] == good[0].url
        for k in range(250, len(msgs), 10):
            assert c.post("/messages", json=msgs[k:k + 10]).status_code == 200
    hooked = {row["id"]: row["webhook"] for row in subs if "webhook" in row}

    def expected(folder: Path) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {r.url: [] for r in good}
        for seq, _m, sid in _log_rows(folder):
            if sid in hooked:
                out[hooked[sid]].append(seq)
        return out

    server.stop()  # a clean stop writes the deliveries log through the last publish
    want = expected(service_dir)
    assert all(len(v) > 100 for v in want.values()), {k: len(v) for k, v in want.items()}
    server = serve(*flags)  # the outbox resumes after a clean stop too
    for r in good:
        wait_for(lambda r=r: len(r.deduplicated()) >= len(want[r.url]), 240,
                 f"every delivery at {r.url}")
        got = r.deduplicated()
        assert got == want[r.url]  # each once after dedupe, in seq order
        assert len(r.accepted) > len(got) or r is good[1]  # some came twice (timeouts)
        assert r.bad_signatures == 0
    with server.client() as c:
        text = c.get("/metrics").text
        assert "roadpubsub_webhook_sent_total" in text
        assert c.get("/webhooks/dead").json() == {"dead": []}


def test_dead_endpoint_goes_to_dead_letters_without_slowing_others(
        serve: Any, workload: Workload, andorra: RoadNetwork, tmp_path: Path,
        receivers: list[Receiver]) -> None:
    healthy = Receiver().start()
    dead = Receiver(script=lambda n: (503, {}, 0.9)).start()  # slow, then refuses
    receivers.extend([healthy, dead])
    server = serve("--webhook-allow-private", "--webhook-max-attempts", "3",
                   "--webhook-backoff-base", "0.05", "--webhook-backoff-cap", "0.2",
                   "--webhook-timeout", "2", "--webhook-batch-max", "5",
                   "--webhook-secret-file", str(secret_file(tmp_path)))
    subs = subscription_rows(workload, andorra)
    for i, row in enumerate(subs):
        row["webhook"] = (healthy if i % 2 else dead).url
    msgs = message_rows(workload, andorra)
    url_of = {row["id"]: row["webhook"] for row in subs}
    with server.client() as c:
        assert c.post("/subscriptions", json=subs[:1000]).status_code == 201
        sent: dict[str, list[int]] = {healthy.url: [], dead.url: []}
        answered: dict[int, list[tuple[str, Any]]] = {}
        lag = []
        for m in msgs[:120]:
            answer = c.post("/messages", json=m).json()["deliveries"]
            t0 = time.monotonic()
            for d in answer:
                sent[url_of[d["subscription_id"]]].append(d["seq"])
                answered[d["seq"]] = list(d.items())
            mine = sent[healthy.url]
            if mine:
                wait_for(lambda mine=mine: len(healthy.deduplicated()) >= len(mine), 30,
                         "the healthy endpoint")
                lag.append(time.monotonic() - t0)
        assert healthy.deduplicated() == sent[healthy.url]
        # a webhook body holds the publish answer's delivery objects: same keys in the same
        # order, integer ids (JSON numbers), the same seq, distance and score
        pushed = [list(d.items()) for r in healthy.requests
                  for d in orjson.loads(r["body"])["deliveries"]]
        assert pushed and all(d == answered[dict(d)["seq"]] for d in pushed)
        # the dead endpoint's batches each take 3 attempts of 0.9 s; the healthy one's
        # deliveries never wait for them
        assert max(lag) < 5.0, max(lag)
        n_dead = len(sent[dead.url])
        assert n_dead > 50
        wait_for(lambda: len(c.get("/webhooks/dead").json()["dead"]) == n_dead, 600,
                 "the dead letters", every=0.1)
        letters = c.get("/webhooks/dead").json()["dead"]
        assert [x["seq"] for x in letters] == sent[dead.url]
        assert all("HTTP 503" in x["reason"] for x in letters)
        # each dead letter lists the delivery object the publish answered, and its URL
        assert all([(k, x[k]) for k, _ in answered[x["seq"]]] == answered[x["seq"]]
                   and x["url"] == dead.url for x in letters)
        metrics = c.get("/metrics").text
        assert f'roadpubsub_webhook_dead_total{{endpoint="{dead.url}"}} {n_dead}' in metrics
        # the endpoint recovers: a replay sends the dead letters again, same seqs
        dead.script = lambda n: (200, {}, 0.0)
        r = c.post("/webhooks/replay", json={"ids": [x["id"] for x in letters]})
        assert r.json() == {"replayed": n_dead}
        wait_for(lambda: len(dead.deduplicated()) >= n_dead, 60, "the replayed letters")
        assert dead.deduplicated() == sent[dead.url]
        assert c.get("/webhooks/dead").json() == {"dead": []}
        assert c.post("/webhooks/replay", json={"ids": "x"}).status_code == 400


def test_webhook_url_checks(serve: Any, workload: Workload, andorra: RoadNetwork) -> None:
    server = serve()  # no --webhook-allow-private
    row = subscription_rows(workload, andorra)[0]
    with server.client() as c:
        for url, what in (("http://127.0.0.1:9/x", "loopback"), ("ftp://example.com/",
                                                                   "http"),
                          ("http://169.254.169.254/", "metadata"), (17, "URL")):
            r = c.post("/subscriptions", json={**row, "webhook": url})
            assert r.status_code == 422 and what in r.text, (url, r.text)
        assert c.get(f"/subscriptions/{row['id']}").status_code == 404  # nothing applied
