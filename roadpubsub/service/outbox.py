"""The durable webhook outbox: deliveries queued per endpoint, fsynced before a publish answers.

Layout of the folder (the state folder's ``outbox/``):

- ``<index, 12 digits>.log`` segments of framed records, appended in order;
- ``dead.log``, the dead-letter record (same framing, never compacted);
- ``torn-<segment>-<offset>.bin``, the bytes of a torn tail cut at recovery (kept as evidence).

A frame is ``magic b"RPOX" + kind (1 byte) + payload length (4 bytes, big endian) + CRC32 of
the payload (4) + CRC32 of the 13 bytes before it (4)`` followed by the UTF-8 JSON payload.
The header has its own checksum so that a damaged length is told apart from a torn tail.
Kinds: ``C`` checkpoint (first record of every segment: the acknowledged position per
endpoint and the next position), ``D`` a batch of deliveries, ``A`` an acknowledgement
(endpoint, through position); in ``dead.log``: ``X`` deliveries given up, ``R`` dead letters
re-queued.
A queued delivery is stored as ``{"pos", "t" (queued at), "seq", "sub", "msg", "d", "s",
"url"}`` with integer ids; records written before the ids were stored as integers hold them
as decimal text, and are read the same (anything else in them is damage).

Every queued delivery gets a *position* (``pos``: 1, 2, 3, ... across the outbox), the order
it is sent in. A delivery's ``seq`` (the service's delivery sequence number, the id receivers
deduplicate on) is carried unchanged; a replayed dead letter keeps its ``seq`` and gets a new
``pos``. One endpoint (its URL) is acknowledged through a position: everything of that
endpoint at or below it is done (sent, or moved to ``dead.log``).

Recovery reads every segment in order. Only the last segment may end in an incomplete frame
(a header cut short, a payload shorter than its length, or zero bytes the file system left):
that write was never acknowledged, since :meth:`Outbox.append` returns after the fsync. Its
bytes are copied to a ``torn-*.bin`` file, then cut. Any other damage raises
:class:`OutboxDamagedError` naming the file and offset; nothing is deleted then.

Compaction: a new segment starts (with a checkpoint) when the current one exceeds
``segment_bytes``; the oldest segments are deleted once every delivery in them is
acknowledged, since the checkpoint of a later segment carries their acknowledgements.

Memory: each endpoint keeps at most ``memory_per_endpoint`` pending deliveries in memory;
the rest are read back from the segments when the in-memory ones are acknowledged.
Dead letters are kept in memory (they are few: an operator replays or ignores them).
"""

from __future__ import annotations

import errno
import os
import struct
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from roadpubsub.roadnet.errors import RoadPubSubError
from roadpubsub.roadnet.settings import DEFAULTS
from roadpubsub.service import faults

__all__ = ["Outbox", "OutboxDamagedError", "OutboxEntry", "Queued", "check_outbox"]

_MAGIC = b"RPOX"
_PRE = struct.Struct(">4scII")  # magic, kind, length, payload crc
_HEADER_SIZE = _PRE.size + 4
_DEAD = "dead.log"


class OutboxDamagedError(RoadPubSubError, RuntimeError):
    """An outbox file damaged somewhere other than an incomplete last frame."""

    hint = "keep the folder for inspection; move it aside to start with an empty outbox"


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    """One delivery to queue for a webhook.

    Attributes
    ----------
    seq
        The service's delivery sequence number (the id receivers deduplicate on).
    subscription_id, message_id
        The matched pair (64-bit integers, as in every other answer).
    distance, score
        Network distance in metres and the match score.
    url
        The webhook URL, already checked with ``check_webhook_url``: the endpoint key.
    """

    seq: int
    subscription_id: int
    message_id: int
    distance: float
    score: float
    url: str

    def delivery(self) -> dict[str, Any]:
        """The delivery object, as every other answer and push gives it (seq first)."""
        return {"seq": self.seq, "message_id": self.message_id,
                "subscription_id": self.subscription_id, "distance": self.distance,
                "score": self.score}


def _stored_id(raw: dict[str, Any], key: str) -> int:
    """An id of a stored entry: an integer, or (records written before the ids were stored
    as integers) its decimal text; anything else is damage, never guessed."""
    value = raw[key]
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    msg = f"outbox entry of seq {raw.get('seq')!r} holds {key}={value!r}, not an integer id"
    raise OutboxDamagedError(msg)


