"""The write-ahead log of the live service: framed JSON records, group-committed fsyncs.

Layout: ``DIR/wal/<first seq, 20 digits>.log`` segments. A record is framed as
``b"R" + length (4 bytes, little endian) + crc32 (4 bytes) + payload`` where the payload is
UTF-8 JSON holding at least ``seq`` (1, 2, 3, ... with no gap) and ``op``. Reading stops at
the first short, corrupt or out-of-sequence record and cuts the segment there: such a tail
was never acknowledged, because an answer waits until an fsync covering its record has
returned, and fsyncs cover a prefix of the file.

Group commit: :meth:`WriteAheadLog.append` writes the record (no fsync) and returns its
sequence number; :meth:`WriteAheadLog.wait_durable` resolves once one fsync issued after
the write has returned. A few threads issue fsyncs, overlapping: a record written while
one fsync runs starts the next one at once on another thread instead of waiting for the
running one to return, and records written while all of them run share the next. An
fsync covers every write that returned before it started, so whichever returns, the
records up to its start are durable; with one thread a record waited 1.5 fsyncs on
average (the rest of the running one, then its own), which bounds closed-loop clients.
The kernel joins overlapping fdatasyncs of one file into its journal commits (on this
machine's ext4: 180 fsyncs/s from one thread, 1,600 from two). Two threads: 8 closed-loop
writers had a median wait of 3 ms against 6.5-25 ms with one; three or four threads
did worse again (more wake-ups competing for the GIL).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import struct
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from index.events import RequestError
from roadnet.errors import RoadPubSubError
from roadpubsub.service import faults

__all__ = ["LogUnavailableError", "WalCorruptError", "WriteAheadLog", "fsync_path",
           "read_records"]

_HEADER = struct.Struct("<cII")
_MAGIC = b"R"


class WalCorruptError(RoadPubSubError, RuntimeError):
    """A log segment that cannot be read past a point that is not its tail."""


class LogUnavailableError(RequestError):
    """The log cannot take records now (a write or an fsync failed, or it is full): the
    request was not applied for good; the answer is 503."""

    def __init__(self, message: str, *, status: int = 503, hint: str | None = None) -> None:
        super().__init__(message, status=status, hint=hint)


def unavailable(exc: BaseException) -> LogUnavailableError:
    """The 503 a request gets when the log failed with ``exc`` (an I/O error)."""
    if isinstance(exc, LogUnavailableError):
        return exc
    msg = (f"not applied: the log could not be written ({exc}); the service reloads its "
           "state once the disk accepts writes again (GET /health says ok)")
    err = LogUnavailableError(msg)
    err.__cause__ = exc
    return err


def uncertain(exc: BaseException) -> LogUnavailableError:
    """The 503 of a request whose record was written but whose fsync failed with ``exc``:
    the record may or may not survive (the page cache may still hold it)."""
    msg = (f"not acknowledged: the log's fsync failed ({exc}), so this event may or may "
           "not have been applied; read it back once GET /health says ok (the service "
           "reloads its state by itself once the disk accepts writes again)")
    err = LogUnavailableError(msg)
    err.__cause__ = exc
    return err


def fsync_path(path: Path) -> None:
    """fsync ``path``: a file's bytes, or a folder's renames and new entries."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _segment_name(first_seq: int) -> str:
    return f"{first_seq:020d}.log"


def segments(wal_dir: Path) -> list[tuple[int, Path]]:
    """(first seq, path) of every segment, in order."""
    out = []
    for p in wal_dir.glob("*.log"):
        try:
            out.append((int(p.stem), p))
        except ValueError:
            continue
    return sorted(out)


def _frame(payload: bytes) -> bytes:
    return _HEADER.pack(_MAGIC, len(payload), zlib.crc32(payload)) + payload


