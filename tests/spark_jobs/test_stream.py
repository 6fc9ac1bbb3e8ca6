"""The stream job on local Spark: rounds of message and change files, checked against the
single-process matcher applied to the same events in the same order; bad files; Kafka."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pyspark.sql import SparkSession
from stream_helpers import (
    NEW_TERM,
    Reference,
    assert_same,
    jsonl,
    land,
    land_table,
    message_table,
    move_events,
    subscribe_events,
    unsubscribe_events,
)

from roadpubsub.cli import main as cli_main
from roadpubsub.index.eia import EnhancedIndex
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.workload import Workload, generate_workload
from roadpubsub.pruning.brute import match_brute
from roadpubsub.roadnet.cell_bounds import CellBounds
from roadpubsub.roadnet.cells import Cells
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.spark_jobs.stream import StreamDriver, build_parser, start_stream
from roadpubsub.spark_jobs.stream_changes import ChangeLog
from roadpubsub.spark_jobs.stream_files import read_sink
from roadpubsub.spark_jobs.stream_tasks import kafka_problem

DMAX_M = 2000.0
N_BASE = 4000


@pytest.fixture(scope="module")
def workload(andorra: RoadNetwork, tweets_csv: Path) -> Workload:
    return generate_workload(andorra, n_subscriptions=N_BASE + 400, n_messages=400, seed=11,
                             tweets=tweets_csv, tau=0.4, tau_spread=0.2)


@pytest.fixture(scope="module")
def index_file(tmp_path_factory: pytest.TempPathFactory, andorra: RoadNetwork,
               andorra_cells: Cells, andorra_bounds: CellBounds, workload: Workload) -> Path:
    spatial = SpatialIndex.build(andorra, cells=andorra_cells, bounds=andorra_bounds)
    base = workload.subscriptions.take(np.arange(N_BASE))
    path = tmp_path_factory.mktemp("stream") / "eia.npz"
    return EnhancedIndex(spatial, base, workload.weights, dmax_m=DMAX_M).save(path)


def _args(tmp: Path, index_file: Path, *extra: str) -> argparse.Namespace:
    return build_parser().parse_args([
        "--index-file", str(index_file), "--messages", str(tmp / "messages"),
        "--changes", str(tmp / "changes"), "--out", str(tmp / "out"),
        "--checkpoint", str(tmp / "checkpoint"), "--max-files-per-trigger", "2", *extra])


def _round_files(k: int, workload: Workload, net: RoadNetwork
                 ) -> tuple[list[tuple[str, bytes]], list[dict[str, Any]],
                            list[tuple[str, Any]]]:
    """Round k: two change files (order matters: the second moves what the first
    subscribed) and three message files (one JSON Lines), 100 messages."""
    subs, w = workload.subscriptions, workload.weights
    new = subs.take(np.arange(N_BASE + 100 * k, N_BASE + 100 * k + 60))
    rows_a, ev_a = subscribe_events(new, w, net, extra_term=k == 1)
    gone = [int(x) for x in subs.ids[30 * k:30 * k + 20]]
    rows_u, ev_u = unsubscribe_events(gone)
    moved = [int(new.ids[0]), int(subs.ids[30 * k + 25])]
    rows_m, ev_m = move_events(moved, subs.take(np.arange(3000 + 2 * k, 3002 + 2 * k)), w, net)
    changes = [(f"r{k}-a.jsonl", jsonl(rows_a + rows_u)), (f"r{k}-b.jsonl", jsonl(rows_m))]
    msgs = workload.messages.take(np.arange(100 * k, 100 * k + 100))
    cuts = [(0, 40, "parquet"), (40, 70, "jsonl"), (70, 100, "parquet")]
    files = [(f"r{k}-{j}.{ext}", message_table(msgs.take(np.arange(a, b)), w, net,
                                               extra_term=k == 1 and j == 0))
             for j, (a, b, ext) in enumerate(cuts)]
    return changes, ev_a + ev_u + ev_m, files


def _wait(cond: Any, query: Any, timeout: float = 300.0) -> None:
    t0 = time.monotonic()
    while not cond():
        if query.exception() is not None:
            raise AssertionError(f"the query failed: {query.exception()}")
        if time.monotonic() - t0 > timeout:
            raise AssertionError("timed out waiting for the stream")
        time.sleep(0.2)


@pytest.mark.spark
@pytest.mark.slow
def test_rounds_equal_single_process_matcher(spark: SparkSession, tmp_path: Path,
                                             andorra: RoadNetwork, workload: Workload,
                                             index_file: Path) -> None:
    args = _args(tmp_path, index_file)
    query, driver = start_stream(spark, args)
    ref = Reference(index_file)
    expected = 0
    try:
        for k in range(4):
            changes, events, files = _round_files(k, workload, andorra)
            for name, data in changes:
                land(tmp_path / "changes" / name, data)
            if k == 2:  # a bad change file and a bad message file: moved aside, query goes on
                land(tmp_path / "changes" / "r2-c.jsonl",
                     jsonl([{"op": "unsubscribe", "id": 10**12}]))
                land(tmp_path / "messages" / "r2-bad.parquet", b"not a parquet file")
            for name, table in files:
                land_table(tmp_path / "messages" / name, table)
            ref.apply(events)
            ref.match([tmp_path / "messages" / name for name, _ in files])
            expected += 100
            _wait(lambda e=expected: driver.rows == e, query)  # type: ignore[misc]
            if k == 2:
                _wait(lambda: (tmp_path / "messages" / "_rejected" / "r2-bad.parquet").exists(),
                      query)
    finally:
        query.stop()
    assert query.exception() is None
    sink = read_sink(tmp_path / "out")
    from roadpubsub.pruning.deliveries import Deliveries

    want = Deliveries.concat(ref.found)
    assert len(want) > 200
    assert_same(sink, want)
    # Changes took effect in file order, between micro-batches, once each.
    log = ChangeLog(tmp_path / "checkpoint" / "roadpubsub" / "changes").entries()
    consumed = [f for e in log for f in e["files"]]
    assert consumed == [f"r{k}-{x}.jsonl" for k in range(4) for x in "ab"]
    assert [f for e in log for f in e["rejected"]] == ["r2-c.jsonl"]
    rejected = tmp_path / "changes" / "_rejected"
    assert "10000" in (rejected / "r2-c.jsonl.reason.txt").read_text()
    assert "r2-bad.parquet" in (tmp_path / "messages" / "_rejected" /
                                "r2-bad.parquet.reason.txt").read_text()
    # The new term of round 1 reached the executors' vocabulary: its message matched it.
    assert NEW_TERM in ref.weights.terms  # type: ignore[union-attr]
    # Each batch committed one directory (one per micro-batch); nothing temporary is left.
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert all(n.startswith("batch_id=") for n in names), names
    assert len(names) == driver.batches >= 8


@pytest.mark.spark
def test_once_restart_and_brute_reference(spark: SparkSession, tmp_path: Path,
                                          andorra: RoadNetwork, workload: Workload,
                                          index_file: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """--once twice on one checkpoint (the second run rebuilds the set from the change log;
    both ship new base indexes to the workers); the result equals the brute-force
    matcher's pairs as well."""
    ref = Reference(index_file)
    for k in range(2):
        changes, events, files = _round_files(k, workload, andorra)
        for name, data in changes:
            land(tmp_path / "changes" / name, data)
        for name, table in files:
            land_table(tmp_path / "messages" / name, table)
        ref.apply(events)
        ref.match([tmp_path / "messages" / name for name, _ in files])
        # A small --rebase-rows: each round's 82 change rows make a new base index.
        assert cli_main(["spark", "stream", *sys_args(tmp_path, index_file), "--once",
                         "--rebase-rows", "50"]) == 0
        assert "new base index" in capsys.readouterr().err
    from roadpubsub.pruning.deliveries import Deliveries

    want = Deliveries.concat(ref.found)
    sink = read_sink(tmp_path / "out")
    assert_same(sink, want)
    # Spark reads the sink as it is, batch_id from the directory names.
    frame = spark.read.parquet(str(tmp_path / "out"))
    assert set(frame.columns) == {"message_id", "subscription_id", "distance", "score",
                                  "batch_id"}
    assert frame.count() == sink.num_rows
    # Independent check of the last round with the brute-force matcher.
    from roadpubsub.index.io import read_messages
    from roadpubsub.index.model import Subscriptions
    from roadpubsub.roadnet.locations import EdgePoints

    ids = sorted(ref.rows)
    r = [ref.rows[i] for i in ids]
    w = ref.weights
    assert w is not None
    subs = Subscriptions.from_rows(
        ids=np.asarray(ids), points=EdgePoints.of([x["edge"] for x in r],
                                                  [x["offset"] for x in r]),
        keywords=[x["keywords"] for x in r], alpha=[x["alpha"] for x in r],
        tau=[x["tau"] for x in r], weights=w)
    _, _, files = _round_files(1, workload, andorra)
    brute = Deliveries.concat([
        match_brute(andorra, subs, read_messages(tmp_path / "messages" / name, andorra, w), w,
                    dmax_m=DMAX_M) for name, _ in files])
    last = sink.filter(np.isin(np.asarray(sink.column("message_id")), brute.message_id))
    got = set(zip(last.column("message_id").to_pylist(),
                  last.column("subscription_id").to_pylist(), strict=True))
    assert got == set(brute.pairs())


