"""The deliveries log's segments are written off the apply thread, in order, and a failed
write stops the events until a reload derives the missing segment from the log again."""

from __future__ import annotations

import errno
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from live import message_rows, subscription_rows

from roadpubsub.index.events import BodyParser
from roadpubsub.index.workload import Workload
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.service import deliveries_log
from roadpubsub.service.deliveries_log import SegmentWriter
from roadpubsub.service.options import ServiceOptions
from roadpubsub.service.snapshot import read_manifest
from roadpubsub.service.state import ServiceState
from roadpubsub.service.wal import LogUnavailableError


def test_the_writer_runs_jobs_in_order_and_stops_at_the_first_failure() -> None:
    writer = SegmentWriter(max_queued=8)
    done: list[int] = []
    gate = threading.Event()
    writer.submit(gate.wait)
    for k in range(5):
        writer.submit(lambda k=k: done.append(k))
    assert done == []  # held behind the first job, not run by the caller
    gate.set()
    writer.drain()
    assert done == [0, 1, 2, 3, 4] and writer.written == 6

    def fail() -> None:
        raise OSError(errno.EIO, "Input/output error")

    writer.submit(fail)
    writer.submit(lambda: done.append(99))  # after a missing segment: never written
    with pytest.raises(OSError, match="Input/output"):
        writer.drain()
    assert isinstance(writer.error, OSError)
    writer.submit(lambda: done.append(100))
    writer.close()
    assert done == [0, 1, 2, 3, 4]


def test_close_runs_what_was_submitted() -> None:
    writer = SegmentWriter()
    done: list[int] = []
    for k in range(3):
        writer.submit(lambda k=k: done.append(k))
    writer.close()
    assert done == [0, 1, 2] and writer.error is None
    writer.submit(lambda: done.append(3))  # closed: nothing runs any more
    writer.close()
    assert done == [0, 1, 2]


def _published_ids(folder: Path) -> list[int]:
    log = deliveries_log.DeliveriesLog(folder / "deliveries")
    published, _, dseq, _ = log.read_all()
    assert np.array_equal(np.sort(dseq), np.arange(1, dseq.size + 1))  # no gap
    return sorted(published.message_id.tolist())


def _setup(service_dir: Path, workload: Workload, andorra: RoadNetwork
           ) -> tuple[ServiceState, BodyParser, list[dict[str, Any]]]:
    state = ServiceState.open(service_dir, ServiceOptions(flush_every=3))
    parser = BodyParser(state.index.network, max_snap_m=250.0, kinds=True,
                        dmax_m=state.index.dmax_m)
    state.subscribe(parser.subscriptions(subscription_rows(workload, andorra)[:300]))
    state.wal.sync()
    return state, parser, message_rows(workload, andorra)


