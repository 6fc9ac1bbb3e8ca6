"""Queued requests applied together equal the same requests applied one by one."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from live import DMAX_M, location_of, message_rows, subscription_rows, tweet_weights
from oracle import Oracle, as_deliveries, assert_same

from roadpubsub.index.events import BodyParser, RequestError
from roadpubsub.index.workload import Workload
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.service.applier import Applier, MoveBundle
from roadpubsub.service.folder_lock import ServiceBusyError
from roadpubsub.service.options import ServiceOptions
from roadpubsub.service.state import ServiceState


class _Running(NamedTuple):
    state: ServiceState
    parser: BodyParser
    applier: Applier
    oracle: Oracle


@pytest.fixture
def running(service_dir: Path, andorra: RoadNetwork, tweets: list[list[str]]
            ) -> Iterator[_Running]:
    """A service state with its apply thread, and the reference to check it against."""
    state = ServiceState.open(service_dir, ServiceOptions())
    parser = BodyParser(andorra, max_snap_m=250.0)
    applier = Applier(state, parser, group_max=64)
    try:
        yield _Running(state, parser, applier,
                       Oracle(andorra, tweet_weights(tweets), dmax_m=DMAX_M))
    finally:
        applier.call(state.close).result(60)
        applier.stop()


def _queued(applier: Applier, submit: list[Any]) -> list[Future[Any]]:
    """Submit while the apply thread is held, so that everything queues up together."""
    gate = threading.Event()
    applier.call(lambda: gate.wait(10))
    futures = [f() for f in submit]
    time.sleep(0.05)
    gate.set()
    return futures


def test_runs_of_moves_and_publishes_equal_one_by_one(
        running: _Running, workload: Workload, move_points: EdgePoints,
        andorra: RoadNetwork) -> None:
    state, parser, applier, oracle = running
    subs = subscription_rows(workload, andorra)[:400]
    subs = [{**s, "expires_at": 150.0 if i % 5 == 0 else None} for i, s in enumerate(subs)]
    applier.call(lambda: state.subscribe(parser.subscriptions(subs))).result(30)
    oracle.apply("subscribe", subs)
    # moves: the same subscription twice in one run (the last wins), a bad request
    # refused alone
    moves = [[{"id": subs[i]["id"], **location_of(andorra, move_points, k)}]
             for k, i in enumerate([1, 2, 1, 3, 4])]
    futures = _queued(applier, [lambda m=m: applier.move(m) for m in moves] + [
        lambda: applier.move([{"id": 999_999, **location_of(andorra, move_points, 9)}])])
    seqs = [f.result(30).seq for f in futures[:5]]
    with pytest.raises(RequestError, match="999999"):
        futures[5].result(30)
    assert len(set(seqs)) == 1  # one record
    for m in moves:
        oracle.apply("move", m)
    # publishes: times 100, 200, then 50 (decreasing: a new run), a repeated id
    msgs = message_rows(workload, andorra)
    pubs = [[{**msgs[0], "time": 100.0}], [{**msgs[1], "time": 200.0}],
            [{**msgs[2], "time": 50.0}, {**msgs[3], "time": 175.0}],
            [{**msgs[1], "time": 300.0}]]
    futures = _queued(applier, [lambda p=p: applier.publish(p) for p in pubs])
    answers = [f.result(30) for f in futures]
    assert answers[0].seq == answers[1].seq != answers[2].seq
    assert answers[3].body["duplicates"] == [msgs[1]["id"]]
    # each answer of a group locates its own messages only (the live map's events)
    for p, a in zip(pubs[:2], answers[:2], strict=True):
        assert a.messages is not None
        assert a.messages[0].tolist() == [r["id"] for r in p]
        want_at = parser.messages(p).points
        assert a.messages[1].edge.tolist() == want_at.edge.tolist()
        assert a.messages[1].offset.tolist() == want_at.offset.tolist()
    for p in pubs[:3]:
        oracle.apply("publish", p)
    for p, a in zip(pubs, answers, strict=True):
        want = Deliveries.concat([oracle.deliveries[r["id"]] for r in p])
        assert_same(as_deliveries(a.body["deliveries"]), want,
                    f"publish {[r['id'] for r in p]}")
    assert applier.groups >= 2
    # one group of a repeated id and a new one: each answer holds its own messages'
    # deliveries (the repeat's as recorded), in the answers' order
    groups = applier.groups
    pair = [[{**msgs[k], "time": 250.0} for k in (0, *range(5, 25))],
            [{**msgs[k], "time": 250.0} for k in range(25, 40)]]
    futures = _queued(applier, [lambda p=p: applier.publish(p) for p in pair])
    answers = [f.result(30) for f in futures]
    assert applier.groups == groups + 1 and answers[0].seq == answers[1].seq
    assert answers[0].body["duplicates"] == [msgs[0]["id"]]
    assert "duplicates" not in answers[1].body
    assert [a.messages[0].tolist() for a in answers if a.messages is not None] == [
        [r["id"] for r in pair[0][1:]], [r["id"] for r in pair[1]]]
    oracle.apply("publish", [*pair[0][1:], *pair[1]])
    for p, a in zip(pair, answers, strict=True):
        want = Deliveries.concat([oracle.deliveries[r["id"]] for r in p])
        got = a.body["deliveries"]
        assert len({d["message_id"] for d in got}) > 2  # the order below is a real test
        assert [(d["message_id"], d["subscription_id"]) for d in got] == list(zip(
            want.message_id.tolist(), want.subscription_id.tolist(), strict=True))
        assert_same(as_deliveries(got), want, f"publish {[r['id'] for r in p]}")
    # single moves by path id, all good: parsed, checked and applied as one batch
    singles = [(subs[i]["id"], location_of(andorra, move_points, 20 + k))
               for k, i in enumerate([6, 7, 8])]
    futures = _queued(applier, [lambda s=s: applier.move(s[1], path_id=s[0])
                                for s in singles])
    done = [f.result(30) for f in futures]
    assert len({d.seq for d in done}) == 1 and all(d.body["moved"] == 1 for d in done)
    for sid, loc in singles:
        oracle.apply("move", [{"id": sid, **loc}])
    last = [{**msgs[4], "time": 400.0}]
    answer = applier.publish(last).result(30)
    oracle.apply("publish", last)
    assert_same(as_deliveries(answer.body["deliveries"]), oracle.deliveries[msgs[4]["id"]],
                "a publish after a run of moves")


def test_a_second_service_on_one_folder_is_refused(service_dir: Path) -> None:
    state = ServiceState.open(service_dir, ServiceOptions())
    try:
        with pytest.raises(ServiceBusyError, match="another roadpubsub service"):
            ServiceState.open(service_dir, ServiceOptions())
    finally:
        state.close()
    ServiceState.open(service_dir, ServiceOptions()).close()  # free again


def test_concurrent_requests_are_applied_moves_first(
        running: _Running, workload: Workload, move_points: EdgePoints,
        andorra: RoadNetwork) -> None:
    """Concurrent requests of a group go moves, publishes, the rest; a request that is not
    concurrent (an MQTT sender's) stays in place, and nothing crosses it. The answers
    equal the events applied one by one in the order of the log."""
    state, parser, applier, oracle = running
    subs = subscription_rows(workload, andorra)[:300]
    applier.call(lambda: state.subscribe(parser.subscriptions(subs))).result(30)
    oracle.apply("subscribe", subs)
    msgs = [{**m, "time": 100.0 * (k + 1)}
            for k, m in enumerate(message_rows(workload, andorra)[:3])]
    moves = [[{"id": subs[i]["id"], **location_of(andorra, move_points, 30 + i)}]
             for i in range(4)]
    new_sub = [dict(subs[0], id=5_000_000)]
    # arrival: p0 m0 s m1 | q (not concurrent) | m2 p1 m3
    plan = [("publish", [msgs[0]], True), ("move", moves[0], True),
            ("subscribe", new_sub, True), ("move", moves[1], True),
            ("publish", [msgs[1]], False),
            ("move", moves[2], True), ("publish", [msgs[2]], True),
            ("move", moves[3], True)]

    def submit(kind: str, body: Any, concurrent: bool) -> Future[Any]:
        if kind == "move":
            return applier.move(body, concurrent=concurrent)
        if kind == "publish":
            return applier.publish(body, concurrent=concurrent)
        return applier.call(lambda: state.subscribe(parser.subscriptions(body)),
                            concurrent=concurrent)

    futures = _queued(applier, [lambda p=p: submit(*p) for p in plan])
    seq = [f.result(30).seq for f in futures]
    # applied: (m0 m1) p0 s | q | (m2 m3) p1
    assert seq[1] == seq[3] < seq[0] < seq[2] < seq[4] < seq[5] == seq[7] < seq[6]
    for k in (1, 3, 0, 2, 4, 5, 7, 6):
        kind, body, _ = plan[k]
        oracle.apply(kind, body)
    for k in (0, 4, 6):
        mid = plan[k][1][0]["id"]
        assert_same(as_deliveries(futures[k].result(30).body["deliveries"]),
                    oracle.deliveries[mid], f"publish {mid}")


def test_a_bundle_of_moves_is_one_batch_or_each_event_alone(
        running: _Running, workload: Workload, move_points: EdgePoints,
        andorra: RoadNetwork) -> None:
    """Bundles (a transport's read of one-row moves): one record and one answer when
    every row is good; bundles repeating a vehicle are applied one after the other (the
    later position wins); a bundle with a bad row answers each event on its own, as if
    queued alone (the good ones applied, each bad one refused with its own error)."""
    state, parser, applier, oracle = running
    subs = subscription_rows(workload, andorra)[:200]
    applier.call(lambda: state.subscribe(parser.subscriptions(subs))).result(30)
    oracle.apply("subscribe", subs)

    def bundle(rows: list[dict[str, Any]]) -> tuple[MoveBundle, list[Future[Any]]]:
        each: list[Future[Any]] = [Future() for _ in rows]
        return MoveBundle(rows, list(each), Future()), each

    def row(i: int, k: int) -> dict[str, Any]:
        return {"id": subs[i]["id"], **location_of(andorra, move_points, k)}

    first, _ = bundle([row(1, 40), row(2, 41)])
    second, _ = bundle([row(1, 42), row(3, 43)])  # vehicle 1 again: a run of its own
    bad, each = bundle([row(4, 44), {**row(5, 45), "id": 999_999},
                        {**row(6, 46), "offset": "far"}, row(7, 47)])
    futures = _queued(applier, [lambda b=b: applier.move(b, concurrent=True)
                                for b in (first, second, bad)])
    a, b = futures[0].result(30), futures[1].result(30)
    assert a.seq < b.seq and a.body["moved"] == 2
    assert not futures[2].done()  # the bad bundle: answered event by event
    assert each[0].result(30).seq == each[3].result(30).seq
    with pytest.raises(RequestError, match="999999"):
        each[1].result(30)
    with pytest.raises(RequestError, match="offset"):
        each[2].result(30)
    for rows in ([row(1, 40), row(2, 41)], [row(1, 42), row(3, 43)], [row(4, 44)],
                 [row(7, 47)]):
        oracle.apply("move", rows)
    msgs = [{**m, "time": 500.0} for m in message_rows(workload, andorra)[:40]]
    answer = applier.publish(msgs).result(30)
    oracle.apply("publish", msgs)
    want = Deliveries.concat([oracle.deliveries[m["id"]] for m in msgs])
    assert_same(as_deliveries(answer.body["deliveries"]), want, "after the bundles")


def test_single_moves_join_the_bundles_run(
        running: _Running, workload: Workload, move_points: EdgePoints,
        andorra: RoadNetwork) -> None:
    """A one-object move (an MQTT read of one event) joins the bundles around it in one
    batch while no id repeats; a repeated id starts the next run (the later position
    wins). The answers equal the moves applied one by one."""
    state, parser, applier, oracle = running
    subs = subscription_rows(workload, andorra)[:200]
    applier.call(lambda: state.subscribe(parser.subscriptions(subs))).result(30)
    oracle.apply("subscribe", subs)

    def row(i: int, k: int) -> dict[str, Any]:
        return {"id": subs[i]["id"], **location_of(andorra, move_points, k)}

    def bundle(rows: list[dict[str, Any]]) -> MoveBundle:
        return MoveBundle(rows, [Future() for _ in rows], Future())

    plan: list[Any] = [bundle([row(1, 50), row(2, 51)]), row(3, 52), bundle([row(4, 53)]),
                       row(5, 54), row(1, 55), bundle([row(6, 56), row(2, 57)])]
    futures = _queued(applier, [lambda b=b: applier.move(b, concurrent=True) for b in plan])
    seq = [f.result(30).seq for f in futures]
    assert seq[0] == seq[1] == seq[2] == seq[3] < seq[4] == seq[5]
    for p in plan:
        oracle.apply("move", p.rows if isinstance(p, MoveBundle) else [p])
    msgs = [{**m, "time": 500.0} for m in message_rows(workload, andorra)[:40]]
    answer = applier.publish(msgs).result(30)
    oracle.apply("publish", msgs)
    want = Deliveries.concat([oracle.deliveries[m["id"]] for m in msgs])
    assert_same(as_deliveries(answer.body["deliveries"]), want, "after the moves")


@pytest.mark.parametrize("pipelined", [True, False])
def test_a_busy_group_of_pipelined_events_waits_for_more(
        service_dir: Path, andorra: RoadNetwork, tweets: list[list[str]],
        workload: Workload, move_points: EdgePoints, pipelined: bool) -> None:
    """While events keep arriving, a group of pipelined events (MQTT's: their senders do
    not wait for answers) waits up to ``wait_ms`` for more: a move queued after a publish
    joins its group and is applied first (they are concurrent). A closed-loop sender's
    publish is applied at once. Either way the answers equal the log's order."""
    state = ServiceState.open(service_dir, ServiceOptions())
    parser = BodyParser(andorra, max_snap_m=250.0)
    applier = Applier(state, parser, group_max=64, wait_ms=2000)
    oracle = Oracle(andorra, tweet_weights(tweets), dmax_m=DMAX_M)
    try:
        subs = subscription_rows(workload, andorra)[:300]
        applier.call(lambda: state.subscribe(parser.subscriptions(subs))).result(30)
        oracle.apply("subscribe", subs)
        msgs = [{**m, "time": 100.0} for m in message_rows(workload, andorra)[:20]]
        # every subscription moved next to the first message: its deliveries change
        moves = [{"id": s["id"], "u": msgs[0]["u"], "v": msgs[0]["v"],
                  "offset": msgs[0]["offset"]} for s in subs[:100]]
        entered, gate = threading.Event(), threading.Event()
        applier.call(lambda: (entered.set(), gate.wait(10)))
        assert entered.wait(10)  # the apply thread is busy: what comes next queues up
        published = applier.publish(msgs, concurrent=True, pipelined=pipelined)
        time.sleep(0.05)
        t0 = time.monotonic()
        gate.set()  # the publish is queued behind the gate: events kept arriving
        time.sleep(0.2)
        moved = applier.move(moves, concurrent=True, pipelined=pipelined)
        p, m = published.result(30), moved.result(30)
        if pipelined:
            assert m.seq < p.seq and time.monotonic() - t0 >= 1.9
            order = [("move", moves), ("publish", msgs)]
        else:
            assert p.seq < m.seq
            order = [("publish", msgs), ("move", moves)]
        for kind, body in order:
            oracle.apply(kind, body)
        want = Deliveries.concat([oracle.deliveries[x["id"]] for x in msgs])
        assert_same(as_deliveries(p.body["deliveries"]), want, "the publish")
    finally:
        applier.call(state.close).result(60)
        applier.stop()
