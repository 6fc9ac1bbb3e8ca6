"""Matching a mixed set of subscriptions: threshold, boolean and top-k, with expiry.

One entry point for every caller (``roadpubsub match``, the service, the Spark jobs):
:class:`MixedMatcher` matches a batch of messages with each kind's own matcher, in one
order (threshold, then boolean: deliveries; then top-k: the events of the sliding window),
over one cell structure shared by the kinds' indexes, and applies the expiry rule of
:mod:`roadpubsub.pruning.expiry` to all of them. The result is one :class:`MixedResult`: the
deliveries (one :class:`~roadpubsub.pruning.deliveries.Deliveries`, a boolean delivery's score 1.0)
and the top-k events (:class:`~roadpubsub.pruning.topk_events.TopkEvents`).

Each kind's matcher has one interface: ``match(messages) -> Deliveries`` (threshold,
boolean; work counters in ``stats``) or ``push(messages, *, times=None, keywords=None) ->
TopkEvents`` (top-k). Batch matchers are built by :meth:`MixedMatcher.build`; the service
hands its live ones (:class:`~roadpubsub.pruning.live_kinds.LiveBoolean`,
:class:`~roadpubsub.pruning.live_topk.LiveTopk`) to the constructor.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from roadpubsub.index.kinds import SubscriptionSet
from roadpubsub.index.model import Messages
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.terms import TermWeights
from roadpubsub.pruning.boolean import BooleanIndexMatcher
from roadpubsub.pruning.brute import BruteMatcher
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.pruning.expiry import Expiry, withhold_expired
from roadpubsub.pruning.kinds_reference import BooleanBruteMatcher, TopkBruteMatcher, check_window
from roadpubsub.pruning.matchers import Matcher, build_matcher
from roadpubsub.pruning.set_locations import SetLocations
from roadpubsub.pruning.set_matchers import (
    PointsAndSets,
    SetBooleanMatcher,
    SetThresholdMatcher,
    split_set_rows,
)
from roadpubsub.pruning.topk import TopkIndexMatcher
from roadpubsub.pruning.topk_events import TopkEvents
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.settings import DEFAULTS

__all__ = ["MixedMatcher", "MixedResult", "TopkMatcher"]

FloatArray = npt.NDArray[np.float64]


class TopkMatcher(Protocol):
    """Top-k sliding-window matching: messages pushed in stream order."""

    def push(self, messages: Messages, *, times: npt.ArrayLike | None = None,
             keywords: Sequence[Sequence[str]] | None = None) -> TopkEvents:
        """The insert and evict events ``messages`` cause; ``times``: the clock (seconds)
        at each message, which withdraws expired subscriptions (:mod:`roadpubsub.pruning.expiry`);
        ``keywords``: the messages' keyword strings, for a vocabulary that may grow."""
        ...


@dataclass(frozen=True, eq=False)
class MixedResult:
    """What a batch of messages caused: deliveries (threshold and boolean subscriptions,
    sorted by message and subscription) and top-k events (canonical order)."""

    deliveries: Deliveries
    events: TopkEvents

    @classmethod
    def empty(cls) -> MixedResult:
        """Nothing delivered, no event."""
        return cls(Deliveries.empty(), TopkEvents.empty())

    @classmethod
    def concat(cls, parts: Iterable[MixedResult]) -> MixedResult:
        """Results of consecutive batches as one."""
        parts = list(parts)
        return cls(Deliveries.concat([p.deliveries for p in parts]),
                   TopkEvents.concat([p.events for p in parts]))


