"""The live service's state: the index, its log, its snapshots, its deliveries.

Every event goes through one thread, in order: it is checked against the current state
(a batch is refused whole), applied with the index's own ``subscribe``/``unsubscribe``/
``move`` or matched with :class:`~pruning.indexed.IndexMatcher`, then appended to the
write-ahead log (:mod:`roadpubsub.service.wal`). The HTTP layer answers once an fsync has
covered the record. Restarting replays the log after the last snapshot through the same
functions, so the recovered state, and every delivery, equals the original.

Expiry rule (exact and replayable): the SERVER's clock purges. Before a publish request is
matched, every subscription with ``expires_at <=`` the server's clock at that moment is
unsubscribed; that clock reading is logged with the publish (``now``), so a replay purges
exactly the same. A message's own ``time`` (or the server's clock when absent) only decides
whether that message is delivered to a subscription: not when ``time >= expires_at`` (the
rule of ``roadpubsub match``), so a message from the far future delivers to no expiring
subscription but removes none. Messages of one batch are matched in ascending order of
their time. An expired subscription is gone for good, and the index purges it at its next
compaction. (Log records written before ``now`` was logged replay the former rule: purge at
the message's time.) Top-k subscriptions take every message into their window whatever its
time; only the purge ends them.
The rule is :mod:`pruning.expiry`'s, applied with every kind's matching by
:class:`pruning.mixed.MixedMatcher`.

Idempotent publishing: a message whose id was published before is not matched again; its
recorded deliveries are returned (``"duplicate": true``).

Kinds (issue 21): boolean range and top-k subscriptions live beside the threshold index in
:class:`~pruning.live_kinds.LiveBoolean` and :class:`~pruning.live_kinds.LiveTopk` (the
kinds' own indexed matchers). Subscribe, unsubscribe, move and expiry reach whichever kind
holds an id (ids are unique across kinds). Each message is matched by the threshold index,
then the boolean matcher (deliveries with score 1.0), then pushed into the top-k window of
the last W messages (W fixed when DIR is created, ``manifest["window"]``); its top-k
insertions and evictions are answered, logged (:class:`~roadpubsub.service.deliveries_log.
TopkLog`) and repeated for a re-sent id like its deliveries. An expired top-k
subscription's results are evicted (bottom rank first) among the events of the first
message of the first publish after the server's clock reaches its ``expires_at`` (the
purge); a delete or move of one emits no event
(its top-k, for a move the one at its new place, is read with GET). Every message enters the window,
including while no top-k subscription exists, and a replayed one too (even when its answer
is already in the deliveries log), so the window after a restart is the acknowledged one.
Snapshots hold the boolean and top-k subscriptions and the window (``<seq>.kinds.npz``).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from roadpubsub.index.base import SubscriptionIndex
from roadpubsub.index.csr import take_csr
from roadpubsub.index.events import MessageBatch, MoveBatch, RequestError, SubscriptionBatch
from roadpubsub.index.io import subscriptions_table
from roadpubsub.index.kinds import (
    KIND_BOOLEAN,
    KIND_CODES,
    KIND_TOPK,
    SUBSCRIPTION_KIND_NAMES,
    BooleanSubscriptions,
    SubscriptionSet,
    TopkSubscriptions,
)
from roadpubsub.index.kinds_io import subscription_set_table
from roadpubsub.index.model import Messages, Subscriptions, keyword_csr
from roadpubsub.index.store import load_index
from roadpubsub.pruning.deliveries import Deliveries, sort_order
from roadpubsub.pruning.expiry import Expiry
from roadpubsub.pruning.indexed import IndexMatcher
from roadpubsub.pruning.kinds_reference import check_window
from roadpubsub.pruning.live_kinds import LiveBoolean, empty_boolean, empty_topk
from roadpubsub.pruning.live_topk import LiveTopk
from roadpubsub.pruning.mixed import MixedMatcher
from roadpubsub.pruning.topk_events import TopkEvents
from roadpubsub.roadnet.errors import InputError, describe_rows, format_error
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.service.answers import DeliveryList
from roadpubsub.service.compactor import Compactor
from roadpubsub.service.deliveries_log import DeliveriesLog, Published, TopkLog
from roadpubsub.service.folder_lock import lock_folder
from roadpubsub.service.integrity import StateDamageError, move_aside
from roadpubsub.service.journal import Chunk, DeliveryJournal
from roadpubsub.service.metrics import Histogram
from roadpubsub.service.options import DEFAULT_WINDOW, ServiceOptions
from roadpubsub.service.results import Applied, deliveries_json
from roadpubsub.service.snapshot import (
    SnapshotWorker,
    clean_snapshots,
    kinds_path,
    read_manifest,
    snapshot_files,
    snapshot_paths,
    verify_snapshot,
    write_manifest,
    write_snapshot,
)
from roadpubsub.service.topk_found import TopkFound, topk_json
from roadpubsub.service.wal import (
    LogRecovery,
    LogUnavailableError,
    WriteAheadLog,
    check_log,
    create_segment,
    fsync_path,
    recover_log,
    segments,
    unavailable,
)

__all__ = ["ServiceState", "create_state"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

_BOOLEAN, _TOPK = KIND_CODES[KIND_BOOLEAN], KIND_CODES[KIND_TOPK]


def _tolist(a: npt.NDArray[Any]) -> list[Any]:
    return [None if x != x else x for x in a.tolist()]  # NaN -> null


class ServiceState:
    """A service folder opened for events (use :meth:`open`)."""

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
        self.journal = DeliveryJournal(retain=options.stream_retention)
        # webhook URL per subscription that has one; the check of a new one (None:
        # webhooks are off and a subscription carrying one is refused)
        self.webhook_of: dict[int, str] = {}
        self.check_webhook: Callable[[str], str] | None = None
        self.tlog = TopkLog(state_dir / "topk")
        self._pending: list[tuple[int, IntArray, FloatArray, Deliveries, int]] = []
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
        self.snapshots = SnapshotWorker(state_dir, self._snapshot_done)
        self.snapshots.configure(retry_s=options.snapshot_retry_s,
                                 retry_max_s=options.snapshot_retry_max_s)
        self.compactor = Compactor(index, delta_rows=options.compact_delta,
                                   background=options.background_compaction)
        self.recovery_seconds = 0.0
        self.recoveries = 0  # in-process reloads after a log failure (:meth:`recover`)
        self._lock: int | None = None
        self.match_seconds = Histogram()  # matcher calls (a batch or a run of requests)

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, state_dir: str | Path, options: ServiceOptions | None = None, *,
             lock: int | None = None) -> ServiceState:
        """Open a folder made by :func:`create_state`: load the snapshot, replay the log,
        complete the deliveries log, and start logging (``lock``: the folder's lock, held
        already by this process, as :meth:`recover` passes it).

        Every file read is checked against its checksum first. A torn tail of the newest
        log segment is cut, and a damaged current snapshot falls back to the previous one
        (its files moved to ``DIR/damaged/<time>/``); each says so in one line on stderr.

        Raises
        ------
        StateDamageError
            Any other damage (one line: the file, the offset, what would be lost); nothing
            on disk was changed.
        ServiceBusyError
            Another service holds the folder.
        """
        t0 = time.perf_counter()
        folder = Path(state_dir)
        manifest = read_manifest(folder)  # damaged: StateDamageError
        if manifest is None:
            msg = f"{folder}: no roadpubsub service here (manifest.json missing)"
            raise FileNotFoundError(msg)
        own_lock = lock is None
        lock = lock_folder(folder) if lock is None else lock
        try:
            state, log = cls._load(folder, manifest, options or ServiceOptions())
        except BaseException:
            if own_lock:  # a reload keeps the lock its process holds
                os.close(lock)
            raise
        state._lock = lock
        seq = state.snapshot_seq
        if log.torn_bytes:  # everything else verified: only now is anything changed
            recover_log(folder / "wal", after=seq, named=state.manifest.get("wal"))
            _note(log.torn_message())
        last = seq
        rows = records = 0
        moves: list[dict[str, Any]] = []
        for rec in log.records:
            if rec["op"] == "move":
                moves.append(rec)  # consecutive moves are replayed as one
            else:
                state._replay_moves(moves)
                moves = []
                state._replay(rec)
            last = int(rec["seq"])
            records += 1
            rows += len(rec["id"])
        state._replay_moves(moves)
        # Replay compacts in line (nothing else waits); from now on, in the background.
        state.index.auto_compact = (not state.options.background_compaction
                                    and state.options.compact_delta is None)
        state.wal = WriteAheadLog(folder / "wal", next_seq=last + 1,
                                  fsync=state.options.fsync)
        state.flush_deliveries()  # the restart completes the deliveries log
        state.events_since_snapshot = records + rows // 25
        state.recovery_seconds = time.perf_counter() - t0
        return state

    @classmethod
    def _load(cls, folder: Path, manifest: dict[str, Any], options: ServiceOptions
              ) -> tuple[ServiceState, LogRecovery]:
        """The snapshot (the previous one when the current is damaged and the previous
        and the log since it are intact) and the deliveries log, each file checked; the
        log after the snapshot, read without changing it."""
        entry, log = manifest, None
        fell_back: StateDamageError | None = None
        try:
            verify_snapshot(folder, manifest)
            log = check_log(folder / "wal", after=int(manifest["seq"]),
                            named=manifest.get("wal"))
        except StateDamageError as exc:
            previous = manifest.get("previous")
            if previous is None or not previous.get("files") \
                    or exc.path.parent.name != "snapshots":
                raise
            try:
                verify_snapshot(folder, previous)
                log = check_log(folder / "wal", after=int(previous["seq"]),
                                named=previous.get("wal"))
            except StateDamageError:
                raise exc from None
            entry = {**manifest, **previous}
            entry.pop("previous", None)
            fell_back = exc
        seq = int(entry["seq"])
        index_path, expiry_path = snapshot_paths(folder, seq)
        state = cls(folder, _checked_load(index_path, load_index), entry, options)
        state.dlog.legacy = manifest.get("format") == 1
        def expiry(path: Path) -> None:
            with np.load(path) as z:
                state.expiry.add(z["ids"], z["expires_at"])

        _checked_load(expiry_path, expiry)
        _checked_load(kinds_path(folder, seq), state._load_kinds)
        published, deliveries, dseq, state.flushed_through = state.dlog.read_all()
        state._load_messages(published, deliveries)
        state._load_delivery_seqs(deliveries, dseq)
        table = state.tlog.read_all(state.dlog)
        if table is not None:
            state.topk_of.update(TopkFound.from_table(table).by_arrival())
        assert log is not None
        # everything verified: only now is anything moved, and leftovers of interrupted
        # snapshots removed
        if fell_back is not None:
            moved = move_aside(folder, snapshot_files(folder, int(manifest["seq"])))
            _note(f"{fell_back} -> moved to {moved}; starting from the previous snapshot of "
                  f"seq {seq} and replaying the log since it")
        clean_snapshots(folder, seq, *([int(entry["previous"]["seq"])]
                                       if "previous" in entry else []))
        return state, log

    def _load_kinds(self, path: Path) -> None:
        """The boolean and top-k state of a snapshot (none when the file is absent)."""
        if not path.exists():
            return
        ix = self.index
        with np.load(path, allow_pickle=False) as z:
            a = {k: z[k] for k in z.files}
        n_terms = len(ix.weights)
        for prefix in ("b_", "t_"):
            terms = a[prefix + "kw_terms"]
            if terms.size and int(terms.max()) >= n_terms:
                msg = f"{path}: keyword ids beyond the snapshot's vocabulary"
                raise InputError(msg)
        self.boolean = LiveBoolean(ix.spatial, ix.weights, dmax_m=ix.dmax_m,
                                   subs=LiveBoolean.subs_from_arrays(
                                       {k[2:]: v for k, v in a.items() if k[:2] == "b_"}))
        self.topk = LiveTopk.from_arrays(ix.spatial, ix.weights,
                                         {k[2:]: v for k, v in a.items() if k[:2] == "t_"},
                                         dmax_m=ix.dmax_m, window=self.window)
        if "o_ids" in a:  # owners (access); absent in folders made before them
            self.owners = dict(zip(a["o_ids"].tolist(), a["o_tok"].tolist(), strict=True))
            self.message_owners = dict(zip(a["om_ids"].tolist(), a["om_tok"].tolist(),
                                           strict=True))
        if "wh_ids" in a:  # webhook URLs (issue 30)
            self.webhook_of = dict(zip(a["wh_ids"].tolist(), a["wh_tok"].tolist(),
                                       strict=True))

    def _kinds_arrays(self) -> dict[str, npt.NDArray[Any]]:
        """What :meth:`_load_kinds` reads (called in the snapshot's writer)."""
        return {**{"b_" + k: v for k, v in self.boolean.arrays().items()},
                **{"t_" + k: v for k, v in self.topk.arrays().items()},
                **_owner_arrays("o_", self.owners), **_owner_arrays("om_", self.message_owners),
                **_owner_arrays("wh_", self.webhook_of)}

    def _load_delivery_seqs(self, d: Deliveries, dseq: IntArray) -> None:
        """The seqs of the logged deliveries (``d``'s rows): each message's first one, and
        the journal's first chunk, the last ``stream_retention`` of them."""
        order = np.argsort(dseq, kind="stable")
        if not np.array_equal(dseq[order], np.arange(1, dseq.size + 1)):
            msg = (f"{self.dlog.dir}: the delivery seqs of the deliveries log are not "
                   f"1..{dseq.size} without gap")
            raise StateDamageError(msg, path=self.dlog.dir)
        if dseq.size:
            mids = d.message_id
            heads = np.flatnonzero(np.r_[True, mids[1:] != mids[:-1]])
            self.dseq_of.update(zip(mids[heads].tolist(), dseq[heads].tolist(), strict=True))
        keep = order[max(0, order.size - self.journal.retain):]
        self.journal = DeliveryJournal(retain=self.journal.retain,
                                       next_seq=int(dseq[keep[0]]) if keep.size else 1)
        if keep.size:
            sid = d.subscription_id[keep]
            self.journal.append(Chunk(int(dseq[keep[0]]), self.flushed_through,
                                      d.message_id[keep], sid, d.distance[keep],
                                      d.score[keep], self._hooks(sid)))

    def _hooks(self, sid: IntArray) -> tuple[IntArray, list[str]] | None:
        """The rows of deliveries to subscriptions with a webhook, and the URLs."""
        if not self.webhook_of or not sid.size:
            return None
        hooks = self.webhook_of
        urls = [hooks.get(s) for s in sid.tolist()]
        rows = [i for i, u in enumerate(urls) if u is not None]
        if not rows:
            return None
        return np.asarray(rows, dtype=np.int64), [u for u in urls if u is not None]

    def delivery_seqs(self, d: Deliveries) -> IntArray:
        """The seq of each delivery of ``d`` (recorded ones; sorted by message id, then
        subscription id, as every Deliveries is)."""
        mids = d.message_id
        if not mids.size:
            return np.empty(0, np.int64)
        heads = np.flatnonzero(np.r_[True, mids[1:] != mids[:-1]])
        first = np.fromiter((self.dseq_of[m] for m in mids[heads].tolist()), np.int64,
                            count=heads.size)
        block = np.repeat(np.arange(heads.size), np.diff(np.r_[heads, mids.size]))
        return first[block] + np.arange(mids.size) - heads[block]

    def _load_messages(self, published: Published, deliveries: Deliveries) -> None:
        mids = deliveries.message_id
        starts = np.searchsorted(mids, published.message_id, side="left")
        stops = np.searchsorted(mids, published.message_id, side="right")
        for k, (m, s, t) in enumerate(zip(published.message_id.tolist(),
                                          published.seq.tolist(), published.time.tolist(),
                                          strict=True)):
            a, b = int(starts[k]), int(stops[k])
            self.messages[m] = (s, t, Deliveries(mids[a:b], deliveries.subscription_id[a:b],
                                                 deliveries.distance[a:b],
                                                 deliveries.score[a:b]))

    def _replay_moves(self, records: list[dict[str, Any]]) -> None:
        """Consecutive logged moves as one vectorised move: each id goes where its last
        move put it (no message was matched in between, so nothing else can tell)."""
        if not records:
            return
        ids = np.concatenate([np.asarray(r["id"], dtype=np.int64) for r in records])
        edge = np.concatenate([np.asarray(r["edge"], dtype=np.int64) for r in records])
        offset = np.concatenate([np.asarray(r["offset"], dtype=np.float64) for r in records])
        _, first_in_reversed = np.unique(ids[::-1], return_index=True)
        last = np.sort(ids.size - 1 - first_in_reversed)
        self._move(ids[last], EdgePoints.of(edge[last], offset[last]))
        self.counts["move"] += ids.size - last.size  # _move counted the merged rows

    def _replay(self, rec: dict[str, Any]) -> None:
        op = rec["op"]
        ids = np.asarray(rec["id"], dtype=np.int64)
        seq = int(rec["seq"])
        if "owner" in rec:
            self._own(op, ids, rec["owner"])
        if op == "subscribe":
            kind = radius = k = None
            if "kind" in rec:
                kind = np.asarray([KIND_CODES[x] for x in rec["kind"]], dtype=np.int8)
                radius, k = _floats(rec["radius"]), _floats(rec["k"])
            self._subscribe(ids, EdgePoints.of(rec["edge"], rec["offset"]), rec["keywords"],
                            _floats(rec["alpha"]), _floats(rec["tau"]),
                            _floats(rec["expires_at"]), kind, radius, k)
            self._set_webhooks(ids, rec.get("webhook"))
        elif op == "unsubscribe":
            self._unsubscribe(ids)
        elif op == "move":
            self._move(ids, EdgePoints.of(rec["edge"], rec["offset"]))
        elif op == "publish":
            times = np.asarray(rec["time"], dtype=float)
            purge_at = rec.get("now")  # absent: a record of the former rule
            points = EdgePoints.of(rec["edge"], rec["offset"])
            if all(self.messages.get(m, (None,))[0] == seq for m in ids.tolist()):
                # In the deliveries log already: the expiry it caused and the window are
                # state (the top-k events are computed again and must be the logged ones).
                _, top = self._publish(ids, points, rec["keywords"], times, match=False,
                                       purge_at=purge_at)
                for m in ids.tolist():
                    _check_same_topk(m, self.topk_of.get(m), top.only([m]))
                return
            found, top = self._publish(ids, points, rec["keywords"], times,
                                       purge_at=purge_at)
            self._record(seq, ids, times, found, top, replay=True)
        else:
            msg = f"unknown operation {op!r} in the log at seq {seq}"
            raise InputError(msg)

    # ------------------------------------------------------------------ the operations
    def _watch_compaction(self, before: Subscriptions) -> None:
        if self.index.subs is not before:
            self.compactions += 1

    def _subscribe(self, ids: IntArray, points: EdgePoints, keywords: list[list[str]],
                   alpha: FloatArray, tau: FloatArray, expires: FloatArray,
                   kind: npt.NDArray[np.int8] | None = None, radius: FloatArray | None = None,
                   k: FloatArray | None = None) -> None:
        if kind is None or not kind.any():
            subs = Subscriptions.from_rows(ids=ids, points=points, keywords=keywords,
                                           alpha=alpha, tau=tau, weights=self.index.weights)
        else:
            # one vocabulary pass in row order (new terms get ids as a threshold batch would)
            ptr, terms = keyword_csr(keywords, self.index.weights, add=True)
            rows = [np.flatnonzero(kind == c) for c in range(len(SUBSCRIPTION_KIND_NAMES))]
            thr, boo, top = rows
            subs = Subscriptions(ids[thr], points[thr], alpha[thr], tau[thr],
                                 *take_csr(ptr, terms, thr))
            assert radius is not None and k is not None
            self.boolean.add(BooleanSubscriptions(ids[boo], points[boo], radius[boo],
                                                  *take_csr(ptr, terms, boo)))
            self.topk.add(TopkSubscriptions(ids[top], points[top], alpha[top],
                                            k[top].astype(np.int64),
                                            *take_csr(ptr, terms, top)))
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

    def _kinds_live(self) -> bool:
        return bool(len(self.boolean) or len(self.topk))

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
        if thr.size:
            self.index.unsubscribe(thr)
            self.compactor.removed(thr)
        if thr.size < ids.size:
            self.boolean.remove(ids)
            self.topk.remove(ids)

    def _unsubscribe(self, ids: IntArray) -> None:
        self._remove(ids)
        self.expiry.remove(ids)
        self.counts["unsubscribe"] += ids.size

    def _move(self, ids: IntArray, points: EdgePoints) -> None:
        if self._kinds_live():
            thr = self.index.contains(ids)
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
            kinds = MixedMatcher(threshold=self.matcher if match else None,
                                 boolean=self.boolean if match and len(self.boolean) else None,
                                 topk=self.topk, expiry=self.expiry)
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

    def _record(self, seq: int, ids: IntArray, times: FloatArray, found: Deliveries,
                top: TopkFound, *, replay: bool) -> None:
        """Remember the deliveries of each message (for repeats and the deliveries log),
        and number them (their seqs follow the last delivery's, in ``found``'s order)."""
        base = self.journal.next_seq
        one = ids.size == 1  # every delivery is the message's own: nothing to split
        if not one:
            mids = found.message_id
            order = np.argsort(mids, kind="stable")  # already sorted; kept cheap and safe
            mids = mids[order]
            starts = np.searchsorted(mids, ids, side="left")
            stops = np.searchsorted(mids, ids, side="right")
        for k, (m, t) in enumerate(zip(ids.tolist(), times.tolist(), strict=True)):
            if one:
                mine = found
            else:
                rows = order[int(starts[k]):int(stops[k])]
                mine = found.take(rows)
            known = self.messages.get(m)
            if known is not None:
                if replay and known[0] == seq:
                    _check_same(m, known[2], mine)
                    _check_same_topk(m, self.topk_of.get(m), top.only([m]))
                    continue
                msg = f"message {m} is logged twice (seq {known[0]} and {seq})"
                raise RuntimeError(msg)
            self.messages[m] = (seq, t, mine)
            if len(mine):
                self.dseq_of[m] = base + (0 if one else int(starts[k]))
        if len(found):
            self.journal.append(Chunk(base, seq, found.message_id, found.subscription_id,
                                      found.distance, found.score,
                                      self._hooks(found.subscription_id)))
        if len(top):
            for m, part in top.by_arrival():
                if self.messages[m][0] == seq and m not in self.topk_of:
                    self.topk_of[m] = part
        if seq > self.flushed_through:
            self._pending.append((seq, ids, times, found, base))
            self._pending_topk.append(top)
            self._pending_messages += ids.size

    # ------------------------------------------------------------------ checked events
    def _log(self, record: dict[str, Any]) -> int:
        try:
            return self.wal.append(record)
        except OSError as exc:
            # The event is applied but not logged: refuse everything until the state is
            # reloaded from the log (recover, once the disk takes writes again), so no
            # answer reflects a state the log cannot rebuild.
            self.failed = exc
            raise unavailable(exc) from exc
        except Exception as exc:
            # Not an I/O error: the record could not be encoded, nothing was written and
            # the disk is fine. The event is applied in memory only, so the state is
            # reloaded from the log at once (this is the apply thread) and the request
            # alone fails; the service does not enter the failed state.
            self.failed = exc
            try:
                self.recover()
            except Exception as again:  # e.g. the disk failed meanwhile: the watchman
                self.failed = again     # retries the reload
                raise unavailable(again) from exc
            msg = f"not applied: the event cannot be logged ({format_error(exc)})"
            raise RequestError(msg, status=422) from exc

    def _check_alive(self) -> None:
        failure = self.failure
        if failure is not None:
            if self.failed is None:
                self.failed = failure
            msg = (f"not applied: the service stopped accepting events after a log "
                   f"failure ({failure}); it reloads its state by itself once the disk "
                   "accepts writes again (GET /health says ok)")
            raise LogUnavailableError(msg)
        if self.log_full():
            msg = (f"not applied: the log holds {self.wal.size:,} bytes, at its limit of "
                   f"{self.options.max_log_bytes:,} bytes (--max-log-bytes); events resume "
                   "once a snapshot lets its older segments be dropped (GET /health)")
            raise LogUnavailableError(msg)

    def contains(self, ids: IntArray) -> npt.NDArray[np.bool_]:
        """Whether each id is a live subscription of any kind."""
        live = self.index.contains(ids)
        if self._kinds_live() and not live.all():
            live |= self.boolean.contains(ids) | self.topk.contains(ids)
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

    def subscribe(self, batch: SubscriptionBatch, *, owner: str = "") -> Applied:
        """Add a batch of subscriptions (their ids must be new); ``owner``: the token
        id owning them (kept in the log record and the snapshots)."""
        self._check_alive()
        clash = self.contains(batch.ids)
        if clash.any():
            taken = batch.ids[clash]
            msg = ("subscription ids already exist: "
                   f"{describe_rows(taken[:10].tolist(), total=taken.size)}")
            raise RequestError(msg, status=409)
        kinds = batch.kind is not None and bool(batch.kind.any())
        hooks = getattr(batch, "webhook", None)
        if hooks is not None and any(u is not None for u in hooks):
            hooks = self._checked_webhooks(hooks)
        else:
            hooks = None
        self._subscribe(batch.ids, batch.points, batch.keywords, batch.alpha, batch.tau,
                        batch.expires_at, batch.kind if kinds else None, batch.radius,
                        batch.k)
        record = {"op": "subscribe", "id": batch.ids.tolist(),
                  "edge": batch.points.edge.tolist(), "offset": batch.points.offset.tolist(),
                  "alpha": _tolist(batch.alpha), "tau": _tolist(batch.tau),
                  "keywords": batch.keywords, "expires_at": _tolist(batch.expires_at)}
        if kinds:
            assert batch.kind is not None and batch.radius is not None and batch.k is not None
            record.update(kind=[SUBSCRIPTION_KIND_NAMES[c] for c in batch.kind.tolist()],
                          radius=_tolist(batch.radius), k=_tolist(batch.k))
        if hooks is not None:
            record["webhook"] = hooks
            self._set_webhooks(batch.ids, hooks)
        if owner:
            record["owner"] = owner
            self._own("subscribe", batch.ids, owner)
        seq = self._log(record)
        return self._after(Applied(seq, {"subscribed": len(batch), "seq": seq}), len(batch))

    def _checked_webhooks(self, urls: list[str | None]) -> list[str | None]:
        """The webhook URLs of a batch, each checked (422 naming the row otherwise)."""
        check = self.check_webhook
        if check is None:
            msg = "field 'webhook': webhooks are not enabled on this service"
            raise RequestError(msg, status=400)
        out: list[str | None] = []
        for row, url in enumerate(urls):
            if url is None:
                out.append(None)
                continue
            try:
                out.append(check(url))
            except InputError as exc:
                msg = f"subscriptions: row {row}: field 'webhook': {exc}"
                raise RequestError(msg, status=422) from exc
        return out

    def unsubscribe(self, ids: IntArray) -> Applied:
        """Remove live subscriptions."""
        self._check_alive()
        self.require_live(ids)
        self._unsubscribe(ids)
        seq = self._log({"op": "unsubscribe", "id": ids.tolist()})
        return self._after(Applied(seq, {"unsubscribed": int(ids.size), "seq": seq}))

    def move(self, batch: MoveBatch) -> Applied:
        """Give live subscriptions new locations (one vectorised index update)."""
        self._check_alive()
        if self._kinds_live():
            self.require_live(batch.ids)
            self._move(batch.ids, batch.points)
        else:
            try:  # a move looks every id up before it changes anything
                self._move(batch.ids, batch.points)
            except InputError:
                self.require_live(batch.ids)  # unknown ids: the service's 404 answer
                raise
        # arrays go to the log's encoder as they are (no list of Python numbers)
        seq = self._log({"op": "move", "id": np.ascontiguousarray(batch.ids, np.int64),
                         "edge": np.ascontiguousarray(batch.points.edge, np.int64),
                         "offset": np.ascontiguousarray(batch.points.offset, np.float64)})
        return self._after(Applied(seq, {"moved": len(batch), "seq": seq}), len(batch))

    def publish(self, batch: MessageBatch, *, now: float | None = None, owner: str = ""
                ) -> Applied:
        """Match new messages; repeated ids get their recorded deliveries. ``now``: the
        server's clock (epoch seconds; default ``time.time()``), which purges expired
        subscriptions and stands in for absent message times; ``owner``: the token id
        owning the new ones (kept in the log record and the snapshots)."""
        self._check_alive()
        seen = np.fromiter((m in self.messages for m in batch.ids.tolist()), dtype=bool,
                           count=len(batch))
        every = not seen.any()  # all new (a single new message): no selection to make
        new = np.arange(len(batch)) if every else np.flatnonzero(~seen)
        seq = self.wal.next_seq - 1  # a batch of repeats waits for what is logged so far
        fresh = Deliveries.empty()
        if new.size:
            ids = batch.ids if every else batch.ids[new]
            times = batch.time if every else batch.time[new]
            clock = time.time() if now is None else float(now)
            times = np.where(np.isnan(times), clock, times)
            keywords = batch.keywords if every else [batch.keywords[i] for i in new.tolist()]
            points = batch.points if every else batch.points[new]
            fresh, top = self._publish(ids, points, keywords, times, purge_at=clock)
            record = {"op": "publish", "id": ids.tolist(), "edge": points.edge.tolist(),
                      "offset": points.offset.tolist(), "keywords": keywords,
                      "time": times.tolist(), "now": clock}
            if owner:
                record["owner"] = owner
                self._own("publish", ids, owner)
            seq = self._log(record)
            self._record(seq, ids, times, fresh, top, replay=False)
        else:
            top = TopkFound.empty()
        # only new messages: the answer is their deliveries, already in order
        everything = fresh if every else Deliveries.concat(
            [fresh] + [self.messages[m][2] for m in batch.ids[seen].tolist()])
        dseq = self.delivery_seqs(everything)
        body: dict[str, Any] = {"deliveries": DeliveryList(everything, seq=dseq), "seq": seq}
        repeated = [] if every else \
            [self.topk_of[m] for m in batch.ids[seen].tolist() if m in self.topk_of]
        top_all = TopkFound.concat([top, *repeated])
        if len(top_all):
            body["topk"] = topk_json(top_all)
        if not every:
            body["duplicates"] = batch.ids[seen].tolist()
        located = (ids, points) if new.size else None
        return self._after(Applied(seq, body, fresh, everything, located,
                                   top if len(top) else None, top_all,
                                   dseq if every else self.delivery_seqs(fresh)),
                           max(int(new.size), 1))

    def _after(self, applied: Applied, rows: int = 1) -> Applied:
        # What a restart would replay, in units of one single-row event: a record costs
        # about a millisecond to replay, a row of a large batch about 1/25 of that (511,000
        # moved rows in 10,700 records replayed in 8.7 s on Rome at 1M subscriptions).
        self.events_since_snapshot += 1 + rows // 25
        try:
            if self._pending_messages >= self.options.flush_every:
                self.flush_deliveries()
            if self.compactor.step():
                self.compactions += 1
            # A snapshot waits for a running compaction (both would share the CPU, and the
            # snapshot child compacts too), unless the log has grown to twice its due size.
            if self.events_since_snapshot >= self.options.snapshot_every * (
                    2 if self.compactor.running else 1):
                self.start_snapshot()
            else:
                self.maintain()
        except OSError as exc:
            # The event is logged (its answer waits for its fsync as usual); what failed
            # is derived from the log, which a reload rebuilds (see recover).
            self.failed = exc
        return applied

    # ------------------------------------------------------------------ durability
    def flush_deliveries(self) -> None:
        """Write the deliveries of messages not yet in a segment (one new segment)."""
        if not self._pending:
            return
        first = self.flushed_through
        last = self._pending[-1][0]
        ids = np.concatenate([p[1] for p in self._pending])
        seqs = np.concatenate([np.full(p[1].size, p[0], dtype=np.int64)
                               for p in self._pending])
        times = np.concatenate([p[2] for p in self._pending])
        parts = [p[3] for p in self._pending]
        mid = np.concatenate([p.message_id for p in parts])
        sid = np.concatenate([p.subscription_id for p in parts])
        dseq = np.concatenate([p[4] + np.arange(len(p[3]), dtype=np.int64)
                               for p in self._pending])
        order = sort_order(mid, sid)  # a segment's rows by message id (its seqs with them)
        found = Deliveries(mid[order], sid[order],
                           np.concatenate([p.distance for p in parts])[order],
                           np.concatenate([p.score for p in parts])[order])
        top = TopkFound.concat(self._pending_topk)
        # a segment never covers records the log could still lose in a crash (a restart
        # would give their seqs to other records)
        self.wal.sync()
        if len(top):  # before the deliveries segment, which makes both count
            self.tlog.write(first, last, top.columns())
        self.dlog.write(first, last, Published(ids, seqs, times), found, dseq[order])
        self.flushed_through = last
        self._pending = []
        self._pending_topk = []
        self._pending_messages = 0

    def start_snapshot(self) -> bool:
        """Fork a background snapshot of the state as of the last logged event."""
        if self.snapshots.running:
            return False
        seq = self.wal.next_seq - 1
        self.wal.rotate()
        self.flush_deliveries()
        self.flushed_through = max(self.flushed_through, seq)
        self.events_since_snapshot = 0
        try:
            self.snapshots.start(seq, self.index, self.expiry.arrays(),
                                 close_fds=() if self._lock is None else (self._lock,),
                                 kinds=self._kinds_arrays)
        except OSError as exc:  # no fork (memory, processes): retried like a failed child
            self.snapshots.note_failure(seq, f"could not start: {exc}")
            return False
        return True

    def maintain(self) -> None:
        """Start a snapshot when a failed one is due for its retry, or when the log is at
        its size limit (its segments are dropped once a snapshot covers them)."""
        if self.failure is not None or self.snapshots.running:
            return  # (failed: memory may be ahead of the log, nothing to snapshot)
        current = self.wal.next_seq - 1 <= self.snapshot_seq
        if self.snapshots.last_error is not None:
            if not current and time.monotonic() >= self.snapshots.retry_at:
                self.start_snapshot()
        elif self.log_full():
            if current:
                self._drop_fallback()
            else:
                self.start_snapshot()

    def _drop_fallback(self) -> None:
        """The log at its limit with nothing left to snapshot: what remains is the log kept
        since the previous snapshot (the fall-back should the current one be damaged), so
        that goes, with the previous snapshot, and events resume. The manifest first stops
        naming it, so a start never looks for it."""
        if "previous" not in self.manifest:
            return
        write_manifest(self.dir, self.manifest)  # without ``previous``
        self.manifest = read_manifest(self.dir) or self.manifest
        clean_snapshots(self.dir, self.snapshot_seq)
        self.wal.drop_through(self.snapshot_seq)
        _note(f"the log reached --max-log-bytes with the snapshot of seq {self.snapshot_seq} "
              "current: the previous snapshot and the log since it (its fall-back) dropped")

    def log_full(self) -> bool:
        """Whether the log has reached ``options.max_log_bytes``."""
        return self.wal.size >= self.options.max_log_bytes

    @property
    def failure(self) -> BaseException | None:
        """The I/O error that stopped the events (the log's or another write's), or None."""
        return self.failed if self.failed is not None else self.wal.error

    def health(self) -> tuple[str, str | None]:
        """("ok" | "degraded" | "failed", the reason or None): failed while the log cannot
        be written (events refused, a reload follows once the disk accepts writes);
        degraded while snapshots fail (retried with backoff) or the log is full."""
        failure = self.failure
        if failure is not None:
            return "failed", (f"the log could not be written ({failure}): events are "
                              "refused until the disk accepts writes again and the state "
                              "is reloaded from it")
        reasons = []
        snaps = self.snapshots
        if snaps.last_error is not None:
            wait = max(0.0, snaps.retry_at - time.monotonic())
            reasons.append(f"{snaps.consecutive_failures} snapshot(s) in a row failed, the "
                           f"last one of seq {snaps.failed_seq}: {snaps.last_error}; the "
                           f"log is kept ({self.wal.size:,} bytes) and the snapshot retried "
                           f"in {wait:.0f} s")
        if self.log_full():
            reasons.append(f"the log holds {self.wal.size:,} bytes, at its limit of "
                           f"{self.options.max_log_bytes:,} (--max-log-bytes): events are "
                           "refused until a snapshot lets its older segments be dropped")
        return ("degraded", "; ".join(reasons)) if reasons else ("ok", None)

    def recover(self) -> bool:
        """After a log failure, once the disk accepts writes again: rebuild the state from
        the folder (the recovery of :meth:`open`, into this object, so that every holder of
        it sees the reloaded state) and resume; call it on the apply thread. False when
        there is nothing to recover.

        Memory ran ahead of the log (an event is applied before its record is written), so
        the state is read back from what the log holds; a torn frame the failed write left
        at the log's tail is cut by the recovery as any torn tail.
        """
        if self.failure is None:
            return False
        self.snapshots.stop()
        if self.wal.fsync_error is None:  # what the log took before the failure is answered
            self.wal.sync()
        self.wal.close(flush=False)
        # Bytes of a failed writeback may sit in the page cache only: the disk accepts
        # writes now, so sync them before anything is read back and built upon.
        for _, path in segments(self.dir / "wal"):
            fsync_path(path)
        fresh = type(self).open(self.dir, self.options, lock=self._lock)
        old, recoveries = self.snapshots, self.recoveries + 1
        fresh.check_webhook = self.check_webhook  # the service's, not the folder's
        self.__dict__.update(fresh.__dict__)
        self.snapshots = SnapshotWorker(self.dir, self._snapshot_done)  # bound to self
        self.snapshots.configure(retry_s=self.options.snapshot_retry_s,
                                 retry_max_s=self.options.snapshot_retry_max_s)
        self.snapshots.completed, self.snapshots.failures = old.completed, old.failures
        self.recoveries = recoveries
        print(f"roadpubsub serve: the disk accepts writes again; state reloaded at log seq "
              f"{self.wal.next_seq - 1} in {self.recovery_seconds:.1f} s", file=sys.stderr,
              flush=True)
        return True

    def _snapshot_done(self, seq: int, seconds: float) -> None:
        self.wal.sync()  # the manifest never runs ahead of the log
        if self.wal.fsync_error is not None:
            raise unavailable(self.wal.fsync_error)
        # The snapshot before this one and the log since it stay (a fall-back when this
        # one is damaged); older ones go.
        previous = self.manifest
        write_manifest(self.dir, {**self.manifest, "seq": seq, "snapshot_seconds": seconds},
                       previous=previous)
        self.manifest = read_manifest(self.dir) or {**self.manifest, "seq": seq}
        self.snapshot_seq = seq
        before = int(previous["seq"]) if int(previous["seq"]) != seq else seq
        clean_snapshots(self.dir, seq, before)
        self.wal.drop_through(before)

    def close(self) -> None:
        """A clean stop: flush the deliveries, snapshot what the log holds beyond the last
        snapshot (so the next start replays nothing), and close the log."""
        self.snapshots.stop()
        if self.failure is None:
            if self.compactor.finish():
                self.compactions += 1
            try:
                self.flush_deliveries()
                seq = self.wal.next_seq - 1
                if seq > self.snapshot_seq:
                    self.wal.rotate()
                    self.wal.sync()
                    t0 = time.perf_counter()
                    write_snapshot(self.dir, seq, self.index, self.expiry.arrays(),
                                   self._kinds_arrays)
                    self._snapshot_done(seq, time.perf_counter() - t0)
            except Exception as exc:  # the log holds everything: say so
                print(f"roadpubsub serve: the closing snapshot failed ({format_error(exc)});"
                      " the log is kept and the next start replays it", file=sys.stderr,
                      flush=True)
        self.wal.close(flush=self.wal.fsync_error is None)
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    # ------------------------------------------------------------------ reading
    def subscription_rows(self, ids: IntArray) -> list[dict[str, Any]]:
        """Live subscriptions as rows of the subscriptions schema, with ``expires_at``;
        boolean and top-k rows also with ``kind``, ``radius``, ``k`` (top-k rows with
        ``topk``, the current top-k: message_id, rank, score, distance)."""
        if not self._kinds_live():
            subs = self.index._rows_of(ids)  # one lookup per id, no pass over the index
            return self._rows(subs)
        thr = self.index.contains(ids)
        boo = ~thr & self.boolean.contains(ids)
        top = ~thr & ~boo
        rows = self._rows(self.index._rows_of(ids[thr]), self.boolean.rows_of(ids[boo]),
                          self.topk.rows_of(ids[top]))
        by_id = {r["id"]: r for r in rows}
        return [by_id[i] for i in ids.tolist()]

    def _rows(self, subs: Subscriptions, boolean: BooleanSubscriptions | None = None,
              topk: TopkSubscriptions | None = None) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = subscriptions_table(
            subs, network=self.index.network, weights=self.index.weights).to_pylist() \
            if len(subs) else []
        for r in rows:
            r.update(kind="threshold", radius=None, k=None)
        if (boolean is not None and len(boolean)) or (topk is not None and len(topk)):
            other = SubscriptionSet(Subscriptions.from_rows(
                ids=np.empty(0, np.int64), points=EdgePoints.of([], []), keywords=[],
                alpha=np.empty(0), tau=np.empty(0), weights=self.index.weights),
                boolean if boolean is not None else empty_boolean(),
                topk if topk is not None else empty_topk())
            more = subscription_set_table(other, network=self.index.network,
                                          weights=self.index.weights,
                                          lonlat=True).to_pylist()
            if topk is not None and len(topk):
                tops = iter(self.topk.results(topk.ids))
                for r in more:
                    if r["kind"] == KIND_TOPK:
                        r["topk"] = next(tops)
            rows += more
        for r in rows:
            r["expires_at"] = self.expiry.at.get(r["id"])
            if r["id"] in self.webhook_of:
                r["webhook"] = self.webhook_of[r["id"]]
        return rows

    def list_subscriptions(self, *, after: int | None, limit: int) -> list[dict[str, Any]]:
        """Up to ``limit`` live subscriptions with ids above ``after``, by id."""
        live = self.index.subscriptions()
        if not self._kinds_live():
            start = 0 if after is None else int(np.searchsorted(live.ids, after,
                                                                side="right"))
            return self._rows(live.take(np.arange(start, min(start + limit, len(live)))))
        ids = np.sort(np.concatenate([live.ids, self.boolean.subscriptions().ids,
                                      self.topk.subscriptions().ids]))
        start = 0 if after is None else int(np.searchsorted(ids, after, side="right"))
        return self.subscription_rows(ids[start:start + limit])

    def subscription_count(self) -> dict[str, int]:
        """Live subscriptions per kind."""
        return {"threshold": len(self.index), KIND_BOOLEAN: len(self.boolean),
                KIND_TOPK: len(self.topk)}

    def message(self, message_id: int) -> dict[str, Any] | None:
        """A published message's seq, time and deliveries, or None."""
        known = self.messages.get(message_id)
        if known is None:
            return None
        out = {"message_id": message_id, "seq": known[0], "time": known[1],
               "deliveries": deliveries_json(known[2], self.delivery_seqs(known[2]))}
        if message_id in self.topk_of:
            out["topk"] = topk_json(self.topk_of[message_id])
        return out



def _owner_arrays(prefix: str, owners: dict[int, str]) -> dict[str, npt.NDArray[Any]]:
    """An owner map as two columns of a snapshot (ids, token ids)."""
    return {prefix + "ids": np.fromiter(owners.keys(), dtype=np.int64, count=len(owners)),
            prefix + "tok": np.array(list(owners.values()), dtype=str)}


def _note(line: str) -> None:
    """One line on stderr about what the start did with damage or a torn tail."""
    print(f"roadpubsub: {line}", file=sys.stderr, flush=True)


def _checked_load(path: Path, load: Any) -> Any:
    """``load(path)`` with any failure named as damage of the file (one line)."""
    try:
        return load(path)
    except StateDamageError:
        raise
    except FileNotFoundError as exc:
        msg = f"{path}: missing snapshot file"
        raise StateDamageError(msg, path=path) from exc
    except Exception as exc:
        msg = f"{path}: unreadable snapshot file ({type(exc).__name__}: {exc})"
        raise StateDamageError(msg, path=path) from exc


def _floats(values: list[Any]) -> FloatArray:
    return np.asarray([np.nan if x is None else x for x in values], dtype=float)


def _check_same_topk(message_id: int, a: TopkFound | None, b: TopkFound) -> None:
    """A replayed message's top-k events are the logged ones."""
    if a is None:
        a = TopkFound.empty()
    same = len(a) == len(b) and all(
        np.array_equal(getattr(a.events, f), getattr(b.events, f))
        for f in ("event", "message_id", "subscription_id", "rank", "score", "distance"))
    if not same:
        msg = (f"replaying message {message_id} gave other top-k events than the top-k "
               f"log holds ({len(b)} vs {len(a)})")
        raise RuntimeError(msg)


def _check_same(message_id: int, a: Deliveries, b: Deliveries) -> None:
    same = (len(a) == len(b) and np.array_equal(a.subscription_id, b.subscription_id)
            and np.array_equal(a.distance, b.distance) and np.array_equal(a.score, b.score))
    if not same:
        msg = (f"replaying message {message_id} gave other deliveries than the deliveries "
               f"log holds ({len(b)} vs {len(a)})")
        raise RuntimeError(msg)


def create_state(state_dir: str | Path, index: SubscriptionIndex, *,
                 about: dict[str, Any] | None = None, window: int = DEFAULT_WINDOW,
                 boolean: BooleanSubscriptions | None = None,
                 topk: TopkSubscriptions | None = None) -> Path:
    """Make a new service folder around ``index`` (its network, weights and Dmax are fixed
    from now on), with the top-k window ``window`` (messages, >= 1; fixed too) and
    optionally boolean and top-k subscriptions to start with (keyword ids of the index's
    weights).

    Raises
    ------
    FileExistsError
        The folder already holds a service.
    """
    folder = Path(state_dir)
    if read_manifest(folder) is not None:
        msg = f"{folder} already holds a roadpubsub service"
        raise FileExistsError(msg)
    folder.mkdir(parents=True, exist_ok=True)
    for sub in ("snapshots", "wal", "deliveries", "topk"):
        (folder / sub).mkdir(exist_ok=True)
    create_segment(folder / "wal", 1)  # the manifest names it: a deleted log is damage
    w = check_window(window)
    b = LiveBoolean(index.spatial, index.weights, dmax_m=index.dmax_m, subs=boolean)
    t = LiveTopk(index.spatial, index.weights, dmax_m=index.dmax_m, window=w, subs=topk)
    write_snapshot(folder, 0, index, (np.empty(0, np.int64), np.empty(0)), lambda: {
        **{"b_" + k: v for k, v in b.arrays().items()},
        **{"t_" + k: v for k, v in t.arrays().items()}})
    net = index.network
    write_manifest(folder, {"seq": 0, "kind": index.kind, "dmax_m": index.dmax_m,
                            "window": w,
                            "network": {"name": net.name, "directed": net.directed,
                                        "nodes": net.n_nodes, "edges": net.n_edges},
                            **(about or {})})
    return folder
