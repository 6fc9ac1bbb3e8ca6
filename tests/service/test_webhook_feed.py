"""The stream journal's retention against the webhook feeder (issue 30), on a real server.

The journal (:class:`~roadpubsub.service.journal.DeliveryJournal`) holds the recent
deliveries for resumable streams, and the webhook feeder copies those of webhook
subscriptions from it into the durable outbox. The feeder runs after a record is durable,
on another thread than the apply thread: when it lags (many publishes in flight, a slow
outbox) the retention must not drop a delivery it has not queued yet, by age nor by count,
or that delivery never reaches its endpoint although its publish was answered 200.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hooks import Receiver, secret_file, wait_for
from live import message_rows, subscription_rows

from roadpubsub.index.workload import Workload
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.service.journal import Chunk, DeliveryJournal

FLAGS = ("--webhook-allow-private", "--webhook-max-attempts", "1000",
         "--webhook-backoff-base", "0.05", "--webhook-backoff-cap", "0.5",
         "--webhook-timeout", "2.0", "--webhook-batch-max", "50")


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no metric {name} in /metrics")


def test_count_retention_never_drops_what_the_feeder_has_not_queued(
        serve: Any, workload: Workload, andorra: RoadNetwork, tmp_path: Path,
        receivers: list[Receiver]) -> None:
    receiver = Receiver()  # down while everything is published: all of it waits queued
    receivers.append(receiver)
    # a retention of one delivery: the next record's chunk drops every earlier one the
    # feeder has not queued yet unless the journal holds them for it
    server = serve(*FLAGS, "--stream-retention", "1",
                   "--webhook-secret-file", str(secret_file(tmp_path)))
    subs = subscription_rows(workload, andorra)
    for row in subs:
        row["webhook"] = receiver.url
    msgs = message_rows(workload, andorra)[:240]
    answers: list[dict[str, Any]] = []
    errors: list[str] = []
    lock = threading.Lock()

    def publisher(part: list[dict[str, Any]]) -> None:
        with server.client() as c:
            for m in part:  # one message a request: many records in flight together
                r = c.post("/messages", json=m)
                with lock:
                    if r.status_code != 200:
                        errors.append(r.text)
                    else:
                        answers.extend(r.json()["deliveries"])

    with server.client() as c:
        for k in range(0, len(subs), 500):
            assert c.post("/subscriptions", json=subs[k:k + 500]).status_code == 201
        threads = [threading.Thread(target=publisher, args=(msgs[i::8],)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert not errors, errors[:3]
        head = max(d["seq"] for d in answers)
        assert sorted(d["seq"] for d in answers) == list(range(1, head + 1))
        # the feeder never found a delivery gone before it queued it (it would read it
        # back from the deliveries log)
        log = server.log.read_bytes()
        assert b"read back from the deliveries log" not in log and b"not queued" not in log
        receiver.start()
        wait_for(lambda: len(receiver.deduplicated()) >= head, 240, "every delivery")
        assert receiver.deduplicated() == list(range(1, head + 1))  # once each, in order
        assert receiver.bad_signatures == 0
        metrics = c.get("/metrics").text
        # everything answered is in the outbox: the journal holds nothing for it now
        assert _metric(metrics, "roadpubsub_webhook_fed_seq") == head
        assert _metric(metrics, "roadpubsub_stream_held_for_webhooks") == 0
        assert c.get("/health").json()["stream"]["held_for_webhooks"] == 0


def _chunk(first: int, n: int, *, hooked: bool = True) -> Chunk:
    ids = np.arange(first, first + n, dtype=np.int64)
    hooks = (np.arange(n), ["http://x/h"] * n) if hooked else None
    return Chunk(first, first, ids, ids, np.ones(n), np.ones(n), hooks)


def test_journal_count_bound_holds_what_the_feeder_has_not_queued() -> None:
    journal = DeliveryJournal(retain=3)
    journal.hold = 0  # a feeder that has queued nothing yet
    for first in (1, 3, 5, 7):
        journal.append(_chunk(first, 2))
    assert journal.oldest() == 1  # 8 held where 3 are retained: all for the feeder
    assert journal.status() == {"held": 8, "oldest": 1, "next_seq": 9, "fed_through": 0,
                                "held_for_webhooks": 4}  # the count bound alone: 5-8
    journal.hold = 2  # fed through the chunk 1-2: the count bound takes it
    assert journal.oldest() == 3 and journal.hooked_dropped == 2
    assert journal.status()["held_for_webhooks"] == 2  # seqs 3-4
    journal.hold = 8
    assert journal.oldest() == 5  # the last 3 at least, whole chunks
    assert journal.status()["held_for_webhooks"] == 0
    journal.append(_chunk(9, 1))
    assert journal.oldest() == 7
    free = DeliveryJournal(retain=3)  # no feeder (webhooks off): the count bound alone
    for first in (1, 3, 5, 7):
        free.append(_chunk(first, 2))
    assert free.oldest() == 5
    assert free.status()["held_for_webhooks"] == 0
    plain = DeliveryJournal(retain=3)  # a feeder, but no row to a webhook: nothing held
    plain.hold = 0
    for first in (1, 3, 5, 7):
        plain.append(_chunk(first, 2, hooked=False))
    assert plain.oldest() == 5 and plain.hooked_dropped == 0
    assert plain.renewed(next_seq=12).hooked_dropped == 11  # not read back at a load


@pytest.mark.parametrize("hold", [None, 0])
def test_journal_status_of_an_empty_journal(hold: int | None) -> None:
    journal = DeliveryJournal(retain=3, next_seq=5)
    journal.hold = hold
    assert journal.status() == {"held": 0, "oldest": 5, "next_seq": 5, "fed_through": hold,
                                "held_for_webhooks": 0}
