"""Boolean range subscriptions that come, go and move while messages stream in, and the
columnar helpers the live kinds share (top-k: :mod:`roadpubsub.pruning.live_topk`).

:class:`LiveBoolean` matches with the kind's own indexed matcher, never a second
implementation: a :class:`~roadpubsub.pruning.boolean.BooleanIndexMatcher` built over the
subscriptions of the last rebuild (the base) and a second one over those added since (the
delta, rebuilt when it changed and a message arrives); removed base rows are masked out of
the base's deliveries. The base is rebuilt from the live rows once the removed and added
rows outnumber ``max(rebuild_min, rebuild_ratio * base)``. A move is a removal and an
addition at the new place. Deliveries equal the matcher's over the live set: each live
subscription is matched by exactly one of the two, and both are exact.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from roadpubsub.index.kinds import BooleanSubscriptions, TopkSubscriptions
from roadpubsub.index.model import Messages
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.terms import TermWeights
from roadpubsub.pruning.boolean import BooleanIndexMatcher
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.locations import EdgePoints

__all__ = ["BaseAndDelta", "LiveBoolean"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class _Matches(Protocol):
    def match(self, messages: Messages) -> Deliveries: ...


class BaseAndDelta:
    """A matcher over an earlier version of the rows (the base) minus its retired ids, plus
    a matcher over the rows changed since (the delta): the live kinds' one way to answer
    for the current rows without rebuilding after every change.

    Exact when each live row is answered by exactly one of the two (a subscription's
    deliveries depend on its own row only: threshold and boolean kinds): every id the delta
    holds, and every id removed since the base, is retired.

    Parameters
    ----------
    base, delta
        Matchers with ``match(messages) -> Deliveries`` (None: no rows).
    retired
        Ids whose base deliveries are dropped (any order; ids the base lacks are harmless).

    Examples
    --------
    >>> import numpy as np
    >>> class Fixed:
    ...     def __init__(self, sid): self.sid = np.asarray(sid)
    ...     def match(self, messages):
    ...         n = self.sid.size
    ...         return Deliveries(np.ones(n, np.int64), self.sid, np.zeros(n), np.ones(n))
    >>> both = BaseAndDelta(Fixed([3, 5, 8]), retired=np.array([5, 8]), delta=Fixed([8]))
    >>> both.match(None).subscription_id.tolist()
    [3, 8]
    """

    def __init__(self, base: _Matches | None, *, retired: npt.ArrayLike,
                 delta: _Matches | None) -> None:
        self.base, self.delta = base, delta
        self.retired = np.unique(np.asarray(retired, dtype=np.int64))

    @property
    def stats(self) -> dict[str, int]:
        """The two matchers' ``stats`` counters added up (empty when they keep none)."""
        total: dict[str, int] = {}
        for m in (self.base, self.delta):
            counters = getattr(m, "stats", None)
            if isinstance(counters, dict):
                for k, v in counters.items():
                    total[k] = total.get(k, 0) + int(v)
        return total

    def match(self, messages: Messages) -> Deliveries:
        """Deliveries of the current rows, sorted by (message_id, subscription_id)."""
        parts: list[Deliveries] = []
        if self.base is not None:
            found = self.base.match(messages)
            if self.retired.size and len(found):
                at = np.searchsorted(self.retired, found.subscription_id)
                at[at == self.retired.size] = 0
                found = found.take(self.retired[at] != found.subscription_id)
            parts.append(found)
        if self.delta is not None:
            parts.append(self.delta.match(messages))
        parts = [p for p in parts if len(p)]
        if len(parts) == 1:
            return parts[0]
        return Deliveries.concat(parts)


def empty_boolean() -> BooleanSubscriptions:
    return BooleanSubscriptions.empty()


def empty_topk() -> TopkSubscriptions:
    return TopkSubscriptions.empty()


