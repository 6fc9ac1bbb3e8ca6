"""Live subscriptions located on routes and areas (issue 32): the service's set store.

A threshold or boolean subscription may give a ``geometry`` instead of a point
(:mod:`roadpubsub.index.events`); its resolved
:class:`~roadpubsub.roadnet.segment_sets.SegmentSet` lives here, beside the point indexes, with
its keywords (term ids of the index's one vocabulary), alpha, tau or radius.

Matching: :meth:`LiveSets.matchers` gives the set matchers of
:mod:`roadpubsub.pruning.set_matchers` for the live set subscriptions. Building one costs
O(pieces + nodes + arcs + cells^2), about 0.6 s per 1,000 routes of 2-20 km on Rome, so a
change does not rebuild them whole: as the live boolean kind does
(:class:`~roadpubsub.pruning.live_kinds.BaseAndDelta`), a *base* built over the sets as
they were at one moment answers for every row not changed since, and a *delta* built over
the rows changed since (rebuilt after a change, in milliseconds while it is small) answers
for those; the changed ids' base deliveries are dropped. A store of at most
``sync_pieces`` pieces is simply rebuilt whole. Once the delta's pieces pass
``max(sync_pieces, delta_share * base pieces)`` a new base is built from a copy of the rows
on a worker thread (``set-base``) while the apply thread goes on with the old one; it is
adopted between two events, the rows changed meanwhile staying in the delta. Each live
row is answered by exactly one layer with the same kernels, so deliveries equal a matcher
built over all rows at once (tests/service/test_live_sets.py).

Snapshots hold the store columnar (:meth:`LiveSets.arrays`, in ``<seq>.kinds.npz``, whose
crc32 the manifest holds): ids, kind, alpha, tau, radius, keywords (CSR), the pieces
(CSR: edge, start, end, exact floats) and the route legs' node paths (CSR of CSR), so a
restart rebuilds the identical sets without resolving a geometry again.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from roadpubsub.index.kinds import KIND_BOOLEAN, KIND_CODES, BooleanSubscriptions
from roadpubsub.index.model import Subscriptions
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.terms import TermWeights
from roadpubsub.pruning.live_kinds import BaseAndDelta
from roadpubsub.pruning.set_matchers import SetBooleanMatcher, SetThresholdMatcher
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.segment_sets import SegmentSet, SegmentSets
from roadpubsub.roadnet.settings import DEFAULTS

__all__ = ["LiveSets", "SetRow", "set_from_record", "set_record"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
_BOOLEAN = KIND_CODES[KIND_BOOLEAN]


@dataclass(frozen=True, eq=False)
class SetRow:
    """One live set subscription: kind code (threshold or boolean), its set, its keyword
    term ids, alpha and tau (threshold; NaN otherwise), radius (boolean; NaN otherwise)."""

    kind: int
    set: SegmentSet
    terms: npt.NDArray[np.int32]
    alpha: float
    tau: float
    radius: float


def set_record(s: SegmentSet) -> dict[str, Any]:
    """A set as a log record's JSON value (internal edge and node indices, exact floats);
    :func:`set_from_record` reads it back."""
    return {"kind": s.kind, "edge": s.edge.tolist(), "start": s.start.tolist(),
            "end": s.end.tolist(), "node_paths": [p.tolist() for p in s.node_paths]}


def set_from_record(network: RoadNetwork, rec: dict[str, Any]) -> SegmentSet:
    """The set :func:`set_record` wrote (checked against ``network``)."""
    return SegmentSet.of(network, np.asarray(rec["edge"], np.int64),
                         np.asarray(rec["start"], np.float64),
                         np.asarray(rec["end"], np.float64), kind=rec["kind"],
                         node_paths=rec["node_paths"])


@dataclass(frozen=True)
class _Base:
    threshold: Any
    boolean: Any
    pieces: int


def _layers(base: Any, retired: IntArray, delta: Any) -> Any:
    if base is None and delta is None:
        return None
    return BaseAndDelta(base, retired=retired, delta=delta)


class LiveSets:
    """The live set subscriptions of one service (see the module docstring).

    Parameters
    ----------
    network, spatial, weights
        The index's network, cells and bounds, and vocabulary (shared, it may grow).
    dmax_m
        Dmax in metres.
    sync_pieces
        A store of at most this many pieces is rebuilt whole after a change; the delta may
        hold this many before a new base is built (>= 0).
    delta_share
        A new base is built once the delta holds more than this share of the base's
        pieces (and more than ``sync_pieces``), in [0, inf).
    background
        Build new bases on a worker thread (False: in line, for tests).
    """

    def __init__(self, network: RoadNetwork, spatial: SpatialIndex, weights: TermWeights, *,
                 dmax_m: float, sync_pieces: int = DEFAULTS.service_set_sync_pieces,
                 delta_share: float = DEFAULTS.service_set_delta_share,
                 background: bool = True) -> None:
        self.network, self.spatial, self.weights = network, spatial, weights
        self.dmax_m = float(dmax_m)
        self.sync_pieces, self.delta_share = int(sync_pieces), float(delta_share)
        self.background = background
        self.rows: dict[int, SetRow] = {}
        self._pieces = 0  # pieces of every live row
        self._built: tuple[Any, Any] | None = None  # what matchers() answers until a change
        self._base: _Base | None = None
        self._changed: set[int] = set()  # ids changed since the base's rows were taken
        self._since_copy: set[int] | None = None  # ... since a running build's copy
        self._worker: threading.Thread | None = None
        self._next: _Base | None = None
        self._error: BaseException | None = None
        #: Bases built (whole stores); deltas built (changed rows only).
        self.builds = 0
        self.delta_builds = 0

    def __len__(self) -> int:
        return len(self.rows)

    def count(self, kind: int) -> int:
        """Live set subscriptions of one kind code."""
        return sum(1 for r in self.rows.values() if r.kind == kind)

    def ids(self) -> IntArray:
        """Live ids, ascending."""
        return np.sort(np.fromiter(self.rows.keys(), dtype=np.int64, count=len(self.rows)))

    def contains(self, ids: IntArray) -> npt.NDArray[np.bool_]:
        """Whether each id is a live set subscription."""
        rows = self.rows
        return np.fromiter((i in rows for i in ids.tolist()), dtype=bool, count=ids.size)

    def add(self, ids: IntArray, kind: npt.NDArray[np.int8], sets: list[SegmentSet],
            kw_ptr: IntArray, kw_terms: npt.NDArray[np.int32], alpha: FloatArray,
            tau: FloatArray, radius: FloatArray) -> None:
        """Add set subscriptions (ids new; kinds threshold or boolean)."""
        for j, i in enumerate(ids.tolist()):
            self.rows[i] = SetRow(int(kind[j]), sets[j],
                                  kw_terms[kw_ptr[j]:kw_ptr[j + 1]].astype(np.int32),
                                  float(alpha[j]), float(tau[j]), float(radius[j]))
            self._pieces += int(sets[j].edge.size)
        self._changes(ids)

    def remove(self, ids: IntArray) -> None:
        """Remove those of ``ids`` that are set subscriptions (others are ignored)."""
        gone = [self.rows.pop(i, None) for i in ids.tolist()]
        if any(g is not None for g in gone):
            self._pieces -= sum(int(g.set.edge.size) for g in gone if g is not None)
            self._changes(ids)

    def move(self, ids: IntArray, sets: list[SegmentSet]) -> None:
        """Give live set subscriptions new sets (the last one of a repeated id wins)."""
        for i, s in zip(ids.tolist(), sets, strict=True):
            old = self.rows[i]
            self.rows[i] = SetRow(old.kind, s, old.terms, old.alpha, old.tau, old.radius)
            self._pieces += int(s.edge.size) - int(old.set.edge.size)
        self._changes(ids)

    def _changes(self, ids: IntArray) -> None:
        changed = ids.tolist()
        self._changed.update(changed)
        if self._since_copy is not None:
            self._since_copy.update(changed)
        self._built = None

    # ----------------------------------------------------------------- matching
    def matchers(self) -> tuple[Any, Any]:
        """(threshold, boolean) matchers of the live sets (None: no such row), as the
        module docstring says: rebuilt after a change, then reused.

        Raises
        ------
        Exception
            A worker thread's failed build, re-raised here (the rows are unchanged).
        """
        if self._worker is not None and not self._worker.is_alive():
            self._adopt()
        if self._built is None:
            self._built = self._current()
        return self._built

    def _current(self) -> tuple[Any, Any]:
        if self._base is None or (self._worker is None and self._pieces <= self.sync_pieces):
            self._base = self._build_base(dict(self.rows))
            self._changed = set()
            return self._base.threshold, self._base.boolean
        live = [i for i in sorted(self._changed) if i in self.rows]
        delta = {i: self.rows[i] for i in live}
        pieces = sum(int(r.set.edge.size) for r in delta.values())
        if (self._worker is None
                and pieces > max(self.sync_pieces, self.delta_share * self._base.pieces)):
            if not self.background:
                self._base = self._build_base(dict(self.rows))
                self._changed = set()
                return self._base.threshold, self._base.boolean
            self._start()
        retired = np.fromiter(self._changed, dtype=np.int64, count=len(self._changed))
        self.delta_builds += 1
        return (_layers(self._base.threshold, retired, self._build(delta, threshold=True)),
                _layers(self._base.boolean, retired, self._build(delta, threshold=False)))

    def _build_base(self, rows: dict[int, SetRow]) -> _Base:
        base = _Base(self._build(rows, threshold=True), self._build(rows, threshold=False),
                     sum(int(r.set.edge.size) for r in rows.values()))
        self.builds += 1
        return base

    def _start(self) -> None:
        copy = dict(self.rows)  # SetRow and SegmentSet are immutable: a shallow copy does
        self._since_copy = set()

        def run() -> None:
            try:
                self._next = self._build_base(copy)
            except BaseException as exc:  # re-raised on the apply thread by matchers()
                self._error = exc

        self._worker = threading.Thread(target=run, name="set-base", daemon=True)
        self._worker.start()

    def _adopt(self) -> None:
        worker, self._worker = self._worker, None
        assert worker is not None
        worker.join()
        since, self._since_copy = self._since_copy or set(), None
        built, self._next = self._next, None
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        assert built is not None
        self._base, self._changed = built, since
        self._built = None

    @property
    def building(self) -> bool:
        """Whether a new base is being built on the worker thread (or waits to be adopted)."""
        return self._worker is not None

    def changed(self) -> frozenset[int]:
        """The ids the delta answers for: changed since the base's rows were taken."""
        return frozenset(self._changed) if self._base is not None else frozenset()

    def finish(self) -> None:
        """Wait for a base under way and adopt it (tests; a stop need not)."""
        if self._worker is not None:
            self._worker.join()
            self._adopt()

    def _build(self, rows_by_id: dict[int, SetRow], *, threshold: bool) -> Any:
        ids = np.asarray(sorted(i for i, r in rows_by_id.items()
                                if (r.kind == _BOOLEAN) != threshold), dtype=np.int64)
        if ids.size == 0:
            return None
        rows = [rows_by_id[i] for i in ids.tolist()]
        sets = SegmentSets.of_sets([r.set for r in rows])
        ptr = np.zeros(ids.size + 1, np.int64)
        ptr[1:] = np.cumsum([r.terms.size for r in rows])
        terms = np.concatenate([r.terms for r in rows]).astype(np.int32)
        # the point each row carries is not used by the set matchers: its set's first piece
        place = EdgePoints(np.asarray([r.set.edge[0] for r in rows], np.int32),
                           np.asarray([r.set.start[0] for r in rows], np.float64))
        if threshold:
            subs = Subscriptions(ids, place, np.asarray([r.alpha for r in rows]),
                                 np.asarray([r.tau for r in rows]), ptr, terms)
            return SetThresholdMatcher(self.network, subs, sets, self.weights,
                                       dmax_m=self.dmax_m, spatial=self.spatial)
        boo = BooleanSubscriptions(ids, place, np.asarray([r.radius for r in rows]), ptr,
                                   terms)
        return SetBooleanMatcher(self.network, boo, sets, self.weights, dmax_m=self.dmax_m,
                                 spatial=self.spatial)

    # ----------------------------------------------------------------- reads
    def row_json(self, sid: int) -> dict[str, Any]:
        """A live set subscription as a row: its kind, keywords, alpha, tau or radius, no
        point (``u``, ``v``, ``offset``, ``lon``, ``lat`` null) and ``geometry``: the
        set's kind (route or area), ``length_m``, the route legs' ``node_paths`` and the
        ``segments`` used (edge index, original node ids ``u``, ``v``, ``start_m``,
        ``end_m`` metres from ``u``; see
        :meth:`~roadpubsub.roadnet.segment_sets.SegmentSet.to_json`)."""
        r = self.rows[sid]
        terms = self.weights.terms
        kind = "boolean" if r.kind == _BOOLEAN else "threshold"
        return {"id": sid, "u": None, "v": None, "offset": None, "lon": None, "lat": None,
                "keywords": [terms[t] for t in r.terms.tolist()],
                "alpha": None if r.kind == _BOOLEAN else r.alpha,
                "tau": None if r.kind == _BOOLEAN else r.tau, "kind": kind,
                "radius": r.radius if r.kind == _BOOLEAN else None, "k": None,
                "geometry": r.set.to_json(self.network)}

    # ----------------------------------------------------------------- snapshots
    def arrays(self) -> dict[str, npt.NDArray[Any]]:
        """The store as columns (for snapshots; :meth:`load_arrays` reads them)."""
        ids = self.ids()
        rows = [self.rows[i] for i in ids.tolist()]

        def csr(parts: list[npt.NDArray[Any]], dtype: Any) -> tuple[IntArray, Any]:
            ptr = np.zeros(len(parts) + 1, np.int64)
            ptr[1:] = np.cumsum([p.size for p in parts]) if parts else []
            flat = np.concatenate(parts).astype(dtype) if parts else np.empty(0, dtype)
            return ptr, flat

        kw_ptr, kw_terms = csr([r.terms for r in rows], np.int32)
        ptr, edge = csr([r.set.edge for r in rows], np.int32)
        _, start = csr([r.set.start for r in rows], np.float64)
        _, end = csr([r.set.end for r in rows], np.float64)
        legs = [p for r in rows for p in r.set.node_paths]
        leg_ptr = np.zeros(ids.size + 1, np.int64)
        leg_ptr[1:] = np.cumsum([len(r.set.node_paths) for r in rows]) if rows else []
        node_ptr, nodes = csr(legs, np.int64)
        return {"ids": ids, "kind": np.asarray([r.kind for r in rows], np.int8),
                "set_kind": np.asarray([r.set.kind for r in rows], dtype=str).reshape(-1),
                "alpha": np.asarray([r.alpha for r in rows], np.float64),
                "tau": np.asarray([r.tau for r in rows], np.float64),
                "radius": np.asarray([r.radius for r in rows], np.float64),
                "kw_ptr": kw_ptr, "kw_terms": kw_terms, "ptr": ptr, "edge": edge,
                "start": start, "end": end, "leg_ptr": leg_ptr, "node_ptr": node_ptr,
                "nodes": nodes}

    def load_arrays(self, a: dict[str, npt.NDArray[Any]], *, where: str) -> None:
        """Replace the store with the one :meth:`arrays` saved.

        Raises
        ------
        InputError
            Columns that do not fit together or do not fit the network (named by ``where``).
        """
        try:
            ids = np.asarray(a["ids"], np.int64)
            n = ids.size
            ptr, leg_ptr, node_ptr = a["ptr"], a["leg_ptr"], a["node_ptr"]
            kw_ptr = a["kw_ptr"]
            if not (ptr.size == leg_ptr.size == kw_ptr.size == n + 1):
                msg = "the set columns' lengths differ"
                raise ValueError(msg)
            rows: dict[int, SetRow] = {}
            for j, i in enumerate(ids.tolist()):
                sl = slice(int(ptr[j]), int(ptr[j + 1]))
                paths = [a["nodes"][int(node_ptr[k]):int(node_ptr[k + 1])]
                         for k in range(int(leg_ptr[j]), int(leg_ptr[j + 1]))]
                s = SegmentSet.of(self.network, a["edge"][sl], a["start"][sl], a["end"][sl],
                                  kind=str(a["set_kind"][j]), node_paths=paths)
                rows[i] = SetRow(int(a["kind"][j]), s,
                                 a["kw_terms"][int(kw_ptr[j]):int(kw_ptr[j + 1])]
                                 .astype(np.int32),
                                 float(a["alpha"][j]), float(a["tau"][j]),
                                 float(a["radius"][j]))
        except (KeyError, IndexError, ValueError) as exc:
            msg = f"{where}: damaged route/area columns ({exc})"
            raise InputError(msg) from exc
        self.finish()
        self.rows = rows
        self._pieces = sum(int(r.set.edge.size) for r in rows.values())
        self._base, self._built, self._changed = None, None, set()