def _scan(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Records of one segment and the byte length of its valid prefix."""
    data = path.read_bytes()
    pos = 0
    out: list[dict[str, Any]] = []
    while pos + _HEADER.size <= len(data):
        magic, length, crc = _HEADER.unpack_from(data, pos)
        end = pos + _HEADER.size + length
        if magic != _MAGIC or end > len(data):
            break
        payload = data[pos + _HEADER.size:end]
        if zlib.crc32(payload) != crc:
            break
        try:
            rec = json.loads(payload)
        except ValueError:
            break
        out.append(rec)
        pos = end
    return out, pos


def read_records(wal_dir: Path, *, after: int, repair: bool = True
                 ) -> Iterator[dict[str, Any]]:
    """Records with ``seq > after``, in order; a torn tail of the last segment is cut.

    Raises
    ------
    WalCorruptError
        A gap in the sequence, or a damaged record that is followed by another segment.
    """
    segs = segments(wal_dir)
    expect: int | None = None
    for k, (_, path) in enumerate(segs):
        records, valid = _scan(path)
        size = path.stat().st_size
        if valid < size:
            if k != len(segs) - 1:
                msg = f"{path}: damaged record at byte {valid} in a segment that is not the last"
                raise WalCorruptError(msg, hint="restore DIR from a backup")
            if repair:
                with path.open("r+b") as fh:
                    fh.truncate(valid)
                    os.fsync(fh.fileno())
        for rec in records:
            seq = int(rec["seq"])
            if expect is not None and seq != expect:
                msg = f"{path}: log sequence jumps from {expect - 1} to {seq}"
                raise WalCorruptError(msg, hint="restore DIR from a backup")
            expect = seq + 1
            if seq > after:
                yield rec


class WriteAheadLog:
    """Appends records to the current segment; ``sync_threads`` threads fsync them in
    overlapping groups (see the module docstring).

    Parameters
    ----------
    wal_dir
        The segments' folder (created when missing).
    next_seq
        Sequence number of the next record.
    fsync
        False skips fsync (for measurements of what it costs; never for real use).
    sync_threads
        fsyncs that may run at once (>= 1).
    """

    def __init__(self, wal_dir: Path, *, next_seq: int, fsync: bool = True,
                 sync_threads: int = 2) -> None:
        self.dir = wal_dir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.next_seq = next_seq
        self.fsync_enabled = fsync
        self._io = threading.Lock()        # the file descriptor and its position
        counters = threading.Lock()
        self._cond = threading.Condition(counters)  # written/durable; durable waiters
        # the fsync threads wait for records on their own condition (same lock), so an
        # append wakes one idle fsync thread, never a waiter for durability
        self._work = threading.Condition(counters)
        self._idle = 0  # fsync threads waiting for records
        self._written = next_seq - 1
        self._durable = next_seq - 1
        self._claimed = next_seq - 1  # the highest record a running or finished fsync covers
        # (seq, future, its loop, the future's result once seq is durable)
        self._waiters: list[tuple[int, asyncio.Future[Any], asyncio.AbstractEventLoop,
                                  Any]] = []
        self._closed = False
        self._error: BaseException | None = None  # an fsync failed: nothing more is durable
        # a write failed: no more appends (records written before it are still fsynced
        # and acknowledged, a torn frame it left at the tail is cut by recovery)
        self._broken: BaseException | None = None
        self.bytes_written = 0
        self.fsyncs = 0
        existing = segments(self.dir)
        #: Bytes in every segment (kept up to date here, instead of a stat per segment).
        self.size = sum(p.stat().st_size for _, p in existing)
        # After a restart the (repaired) last segment takes the next records.
        first = existing[-1][1] if existing else self.dir / _segment_name(next_seq)
        self._fd = self._open_segment(first)
        self._threads = [threading.Thread(target=self._sync_loop, name=f"wal-fsync-{k}",
                                          daemon=True) for k in range(max(1, sync_threads))]
        for t in self._threads:
            t.start()

    # ------------------------------------------------------------------ files
    def _open_segment(self, path: Path) -> int:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        fsync_path(self.dir)
        self.path = path
        return fd

    def size_bytes(self) -> int:
        """Bytes in every segment."""
        return self.size

    @property
    def error(self) -> BaseException | None:
        """The write or fsync error that stopped the log, or None."""
        return self._error if self._error is not None else self._broken

    @property
    def fsync_error(self) -> BaseException | None:
        """The fsync error after which nothing is acknowledged, or None."""
        return self._error

    def fail(self, exc: BaseException) -> None:
        """Stop acknowledging: every waiting record is refused with ``exc`` (records
        written and not yet durable may or may not survive; none is answered)."""
        with self._cond:
            if self._error is None:
                self._error = exc
        self._fail_waiters(exc)

    def rotate(self) -> int:
        """Start a new segment at the next sequence number (returns it); older segments can
        be dropped once a snapshot covers them."""
        with self._io:
            old = self._fd
            if self.fsync_enabled:
                os.fsync(old)
            self._fd = self._open_segment(self.dir / _segment_name(self.next_seq))
            os.close(old)
            return self.next_seq

    def drop_through(self, seq: int) -> int:
        """Delete segments whose records all have ``seq`` or less; returns how many."""
        segs = segments(self.dir)
        n = removed = 0
        for (_first, path), (nxt, _) in itertools.pairwise(segs):
            if nxt - 1 <= seq and path != self.path:
                size = path.stat().st_size
                path.unlink()
                removed += size
                n += 1
        if n:
            with self._io:  # appends add to the size under the same lock
                self.size -= removed
            fsync_path(self.dir)
        return n

    # ------------------------------------------------------------------ appending
    def append(self, record: dict[str, Any]) -> int:
        """Write one record (``seq`` is set here) and return its sequence number.

        Not thread-safe with itself: the service appends from one thread, in event order.
        """
        if self.error is not None:
            raise unavailable(self.error)
        seq = self.next_seq
        record["seq"] = seq
        # orjson writes the shortest decimal that reads back as the same double, as the
        # json module does, so a replayed location or time is bit-identical
        frame = _frame(orjson.dumps(record, option=orjson.OPT_SERIALIZE_NUMPY))
        with self._io:
            try:
                written = os.write(self._fd, frame)
            except OSError as exc:  # a full disk: nothing is appended after this
                self._broken = exc
                raise
            if written != len(frame):  # a torn frame at the tail: recovery cuts it
                self.size += written
                short = OSError(f"short write to {self.path} ({written} of {len(frame)} "
                                "bytes: the disk is full?)")
                self._broken = short
                raise short
            self.size += len(frame)
            if faults.armed:
                faults.fault("after-write")
        self.next_seq = seq + 1
        self.bytes_written += len(frame)
        with self._cond:
            self._written = seq
            if self._idle:
                self._work.notify()
        return seq

    def wait_durable(self, seq: int) -> asyncio.Future[None]:
        """A future of the running loop, done when record ``seq`` is on disk."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        with self._cond:
            if self._durable >= seq:
                fut.set_result(None)
            elif self._error is not None:
                fut.set_exception(uncertain(self._error))
            else:
                self._waiters.append((seq, fut, loop, None))
                self._work.notify()
        return fut

    def resolve_when_durable(self, seq: int, fut: asyncio.Future[Any],
                             loop: asyncio.AbstractEventLoop, value: Any) -> None:
        """Give ``fut`` (of ``loop``; callable from any thread) the result ``value`` once
        record ``seq`` is on disk: the request path's one hand-off to the event loop,
        shared by every request an fsync covers."""
        with self._cond:
            error = self._error
            if error is None and self._durable < seq:
                self._waiters.append((seq, fut, loop, value))  # the append woke a thread
                return
        if error is not None:
            loop.call_soon_threadsafe(_reject, fut, uncertain(error))
        else:
            loop.call_soon_threadsafe(_resolve_all, [(fut, value)])

    def sync(self) -> None:
        """Block until everything written so far is on disk."""
        with self._cond:
            target = self._written
            while self._durable < target and self._error is None:
                self._cond.wait(0.05)

    def wait_durable_blocking(self, seq: int, timeout: float = 60.0) -> None:
        """Block the calling thread until record ``seq`` is on disk.

        Raises
        ------
        TimeoutError
            Not durable within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            self._work.notify()
            while self._durable < seq:
                if self._error is not None:
                    raise uncertain(self._error)
                left = deadline - time.monotonic()
                if left <= 0:
                    msg = f"record {seq} not durable after {timeout:g} s"
                    raise TimeoutError(msg)
                self._cond.wait(min(left, 0.05))

    @property
    def durable_seq(self) -> int:
        """The last sequence number known to be on disk."""
        return self._durable

    def _sync_loop(self) -> None:
        while True:
            with self._cond:
                while self._written <= self._claimed and not self._closed:
                    self._idle += 1
                    self._work.wait(0.5)
                    self._idle -= 1
                if self._closed and self._written <= self._claimed:
                    return
                target = self._claimed = self._written
            try:
                # A descriptor of its own: appends go on meanwhile (the log's write lock is
                # held for the dup only), and a rotate may close the segment's; a rotate
                # fsyncs the old segment before it switches, so records up to target are
                # on disk either way.
                with self._io:
                    fd = os.dup(self._fd)
                try:
                    if faults.armed:
                        faults.fault("before-fsync")
                    if self.fsync_enabled:
                        t0 = time.perf_counter()
                        os.fdatasync(fd)
                        self.last_fsync_s = time.perf_counter() - t0
                    if faults.armed:
                        faults.fault("after-fsync")
                finally:
                    os.close(fd)
            except OSError as exc:  # nothing after this is acknowledged
                self.fail(exc)
                return
            with self._cond:
                if self._error is not None:  # another fsync failed: never durable again
                    return
                self.fsyncs += 1
                if target <= self._durable:  # a later fsync returned first
                    continue
                self._durable = target
                done = [w for w in self._waiters if w[0] <= target]
                self._waiters = [w for w in self._waiters if w[0] > target]
                self._cond.notify_all()
            # one wake-up of each event loop per fsync, not one per waiting request
            by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any]]] = {}
            for _, fut, loop, value in done:
                by_loop.setdefault(loop, []).append((fut, value))
            for loop, futs in by_loop.items():
                loop.call_soon_threadsafe(_resolve_all, futs)

    last_fsync_s = 0.0

    def _fail_waiters(self, exc: BaseException) -> None:
        with self._cond:
            waiters, self._waiters = self._waiters, []
            self._cond.notify_all()
        err = uncertain(exc)
        for _, fut, loop, _value in waiters:
            loop.call_soon_threadsafe(_reject, fut, err)

    def close(self, *, flush: bool = True) -> None:
        """Flush (unless ``flush`` is False: a failed log being given up), stop the fsync
        threads and close the segment."""
        if self._fd < 0:
            return
        if flush:
            self.sync()
        else:
            self.fail(self._error or OSError("the log was closed"))
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            self._work.notify_all()
        for t in self._threads:
            t.join(timeout=5)
        with self._io:
            os.close(self._fd)
            self._fd = -1


def _resolve_all(futs: list[tuple[asyncio.Future[Any], Any]]) -> None:
    for fut, value in futs:
        if not fut.done():
            fut.set_result(value)


def _reject(fut: asyncio.Future[Any], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)
