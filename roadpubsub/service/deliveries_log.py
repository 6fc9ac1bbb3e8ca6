"""The deliveries log of the live service: Parquet segments in ``DIR/deliveries``.

A segment covers the log sequence numbers ``(first, last]`` and is two files:

* ``<first>-<last>.published.parquet``: ``message_id``, ``seq``, ``time`` of every message
  published in that range (a message with no delivery is listed too), written first;
* ``<first>-<last>.parquet``: the deliveries, with the columns of the deliveries file
  (``message_id``, ``subscription_id``, ``distance``, ``score``) and ``seq``, each
  delivery's sequence number, written second.

Delivery sequence numbers (issue 30) count every delivery of the service from 1, without
gap, in the order the service made them: log record by log record, and within a record by
(message id, subscription id). They are a function of the log, so a restart replays the
same numbers; segments written before they existed (no ``seq`` column) are numbered by that
rule when read.

Each file is written under a temporary name, fsynced, given its checksum record
``<file>.sum`` (size and crc32, itself checksummed; written durably before the rename)
and renamed; reading checks it (:func:`read_checked`). A segment counts only
when both files exist; a lone ``.published`` file (a crash between the two) is deleted
and its range recomputed from the write-ahead log, which is kept until a segment covers
it. The service writes a segment every few hundred publishes, at each snapshot and at a
clean stop; a restart writes the segment of whatever the log holds beyond the last one.
Segments are written in order by one thread of their own (:class:`SegmentWriter`), so the
apply thread does not wait for their encoding and fsyncs.

Top-k events go to ``DIR/topk/<first>-<last>.parquet`` (:class:`TopkLog`; columns
``arrival_id``, the published message whose arrival caused the event, ``seq`` its arrival
number, then ``event``, ``message_id``, ``subscription_id``, ``rank``, ``score``,
``distance`` as in :mod:`roadpubsub.pruning.topk_events`), written before the deliveries segment of
the same range: a top-k file counts only when that segment does.
"""

from __future__ import annotations

import collections
import os
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from roadpubsub.pruning.deliveries import Deliveries, sort_order
from roadpubsub.roadnet.files import atomic_paths
from roadpubsub.roadnet.settings import DEFAULTS
from roadpubsub.service.integrity import (
    SUM_SUFFIX,
    StateDamageError,
    read_sum,
    verified_bytes,
    write_sum,
)
from roadpubsub.service.wal import fsync_path

__all__ = ["DELIVERY_COLUMNS", "SEGMENT_NAME", "DeliveriesLog", "Published", "SegmentWriter",
           "TopkLog", "read_checked"]

#: A segment's file name: its first and last log seqs.
SEGMENT_NAME = re.compile(r"^(\d{20})-(\d{20})\.parquet$")
#: Columns of a deliveries segment.
DELIVERY_COLUMNS = ("message_id", "subscription_id", "distance", "score")


@dataclass
class Published:
    """Messages of a range: ids, log sequence numbers, times (epoch seconds)."""

    message_id: npt.NDArray[np.int64]
    seq: npt.NDArray[np.int64]
    time: npt.NDArray[np.float64]


