"""The write-ahead log of the live service: framed JSON records, group-committed fsyncs.

Layout: ``DIR/wal/<first seq, 20 digits>.log`` segments. A frame is ``b"S"``, a type
(record, segment header, segment footer), the payload's length (4 bytes, little endian),
a crc32 of those six bytes, a crc32 of the header and the payload, then the payload (UTF-8
JSON; a record holds at least ``seq``, 1, 2, 3, ... with no gap, and ``op``). A segment
starts with its header record (``first_seq``; created under a temporary name, fsynced and
renamed) and, once rotated, ends with a footer naming the next segment, which exists
durably before the footer is written. Folders of older versions hold segments of the old
framing (``b"R"``, length, crc32 of the payload only), which are still read.

Recovery never guesses (:func:`recover_log`): an incomplete last frame of the newest
segment (its header or payload running past the end of the file) was never acknowledged,
because an answer waits until an fsync covering its record has returned and fsyncs cover
a prefix of the file; it is cut, and reported. Any other damage (a checksum mismatch in a
complete frame, a bad header, zeros, a sequence gap, a missing or empty segment, a segment
cut short before its footer) raises :class:`WalCorruptError` naming the file, the offset
and the readable records that follow, and changes nothing.

Group commit: :meth:`WriteAheadLog.append` writes the record (no fsync) and returns its
sequence number; :meth:`WriteAheadLog.when_durable` hands the caller's value to its sink
once one fsync issued after the write has returned. A few threads issue fsyncs,
overlapping: a record written while one fsync runs starts the next one at once on
another thread instead of waiting for the running one to return, and records written
while all of them run share the next. An fsync covers every write that returned before
it started, so whichever returns, the records up to its start are durable; with one
thread a record waited 1.5 fsyncs on average (the rest of the running one, then its
own), which bounds closed-loop clients.
The kernel joins overlapping fdatasyncs of one file into its journal commits (on this
machine's ext4: 180 fsyncs/s from one thread, 1,600 from two). Two threads: 8 closed-loop
writers had a median wait of 3 ms against 6.5-25 ms with one; three or four threads
did worse again (more wake-ups competing for the GIL).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from roadpubsub.index.events import RequestError
from roadpubsub.service import faults
from roadpubsub.service.integrity import StateDamageError

__all__ = [
    "LogRecovery",
    "LogUnavailableError",
    "SegmentScan",
    "Sink",
    "WalCorruptError",
    "WriteAheadLog",
    "check_log",
    "create_segment",
    "fsync_path",
    "read_records",
    "recover_log",
    "scan_segment",
    "segment_name",
    "segments",
    "unavailable",
    "uncertain",
]

#: Told that records are durable: ``sink(values, None)`` with the values of the waiters an
#: fsync covers, or ``sink(values, error)`` when the log failed (see
#: :meth:`WriteAheadLog.when_durable`). Called from the log's threads: it must not block.
Sink = Callable[[list[Any], "BaseException | None"], None]

# Frame (format 2): magic b"S", type (1 byte), payload length (4 bytes), crc32 of those six
# bytes, crc32 of the ten header bytes and the payload; then the payload. The header's own
# checksum makes a damaged length a damaged header, never something that looks torn.
_HEAD = struct.Struct("<cBI")
_FRAME = struct.Struct("<cBIII")
_MAGIC2 = b"S"
REC, SEG_HEADER, SEG_FOOTER = 1, 2, 3
# The framing of folders made before format 2: b"R", length, crc32 of the payload.
_HEADER = struct.Struct("<cII")
_MAGIC = b"R"
_MAX_PAYLOAD = 1 << 31


class WalCorruptError(StateDamageError):
    """A log segment that cannot be read past a point that is not its torn tail."""


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


def segment_name(first_seq: int) -> str:
    """File name of the segment whose first record is ``first_seq``."""
    return f"{first_seq:020d}.log"


_segment_name = segment_name


def segments(wal_dir: Path) -> list[tuple[int, Path]]:
    """(first seq, path) of every segment, in order."""
    out = []
    for p in wal_dir.glob("*.log"):
        try:
            out.append((int(p.stem), p))
        except ValueError:
            continue
    return sorted(out)


def _frame2(kind: int, payload: bytes) -> bytes:
    head = _HEAD.pack(_MAGIC2, kind, len(payload))
    hcrc = zlib.crc32(head)
    crc = zlib.crc32(payload, zlib.crc32(head + struct.pack("<I", hcrc)))
    return _FRAME.pack(_MAGIC2, kind, len(payload), hcrc, crc) + payload


def _frame(payload: bytes) -> bytes:
    return _frame2(REC, payload)


def create_segment(wal_dir: Path, first_seq: int) -> Path:
    """Create durably the segment starting at ``first_seq``: its header record, written
    under a temporary name, fsynced and renamed (an empty segment is always damage)."""
    target = wal_dir / segment_name(first_seq)
    tmp = wal_dir / f".{target.name}.tmp"
    with tmp.open("wb") as fh:
        fh.write(_frame2(SEG_HEADER, orjson.dumps({"first_seq": first_seq, "format": 2})))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, target)
    fsync_path(wal_dir)
    return target


@dataclass
class SegmentScan:
    """What one segment holds, read without changing it.

    ``damage`` is (offset, what) of the first damaged frame; ``after_damage`` the readable
    records found past it (by resynchronising on valid frames); ``torn`` is (offset, bytes)
    of an incomplete last frame.
    """

    path: Path
    size: int
    framing: int  # 2, 1 (the old framing), 0 (empty file)
    first_seq: int | None = None  # from the header record
    records: list[tuple[int, dict[str, Any]]] = field(default_factory=list)  # (offset, rec)
    footer: dict[str, Any] | None = None
    footer_offset: int | None = None
    damage: tuple[int, str] | None = None
    after_damage: list[dict[str, Any]] = field(default_factory=list)
    torn: tuple[int, int] | None = None

    @property
    def seqs(self) -> tuple[int, int] | None:
        if not self.records:
            return None
        return int(self.records[0][1]["seq"]), int(self.records[-1][1]["seq"])


def _parse2(data: bytes, pos: int) -> tuple[str, int, int, bytes]:
    """('ok' | 'torn' | a damage description, type, end, payload) of the frame at pos."""
    rem = len(data) - pos
    if data[pos:pos + 1] != _MAGIC2:
        return "bad frame header (no frame starts here)", 0, pos, b""
    if rem < _FRAME.size:
        return "torn", 0, len(data), b""
    _, kind, length, hcrc, crc = _FRAME.unpack_from(data, pos)
    if zlib.crc32(data[pos:pos + _HEAD.size]) != hcrc or kind not in (REC, SEG_HEADER,
                                                                      SEG_FOOTER):
        return "bad frame header (its checksum does not match)", kind, pos, b""
    end = pos + _FRAME.size + length
    if end > len(data):
        return "torn", kind, len(data), b""
    payload = data[pos + _FRAME.size:end]
    if zlib.crc32(payload, zlib.crc32(data[pos:pos + _HEAD.size + 4])) != crc:
        return "checksum mismatch", kind, end, payload
    return "ok", kind, end, payload


def _resync2(data: bytes, pos: int) -> list[dict[str, Any]]:
    """Readable records after damage at ``pos``: every later position that starts a valid
    frame (what a repair would lose, counted for the message)."""
    out: list[dict[str, Any]] = []
    pos = data.find(_MAGIC2, pos + 1)
    while pos != -1:
        state, kind, end, payload = _parse2(data, pos)
        if state == "ok":
            if kind == REC:
                with contextlib.suppress(ValueError):
                    out.append(orjson.loads(payload))
            pos = end
            if pos >= len(data) or data[pos:pos + 1] != _MAGIC2:
                pos = data.find(_MAGIC2, pos + 1) if pos < len(data) else -1
        else:
            pos = data.find(_MAGIC2, pos + 1)
    return out


def scan_segment(path: Path) -> SegmentScan:
    """Read one segment strictly (see :class:`SegmentScan`); nothing is changed."""
    data = path.read_bytes()
    if not data:
        return SegmentScan(path, 0, 0)
    if data[:1] == _MAGIC:
        return _scan1(path, data)
    scan = SegmentScan(path, len(data), 2)
    pos = 0
    expect: int | None = None
    while pos < len(data):
        state, kind, end, payload = _parse2(data, pos)
        if state == "torn":
            scan.torn = (pos, len(data) - pos)
            break
        problem = None if state == "ok" else state
        rec: dict[str, Any] | None = None
        if problem is None:
            try:
                rec = orjson.loads(payload)
            except ValueError:
                problem = "unreadable record (its checksum matches)"
        if problem is None and rec is not None:
            if pos == 0 and kind != SEG_HEADER:
                problem = "no segment header"
            elif kind == SEG_HEADER:
                if pos != 0:
                    problem = "a segment header inside the segment"
                else:
                    scan.first_seq = expect = int(rec["first_seq"])
            elif scan.footer is not None:
                problem = "data after the segment's footer"
            elif kind == SEG_FOOTER:
                scan.footer = rec
                scan.footer_offset = pos
                if int(rec.get("next_seq", -1)) != expect:
                    problem = (f"the footer names seq {rec.get('next_seq')} next where "
                               f"{expect} follows")
            else:
                seq = int(rec.get("seq", -1))
                if seq != expect:
                    problem = f"sequence gap: seq {seq} where {expect} follows"
                else:
                    scan.records.append((pos, rec))
                    expect = seq + 1
        if problem is not None:
            scan.damage = (pos, problem)
            scan.after_damage = _resync2(data, pos)
            break
        pos = end
    return scan


def _scan1(path: Path, data: bytes) -> SegmentScan:
    """A segment of the old framing (crc32 of the payload only)."""
    scan = SegmentScan(path, len(data), 1)
    pos = 0
    expect: int | None = None
    while pos < len(data):
        if len(data) - pos < _HEADER.size:
            if data[pos:pos + 1] == _MAGIC:
                scan.torn = (pos, len(data) - pos)
            else:
                scan.damage = (pos, "bad frame header")
            break
        magic, length, crc = _HEADER.unpack_from(data, pos)
        end = pos + _HEADER.size + length
        if magic != _MAGIC:
            scan.damage = (pos, "bad frame header")
            break
        if end > len(data):
            scan.torn = (pos, len(data) - pos)
            break
        payload = data[pos + _HEADER.size:end]
        try:
            if zlib.crc32(payload) != crc:
                raise ValueError
            rec = orjson.loads(payload)
        except ValueError:
            scan.damage = (pos, "checksum mismatch")
            break
        seq = int(rec["seq"])
        if expect is not None and seq != expect:
            scan.damage = (pos, f"sequence gap: seq {seq} where {expect} follows")
            break
        if scan.first_seq is None:
            scan.first_seq = seq
        scan.records.append((pos, rec))
        expect = seq + 1
        pos = end
    return scan


def _span(recs: list[dict[str, Any]]) -> str:
    seqs = sorted(int(r["seq"]) for r in recs if isinstance(r.get("seq"), int))
    if not seqs:
        return "no readable record follows it"
    return (f"{len(seqs):,} readable record{'s' if len(seqs) != 1 else ''} "
            f"(seq {seqs[0]}-{seqs[-1]}) follow it and would be lost")


@dataclass
class LogRecovery:
    """The log after the snapshot: its records, the last seq, and the torn tail cut (or
    that would be cut) from the newest segment."""

    records: list[dict[str, Any]]
    last_seq: int
    torn_bytes: int = 0
    torn_path: Path | None = None
    torn_offset: int = 0
    scans: list[SegmentScan] = field(default_factory=list)

    def torn_message(self) -> str:
        """One line about the torn tail (empty when there was none)."""
        if not self.torn_bytes:
            return ""
        return (f"{self.torn_path}: cut an incomplete last record at byte "
                f"{self.torn_offset:,} ({self.torn_bytes:,} bytes dropped; it was never "
                "acknowledged)")


def check_log(wal_dir: Path, *, after: int, named: str | None = None,
              scans: dict[Path, SegmentScan] | None = None) -> LogRecovery:
    """Read the log strictly from the segment holding ``after + 1`` (``named``: the
    segment the manifest says starts there) without changing anything.

    Raises
    ------
    WalCorruptError
        Damage anywhere but an incomplete last frame of the newest segment (the message
        names the file, the offset and what would be lost).
    """
    segs = segments(wal_dir)
    scans = {} if scans is None else scans

    def scan(p: Path) -> SegmentScan:
        if p not in scans:
            scans[p] = scan_segment(p)
        return scans[p]

    def lost_after(k: int, extra: list[dict[str, Any]]) -> str:
        recs = list(extra)
        for _, p in segs[k + 1:]:
            s = scan(p)
            recs += [r for _, r in s.records] + s.after_damage
        return _span(recs)

    hint = None
    if named is not None and not (wal_dir / named).exists():
        k = next((i for i, (f, _) in enumerate(segs) if f > after), len(segs)) - 1
        msg = (f"{wal_dir / named}: missing log segment (the manifest names it as the one "
               f"after seq {after}); {lost_after(k, [])}")
        raise WalCorruptError(msg, path=wal_dir / named, offset=0, hint=hint)
    start = 0
    for i, (first, _) in enumerate(segs):
        if first <= after + 1:
            start = i
    chosen = segs[start:]
    out = LogRecovery([], after)
    expect: int | None = None
    for k, (first, path) in enumerate(chosen):
        s = scan(path)
        out.scans.append(s)
        newest = k == len(chosen) - 1
        kk = start + k
        if s.damage is not None:
            off, what = s.damage
            msg = f"{path}: {what} at byte {off:,}; {lost_after(kk, s.after_damage)}"
            raise WalCorruptError(msg, path=path, offset=off, hint=hint)
        if s.framing == 0:
            if newest and named is None:
                continue  # an older service's fresh segment
            msg = f"{path}: empty log segment (its header is missing); {lost_after(kk, [])}"
            raise WalCorruptError(msg, path=path, offset=0, hint=hint)
        if s.framing == 2 and s.first_seq != first:
            msg = (f"{path}: its header says it starts at seq {s.first_seq}, its name "
                   f"{first}; {lost_after(kk, [r for _, r in s.records])}")
            raise WalCorruptError(msg, path=path, offset=0, hint=hint)
        begin = s.first_seq if s.first_seq is not None else first
        if expect is not None and begin != expect and not (s.framing == 1 and not s.records):
            msg = (f"{path}: sequence gap: the segment starts at seq {begin} where "
                   f"{expect} follows; {lost_after(kk, [r for _, r in s.records])}")
            raise WalCorruptError(msg, path=path, offset=0, hint=hint)
        if k == 0 and begin > after + 1:
            msg = (f"{path}: sequence gap: the log starts at seq {begin} where {after + 1} "
                   f"follows the snapshot; {lost_after(kk, [r for _, r in s.records])}")
            raise WalCorruptError(msg, path=path, offset=0, hint=hint)
        if s.torn is not None and not newest:
            off, _ = s.torn
            msg = (f"{path}: incomplete record at byte {off:,} in a segment that is not the "
                   f"newest; {lost_after(kk, [])}")
            raise WalCorruptError(msg, path=path, offset=off, hint=hint)
        for _, rec in s.records:
            seq = int(rec["seq"])
            if seq > after:
                out.records.append(rec)
        if s.records:
            expect = int(s.records[-1][1]["seq"]) + 1
        elif s.first_seq is not None:
            expect = s.first_seq
        if s.framing == 2:
            if newest and s.footer is not None:
                nxt = wal_dir / str(s.footer.get("next"))
                msg = (f"{nxt}: missing log segment (the footer of {path.name} names it); "
                       "the records it held are lost")
                raise WalCorruptError(msg, path=nxt, offset=0, hint=hint)
            if not newest:
                nxt_path = chosen[k + 1][1]
                if s.footer is not None and s.footer.get("next") != nxt_path.name:
                    nxt = wal_dir / str(s.footer.get("next"))
                    msg = (f"{nxt}: missing log segment (the footer of {path.name} names "
                           f"it); {lost_after(kk, [])}")
                    raise WalCorruptError(msg, path=nxt, offset=0, hint=hint)
                if s.footer is None:
                    # a crash while rotating leaves the footer out, nothing else: the next
                    # segment must go on where this one ends, or records were cut off
                    follower = scan(nxt_path)
                    if follower.first_seq is not None and follower.first_seq != expect:
                        off = s.size
                        msg = (f"{path}: the segment ends at byte {off:,} without its "
                               f"footer (cut short); {lost_after(kk, [])}")
                        raise WalCorruptError(msg, path=path, offset=off, hint=hint)
        if newest and s.torn is not None:
            out.torn_offset, out.torn_bytes = s.torn
            out.torn_path = path
    last = out.records[-1]["seq"] if out.records else after
    out.last_seq = max(int(last), after)
    return out


def recover_log(wal_dir: Path, *, after: int, named: str | None = None,
                truncate: bool = True) -> LogRecovery:
    """The records after ``after``; an incomplete last frame of the newest segment is
    cut when ``truncate`` (nothing else is ever changed).

    Raises
    ------
    WalCorruptError
        See :func:`check_log` (a :class:`~roadpubsub.service.integrity.StateDamageError`).
    """
    out = check_log(wal_dir, after=after, named=named)
    if truncate and out.torn_bytes and out.torn_path is not None:
        with out.torn_path.open("r+b") as fh:
            fh.truncate(out.torn_offset)
            os.fsync(fh.fileno())
    return out


def read_records(wal_dir: Path, *, after: int, repair: bool = True
                 ) -> Iterator[dict[str, Any]]:
    """Records with ``seq > after``, in order (:func:`recover_log`; a torn tail of the
    newest segment is cut when ``repair``).

    Raises
    ------
    WalCorruptError
        Damage that is not a torn tail.
    """
    yield from recover_log(wal_dir, after=after, truncate=repair).records


def _framing_of(path: Path) -> int:
    with path.open("rb") as fh:
        head = fh.read(1)
    return 2 if head == _MAGIC2 else 1 if head == _MAGIC else 0


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
        # (seq, the sink told once seq is durable, the value handed to it)
        self._waiters: list[tuple[int, Sink, Any]] = []
        self._closed = False
        self._error: BaseException | None = None  # an fsync failed: nothing more is durable
        # a write failed: no more appends (records written before it are still fsynced
        # and acknowledged, a torn frame it left at the tail is cut by recovery)
        self._broken: BaseException | None = None
        self.bytes_written = 0
        self.fsyncs = 0
        for tmp in self.dir.glob(".*.log.tmp"):  # a segment being created at a crash
            tmp.unlink(missing_ok=True)
        existing = segments(self.dir)
        # After a restart the (recovered) last segment takes the next records, unless it
        # has the old framing (or none): new records then start a new segment.
        last = existing[-1][1] if existing else None
        if last is None or _framing_of(last) != 2:
            last = create_segment(self.dir, next_seq)
        self._fd = self._open_segment(last)
        #: Bytes in every segment (kept up to date here, instead of a stat per segment).
        self.size = sum(p.stat().st_size for _, p in segments(self.dir))
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
            if self.path.name == segment_name(self.next_seq):
                return self.next_seq  # nothing written since the last rotation
            # The new segment exists durably (with its header) before the old one's footer
            # names it, so a footer never names a segment that a crash left out.
            path = create_segment(self.dir, self.next_seq)
            old = self._fd
            footer = _frame2(SEG_FOOTER, orjson.dumps({"next": path.name,
                                                       "next_seq": self.next_seq}))
            if os.write(old, footer) != len(footer):
                msg = f"short write of the footer of {self.path}"
                raise OSError(msg)
            if self.fsync_enabled:
                os.fsync(old)
            self._fd = self._open_segment(path)
            os.close(old)
            self.size += len(footer) + path.stat().st_size  # the footer, the new header
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

    def when_durable(self, seq: int, sink: Sink, value: Any) -> None:
        """Hand ``value`` to ``sink`` once record ``seq`` is on disk (callable from any
        thread; ``sink`` is called from an fsync thread, or from this one when the record
        is durable already): ``sink([value, ...], None)``, or ``sink([...], error)`` when
        the log failed first. One call per sink per fsync, with every value it covers:
        the request path's one hand-off per fsync, whoever waits
        (:mod:`roadpubsub.service.dispatch`)."""
        with self._cond:
            error = self._error
            if error is None and self._durable < seq:
                self._waiters.append((seq, sink, value))  # the append woke a thread
                return
        sink([value], None if error is None else uncertain(error))

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
            _tell(done, None)  # one call of each sink per fsync, not one per waiter

    last_fsync_s = 0.0

    def _fail_waiters(self, exc: BaseException) -> None:
        with self._cond:
            waiters, self._waiters = self._waiters, []
            self._cond.notify_all()
        _tell(waiters, uncertain(exc))

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


def _tell(waiters: list[tuple[int, Sink, Any]], error: BaseException | None) -> None:
    by_sink: dict[Sink, list[Any]] = {}
    for _, sink, value in waiters:
        by_sink.setdefault(sink, []).append(value)
    for sink, values in by_sink.items():
        sink(values, error)
