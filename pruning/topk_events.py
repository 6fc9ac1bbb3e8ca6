"""The output of top-k sliding-window matching: insertions into and evictions from results.

Each message arrival (number ``seq``, 0-based, in stream order) first expires the message
``seq - W`` (when there is one), then offers the new message:

* expiry (phase 0): for each subscription whose top-k held the expired message, an
  ``evict`` of it (with the rank it held), then, when the window holds a message that now
  enters the top-k, an ``insert`` of that message at rank k (the refill);
* arrival (phase 1): for each subscription whose top-k the new message enters, an ``evict``
  of the message it pushes out of a full top-k (rank k), then the ``insert`` of the new
  message at its rank.

* subscription changes (phase 2, between messages, ``seq`` = the last arrival number, -1
  before any message): a new subscription's top-k as inserts at ranks 1, 2, ...; a
  removed one's as evicts from its bottom rank up. A subscription withdrawn because its
  ``expires_at`` is reached is evicted the same way at phase 0 of the message whose
  time reaches it, before that message's expiries.

Ranks are 1-based, best first; an insert at rank r moves the members at ranks >= r down
one, an evict at rank r moves those below it up one, so replaying the events rebuilds
every subscription's top-k. Events are ordered by (seq, phase, subscription_id), and
within one subscription evict before insert.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["EVENT_EVICT", "EVENT_INSERT", "TopkEvents"]

#: Event codes of :attr:`TopkEvents.event`.
EVENT_EVICT = 0
EVENT_INSERT = 1
_EVENT_NAMES = np.array(["evict", "insert"], dtype=object)


def _canonical_order(seq: npt.NDArray[np.int64], phase: npt.NDArray[np.int8],
                     sid: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Stable order by (seq, phase, subscription_id): one packed int64 key when the ranges
    allow (a stable argsort of one key is several times faster than a 3-key lexsort),
    else np.lexsort."""
    if seq.size < 2:
        return np.arange(seq.size, dtype=np.int64)
    group = seq.astype(np.int64) * 3 + phase
    g_lo, g_hi = int(group.min()), int(group.max())
    s_lo, s_hi = int(sid.min()), int(sid.max())
    span = s_hi - s_lo + 1
    if (g_hi - g_lo + 1) * span <= np.iinfo(np.int64).max:  # Python ints: no overflow
        key = (group - g_lo) * span + (sid.astype(np.int64) - s_lo)
        return np.argsort(key, kind="stable").astype(np.int64, copy=False)
    return np.lexsort((sid, phase, seq)).astype(np.int64, copy=False)


@dataclass(frozen=True, eq=False)
class TopkEvents:
    """Top-k result changes as columns (see the module docstring for the order).

    Attributes
    ----------
    seq
        Arrival number of the message whose arrival caused the event.
    phase
        0 expiry, 1 arrival, 2 subscription change after message ``seq``.
    event
        :data:`EVENT_EVICT` or :data:`EVENT_INSERT` (int8).
    message_id, subscription_id
        The message entering or leaving the subscription's top-k.
    rank
        Its rank (1-based) after an insert, before an evict.
    score, distance
        SIM(s, m) and dN(s, m) in metres.
    """

    seq: npt.NDArray[np.int64]
    phase: npt.NDArray[np.int8]
    event: npt.NDArray[np.int8]
    message_id: npt.NDArray[np.int64]
    subscription_id: npt.NDArray[np.int64]
    rank: npt.NDArray[np.int64]
    score: npt.NDArray[np.float64]
    distance: npt.NDArray[np.float64]

    def __len__(self) -> int:
        return int(self.seq.size)

    @classmethod
    def empty(cls) -> TopkEvents:
        """No events."""
        i = np.empty(0, np.int64)
        b = np.empty(0, np.int8)
        return cls(i, b, b, i, i, i, np.empty(0), np.empty(0))

    @classmethod
    def concat(cls, parts: list[TopkEvents]) -> TopkEvents:
        """Join parts and put them in the canonical order (stable within a subscription)."""
        if not parts:
            return cls.empty()
        cols = {name: np.concatenate([getattr(p, name) for p in parts])
                for name in ("seq", "phase", "event", "message_id", "subscription_id", "rank",
                             "score", "distance")}
        order = _canonical_order(cols["seq"], cols["phase"], cols["subscription_id"])
        return cls(**{k: v[order] for k, v in cols.items()})

    def rows(self) -> list[tuple[int, int, int, int, int, int, float, float]]:
        """The events as tuples (for tests and comparisons)."""
        return list(zip(self.seq.tolist(), self.phase.tolist(), self.event.tolist(),
                        self.message_id.tolist(), self.subscription_id.tolist(),
                        self.rank.tolist(), self.score.tolist(), self.distance.tolist(),
                        strict=True))

    def to_columns(self) -> dict[str, npt.NDArray[np.generic]]:
        """Columns of the top-k events file (``event`` as the strings insert/evict)."""
        return {"seq": self.seq, "event": _EVENT_NAMES[self.event].astype(str),
                "message_id": self.message_id, "subscription_id": self.subscription_id,
                "rank": self.rank, "score": self.score, "distance": self.distance}

    def results(self) -> dict[int, list[int]]:
        """Every subscription's top-k after the last event (message ids, best first)."""
        out: dict[int, list[int]] = {}
        for ev, mid, sid, rank in zip(self.event.tolist(), self.message_id.tolist(),
                                      self.subscription_id.tolist(), self.rank.tolist(),
                                      strict=True):
            top = out.setdefault(sid, [])
            if ev == EVENT_INSERT:
                top.insert(rank - 1, mid)
            else:
                if top[rank - 1] != mid:
                    msg = f"evict of {mid} at rank {rank} of {sid}, which holds {top}"
                    raise AssertionError(msg)
                del top[rank - 1]
        return out