def sys_args(tmp: Path, index_file: Path) -> list[str]:
    return ["--index-file", str(index_file), "--messages", str(tmp / "messages"),
            "--changes", str(tmp / "changes"), "--out", str(tmp / "out"),
            "--checkpoint", str(tmp / "checkpoint"), "--max-files-per-trigger", "2"]


@pytest.mark.spark
def test_kafka_source_needs_its_package(spark: SparkSession, tmp_path: Path,
                                        index_file: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    problem = kafka_problem(spark)
    if problem is None:
        pytest.skip("spark-sql-kafka is on the classpath but no Kafka broker is started here")
    assert "spark-sql-kafka" in problem and "--packages" in problem
    code = cli_main(["spark", "stream", *sys_args(tmp_path, index_file),
                     "--kafka-bootstrap", "localhost:9092"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("roadpubsub: error:") or "spark-sql-kafka" in err[-1]
    assert "spark-sql-kafka" in err[-1]
    pytest.skip(f"Kafka source not tested: {problem}")


@pytest.mark.spark
def test_kafka_records_are_matched_and_bad_ones_kept(
        spark: SparkSession, tmp_path: Path, andorra: RoadNetwork, workload: Workload,
        index_file: Path) -> None:
    """The Kafka path after the source: records (one JSON message each) of a micro-batch
    are matched like files; a bad record is kept beside the sink with its reason."""
    import json

    msgs = workload.messages.take(np.arange(0, 60))
    path = tmp_path / "m.parquet"
    land_table(path, message_table(msgs, workload.weights, andorra))
    ref = Reference(index_file)
    want = ref.match([path])
    records = [json.dumps(r) for r in message_table(msgs, workload.weights,
                                                    andorra).to_pylist()]
    records.insert(7, json.dumps({"id": 10**6, "keywords": []}))
    frame = spark.createDataFrame([(r,) for r in records], "value string").repartition(2)
    driver = StreamDriver(spark, index_file=index_file, messages=tmp_path / "messages",
                          changes=tmp_path / "changes", out=tmp_path / "out",
                          checkpoint=tmp_path / "checkpoint")
    driver.process(frame, 0)
    assert driver.rows == 60
    assert_same(read_sink(tmp_path / "out"), want)
    kept = (tmp_path / "out" / "_rejected" / "batch-000000000000.jsonl").read_text()
    assert (tmp_path / "out" / "batch_id=0").is_dir()
    assert "keywords" in kept and "1000000" in kept


@pytest.mark.spark
@pytest.mark.parametrize(("out", "expect"), [
    ("messages", "is the input"), ("hdfs://nn/out", "local or mounted directories only")])
def test_bad_outputs_are_one_line(spark: SparkSession, tmp_path: Path, index_file: Path,
                                  out: str, expect: str,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "messages").mkdir()
    args = sys_args(tmp_path, index_file)
    args[args.index("--out") + 1] = out if "://" in out else str(tmp_path / out)
    assert cli_main(["spark", "stream", *args, "--once"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert expect in err[-1], err
