"""Webhook deliveries logged but not yet in the outbox survive a start and a reload (issue 30).

A publish is logged durably before its webhook deliveries are queued in the outbox; a
crash between the two, or an outbox that fails (the publish is answered 503 "logged"),
leaves deliveries only in the deliveries log. The stream journal rebuilt at a start or a
reload holds only the last ``--stream-retention`` deliveries, so the feeder must read the
others back from the deliveries log: every one above the outbox's highest seq, once, in
seq order, before the first request is answered. The outbox is made to fail with the test
hook ``ROADPUBSUB_FAIL_OUTBOX`` (:mod:`roadpubsub.service.faults`); the reload is the
real one after a full disk (a tmpfs the test mounts, as tests/service/test_resilience.py).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import numpy as np
import pyarrow.parquet as pq
import pytest
from hooks import Receiver, secret_file, wait_for
from live import Server, message_rows, subscription_rows
from test_resilience import _fill, _wait_health, small_disk

from roadpubsub.index.workload import Workload
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.service.deliveries_log import DeliveriesLog, Published
from roadpubsub.service.faults import FAIL_OUTBOX_ENV
from roadpubsub.service.integrity import StateDamageError
from roadpubsub.service.journal import DeliveryJournal
from roadpubsub.service.outbox import OutboxEntry
from roadpubsub.service.streams import WebhookFeeder

__all__ = ["small_disk"]  # the fixture, imported to be used here

FLAGS = ("--webhook-allow-private", "--webhook-max-attempts", "1000",
         "--webhook-backoff-base", "0.05", "--webhook-backoff-cap", "0.5",
         "--webhook-timeout", "5.0", "--webhook-batch-max", "50",
         "--stream-retention", "1")  # the journal rebuilt holds one delivery (one record)


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no metric {name} in /metrics")


def _logged_seqs(folder: Path) -> list[int]:
    """The seq of every delivery in the deliveries log, sorted."""
    seqs: list[int] = []
    for p in (folder / "deliveries").glob("*.parquet"):
        if not p.name.endswith(".published.parquet"):
            seqs += pq.read_table(p, columns=["seq"]).column("seq").to_pylist()
    return sorted(seqs)


def _subscribe_all(c: httpx.Client, subs: list[dict[str, Any]]) -> None:
    for k in range(0, len(subs), 500):
        assert c.post("/subscriptions", json=subs[k:k + 500]).status_code == 201


def _publish_unqueued(c: httpx.Client, msgs: list[dict[str, Any]]) -> int:
    """Publish one message a request with the outbox failing: each is logged and answered
    503 (a record each); the number that had deliveries."""
    hit = 0
    for m in msgs:
        r = c.post("/messages", json=m)
        if r.status_code == 200 and not r.json()["deliveries"]:
            continue  # nothing to queue: answered as usual
        assert r.status_code == 503, r.text
        assert "logged" in r.json()["error"] and "injected" in r.json()["error"], r.text
        hit += 1
    return hit


def test_kill_9_between_log_and_outbox_queues_every_logged_delivery_once(
        serve: Any, service_dir: Path, workload: Workload, andorra: RoadNetwork,
        tmp_path: Path, receivers: list[Receiver], monkeypatch: pytest.MonkeyPatch) -> None:
    receiver = Receiver().start()
    receivers.append(receiver)
    flag = tmp_path / "outbox-fails"
    monkeypatch.setenv(FAIL_OUTBOX_ENV, str(flag))
    flags = (*FLAGS, "--webhook-secret-file", str(secret_file(tmp_path)))
    server = serve(*flags)
    subs = subscription_rows(workload, andorra)
    for row in subs:
        row["webhook"] = receiver.url
    msgs = message_rows(workload, andorra)
    with server.client() as c:
        _subscribe_all(c, subs)
        for m in msgs[:10]:  # queued and sent: the outbox's high seq is above 0
            assert c.post("/messages", json=m).status_code == 200
        first = c.get("/metrics").text
        sent_before = int(_metric(first, "roadpubsub_webhook_fed_seq"))
        assert sent_before > 0
        wait_for(lambda: len(receiver.deduplicated()) >= sent_before, 60, "the first part")
        flag.touch()  # the outbox fails from here: logged, answered 503, not queued
        assert _publish_unqueued(c, msgs[10:70]) > 5
    server.kill()  # kill -9: those deliveries are only in the log (and the write-ahead log)
    flag.unlink()
    server = serve(*flags)
    want = _logged_seqs(service_dir)  # the start wrote the log's segment through the end
    assert want == list(range(1, len(want) + 1)) and len(want) > sent_before + 20
    with server.client() as c:
        text = c.get("/metrics").text  # the first answer: queued already, at the start
        assert _metric(text, "roadpubsub_webhook_fed_seq") == len(want)
        wait_for(lambda: len(receiver.deduplicated()) >= len(want), 120, "every delivery")
        assert _metric(text, "roadpubsub_webhook_recovered_total") > 0
    assert receiver.deduplicated() == want  # every seq, in order
    assert sorted(receiver.accepted) == want  # each sent once: queued once
    assert receiver.bad_signatures == 0
    log = server.log.read_bytes()
    assert b"are not queued" not in log and b"read back from the deliveries log" in log
    server.stop()
    server = serve(*flags)  # a clean restart queues nothing again
    with server.client() as c:
        assert _metric(c.get("/metrics").text, "roadpubsub_webhook_recovered_total") == 0
    time.sleep(1.5)
    assert sorted(receiver.accepted) == want


def test_reload_after_a_full_disk_queues_what_the_failing_outbox_did_not(
        small_disk: Path, service_template: Path, servers: list[Server], tmp_path: Path,
        workload: Workload, andorra: RoadNetwork, receivers: list[Receiver],
        monkeypatch: pytest.MonkeyPatch) -> None:
    receiver = Receiver().start()
    receivers.append(receiver)
    flag = tmp_path / "outbox-fails"
    monkeypatch.setenv(FAIL_OUTBOX_ENV, str(flag))
    folder = small_disk / "svc"
    shutil.copytree(service_template, folder)
    server = Server(folder, *FLAGS, "--webhook-secret-file", str(secret_file(tmp_path)),
                    "--snapshot-every", "100000")
    server.log = tmp_path / "server.log"  # not on the full disk
    servers.append(server)
    server.start()
    subs = subscription_rows(workload, andorra)
    for row in subs:
        row["webhook"] = receiver.url
    msgs = message_rows(workload, andorra)
    with server.client() as c:
        _subscribe_all(c, subs)
        flag.touch()
        assert _publish_unqueued(c, msgs[:60]) > 5
        _fill(small_disk / "filler")
        for k in range(200):  # the log's last page may still hold a few records
            r = c.post("/messages", json=msgs[60 + k])
            if r.status_code == 503 and "not applied" in r.json()["error"]:
                break
        else:
            pytest.fail("the full disk never refused a write")
        assert c.get("/health").json()["status"] == "failed"
        (small_disk / "filler").unlink()
        health = _wait_health(c, "ok", timeout=60)
        assert health["recoveries"] == 1  # reloaded: the journal holds one delivery now
        time.sleep(1.5)  # the feeder tries (and fails) on the reloaded state
        assert not receiver.accepted
        want = _logged_seqs(folder)  # the reload wrote the log's segment through the end
        assert want == list(range(1, len(want) + 1)) and len(want) > 20
        flag.unlink()  # the outbox takes writes again
        wait_for(lambda: len(receiver.deduplicated()) >= len(want), 120, "every delivery")
        text = c.get("/metrics").text
        assert _metric(text, "roadpubsub_webhook_fed_seq") == len(want)
    assert receiver.deduplicated() == want
    assert sorted(receiver.accepted) == want
    assert b"are not queued" not in server.log.read_bytes()


def test_a_reload_keeps_the_journal_hold_of_the_webhook_feeder(service_dir: Path) -> None:
    """The reloaded journal holds what the feeder has not queued, as the one it replaces
    did (the bounds would otherwise drop new chunks with webhook rows before their log
    segment exists)."""
    from roadpubsub.service.state import ServiceState

    state = ServiceState.open(service_dir)
    try:
        state.journal.hold = 7
        state.failed = OSError("a log write failed")  # what the watchman reloads after
        assert state.recover()
        assert state.journal.hold == 7
    finally:
        state.close()


def _segments(folder: Path, sizes: list[int]) -> tuple[DeliveriesLog, list[int], Any]:
    """A deliveries log of one segment per size (message k, of log seq k + 1, delivered to
    subscriptions ``k*10 ...``), the subscription id of each seq (seq 1 first), and the
    state's view of it (``dseq_of``, ``messages``)."""
    dlog = DeliveriesLog(folder)
    seq, sids = 1, []
    view = SimpleNamespace(dseq_of={}, messages={})
    for k, n in enumerate(sizes):
        sid = np.arange(k * 10, k * 10 + n, dtype=np.int64)
        d = Deliveries(np.full(n, k, np.int64), sid, np.ones(n), np.ones(n))
        dlog.write(k, k + 1, Published(np.asarray([k]), np.asarray([k + 1]), np.zeros(1)),
                   d, np.arange(seq, seq + n, dtype=np.int64))
        view.messages[k] = (k + 1, 0.0, d)
        if n:
            view.dseq_of[k] = seq
        seq += n
        sids += sid.tolist()
    return dlog, sids, view