@dataclass(frozen=True, slots=True)
class Queued:
    """A queued delivery: the entry, its position in the outbox and when it was queued."""

    pos: int
    queued_at: float
    entry: OutboxEntry

    def to_json(self) -> dict[str, Any]:
        """The stored form (ids as JSON integers)."""
        e = self.entry
        return {"pos": self.pos, "t": self.queued_at, "seq": e.seq, "sub": e.subscription_id,
                "msg": e.message_id, "d": e.distance, "s": e.score, "url": e.url}

    @staticmethod
    def from_json(raw: dict[str, Any]) -> Queued:
        """Inverse of :meth:`to_json`; also reads the older form whose ids were text.

        Raises
        ------
        OutboxDamagedError
            A field is missing or of the wrong type (the frame's checksum held: written so).
        """
        try:
            entry = OutboxEntry(seq=int(raw["seq"]), subscription_id=_stored_id(raw, "sub"),
                                message_id=_stored_id(raw, "msg"), distance=float(raw["d"]),
                                score=float(raw["s"]), url=str(raw["url"]))
            return Queued(pos=int(raw["pos"]), queued_at=float(raw["t"]), entry=entry)
        except (KeyError, TypeError, ValueError) as exc:
            msg = f"outbox entry {raw!r:.200} is not a queued delivery: {exc!r}"
            raise OutboxDamagedError(msg) from exc


def _frame(kind: bytes, payload: dict[str, Any]) -> bytes:
    body = orjson.dumps(payload)
    pre = _PRE.pack(_MAGIC, kind, len(body), zlib.crc32(body))
    return pre + struct.pack(">I", zlib.crc32(pre)) + body


def _read_frames(path: Path, *, last: bool) -> tuple[list[tuple[bytes, dict[str, Any]]], int]:
    """Frames of ``path`` and the offset where valid data ends (its size unless torn)."""
    data = path.read_bytes()
    frames: list[tuple[bytes, dict[str, Any]]] = []
    offset = 0
    while offset < len(data):
        rest = len(data) - offset
        torn = rest < _HEADER_SIZE or not any(data[offset:])
        if not torn:
            magic, kind, length, crc = _PRE.unpack_from(data, offset)
            (head_crc,) = struct.unpack_from(">I", data, offset + _PRE.size)
            if magic != _MAGIC or head_crc != zlib.crc32(data[offset:offset + _PRE.size]):
                msg = f"outbox file {path} is damaged at offset {offset}: bad frame header"
                raise OutboxDamagedError(msg)
            torn = rest < _HEADER_SIZE + length
        if torn:
            if not last:
                msg = (f"outbox file {path} is damaged at offset {offset}: incomplete frame "
                       f"in a segment that is not the last")
                raise OutboxDamagedError(msg)
            return frames, offset
        body = data[offset + _HEADER_SIZE:offset + _HEADER_SIZE + length]
        if zlib.crc32(body) != crc:
            msg = f"outbox file {path} is damaged at offset {offset}: payload checksum mismatch"
            raise OutboxDamagedError(msg)
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            msg = f"outbox file {path} is damaged at offset {offset}: payload is not JSON"
            raise OutboxDamagedError(msg) from exc
        frames.append((kind, payload))
        offset += _HEADER_SIZE + length
    return frames, offset


def check_outbox(folder: Path) -> list[tuple[Path, str, str]]:
    """Check every file of an outbox folder as a start would read it; nothing is changed.

    Returns ``(path, status, detail)`` per file, status ``ok``, ``torn`` (an incomplete
    last frame of the last segment or of the dead letters, which a start cuts) or
    ``damaged`` (a start refuses the folder: :class:`OutboxDamagedError`).
    """
    found = sorted((int(p.stem), p) for p in folder.glob("*.log") if p.stem.isdigit())
    files = [(p, i == len(found) - 1, "webhook deliveries queued")
             for i, (_, p) in enumerate(found)]
    if (folder / _DEAD).exists():
        files.append((folder / _DEAD, True, "webhook dead letters"))
    out = []
    for path, last, what in files:
        try:
            frames, end = _read_frames(path, last=last)
        except OutboxDamagedError as exc:
            out.append((path, "damaged", str(exc)))
            continue
        size = path.stat().st_size
        if end < size:
            out.append((path, "torn", f"{what}: {len(frames)} records, an incomplete last "
                                      f"one of {size - end} bytes (a start cuts it)"))
        else:
            out.append((path, "ok", f"{what}: {len(frames)} records"))
    return out


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _cut_torn(path: Path, end: int) -> None:
    """Keep the torn bytes after ``end`` in a ``torn-*.bin`` file, then cut ``path`` there."""
    size = path.stat().st_size
    if end >= size:
        return
    evidence = path.with_name(f"torn-{path.stem}-{end}.bin")
    tmp = evidence.with_suffix(".tmp")
    with open(path, "rb") as src:
        src.seek(end)
        tmp.write_bytes(src.read())
    os.replace(tmp, evidence)
    with open(path, "r+b") as fh:
        fh.truncate(end)
        os.fsync(fh.fileno())
    _fsync_dir(path.parent)


