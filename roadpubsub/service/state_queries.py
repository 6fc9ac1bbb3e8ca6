"""Read-only queries of the service state: subscriptions as rows, counts, a message's
recorded deliveries."""

from __future__ import annotations

from typing import Any

import numpy as np

from roadpubsub.index.io import subscriptions_table
from roadpubsub.index.kinds import (
    KIND_BOOLEAN,
    KIND_CODES,
    KIND_TOPK,
    BooleanSubscriptions,
    SubscriptionSet,
    TopkSubscriptions,
)
from roadpubsub.index.kinds_io import subscription_set_table
from roadpubsub.index.model import Subscriptions
from roadpubsub.pruning.live_kinds import empty_boolean, empty_topk
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.service.results import deliveries_json
from roadpubsub.service.state_core import IntArray
from roadpubsub.service.state_record import StateRecording
from roadpubsub.service.topk_found import topk_json

__all__ = ["StateQueries"]


class StateQueries(StateRecording):
    """Answers reads of the state (see the module docstring)."""

    def subscription_rows(self, ids: IntArray) -> list[dict[str, Any]]:
        """Live subscriptions as rows of the subscriptions schema, with ``expires_at``;
        boolean and top-k rows also with ``kind``, ``radius``, ``k`` (top-k rows with
        ``topk``, the current top-k: message_id, rank, score, distance); route and area
        rows with ``geometry`` (:meth:`~roadpubsub.service.live_sets.LiveSets.row_json`)."""
        if len(self.sets):
            on = self.sets.contains(ids)
            if on.any():
                by_id = {i: self.sets.row_json(i) for i in ids[on].tolist()}
                for r in self._point_rows(ids[~on]) if (~on).any() else []:
                    by_id[r["id"]] = r
                for i in ids[on].tolist():
                    by_id[i]["expires_at"] = self.expiry.at.get(i)
                    if i in self.webhook_of:
                        by_id[i]["webhook"] = self.webhook_of[i]
                    if i in self.mqtt_of:
                        by_id[i]["mqtt"] = self.mqtt_of[i]
                return [by_id[i] for i in ids.tolist()]
        return self._point_rows(ids)

    def _point_rows(self, ids: IntArray) -> list[dict[str, Any]]:
        if not self._kinds_live():
            subs = self.index._rows_of(ids)  # one lookup per id, no pass over the index
            return self._rows(subs)
        thr = self.index.contains(ids)
        boo = ~thr & self.boolean.contains(ids)
        top = ~thr & ~boo
        rows = self._rows(self.index._rows_of(ids[thr]), self.boolean.rows_of(ids[boo]),
                          self.topk.rows_of(ids[top]))
        by_id = {r["id"]: r for r in rows}
        return [by_id[i] for i in ids.tolist()]

    def _rows(self, subs: Subscriptions, boolean: BooleanSubscriptions | None = None,
              topk: TopkSubscriptions | None = None) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = subscriptions_table(
            subs, network=self.index.network, weights=self.index.weights).to_pylist() \
            if len(subs) else []
        for r in rows:
            r.update(kind="threshold", radius=None, k=None)
        if (boolean is not None and len(boolean)) or (topk is not None and len(topk)):
            other = SubscriptionSet(Subscriptions.from_rows(
                ids=np.empty(0, np.int64), points=EdgePoints.of([], []), keywords=[],
                alpha=np.empty(0), tau=np.empty(0), weights=self.index.weights),
                boolean if boolean is not None else empty_boolean(),
                topk if topk is not None else empty_topk())
            more = subscription_set_table(other, network=self.index.network,
                                          weights=self.index.weights,
                                          lonlat=True).to_pylist()
            if topk is not None and len(topk):
                tops = iter(self.topk.results(topk.ids))
                for r in more:
                    if r["kind"] == KIND_TOPK:
                        r["topk"] = next(tops)
            rows += more
        for r in rows:
            r["expires_at"] = self.expiry.at.get(r["id"])
            if r["id"] in self.webhook_of:
                r["webhook"] = self.webhook_of[r["id"]]
            if r["id"] in self.mqtt_of:
                r["mqtt"] = self.mqtt_of[r["id"]]
        return rows

    def list_subscriptions(self, *, after: int | None, limit: int) -> list[dict[str, Any]]:
        """Up to ``limit`` live subscriptions with ids above ``after``, by id."""
        live = self.index.subscriptions()
        if not self._kinds_live():
            start = 0 if after is None else int(np.searchsorted(live.ids, after,
                                                                side="right"))
            return self._rows(live.take(np.arange(start, min(start + limit, len(live)))))
        ids = np.sort(np.concatenate([live.ids, self.boolean.subscriptions().ids,
                                      self.topk.subscriptions().ids, self.sets.ids()]))
        start = 0 if after is None else int(np.searchsorted(ids, after, side="right"))
        return self.subscription_rows(ids[start:start + limit])

    def subscription_count(self) -> dict[str, int]:
        """Live subscriptions per kind."""
        on_boo = self.sets.count(KIND_CODES[KIND_BOOLEAN])  # routes and areas count too
        return {"threshold": len(self.index) + len(self.sets) - on_boo,
                KIND_BOOLEAN: len(self.boolean) + on_boo, KIND_TOPK: len(self.topk)}

    def message(self, message_id: int) -> dict[str, Any] | None:
        """A published message's seq, time and deliveries, or None."""
        known = self.messages.get(message_id)
        if known is None:
            return None
        out = {"message_id": message_id, "seq": known[0], "time": known[1],
               "deliveries": deliveries_json(known[2], self.delivery_seqs(known[2]))}
        if message_id in self.topk_of:
            out["topk"] = topk_json(self.topk_of[message_id])
        return out
