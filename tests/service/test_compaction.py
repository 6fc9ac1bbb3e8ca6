"""Compaction off the apply thread: events applied while the compacted index is built, and
after it is adopted, give exactly what the reference replay gives."""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from live import DMAX_M, location_of, message_rows, subscription_rows, tweet_weights
from oracle import Oracle, as_deliveries, assert_same

import roadpubsub.service.compactor as compactor_module
from roadpubsub.index.base import SubscriptionIndex
from roadpubsub.index.delta import build_compacted
from roadpubsub.index.events import BodyParser
from roadpubsub.index.workload import Workload
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.service.options import ServiceOptions
from roadpubsub.service.state import ServiceState


class _GatedBuild:
    """build_compacted that waits for the test's go before building, so that events are
    applied while a build is under way, at moments the test chooses."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.started = 0

    def __call__(self, index: SubscriptionIndex, given: Any) -> SubscriptionIndex:
        self.started += 1
        assert self.go.wait(600), "the test never let the build go"
        self.go.clear()
        return build_compacted(index, given)


def _live(oracle: Oracle) -> dict[int, tuple[int, float]]:
    return {i: (r["edge"], r["pos"]) for i, r in oracle.subs.items()}


def _index_live(state: ServiceState) -> dict[int, tuple[int, float]]:
    subs = state.index.subscriptions()
    return {int(i): (int(e), float(o)) for i, e, o in zip(
        subs.ids.tolist(), subs.points.edge.tolist(), subs.points.offset.tolist(),
        strict=True)}


@pytest.mark.parametrize("seed", [1, 2])
def test_events_during_a_background_compaction_equal_the_replay(
        service_dir: Path, workload: Workload, move_points: EdgePoints, andorra: RoadNetwork,
        tweets: list[list[str]], monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    # Compaction is due past 60 delta rows, so the stream below starts several builds.
    monkeypatch.setattr(SubscriptionIndex, "delta_due", lambda self: len(self.delta) > 60)
    gated = _GatedBuild()
    monkeypatch.setattr(compactor_module, "build_compacted", gated)
    rng = random.Random(seed)
    state = ServiceState.open(service_dir, ServiceOptions(snapshot_every=10**9))
    parser = BodyParser(andorra, max_snap_m=250.0)
    oracle = Oracle(andorra, tweet_weights(tweets), dmax_m=DMAX_M)
    subs = subscription_rows(workload, andorra)
    msgs = message_rows(workload, andorra)
    by_id = {r["id"]: r for r in subs}
    live: list[int] = []
    gone: list[int] = []
    n_new = n_msg = n_move = 0
    clock = 1000.0

    def subscribe(rows: list[dict[str, Any]]) -> None:
        state.subscribe(parser.subscriptions(rows))
        oracle.apply("subscribe", rows)
        live.extend(r["id"] for r in rows)

    try:
        first = [{**r, "expires_at": 1000.0 + rng.uniform(5, 400) if i % 7 == 0 else None}
                 for i, r in enumerate(subs[:300])]
        subscribe(first)
        n_new = 300
        assert state.compactor.running  # the first build waits at the gate
        released = 0
        for step in range(480):
            if step % 60 == 30 and state.compactor.running:
                gated.go.set()  # the build runs while the events below go on
                released += 1
            kind = rng.random()
            if kind < 0.55:
                k = rng.choice([1, 1, 3, 12])
                ids = rng.sample(live, min(k, len(live)))
                rows = [{"id": i, **location_of(andorra, move_points, n_move + j)}
                        for j, i in enumerate(ids)]
                n_move += len(ids)
                state.move(parser.moves(rows))
                oracle.apply("move", rows)
            elif kind < 0.65 and n_new < len(subs):
                rows = subs[n_new:n_new + rng.choice([1, 5])]
                n_new += len(rows)
                subscribe(rows)
            elif kind < 0.72 and gone:
                # the same id again, after it was unsubscribed (maybe during a build)
                sid = gone.pop(rng.randrange(len(gone)))
                subscribe([{**by_id[sid], **location_of(andorra, move_points, n_move)}])
                n_move += 1
            elif kind < 0.8 and len(live) > 50:
                ids = rng.sample(live, rng.choice([1, 4]))
                state.unsubscribe(np.asarray(ids, dtype=np.int64))
                oracle.apply("unsubscribe", [{"id": i} for i in ids])
                for i in ids:
                    live.remove(i)
                gone.extend(ids)
            elif n_msg < len(msgs):
                clock += rng.uniform(0, 3)
                rows = [{**msgs[n_msg], "time": clock}]
                n_msg += 1
                got = state.publish(parser.messages(rows))
                oracle.apply("publish", rows)
                # expiry removed some: keep the test's lists in step with the oracle
                for i in [i for i in live if i not in oracle.subs]:
                    live.remove(i)
                assert_same(as_deliveries(got.body["deliveries"]),
                            oracle.deliveries[rows[0]["id"]], f"step {step}")
            if step % 50 == 0:
                assert _index_live(state) == _live(oracle), f"step {step}"
        gated.go.set()
        if state.compactor.running:
            state.compactor.finish()
        assert _index_live(state) == _live(oracle)
        assert state.compactions >= 3, (state.compactions, released, gated.started)
        assert state.counts["expire"] > 0
        # a last message over the compacted index
        rows = [{**msgs[n_msg], "time": clock + 1}]
        got = state.publish(parser.messages(rows))
        oracle.apply("publish", rows)
        assert_same(as_deliveries(got.body["deliveries"]), oracle.deliveries[rows[0]["id"]],
                    "after the last compaction")
    finally:
        gated.go.set()
        state.close()
    # the snapshot written on close reopens to the same subscriptions
    again = ServiceState.open(service_dir, ServiceOptions())
    try:
        assert _index_live(again) == _live(oracle)
    finally:
        again.close()
