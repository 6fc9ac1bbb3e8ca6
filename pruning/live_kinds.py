"""Boolean range and top-k subscriptions that come, go and move while messages stream in.

The live service (and any other stream) keeps its boolean and top-k subscriptions here.
Matching is done by the kinds' own indexed matchers, never by a second implementation:

* :class:`LiveBoolean`: a :class:`~pruning.boolean.BooleanIndexMatcher` built over the
  subscriptions of the last rebuild (the base) and a second one over those added since (the
  delta, rebuilt when it changed and a message arrives); removed base rows are masked out
  of the base's deliveries. The base is rebuilt from the live rows once the removed and
  added rows outnumber ``max(rebuild_min, rebuild_ratio * base)``. A move is a removal and
  an addition at the new place. Deliveries equal the matcher's over the live set (each
  subscription is matched by exactly one of the two, which are exact).
* :class:`LiveTopk`: the window of the last W messages (ids, places, keyword strings) and
  a :class:`~pruning.topk.TopkIndexMatcher` over the live subscriptions. A subscription's
  top-k is a function of the window alone (the k best (SIM, arrival) keys of the window's
  messages within Dmax; ties go to the newer message), whatever the history. So after a
  subscribe, unsubscribe, move or expiry the matcher is rebuilt, at the next message or
  read, by pushing the window's messages through a fresh matcher (their events are not
  emitted): a subscription that joins or moves mid-stream gets the top-k of the current
  window at its place, and every other one keeps exactly the top-k it had. The messages
  after that produce the events the batch matcher would. Keywords of window messages are
  kept as strings and mapped to term ids at each rebuild, so a term first brought by a
  later subscription is found in the window's messages too.

Arrival numbers (``TopkEvents.seq``) count every message pushed since the stream began
(:attr:`LiveTopk.arrivals`), across rebuilds and restarts.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np
import numpy.typing as npt

from index.kinds import BooleanSubscriptions, TopkSubscriptions
from index.model import Messages
from index.spatial import SpatialIndex
from index.terms import TermWeights
from pruning.boolean import BooleanIndexMatcher
from pruning.deliveries import Deliveries
from pruning.kinds_reference import check_window
from pruning.topk import TopkIndexMatcher
from pruning.topk_events import TopkEvents
from roadnet.errors import InputError
from roadnet.locations import EdgePoints

__all__ = ["LiveBoolean", "LiveTopk", "concat_csr"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def concat_csr(parts: list[tuple[IntArray, npt.NDArray[np.int32]]]
               ) -> tuple[IntArray, npt.NDArray[np.int32]]:
    """One keyword CSR of several, rows in order."""
    ptrs = [np.zeros(1, np.int64)]
    base = 0
    for ptr, _ in parts:
        ptrs.append(ptr[1:] + base)
        base += int(ptr[-1])
    terms = [t for _, t in parts]
    return (np.concatenate(ptrs).astype(np.int64),
            np.concatenate(terms).astype(np.int32) if terms else np.empty(0, np.int32))


def _points(parts: list[EdgePoints]) -> EdgePoints:
    return EdgePoints(np.concatenate([p.edge for p in parts]).astype(np.int32),
                      np.concatenate([p.offset for p in parts]).astype(np.float64))


def _no_points() -> EdgePoints:
    return EdgePoints(np.empty(0, np.int32), np.empty(0))


def empty_boolean() -> BooleanSubscriptions:
    return BooleanSubscriptions(np.empty(0, np.int64), _no_points(), np.empty(0),
                                np.zeros(1, np.int64), np.empty(0, np.int32))


def empty_topk() -> TopkSubscriptions:
    return TopkSubscriptions(np.empty(0, np.int64), _no_points(), np.empty(0),
                             np.empty(0, np.int64), np.zeros(1, np.int64),
                             np.empty(0, np.int32))


def _concat_boolean(parts: list[BooleanSubscriptions]) -> BooleanSubscriptions:
    parts = [p for p in parts if len(p)]
    if not parts:
        return empty_boolean()
    if len(parts) == 1:
        return parts[0]
    ptr, terms = concat_csr([(p.kw_ptr, p.kw_terms) for p in parts])
    return BooleanSubscriptions(np.concatenate([p.ids for p in parts]),
                                _points([p.points for p in parts]),
                                np.concatenate([p.radius for p in parts]), ptr, terms)


def _concat_topk(parts: list[TopkSubscriptions]) -> TopkSubscriptions:
    parts = [p for p in parts if len(p)]
    if not parts:
        return empty_topk()
    if len(parts) == 1:
        return parts[0]
    ptr, terms = concat_csr([(p.kw_ptr, p.kw_terms) for p in parts])
    return TopkSubscriptions(np.concatenate([p.ids for p in parts]),
                             _points([p.points for p in parts]),
                             np.concatenate([p.alpha for p in parts]),
                             np.concatenate([p.k for p in parts]), ptr, terms)


def _rows_of(ids: IntArray, wanted: IntArray) -> IntArray:
    """Row of each wanted id in ``ids`` (-1 when absent)."""
    if ids.size == 0:
        return np.full(wanted.size, -1, np.int64)
    order = np.argsort(ids, kind="stable")
    pos = np.searchsorted(ids[order], wanted)
    pos = np.minimum(pos, ids.size - 1)
    rows = order[pos]
    return np.where(ids[rows] == wanted, rows, -1).astype(np.int64)


def _known_terms(messages: Messages, n_terms: int) -> Messages:
    """``messages`` without term ids >= n_terms (the compiled top-k kernels index their
    keyword marks, sized by the vocabulary they were built with, by message term ids)."""
    keep = messages.kw_terms < n_terms
    if keep.all():
        return messages
    row = np.repeat(np.arange(len(messages)), np.diff(messages.kw_ptr))
    ptr = np.zeros_like(messages.kw_ptr)
    np.cumsum(np.bincount(row[keep], minlength=len(messages)), out=ptr[1:])
    return Messages(messages.ids, messages.points, ptr, messages.kw_terms[keep])


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
        rows = _rows_of(self._base.ids, q)
        live = rows >= 0
        live[live] = ~self._dead[rows[live]]
        return live | (_rows_of(self._delta.ids, q) >= 0)

    def subscriptions(self) -> BooleanSubscriptions:
        """The live subscriptions, by id."""
        live = _concat_boolean([self._base.take(np.flatnonzero(~self._dead)), self._delta])
        return live.take(np.argsort(live.ids, kind="stable"))

    def rows_of(self, ids: npt.ArrayLike) -> BooleanSubscriptions:
        """The live subscriptions ``ids`` in that order (each must be live)."""
        q = np.asarray(ids, dtype=np.int64)
        b = _rows_of(self._base.ids, q)
        ok = b >= 0
        ok[ok] = ~self._dead[b[ok]]
        d = _rows_of(self._delta.ids, q)
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
        b = _rows_of(self._base.ids, q)
        b = b[b >= 0]
        fresh = b[~self._dead[b]]
        self._dead[fresh] = True
        self._n_dead += int(np.unique(fresh).size)
        d = _rows_of(self._delta.ids, q)
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
        self.add(BooleanSubscriptions(rows.ids, points, rows.radius, rows.kw_ptr,
                                      rows.kw_terms))

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
        parts = []
        if len(self._base) > self._n_dead:
            if self._base_matcher is None:
                self._base_matcher = self._matcher(self._base)
            found = self._base_matcher.match(messages)
            if self._n_dead:
                keep = ~np.isin(found.subscription_id, self._base.ids[self._dead])
                found = Deliveries(found.message_id[keep], found.subscription_id[keep],
                                   found.distance[keep], found.score[keep])
            parts.append(found)
        if len(self._delta):
            if self._delta_matcher is None:
                self._delta_matcher = self._matcher(self._delta)
            parts.append(self._delta_matcher.match(messages))
        return Deliveries.concat(parts)

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


class LiveTopk:
    """Live top-k sliding-window subscriptions and the window (see the module docstring).

    Parameters
    ----------
    spatial, weights, dmax_m
        As for :class:`LiveBoolean`.
    window
        W, the number of most recent messages the results are drawn from (>= 1).
    subs
        The subscriptions to start with.
    """

    def __init__(self, spatial: SpatialIndex, weights: TermWeights, *, dmax_m: float,
                 window: int, subs: TopkSubscriptions | None = None) -> None:
        self.spatial, self.weights, self.dmax_m = spatial, weights, float(dmax_m)
        self.window = check_window(window)
        self._subs = subs if subs is not None else empty_topk()
        #: (arrival number, message id, edge, offset, keywords) of the last W messages.
        self._ring: deque[tuple[int, int, int, float, list[str]]] = deque(maxlen=self.window)
        #: Messages pushed since the stream began.
        self.arrivals = 0
        self.rebuilds = 0
        self._matcher: TopkIndexMatcher | None = None
        self._offset = 0  # arrival number of the matcher's first message
        self._n_terms = 0  # vocabulary size when the matcher was built

    def __len__(self) -> int:
        return len(self._subs)

    # ------------------------------------------------------------------ subscriptions
    def contains(self, ids: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Whether each id is a live top-k subscription."""
        return _rows_of(self._subs.ids, np.asarray(ids, dtype=np.int64)) >= 0

    def subscriptions(self) -> TopkSubscriptions:
        """The live subscriptions, by id."""
        return self._subs.take(np.argsort(self._subs.ids, kind="stable"))

    def rows_of(self, ids: npt.ArrayLike) -> TopkSubscriptions:
        """The live subscriptions ``ids`` in that order (each must be live)."""
        q = np.asarray(ids, dtype=np.int64)
        rows = _rows_of(self._subs.ids, q)
        if np.any(rows < 0):
            msg = f"not live top-k subscriptions: {q[rows < 0][:10].tolist()}"
            raise KeyError(msg)
        return self._subs.take(rows)

    def add(self, subs: TopkSubscriptions) -> None:
        """Add new subscriptions: their top-k is taken from the current window."""
        if len(subs):
            self._subs = _concat_topk([self._subs, subs])
            self._matcher = None

    def remove(self, ids: npt.ArrayLike) -> None:
        """Remove live subscriptions (ids that are not live are ignored)."""
        rows = _rows_of(self._subs.ids, np.asarray(ids, dtype=np.int64))
        if np.any(rows >= 0):
            keep = np.ones(len(self._subs), dtype=bool)
            keep[rows[rows >= 0]] = False
            self._subs = self._subs.take(np.flatnonzero(keep))
            self._matcher = None

    def move(self, ids: npt.ArrayLike, points: EdgePoints) -> None:
        """New places (each id once); their top-k is taken from the window again."""
        q = np.asarray(ids, dtype=np.int64)
        if q.size == 0:
            return
        rows = _rows_of(self._subs.ids, q)
        if np.any(rows < 0):
            msg = f"not live top-k subscriptions: {q[rows < 0][:10].tolist()}"
            raise KeyError(msg)
        edge = self._subs.points.edge.copy()
        offset = self._subs.points.offset.copy()
        edge[rows], offset[rows] = points.edge, points.offset
        s = self._subs
        self._subs = TopkSubscriptions(s.ids, EdgePoints(edge, offset), s.alpha, s.k,
                                       s.kw_ptr, s.kw_terms)
        self._matcher = None

    # ------------------------------------------------------------------ the stream
    def _ring_messages(self) -> Messages:
        ring = list(self._ring)
        return Messages.from_rows(
            ids=np.asarray([r[1] for r in ring], dtype=np.int64),
            points=EdgePoints(np.asarray([r[2] for r in ring], dtype=np.int32),
                              np.asarray([r[3] for r in ring], dtype=np.float64)),
            keywords=[r[4] for r in ring], weights=self.weights)

    def _ready(self) -> TopkIndexMatcher:
        """The matcher over the live subscriptions, holding the window."""
        if self._matcher is None:
            m = TopkIndexMatcher(self.spatial.network, self._subs, self.weights,
                                 dmax_m=self.dmax_m, window=self.window, spatial=self.spatial)
            if self._ring:
                m.push(self._ring_messages())  # rebuilds the results; no events
            self._matcher = m
            # The matcher's scratch covers this vocabulary: terms added later (by other
            # subscriptions) are held by none of its subscriptions and are left out.
            self._n_terms = len(self.weights)
            self._offset = self.arrivals - len(self._ring)
            self.rebuilds += 1
        return self._matcher

    def push(self, ids: IntArray, points: EdgePoints, keywords: list[list[str]]
             ) -> TopkEvents:
        """Messages arrive in this order; the insertions and evictions they cause
        (``seq``: arrival numbers since the stream began)."""
        n = int(ids.size)
        if n == 0:
            return TopkEvents.empty()
        events = TopkEvents.empty()
        if len(self._subs):
            m = self._ready()
            found = m.push(_known_terms(Messages.from_rows(
                ids=ids, points=points, keywords=keywords, weights=self.weights),
                self._n_terms))
            if len(found):
                events = TopkEvents(found.seq + self._offset, found.phase, found.event,
                                    found.message_id, found.subscription_id, found.rank,
                                    found.score, found.distance)
        for j in range(n):
            self._ring.append((self.arrivals + j, int(ids[j]), int(points.edge[j]),
                               float(points.offset[j]), list(keywords[j])))
        self.arrivals += n
        if self._matcher is not None and not len(self._subs):
            self._matcher = None
        return events

    def results(self, ids: npt.ArrayLike) -> list[list[dict[str, Any]]]:
        """Each live subscription's top-k now: message_id, rank, score, distance."""
        q = np.asarray(ids, dtype=np.int64)
        out: list[list[dict[str, Any]]] = []
        if q.size == 0:
            return out
        m = self._ready()
        rows = _rows_of(m.subs.ids, q)
        st, buf_ptr = m.state, m.index.buf_ptr
        first = self._ring[0][0] if self._ring else 0
        for r in rows.tolist():
            if r < 0:
                msg = f"not a live top-k subscription: {q[len(out)]}"
                raise KeyError(msg)
            base = int(buf_ptr[r])
            top = []
            for j in range(min(int(m.subs.k[r]), int(st.size[r]))):
                seq = int(st.b_seq[base + j]) + self._offset
                top.append({"message_id": self._ring[seq - first][1], "rank": j + 1,
                            "score": float(st.b_score[base + j]),
                            "distance": float(st.b_dist[base + j])})
            out.append(top)
        return out

    # ------------------------------------------------------------------ snapshots
    def arrays(self) -> dict[str, npt.NDArray[Any]]:
        """Subscriptions and window as arrays (for snapshots)."""
        s = self.subscriptions()
        ring = list(self._ring)
        words = [w for r in ring for w in r[4]]
        wptr = np.zeros(len(ring) + 1, np.int64)
        np.cumsum([len(r[4]) for r in ring], out=wptr[1:])
        return {"ids": s.ids, "edge": s.points.edge, "offset": s.points.offset,
                "alpha": s.alpha, "k": s.k, "kw_ptr": s.kw_ptr, "kw_terms": s.kw_terms,
                "win_seq": np.asarray([r[0] for r in ring], np.int64),
                "win_id": np.asarray([r[1] for r in ring], np.int64),
                "win_edge": np.asarray([r[2] for r in ring], np.int32),
                "win_offset": np.asarray([r[3] for r in ring], np.float64),
                "win_kw_ptr": wptr,
                "win_words": np.asarray(words, dtype=str) if words else np.empty(0, "U1"),
                "arrivals": np.asarray([self.arrivals], np.int64)}

    @classmethod
    def from_arrays(cls, spatial: SpatialIndex, weights: TermWeights, a: dict[str, Any], *,
                    dmax_m: float, window: int) -> LiveTopk:
        """The state saved by :meth:`arrays`."""
        subs = TopkSubscriptions(np.asarray(a["ids"], np.int64),
                                 EdgePoints(np.asarray(a["edge"], np.int32),
                                            np.asarray(a["offset"], np.float64)),
                                 np.asarray(a["alpha"], np.float64),
                                 np.asarray(a["k"], np.int64),
                                 np.asarray(a["kw_ptr"], np.int64),
                                 np.asarray(a["kw_terms"], np.int32))
        live = cls(spatial, weights, dmax_m=dmax_m, window=window, subs=subs)
        words = [str(w) for w in a["win_words"].tolist()]
        wptr = np.asarray(a["win_kw_ptr"], np.int64)
        for j, (seq, mid, e, o) in enumerate(zip(
                a["win_seq"].tolist(), a["win_id"].tolist(), a["win_edge"].tolist(),
                a["win_offset"].tolist(), strict=True)):
            live._ring.append((int(seq), int(mid), int(e), float(o),
                               words[int(wptr[j]):int(wptr[j + 1])]))
        live.arrivals = int(np.asarray(a["arrivals"])[0])
        return live

