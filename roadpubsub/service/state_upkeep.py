"""Upkeep of the service state: snapshots (forked in the background, retried), the log's
size limit, health, and the clean close."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from roadpubsub.index.base import SubscriptionIndex
from roadpubsub.roadnet.errors import format_error
from roadpubsub.service.options import ServiceOptions
from roadpubsub.service.snapshot import (
    SnapshotWorker,
    clean_snapshots,
    read_manifest,
    write_manifest,
    write_snapshot,
)
from roadpubsub.service.state_queries import StateQueries
from roadpubsub.service.wal import (
    LogUnavailableError,
    unavailable,
)

__all__ = ["StateUpkeep", "note"]


def note(line: str) -> None:
    """One line on stderr about what the start did with damage or a torn tail."""
    print(f"roadpubsub: {line}", file=sys.stderr, flush=True)


class StateUpkeep(StateQueries):
    """Snapshots, limits, health and close (see the module docstring)."""

    def __init__(self, state_dir: Path, index: SubscriptionIndex, manifest: dict[str, Any],
                 options: ServiceOptions) -> None:
        super().__init__(state_dir, index, manifest, options)
        self.snapshots = SnapshotWorker(state_dir, self._snapshot_done)
        self.snapshots.configure(retry_s=options.snapshot_retry_s,
                                 retry_max_s=options.snapshot_retry_max_s)

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

    def start_snapshot(self) -> bool:
        """Fork a background snapshot of the state as of the last logged event."""
        if self.snapshots.running:
            return False
        seq = self.wal.next_seq - 1
        self.wal.rotate()
        # handed over, not waited for (a wait held every event 65 ms at 1M subscriptions):
        # the manifest names the snapshot only once the segment is written (_snapshot_done)
        self.flush_deliveries(wait=False)
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
        note(f"the log reached --max-log-bytes with the snapshot of seq {self.snapshot_seq} "
              "current: the previous snapshot and the log since it (its fall-back) dropped")

    def log_full(self) -> bool:
        """Whether the log has reached ``options.max_log_bytes``."""
        return self.wal.size >= self.options.max_log_bytes

    @property
    def failure(self) -> BaseException | None:
        """The I/O error that stopped the events (the log's, a deliveries segment's, or
        another write's), or None."""
        if self.failed is not None:
            return self.failed
        return self.wal.error if self.wal.error is not None else self.writer.error

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

    def _snapshot_done(self, seq: int, seconds: float) -> None:
        # the manifest never runs ahead of the deliveries log: a start replays the log
        # from the snapshot's seq, so the deliveries up to it must be in segments
        self.writer.drain()
        self.wal.sync()  # nor ahead of the log
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
        self.writer.close()
        self.wal.close(flush=self.wal.fsync_error is None)
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None
