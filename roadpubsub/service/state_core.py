"""The first layer of the service state: its fields and the events applied to the index
and the other kinds (subscribe, unsubscribe, move, expire, match), without checks or log.

The layers, each in its own module, build :class:`~roadpubsub.service.state.ServiceState`:
:class:`StateCore` (applying), :class:`~roadpubsub.service.state_record.StateRecording`
(deliveries: seqs, journal, deliveries log), :class:`~roadpubsub.service.state_queries.
StateQueries` (reads), :class:`~roadpubsub.service.state_upkeep.StateUpkeep` (snapshots,
health, close), :class:`~roadpubsub.service.state_open.StateOpening` (open, replay,
recover) and :class:`~roadpubsub.service.state.ServiceState` (checked, logged events).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from roadpubsub.index.base import SubscriptionIndex
from roadpubsub.index.csr import take_csr
from roadpubsub.index.events import RequestError
from roadpubsub.index.kinds import (
    SUBSCRIPTION_KIND_NAMES,
    BooleanSubscriptions,
    TopkSubscriptions,
)
from roadpubsub.index.model import Messages, Subscriptions, keyword_csr
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.pruning.expiry import Expiry
from roadpubsub.pruning.indexed import IndexMatcher
from roadpubsub.pruning.live_kinds import LiveBoolean
from roadpubsub.pruning.live_topk import LiveTopk
from roadpubsub.pruning.mixed import MixedMatcher
from roadpubsub.pruning.set_matchers import PointsAndSets
from roadpubsub.pruning.topk_events import TopkEvents
from roadpubsub.roadnet.errors import describe_rows
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.segment_sets import SegmentSet
from roadpubsub.service.compactor import Compactor
from roadpubsub.service.deliveries_log import DeliveriesLog, SegmentWriter, TopkLog
from roadpubsub.service.journal import DeliveryJournal
from roadpubsub.service.live_sets import LiveSets
from roadpubsub.service.metrics import Histogram
from roadpubsub.service.mqtt_choice import NO_CHOICES, MqttChoices
from roadpubsub.service.options import DEFAULT_WINDOW, ServiceOptions
from roadpubsub.service.snapshot import (
    SnapshotWorker,
)
from roadpubsub.service.topk_found import TopkFound
from roadpubsub.service.wal import (
    WriteAheadLog,
)

__all__ = ["FloatArray", "IntArray", "Pending", "StateCore"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
#: Records of publishes not yet in a deliveries segment: (log seq, message ids, times,
#: deliveries, the seq of the first delivery).
Pending = list[tuple[int, IntArray, FloatArray, Deliveries, int]]


def _owner_arrays(prefix: str, owners: dict[int, str]) -> dict[str, npt.NDArray[Any]]:
    """An owner map as two columns of a snapshot (ids, token ids)."""
    return {prefix + "ids": np.fromiter(owners.keys(), dtype=np.int64, count=len(owners)),
            prefix + "tok": np.array(list(owners.values()), dtype=str)}


class StateCore:
    """A service folder's state in memory and the events applied to it (see the module
    docstring)."""

    def __init__(self, state_dir: Path, index: SubscriptionIndex, manifest: dict[str, Any],
                 options: ServiceOptions) -> None:
        self.dir = state_dir
        self.index = index
        self.manifest = manifest
        self.options = options
        self.matcher = IndexMatcher(index)
        self.window = int(manifest.get("window", DEFAULT_WINDOW))
        self.boolean = LiveBoolean(index.spatial, index.weights, dmax_m=index.dmax_m)
        self.topk = LiveTopk(index.spatial, index.weights, dmax_m=index.dmax_m,
                             window=self.window)
        self.expiry = Expiry()
        # routes and areas (issue 32): threshold and boolean subscriptions on sets
        self.sets = LiveSets(index.network, index.spatial, index.weights,
                             dmax_m=index.dmax_m)
        self.messages: dict[int, tuple[int, float, Deliveries]] = {}
        self.topk_of: dict[int, TopkFound] = {}  # top-k events per message that caused any
        # access (roadpubsub.service.access): token id owning a subscription a subscriber
        # token created, or a message a publisher token published; only owned ids
        self.owners: dict[int, str] = {}
        self.message_owners: dict[int, str] = {}
        self.dlog = DeliveriesLog(state_dir / "deliveries")
        # delivery sequence numbers (issue 30): the first one of each message's deliveries
        # (its others follow), and the recent deliveries by seq for resumable streams
        self.dseq_of: dict[int, int] = {}
        self.journal = DeliveryJournal(retain=options.stream_retention,
                                       retain_s=options.stream_retention_s)
        # webhook URL per subscription that has one; the check of a new one (None:
        # webhooks are off and a subscription carrying one is refused)
        self.webhook_of: dict[int, str] = {}
        self.check_webhook: Callable[[str], str] | None = None
        # each subscription's "mqtt" choice where it made one, and the same as arrays
        # (remade at the next publish after a change: a burst of subscriptions pays once)
        self.mqtt_of: dict[int, bool] = {}
        self._mqtt_choices = NO_CHOICES
        self._mqtt_changed = False
        self.tlog = TopkLog(state_dir / "topk")
        self.writer = SegmentWriter(name="deliveries-writer")  # both logs' segments
        self._pending: Pending = []
        self._pending_topk: list[TopkFound] = []
        self._pending_messages = 0
        self.flushed_through = 0
        self.snapshot_seq = int(manifest["seq"])
        self.events_since_snapshot = 0
        self.compactions = 0
        self.counts: dict[str, int] = {"subscribe": 0, "unsubscribe": 0, "move": 0,
                                       "publish": 0, "expire": 0}
        self.delivered = 0
        self.failed: BaseException | None = None
        self.wal: WriteAheadLog
        self.snapshots: SnapshotWorker  # made by StateUpkeep (it is called back there)
        self.compactor = Compactor(index, delta_rows=options.compact_delta,
                                   background=options.background_compaction)
        self.recovery_seconds = 0.0
        self.recoveries = 0  # in-process reloads after a log failure (:meth:`recover`)
        self._lock: int | None = None
        self.match_seconds = Histogram()  # matcher calls (a batch or a run of requests)

    def _watch_compaction(self, before: Subscriptions) -> None:
        if self.index.subs is not before:
            self.compactions += 1

    def _subscribe(self, ids: IntArray, points: EdgePoints, keywords: list[list[str]],
                   alpha: FloatArray, tau: FloatArray, expires: FloatArray,
                   kind: npt.NDArray[np.int8] | None = None, radius: FloatArray | None = None,
                   k: FloatArray | None = None,
                   sets: tuple[SegmentSet | None, ...] | None = None) -> None:
        on_set = None if sets is None else np.fromiter((x is not None for x in sets),
                                                       dtype=bool, count=len(sets))
        if on_set is not None and on_set.any():
            kind = np.zeros(ids.size, np.int8) if kind is None else kind
            radius = np.full(ids.size, np.nan) if radius is None else radius
            k = np.full(ids.size, np.nan) if k is None else k
        else:
            on_set = None
        if on_set is None and (kind is None or not kind.any()):
            subs = Subscriptions.from_rows(ids=ids, points=points, keywords=keywords,
                                           alpha=alpha, tau=tau, weights=self.index.weights)
        else:
            # one vocabulary pass in row order (new terms get ids as a threshold batch would)
            ptr, terms = keyword_csr(keywords, self.index.weights, add=True)
            point = np.ones(ids.size, bool) if on_set is None else ~on_set
            rows = [np.flatnonzero((kind == c) & point)
                    for c in range(len(SUBSCRIPTION_KIND_NAMES))]
            thr, boo, top = rows
            subs = Subscriptions(ids[thr], points[thr], alpha[thr], tau[thr],
                                 *take_csr(ptr, terms, thr))
            assert radius is not None and k is not None
            self.boolean.add(BooleanSubscriptions(ids[boo], points[boo], radius[boo],
                                                  *take_csr(ptr, terms, boo)))
            self.topk.add(TopkSubscriptions(ids[top], points[top], alpha[top],
                                            k[top].astype(np.int64),
                                            *take_csr(ptr, terms, top)))
            if on_set is not None and sets is not None and kind is not None:
                sr = np.flatnonzero(on_set)
                placed = [x for x in sets if x is not None]  # the rows of sr, in order
                self.sets.add(ids[sr], kind[sr], placed,
                              *take_csr(ptr, terms, sr), alpha[sr], tau[sr], radius[sr])
        if len(subs):
            before = self.index.subs
            self.index.subscribe(subs)
            self._watch_compaction(before)
        self.expiry.add(ids, expires)
        self.counts["subscribe"] += ids.size

    def _set_webhooks(self, ids: IntArray, urls: list[str | None] | None) -> None:
        if urls:
            for i, u in zip(ids.tolist(), urls, strict=True):
                if u is not None:
                    self.webhook_of[i] = u

    def _set_mqtt(self, ids: IntArray, said: npt.NDArray[np.int8] | None) -> None:
        """Record the rows' ``mqtt`` choices (-1: not said)."""
        if said is None:
            return
        rows = np.flatnonzero(said >= 0)
        if rows.size:
            self.mqtt_of.update(zip(ids[rows].tolist(), (said[rows] == 1).tolist(),
                                    strict=True))
            self._mqtt_changed = True

    def mqtt_choices(self) -> MqttChoices:
        """The ``mqtt`` choices now in force (see :mod:`~roadpubsub.service.mqtt_choice`)."""
        if self._mqtt_changed:
            self._mqtt_choices = MqttChoices.of(self.mqtt_of)
            self._mqtt_changed = False
        return self._mqtt_choices

    def _kinds_live(self) -> bool:
        return bool(len(self.boolean) or len(self.topk) or len(self.sets))

    def _threshold_ids(self, ids: IntArray) -> IntArray:
        """The ids the threshold index holds (all of them when no other kind is live)."""
        return ids[self.index.contains(ids)] if self._kinds_live() else ids

    def _remove(self, ids: IntArray, thr: IntArray | None = None) -> None:
        """Remove live subscriptions of any kind (``thr``: those of the threshold index,
        when known)."""
        thr = self._threshold_ids(ids) if thr is None else thr
        if self.webhook_of:
            for i in ids.tolist():
                self.webhook_of.pop(i, None)
        for i in ids.tolist() if self.mqtt_of else ():
            if self.mqtt_of.pop(i, None) is not None:
                self._mqtt_changed = True
        if thr.size:
            self.index.unsubscribe(thr)
            self.compactor.removed(thr)
        if thr.size < ids.size:
            self.boolean.remove(ids)
            self.topk.remove(ids)
            self.sets.remove(ids)

    def _unsubscribe(self, ids: IntArray) -> None:
        self._remove(ids)
        self.expiry.remove(ids)
        self.counts["unsubscribe"] += ids.size

    def _move(self, ids: IntArray, points: EdgePoints, *,
              thr: npt.NDArray[np.bool_] | None = None) -> None:
        """Move subscriptions of any kind; ``thr``: ``self.index.contains(ids)``, when the
        caller has it."""
        if thr is not None or self._kinds_live():
            thr = self.index.contains(ids) if thr is None else thr
            if not thr.all():
                other = ~thr
                boo = self.boolean.contains(ids[other])
                rows = np.flatnonzero(other)
                self.boolean.move(ids[rows[boo]], points[rows[boo]])
                self.topk.move(ids[rows[~boo]], points[rows[~boo]])
                self.counts["move"] += int(other.sum())
                ids, points = ids[thr], points[thr]
        if ids.size:
            self.index.move(ids, points)
            self.compactor.removed(ids)
            if self.index.auto_compact and self.index.delta_due():  # replay compacts in line
                self.index.compact()
                self.compactions += 1
        self.counts["move"] += ids.size

    def _move_sets(self, ids: IntArray, sets: list[SegmentSet]) -> None:
        """Replace live set subscriptions' sets (routes and areas)."""
        self.sets.move(ids, sets)
        self.counts["move"] += ids.size

    def _expire(self, t: float) -> TopkEvents:
        """Unsubscribe every subscription with expires_at <= t (the server's clock at a
        publish: the purge); the evictions of expired top-k subscriptions' results (see
        LiveTopk.withdraw)."""
        due = self.expiry.due(t)
        if not due.size:
            return TopkEvents.empty()
        # which are threshold ones, before the top-k withdraws its own: then no other kind
        # may be live, and every id would look like a threshold one
        thr = self._threshold_ids(due)
        gone = self.topk.withdraw(due) if len(self.topk) else TopkEvents.empty()
        self._remove(due, thr)
        self.counts["expire"] += due.size
        return gone

    def _publish(self, ids: IntArray, points: EdgePoints, keywords: list[list[str]],
                 times: FloatArray, *, match: bool = True, purge_at: float | None = None
                 ) -> tuple[Deliveries, TopkFound]:
        """Purge at ``purge_at`` (the server's clock), then match (threshold, then boolean,
        each message delivered only to subscriptions that have not expired at its time) and
        push into the top-k window, in ascending time; ``match=False`` only purges and
        pushes (a replayed message whose deliveries are logged). ``purge_at=None`` (log
        records of the former rule) purges at each message's time instead."""
        messages = Messages.from_rows(ids=ids, points=points, keywords=keywords,
                                      weights=self.index.weights)
        parts = []
        tops = []
        purged = self._expire(purge_at) if purge_at is not None else None
        # one message: one time, the whole batch (np.unique and the row selection of
        # the general loop below are no-ops then)
        groups = ((float(times[0]), None),) if len(messages) == 1 else \
            ((float(t), np.flatnonzero(times == t)) for t in np.unique(times))  # ascending
        for t, group_rows in groups:
            if purged is None:
                gone = self._expire(t)
            else:  # the purge's evictions go with the first message, as before
                gone, purged = purged, TopkEvents.empty()
            whole = group_rows is None or group_rows.size == len(messages)
            rows = group_rows if group_rows is not None else np.arange(len(messages))
            batch = messages if whole else messages.take(rows)
            t0 = time.perf_counter()
            # every kind through the library's one entry point (pruning.mixed), with the
            # expiry rule of pruning.expiry: the clock is the purge's (or, for log records
            # of the former rule, the messages' time); the top-k window shares the index's
            # weights, so it takes the batch's keyword rows
            threshold: Any = self.matcher if match else None
            boolean: Any = self.boolean if match and len(self.boolean) else None
            if match and len(self.sets):  # routes and areas beside the points (issue 32)
                on_thr, on_boo = self.sets.matchers()
                threshold = PointsAndSets(threshold, on_thr)
                boolean = PointsAndSets(boolean, on_boo) if on_boo is not None else boolean
            kinds = MixedMatcher(threshold=threshold, boolean=boolean, topk=self.topk,
                                 expiry=self.expiry)
            first = self.topk.arrivals
            got = kinds.match(batch, times=np.full(len(batch), t),
                              clock=t if purge_at is None else purge_at,
                              keywords=keywords if whole else [keywords[i]
                                                               for i in rows.tolist()])
            if match:
                parts.append(got.deliveries)
            ev = got.events
            if len(gone):  # withdrawn as the group's first message arrived
                ev = TopkEvents.concat([gone, ev])
            if len(ev):
                tops.append(TopkFound(ev, batch.ids[ev.seq - first]))
            self.match_seconds.observe(time.perf_counter() - t0)
        self.counts["publish"] += ids.size
        # a single part is sorted by (message_id, subscription_id) already (the Deliveries
        # invariant): concat would only copy it in the same order
        found = parts[0] if len(parts) == 1 else Deliveries.concat(parts)
        self.delivered += len(found)
        return found, TopkFound.concat(tops)

    def contains(self, ids: IntArray) -> npt.NDArray[np.bool_]:
        """Whether each id is a live subscription of any kind."""
        live = self.index.contains(ids)
        if self._kinds_live() and not live.all():
            live |= self.boolean.contains(ids) | self.topk.contains(ids)
            if len(self.sets):
                live |= self.sets.contains(ids)
        return live

    def require_live(self, ids: IntArray) -> None:
        live = self.contains(ids)
        if not live.all():
            missing = ids[~live]
            names = describe_rows(missing[:10].tolist(), total=missing.size)
            msg = f"unknown subscription ids: {names}"
            raise RequestError(msg, status=404)

    def _own(self, op: str, ids: IntArray, owner: str) -> None:
        """Record the token owning new subscriptions or messages (the first owner stays)."""
        owners = self.owners if op == "subscribe" else self.message_owners
        for i in ids.tolist():
            owners.setdefault(i, owner)

    def _kinds_arrays(self) -> dict[str, npt.NDArray[Any]]:
        """What :meth:`_load_kinds` reads (called in the snapshot's writer)."""
        return {**{"b_" + k: v for k, v in self.boolean.arrays().items()},
                **{"t_" + k: v for k, v in self.topk.arrays().items()},
                **{"s_" + k: v for k, v in self.sets.arrays().items()},
                **_owner_arrays("o_", self.owners), **_owner_arrays("om_", self.message_owners),
                **_owner_arrays("wh_", self.webhook_of),
                "mq_ids": np.fromiter(self.mqtt_of.keys(), np.int64, len(self.mqtt_of)),
                "mq_on": np.fromiter(self.mqtt_of.values(), bool, len(self.mqtt_of))}