def _write_fsynced(table: pa.Table, target: Path) -> None:
    with atomic_paths(target) as (tmp,):
        pq.write_table(table, tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        write_sum(tmp, name=target.name)  # durable before the file counts


def read_checked(path: Path, *, what: str, legacy: bool = False,
                 columns: tuple[str, ...] = ()) -> pa.Table:
    """A Parquet file of the folder, checked against its side checksum record.

    ``legacy``: a folder made before checksums, whose files may have none (they are then
    read as they are and sealed with one).

    Raises
    ------
    StateDamageError
        The file or its checksum record is missing or damaged, or it is unreadable.
    """
    expected = read_sum(path)
    if expected is None and not legacy:
        msg = f"{path}: its checksum record {path.name}{SUM_SUFFIX} is missing ({what})"
        raise StateDamageError(msg, path=path.with_name(path.name + SUM_SUFFIX))
    data = verified_bytes(path, expected, what=what)
    try:
        table = pq.read_table(pa.BufferReader(data))
        missing = [c for c in columns if c not in table.column_names]
        if missing:
            raise KeyError(", ".join(missing))
    except (pa.ArrowException, OSError, ValueError, KeyError) as exc:
        msg = f"{path}: unreadable Parquet ({type(exc).__name__}: {exc}; {what})"
        raise StateDamageError(msg, path=path) from exc
    if expected is None:
        write_sum(path)
    return table


def _ints(t: pa.Table, c: str) -> npt.NDArray[np.int64]:
    return np.asarray(t.column(c).to_numpy(), dtype=np.int64)


def _floats(t: pa.Table, c: str) -> npt.NDArray[np.float64]:
    return np.asarray(t.column(c).to_numpy(), dtype=np.float64)


def _legacy_numbers(pub_mid: npt.NDArray[np.int64], pub_seq: npt.NDArray[np.int64],
                    mid: npt.NDArray[np.int64], counted: int) -> npt.NDArray[np.int64]:
    """Delivery numbers of a segment written without them, in its row order: by log seq
    of their message, then row order (rows are by message id, then subscription id),
    from ``counted + 1``."""
    if not mid.size:
        return np.empty(0, np.int64)
    by_mid = np.argsort(pub_mid, kind="stable")
    log_seq = pub_seq[by_mid][np.searchsorted(pub_mid[by_mid], mid)]
    order = np.lexsort((np.arange(mid.size), log_seq))
    out = np.empty(mid.size, np.int64)
    out[order] = counted + 1 + np.arange(mid.size, dtype=np.int64)
    return out


class DeliveriesLog:
    """Reads and appends the segments of ``folder``."""

    def __init__(self, folder: Path, *, legacy: bool = False) -> None:
        self.dir = folder
        self.dir.mkdir(parents=True, exist_ok=True)
        self.segments = 0
        self.legacy = legacy  # files without checksum records are read (and sealed)

    def _ranges(self) -> list[tuple[int, int, Path]]:
        out = []
        for p in self.dir.iterdir():
            m = SEGMENT_NAME.match(p.name)
            if m:
                out.append((int(m.group(1)), int(m.group(2)), p))
        return sorted(out)

    def clean(self) -> None:
        """Delete temporary files and ``.published`` files without their deliveries."""
        for p in self.dir.iterdir():
            if p.name.startswith(".") and p.name.endswith(".tmp"):
                p.unlink(missing_ok=True)
            elif p.name.endswith(".published.parquet"):
                base = p.name[: -len(".published.parquet")] + ".parquet"
                if not (self.dir / base).exists():
                    p.unlink(missing_ok=True)
                    p.with_name(p.name + SUM_SUFFIX).unlink(missing_ok=True)

    def read_all(self) -> tuple[Published, Deliveries, npt.NDArray[np.int64], int]:
        """Every segment: published messages, deliveries (sorted by message id, then
        subscription id), each delivery's sequence number and the last covered log seq."""
        self.clean()
        pubs: list[pa.Table] = []
        dels: list[pa.Table] = []
        dseqs: list[npt.NDArray[np.int64]] = []
        last = 0
        ranges = self._ranges()
        counted = 0  # deliveries numbered so far (segments are read in log order)
        for first, end, path in ranges:
            what = f"the deliveries of the messages of seq {first + 1}-{end}"
            pub = read_checked(path.with_name(path.stem + ".published.parquet"),
                               what=what, legacy=self.legacy,
                               columns=("message_id", "seq", "time"))
            dl = read_checked(path, what=what, legacy=self.legacy, columns=DELIVERY_COLUMNS)
            pubs.append(pub)
            dels.append(dl)
            if "seq" in dl.column_names:
                dseq = _ints(dl, "seq")
            else:  # written before delivery numbers: numbered by their rule
                dseq = _legacy_numbers(_ints(pub, "message_id"), _ints(pub, "seq"),
                                       _ints(dl, "message_id"), counted)
            if dseq.size:
                counted = max(counted, int(dseq.max()))
            dseqs.append(dseq)
            last = max(last, end)
        self.segments = len(ranges)
        if not pubs:
            return (Published(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0)),
                    Deliveries.empty(), np.empty(0, np.int64), last)
        pub = pa.concat_tables(pubs)
        dl = pa.concat_tables([t.select(list(DELIVERY_COLUMNS)) for t in dels])
        published = Published(_ints(pub, "message_id"), _ints(pub, "seq"),
                              _floats(pub, "time"))
        mid, sid = _ints(dl, "message_id"), _ints(dl, "subscription_id")
        order = sort_order(mid, sid)
        deliveries = Deliveries(mid[order], sid[order], _floats(dl, "distance")[order],
                                _floats(dl, "score")[order])
        dseq = np.concatenate(dseqs)[order] if dseqs else np.empty(0, np.int64)
        return published, deliveries, dseq, last

    def deliveries_after(self, after: int, *, from_log_seq: int = 0
                         ) -> Iterator[tuple[npt.NDArray[np.int64], Deliveries]]:
        """The logged deliveries with a sequence number above ``after``, one segment at a
        time in log order (its seqs and its rows, both in seq order): what a start or a
        reload queues for webhooks beyond the outbox. Each file read is checked as
        :meth:`read_all` checks it; nothing is deleted or skipped. ``from_log_seq``: the
        log seq of the record holding delivery ``after + 1`` when known (segments wholly
        before it are not read: their deliveries are numbered lower).

        Raises
        ------
        StateDamageError
            A segment or its checksum record is missing or damaged.
        """
        counted = 0
        skipped = False
        for first, end, path in self._ranges():
            if end < from_log_seq:
                skipped = True
                continue
            what = f"the deliveries of the messages of seq {first + 1}-{end}"
            dl = read_checked(path, what=what, legacy=self.legacy, columns=DELIVERY_COLUMNS)
            if skipped and "seq" not in dl.column_names:
                # written before delivery numbers (so are all before it): numbered by
                # counting from the first segment
                yield from self.deliveries_after(after)
                return
            if "seq" in dl.column_names:
                dseq = _ints(dl, "seq")
            else:  # written before delivery numbers: numbered by their rule
                pub = read_checked(path.with_name(path.stem + ".published.parquet"),
                                   what=what, legacy=self.legacy,
                                   columns=("message_id", "seq", "time"))
                dseq = _legacy_numbers(_ints(pub, "message_id"), _ints(pub, "seq"),
                                       _ints(dl, "message_id"), counted)
            if not dseq.size:
                continue
            counted = max(counted, int(dseq.max()))
            if counted <= after:
                continue
            keep = np.flatnonzero(dseq > after)
            keep = keep[np.argsort(dseq[keep], kind="stable")]
            yield dseq[keep], Deliveries(_ints(dl, "message_id")[keep],
                                         _ints(dl, "subscription_id")[keep],
                                         _floats(dl, "distance")[keep],
                                         _floats(dl, "score")[keep])

    def write(self, first: int, last: int, published: Published,
              deliveries: Deliveries, seq: npt.NDArray[np.int64] | None = None) -> Path:
        """Write the segment of ``(first, last]`` (published file first, then deliveries,
        with ``seq``: each delivery's sequence number)."""
        name = f"{first:020d}-{last:020d}"
        _write_fsynced(pa.table({"message_id": pa.array(published.message_id, pa.int64()),
                                 "seq": pa.array(published.seq, pa.int64()),
                                 "time": pa.array(published.time, pa.float64())}),
                       self.dir / f"{name}.published.parquet")
        target = self.dir / f"{name}.parquet"
        columns = {k: pa.array(v) for k, v in deliveries.to_columns().items()}
        if seq is not None:
            columns["seq"] = pa.array(np.asarray(seq, dtype=np.int64), pa.int64())
        _write_fsynced(pa.table(columns), target)
        fsync_path(self.dir)
        self.segments += 1
        return target


