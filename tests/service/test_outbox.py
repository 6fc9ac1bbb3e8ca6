"""The durable webhook outbox: recovery, acknowledgements, damage, compaction, bounded memory."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import orjson
import pytest

from roadpubsub.service.outbox import Outbox, OutboxDamagedError, OutboxEntry

A = "http://a.example/hook"
B = "http://b.example/hook"


def _entries(first: int, count: int, url: str = A) -> list[OutboxEntry]:
    return [OutboxEntry(seq=s, subscription_id=100 + s, message_id=2**40 + s, distance=1.5 * s,
                        score=0.5, url=url) for s in range(first, first + count)]


def _seqs(box: Outbox, url: str) -> list[int]:
    return [q.entry.seq for q in box.peek(url, 10_000)]


def test_recovery_rebuilds_pending_per_endpoint(tmp_path: Path) -> None:
    box = Outbox(tmp_path)
    box.append(_entries(1, 5, A) + _entries(6, 3, B))
    box.append(_entries(9, 2, A))
    first = box.peek(A, 3)
    box.ack(A, first[-1].pos)
    box.dead(B, box.peek(B, 1), "HTTP 410")
    # No close: a kill -9 leaves the files as they are; every call above was fsynced.
    again = Outbox(tmp_path)
    assert _seqs(again, A) == [4, 5, 9, 10]
    assert _seqs(again, B) == [7, 8]
    assert again.pending(A) == 4
    assert [row["seq"] for row in again.dead_letters()] == [6]
    assert again.dead_letters()[0]["reason"] == "HTTP 410"
    entry = again.peek(A, 1)[0].entry
    assert entry == _entries(4, 1)[0]


def test_replay_requeues_dead_letters_durably(tmp_path: Path) -> None:
    box = Outbox(tmp_path)
    box.append(_entries(1, 3))
    box.dead(A, box.peek(A, 2), "HTTP 404")
    ids = [row["id"] for row in box.dead_letters()]
    assert box.replay([*ids[:1], 999]) == 1
    again = Outbox(tmp_path)
    assert _seqs(again, A) == [3, 1]  # the replayed one keeps its seq, queued after
    assert [row["seq"] for row in again.dead_letters()] == [2]


def test_flipped_byte_in_the_middle_is_refused_with_one_line(tmp_path: Path) -> None:
    box = Outbox(tmp_path)
    for i in range(5):
        box.append(_entries(1 + 10 * i, 10))
    box.close()
    (segment,) = sorted(tmp_path.glob("0*.log"))
    data = bytearray(segment.read_bytes())
    middle = len(data) // 2
    data[middle] ^= 0x40
    segment.write_bytes(bytes(data))
    with pytest.raises(OutboxDamagedError) as caught:
        Outbox(tmp_path)
    message = str(caught.value)
    assert "\n" not in message
    assert str(segment) in message and "offset" in message
    assert segment.exists() and segment.read_bytes() == bytes(data)  # nothing deleted or cut


@pytest.mark.parametrize("cut", [3, 15, 40])
def test_torn_tail_is_accepted_and_kept_as_evidence(tmp_path: Path, cut: int) -> None:
    box = Outbox(tmp_path)
    box.append(_entries(1, 4))
    box.append(_entries(5, 4))
    box.close()
    (segment,) = sorted(tmp_path.glob("0*.log"))
    full = segment.read_bytes()
    box = Outbox(tmp_path)  # a second segment: the torn one must be the last
    box.close()
    for extra in sorted(tmp_path.glob("0*.log"))[1:]:
        extra.unlink()
    # The last append cut short: a header (3, 15 bytes) or a payload (40 bytes) incomplete.
    last_frame_start = len(full) - len(full.split(b"RPOX")[-1]) - 4
    segment.write_bytes(full[:last_frame_start + cut])
    again = Outbox(tmp_path)
    assert _seqs(again, A) == [1, 2, 3, 4]
    torn = list(tmp_path.glob("torn-*.bin"))
    assert len(torn) == 1 and torn[0].read_bytes() == full[last_frame_start:last_frame_start + cut]
    again.append(_entries(9, 1))
    assert _seqs(Outbox(tmp_path), A) == [1, 2, 3, 4, 9]


def test_torn_frame_in_an_earlier_segment_is_damage(tmp_path: Path) -> None:
    box = Outbox(tmp_path)
    box.append(_entries(1, 4))
    box.close()
    (segment,) = sorted(tmp_path.glob("0*.log"))
    segment.write_bytes(segment.read_bytes()[:-5])
    Outbox(tmp_path).close()  # cuts it (last segment) and starts a second one
    with open(segment, "ab") as fh:  # damage appearing later in a non-last segment
        fh.write(b"RPO")
    with pytest.raises(OutboxDamagedError, match="not the last"):
        Outbox(tmp_path)


def test_compaction_deletes_fully_acknowledged_segments(tmp_path: Path) -> None:
    box = Outbox(tmp_path, segment_bytes=600)
    for i in range(20):
        box.append(_entries(1 + 3 * i, 3, A if i % 2 else B))
    assert len(list(tmp_path.glob("0*.log"))) > 5
    for url in (A, B):
        while box.pending(url) > 2:
            box.ack(url, box.peek(url, 4)[-1].pos)
    remaining = sorted(tmp_path.glob("0*.log"))
    assert len(remaining) <= 3
    again = Outbox(tmp_path, segment_bytes=600)
    assert _seqs(again, A) == [59, 60]
    assert _seqs(again, B) == [56, 57]


def test_memory_per_endpoint_is_bounded_and_the_rest_read_back(tmp_path: Path) -> None:
    box = Outbox(tmp_path, memory_per_endpoint=4, segment_bytes=2_000)
    for i in range(30):
        box.append(_entries(1 + 3 * i, 3))
    assert box.in_memory(A) == 4 and box.pending(A) == 90
    box.close()
    box = Outbox(tmp_path, memory_per_endpoint=4, segment_bytes=2_000)  # recovery: bounded too
    assert box.in_memory(A) == 4 and box.pending(A) == 90
    seen: list[int] = []
    while box.pending(A):
        batch = box.peek(A, 3)
        assert box.in_memory(A) <= 4
        seen += [q.entry.seq for q in batch]
        box.ack(A, batch[-1].pos)
    assert seen == list(range(1, 91))
    again = Outbox(tmp_path, memory_per_endpoint=4)
    assert again.pending(A) == 0


def _old_frame(kind: bytes, payload: dict[str, object]) -> bytes:
    """A frame as the module docstring describes it (written by hand: an older writer)."""
    body = orjson.dumps(payload)
    pre = struct.pack(">4scII", b"RPOX", kind, len(body), zlib.crc32(body))
    return pre + struct.pack(">I", zlib.crc32(pre)) + body


def _old_entry(pos: int, seq: int, sub: object, msg: object) -> dict[str, object]:
    return {"pos": pos, "t": 1.0e9, "seq": seq, "sub": sub, "msg": msg, "d": 2.5, "s": 0.5,
            "url": A}


def test_records_with_text_ids_of_older_writers_are_read_as_integers(tmp_path: Path) -> None:
    # Before the ids were stored as integers the feeder wrote them as decimal text.
    (tmp_path / "000000000001.log").write_bytes(
        _old_frame(b"C", {"acked": {}, "next_pos": 1, "high_seq": 0})
        + _old_frame(b"D", {"entries": [_old_entry(1, 7, "12", "900000000001"),
                                        _old_entry(2, 8, "-3", "5")]}))
    (tmp_path / "dead.log").write_bytes(_old_frame(b"X", {
        "entries": [_old_entry(3, 6, "4", "77")], "reason": "HTTP 404", "t": 2.0e9}))
    box = Outbox(tmp_path)
    assert [q.entry.delivery() for q in box.peek(A, 10)] == [
        {"seq": 7, "message_id": 900000000001, "subscription_id": 12, "distance": 2.5,
         "score": 0.5},
        {"seq": 8, "message_id": 5, "subscription_id": -3, "distance": 2.5, "score": 0.5}]
    (letter,) = box.dead_letters()
    assert {k: letter[k] for k in ("id", "seq", "message_id", "subscription_id", "url")} == {
        "id": 3, "seq": 6, "message_id": 77, "subscription_id": 4, "url": A}
    box.append(_entries(9, 1))  # new records next to old ones: integers
    box.close()
    again = Outbox(tmp_path)
    assert [q.entry.subscription_id for q in again.peek(A, 10)] == [12, -3, 109]


def test_a_record_with_an_id_that_is_not_an_integer_is_damage(tmp_path: Path) -> None:
    (tmp_path / "000000000001.log").write_bytes(
        _old_frame(b"C", {"acked": {}, "next_pos": 1, "high_seq": 0})
        + _old_frame(b"D", {"entries": [_old_entry(1, 7, "s1", "m1")]}))
    with pytest.raises(OutboxDamagedError, match="'s1', not an integer id"):
        Outbox(tmp_path)
