"""A request of one message (the common publish) skips the batch's selection, split and
re-sort, which are no-ops for one message: its deliveries, answer, log record and
deliveries log equal those of the same messages published as one batch."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from live import message_rows, subscription_rows

from roadpubsub.index.events import BodyParser
from roadpubsub.index.workload import Workload
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.service.answers import dumps
from roadpubsub.service.options import ServiceOptions
from roadpubsub.service.results import deliveries_json
from roadpubsub.service.state import ServiceState
from roadpubsub.service.wal import read_records


def _same(a: Deliveries, b: Deliveries, what: str) -> None:
    for f in ("message_id", "subscription_id", "distance", "score"):
        x, y = getattr(a, f), getattr(b, f)
        assert x.dtype == y.dtype and np.array_equal(x, y), f"{what}: {f}"


def _publish_rows(folder: Path) -> dict[int, dict[str, Any]]:
    """Each logged message's fields, by id."""
    out = {}
    for rec in read_records(folder / "wal", after=0):
        if rec["op"] == "publish":
            for k, m in enumerate(rec["id"]):
                out[m] = {f: rec[f][k] for f in ("edge", "offset", "keywords", "time")}
    return out


def test_one_message_requests_equal_one_batch(service_dir: Path, tmp_path: Path,
                                              workload: Workload,
                                              andorra: RoadNetwork) -> None:
    parser = BodyParser(andorra, max_snap_m=250.0)
    subs = subscription_rows(workload, andorra)[:1200]
    # a fifth expire among the messages' times: expiry runs between them in both paths
    subs = [{**s, "expires_at": 100.0 + 3 * i if i % 5 == 0 else None}
            for i, s in enumerate(subs)]
    msgs = [{**m, "time": 100.0 + 10 * k} for k, m in enumerate(message_rows(
        workload, andorra)[:60])]
    other = tmp_path / "batch"
    shutil.copytree(service_dir, other)
    one = ServiceState.open(service_dir, ServiceOptions(fsync=False))
    batch = ServiceState.open(other, ServiceOptions(fsync=False))
    try:
        for st in (one, batch):
            st.subscribe(parser.subscriptions(subs))
        singles = [one.publish(parser.messages(m)) for m in msgs]
        together = batch.publish(parser.messages(msgs))
        assert together.everything is not None and len(together.everything) > 100
        delivered = 0
        for m, a in zip(msgs, singles, strict=True):
            mid = m["id"]
            want = Deliveries(*(x[together.everything.message_id == mid] for x in (
                together.everything.message_id, together.everything.subscription_id,
                together.everything.distance, together.everything.score)))
            assert a.deliveries is not None and a.everything is not None
            _same(a.deliveries, want, f"message {mid}")
            _same(a.everything, want, f"message {mid}'s answer")
            _same(one.messages[mid][2], batch.messages[mid][2], f"message {mid} recorded")
            assert one.messages[mid][1] == batch.messages[mid][1] == m["time"]
            assert set(a.body) == {"deliveries", "seq"}
            # each delivery with its seq (issue 30): numbered on from the last one
            assert orjson.loads(dumps(a.body)) == {
                "deliveries": deliveries_json(want, delivered + np.arange(1, len(want) + 1)),
                "seq": a.seq}
            assert a.messages is not None and a.messages[0].tolist() == [mid]
            delivered += len(want)
        assert delivered == len(together.everything)
        assert one.counts == batch.counts and one.delivered == batch.delivered
        # a repeated id (the general path) answers what the single request recorded
        again = one.publish(parser.messages(msgs[7]))
        assert again.body["duplicates"] == [msgs[7]["id"]]
        assert again.everything is not None and singles[7].everything is not None
        _same(again.everything, singles[7].everything, "a repeat")
        # with the seqs the first answer gave them (one message: numbered by one range)
        assert orjson.loads(dumps(again.body))["deliveries"] == \
            orjson.loads(dumps(singles[7].body))["deliveries"]
        # a repeat and a new message together: the general numbering, per message
        fresh = {**msgs[0], "id": 10**9}
        mixed = one.publish(parser.messages([msgs[3], fresh]))
        answer = orjson.loads(dumps(mixed.body))["deliveries"]
        first = [d for d in answer if d["message_id"] == msgs[3]["id"]]
        assert first == orjson.loads(dumps(singles[3].body))["deliveries"]
        new = [d["seq"] for d in answer if d["message_id"] == 10**9]
        assert new == list(range(delivered + 1, delivered + 1 + len(new))) and new
        batch.publish(parser.messages([msgs[3], fresh]))  # the logs stay comparable
        one.flush_deliveries()
        batch.flush_deliveries()
    finally:
        one.close()
        batch.close()
    assert _publish_rows(service_dir) == _publish_rows(other)
    got = ServiceState.open(service_dir, ServiceOptions(fsync=False))
    ref = ServiceState.open(other, ServiceOptions(fsync=False))
    try:  # the deliveries logs, read back after a restart
        assert got.messages.keys() == ref.messages.keys()
        for mid in got.messages:
            _same(got.messages[mid][2], ref.messages[mid][2], f"logged message {mid}")
    finally:
        got.close()
        ref.close()