#: Columns of a top-k events segment.
TOPK_COLUMNS = ("arrival_id", "seq", "event", "message_id", "subscription_id", "rank",
                "score", "distance")


class TopkLog:
    """Top-k event segments in ``folder``, one per deliveries segment that has events."""

    def __init__(self, folder: Path) -> None:
        self.dir = folder
        self.dir.mkdir(parents=True, exist_ok=True)

    def read_all(self, deliveries: DeliveriesLog) -> pa.Table | None:
        """Every segment whose deliveries segment exists (others are deleted)."""
        kept = {p.name for _, _, p in deliveries._ranges()}
        tables = []
        for p in sorted(self.dir.iterdir()):
            if p.name.startswith(".") and p.name.endswith(".tmp"):
                p.unlink(missing_ok=True)
            elif SEGMENT_NAME.match(p.name):
                if p.name in kept:
                    m = SEGMENT_NAME.match(p.name)
                    assert m is not None
                    what = (f"the top-k events of the messages of seq {int(m.group(1)) + 1}"
                            f"-{int(m.group(2))}")
                    tables.append(read_checked(p, what=what, legacy=deliveries.legacy,
                                               columns=TOPK_COLUMNS))
                else:  # a crash before its deliveries segment: recomputed from the log
                    p.unlink(missing_ok=True)
                    p.with_name(p.name + SUM_SUFFIX).unlink(missing_ok=True)
        return pa.concat_tables(tables) if tables else None

    def write(self, first: int, last: int, columns: dict[str, npt.NDArray[np.generic]]
              ) -> Path:
        """Write the top-k events of ``(first, last]``."""
        target = self.dir / f"{first:020d}-{last:020d}.parquet"
        _write_fsynced(pa.table({k: pa.array(columns[k]) for k in TOPK_COLUMNS}), target)
        fsync_path(self.dir)
        return target


