"""Subscription kinds beyond PSTPSN's threshold: boolean range and top-k sliding window.

* ``threshold`` (the default; :class:`~roadpubsub.index.model.Subscriptions`): deliver m to s iff
  dN(s, m) <= Dmax and SIM(s, m) >= s.tau (PSTPSN).
* ``boolean`` (:class:`BooleanSubscriptions`; Li et al., the AP-tree): deliver m to s iff
  m holds every keyword of s and dN(s, m) <= s.radius (metres, 0 <= radius <= Dmax).
* ``topk`` (:class:`TopkSubscriptions`; Skype): s keeps the k messages of the last W with
  the best SIM(s, m) (alpha as for threshold subscriptions, no tau), among those with
  dN(s, m) <= Dmax; ties are broken in favour of the newer message.

A file may mix the kinds (``kind`` column, :func:`roadpubsub.index.kinds_io.read_subscription_set`);
:class:`SubscriptionSet` holds one columnar batch per kind, sharing one vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from roadpubsub.index.model import (
    InvalidSubscriptionError,
    KeywordRows,
    Subscriptions,
    check_rows,
    describe_ids,
    keyword_and_id_problems,
)
from roadpubsub.roadnet.locations import EdgePoints

__all__ = ["KIND_BOOLEAN", "KIND_CODES", "KIND_THRESHOLD", "KIND_TOPK", "SUBSCRIPTION_KIND_NAMES",
           "BooleanSubscriptions", "SubscriptionSet", "TopkSubscriptions",
           "empty_subscriptions"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

KIND_THRESHOLD = "threshold"
KIND_BOOLEAN = "boolean"
KIND_TOPK = "topk"
#: The values of the ``kind`` column (null means threshold).
SUBSCRIPTION_KIND_NAMES = (KIND_THRESHOLD, KIND_BOOLEAN, KIND_TOPK)
#: Code of each kind name (the index in SUBSCRIPTION_KIND_NAMES).
KIND_CODES = {name: code for code, name in enumerate(SUBSCRIPTION_KIND_NAMES)}


@dataclass(frozen=True, eq=False)
class BooleanSubscriptions(KeywordRows):
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
        Keyword sets (CSR of term ids, as :class:`~roadpubsub.index.model.Subscriptions`): a message
        must hold every one of them.
    """

    ids: IntArray
    points: EdgePoints
    radius: FloatArray
    kw_ptr: IntArray
    kw_terms: npt.NDArray[np.int32]

    def __post_init__(self) -> None:
        check_rows(self.ids.size, (len(self.points), self.radius.size), self.kw_ptr)
        problems = keyword_and_id_problems(self.ids, self.kw_ptr)
        bad = ~(np.isfinite(self.radius) & (self.radius >= 0))
        if bad.any():
            problems.append(f"radius not a number of metres >= 0: ids "
                            f"{describe_ids(self.ids, bad)}")
        if problems:
            msg = "invalid boolean subscriptions: " + "; ".join(problems)
            raise InvalidSubscriptionError(msg)

    @classmethod
    def empty(cls) -> BooleanSubscriptions:
        """A batch with no rows."""
        return cls(np.empty(0, np.int64), _no_points(), np.empty(0), np.zeros(1, np.int64),
                   np.empty(0, np.int32))


@dataclass(frozen=True, eq=False)
class TopkSubscriptions(KeywordRows):
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

    def __post_init__(self) -> None:
        check_rows(self.ids.size, (len(self.points), self.alpha.size, self.k.size),
                    self.kw_ptr)
        problems = keyword_and_id_problems(self.ids, self.kw_ptr)
        bad_alpha = ~((self.alpha >= 0) & (self.alpha <= 1))
        if bad_alpha.any():
            problems.append(f"alpha outside [0, 1]: ids {describe_ids(self.ids, bad_alpha)}")
        bad_k = self.k < 1
        if bad_k.any():
            problems.append(f"k < 1: ids {describe_ids(self.ids, bad_k)}")
        if problems:
            msg = "invalid top-k subscriptions: " + "; ".join(problems)
            raise InvalidSubscriptionError(msg)

    @classmethod
    def empty(cls) -> TopkSubscriptions:
        """A batch with no rows."""
        return cls(np.empty(0, np.int64), _no_points(), np.empty(0), np.empty(0, np.int64),
                   np.zeros(1, np.int64), np.empty(0, np.int32))


def empty_subscriptions() -> Subscriptions:
    """A threshold batch with no rows."""
    return Subscriptions(np.empty(0, np.int64), _no_points(), np.empty(0), np.empty(0),
                         np.zeros(1, np.int64), np.empty(0, np.int32))


def _no_points() -> EdgePoints:
    return EdgePoints(np.empty(0, np.int32), np.empty(0))


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
        return cls(subs, BooleanSubscriptions.empty(), TopkSubscriptions.empty())
