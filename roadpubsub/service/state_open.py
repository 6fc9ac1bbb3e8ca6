"""Opening a service folder: the snapshot and logs, each file checked, the log replayed;
and the reload after a log failure."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, Self

import numpy as np

from roadpubsub.index.kinds import (
    KIND_CODES,
)
from roadpubsub.index.store import load_index
from roadpubsub.pruning.live_kinds import LiveBoolean
from roadpubsub.pruning.live_topk import LiveTopk
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.service.folder_lock import lock_folder
from roadpubsub.service.integrity import StateDamageError, move_aside
from roadpubsub.service.live_sets import set_from_record
from roadpubsub.service.options import ServiceOptions
from roadpubsub.service.snapshot import (
    SnapshotWorker,
    clean_snapshots,
    kinds_path,
    read_manifest,
    snapshot_files,
    snapshot_paths,
    verify_snapshot,
)
from roadpubsub.service.state_core import FloatArray
from roadpubsub.service.state_record import check_same_topk
from roadpubsub.service.state_upkeep import StateUpkeep, note
from roadpubsub.service.topk_found import TopkFound
from roadpubsub.service.wal import (
    LogRecovery,
    WriteAheadLog,
    check_log,
    fsync_path,
    recover_log,
    segments,
)

__all__ = ["StateOpening"]


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


class StateOpening(StateUpkeep):
    """Opens, replays and reloads (see the module docstring)."""

    @classmethod
    def open(cls, state_dir: str | Path, options: ServiceOptions | None = None, *,
             lock: int | None = None) -> Self:
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
            note(log.torn_message())
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
              ) -> tuple[Self, LogRecovery]:
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
            note(f"{fell_back} -> moved to {moved}; starting from the previous snapshot of "
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
        for prefix in ("b_", "t_", "s_"):
            if prefix + "kw_terms" not in a:  # s_: folders made before routes and areas
                continue
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
        if "s_ids" in a:  # routes and areas (issue 32)
            self.sets.load_arrays({k[2:]: v for k, v in a.items() if k[:2] == "s_"},
                                  where=str(path))
        if "o_ids" in a:  # owners (access); absent in folders made before them
            self.owners = dict(zip(a["o_ids"].tolist(), a["o_tok"].tolist(), strict=True))
            self.message_owners = dict(zip(a["om_ids"].tolist(), a["om_tok"].tolist(),
                                           strict=True))
        if "wh_ids" in a:  # webhook URLs (issue 30)
            self.webhook_of = dict(zip(a["wh_ids"].tolist(), a["wh_tok"].tolist(),
                                       strict=True))
        if "mq_ids" in a:  # the subscriptions' "mqtt" choices (issue 33)
            if a["mq_ids"].shape != a["mq_on"].shape or a["mq_on"].dtype != np.bool_:
                msg = f"{path}: the mqtt choices' columns do not match"
                raise InputError(msg)
            self.mqtt_of = dict(zip(a["mq_ids"].tolist(), a["mq_on"].tolist(), strict=True))
            self._mqtt_changed = True

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
        if last.size:
            self._move(ids[last], EdgePoints.of(edge[last], offset[last]))
        self.counts["move"] += ids.size - last.size  # _move counted the merged rows
        # routes and areas (issue 32): never the ids above (a point stays a point), in order
        for r in records:
            if "set_id" in r:
                net = self.index.network
                self._move_sets(np.asarray(r["set_id"], dtype=np.int64),
                                [set_from_record(net, x) for x in r["sets"]])

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
            sets = None if "sets" not in rec else tuple(
                None if x is None else set_from_record(self.index.network, x)
                for x in rec["sets"])
            self._subscribe(ids, EdgePoints.of(rec["edge"], rec["offset"]), rec["keywords"],
                            _floats(rec["alpha"]), _floats(rec["tau"]),
                            _floats(rec["expires_at"]), kind, radius, k, sets)
            self._set_webhooks(ids, rec.get("webhook"))
            if "mqtt" in rec:
                self._set_mqtt(ids, np.array([-1 if x is None else int(x) for x in rec["mqtt"]],
                                             np.int8))
        elif op == "unsubscribe":
            self._unsubscribe(ids)
        elif op == "move":
            self._replay_moves([rec])
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
                    check_same_topk(m, self.topk_of.get(m), top.only([m]))
                return
            found, top = self._publish(ids, points, rec["keywords"], times,
                                       purge_at=purge_at)
            self._record(seq, ids, times, found, top, replay=True)
        else:
            msg = f"unknown operation {op!r} in the log at seq {seq}"
            raise InputError(msg)

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
        # segments handed over are written (or the first failure dropped the rest) before
        # the reload reads the folder; what is missing it derives from the log again
        self.writer.close()
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
        # the webhook feeder's mark: the bounds keep holding what it has not queued (what
        # the reload dropped already it reads back from the deliveries log)
        fresh.journal.hold = self.journal.hold
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