def test_a_publish_does_not_wait_for_its_deliveries_segment(
        service_dir: Path, workload: Workload, andorra: RoadNetwork,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The third publish hands a segment over (flush_every=3) while the segment's write
    is held: the publish returns all the same; released, the segment is on disk, and a
    restart reads every message back."""
    real = deliveries_log._write_fsynced
    gate, entered = threading.Event(), threading.Event()

    def held(table: Any, target: Path) -> None:
        entered.set()
        assert gate.wait(60)
        real(table, target)

    state, parser, msgs = _setup(service_dir, workload, andorra)
    try:
        monkeypatch.setattr(deliveries_log, "_write_fsynced", held)
        answers = []
        worker = threading.Thread(target=lambda: answers.extend(
            state.publish(parser.messages([m])) for m in msgs[:3]))
        worker.start()
        worker.join(60)
        assert not worker.is_alive(), "a publish waited for the deliveries segment"
        assert entered.wait(60) and len(answers) == 3
        assert _published_ids(service_dir) == []  # still held
        gate.set()
        state.writer.drain()
        assert _published_ids(service_dir) == sorted(m["id"] for m in msgs[:3])
        assert state.health() == ("ok", None)
    finally:
        gate.set()
        state.close()
    again = ServiceState.open(service_dir)
    try:
        assert sorted(again.messages) == sorted(m["id"] for m in msgs[:3])
    finally:
        again.close()


def test_a_failed_segment_write_stops_events_until_a_reload_writes_it_again(
        service_dir: Path, workload: Workload, andorra: RoadNetwork,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The segment's write fails (EIO): the publishes were logged and answered; the state
    says failed and refuses the next event; once writes succeed, a reload derives the
    missing segment from the log, and the deliveries log holds every message, no gap."""
    real = deliveries_log._write_fsynced

    def failing(table: Any, target: Path) -> None:
        raise OSError(errno.EIO, "Input/output error")

    state, parser, msgs = _setup(service_dir, workload, andorra)
    try:
        for m in msgs[:3]:
            state.publish(parser.messages([m]))
        state.writer.drain()  # the first segment is written
        monkeypatch.setattr(deliveries_log, "_write_fsynced", failing)
        for m in msgs[3:6]:  # the third hands over a segment that fails
            state.publish(parser.messages([m]))
        with pytest.raises(OSError, match="Input/output"):
            state.writer.drain()
        status, reason = state.health()
        assert status == "failed" and reason is not None and "Input/output" in reason
        with pytest.raises(LogUnavailableError, match="stopped accepting events"):
            state.publish(parser.messages([msgs[6]]))
        monkeypatch.setattr(deliveries_log, "_write_fsynced", real)
        assert state.recover()
        assert state.health() == ("ok", None)
        assert _published_ids(service_dir) == sorted(m["id"] for m in msgs[:6])
        state.publish(parser.messages([msgs[6]]))
    finally:
        state.close()
    assert _published_ids(service_dir) == sorted(m["id"] for m in msgs[:7])


def test_a_snapshot_is_named_only_once_its_deliveries_are_written(
        service_dir: Path, workload: Workload, andorra: RoadNetwork,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A snapshot hands its segment to the writer without waiting; while that write is
    held the manifest keeps naming the previous snapshot (a start replays the log from
    the named one, so its deliveries must be in segments); released, it names the new."""
    real = deliveries_log._write_fsynced
    gate = threading.Event()

    def held(table: Any, target: Path) -> None:
        assert gate.wait(120)
        real(table, target)

    state, parser, msgs = _setup(service_dir, workload, andorra)
    try:
        state.publish(parser.messages([msgs[0]]))
        before = read_manifest(service_dir)
        assert before is not None
        monkeypatch.setattr(deliveries_log, "_write_fsynced", held)
        assert state.start_snapshot()
        seq = state.wal.next_seq - 1
        deadline = time.monotonic() + 120
        while state.snapshots.pid is not None and time.monotonic() < deadline:
            time.sleep(0.05)  # the child wrote its files
        time.sleep(0.5)
        assert read_manifest(service_dir)["seq"] == before["seq"] != seq  # type: ignore[index]
        gate.set()
        while state.snapshots.running and time.monotonic() < deadline:
            time.sleep(0.05)
        assert state.snapshots.completed == 1
        assert read_manifest(service_dir)["seq"] == seq  # type: ignore[index]
        assert _published_ids(service_dir) == [msgs[0]["id"]]
    finally:
        gate.set()
        state.close()


def test_a_slow_disk_slows_the_submitter_rather_than_filling_memory() -> None:
    writer = SegmentWriter(max_queued=2)
    gate = threading.Event()
    writer.submit(gate.wait)  # running, held
    writer.submit(lambda: None)
    writer.submit(lambda: None)  # two wait: the queue is full
    fourth = threading.Thread(target=writer.submit, args=(lambda: None,))
    fourth.start()
    fourth.join(0.5)
    assert fourth.is_alive(), "a submit beyond max_queued did not wait"
    gate.set()
    fourth.join(30)
    assert not fourth.is_alive()
    writer.close()
    assert writer.written == 4
