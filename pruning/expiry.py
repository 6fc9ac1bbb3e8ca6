"""Expiry of subscriptions: the one rule of every kind and every caller.

A subscription may carry ``expires_at`` = e (epoch seconds; NaN: never). Each message m
has a time t(m) (its own; without one, the clock when it is matched) and arrives at a
clock reading c(m):

* in the service, the server's clock at the publish, logged with it so that a replay
  reads the same (a message's own time never moves that clock: a message from the far
  future withholds itself from every expiring subscription but removes none);
* in a batch (``roadpubsub match``), which has no other clock, the message's own time:
  c(m) = t(m).

The rule:

1. deliveries: a threshold or boolean subscription is delivered m only when
   max(t(m), c(m)) < e, decided pair by pair (:func:`withhold_expired`);
2. withdrawal: a top-k subscription is withdrawn at the first message m, in stream order,
   with c(m) >= e: its results are evicted among m's events (phase 0, bottom rank first;
   :meth:`roadpubsub.pruning.topk.TopkIndexMatcher.push`) and it is offered no message after. Until
   then it is offered every message, whatever its time (a top-k result is a function of
   the stream: it cannot skip a message).

The service's clock only moves forward, so it also purges (:meth:`Expiry.due`): every
subscription with e <= c(m) is removed before m is matched, which rule 1 and 2 imply for
every later message. :class:`roadpubsub.pruning.mixed.MixedMatcher` applies both rules for every
caller.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from roadpubsub.pruning.deliveries import Deliveries

__all__ = ["Expiry", "withhold_expired"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

# Below this many deliveries the expiry of each is looked up in the table one by one;
# above it the table is sorted once and searched (a large batch).
_LOOKUP_ONE_BY_ONE = 4096


@dataclass
class Expiry:
    """Subscriptions' expiry times (epoch seconds) and a lazy min-heap over them.

    Examples
    --------
    >>> import numpy as np
    >>> e = Expiry.of([1, 2, 3], [10.0, np.nan, 5.0])
    >>> e.expires([1, 2, 3]).tolist()
    [10.0, inf, 5.0]
    >>> e.due(5.0).tolist()
    [3]
    """

    at: dict[int, float] = field(default_factory=dict)
    heap: list[tuple[float, int]] = field(default_factory=list)

    @classmethod
    def of(cls, ids: npt.ArrayLike, expires_at: npt.ArrayLike) -> Expiry:
        """A table of ``ids`` expiring at ``expires_at`` (seconds; NaN: never)."""
        e = cls()
        e.add(np.asarray(ids, dtype=np.int64), np.asarray(expires_at, dtype=np.float64))
        return e

    def __len__(self) -> int:
        return len(self.at)

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

    def due(self, clock: float) -> IntArray:
        """Ids whose expiry time is <= ``clock`` (rule 1; removed from the table)."""
        out = []
        while self.heap and self.heap[0][0] <= clock:
            when, i = heapq.heappop(self.heap)
            if self.at.get(i) == when:
                del self.at[i]
                out.append(i)
        return np.asarray(out, dtype=np.int64)

    def earliest(self) -> float:
        """A lower bound of every expiry in the table (+inf when none expires)."""
        return self.heap[0][0] if self.heap else math.inf

    def expires(self, ids: npt.ArrayLike) -> FloatArray:
        """The expiry of each id, seconds (+inf: never, or not in the table)."""
        q = np.asarray(ids, dtype=np.int64)
        if q.size <= _LOOKUP_ONE_BY_ONE or not self.at:
            at = self.at
            return np.fromiter((at.get(s, math.inf) for s in q.tolist()), dtype=np.float64,
                               count=q.size)
        ids_t, when = self.arrays()
        order = np.argsort(ids_t, kind="stable")
        ids_t, when = ids_t[order], when[order]
        pos = np.minimum(np.searchsorted(ids_t, q), ids_t.size - 1)
        return np.where(ids_t[pos] == q, when[pos], math.inf)

    def arrays(self) -> tuple[IntArray, FloatArray]:
        """(ids, expires_at) of every subscription that expires (for snapshots)."""
        ids = np.fromiter(self.at.keys(), dtype=np.int64, count=len(self.at))
        return ids, np.fromiter(self.at.values(), dtype=np.float64, count=len(self.at))


def withhold_expired(deliveries: Deliveries, expiry: Expiry, message_ids: npt.ArrayLike,
                     at: npt.ArrayLike) -> Deliveries:
    """``deliveries`` without those to subscriptions expired at their message (rule 2).

    Parameters
    ----------
    deliveries
        Deliveries of the messages ``message_ids`` (sorted, as every matcher gives them).
    expiry
        Who expires when.
    message_ids
        The batch's message ids (each once).
    at
        Per message, max(t(m), c(m)) in seconds: its time and the clock it arrived at
        (a scalar: the same for every message).

    Deliveries are decided pair by pair, so withholding the expired pairs afterwards
    gives exactly what matching without the expired subscriptions gives.
    """
    mids = np.asarray(message_ids, dtype=np.int64)
    when = np.broadcast_to(np.asarray(at, dtype=np.float64), mids.shape)
    # nothing expires at or before the latest reading: the common case, at no cost
    if not len(deliveries) or not when.size or float(when.max()) < expiry.earliest():
        return deliveries
    if when.min() == when.max():
        d_at = np.full(len(deliveries), float(when[0]))
    else:
        order = np.argsort(mids, kind="stable")
        d_at = when[order[np.searchsorted(mids[order], deliveries.message_id)]]
    keep = expiry.expires(deliveries.subscription_id) > d_at
    return deliveries if keep.all() else deliveries.take(keep)