def _feeder(dlog: DeliveriesLog, view: Any, hooked: dict[int, str], head: int,
            high_seq: int, writes: list[list[OutboxEntry]], **kw: Any) -> WebhookFeeder:
    """A feeder on a state as a start leaves it: the journal holds none of 1..head."""
    journal = DeliveryJournal(retain=1).renewed(next_seq=head + 1)
    state = SimpleNamespace(journal=journal, dlog=dlog, webhook_of=hooked,
                            wal=SimpleNamespace(durable_seq=0), dseq_of=view.dseq_of,
                            messages=view.messages)
    return WebhookFeeder(state, lambda e: writes.append(list(e)),  # type: ignore[arg-type]
                         high_seq=high_seq, **kw)


def _damage(dlog: DeliveriesLog, k: int) -> Path:
    """Flip a byte in the middle of the k-th deliveries segment."""
    path = sorted(p for p in dlog.dir.glob("*.parquet")
                  if not p.name.endswith(".published.parquet"))[k]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    return path


def test_feeder_reads_back_in_bounded_batches_from_the_outbox_high_seq(tmp_path: Path
                                                                       ) -> None:
    dlog, sids, view = _segments(tmp_path / "deliveries", [9, 0, 12, 7])
    head = len(sids)
    hooked = {s: f"http://127.0.0.1:9/{s % 3}" for s in sids if s % 4 != 1}
    writes: list[list[OutboxEntry]] = []
    feeder = _feeder(dlog, view, hooked, head, 5, writes, batch=4)
    assert feeder.feed() == sum(len(w) for w in writes)
    got = [e.seq for w in writes for e in w]
    assert got == [q for q in range(6, head + 1) if sids[q - 1] in hooked]  # once, in order
    assert all(0 < len(w) <= 4 for w in writes)  # bounded writes
    assert all(e.url == hooked[e.subscription_id] for w in writes for e in w)
    assert feeder.fed == head and feeder.state.journal.hold == head
    assert feeder.recovered == len(got)
    writes.clear()
    assert feeder.feed() == 0 and not writes  # nothing queued twice


def test_feeder_reads_only_the_segments_after_the_outbox_high_seq(tmp_path: Path) -> None:
    dlog, sids, view = _segments(tmp_path / "deliveries", [9, 12, 7])
    _damage(dlog, 0)  # not read: every delivery in it is in the outbox already
    writes: list[list[OutboxEntry]] = []
    feeder = _feeder(dlog, view, dict.fromkeys(sids, "u"), len(sids), 15, writes)
    feeder.feed()
    assert [e.seq for w in writes for e in w] == list(range(16, len(sids) + 1))


def test_a_damaged_log_segment_is_reported_not_skipped(tmp_path: Path) -> None:
    dlog, sids, view = _segments(tmp_path / "deliveries", [5, 6])
    second = _damage(dlog, 1)
    writes: list[list[OutboxEntry]] = []
    feeder = _feeder(dlog, view, dict.fromkeys(sids, "u"), len(sids), 0, writes)
    with pytest.raises(StateDamageError, match=second.name):
        feeder.feed()
    assert [e.seq for w in writes for e in w] == [1, 2, 3, 4, 5]  # the intact part only
    assert feeder.fed == 5 and feeder.state.journal.hold == 5  # the rest waits (retried)
    assert second.exists()  # the evidence stays
