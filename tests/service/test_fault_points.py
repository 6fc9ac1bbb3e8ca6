"""A crash at each step of the write path: an answer is sent only for what a restart
recovers.

The server runs with ``ROADPUBSUB_FAULT=<point>:<n>`` (:mod:`roadpubsub.service.faults`),
which makes it ``os._exit`` the n-th time it passes the point: after a log record's write,
before an fsync, after an fsync, before an answer. One client sends subscribes, moves and
publishes one at a time (so the order sent is the log's order) and notes each answer until
the server dies. After a restart without the fault:

* every answered subscribe, move and publish is in the recovered state, and the one in
  flight is there or not, whole;
* the live subscriptions equal the reference replay (:mod:`oracle`) of the answered events
  (plus the in-flight one when it was recovered), and every recovered message's deliveries
  equal both its answer and the reference matcher's.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import httpx
import pytest
from live import DMAX_M, Server, location_of, message_rows, subscription_rows, tweet_weights
from oracle import Oracle, as_deliveries, assert_same

from roadpubsub.index.workload import Workload
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.service.faults import FAULT_ENV, FAULT_EXIT, FAULT_POINTS

Event = tuple[str, list[dict[str, Any]]]


def _drive(url: str, workload: Workload, network: RoadNetwork, moves: EdgePoints,
           seed: int) -> tuple[list[Event], list[dict[str, Any]], Event | None]:
    """Events until the server dies: (answered events, their answers, the one in flight)."""
    rng = random.Random(seed)
    pool = subscription_rows(workload, network)
    messages = message_rows(workload, network)
    live: list[int] = []
    acked: list[Event] = []
    answers: list[dict[str, Any]] = []
    next_sub = next_msg = 0
    clock = 1000.0
    with httpx.Client(base_url=url, timeout=300) as c:
        for _ in range(400):
            p = rng.random()
            if p < 0.35 or len(live) < 20:
                rows = pool[next_sub:next_sub + rng.randint(1, 20)]
                next_sub += len(rows)
                event: Event = ("subscribe", rows)
                call = ("POST", "/subscriptions", rows)
            elif p < 0.65:
                rows = [{"id": i, **location_of(network, moves, rng.randrange(len(moves)))}
                        for i in rng.sample(live, rng.randint(1, 10))]
                event, call = ("move", rows), ("POST", "/subscriptions/moves", rows)
            else:
                clock += 1.0
                rows = [{**messages[(next_msg + k) % len(messages)], "id": 10**6 + next_msg + k,
                         "time": clock} for k in range(rng.randint(1, 3))]
                next_msg += len(rows)
                event, call = ("publish", rows), ("POST", "/messages", rows)
            try:
                r = c.request(call[0], call[1], json=call[2])
            except httpx.HTTPError:
                return acked, answers, event  # the server died with this one in flight
            assert r.status_code in (200, 201), r.text
            acked.append(event)
            answers.append(r.json())
            if event[0] == "subscribe":
                live.extend(row["id"] for row in event[1])
    pytest.fail("the fault point was never reached")


def _recovered(c: httpx.Client, event: Event) -> bool:
    """Whether the in-flight event is in the restarted service (all of it or none)."""
    op, rows = event
    if op == "publish":
        found = [c.get(f"/messages/{r['id']}").status_code == 200 for r in rows]
    elif op == "subscribe":
        found = [c.get(f"/subscriptions/{r['id']}").status_code == 200 for r in rows]
    else:
        now = [c.get(f"/subscriptions/{r['id']}").json() for r in rows]
        found = [(s["u"], s["v"], s["offset"]) == (r["u"], r["v"], r["offset"])
                 for s, r in zip(now, rows, strict=True)]
        if all(found) or not any(found):
            return all(found)
        # a move to the place it already had tells nothing: decided by the others
        return True
    assert all(found) or not any(found), f"{op} in flight recovered in part: {found}"
    return all(found)


@pytest.mark.parametrize("point", FAULT_POINTS)
def test_a_crash_at_a_fault_point_loses_nothing_answered(
        point: str, service_dir: Path, servers: list[Server], workload: Workload,
        andorra: RoadNetwork, move_points: EdgePoints, tweets: list[list[str]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    n = 23 + FAULT_POINTS.index(point)
    monkeypatch.setenv(FAULT_ENV, f"{point}:{n}")
    server = Server(service_dir, "--snapshot-every", "15", "--flush-every", "4")
    servers.append(server)
    server.start()
    monkeypatch.delenv(FAULT_ENV)
    acked, answers, in_flight = _drive(server.url, workload, andorra, move_points,
                                       seed=FAULT_POINTS.index(point))
    assert server.proc is not None
    assert server.proc.wait(timeout=30) == FAULT_EXIT
    assert f"fault point {point} reached" in server.log.read_text()
    assert len(acked) >= 5
    server.start()
    with server.client() as c:
        replayed = list(acked)
        if in_flight is not None and _recovered(c, in_flight):
            replayed.append(in_flight)
        oracle = Oracle(andorra, tweet_weights(tweets), dmax_m=DMAX_M)
        for op, rows in replayed:
            oracle.apply(op, rows)
        server_subs = {r["id"]: r for r in c.get("/subscriptions",
                                                 params={"limit": 100000}).json()
                       ["subscriptions"]}
        assert set(server_subs) == set(oracle.subs), "live subscriptions differ"
        for sid, want in oracle.subs.items():
            got = server_subs[sid]
            assert (got["u"], got["v"], got["offset"]) == (want["u"], want["v"],
                                                           want["offset"]), sid
        for (op, rows), answer in zip(acked, answers, strict=True):
            if op != "publish":
                continue
            for row in rows:
                r = c.get(f"/messages/{row['id']}")
                assert r.status_code == 200, f"answered message {row['id']} lost"
                got = as_deliveries(r.json()["deliveries"])
                mine = [d for d in answer["deliveries"] if d["message_id"] == row["id"]]
                assert_same(got, as_deliveries(mine), f"message {row['id']} vs its answer")
                assert_same(got, oracle.deliveries[row["id"]],
                            f"message {row['id']} vs the reference")
