"""Top-k sliding-window subscriptions that come, go and move while messages stream in.

A subscription's top-k is a function of the window alone: the k best (SIM, arrival) keys
among the last W messages within Dmax (ties go to the newer message), whatever the
history. :class:`LiveTopk` keeps the window (ids, places, keyword strings) and the live
subscriptions in a few *parts*, each a :class:`~roadpubsub.pruning.topk.TopkIndexMatcher` (the
kind's one matcher) that every message is pushed through:

* a subscribe (or a move: a removal, then a subscribe at the new place) is put in a new
  part, built at the next message or read by pushing the window's messages through a
  fresh matcher over just those subscriptions (their events are not emitted): the
  subscription gets the top-k of the current window at its place;
* an unsubscribe (or the old place of a move) retires the row in its part: its
  buffer is emptied, it leaves the expiry buckets and its threshold becomes +inf, so no
  message is offered to it and none expires from it (:func:`retire`); nobody else's
  top-k depends on it; :meth:`LiveTopk.withdraw` (expiry) does the same and returns the
  evictions of its top-k, bottom rank first, as the batch matcher's ``expires_at`` does;
* when there are more than ``max_parts`` parts, the newer ones are merged into one, and
  when retired and newer rows outnumber ``max(rebuild_min, rebuild_ratio * base)`` every
  live subscription is rebuilt into one base part.

Each subscription lives in exactly one part, and each part gives exactly the events of a
matcher over its subscriptions fed the window and then the stream, so the union of the
parts' events, in the canonical order of :class:`~roadpubsub.pruning.topk_events.TopkEvents`, is
the events of one matcher over all of them. Keywords of window messages are kept as
strings (with their term ids while the vocabulary does not grow), so a term first
brought by a later subscription is found in the window's messages too. Arrival numbers
(``TopkEvents.seq``) count every message pushed since the stream began
(:attr:`LiveTopk.arrivals`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from roadpubsub.index.kinds import TopkSubscriptions
from roadpubsub.index.model import Messages, concat_csr, keyword_csr
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.terms import TermWeights
from roadpubsub.index.validate import decode_terms, encode_terms
from roadpubsub.pruning.kinds_reference import check_window
from roadpubsub.pruning.live_kinds import concat_topk, rows_of_ids
from roadpubsub.pruning.topk import TopkIndexMatcher
from roadpubsub.pruning.topk_buffers import relink
from roadpubsub.pruning.topk_events import EVENT_EVICT, TopkEvents
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.locations import EdgePoints

__all__ = ["LiveTopk", "retire"]

IntArray = npt.NDArray[np.int64]


def retire(matcher: TopkIndexMatcher, rows: IntArray) -> None:
    """Take rows out of a running matcher: no offer, expiry or event reaches them again.

    Their buffers are emptied and unlinked from the expiry buckets (so
    :func:`~roadpubsub.pruning.topk_buffers.expire` never visits them), and their thresholds become
    +inf, which every
    score and cell bound lies below, so the arrival scan skips them (a cell's order by
    threshold only ever holds values at most the current ones, so it stays valid).
    """
    st = matcher.state
    for r in np.asarray(rows, dtype=np.int64).tolist():
        st.theta[r] = np.inf
        st.size[r] = 0
        relink(st, matcher._sub, r, matcher.window)


def _known_terms(messages: Messages, n_terms: int) -> Messages:
    """``messages`` without term ids >= n_terms (the compiled top-k kernels index their
    keyword marks, sized by the vocabulary they were built with, by message term ids;
    terms added later are held by none of their subscriptions)."""
    keep = messages.kw_terms < n_terms
    if keep.all():
        return messages
    row = np.repeat(np.arange(len(messages)), np.diff(messages.kw_ptr))
    ptr = np.zeros_like(messages.kw_ptr)
    np.cumsum(np.bincount(row[keep], minlength=len(messages)), out=ptr[1:])
    return Messages(messages.ids, messages.points, ptr, messages.kw_terms[keep])


@dataclass
class _Part:
    """One matcher over some subscriptions; ``live`` marks its rows not retired."""

    matcher: TopkIndexMatcher
    offset: int  # arrival number of the matcher's first message
    n_terms: int  # vocabulary size when it was built
    live: npt.NDArray[np.bool_]

    @property
    def ids(self) -> IntArray:
        return self.matcher.subs.ids

    def n_live(self) -> int:
        return int(self.live.sum())


@dataclass
class _Entry:
    """A window message: arrival number, id, place, keywords and their term ids."""

    seq: int
    mid: int
    edge: int
    offset: float
    words: list[str]
    terms: npt.NDArray[np.int32]
    vocab: int  # vocabulary size when ``terms`` were taken


class LiveTopk:
    """Live top-k sliding-window subscriptions and the window (see the module docstring).

    Parameters
    ----------
    spatial
        Cells and bounds of the network (shared with the threshold index).
    weights
        The vocabulary of the subscriptions' keyword ids (it may grow).
    dmax_m
        Dmax in metres.
    window
        W, the number of most recent messages the results are drawn from (>= 1).
    subs
        The subscriptions to start with.
    max_parts, rebuild_min, rebuild_ratio
        See the module docstring.
    resort_every
        As for :class:`~roadpubsub.pruning.topk.TopkIndexMatcher`.
    """

    def __init__(self, spatial: SpatialIndex, weights: TermWeights, *, dmax_m: float,
                 window: int, subs: TopkSubscriptions | None = None, max_parts: int = 4,
                 rebuild_min: int = 1024, rebuild_ratio: float = 0.25,
                 resort_every: int = 64) -> None:
        self.spatial, self.weights, self.dmax_m = spatial, weights, float(dmax_m)
        self.window = check_window(window)
        self.max_parts = max(int(max_parts), 1)
        self.rebuild_min, self.rebuild_ratio = int(rebuild_min), float(rebuild_ratio)
        self.resort_every = max(int(resort_every), 1)
        self._ring: deque[_Entry] = deque(maxlen=self.window)
        #: Messages pushed since the stream began.
        self.arrivals = 0
        #: Parts built (by a subscribe, a merge or a full rebuild).
        self.builds = 0
        self._parts: list[_Part] = []
        self._pending: list[TopkSubscriptions] = [subs] if subs is not None and len(subs) \
            else []

    def __len__(self) -> int:
        return sum(p.n_live() for p in self._parts) + sum(len(s) for s in self._pending)

    # ------------------------------------------------------------------ subscriptions
    def _find(self, q: IntArray) -> list[IntArray]:
        """Row of each id in each part (-1: not a live row there)."""
        out = []
        for p in self._parts:
            rows = rows_of_ids(p.ids, q)
            hit = rows >= 0
            hit[hit] = p.live[rows[hit]]
            out.append(np.where(hit, rows, -1))
        return out

    def contains(self, ids: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Whether each id is a live top-k subscription."""
        q = np.asarray(ids, dtype=np.int64)
        live = np.zeros(q.size, dtype=bool)
        for rows in self._find(q):
            live |= rows >= 0
        for s in self._pending:
            live |= rows_of_ids(s.ids, q) >= 0
        return live

    def _live_parts(self) -> list[TopkSubscriptions]:
        return [p.matcher.subs.take(np.flatnonzero(p.live)) for p in self._parts] + \
            self._pending

    def subscriptions(self) -> TopkSubscriptions:
        """The live subscriptions, by id."""
        live = concat_topk(self._live_parts())
        return live.take(np.argsort(live.ids, kind="stable"))

    def rows_of(self, ids: npt.ArrayLike) -> TopkSubscriptions:
        """The live subscriptions ``ids`` in that order (each must be live)."""
        q = np.asarray(ids, dtype=np.int64)
        every = concat_topk(self._live_parts())
        rows = rows_of_ids(every.ids, q)
        if np.any(rows < 0):
            msg = f"not live top-k subscriptions: {q[rows < 0][:10].tolist()}"
            raise KeyError(msg)
        return every.take(rows)

    def add(self, subs: TopkSubscriptions) -> None:
        """Add new subscriptions: their top-k is taken from the current window."""
        if len(subs):
            self._pending.append(subs)

    def remove(self, ids: npt.ArrayLike) -> None:
        """Remove live subscriptions (ids that are not live are ignored)."""
        q = np.asarray(ids, dtype=np.int64)
        for p, rows in zip(self._parts, self._find(q), strict=True):
            hit = np.unique(rows[rows >= 0])
            if hit.size:
                retire(p.matcher, hit)
                p.live[hit] = False
        kept = []
        for s in self._pending:
            gone = rows_of_ids(s.ids, q)
            if np.any(gone >= 0):
                keep = np.ones(len(s), dtype=bool)
                keep[gone[gone >= 0]] = False
                s = s.take(np.flatnonzero(keep))
            if len(s):
                kept.append(s)
        self._pending = kept

    def withdraw(self, ids: npt.ArrayLike) -> TopkEvents:
        """Remove live subscriptions as the next message arrives (expiry): the events
        evict each one's top-k from the bottom rank up (``seq`` = :attr:`arrivals`, phase
        0, before that message's own events), as the batch matcher's ``expires_at``."""
        q = np.unique(np.asarray(ids, dtype=np.int64))
        q = q[self.contains(q)]
        if q.size == 0:
            return TopkEvents.empty()
        cols: list[list[Any]] = [[] for _ in range(5)]
        for sid, top in zip(q.tolist(), self.results(q), strict=True):
            for x in reversed(top):
                for c, v in zip(cols, (x["message_id"], sid, x["rank"], x["score"],
                                       x["distance"]), strict=True):
                    c.append(v)
        self.remove(q)
        n = len(cols[0])
        return TopkEvents(np.full(n, self.arrivals, np.int64), np.zeros(n, np.int8),
                          np.full(n, EVENT_EVICT, np.int8), np.asarray(cols[0], np.int64),
                          np.asarray(cols[1], np.int64), np.asarray(cols[2], np.int64),
                          np.asarray(cols[3], np.float64), np.asarray(cols[4], np.float64))

    def move(self, ids: npt.ArrayLike, points: EdgePoints) -> None:
        """New places (each id once); their top-k is taken from the window again."""
        q = np.asarray(ids, dtype=np.int64)
        if q.size == 0:
            return
        rows = self.rows_of(q)
        self.remove(q)
        self.add(replace(rows, points=points))

    # ------------------------------------------------------------------ the stream
    def _ring_messages(self) -> Messages:
        """The window as messages, term ids taken again where the vocabulary grew."""
        n_terms = len(self.weights)
        stale = [e for e in self._ring if e.vocab < n_terms]
        if stale:
            ptr, terms = keyword_csr([e.words for e in stale], self.weights, add=False)
            for j, e in enumerate(stale):
                e.terms, e.vocab = terms[ptr[j]:ptr[j + 1]], n_terms
        ring = list(self._ring)
        ptr, terms = concat_csr([(np.array([0, e.terms.size], np.int64), e.terms)
                                 for e in ring])
        return Messages(np.asarray([e.mid for e in ring], dtype=np.int64),
                        EdgePoints(np.asarray([e.edge for e in ring], dtype=np.int32),
                                   np.asarray([e.offset for e in ring], dtype=np.float64)),
                        ptr, terms)

    def _build(self, subs: TopkSubscriptions) -> _Part:
        # The window in one compiled call (a call per resort_every messages cost a few
        # ms each in argument unboxing); re-sorting the cells only guides pruning.
        m = TopkIndexMatcher(self.spatial.network, subs, self.weights, dmax_m=self.dmax_m,
                             window=self.window, spatial=self.spatial,
                             resort_every=max(len(self._ring), 1))
        if self._ring:
            m.push(self._ring_messages())  # the subscriptions' results; no events
        m.resort_every = self.resort_every
        self.builds += 1
        return _Part(m, self.arrivals - len(self._ring), len(self.weights),
                     np.ones(len(subs), dtype=bool))

    def _ready(self) -> None:
        """Build the pending subscriptions' part; merge or rebuild parts when due."""
        for p in [p for p in self._parts if not p.live.any()]:
            self._parts.remove(p)
        if not self._pending and len(self._parts) <= self.max_parts:
            return
        base = self._parts[0].n_live() if self._parts else 0
        total = len(self)
        retired = sum(int((~p.live).sum()) for p in self._parts)
        if total - base + retired > max(self.rebuild_min, self.rebuild_ratio * base):
            every = self._live_parts()
            self._parts, self._pending = [], []
            self._parts.append(self._build(concat_topk(every)))
            return
        if self._pending:
            self._parts.append(self._build(concat_topk(self._pending)))
            self._pending = []
        if len(self._parts) > self.max_parts:  # merge the newer parts into one
            newer = [p.matcher.subs.take(np.flatnonzero(p.live)) for p in self._parts[1:]]
            self._parts = self._parts[:1]
            self._parts.append(self._build(concat_topk(newer)))

    def push(self, messages: Messages, *, times: npt.ArrayLike | None = None,
             keywords: Sequence[Sequence[str]] | None = None) -> TopkEvents:
        """Messages arrive in this order; the insertions and evictions they cause
        (``seq``: arrival numbers since the stream began).

        ``messages`` carry the term ids of this window's weights. ``keywords``: their
        keyword strings, kept in the window so that a subscription bringing a new term
        later finds it in these messages too (default: the strings of their term ids).
        ``times`` (the signature of every top-k matcher,
        :class:`roadpubsub.pruning.mixed.TopkMatcher`): these subscriptions carry no expiry time,
        so none is withdrawn by
        it; their owner withdraws them (:meth:`withdraw`, the service's purge).
        """
        del times  # no expiry times here (see above)
        n = len(messages)
        if n == 0:
            return TopkEvents.empty()
        if keywords is None:
            terms = self.weights.terms
            keywords = [[terms[t] for t in messages.keywords(j).tolist()] for j in range(n)]
        elif len(keywords) != n:
            msg = f"keywords must hold one list per message ({n}), got {len(keywords)}"
            raise InputError(msg)
        self._ready()
        msgs = messages
        parts = []
        for p in self._parts:
            found = p.matcher.push(_known_terms(msgs, p.n_terms))
            if len(found):
                parts.append(TopkEvents(found.seq + p.offset, found.phase, found.event,
                                        found.message_id, found.subscription_id,
                                        found.rank, found.score, found.distance))
        vocab = len(self.weights)
        ids, points = msgs.ids, msgs.points
        for j in range(n):
            self._ring.append(_Entry(self.arrivals + j, int(ids[j]), int(points.edge[j]),
                                     float(points.offset[j]), list(keywords[j]),
                                     msgs.kw_terms[msgs.kw_ptr[j]:msgs.kw_ptr[j + 1]],
                                     vocab))
        self.arrivals += n
        if len(parts) == 1:
            return parts[0]
        return TopkEvents.concat(parts)  # one canonical order across the parts

    def results(self, ids: npt.ArrayLike) -> list[list[dict[str, Any]]]:
        """Each live subscription's top-k now: message_id, rank, score, distance."""
        q = np.asarray(ids, dtype=np.int64)
        out: list[list[dict[str, Any]]] = [[] for _ in range(q.size)]
        if q.size == 0:
            return out
        self._ready()
        first = self._ring[0].seq if self._ring else 0
        found = np.zeros(q.size, dtype=bool)
        for p, rows in zip(self._parts, self._find(q), strict=True):
            st, buf_ptr, k = p.matcher.state, p.matcher.index.buf_ptr, p.matcher.subs.k
            for i in np.flatnonzero(rows >= 0).tolist():
                r = int(rows[i])
                found[i] = True
                base = int(buf_ptr[r])
                for j in range(min(int(k[r]), int(st.size[r]))):
                    seq = int(st.b_seq[base + j]) + p.offset
                    out[i].append({"message_id": self._ring[seq - first].mid,
                                   "rank": j + 1, "score": float(st.b_score[base + j]),
                                   "distance": float(st.b_dist[base + j])})
        if not found.all():
            msg = f"not live top-k subscriptions: {q[~found][:10].tolist()}"
            raise KeyError(msg)
        return out

    # ------------------------------------------------------------------ snapshots
    def arrays(self) -> dict[str, npt.NDArray[Any]]:
        """Subscriptions and window as arrays (for snapshots; :meth:`from_arrays`)."""
        s = self.subscriptions()
        ring = list(self._ring)
        words = [w for e in ring for w in e.words]
        wptr = np.zeros(len(ring) + 1, np.int64)
        np.cumsum([len(e.words) for e in ring], out=wptr[1:])
        return {"ids": s.ids, "edge": s.points.edge, "offset": s.points.offset,
                "alpha": s.alpha, "k": s.k, "kw_ptr": s.kw_ptr, "kw_terms": s.kw_terms,
                "win_seq": np.asarray([e.seq for e in ring], np.int64),
                "win_id": np.asarray([e.mid for e in ring], np.int64),
                "win_edge": np.asarray([e.edge for e in ring], np.int32),
                "win_offset": np.asarray([e.offset for e in ring], np.float64),
                "win_kw_ptr": wptr,
                # UTF-8 bytes and offsets, not a fixed-width text array (padded to the
                # longest keyword)
                **dict(zip(("win_words_utf8", "win_words_ptr"), encode_terms(words),
                           strict=True)),
                "arrivals": np.asarray([self.arrivals], np.int64)}

    @classmethod
    def from_arrays(cls, spatial: SpatialIndex, weights: TermWeights, a: dict[str, Any], *,
                    dmax_m: float, window: int) -> LiveTopk:
        """The state saved by :meth:`arrays` (one part, built at the first use)."""
        subs = TopkSubscriptions(np.asarray(a["ids"], np.int64),
                                 EdgePoints(np.asarray(a["edge"], np.int32),
                                            np.asarray(a["offset"], np.float64)),
                                 np.asarray(a["alpha"], np.float64),
                                 np.asarray(a["k"], np.int64),
                                 np.asarray(a["kw_ptr"], np.int64),
                                 np.asarray(a["kw_terms"], np.int32))
        live = cls(spatial, weights, dmax_m=dmax_m, window=window, subs=subs)
        words = decode_terms(a["win_words_utf8"], np.asarray(a["win_words_ptr"])) \
            if "win_words_utf8" in a else [str(w) for w in a["win_words"].tolist()]
        wptr = np.asarray(a["win_kw_ptr"], np.int64)
        for j, (seq, mid, e, o) in enumerate(zip(
                a["win_seq"].tolist(), a["win_id"].tolist(), a["win_edge"].tolist(),
                a["win_offset"].tolist(), strict=True)):
            live._ring.append(_Entry(int(seq), int(mid), int(e), float(o),
                                     words[int(wptr[j]):int(wptr[j + 1])],
                                     np.empty(0, np.int32), -1))  # terms taken at first use
        live.arrivals = int(np.asarray(a["arrivals"])[0])
        return live

