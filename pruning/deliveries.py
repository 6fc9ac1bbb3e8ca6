"""Match results: one row per (message, subscription) delivery."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["Deliveries"]


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
    def concat(cls, parts: list[Deliveries]) -> Deliveries:
        """Join parts and sort by (message_id, subscription_id)."""
        if not parts:
            return cls.empty()
        mid = np.concatenate([p.message_id for p in parts])
        sid = np.concatenate([p.subscription_id for p in parts])
        order = np.lexsort((sid, mid))
        return cls(mid[order], sid[order],
                   np.concatenate([p.distance for p in parts])[order],
                   np.concatenate([p.score for p in parts])[order])

    def pairs(self) -> set[tuple[int, int]]:
        """The delivered (message_id, subscription_id) pairs (for tests and comparisons)."""
        return set(zip(self.message_id.tolist(), self.subscription_id.tolist(), strict=True))

    def to_columns(self) -> dict[str, npt.NDArray[np.generic]]:
        """Columns named as in the deliveries file."""
        return {"message_id": self.message_id, "subscription_id": self.subscription_id,
                "distance": self.distance, "score": self.score}
