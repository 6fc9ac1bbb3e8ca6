"""Top-k events of published messages with the message that caused each
(:class:`TopkFound`), and their JSON objects (:func:`topk_json`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from roadpubsub.pruning.topk_events import TopkEvents
from roadpubsub.service.deliveries_log import TOPK_COLUMNS

__all__ = ["TopkFound", "topk_json"]

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class TopkFound:
    """Top-k events of published messages: the events, and per event the id of the
    published message whose arrival caused it."""

    events: TopkEvents
    arrival_id: IntArray

    def __len__(self) -> int:
        return len(self.events)

    @classmethod
    def empty(cls) -> TopkFound:
        return cls(TopkEvents.empty(), np.empty(0, np.int64))

    @classmethod
    def concat(cls, parts: list[TopkFound]) -> TopkFound:
        """Join parts, in their order (each part is in the events' canonical order)."""
        parts = [p for p in parts if len(p)]
        if not parts:
            return cls.empty()
        if len(parts) == 1:
            return parts[0]
        e = [p.events for p in parts]
        return cls(TopkEvents(*(np.concatenate([getattr(x, f) for x in e]) for f in (
            "seq", "phase", "event", "message_id", "subscription_id", "rank", "score",
            "distance"))), np.concatenate([p.arrival_id for p in parts]))

    def only(self, message_ids: npt.ArrayLike) -> TopkFound:
        """The events caused by the given messages."""
        keep = np.isin(self.arrival_id, np.asarray(message_ids, dtype=np.int64))
        e = self.events
        return TopkFound(TopkEvents(e.seq[keep], e.phase[keep], e.event[keep],
                                    e.message_id[keep], e.subscription_id[keep],
                                    e.rank[keep], e.score[keep], e.distance[keep]),
                         self.arrival_id[keep])

    def by_arrival(self) -> list[tuple[int, TopkFound]]:
        """(message id, its events) per message that caused events (one sort)."""
        order = np.argsort(self.arrival_id, kind="stable")
        a = self.arrival_id[order]
        cuts = np.flatnonzero(np.diff(a)) + 1
        e = self.events
        out = []
        for rows in np.split(order, cuts) if a.size else []:
            out.append((int(self.arrival_id[rows[0]]), TopkFound(TopkEvents(
                e.seq[rows], e.phase[rows], e.event[rows], e.message_id[rows],
                e.subscription_id[rows], e.rank[rows], e.score[rows], e.distance[rows]),
                self.arrival_id[rows])))
        return out

    def columns(self) -> dict[str, npt.NDArray[Any]]:
        """Columns of the top-k log (:data:`~roadpubsub.service.deliveries_log.TOPK_COLUMNS`)."""
        return {"arrival_id": self.arrival_id, **self.events.to_columns()}

    @classmethod
    def from_table(cls, table: Any) -> TopkFound:
        """The events of top-k log segments (an Arrow table)."""
        col = {c: table.column(c).to_numpy(zero_copy_only=False) for c in TOPK_COLUMNS}
        event = np.where(col["event"].astype(str) == "insert", 1, 0).astype(np.int8)
        seq = np.asarray(col["seq"], np.int64)
        return cls(TopkEvents(seq, np.zeros(seq.size, np.int8), event,
                              np.asarray(col["message_id"], np.int64),
                              np.asarray(col["subscription_id"], np.int64),
                              np.asarray(col["rank"], np.int64),
                              np.asarray(col["score"], np.float64),
                              np.asarray(col["distance"], np.float64)),
                   np.asarray(col["arrival_id"], np.int64))


def topk_json(found: TopkFound) -> list[dict[str, Any]]:
    """Top-k events as the objects of the HTTP answers and the WebSocket stream:
    ``{"event": "insert"|"evict", "message_id", "subscription_id", "rank", "score",
    "distance", "arrival_id"}`` (``message_id`` enters or leaves the subscription's top-k;
    ``arrival_id`` is the published message whose arrival caused it)."""
    e = found.events
    names = ("evict", "insert")
    return [{"event": names[v], "message_id": m, "subscription_id": s, "rank": r,
             "score": y, "distance": x, "arrival_id": a}
            for v, m, s, r, y, x, a in zip(
                e.event.tolist(), e.message_id.tolist(), e.subscription_id.tolist(),
                e.rank.tolist(), e.score.tolist(), e.distance.tolist(),
                found.arrival_id.tolist(), strict=True)]
