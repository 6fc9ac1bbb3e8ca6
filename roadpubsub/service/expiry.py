"""Expiry of live subscriptions: who expires when, the earliest first.

The rule (see :mod:`roadpubsub.service.state`): before a publish is matched, every
subscription with ``expires_at <=`` the server's clock is unsubscribed (:meth:`Expiry.due`);
a message's own time only decides its own deliveries.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = ["Expiry"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass
class Expiry:
    """Live subscriptions' expiry times (epoch seconds) and a lazy min-heap over them."""

    at: dict[int, float] = field(default_factory=dict)
    heap: list[tuple[float, int]] = field(default_factory=list)

    def add(self, ids: IntArray, expires: FloatArray) -> None:
        """Remember the expiry of new subscriptions (NaN: never)."""
        for i, t in zip(ids.tolist(), expires.tolist(), strict=True):
            if t == t:  # not NaN
                self.at[i] = t
                heapq.heappush(self.heap, (t, i))

    def remove(self, ids: IntArray) -> None:
        """Forget unsubscribed ids."""
        for i in ids.tolist():
            self.at.pop(i, None)

    def due(self, t: float) -> IntArray:
        """Ids whose expiry time is <= t (removed from the table)."""
        out = []
        while self.heap and self.heap[0][0] <= t:
            when, i = heapq.heappop(self.heap)
            if self.at.get(i) == when:
                del self.at[i]
                out.append(i)
        return np.asarray(out, dtype=np.int64)

    def arrays(self) -> tuple[IntArray, FloatArray]:
        """(ids, expires_at) of every live subscription that expires (for snapshots)."""
        ids = np.fromiter(self.at.keys(), dtype=np.int64, count=len(self.at))
        return ids, np.fromiter(self.at.values(), dtype=np.float64, count=len(self.at))
