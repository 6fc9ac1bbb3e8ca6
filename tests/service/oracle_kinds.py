"""The reference replay of mixed-kind events: threshold subscriptions by :class:`Oracle`
(match_brute), boolean ones by :class:`~roadpubsub.pruning.kinds_reference.BooleanBruteMatcher`,
top-k
ones by :class:`~roadpubsub.pruning.kinds_reference.TopkBruteMatcher` (no index, no service code).

Top-k with subscriptions that change mid-stream follows the service's documented rule: a
subscription's top-k is that of the window of the last W messages, so after any change of
the top-k subscriptions the reference builds a new brute matcher over the live ones and
feeds it the window (discarding those events); the following messages' events are then
compared. Terms are registered in log order, row by row across kinds, as the service does.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from oracle import Oracle, unexpired

from roadpubsub.index.kinds import BooleanSubscriptions, TopkSubscriptions
from roadpubsub.index.model import Messages, keyword_csr
from roadpubsub.index.terms import TermWeights
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.pruning.kinds_reference import BooleanBruteMatcher, TopkBruteMatcher
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork

__all__ = ["KindsOracle", "topk_rows"]

TopkRow = tuple[str, int, int, int, float, float, int]


def topk_rows(objs: list[dict[str, Any]]) -> list[TopkRow]:
    """Top-k event objects as comparable tuples (event, message, subscription, rank, score,
    distance, arrival)."""
    return [(o["event"], o["message_id"], o["subscription_id"], o["rank"], o["score"],
             o["distance"], o["arrival_id"]) for o in objs]


class KindsOracle:
    """Replays (op, rows) events of every kind in order."""

    def __init__(self, network: RoadNetwork, weights: TermWeights, *, dmax_m: float,
                 window: int) -> None:
        self.network, self.weights, self.dmax_m, self.window = network, weights, dmax_m, window
        self.thr = Oracle(network, weights, dmax_m=dmax_m)
        self.boolean: dict[int, dict[str, Any]] = {}
        self.topk: dict[int, dict[str, Any]] = {}
        self.ring: list[dict[str, Any]] = []  # the last W messages
        self.arrivals = 0
        self.tm: TopkBruteMatcher | None = None
        self.offset = 0
        self.deliveries: dict[int, Deliveries] = {}
        self.events: dict[int, list[TopkRow]] = {}

    # ------------------------------------------------------------------ subscriptions
    def _kind_of(self, sid: int) -> str:
        if sid in self.boolean:
            return "boolean"
        if sid in self.topk:
            return "topk"
        return "threshold"

    def subs(self) -> dict[int, dict[str, Any]]:
        """Every live subscription's row (threshold ones as Oracle keeps them)."""
        return {**self.thr.subs, **self.boolean, **self.topk}

    def apply(self, op: str, rows: list[dict[str, Any]]) -> None:
        if op == "subscribe":
            for r in rows:
                self.weights.ids(r["keywords"], add=True)  # log order, across kinds
            self.thr.apply(op, [r for r in rows if r.get("kind") in (None, "threshold")])
            pts = self.thr._points(rows)
            for k, r in enumerate(rows):
                place = {**r, "edge": int(pts.edge[k]), "pos": float(pts.offset[k])}
                if r.get("kind") == "boolean":
                    self.boolean[r["id"]] = place
                elif r.get("kind") == "topk":
                    self.topk[r["id"]] = place
                    self.tm = None
        elif op in ("unsubscribe", "move"):
            by = {"threshold": [], "boolean": [], "topk": []}  # type: dict[str, list[Any]]
            for r in rows:
                by[self._kind_of(r["id"])].append(r)
            if by["threshold"]:
                self.thr.apply(op, by["threshold"])
            for kind in ("boolean", "topk"):
                table = self.boolean if kind == "boolean" else self.topk
                if not by[kind]:
                    continue
                if kind == "topk":
                    self.tm = None
                if op == "unsubscribe":
                    for r in by[kind]:
                        del table[r["id"]]
                else:
                    pts = self.thr._points(by[kind])
                    for k, r in enumerate(by[kind]):
                        table[r["id"]].update(edge=int(pts.edge[k]), pos=float(pts.offset[k]),
                                              u=r["u"], v=r["v"], offset=r["offset"])
        elif op == "publish":
            clock = time.time()  # the server's clock purges (see Oracle)
            times = sorted({r["time"] for r in rows})
            first_now = [r for r in rows if r["time"] == times[0]]
            withdrawn: list[TopkRow] = []
            for table in (self.thr.subs, self.boolean, self.topk):
                gone = [s for s, r in table.items()
                        if r.get("expires_at") is not None and r["expires_at"] <= clock]
                if table is self.topk and gone:
                    # an expired top-k is evicted, bottom rank first, as the first
                    # message of the publish arrives (the batch matcher's rule)
                    for s in sorted(gone):
                        withdrawn += self._evictions(s, first_now[0]["id"])
                for s in gone:
                    del table[s]
                    if table is self.topk:
                        self.tm = None
            for t in times:
                now = [r for r in rows if r["time"] == t]
                self.thr._match(now)
                self._match_boolean(now)
                self._push_topk(now)
                if withdrawn:  # the canonical order: (phase, subscription), stable
                    first = now[0]["id"]
                    tagged = [(0, e) for e in withdrawn] + self._phases.pop(first)
                    self.events[first] = [e for _, e in sorted(
                        tagged, key=lambda x: (x[0], x[1][2]))]
                    withdrawn = []
                for r in now:
                    self.deliveries[r["id"]] = Deliveries.concat(
                        [self.thr.deliveries[r["id"]], self._bool_found[r["id"]]])
        else:
            raise ValueError(op)

    # ------------------------------------------------------------------ matching
    def _messages(self, rows: list[dict[str, Any]]) -> Messages:
        return Messages.from_rows(ids=[r["id"] for r in rows], points=self.thr._points(rows),
                                  keywords=[r["keywords"] for r in rows], weights=self.weights)

    def _match_boolean(self, rows: list[dict[str, Any]]) -> None:
        self._bool_found: dict[int, Deliveries] = {}
        found = Deliveries.empty()
        if self.boolean:
            ids = sorted(self.boolean)
            live = [self.boolean[i] for i in ids]
            ptr, terms = keyword_csr([r["keywords"] for r in live], self.weights, add=True)
            subs = BooleanSubscriptions(np.asarray(ids, np.int64), EdgePoints.of(
                [r["edge"] for r in live], [r["pos"] for r in live]),
                np.asarray([r["radius"] for r in live], float), ptr, terms)
            found = unexpired(BooleanBruteMatcher(self.network, subs, self.weights,
                                                  dmax_m=self.dmax_m).match(
                self._messages(rows)), self.boolean, rows)
        for r in rows:
            mine = found.message_id == r["id"]
            self._bool_found[r["id"]] = Deliveries(found.message_id[mine],
                                                   found.subscription_id[mine],
                                                   found.distance[mine], found.score[mine])

    def _topk_subs(self) -> TopkSubscriptions:
        ids = sorted(self.topk)
        live = [self.topk[i] for i in ids]
        ptr, terms = keyword_csr([r["keywords"] for r in live], self.weights, add=True)
        return TopkSubscriptions(np.asarray(ids, np.int64), EdgePoints.of(
            [r["edge"] for r in live], [r["pos"] for r in live]),
            np.asarray([r["alpha"] for r in live], float),
            np.asarray([r["k"] for r in live], np.int64), ptr, terms)

    def _ready(self) -> TopkBruteMatcher:
        if self.tm is None:
            self.tm = TopkBruteMatcher(self.network, self._topk_subs(), self.weights,
                                       dmax_m=self.dmax_m, window=self.window)
            if self.ring:
                self.tm.push(self._messages(self.ring))
            self.offset = self.arrivals - len(self.ring)
        return self.tm

    def _push_topk(self, rows: list[dict[str, Any]]) -> None:
        first = self.arrivals
        self._phases: dict[int, list[tuple[int, TopkRow]]] = {}
        for r in rows:
            self.events[r["id"]] = []
            self._phases[r["id"]] = []
        if self.topk:
            ev = self._ready().push(self._messages(rows))
            for seq, phase, e, mid, sid, rank, score, dist in ev.rows():
                arrival = rows[seq + self.offset - first]["id"]
                row = (("evict", "insert")[e], mid, sid, rank, score, dist, arrival)
                self.events[arrival].append(row)
                self._phases[arrival].append((phase, row))
        self.ring = (self.ring + rows)[-self.window:]
        self.arrivals += len(rows)

    def _evictions(self, sid: int, arrival: int) -> list[TopkRow]:
        tm = self._ready()
        r = int(np.flatnonzero(tm.subs.ids == sid)[0])
        first = self.arrivals - len(self.ring)
        top = list(reversed(tm._top[r]))  # best first
        return [("evict", int(self.ring[seq + self.offset - first]["id"]), sid, rank + 1,
                 score, tm._dist[r][seq], arrival)
                for rank, (score, seq) in reversed(list(enumerate(top)))]

    def results(self, sid: int) -> list[int]:
        """Subscription ``sid``'s top-k now (message ids, best first)."""
        tm = self._ready()
        r = int(np.flatnonzero(tm.subs.ids == sid)[0])
        first = self.arrivals - len(self.ring)  # arrival number of ring[0]
        # the brute keeps (score, seq) ascending, seq counted from its rebuild
        return [int(self.ring[seq + self.offset - first]["id"]) for _, seq in
                reversed(tm._top[r])]
