"""Reference matchers of the boolean range and top-k sliding-window kinds (no index).

They define a correct answer as :class:`~roadpubsub.pruning.brute.BruteMatcher` does for threshold
subscriptions, with the same distance code, so distances are bit-identical:

* :class:`BooleanBruteMatcher`: per message one reverse search from the message bounded by
  the largest radius; every subscription on a reached edge gets its exact dN, and is
  delivered iff dN <= its radius and the message holds all its keywords.
* :class:`TopkBruteMatcher`: per arriving message the same reverse search bounded by Dmax
  scores every subscription within Dmax (SIM, :mod:`roadpubsub.pruning.similarity`) and updates its
  top-k; when a top-k member expires the subscription is re-scored against the whole
  window from scratch (one forward search from it), and the best message not in its
  top-k refills it. Simple and slow on purpose: the indexed matcher
  (:mod:`roadpubsub.pruning.topk`) must give the same events.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence

import numba
import numpy as np
import numpy.typing as npt

from roadpubsub.index.kinds import BooleanSubscriptions, TopkSubscriptions
from roadpubsub.index.model import Messages
from roadpubsub.index.terms import TermWeights
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.pruning.edge_rows import EdgeRows
from roadpubsub.pruning.set_locations import SetLocations, SetReach
from roadpubsub.pruning.similarity import sim_kernel, spatio_textual_similarity, tsim_kernel
from roadpubsub.pruning.topk_events import EVENT_EVICT, EVENT_INSERT, TopkEvents
from roadpubsub.roadnet.distance import NodeSearch, distances_from_point, entry_costs
from roadpubsub.roadnet.distance import point_distances_to_target as _to_target
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.lengths import check_dmax
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork

__all__ = ["BooleanBruteMatcher", "TopkBruteMatcher", "check_window", "holds_all_keywords"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def check_window(window: int) -> int:
    """The window W (messages) as an int >= 1, or one clear error."""
    w = int(window)
    if w != window or w < 1:
        msg = f"window must be a whole number of messages >= 1, got {window!r}"
        raise InputError(msg)
    return w


@numba.njit(cache=True, nogil=True, inline="always")
def holds_all_keywords(kw_ptr: IntArray, kw_terms: npt.NDArray[np.int32], row: int,
                       term_mark: IntArray, stamp: int) -> bool:  # pragma: no cover
    """Whether every keyword of subscription ``row`` is marked ``stamp`` (the message's)."""
    for j in range(kw_ptr[row], kw_ptr[row + 1]):
        t = kw_terms[j]
        if t >= term_mark.size or term_mark[t] != stamp:
            return False
    return True


@numba.njit(cache=True, nogil=True)
def _all_present(kw_ptr: IntArray, kw_terms: npt.NDArray[np.int32], rows: IntArray,
                 message_terms: npt.NDArray[np.int32], mark: IntArray,
                 out: npt.NDArray[np.bool_]) -> None:  # pragma: no cover - compiled
    for t in message_terms:
        mark[t] = 1
    for i in range(rows.size):
        out[i] = holds_all_keywords(kw_ptr, kw_terms, rows[i], mark, 1)
    for t in message_terms:
        mark[t] = 0


def _reach(lookup: EdgeRows, search: NodeSearch, network: RoadNetwork,
           points: EdgePoints, messages: Messages, i: int, limit: float,
           stats: dict[str, int] | None = None, sets: SetReach | None = None
           ) -> tuple[IntArray, FloatArray]:
    """Rows within ``limit`` metres of message i and their exact distances to it (the
    rows located on a set by ``sets``, with their distance from the set)."""
    point = EdgePoints(messages.points.edge[i:i + 1], messages.points.offset[i:i + 1])
    a, ca, b, cb = entry_costs(network, point)
    seeds, costs = np.r_[a, b], np.r_[ca, cb]
    ok = np.isfinite(costs)
    res = search.run(seeds[ok], costs[ok], limit=limit)
    if stats is not None:
        stats["settled"] += res.n_settled
    rows = lookup.near(res.dist, res.touched, int(point.edge[0]))
    dist = _to_target(network, res.dist, point, points[rows], limit=limit)
    near = np.isfinite(dist)
    if sets is not None:
        near &= ~sets.is_set_row[rows]
        set_rows, set_dist = sets.reach(res.dist, res.touched, point, limit)
        return np.r_[rows[near], set_rows], np.r_[dist[near], set_dist]
    return rows[near], dist[near]


class BooleanBruteMatcher:
    """Exact boolean range matching without an index.

    Parameters
    ----------
    network
        The road network (``directed``: one-way roads count).
    subs
        Boolean subscriptions; keyword ids refer to ``weights``.
    weights
        The vocabulary (weights play no part in boolean matching).
    dmax_m
        Dmax in metres; every radius must be at most this.
    set_locations
        Rows located on a route or an area instead of their point (issue 32; see
        :mod:`roadpubsub.pruning.set_locations`).

    Deliveries carry the distance and a score of 1.0 (the predicate holds).
    """

    name = "brute"

    def __init__(self, network: RoadNetwork, subs: BooleanSubscriptions, weights: TermWeights,
                 *, dmax_m: float, set_locations: SetLocations | None = None) -> None:
        self.dmax_m = check_dmax(dmax_m)
        if np.any(subs.radius > self.dmax_m):
            msg = f"boolean radii must be at most Dmax = {self.dmax_m:g} m"
            raise InputError(msg)
        self.network, self.subs, self.weights = network, subs, weights
        self._lookup = EdgeRows(network, subs.points.edge)
        self._search = NodeSearch(network, reverse=True)
        self._limit = float(subs.radius.max(initial=0.0))
        self._sets = (None if set_locations is None
                      else SetReach(network, set_locations, n_subscriptions=len(subs)))
        #: Work since the start: subscriptions reached, nodes settled by the searches.
        self.stats = {"candidates": 0, "settled": 0}

    def match(self, messages: Messages) -> Deliveries:
        """Deliveries sorted by (message_id, subscription_id)."""
        subs = self.subs
        parts: list[Deliveries] = []
        mark = np.zeros(len(self.weights) + 1, dtype=np.int64)
        if len(subs) == 0:
            return Deliveries.empty()
        for i in range(len(messages)):
            rows, dist = _reach(self._lookup, self._search, self.network, subs.points,
                                messages, i, self._limit, self.stats, self._sets)
            self.stats["candidates"] += rows.size
            near = dist <= subs.radius[rows]
            rows, dist = rows[near], dist[near]
            terms = messages.keywords(i)
            ok = np.empty(rows.size, dtype=bool)
            _all_present(subs.kw_ptr, subs.kw_terms, rows, terms[terms < mark.size], mark, ok)
            if ok.any():
                parts.append(Deliveries(np.full(int(ok.sum()), messages.ids[i], np.int64),
                                        subs.ids[rows[ok]], dist[ok], np.ones(int(ok.sum()))))
        return Deliveries.concat(parts)


@numba.njit(cache=True, nogil=True)
def _window_tsim(kw_ptr: IntArray, kw_terms: npt.NDArray[np.int32], weights: FloatArray,
                 row: int, msg_ptr: IntArray, msg_terms: npt.NDArray[np.int32],
                 mark: IntArray, out: FloatArray) -> None:  # pragma: no cover - compiled
    """TSIM of subscription ``row`` with each message of a CSR (tsim_kernel's sums)."""
    for j in range(msg_ptr.size - 1):
        stamp = j + 1
        for q in range(msg_ptr[j], msg_ptr[j + 1]):
            mark[msg_terms[q]] = stamp
        out[j] = tsim_kernel(kw_ptr, kw_terms, weights, row, mark, stamp)
    for q in range(msg_terms.size):
        mark[msg_terms[q]] = 0


@numba.njit(cache=True, nogil=True)
def _rows_tsim(kw_ptr: IntArray, kw_terms: npt.NDArray[np.int32], weights: FloatArray,
               rows: IntArray, terms: npt.NDArray[np.int32], mark: IntArray,
               out: FloatArray) -> None:  # pragma: no cover - compiled
    """TSIM of several subscription rows with one message (tsim_kernel's sums)."""
    for t in terms:
        mark[t] = -1
    for i in range(rows.size):
        out[i] = tsim_kernel(kw_ptr, kw_terms, weights, rows[i], mark, -1)
    for t in terms:
        mark[t] = 0


@numba.njit(cache=True, nogil=True)
def _scores(alpha: float, dist: FloatArray, dmax: float, tsim: FloatArray,
            out: FloatArray) -> None:  # pragma: no cover - compiled
    for j in range(dist.size):
        out[j] = sim_kernel(alpha, dist[j], dmax, tsim[j])


class TopkBruteMatcher:
    """Exact top-k sliding-window matching without an index (see the module docstring).

    Parameters
    ----------
    network, weights, dmax_m
        As for :class:`~roadpubsub.pruning.brute.BruteMatcher`; Dmax bounds who may enter a result.
    subs
        Top-k subscriptions.
    window
        W, the number of most recent messages results are drawn from (>= 1).
    expires_at
        Per subscription, the instant (seconds) from which it is withdrawn (NaN: never);
        see :meth:`push`.

    Messages are fed in stream order through :meth:`push`, in one or several calls;
    subscriptions come and go between calls (:meth:`add_subscriptions`,
    :meth:`remove_subscriptions`), with the events of
    :class:`~roadpubsub.pruning.topk.TopkIndexMatcher`.
    """

    name = "brute"

    def __init__(self, network: RoadNetwork, subs: TopkSubscriptions, weights: TermWeights,
                 *, dmax_m: float, window: int,
                 expires_at: npt.ArrayLike | None = None) -> None:
        self.dmax_m = check_dmax(dmax_m)
        self.window = check_window(window)
        self.network, self.weights = network, weights
        self._reverse = NodeSearch(network, reverse=True)
        self._forward = NodeSearch(network, reverse=False)
        # Per subscription: its top-k as keys (score, seq) sorted ascending, and distances.
        self._top: list[list[tuple[float, int]]] = []
        self._dist: list[dict[int, float]] = []
        self._holders: dict[int, set[int]] = {}
        self._ring: dict[int, tuple[int, int, float, npt.NDArray[np.int32]]] = {}
        self._mark = np.zeros(len(weights) + 1, dtype=np.int64)
        self._live = np.zeros(0, dtype=bool)
        self._expires = np.zeros(0)
        self.subs = subs.take(np.arange(0))
        self.seq = 0
        self._append(subs, expires_at)

    def _append(self, subs: TopkSubscriptions, expires_at: npt.ArrayLike | None) -> None:
        """Drop withdrawn rows (renumbering the rest) and append ``subs``."""
        n = len(subs)
        e = (np.full(n, np.nan) if expires_at is None
             else np.asarray(expires_at, dtype=np.float64).reshape(n))
        keep = np.flatnonzero(self._live)
        new_row = np.full(self._live.size, -1, np.int64)
        new_row[keep] = np.arange(keep.size)
        self._holders = {seq: {int(new_row[r]) for r in rows}
                         for seq, rows in self._holders.items()}
        self._top = [self._top[r] for r in keep.tolist()] + [[] for _ in range(n)]
        self._dist = [self._dist[r] for r in keep.tolist()] + [{} for _ in range(n)]
        a = self.subs.take(keep)
        self.subs = TopkSubscriptions.concat([a, subs])
        self._live = np.ones(len(self.subs), dtype=bool)
        self._expires = np.concatenate([self._expires[keep], e])
        self._lookup = EdgeRows(self.network, self.subs.points.edge)
        if self._mark.size < len(self.weights) + 1:
            self._mark = np.zeros(len(self.weights) + 1, dtype=np.int64)

    def push(self, messages: Messages, *, times: npt.ArrayLike | None = None,
             keywords: Sequence[Sequence[str]] | None = None) -> TopkEvents:
        """Process ``messages`` in order; the events they cause.

        With ``times`` (seconds, one per message), a live subscription whose
        ``expires_at`` is at most a message's time is withdrawn as that message arrives,
        before the window's expiry: its top-k is evicted from the bottom rank up (phase 0)
        and it takes part in nothing after. ``keywords`` is not needed (a fixed
        vocabulary; the signature of every top-k matcher).
        """
        ev: list[tuple[int, int, int, int, int, int, float, float]] = []
        tm = None if times is None else np.asarray(times, dtype=np.float64)
        for i in range(len(messages)):
            t = self.seq
            if tm is not None:
                for r in np.flatnonzero(self._live & (self._expires <= tm[i])).tolist():
                    self._withdraw(r, t, 0, ev)
            old = t - self.window
            if old >= 0:
                self._expire(old, t, ev)
            terms = messages.keywords(i)
            self._ring[t] = (int(messages.ids[i]), int(messages.points.edge[i]),
                             float(messages.points.offset[i]), terms)
            self._arrive(messages, i, t, ev)
            self.seq += 1
        return _events(ev)

    def add_subscriptions(self, subs: TopkSubscriptions, *,
                          expires_at: npt.ArrayLike | None = None) -> TopkEvents:
        """New subscriptions; each one's top-k is the best k of the whole window, scored
        from scratch, emitted as inserts at ranks 1, 2, ... (``seq`` = last arrival,
        phase 2)."""
        clash = np.intersect1d(subs.ids, self.subs.ids[self._live])
        if clash.size:
            msg = f"top-k subscriptions already live: ids {clash[:10].tolist()}"
            raise InputError(msg)
        self._append(subs, expires_at)
        first = len(self.subs) - len(subs)
        ev: list[tuple[int, int, int, int, int, int, float, float]] = []
        t = self.seq - 1
        for r in range(first, len(self.subs)):
            scored = self._score_window(r, set())
            scored.sort(key=lambda x: (x[0], x[1]), reverse=True)
            for rank, (score, seq, d) in enumerate(scored[:int(self.subs.k[r])], start=1):
                bisect.insort(self._top[r], (score, seq))
                self._dist[r][seq] = d
                self._holders.setdefault(seq, set()).add(r)
                ev.append((t, 2, EVENT_INSERT, self._ring[seq][0], int(self.subs.ids[r]),
                           rank, score, d))
        return _events(ev)

    def remove_subscriptions(self, ids: npt.ArrayLike, *,
                             missing_ok: bool = False) -> TopkEvents:
        """Withdraw live subscriptions: their top-k is evicted from the bottom rank up
        (``seq`` = last arrival, phase 2)."""
        q = np.unique(np.asarray(ids, dtype=np.int64))
        live_rows = {int(i): r for r, i in enumerate(self.subs.ids.tolist()) if self._live[r]}
        missing = [i for i in q.tolist() if i not in live_rows]
        if missing and not missing_ok:
            msg = f"not live top-k subscriptions: ids {missing[:10]}"
            raise InputError(msg)
        ev: list[tuple[int, int, int, int, int, int, float, float]] = []
        for i in q.tolist():
            if i in live_rows:
                self._withdraw(live_rows[i], self.seq - 1, 2, ev)
        return _events(ev)

    def results(self, ids: npt.ArrayLike) -> list[list[tuple[int, float, float]]]:
        """Each live subscription's top-k, best first: (message_id, score, distance)."""
        live_rows = {int(i): r for r, i in enumerate(self.subs.ids.tolist()) if self._live[r]}
        out = []
        for i in np.asarray(ids, dtype=np.int64).tolist():
            if i not in live_rows:
                msg = f"not a live top-k subscription: id {i}"
                raise InputError(msg)
            r = live_rows[i]
            out.append([(self._ring[seq][0], score, self._dist[r][seq])
                        for score, seq in reversed(self._top[r])])
        return out

    def resume(self, top: Mapping[int, Sequence[tuple[float, int, float]]],
               messages: Messages) -> None:
        """Take the state another matcher of these subscriptions reached by pushing
        ``messages`` from the start: each subscription id's top-k as (score, arrival
        number, distance) entries (an id left out has an empty top-k). A benchmark times
        this reference from there without replaying the messages; :meth:`push` goes on
        with arrival ``len(messages)``."""
        for r, sid in enumerate(self.subs.ids.tolist()):
            entries = top.get(sid, [])
            self._top[r] = sorted((score, seq) for score, seq, _ in entries)
            self._dist[r] = {seq: d for _, seq, d in entries}
            for _, seq, _ in entries:
                self._holders.setdefault(seq, set()).add(r)
        n = len(messages)
        for i in range(max(0, n - self.window), n):  # the window: what push would keep
            self._ring[i] = (int(messages.ids[i]), int(messages.points.edge[i]),
                             float(messages.points.offset[i]), messages.keywords(i))
        self.seq = n

    def _withdraw(self, r: int, t: int, phase: int,
                  ev: list[tuple[int, int, int, int, int, int, float, float]]) -> None:
        top = self._top[r]
        for pos, (score, seq) in enumerate(top):  # ascending: the bottom rank first
            ev.append((t, phase, EVENT_EVICT, self._ring[seq][0], int(self.subs.ids[r]),
                       len(top) - pos, score, self._dist[r].pop(seq)))
            self._holders[seq].discard(r)
        top.clear()
        self._live[r] = False

    def _arrive(self, messages: Messages, i: int, t: int,
                ev: list[tuple[int, int, int, int, int, int, float, float]]) -> None:
        subs = self.subs
        if not self._live.any():
            return
        rows, dist = _reach(self._lookup, self._reverse, self.network, subs.points, messages,
                            i, self.dmax_m)
        live = self._live[rows]
        rows, dist = rows[live], dist[live]
        terms = messages.keywords(i)
        tsim = np.empty(rows.size)
        _rows_tsim(subs.kw_ptr, subs.kw_terms, self.weights.weights, rows,
                   terms[terms < self._mark.size], self._mark, tsim)
        score = spatio_textual_similarity(subs.alpha[rows], dist, self.dmax_m, tsim)
        sid, mid = subs.ids, int(messages.ids[i])
        for j, r in enumerate(rows.tolist()):
            key = (float(score[j]), t)
            top = self._top[r]
            k = int(subs.k[r])
            if len(top) >= k:
                if key <= top[0]:
                    continue
                worst = top.pop(0)
                d_w = self._dist[r].pop(worst[1])
                self._holders[worst[1]].discard(r)
                ev.append((t, 1, EVENT_EVICT, self._ring[worst[1]][0], int(sid[r]), k,
                           worst[0], d_w))
            bisect.insort(top, key)
            self._dist[r][t] = float(dist[j])
            self._holders.setdefault(t, set()).add(r)
            rank = len(top) - top.index(key)
            ev.append((t, 1, EVENT_INSERT, mid, int(sid[r]), rank, key[0], float(dist[j])))

    def _expire(self, old: int, t: int,
                ev: list[tuple[int, int, int, int, int, int, float, float]]) -> None:
        mid_old = self._ring.pop(old)[0]
        for r in sorted(self._holders.pop(old, set())):
            top = self._top[r]
            pos = next(p for p, key in enumerate(top) if key[1] == old)
            key = top.pop(pos)
            d_old = self._dist[r].pop(old)
            ev.append((t, 0, EVENT_EVICT, mid_old, int(self.subs.ids[r]), len(top) - pos + 1,
                       key[0], d_old))
            best = self._refill(r, t)
            if best is not None:
                score, seq, d = best
                top.insert(0, (score, seq))
                self._dist[r][seq] = d
                self._holders.setdefault(seq, set()).add(r)
                ev.append((t, 0, EVENT_INSERT, self._ring[seq][0], int(self.subs.ids[r]),
                           len(top), score, d))

    def _score_window(self, r: int, skip: set[int]) -> list[tuple[float, int, float]]:
        """(score, seq, distance) of every window message within Dmax of row r, except
        ``skip``, scored from scratch (one forward search from r)."""
        seqs = [s for s in self._ring if s not in skip]
        if not seqs:
            return []
        edge = np.array([self._ring[s][1] for s in seqs], dtype=np.int32)
        off = np.array([self._ring[s][2] for s in seqs])
        subs = self.subs
        dist = distances_from_point(self.network, subs.points[np.array([r])],
                                    EdgePoints(edge, off), limit=self.dmax_m,
                                    search=self._forward)
        near = np.flatnonzero(np.isfinite(dist))
        if near.size == 0:
            return []
        chunks = [self._ring[seqs[j]][3] for j in near.tolist()]
        ptr = np.zeros(near.size + 1, dtype=np.int64)
        np.cumsum([c.size for c in chunks], out=ptr[1:])
        flat = np.concatenate(chunks).astype(np.int32) if chunks else np.empty(0, np.int32)
        tsim = np.empty(near.size)
        _window_tsim(subs.kw_ptr, subs.kw_terms, self.weights.weights, r, ptr, flat,
                     self._mark, tsim)
        score = np.empty(near.size)
        _scores(float(subs.alpha[r]), dist[near], self.dmax_m, tsim, score)
        return [(float(score[j]), seqs[near[j]], float(dist[near[j]]))
                for j in range(near.size)]

    def _refill(self, r: int, t: int) -> tuple[float, int, float] | None:
        """The best window message (seq < t) not in row r's top-k, scored from scratch."""
        scored = self._score_window(r, {seq for _, seq in self._top[r]})
        if not scored:
            return None
        return max(scored, key=lambda x: (x[0], x[1]))


def _events(ev: list[tuple[int, int, int, int, int, int, float, float]]) -> TopkEvents:
    """Event tuples as :class:`TopkEvents` in the canonical order."""
    if not ev:
        return TopkEvents.empty()
    cols = list(zip(*ev, strict=True))
    return TopkEvents.concat([TopkEvents(
        np.asarray(cols[0], np.int64), np.asarray(cols[1], np.int8),
        np.asarray(cols[2], np.int8), np.asarray(cols[3], np.int64),
        np.asarray(cols[4], np.int64), np.asarray(cols[5], np.int64),
        np.asarray(cols[6], np.float64), np.asarray(cols[7], np.float64))])