class MixedMatcher:
    """Matches messages against subscriptions of every kind, with expiry.

    Parameters
    ----------
    threshold, boolean
        Matchers with ``match(messages) -> Deliveries`` (None: no such subscriptions).
    topk
        A :class:`TopkMatcher` (None: no top-k subscriptions).
    expiry
        Who expires when (None: nobody). A top-k matcher applies rule 1 itself, from the
        expiry times it was built with (:meth:`build` gives it those of ``expiry``).

    Messages carry the term ids of the matchers' one vocabulary.

    Examples
    --------
    >>> import numpy as np
    >>> from roadpubsub.index.kinds import BooleanSubscriptions, SubscriptionSet, TopkSubscriptions
    >>> from roadpubsub.index.model import Messages, Subscriptions
    >>> from roadpubsub.index.terms import TermWeights
    >>> from roadpubsub.roadnet.locations import EdgePoints
    >>> net = RoadNetwork.from_arrays(node_ids=[1, 2], node_lon=[0.0, 0.01],
    ...     node_lat=[0.0, 0.0], edge_u_ids=[1], edge_v_ids=[2], edge_length=[1000.0],
    ...     edge_oneway=[False], directed=False, name="x")
    >>> w = TermWeights({"a": 1.0, "b": 1.0})
    >>> here, one = EdgePoints.of([0], [100.0]), np.array([0, 1])
    >>> subs = SubscriptionSet(
    ...     Subscriptions.from_rows(ids=[1], points=here, keywords=[["a"]], alpha=[0.5],
    ...                             tau=[0.1], weights=w),  # threshold
    ...     BooleanSubscriptions(np.array([2]), here, np.array([500.0]), one,
    ...                          np.array([0], np.int32)),  # "a" within 500 m
    ...     TopkSubscriptions(np.array([3]), here, np.array([0.5]), np.array([1]), one,
    ...                       np.array([1], np.int32)))  # the best 1 for "b"
    >>> matcher = MixedMatcher.build(net, subs, w, dmax_m=1000.0, window=10,
    ...                              expiry=Expiry.of([2], [50.0]))  # 2 expires at 50 s
    >>> msgs = Messages.from_rows(ids=[7, 8], points=EdgePoints.of([0, 0], [300.0, 400.0]),
    ...                           keywords=[["a", "b"], ["a"]], weights=w)
    >>> found = matcher.match(msgs, times=[10.0, 60.0])
    >>> sorted(found.deliveries.pairs())
    [(7, 1), (7, 2), (8, 1)]
    >>> found.events.message_id.tolist(), found.events.subscription_id.tolist()
    ([7], [3])
    """

    def __init__(self, *, threshold: Matcher | None = None, boolean: Matcher | None = None,
                 topk: TopkMatcher | None = None, expiry: Expiry | None = None) -> None:
        self.threshold, self.boolean, self.topk = threshold, boolean, topk
        self.expiry = expiry

    @classmethod
    def build(cls, network: RoadNetwork, subs: SubscriptionSet, weights: TermWeights, *,
              dmax_m: float, window: int = DEFAULTS.topk_window, index: str = "eia",
              spatial: SpatialIndex | None = None, expiry: Expiry | None = None,
              threads: int | None = None,
              tolerance: float = DEFAULTS.score_tolerance,
              threshold_sets: SetLocations | None = None,
              boolean_sets: SetLocations | None = None) -> MixedMatcher:
        """Each kind's matcher over its subscriptions of ``subs``.

        Parameters
        ----------
        network, weights
            The road network and the vocabulary of ``subs``.
        subs
            Subscriptions of every kind (a kind without rows gets no matcher).
        dmax_m
            Dmax in metres.
        window
            W, the top-k window: results come from the last W messages (>= 1).
        index
            ``"eia"`` or ``"bia"``: the threshold index (boolean and top-k use their own
            indexes); ``"brute"``: every kind's reference matcher (no index).
        spatial
            Cells and bounds (the costly part of every index's build) to share; built
            once for all the kinds' indexes when omitted.
        expiry
            Who expires when (None: nobody).
        threads
            Threads per batch of the threshold and boolean indexes (None: every core).
        tolerance
            Score tolerance of the threshold index's bounds (see
            :class:`~roadpubsub.index.base.SubscriptionIndex`).
        threshold_sets, boolean_sets
            Rows of ``subs.threshold`` / ``subs.boolean`` located on a route or an area
            instead of their point (issue 32): matched by the set index of
            :mod:`roadpubsub.pruning.set_matchers` (by the reference with ``index="brute"``) next to
            the point rows; None: every row is a point (no extra work).
        """
        brute = index == "brute"
        window = check_window(window)
        if spatial is None and not brute and len(subs):
            spatial = SpatialIndex.build(network)
        threshold: Matcher | None = None
        boolean: Matcher | None = None
        topk = None
        if brute and threshold_sets is not None and len(threshold_sets):
            threshold = BruteMatcher(network, subs.threshold, weights, dmax_m=dmax_m,
                                     set_locations=threshold_sets)
        elif threshold_sets is not None and len(threshold_sets):
            points, on_sets, sets = split_set_rows(subs.threshold, threshold_sets)
            threshold = PointsAndSets(
                build_matcher(index, network, points, weights, dmax_m=dmax_m,
                              spatial=spatial, threads=threads, tolerance=tolerance)
                if len(points) else None,
                SetThresholdMatcher(network, on_sets, sets, weights, dmax_m=dmax_m,
                                    spatial=spatial, tolerance=tolerance))
        elif len(subs.threshold):
            threshold = build_matcher(index, network, subs.threshold, weights, dmax_m=dmax_m,
                                      spatial=spatial, threads=threads, tolerance=tolerance)
        if brute and (len(subs.boolean) or (boolean_sets is not None and len(boolean_sets))):
            boolean = BooleanBruteMatcher(network, subs.boolean, weights, dmax_m=dmax_m,
                                          set_locations=boolean_sets)
        elif boolean_sets is not None and len(boolean_sets):
            bpoints, bsets_rows, bsets = split_set_rows(subs.boolean, boolean_sets)
            boolean = PointsAndSets(
                BooleanIndexMatcher(network, bpoints, weights, dmax_m=dmax_m,
                                    spatial=spatial, threads=threads)
                if len(bpoints) else None,
                SetBooleanMatcher(network, bsets_rows, bsets, weights, dmax_m=dmax_m,
                                  spatial=spatial))
        elif len(subs.boolean):
            boolean = BooleanIndexMatcher(network, subs.boolean, weights, dmax_m=dmax_m,
                                          spatial=spatial, threads=threads)
        if len(subs.topk):
            expires = None if expiry is None else _nan_never(expiry.expires(subs.topk.ids))
            topk = (TopkBruteMatcher(network, subs.topk, weights, dmax_m=dmax_m,
                                     window=window, expires_at=expires)
                    if brute else
                    TopkIndexMatcher(network, subs.topk, weights, dmax_m=dmax_m,
                                     window=window, spatial=spatial, expires_at=expires))
        return cls(threshold=threshold, boolean=boolean, topk=topk, expiry=expiry)

    def deliver(self, messages: Messages, *, at: npt.ArrayLike | None = None) -> Deliveries:
        """Deliveries of threshold, then boolean subscriptions, sorted by (message_id,
        subscription_id); messages in any order.

        ``at``: per message (or one for all), max(t(m), c(m)) in seconds, its time and the
        clock it arrived at (:mod:`roadpubsub.pruning.expiry`, rule 2); None: nothing expires.
        """
        parts = [m.match(messages) for m in (self.threshold, self.boolean) if m is not None]
        parts = [p for p in parts if len(p)]
        # one part is sorted already (every matcher's invariant): no copy
        found = parts[0] if len(parts) == 1 else Deliveries.concat(parts)
        if self.expiry is None or at is None:
            return found
        return withhold_expired(found, self.expiry, messages.ids, at)

    def push(self, messages: Messages, *, clock: npt.ArrayLike | None = None,
             keywords: Sequence[Sequence[str]] | None = None) -> TopkEvents:
        """Top-k events of ``messages`` in stream order; ``clock``: the clock (seconds) at
        each message, or one for all (rule 1; None: nobody is withdrawn); ``keywords``:
        the messages' keyword strings, for a top-k matcher whose vocabulary grows."""
        if self.topk is None or len(messages) == 0:
            return TopkEvents.empty()
        times = None if clock is None else np.broadcast_to(
            np.asarray(clock, dtype=np.float64), (len(messages),))
        return self.topk.push(messages, times=times, keywords=keywords)

    def match(self, messages: Messages, *, times: npt.ArrayLike | None = None,
              clock: npt.ArrayLike | None = None,
              keywords: Sequence[Sequence[str]] | None = None) -> MixedResult:
        """Deliveries and top-k events of ``messages``, in stream order.

        Parameters
        ----------
        messages
            The batch, in stream order (top-k results depend on it).
        times
            Each message's time, epoch seconds, none NaN (None: nothing expires).
        clock
            The clock the batch arrives at (seconds; one for all, e.g. the service's at a
            publish, or one per message); None: a batch's, each message's own time
            (:mod:`roadpubsub.pruning.expiry`).
        keywords
            The messages' keyword strings (see :meth:`push`).

        Raises
        ------
        InputError
            A time that is NaN, or a clock without times.
        """
        if times is None:
            if clock is not None:
                msg = "a clock needs the messages' times"
                raise InputError(msg)
            return MixedResult(self.deliver(messages), self.push(messages, keywords=keywords))
        t = np.asarray(times, dtype=np.float64)
        if t.shape != (len(messages),):
            msg = f"times must hold one number per message ({len(messages)}), got {t.shape}"
            raise InputError(msg)
        if np.isnan(t).any():
            msg = "message times must be numbers (epoch seconds), not NaN"
            raise InputError(msg)
        c = t if clock is None else np.broadcast_to(np.asarray(clock, dtype=np.float64),
                                                    t.shape)
        return MixedResult(self.deliver(messages, at=np.maximum(t, c)),
                           self.push(messages, clock=c, keywords=keywords))


def _nan_never(expires: FloatArray) -> FloatArray:
    """Expiry times with +inf (never) as NaN, as the top-k matchers take them."""
    return np.where(np.isinf(expires), np.nan, expires)
