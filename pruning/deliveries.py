"""Match results: one row per (message, subscription) delivery."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["Deliveries", "sort_order"]


def sort_order(message_id: npt.NDArray[np.int64], subscription_id: npt.NDArray[np.int64]
               ) -> npt.NDArray[np.int64]:
    """The stable order by (message_id, subscription_id), as ``np.lexsort`` gives it.

    Both ids are packed into one int64 key when their ranges allow (always, for ids below
    about 3e9 each): one sort of one key instead of ``np.lexsort`` on two (the lexsort
    was a noticeable share of EIA's matching time; figures in BENCHMARKS.md). Other
    ranges, or ids that do not fit int64, fall back to ``np.lexsort``.
    """
    if message_id.size < 2:
        return np.arange(message_id.size, dtype=np.int64)
    if not (np.can_cast(message_id.dtype, np.int64) and np.can_cast(subscription_id.dtype,
                                                                    np.int64)):
        return np.lexsort((subscription_id, message_id)).astype(np.int64, copy=False)
    # The key is computed in int64 whatever the ids' own integer type.
    message_id = message_id.astype(np.int64, copy=False)
    subscription_id = subscription_id.astype(np.int64, copy=False)
    m_lo, m_hi = int(message_id.min()), int(message_id.max())
    s_lo, s_hi = int(subscription_id.min()), int(subscription_id.max())
    span = s_hi - s_lo + 1
    if (m_hi - m_lo + 1) * span <= np.iinfo(np.int64).max:  # Python ints: no overflow
        key = (message_id - m_lo) * span + (subscription_id - s_lo)
        return np.argsort(key, kind="stable").astype(np.int64, copy=False)
    return np.lexsort((subscription_id, message_id)).astype(np.int64, copy=False)


@dataclass(frozen=True, eq=False)
class Deliveries:
    """Deliveries as columns, sorted by (message_id, subscription_id).

    ``distance`` is the network distance in metres from the subscription's location to the
    message's location; ``score`` is SIM(s, m) (paper Eq. 1).
    """

    message_id: npt.NDArray[np.int64]
    subscription_id: npt.NDArray[np.int64]
    distance: npt.NDArray[np.float64]
    score: npt.NDArray[np.float64]

    def __len__(self) -> int:
        return int(self.message_id.size)

    @classmethod
    def empty(cls) -> Deliveries:
        """No deliveries."""
        return cls(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0), np.empty(0))

    @classmethod
    def concat(cls, parts: Iterable[Deliveries]) -> Deliveries:
        """Join parts and sort by (message_id, subscription_id).

        Examples
        --------
        >>> import numpy as np
        >>> a = Deliveries(np.array([2]), np.array([7]), np.array([10.0]), np.array([0.5]))
        >>> b = Deliveries(np.array([1]), np.array([9]), np.array([30.0]), np.array([1.0]))
        >>> Deliveries.concat([a, b]).message_id.tolist()
        [1, 2]
        """
        parts = list(parts)
        if not parts:
            return cls.empty()
        mid = np.concatenate([p.message_id for p in parts])
        sid = np.concatenate([p.subscription_id for p in parts])
        order = sort_order(mid, sid)
        return cls(mid[order], sid[order],
                   np.concatenate([p.distance for p in parts])[order],
                   np.concatenate([p.score for p in parts])[order])

    def take(self, rows: npt.ArrayLike) -> Deliveries:
        """The deliveries at ``rows``: a boolean mask of ``len(self)`` entries, or row
        numbers (kept in the order given; ascending ones keep the sort order).

        Examples
        --------
        >>> import numpy as np
        >>> d = Deliveries(np.array([1, 1, 2]), np.array([4, 5, 4]), np.zeros(3), np.ones(3))
        >>> d.take(d.subscription_id != 5).pairs() == {(1, 4), (2, 4)}
        True
        """
        r = np.asarray(rows)
        if r.dtype == np.bool_ and r.shape != self.message_id.shape:
            msg = f"a mask of {len(self)} entries is needed, got shape {r.shape}"
            raise ValueError(msg)
        return Deliveries(self.message_id[r], self.subscription_id[r], self.distance[r],
                          self.score[r])

    def pairs(self) -> set[tuple[int, int]]:
        """The delivered (message_id, subscription_id) pairs (for tests and comparisons)."""
        return set(zip(self.message_id.tolist(), self.subscription_id.tolist(), strict=True))

    def to_columns(self) -> dict[str, npt.NDArray[np.generic]]:
        """Columns named as in the deliveries file."""
        return {"message_id": self.message_id, "subscription_id": self.subscription_id,
                "distance": self.distance, "score": self.score}
