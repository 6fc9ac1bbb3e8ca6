"""Subscription kinds beyond PSTPSN's threshold: boolean range and top-k sliding window.

* ``threshold`` (the default; :class:`~index.model.Subscriptions`): deliver m to s iff
  dN(s, m) <= Dmax and SIM(s, m) >= s.tau (PSTPSN).
* ``boolean`` (:class:`BooleanSubscriptions`; Li et al., the AP-tree): deliver m to s iff
  m holds every keyword of s and dN(s, m) <= s.radius (metres, 0 <= radius <= Dmax).
* ``topk`` (:class:`TopkSubscriptions`; Skype): s keeps the k messages of the last W with
  the best SIM(s, m) (alpha as for threshold subscriptions, no tau), among those with
  dN(s, m) <= Dmax; ties are broken in favour of the newer message.

A file may mix the kinds (``kind`` column, :func:`index.kinds_io.read_subscription_set`);
:class:`SubscriptionSet` holds one columnar batch per kind, sharing one vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from index.model import InvalidSubscriptionError, Subscriptions, _duplicates, _ids, _take_csr
from roadnet.locations import EdgePoints

__all__ = ["KIND_BOOLEAN", "KIND_THRESHOLD", "KIND_TOPK", "SUBSCRIPTION_KIND_NAMES",
           "BooleanSubscriptions", "SubscriptionSet", "TopkSubscriptions",
           "empty_subscriptions"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

KIND_THRESHOLD = "threshold"
KIND_BOOLEAN = "boolean"
KIND_TOPK = "topk"
#: The values of the ``kind`` column (null means threshold).
SUBSCRIPTION_KIND_NAMES = (KIND_THRESHOLD, KIND_BOOLEAN, KIND_TOPK)


def _check_common(ids: IntArray, n_points: int, kw_ptr: IntArray, columns: tuple[int, ...],
                  problems: list[str]) -> None:
    n = ids.size
    if not (n_points == n and kw_ptr.size == n + 1 and all(c == n for c in columns)):
        msg = "subscription columns must all have one row per subscription"
        raise InvalidSubscriptionError(msg)
    empty = np.diff(kw_ptr) == 0
    if empty.any():
        problems.append(f"empty keyword list: ids {_ids(ids, empty)}")
    dup = _duplicates(ids)
    if dup.any():
        problems.append(f"duplicate ids: {_ids(ids, dup)}")


@dataclass(frozen=True, eq=False)
class BooleanSubscriptions:
    """Boolean range subscriptions as arrays.

    Attributes
    ----------
    ids
        Unique int64 ids.
    points
        Locations on the network.
    radius
        Largest network distance dN(s, m) in metres, finite and >= 0.
    kw_ptr, kw_terms
        Keyword sets (CSR of term ids, as :class:`~index.model.Subscriptions`): a message
        must hold every one of them.
    """

    ids: IntArray
    points: EdgePoints
    radius: FloatArray
    kw_ptr: IntArray
    kw_terms: npt.NDArray[np.int32]

    def __len__(self) -> int:
        return int(self.ids.size)

    def __post_init__(self) -> None:
        problems: list[str] = []
        _check_common(self.ids, len(self.points), self.kw_ptr, (self.radius.size,), problems)
        bad = ~(np.isfinite(self.radius) & (self.radius >= 0))
        if bad.any():
            problems.append(f"radius not a number of metres >= 0: ids {_ids(self.ids, bad)}")
        if problems:
            msg = "invalid boolean subscriptions: " + "; ".join(problems)
            raise InvalidSubscriptionError(msg)

    def keywords(self, i: int) -> npt.NDArray[np.int32]:
        """Term ids of row i."""
        return self.kw_terms[self.kw_ptr[i]:self.kw_ptr[i + 1]]

    def take(self, rows: npt.ArrayLike) -> BooleanSubscriptions:
        """A new batch with the given rows, in that order."""
        r = np.asarray(rows, dtype=np.int64)
        ptr, terms = _take_csr(self.kw_ptr, self.kw_terms, r)
        return BooleanSubscriptions(self.ids[r], self.points[r], self.radius[r], ptr, terms)


@dataclass(frozen=True, eq=False)
class TopkSubscriptions:
    """Top-k sliding-window subscriptions as arrays.

    Attributes
    ----------
    ids
        Unique int64 ids.
    points
        Locations on the network.
    alpha
        Preference for nearness in SIM, in [0, 1].
    k
        How many messages the subscription keeps (int64, >= 1).
    kw_ptr, kw_terms
        Keyword sets (CSR of term ids).
    """

    ids: IntArray
    points: EdgePoints
    alpha: FloatArray
    k: IntArray
    kw_ptr: IntArray
    kw_terms: npt.NDArray[np.int32]

    def __len__(self) -> int:
        return int(self.ids.size)

    def __post_init__(self) -> None:
        problems: list[str] = []
        _check_common(self.ids, len(self.points), self.kw_ptr,
                      (self.alpha.size, self.k.size), problems)
        bad_alpha = ~((self.alpha >= 0) & (self.alpha <= 1))
        if bad_alpha.any():
            problems.append(f"alpha outside [0, 1]: ids {_ids(self.ids, bad_alpha)}")
        bad_k = self.k < 1
        if bad_k.any():
            problems.append(f"k < 1: ids {_ids(self.ids, bad_k)}")
        if problems:
            msg = "invalid top-k subscriptions: " + "; ".join(problems)
            raise InvalidSubscriptionError(msg)

    def keywords(self, i: int) -> npt.NDArray[np.int32]:
        """Term ids of row i."""
        return self.kw_terms[self.kw_ptr[i]:self.kw_ptr[i + 1]]

    def take(self, rows: npt.ArrayLike) -> TopkSubscriptions:
        """A new batch with the given rows, in that order."""
        r = np.asarray(rows, dtype=np.int64)
        ptr, terms = _take_csr(self.kw_ptr, self.kw_terms, r)
        return TopkSubscriptions(self.ids[r], self.points[r], self.alpha[r], self.k[r],
                                 ptr, terms)


def empty_subscriptions() -> Subscriptions:
    """A threshold batch with no rows."""
    return Subscriptions(np.empty(0, np.int64), EdgePoints(np.empty(0, np.int32), np.empty(0)),
                         np.empty(0), np.empty(0), np.zeros(1, np.int64), np.empty(0, np.int32))


@dataclass(frozen=True, eq=False)
class SubscriptionSet:
    """Subscriptions of every kind read from one file (ids unique across the kinds).

    Attributes
    ----------
    threshold, boolean, topk
        One batch per kind (possibly empty), keyword ids of one vocabulary.
    """

    threshold: Subscriptions
    boolean: BooleanSubscriptions
    topk: TopkSubscriptions

    def __len__(self) -> int:
        return len(self.threshold) + len(self.boolean) + len(self.topk)

    def counts(self) -> dict[str, int]:
        """Rows per kind."""
        return {KIND_THRESHOLD: len(self.threshold), KIND_BOOLEAN: len(self.boolean),
                KIND_TOPK: len(self.topk)}

    @classmethod
    def only_threshold(cls, subs: Subscriptions) -> SubscriptionSet:
        """A set holding only ``subs`` (threshold subscriptions)."""
        none = EdgePoints(np.empty(0, np.int32), np.empty(0))
        return cls(subs,
                   BooleanSubscriptions(np.empty(0, np.int64), none, np.empty(0),
                                        np.zeros(1, np.int64), np.empty(0, np.int32)),
                   TopkSubscriptions(np.empty(0, np.int64), none, np.empty(0),
                                     np.empty(0, np.int64), np.zeros(1, np.int64),
                                     np.empty(0, np.int32)))