class _Endpoint:
    """Pending deliveries of one endpoint: a bounded in-memory head, the rest on disk."""

    __slots__ = ("acked", "head", "loaded_through", "pending", "spill_segment")

    def __init__(self) -> None:
        self.acked = 0  # every position <= acked is done
        self.head: deque[Queued] = deque()
        self.loaded_through = 0  # highest position ever put in ``head``
        self.pending = 0  # pending deliveries, in memory and on disk
        self.spill_segment: int | None = None  # first segment holding unloaded ones


class Outbox:
    """A durable, per-endpoint queue of webhook deliveries (see the module docstring).

    Thread-safe: the service appends from its request path, the sender acknowledges from its
    own thread.

    Parameters
    ----------
    folder
        The outbox folder (created if absent); recovered at construction.
    segment_bytes
        A new segment starts once the current one is larger (bytes, >= 1).
    memory_per_endpoint
        Pending deliveries per endpoint held in memory, at most (>= 1).
    fsync
        Whether appends and acknowledgements fsync (tests of the logic may turn it off).

    Raises
    ------
    OutboxDamagedError
        A file is damaged other than by an incomplete last frame.
    """

    def __init__(self, folder: Path, *, segment_bytes: int = DEFAULTS.webhook_segment_bytes,
                 memory_per_endpoint: int = DEFAULTS.webhook_memory_per_endpoint,
                 fsync: bool = True) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._segment_bytes = max(1, int(segment_bytes))
        self._memory = max(1, int(memory_per_endpoint))
        self._fsync = fsync
        self._lock = threading.RLock()
        self._endpoints: dict[str, _Endpoint] = {}
        self._next_pos = 1
        self.high_seq = 0  # the highest delivery seq ever queued (where the feed resumes)
        # per segment index: endpoint -> highest position it holds (for compaction)
        self._segment_max: dict[int, dict[str, int]] = {}
        self._dead: dict[int, tuple[Queued, str, float]] = {}
        self.on_append: Callable[[set[str]], None] | None = None
        self._recover()
        self._dead_fh = open(self.folder / _DEAD, "ab")  # noqa: SIM115 - held open
        self._open_new_segment()

    # --- recovery ---------------------------------------------------------------------------
    def _segments(self) -> list[tuple[int, Path]]:
        found = []
        for path in self.folder.glob("*.log"):
            if path.stem.isdigit():
                found.append((int(path.stem), path))
        return sorted(found)

    def _recover(self) -> None:
        # Two passes so that memory stays bounded: acknowledgements first, then the entries
        # still pending go through the same bounded in-memory head as appends.
        segments = self._segments()
        acked: dict[str, int] = {}
        for i, (index, path) in enumerate(segments):
            last = i == len(segments) - 1
            frames, end = _read_frames(path, last=last)
            if last:
                _cut_torn(path, end)
            maxima = self._segment_max.setdefault(index, {})
            for kind, payload in frames:
                if kind == b"C":
                    self._next_pos = max(self._next_pos, int(payload["next_pos"]))
                    self.high_seq = max(self.high_seq, int(payload.get("high_seq", 0)))
                    for url, through in payload["acked"].items():
                        acked[url] = max(acked.get(url, 0), int(through))
                elif kind == b"D":
                    for raw in payload["entries"]:
                        pos, url = int(raw["pos"]), str(raw["url"])
                        self._next_pos = max(self._next_pos, pos + 1)
                        self.high_seq = max(self.high_seq, int(raw["seq"]))
                        maxima[url] = max(maxima.get(url, 0), pos)
                elif kind == b"A":
                    url = str(payload["url"])
                    acked[url] = max(acked.get(url, 0), int(payload["through"]))
                else:
                    msg = f"outbox file {path} holds an unknown record kind {kind!r}"
                    raise OutboxDamagedError(msg)
        for url, through in acked.items():
            self._endpoint(url).acked = through
        for index, path in segments:
            if not any(pos > acked.get(url, 0)
                       for url, pos in self._segment_max[index].items()):
                continue
            frames, _ = _read_frames(path, last=True)
            for kind, payload in frames:
                if kind != b"D":
                    continue
                for raw in payload["entries"]:
                    if int(raw["pos"]) > acked.get(str(raw["url"]), 0):
                        q = Queued.from_json(raw)
                        self._enqueue(self._endpoint(q.entry.url), q, index)
        dead_path = self.folder / _DEAD
        if dead_path.exists():
            frames, end = _read_frames(dead_path, last=True)
            _cut_torn(dead_path, end)
            for kind, payload in frames:
                if kind == b"X":
                    for raw in payload["entries"]:
                        q = Queued.from_json(raw)
                        self._dead[q.pos] = (q, str(payload["reason"]), float(payload["t"]))
                        self.high_seq = max(self.high_seq, q.entry.seq)
                        self._next_pos = max(self._next_pos, q.pos + 1)
                elif kind == b"R":
                    for pos in payload["ids"]:
                        self._dead.pop(int(pos), None)
                else:
                    msg = f"outbox file {dead_path} holds an unknown record kind {kind!r}"
                    raise OutboxDamagedError(msg)

    def _endpoint(self, url: str) -> _Endpoint:
        ep = self._endpoints.get(url)
        if ep is None:
            ep = self._endpoints[url] = _Endpoint()
        return ep

    def _enqueue(self, ep: _Endpoint, q: Queued, segment: int) -> None:
        ep.pending += 1
        if ep.spill_segment is None and len(ep.head) < self._memory:
            ep.head.append(q)
            ep.loaded_through = q.pos
        elif ep.spill_segment is None:
            ep.spill_segment = segment

    # --- writing ----------------------------------------------------------------------------
    def _open_new_segment(self) -> None:
        segments = self._segments()
        index = segments[-1][0] + 1 if segments else 1
        path = self.folder / f"{index:012d}.log"
        self._fh = open(path, "ab")  # noqa: SIM115 - held open
        self._index = index
        self._segment_max[index] = {}
        acked = {url: ep.acked for url, ep in self._endpoints.items() if ep.acked}
        self._write(self._fh, _frame(b"C", {"acked": acked, "next_pos": self._next_pos,
                                            "high_seq": self.high_seq}))
        if self._fsync:
            _fsync_dir(self.folder)

    def _write(self, fh: Any, frame: bytes) -> None:
        fh.write(frame)
        fh.flush()
        if self._fsync:
            os.fsync(fh.fileno())

    def append(self, entries: Sequence[OutboxEntry]) -> None:
        """Queue ``entries`` (in order) and return once they are durable (fsynced).

        The service calls this before answering the publish that matched them.
        """
        if not entries:
            return
        if faults.outbox_fails():  # a test hook: nothing is written
            msg = f"injected outbox write failure ({faults.FAIL_OUTBOX_ENV})"
            raise OSError(errno.EIO, msg)
        now = time.time()
        with self._lock:
            queued = [Queued(pos=self._next_pos + i, queued_at=now, entry=e)
                      for i, e in enumerate(entries)]
            self._write(self._fh, _frame(b"D", {"entries": [q.to_json() for q in queued]}))
            self._next_pos += len(queued)
            self.high_seq = max(self.high_seq, max(e.seq for e in entries))
            maxima = self._segment_max[self._index]
            for q in queued:
                url = q.entry.url
                maxima[url] = q.pos
                self._enqueue(self._endpoint(url), q, self._index)
            self._maybe_rotate()
            urls = {q.entry.url for q in queued}
        if self.on_append is not None:
            self.on_append(urls)

    def _maybe_rotate(self) -> None:
        if self._fh.tell() < self._segment_bytes:
            return
        self._fh.close()
        self._open_new_segment()
        self._compact()

    def _compact(self) -> None:
        """Delete the oldest segments whose deliveries are all acknowledged."""
        removed = False
        for index in sorted(self._segment_max):
            if index == self._index:
                break
            path = self.folder / f"{index:012d}.log"
            maxima = self._segment_max[index]
            if any(pos > self._endpoints[url].acked for url, pos in maxima.items()):
                break
            path.unlink()
            self._segment_max.pop(index, None)
            removed = True
        if removed and self._fsync:
            _fsync_dir(self.folder)

    def ack(self, url: str, through: int) -> None:
        """Mark every delivery of endpoint ``url`` at positions <= ``through`` as done."""
        with self._lock:
            ep = self._endpoint(url)
            if through <= ep.acked:
                return
            self._write(self._fh, _frame(b"A", {"url": url, "through": through}))
            ep.acked = through
            while ep.head and ep.head[0].pos <= through:
                ep.head.popleft()
                ep.pending -= 1
            self._refill(url, ep)
            self._maybe_rotate()
            self._compact()

    def dead(self, url: str, items: Sequence[Queued], reason: str) -> None:
        """Move ``items`` (the oldest pending of ``url``) to the dead-letter record, fsynced.

        Then acknowledges them, so a crash in between re-sends them (at least once).
        """
        if not items:
            return
        with self._lock:
            now = time.time()
            payload = {"entries": [q.to_json() for q in items], "reason": reason, "t": now}
            self._write(self._dead_fh, _frame(b"X", payload))
            for q in items:
                self._dead[q.pos] = (q, reason, now)
            self.ack(url, max(q.pos for q in items))

    def _refill(self, url: str, ep: _Endpoint) -> None:
        """Load the next pending deliveries of ``url`` from the segments into memory."""
        if ep.spill_segment is None or len(ep.head) >= self._memory // 2 + 1:
            return
        start = ep.spill_segment
        ep.spill_segment = None
        self._fh.flush()
        for index, path in self._segments():
            if index < start:
                continue
            frames, _ = _read_frames(path, last=index == self._index)
            for kind, payload in frames:
                if kind != b"D":
                    continue
                for raw in payload["entries"]:
                    if raw["url"] != url or int(raw["pos"]) <= ep.loaded_through:
                        continue
                    if len(ep.head) >= self._memory:
                        ep.spill_segment = index
                        return
                    q = Queued.from_json(raw)
                    ep.head.append(q)
                    ep.loaded_through = q.pos

    # --- reading ----------------------------------------------------------------------------
    def endpoints(self) -> list[str]:
        """Endpoints with pending deliveries."""
        with self._lock:
            return [url for url, ep in self._endpoints.items() if ep.pending]

    def peek(self, url: str, limit: int) -> list[Queued]:
        """The oldest pending deliveries of ``url`` (at most ``limit``), in position order."""
        with self._lock:
            ep = self._endpoints.get(url)
            if ep is None:
                return []
            self._refill(url, ep)
            return list(_take(ep.head, limit))

    def pending(self, url: str) -> int:
        """Pending deliveries of ``url`` (in memory and on disk)."""
        with self._lock:
            ep = self._endpoints.get(url)
            return ep.pending if ep is not None else 0

    def in_memory(self, url: str) -> int:
        """Pending deliveries of ``url`` held in memory (bounded by ``memory_per_endpoint``)."""
        with self._lock:
            ep = self._endpoints.get(url)
            return len(ep.head) if ep is not None else 0

    def oldest_queued_at(self, url: str) -> float | None:
        """When the oldest pending delivery of ``url`` was queued (Unix seconds), or None."""
        with self._lock:
            ep = self._endpoints.get(url)
            if ep is None or not ep.pending:
                return None
            self._refill(url, ep)
            return ep.head[0].queued_at if ep.head else None

    def dead_letters(self) -> list[dict[str, Any]]:
        """The dead letters, oldest position first: ``id`` (to replay), the delivery object
        (:meth:`OutboxEntry.delivery`), ``url``, ``queued_at``, ``reason`` and ``dead_at``."""
        with self._lock:
            rows = []
            for pos in sorted(self._dead):
                q, reason, when = self._dead[pos]
                rows.append({"id": q.pos, **q.entry.delivery(), "url": q.entry.url,
                             "queued_at": q.queued_at, "reason": reason, "dead_at": when})
            return rows

    def replay(self, ids: Sequence[int]) -> int:
        """Re-queue dead letters by ``id`` (same ``seq``, a new position); returns how many.

        Unknown ids are ignored. Queued first, then removed from the dead-letter record, so a
        crash in between leaves them both queued and listed (never lost).
        """
        with self._lock:
            chosen = [self._dead[int(i)][0] for i in dict.fromkeys(ids) if int(i) in self._dead]
            if not chosen:
                return 0
            self.append([q.entry for q in chosen])
            self._write(self._dead_fh, _frame(b"R", {"ids": [q.pos for q in chosen]}))
            for q in chosen:
                self._dead.pop(q.pos, None)
            return len(chosen)

    def close(self) -> None:
        """Close the files (every write is already durable)."""
        with self._lock:
            self._fh.close()
            self._dead_fh.close()


def _take(items: deque[Queued], limit: int) -> Iterator[Queued]:
    for i, q in enumerate(items):
        if i >= limit:
            return
        yield q
