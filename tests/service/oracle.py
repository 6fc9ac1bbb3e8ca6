"""The reference replay: events applied to plain dictionaries, messages matched by
:func:`roadpubsub.pruning.brute.match_brute` (no index, no log, no service code).

Keyword ids depend on the order terms are first seen, and TSIM sums weights in id order,
so the oracle registers each subscription's terms when its event is replayed, in log
order, as the service does: both then hold the same ids and score bit-identically.

Expiry: a publish first purges every subscription whose ``expires_at`` the clock has
reached (the tests' expiry times lie far from the clock, so the oracle's and the server's
readings purge the same), then a message is delivered only to subscriptions with
``expires_at`` > its time.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from roadpubsub.index.model import Messages, Subscriptions
from roadpubsub.index.terms import TermWeights
from roadpubsub.pruning.brute import match_brute
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.roadnet.locations import EdgePoints, locate_uv
from roadpubsub.roadnet.network import RoadNetwork

__all__ = ["Oracle", "as_deliveries", "assert_same"]


class Oracle:
    """Replays (op, rows) events in order."""

    def __init__(self, network: RoadNetwork, weights: TermWeights, *, dmax_m: float) -> None:
        self.network = network
        self.weights = weights
        self.dmax_m = dmax_m
        self.subs: dict[int, dict[str, Any]] = {}
        self.deliveries: dict[int, Deliveries] = {}

    def _points(self, rows: list[dict[str, Any]]) -> EdgePoints:
        return locate_uv(self.network, [r["u"] for r in rows], [r["v"] for r in rows],
                         [r["offset"] for r in rows])

    def apply(self, op: str, rows: list[dict[str, Any]]) -> None:
        if op == "subscribe":
            pts = self._points(rows)
            for k, r in enumerate(rows):
                assert r["id"] not in self.subs
                self.weights.ids(r["keywords"], add=True)
                self.subs[r["id"]] = {**r, "edge": int(pts.edge[k]),
                                      "pos": float(pts.offset[k])}
        elif op == "unsubscribe":
            for r in rows:
                del self.subs[r["id"]]
        elif op == "move":
            pts = self._points(rows)
            for k, r in enumerate(rows):
                self.subs[r["id"]].update(edge=int(pts.edge[k]), pos=float(pts.offset[k]),
                                          u=r["u"], v=r["v"], offset=r["offset"])
        elif op == "publish":
            times = sorted({r["time"] for r in rows})
            clock = time.time()
            for sid in [s for s, r in self.subs.items()
                        if r.get("expires_at") is not None and r["expires_at"] <= clock]:
                del self.subs[sid]
            for t in times:
                now = [r for r in rows if r["time"] == t]
                self._match(now)
        else:
            raise ValueError(op)

    def _match(self, rows: list[dict[str, Any]]) -> None:
        ids = sorted(self.subs)
        live = [self.subs[i] for i in ids]
        subs = Subscriptions.from_rows(
            ids=np.asarray(ids, dtype=np.int64),
            points=EdgePoints.of([r["edge"] for r in live], [r["pos"] for r in live]),
            keywords=[r["keywords"] for r in live], alpha=[r["alpha"] for r in live],
            tau=[r["tau"] for r in live], weights=self.weights)
        messages = Messages.from_rows(ids=[r["id"] for r in rows], points=self._points(rows),
                                      keywords=[r["keywords"] for r in rows],
                                      weights=self.weights)
        found = unexpired(match_brute(self.network, subs, messages, self.weights,
                                      dmax_m=self.dmax_m), self.subs, rows)
        for r in rows:
            mine = found.message_id == r["id"]
            self.deliveries[r["id"]] = Deliveries(found.message_id[mine],
                                                  found.subscription_id[mine],
                                                  found.distance[mine], found.score[mine])


def unexpired(found: Deliveries, subs: dict[int, dict[str, Any]],
              rows: list[dict[str, Any]]) -> Deliveries:
    """``found`` without deliveries to subscriptions expired at the message's time."""
    when = {r["id"]: r["time"] for r in rows}
    keep = np.array([subs[s].get("expires_at") is None or subs[s]["expires_at"] > when[m]
                     for m, s in zip(found.message_id.tolist(),
                                     found.subscription_id.tolist(), strict=True)],
                    dtype=bool)
    return Deliveries(found.message_id[keep], found.subscription_id[keep],
                      found.distance[keep], found.score[keep])


def as_deliveries(objs: list[dict[str, Any]]) -> Deliveries:
    """JSON delivery objects as sorted columns."""
    return Deliveries.concat([Deliveries(
        np.asarray([d["message_id"] for d in objs], dtype=np.int64),
        np.asarray([d["subscription_id"] for d in objs], dtype=np.int64),
        np.asarray([d["distance"] for d in objs], dtype=np.float64),
        np.asarray([d["score"] for d in objs], dtype=np.float64))])


def assert_same(got: Deliveries, want: Deliveries, what: str) -> None:
    """Equal pairs, and bit-identical distances and scores."""
    assert len(got) == len(got.pairs()), f"{what}: duplicated deliveries"
    assert got.pairs() == want.pairs(), (
        f"{what}: missing {sorted(want.pairs() - got.pairs())[:5]}, "
        f"extra {sorted(got.pairs() - want.pairs())[:5]}")
    assert np.array_equal(got.distance, want.distance), what
    assert np.array_equal(got.score, want.score), what
