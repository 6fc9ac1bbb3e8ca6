"""What both indexing architectures share: subscription slots and dynamic updates.

Index files are written and inspected by :mod:`roadpubsub.index.index_file`, loaded and verified by
:mod:`roadpubsub.index.store`.

Subscriptions live in *slots*, sorted by (cell, edge) at build time so that a cell's
subscriptions sit together. Updates never require the caller to rebuild:

* ``subscribe`` appends to a small *delta* batch that the matchers scan alongside the
  postings (with the same distance and prefix bounds);
* ``unsubscribe`` clears a slot's ``active`` flag (or drops the row from the delta);
* ``move`` is unsubscribe + subscribe with the new location.

Per-cell and per-edge statistics are only ever loosened by updates (a removed subscription
leaves its maximum behind), so every bound stays safe. When the delta outgrows
``delta_compaction_min`` and ``delta_compaction_ratio`` of the slots, the index compacts:
slots and postings are rebuilt from the live subscriptions, reusing cells and bounds.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar, Self

import numpy as np
import numpy.typing as npt

from roadpubsub.index.csr import take_csr
from roadpubsub.index.delta import DeltaBuffer, search_sorted
from roadpubsub.index.delta_kernels import MovedRows, SlotSource, lookup_kernel
from roadpubsub.index.index_file import save_index
from roadpubsub.index.limits import subscription_limits
from roadpubsub.index.model import (
    InvalidSubscriptionError,
    Subscriptions,
    concat_subscriptions,
    has_repeats,
)
from roadpubsub.index.postings import PostingLayout
from roadpubsub.index.slot_record import pack_slot_record
from roadpubsub.index.spatial import PointFacts, SpatialIndex, astuple_facts
from roadpubsub.index.terms import TermWeights
from roadpubsub.roadnet.errors import InputError, describe_rows
from roadpubsub.roadnet.lengths import check_dmax
from roadpubsub.roadnet.locations import EdgePoints, points_on_edges
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.settings import DEFAULTS

__all__ = ["SubscriptionIndex"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


#: Attributes of an index that :meth:`SubscriptionIndex.adopt_compacted` keeps (the rest
#: is the build's).
_ADOPT_KEEPS = frozenset({"weights", "version", "spatial", "dmax_m", "tolerance",
                          "auto_compact", "_delta", "delta", "delta_facts", "delta_dn_limit",
                          "delta_wildcard"})
#: A move of delta rows only has no new limits to write.
_NO_LIMITS = (np.empty(0, dtype=np.float64), np.empty(0, dtype=np.bool_))


class SubscriptionIndex:
    """Base of :class:`~roadpubsub.index.eia.EnhancedIndex` and
    :class:`~roadpubsub.index.bia.BasicIndex`.

    Parameters
    ----------
    spatial
        Cells and bounds of the network.
    subscriptions
        The initial subscriptions (keyword ids of ``weights``).
    weights
        Keyword weights; grows when new subscriptions bring unseen terms.
    dmax_m
        Dmax, metres (> 0).
    tolerance
        Score tolerance of the delivery rule.
    """

    kind: ClassVar[str] = "base"
    #: Compact in :meth:`subscribe` once :meth:`delta_due`; the live service turns this off
    #: and compacts in the background (:func:`roadpubsub.index.delta.compaction_input`).
    auto_compact: bool = True

    def __init__(
        self,
        spatial: SpatialIndex,
        subscriptions: Subscriptions,
        weights: TermWeights,
        *,
        dmax_m: float,
        tolerance: float = DEFAULTS.score_tolerance,
    ) -> None:
        self._set_parameters(spatial, weights, dmax_m=dmax_m, tolerance=tolerance)
        self._rebuild(subscriptions)

    def _set_parameters(self, spatial: SpatialIndex, weights: TermWeights, *, dmax_m: float,
                        tolerance: float) -> None:
        self.dmax_m = check_dmax(dmax_m)
        self.spatial = spatial
        self.weights = weights
        self.tolerance = float(tolerance)
        self.version = 0

    @classmethod
    def restore(cls, spatial: SpatialIndex, slots: Subscriptions, weights: TermWeights, *,
                dmax_m: float, tolerance: float,
                structures: dict[str, npt.NDArray[Any]],
                saved: dict[str, npt.NDArray[Any]] | None = None) -> Self:
        """An index from saved parts, without building its postings.

        ``slots`` are the subscriptions in slot order (as :meth:`save` writes them) and
        ``structures`` the arrays of :meth:`structure_arrays` built on them with these
        weights, Dmax and tolerance. ``saved`` may hold the slots' id order
        (``subs.id_order``) and point facts (``facts.x``, ``facts.y``, ``facts.din_out``,
        ``facts.din_in``) as :meth:`save` writes them, checked by
        :func:`roadpubsub.index.validate.check_index_arrays`; what it lacks is computed.
        """
        index = cls.__new__(cls)
        index._set_parameters(spatial, weights, dmax_m=dmax_m, tolerance=tolerance)
        index._set_slots(slots, saved=saved or {})
        index._restore_structures(structures)
        index._set_delta(Subscriptions.empty())
        return index

    # ------------------------------------------------------------------ building
    @property
    def network(self) -> RoadNetwork:
        """The road network."""
        return self.spatial.network

    def _rebuild(self, subscriptions: Subscriptions) -> None:
        cells = self.spatial.cells
        cell = cells.edge_cell[subscriptions.points.edge].astype(np.int64)
        self._set_slots(subscriptions.take(np.lexsort((subscriptions.points.edge, cell))))
        self._build_structures()
        self._set_delta(Subscriptions.empty())

    def _set_slots(self, subscriptions: Subscriptions, *,
                   saved: dict[str, npt.NDArray[Any]] | None = None) -> None:
        """Make ``subscriptions`` (sorted by (cell, edge)) the slots, all active.

        ``saved``: checked id order and point facts of a file (see :meth:`restore`).
        """
        saved = saved or {}
        self._bump_version()
        self.subs = subscriptions
        if all(f"facts.{k}" in saved for k in ("x", "y", "din_out", "din_in")):
            local = self.spatial.graph.to_local(subscriptions.points)
            facts = PointFacts(
                x=saved["facts.x"], y=saved["facts.y"],
                cell=self.spatial.cells.edge_cell[subscriptions.points.edge],
                din_out=saved["facts.din_out"], din_in=saved["facts.din_in"],
                chain=local.edge, chain_offset=local.offset)
        else:
            facts = self.spatial.facts(self.subs.points)
        self.facts: PointFacts
        self.subs, self.facts, self._slot_record = pack_slot_record(self.subs, facts)
        self._packed = (self.subs, self.facts)
        self.active = np.ones(len(self.subs), dtype=bool)
        self._id_order = saved["subs.id_order"] if "subs.id_order" in saved \
            else np.argsort(self.subs.ids, kind="stable")
        self._sorted_ids = self.subs.ids[self._id_order]
        self.term_rank = self.weights.rank()
        self.layout: PostingLayout

    @property
    def slot_record(self) -> FloatArray:
        """The slots' (n_slots, 8) record of what matching reads per candidate (position,
        border distances, chain-graph point, alpha, tau; :mod:`roadpubsub.index.slot_record`), of
        which ``facts`` and ``subs.alpha``/``subs.tau`` are column views. Slots or facts
        set by other means than the slots' own setup are packed here first."""
        if self._packed[0] is not self.subs or self._packed[1] is not self.facts:
            self.subs, self.facts, self._slot_record = pack_slot_record(self.subs,
                                                                        self.facts)
            self._packed = (self.subs, self.facts)
        return self._slot_record

    def _build_structures(self) -> None:
        """Subclasses build ``self.layout`` and their cell/edge statistics here."""
        raise NotImplementedError

    def _restore_structures(self, arrays: dict[str, npt.NDArray[Any]]) -> None:
        """Take the postings and statistics from :meth:`structure_arrays` of a saved index
        of the same slots, instead of building them."""
        try:
            self.layout = PostingLayout.from_arrays(arrays, prefix="layout.")
            self.edge_min_alpha = arrays["edge_min_alpha"]
            self.edge_max_alpha = arrays["edge_max_alpha"]
            self.edge_min_tau_e = arrays["edge_min_tau_e"]
            self._restore_cell_statistics(arrays)
        except KeyError as exc:
            msg = f"the saved {self.kind} index lacks part of its structures ({exc})"
            raise InputError(msg) from exc
        have = self.structure_arrays()
        if set(have) != set(arrays):
            msg = (f"the saved {self.kind} index does not hold the structures of this "
                   f"version: {sorted(set(have) ^ set(arrays))}")
            raise InputError(msg)

    def _restore_cell_statistics(self, arrays: dict[str, npt.NDArray[Any]]) -> None:
        """Subclasses take their per-cell statistics from saved ``arrays`` here."""
        raise NotImplementedError

    def _edge_statistics(self, tau_e: FloatArray) -> None:
        """Per-edge min/max alpha and min tau_e of the slots (paper Fig. 3(b) statistics)."""
        m = self.network.n_edges
        edge = self.subs.points.edge
        self.edge_min_alpha = np.full(m, np.inf)
        self.edge_max_alpha = np.full(m, -np.inf)
        self.edge_min_tau_e = np.full(m, np.inf)
        np.minimum.at(self.edge_min_alpha, edge, self.subs.alpha)
        np.maximum.at(self.edge_max_alpha, edge, self.subs.alpha)
        np.minimum.at(self.edge_min_tau_e, edge, tau_e)

    # ------------------------------------------------------------------ delta
    def _bump_version(self) -> None:
        # Matchers size their scratch arrays by the slots and delta; a new version tells
        # them to rebuild those (object ids can be reused, versions cannot).
        self.version += 1

    def _set_delta(self, delta: Subscriptions) -> None:
        """Replace the delta batch, computing its facts and limits."""
        self._bump_version()
        self._delta = DeltaBuffer()
        self._publish_delta()
        self.term_rank = self.weights.rank()
        if len(delta):
            self._append_delta(delta)

    def _publish_delta(self) -> None:
        # The matchers read these four attributes; they are views of the buffer's rows.
        buf = self._delta
        self.delta, self.delta_facts = buf.subs, buf.facts
        self.delta_dn_limit, self.delta_wildcard = buf.dn_limit, buf.wildcard

    def _limits(self, subs: Subscriptions) -> tuple[FloatArray, npt.NDArray[np.bool_]]:
        """DNlimit and the wildcard flag of each row (what the delta scan tests)."""
        return subscription_limits(subs.alpha, subs.tau, dmax_m=self.dmax_m,
                                   tolerance=self.tolerance)

    def _append_delta(self, new: Subscriptions) -> None:
        """Add rows to the delta, computing facts and limits for the new rows only."""
        self._bump_version()
        limit, wildcard = self._limits(new)
        self._delta.append(new, self.spatial.facts(new.points), limit, wildcard)
        self._publish_delta()

    def _keep_delta_rows(self, rows: IntArray) -> None:
        self._bump_version()
        self._delta.keep(rows)
        self._publish_delta()

    # ------------------------------------------------------------------ updates
    def __len__(self) -> int:
        # count_nonzero, not sum: a sum of 1M bools first casts them (1 ms a /metrics)
        return int(np.count_nonzero(self.active)) + len(self.delta)

    @property
    def id_order(self) -> IntArray:
        """The slots in increasing id order (slot numbers; saved with the index)."""
        return self._id_order

    def _slot_of(self, ids: IntArray) -> IntArray:
        """Active slot of each id, -1 where it is not an active slot."""
        if self.subs.ids.size == 0:
            return np.full(ids.size, -1, dtype=np.int64)
        sorted_ids = self._sorted_ids
        pos = np.minimum(search_sorted(sorted_ids, ids), sorted_ids.size - 1)
        slot = np.where(sorted_ids[pos] == ids, self._id_order[pos], -1)
        return np.where((slot >= 0) & self.active[np.maximum(slot, 0)], slot, -1)

    def contains(self, ids: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Whether each id is a live subscription of the index."""
        q = np.atleast_1d(np.asarray(ids, dtype=np.int64))
        return (self._slot_of(q) >= 0) | (self._delta_row_of(q) >= 0)

    def _delta_row_of(self, q: IntArray) -> IntArray:
        """Delta row of each id, -1 where it is not in the delta.

        Ids are looked up in the delta's id order, which the delta keeps up to date
        (:meth:`~roadpubsub.index.delta.DeltaBuffer.row_of`), rather than sorting it per call; a
        binary search also beats comparing a few ids with every delta row (a single move
        checked its id that way three times, each a pass over 20,000-80,000 rows).
        """
        return self._delta.row_of(q)

    def check_points(self, points: EdgePoints, *, labels: npt.ArrayLike | None = None,
                     what: str = "subscriptions") -> None:
        """Refuse points off this index's network: an edge id outside [0, n_edges), or an
        offset that is not a finite number within [0, the edge's length] (metres).

        Raises
        ------
        InvalidSubscriptionError
            Naming the offending rows (``labels``, e.g. the ids, else row numbers).
        """
        length = self.network.edge_length
        if points_on_edges(points, length):  # the usual answer, in one compiled pass
            return
        edge = np.asarray(points.edge)
        offset = np.asarray(points.offset, dtype=np.float64)
        names = np.arange(edge.size) if labels is None else np.asarray(labels)
        bad_edge = (edge < 0) | (edge >= length.size)
        safe = np.where(bad_edge, 0, edge)
        bad_offset = ~bad_edge & ~((offset >= 0.0) & (offset <= length[safe]))
        problems = []
        if bad_edge.any():
            problems.append(f"edge ids outside [0, {length.size}): "
                            f"{describe_rows(names[bad_edge].tolist())}")
        if bad_offset.any():
            problems.append("offsets not within [0, edge length] metres: "
                            f"{describe_rows(names[bad_offset].tolist())}")
        if problems:
            msg = f"invalid {what}: " + "; ".join(problems)
            raise InvalidSubscriptionError(msg)

    def _check_new(self, subscriptions: Subscriptions) -> None:
        """What :meth:`subscribe` needs beyond the batch's own checks: points on this
        network and keyword ids of this index's weights."""
        self.check_points(subscriptions.points, labels=subscriptions.ids)
        terms = subscriptions.kw_terms
        if terms.size and (int(terms.min()) < 0 or int(terms.max()) >= len(self.weights)):
            rows = np.searchsorted(subscriptions.kw_ptr,
                                   np.flatnonzero((terms < 0) | (terms >= len(self.weights))),
                                   side="right") - 1
            msg = ("invalid subscriptions: keyword ids unknown to the index's weights: ids "
                   f"{describe_rows(subscriptions.ids[np.unique(rows)].tolist())}")
            raise InvalidSubscriptionError(msg)

    def subscribe(self, subscriptions: Subscriptions) -> None:
        """Add subscriptions (their ids must be new); effective for the next message.

        Raises
        ------
        InvalidSubscriptionError
            Ids already present, points off the network, or keyword ids the index's weights
            do not hold; nothing is added then.
        """
        self._check_new(subscriptions)
        clash = self.contains(subscriptions.ids)
        if clash.any():
            known = describe_rows(subscriptions.ids[clash][:10].tolist(), total=int(clash.sum()))
            msg = f"subscription ids already in the index: {known}"
            raise InvalidSubscriptionError(msg)
        self._append_delta(subscriptions)
        if self.auto_compact and self.delta_due():
            self.compact()

    def delta_due(self) -> bool:
        """Whether the delta has outgrown ``delta_compaction_min`` and
        ``delta_compaction_ratio`` of the slots (time to compact)."""
        return len(self.delta) > max(DEFAULTS.delta_compaction_min,
                                     DEFAULTS.delta_compaction_ratio * len(self.subs))

    def unsubscribe(self, ids: npt.ArrayLike) -> None:
        """Remove subscriptions by id.

        Raises
        ------
        InvalidSubscriptionError
            Naming ids that are not in the index (nothing is removed then).
        """
        q = np.atleast_1d(np.asarray(ids, dtype=np.int64))
        slot = self._slot_of(q)
        delta_row = self._delta_row_of(q)
        in_delta = delta_row >= 0
        unknown = (slot < 0) & ~in_delta
        if unknown.any():
            msg = ("unknown subscription ids: "
                   f"{describe_rows(q[unknown][:10].tolist(), total=int(unknown.sum()))}")
            raise InvalidSubscriptionError(msg)
        self.active[slot[slot >= 0]] = False
        if in_delta.any():
            self._bump_version()
            self._delta.drop(delta_row[in_delta])
            self._publish_delta()

    def move(self, ids: npt.ArrayLike, points: EdgePoints) -> None:
        """Give subscriptions new locations (keywords, alpha and tau stay).

        The one move of the project: the live service, the Spark stream job and the
        benchmarks all call it. It is :meth:`_relocate`, which gives the live
        subscriptions :meth:`_move_rows` gives, with compiled lookups and writes.

        Raises
        ------
        InvalidSubscriptionError
            Unknown or repeated ids, or points off the network; nothing moves then.
        """
        self._relocate(np.atleast_1d(np.asarray(ids, dtype=np.int64)), points)

    def _relocate(self, ids: IntArray, points: EdgePoints) -> None:
        """:meth:`move`: what :meth:`_move_rows` does, with less work per row.

        A subscription in the delta gets its new point in place; one in the slots is
        deactivated and appended to the delta with its keywords, alpha and tau, as
        ``_move_rows`` does, but without re-checking rows the index holds. The live
        subscriptions are then the same as after ``_move_rows`` (only the delta's row order
        differs, which no matcher output depends on). The lookups and the writes are compiled
        (:mod:`roadpubsub.index.delta_kernels`): the live service moves one vehicle per request,
        and a move written with numpy was mostly the fixed cost of operations on one-element arrays.

        Raises
        ------
        InvalidSubscriptionError
            Unknown or repeated ids, or points off the network; nothing moves then.
        """
        q = np.atleast_1d(np.asarray(ids, dtype=np.int64))
        if len(points) != q.size:
            msg = f"move: {q.size} ids but {len(points)} points"
            raise InvalidSubscriptionError(msg)
        edge = np.ascontiguousarray(points.edge, dtype=np.int32)
        offset = np.ascontiguousarray(points.offset, dtype=np.float64)
        if q.size == 1:  # the check of self.check_points on scalars; it names a bad point
            e, o = int(points.edge[0]), float(offset[0])
            length = self.network.edge_length
            if not (0 <= e < length.size and 0.0 <= o <= length[e]):
                self.check_points(points, labels=q)
        else:
            self.check_points(points, labels=q)
            if has_repeats(q):
                self._move_rows(q, points)  # the general path names the repeated ids
                return
        buf = self._delta
        slots = self._slot_source()
        slot = np.empty(q.size, dtype=np.int64)
        drow = np.empty(q.size, dtype=np.int64)
        if lookup_kernel(slots, buf.arrays(), len(buf), q, slot, drow):
            missing = (slot < 0) & (drow < 0)
            names = describe_rows(q[missing][:10].tolist(), total=int(missing.sum()))
            msg = f"unknown subscription ids: {names}"
            raise InvalidSubscriptionError(msg)
        facts = self.spatial.facts(points)
        from_slots = drow < 0
        if from_slots.any():
            k = np.flatnonzero(from_slots)
            s = slot[k]
            if s.size == 1:  # a single move: its keyword run as a view (read, not kept)
                a, b = int(self.subs.kw_ptr[s[0]]), int(self.subs.kw_ptr[s[0] + 1])
                ptr, terms = np.array([0, b - a], dtype=np.int64), self.subs.kw_terms[a:b]
            else:
                ptr, terms = take_csr(self.subs.kw_ptr, self.subs.kw_terms, s)
            moved = Subscriptions.checked(self.subs.ids[s],
                                          points if k.size == q.size else points[k],
                                          self.subs.alpha[s], self.subs.tau[s], ptr, terms)
            limit, wildcard = self._limits(moved)
        else:
            limit, wildcard = _NO_LIMITS
        c = np.ascontiguousarray
        rows = MovedRows(edge, offset, c(facts.x, dtype=np.float64), c(facts.y, dtype=np.float64),
                         c(facts.cell, dtype=np.int32), c(facts.din_out, dtype=np.float64),
                         c(facts.din_in, dtype=np.float64), c(facts.chain, dtype=np.int32),
                         c(facts.chain_offset, dtype=np.float64), slot, drow,
                         c(limit, dtype=np.float64), c(wildcard, dtype=np.bool_))
        if buf.relocate_rows(slots, rows):
            self._bump_version()
            self._publish_delta()

    def _slot_source(self) -> SlotSource:
        """The slots' columns the compiled move reads and writes."""
        subs = self.subs
        # alpha and tau are strided columns of the slot record (roadpubsub.index.slot_record):
        # taken as they are, since a contiguous copy of every slot's value per move cost 4 ms at 1M.
        return SlotSource(np.ascontiguousarray(subs.ids, dtype=np.int64),
                          np.asarray(subs.alpha, dtype=np.float64),
                          np.asarray(subs.tau, dtype=np.float64),
                          np.ascontiguousarray(subs.kw_ptr, dtype=np.int64),
                          np.ascontiguousarray(subs.kw_terms, dtype=np.int32),
                          self.active,  # written in place: must be the index's own array
                          np.ascontiguousarray(self._sorted_ids, dtype=np.int64),
                          np.ascontiguousarray(self._id_order, dtype=np.int64))

    def _move_rows(self, ids: npt.ArrayLike, points: EdgePoints) -> None:
        """A move as an unsubscribe and a subscribe of the same rows at their new points:
        :meth:`_relocate`'s definition (its tests compare the two) and its
        path for a batch that names an id twice (this one names the repeated ids)."""
        q = np.atleast_1d(np.asarray(ids, dtype=np.int64))
        if len(points) != q.size:
            msg = f"move: {q.size} ids but {len(points)} points"
            raise InvalidSubscriptionError(msg)
        self.check_points(points, labels=q)
        rows = self._rows_of(q)
        moved = Subscriptions(rows.ids, points, rows.alpha, rows.tau, rows.kw_ptr, rows.kw_terms)
        self.unsubscribe(q)
        self.subscribe(moved)

    def _rows_of(self, q: IntArray) -> Subscriptions:
        """The live subscriptions with ids ``q``, in that order (slots or delta rows).

        Costs O(len(q) log n), not a pass over every subscription.
        """
        slot = self._slot_of(q)
        found = self._delta_row_of(q)
        delta_row = np.maximum(found, 0)
        in_delta = (slot < 0) & (found >= 0)
        missing = q[(slot < 0) & ~in_delta]
        if missing.size:
            names = describe_rows(missing[:10].tolist(), total=missing.size)
            msg = f"unknown subscription ids: {names}"
            raise InvalidSubscriptionError(msg)
        main = slot >= 0
        parts = concat_subscriptions([self.subs.take(slot[main]),
                                      self.delta.take(delta_row[~main])])
        where = np.concatenate([np.flatnonzero(main), np.flatnonzero(~main)])
        return parts.take(np.argsort(where, kind="stable"))

    def subscriptions(self) -> Subscriptions:
        """All live subscriptions, sorted by id."""
        live = concat_subscriptions([self.subs.take(np.flatnonzero(self.active)), self.delta])
        return live.take(np.argsort(live.ids, kind="stable"))

    def compact(self) -> None:
        """Fold the delta and removals into fresh slots and postings (cells/bounds reused).

        Nothing happens when there is nothing to fold (no delta, no removed slot), so
        :meth:`save` does not rebuild a fresh index.
        """
        if len(self.delta) == 0 and bool(self.active.all()):
            return
        self._rebuild(concat_subscriptions([self.subs.take(np.flatnonzero(self.active)),
                                            self.delta]))

    # ------------------------------------------------------------------ size
    def structure_arrays(self) -> dict[str, npt.NDArray[np.generic]]:
        """Arrays specific to the architecture (postings and statistics)."""
        out = {f"layout.{k}": v for k, v in self.layout.to_arrays().items()}
        out.update({"edge_min_alpha": self.edge_min_alpha, "edge_max_alpha": self.edge_max_alpha,
                    "edge_min_tau_e": self.edge_min_tau_e})
        return out

    def nbytes_per_subscription(self) -> float:
        """Bytes held per subscription: slots, facts, id lookup and postings (not cells,
        network or a matcher's scratch)."""
        s = self.subs
        arrays: list[npt.NDArray[Any]] = [
            s.ids, s.points.edge, s.points.offset, s.alpha, s.tau, s.kw_ptr, s.kw_terms,
            *astuple_facts(self.facts), self.active, self._id_order, self._sorted_ids,
            *(v for k, v in self.structure_arrays().items() if k.startswith("layout.")),
        ]
        # The slot record's views count as the record's whole buffer (padding included).
        record = self.slot_record
        root = record
        while isinstance(root.base, np.ndarray):
            root = root.base
        held = [a for a in arrays if not np.may_share_memory(a, record)]
        return (sum(int(a.nbytes) for a in held) + int(root.nbytes)) / max(len(self.subs), 1)

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the index to one ``.npz`` file (:func:`roadpubsub.index.index_file.save_index`)."""
        return save_index(self, path)

    def adopt_compacted(self, built: SubscriptionIndex, removed: IntArray) -> None:
        """Make ``built`` (from :func:`~roadpubsub.index.delta.build_compacted`) the slots and
        postings of this index, carrying over what changed since its input was taken.

        ``removed`` holds every id unsubscribed (moves and expiry included) since then. A
        subscription of the input whose id is not in ``removed`` is untouched since, so it is
        the same row in ``built`` (active) and, if it was in the delta, that delta row is
        dropped. Every other live row was added since, so it sits in the delta and stays
        there; its slot in ``built``, if any, is deactivated. Removed slots keep their
        statistics, as an unsubscribe does, so every bound stays safe.
        """
        gone = built._slot_of(np.unique(np.asarray(removed, dtype=np.int64)))
        built.active[gone[gone >= 0]] = False
        carry = np.flatnonzero(built._slot_of(self.delta.ids) < 0)
        for name, value in vars(built).items():
            if name not in _ADOPT_KEEPS:
                setattr(self, name, value)
        self.term_rank = self.weights.rank()
        self._keep_delta_rows(carry)  # bumps the version: matchers resize their scratch
