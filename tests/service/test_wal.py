"""The write-ahead log on its own: framing, torn tails, damage, rotation, group commit."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from roadpubsub.service.dispatch import durable
from roadpubsub.service.wal import (
    WalCorruptError,
    WriteAheadLog,
    create_segment,
    read_records,
    recover_log,
    segments,
)


def _write(folder: Path, n: int, *, start: int = 1) -> WriteAheadLog:
    wal = WriteAheadLog(folder, next_seq=start)
    for i in range(n):
        assert wal.append({"op": "move", "id": [start + i], "pad": "x" * (i % 7)}) == start + i
    return wal


def test_records_round_trip_and_wait_durable(tmp_path: Path) -> None:
    wal = _write(tmp_path, 50)

    async def wait() -> None:
        await asyncio.wait_for(durable(wal, 50), 10)

    asyncio.run(wait())
    assert wal.durable_seq == 50 and wal.fsyncs >= 1
    wal.close()
    recs = list(read_records(tmp_path, after=10))
    assert [r["seq"] for r in recs] == list(range(11, 51))
    assert recs[0]["id"] == [11]


@pytest.mark.parametrize("cut", [1, 5, 9, 20])
def test_a_torn_tail_is_cut_and_appending_resumes(tmp_path: Path, cut: int) -> None:
    _write(tmp_path, 10).close()
    (_, path), = segments(tmp_path)
    size = path.stat().st_size
    with path.open("r+b") as fh:  # a crash in the middle of the last record
        fh.truncate(size - cut)
    recs = list(read_records(tmp_path, after=0))
    assert [r["seq"] for r in recs] == list(range(1, 10))
    assert path.stat().st_size < size - cut + 1  # cut back to the last whole record
    wal = WriteAheadLog(tmp_path, next_seq=10)
    assert wal.append({"op": "move", "id": [10]}) == 10
    wal.close()
    assert [r["seq"] for r in read_records(tmp_path, after=0)] == list(range(1, 11))


def test_a_flipped_byte_stops_the_log_and_changes_nothing(tmp_path: Path) -> None:
    _write(tmp_path, 10).close()
    (_, path), = segments(tmp_path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(WalCorruptError, match=r"checksum mismatch at byte \d+; \d+ readable"):
        list(read_records(tmp_path, after=0))
    assert path.read_bytes() == bytes(data)


def test_damage_before_the_last_segment_is_an_error(tmp_path: Path) -> None:
    wal = _write(tmp_path, 5)
    wal.rotate()
    for i in range(6, 9):
        wal.append({"op": "move", "id": [i]})
    wal.close()
    first = segments(tmp_path)[0][1]
    with first.open("r+b") as fh:
        fh.truncate(first.stat().st_size - 3)
    with pytest.raises(WalCorruptError, match="not the newest"):
        list(read_records(tmp_path, after=0))


def test_rotation_and_dropping_covered_segments(tmp_path: Path) -> None:
    wal = _write(tmp_path, 5)
    assert wal.rotate() == 6
    wal.append({"op": "move", "id": [6]})
    assert len(segments(tmp_path)) == 2
    assert wal.drop_through(4) == 0  # segment 1-5 still holds seq 5
    assert wal.drop_through(5) == 1
    wal.close()
    assert [r["seq"] for r in read_records(tmp_path, after=5)] == [6]
    assert os.listdir(tmp_path) == ["00000000000000000006.log"]


def test_many_writers_share_fsyncs(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path, next_seq=1)

    async def burst() -> None:
        futures = []
        for i in range(2000):
            seq = wal.append({"op": "move", "id": [i]})
            futures.append(durable(wal, seq))
        await asyncio.wait_for(asyncio.gather(*futures), 30)

    asyncio.run(burst())
    assert wal.durable_seq == 2000
    assert wal.fsyncs < 2000  # group commit
    wal.close()


def _old_frame(payload: bytes) -> bytes:
    import struct
    import zlib
    return struct.pack("<cII", b"R", len(payload), zlib.crc32(payload)) + payload


def test_segments_of_the_old_framing_are_still_read(tmp_path: Path) -> None:
    old = b"".join(_old_frame(json.dumps({"seq": s, "op": "move", "id": [s]}).encode())
                   for s in range(1, 6))
    (tmp_path / "00000000000000000001.log").write_bytes(old)
    assert [r["seq"] for r in read_records(tmp_path, after=0)] == [1, 2, 3, 4, 5]
    wal = WriteAheadLog(tmp_path, next_seq=6)  # new records: a new segment, new framing
    assert wal.append({"op": "move", "id": [6]}) == 6
    wal.close()
    assert [f for f, _ in segments(tmp_path)] == [1, 6]
    assert (tmp_path / "00000000000000000001.log").read_bytes() == old
    assert [r["seq"] for r in read_records(tmp_path, after=0)] == [1, 2, 3, 4, 5, 6]
    assert [r["seq"] for r in read_records(tmp_path, after=3)] == [4, 5, 6]


def test_zeros_after_the_last_record_are_damage_not_a_torn_tail(tmp_path: Path) -> None:
    _write(tmp_path, 5).close()
    (_, path), = segments(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data + bytes(3))
    with pytest.raises(WalCorruptError, match=f"bad frame header .* at byte {len(data):,}"):
        recover_log(tmp_path, after=0)
    assert path.read_bytes() == data + bytes(3)


def test_a_crash_while_rotating_leaves_a_readable_log(tmp_path: Path) -> None:
    wal = _write(tmp_path, 5)
    wal.close()
    create_segment(tmp_path, 6)  # the new segment exists; the old one has no footer yet
    log = recover_log(tmp_path, after=0)
    assert log.last_seq == 5 and log.torn_bytes == 0
    wal = WriteAheadLog(tmp_path, next_seq=6)
    wal.append({"op": "move", "id": [6]})
    wal.close()
    assert recover_log(tmp_path, after=0).last_seq == 6