def _concat_boolean(parts: list[BooleanSubscriptions]) -> BooleanSubscriptions:
    parts = [p for p in parts if len(p)]
    return BooleanSubscriptions.concat(parts) if parts else BooleanSubscriptions.empty()


def concat_topk(parts: list[TopkSubscriptions]) -> TopkSubscriptions:
    parts = [p for p in parts if len(p)]
    return TopkSubscriptions.concat(parts) if parts else TopkSubscriptions.empty()


def rows_of_ids(ids: IntArray, wanted: IntArray) -> IntArray:
    """Row of each wanted id in ``ids`` (-1 when absent)."""
    if ids.size == 0:
        return np.full(wanted.size, -1, np.int64)
    order = np.argsort(ids, kind="stable")
    pos = np.searchsorted(ids[order], wanted)
    pos = np.minimum(pos, ids.size - 1)
    rows = order[pos]
    return np.where(ids[rows] == wanted, rows, -1).astype(np.int64)


class LiveBoolean:
    """Live boolean range subscriptions (see the module docstring).

    Parameters
    ----------
    spatial
        Cells and bounds of the network (shared with the threshold index).
    weights
        The vocabulary of the subscriptions' keyword ids (it may grow).
    dmax_m
        Dmax in metres: every radius is at most this.
    subs
        The subscriptions to start with.
    rebuild_min, rebuild_ratio
        Rebuild the base once removed plus added rows exceed
        ``max(rebuild_min, rebuild_ratio * len(base))``.
    threads
        Threads of the matchers (None: every core).
    """

    def __init__(self, spatial: SpatialIndex, weights: TermWeights, *, dmax_m: float,
                 subs: BooleanSubscriptions | None = None, rebuild_min: int = 2048,
                 rebuild_ratio: float = 0.25, threads: int | None = None) -> None:
        self.spatial, self.weights, self.dmax_m = spatial, weights, float(dmax_m)
        self.rebuild_min, self.rebuild_ratio = int(rebuild_min), float(rebuild_ratio)
        self.threads = threads
        self.rebuilds = 0
        self._set_base(subs if subs is not None else empty_boolean())

    def _set_base(self, subs: BooleanSubscriptions) -> None:
        if np.any(subs.radius > self.dmax_m):
            msg = f"boolean radii must be at most Dmax = {self.dmax_m:g} m"
            raise InputError(msg)
        self._base = subs
        self._dead = np.zeros(len(subs), dtype=bool)
        self._n_dead = 0
        self._base_matcher: BooleanIndexMatcher | None = None
        self._delta = empty_boolean()
        self._delta_matcher: BooleanIndexMatcher | None = None

    def __len__(self) -> int:
        return len(self._base) - self._n_dead + len(self._delta)

    def contains(self, ids: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Whether each id is a live boolean subscription."""
        q = np.asarray(ids, dtype=np.int64)
        rows = rows_of_ids(self._base.ids, q)
        live = rows >= 0
        live[live] = ~self._dead[rows[live]]
        return live | (rows_of_ids(self._delta.ids, q) >= 0)

    def subscriptions(self) -> BooleanSubscriptions:
        """The live subscriptions, by id."""
        live = _concat_boolean([self._base.take(np.flatnonzero(~self._dead)), self._delta])
        return live.take(np.argsort(live.ids, kind="stable"))

    def rows_of(self, ids: npt.ArrayLike) -> BooleanSubscriptions:
        """The live subscriptions ``ids`` in that order (each must be live)."""
        q = np.asarray(ids, dtype=np.int64)
        b = rows_of_ids(self._base.ids, q)
        ok = b >= 0
        ok[ok] = ~self._dead[b[ok]]
        d = rows_of_ids(self._delta.ids, q)
        if not np.all(ok | (d >= 0)):
            msg = f"not live boolean subscriptions: {q[~(ok | (d >= 0))][:10].tolist()}"
            raise KeyError(msg)
        both = _concat_boolean([self._base.take(b[ok]), self._delta.take(d[~ok])])
        where = np.empty(q.size, np.int64)
        where[np.flatnonzero(ok)] = np.arange(int(ok.sum()))
        where[np.flatnonzero(~ok)] = int(ok.sum()) + np.arange(int((~ok).sum()))
        return both.take(where)

    def add(self, subs: BooleanSubscriptions) -> None:
        """Add new subscriptions (ids not live, radii at most Dmax)."""
        if len(subs) == 0:
            return
        if np.any(subs.radius > self.dmax_m):
            msg = f"boolean radii must be at most Dmax = {self.dmax_m:g} m"
            raise InputError(msg)
        self._delta = _concat_boolean([self._delta, subs])
        self._delta_matcher = None

    def remove(self, ids: npt.ArrayLike) -> None:
        """Remove live subscriptions (ids that are not live are ignored)."""
        q = np.asarray(ids, dtype=np.int64)
        b = rows_of_ids(self._base.ids, q)
        b = b[b >= 0]
        fresh = b[~self._dead[b]]
        self._dead[fresh] = True
        self._n_dead += int(np.unique(fresh).size)
        d = rows_of_ids(self._delta.ids, q)
        if np.any(d >= 0):
            keep = np.ones(len(self._delta), dtype=bool)
            keep[d[d >= 0]] = False
            self._delta = self._delta.take(np.flatnonzero(keep))
            self._delta_matcher = None

    def move(self, ids: npt.ArrayLike, points: EdgePoints) -> None:
        """Give live subscriptions new places (each id once)."""
        q = np.asarray(ids, dtype=np.int64)
        if q.size == 0:
            return
        rows = self.rows_of(q)
        self.remove(q)
        self.add(replace(rows, points=points))

    def _matcher(self, subs: BooleanSubscriptions) -> BooleanIndexMatcher:
        return BooleanIndexMatcher(self.spatial.network, subs, self.weights,
                                   dmax_m=self.dmax_m, spatial=self.spatial,
                                   threads=self.threads)

    def match(self, messages: Messages) -> Deliveries:
        """Deliveries of ``messages`` to the live subscriptions, by (message, subscription);
        score 1.0 (the predicate holds), distance dN in metres."""
        if len(self) == 0 or len(messages) == 0:
            return Deliveries.empty()
        changed = self._n_dead + len(self._delta)
        if changed > max(self.rebuild_min, self.rebuild_ratio * len(self._base)):
            self._set_base(self.subscriptions())
            self.rebuilds += 1
        base = None
        if len(self._base) > self._n_dead:
            if self._base_matcher is None:
                self._base_matcher = self._matcher(self._base)
            base = self._base_matcher
        if len(self._delta) and self._delta_matcher is None:
            self._delta_matcher = self._matcher(self._delta)
        retired = self._base.ids[self._dead] if self._n_dead else np.empty(0, np.int64)
        return BaseAndDelta(base, retired=retired,
                            delta=self._delta_matcher if len(self._delta) else None
                            ).match(messages)

    def arrays(self) -> dict[str, npt.NDArray[Any]]:
        """The live subscriptions as arrays (for snapshots; :meth:`from_arrays` reads them)."""
        s = self.subscriptions()
        return {"ids": s.ids, "edge": s.points.edge, "offset": s.points.offset,
                "radius": s.radius, "kw_ptr": s.kw_ptr, "kw_terms": s.kw_terms}

    @staticmethod
    def subs_from_arrays(a: dict[str, npt.NDArray[Any]]) -> BooleanSubscriptions:
        """The subscriptions saved by :meth:`arrays`."""
        return BooleanSubscriptions(np.asarray(a["ids"], np.int64),
                                    EdgePoints(np.asarray(a["edge"], np.int32),
                                               np.asarray(a["offset"], np.float64)),
                                    np.asarray(a["radius"], np.float64),
                                    np.asarray(a["kw_ptr"], np.int64),
                                    np.asarray(a["kw_terms"], np.int32))