class SegmentWriter:
    """One thread that runs the writes of log segments in the order they were submitted.

    A flush of 2,000 messages' deliveries (about 340,000 rows on Rome at 1M subscriptions)
    took 56-356 ms, and every event behind it waited that long when the apply thread wrote
    it: the fleet's p99 was these stalls. On this thread the apply thread only hands the
    rows over; what the segment holds is in the write-ahead log, so a crash before it is
    written replays those records.

    The first error stops the writer: a segment written after a missing one would leave a
    gap in the delivery seqs, so nothing more is written (later jobs are dropped) until
    the state is reloaded from the log, which derives the missing segments again.
    :attr:`error` says so to the state's health.
    """

    def __init__(self, *, name: str = "segment-writer",
                 max_queued: int = DEFAULTS.flush_queue) -> None:
        self._name = name
        self.max_queued = max_queued
        self._cond = threading.Condition()
        self._jobs: collections.deque[Callable[[], None]] = collections.deque()
        self._closed = False
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.written = 0
        self._submitted = self._ran = 0

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` after every job submitted before it (dropped once one failed, or
        after :meth:`close`: the state is reloaded from the log then). Waits while
        ``max_queued`` jobs wait already: a disk slower than the events then slows the
        events, rather than the rows of unwritten segments filling the memory."""
        with self._cond:
            while (len(self._jobs) >= self.max_queued and self.error is None
                   and not self._closed):
                self._cond.wait()
            if self.error is not None or self._closed:
                return
            self._jobs.append(job)
            self._submitted += 1
            if self._thread is None:  # started by the first job: a state opened only to
                # be read never has one
                self._thread = threading.Thread(target=self._run, name=self._name,
                                                 daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def drain(self) -> None:
        """Wait until every job submitted before this call has run (not those submitted
        meanwhile: a snapshot's wait ends although the apply thread goes on).

        Raises
        ------
        BaseException
            The error of the job that failed (the first one; later jobs were dropped).
        """
        with self._cond:
            target = self._submitted
            while self._ran < target and self.error is None:
                self._cond.wait()
            error = self.error
        if error is not None:
            raise error

    def close(self) -> None:
        """Run what was submitted (unless a job failed), then end the thread; no error is
        raised (:attr:`error` keeps it)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._closed:
                    self._cond.wait()
                if not self._jobs:
                    return
                job = self._jobs.popleft()
                self._cond.notify_all()  # a submit waiting for room
            error = None
            try:
                job()
            except BaseException as exc:  # kept for the state's health; the thread lives
                error = exc
            with self._cond:
                self._ran += 1
                if error is not None and self.error is None:
                    self.error = error
                    self._jobs.clear()
                elif error is None:
                    self.written += 1
                self._cond.notify_all()
