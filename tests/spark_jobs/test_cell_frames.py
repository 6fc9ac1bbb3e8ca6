"""Subscriptions and messages read by the executors: the local reader's rows, term ids
and errors, from files split over several tasks and batches."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from roadpubsub.index.io import (
    messages_table,
    read_messages,
    read_subscriptions,
    read_weights,
    subscriptions_table,
    write_weights,
)
from roadpubsub.index.model import InvalidMessageError, InvalidSubscriptionError
from roadpubsub.index.terms import TermWeights
from roadpubsub.index.workload import Workload, generate_workload
from roadpubsub.roadnet.cells import Cells
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.spark_jobs.arrow_batches import messages_from_arrow, subscriptions_from_arrow
from roadpubsub.spark_jobs.cell_frames import cell_stats
from roadpubsub.spark_jobs.read_frames import read_messages_frame, read_subscriptions_frame

DMAX_M = 2000.0


@pytest.fixture(scope="module")
def files(andorra: RoadNetwork, tweets_csv: Path, tmp_path_factory: pytest.TempPathFactory
          ) -> tuple[Path, Path, Path]:
    """Subscriptions, messages and a weights table that lacks a third of their keywords;
    small row groups and a small split size spread the rows over tasks and batches."""
    wl: Workload = generate_workload(andorra, n_subscriptions=6000, n_messages=400, seed=3,
                                     tweets=tweets_csv)
    folder = tmp_path_factory.mktemp("cell frames")
    subs, msgs = folder / "sub s.parquet", folder / "msg s.parquet"
    pq.write_table(subscriptions_table(wl.subscriptions, network=andorra, weights=wl.weights),
                   subs, row_group_size=700)
    pq.write_table(messages_table(wl.messages, network=andorra, weights=wl.weights), msgs,
                   row_group_size=100)
    terms = wl.weights.terms
    kept = {t: float(w) for k, (t, w) in enumerate(zip(terms, wl.weights.weights, strict=True))
            if k % 3 != 1}
    weights = folder / "weights.parquet"
    write_weights(TermWeights(kept, default_weight=wl.weights.default_weight), weights)
    return subs, msgs, weights


def _columns(obj: object) -> dict[str, np.ndarray]:
    names = ("ids", "alpha", "tau", "kw_ptr", "kw_terms")
    out = {k: np.asarray(getattr(obj, k)) for k in names if hasattr(obj, k)}
    pts = obj.points  # type: ignore[attr-defined]
    out.update(edge=np.asarray(pts.edge), offset=np.asarray(pts.offset))
    return out


@pytest.mark.spark
def test_frames_equal_the_local_reader(spark: SparkSession, andorra: RoadNetwork,
                                       andorra_cells: Cells, files: tuple[Path, Path, Path],
                                       ) -> None:
    subs_path, msgs_path, weights_path = files
    local_w = read_weights(weights_path)
    local_s = read_subscriptions(subs_path, andorra, local_w)
    local_m = read_messages(msgs_path, andorra, local_w)
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(64 * 1024))
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "500")
    try:
        weights = read_weights(weights_path)
        subs = read_subscriptions_frame(spark, str(subs_path), andorra, andorra_cells,
                                        weights, dmax_m=DMAX_M)
        assert subs.rdd.getNumPartitions() > 1
        # Unknown keywords were added with the local reader's ids, in its order.
        assert len(weights) > len(read_weights(weights_path))
        assert weights.terms == local_w.terms
        msgs = read_messages_frame(spark, f"file://{msgs_path}", andorra, andorra_cells,
                                   weights)
        got_s = subscriptions_from_arrow(subs.toArrow())
        got_m = messages_from_arrow(msgs.toArrow())
        stats = cell_stats(subs, andorra_cells.n_cells)
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    for got, want in ((got_s, local_s), (got_m, local_m)):
        for name, value in _columns(want).items():
            np.testing.assert_array_equal(_columns(got)[name], value, err_msg=name)
    assert stats.n_subscriptions == len(local_s)
    np.testing.assert_array_equal(
        stats.load, np.bincount(andorra_cells.edge_cell[local_s.points.edge],
                                minlength=andorra_cells.n_cells))


@pytest.mark.spark
def test_bad_rows_give_one_error_naming_the_file(
        spark: SparkSession, andorra: RoadNetwork, andorra_cells: Cells,
        files: tuple[Path, Path, Path], tmp_path: Path) -> None:
    subs_path, _, weights_path = files
    table = pq.read_table(subs_path)
    alpha = table.column("alpha").to_numpy().copy()
    alpha[5] = 1.5
    ids = table.column("id").to_numpy().copy()
    ids[-1] = ids[0]  # a duplicate far from its twin: another task finds it
    bad = table.set_column(table.column_names.index("alpha"), "alpha", pa.array(alpha))
    bad = bad.set_column(bad.column_names.index("id"), "id", pa.array(ids))
    bad_path = tmp_path / "bad subs.parquet"
    pq.write_table(bad, bad_path, row_group_size=700)
    with pytest.raises(InvalidSubscriptionError) as info:
        read_subscriptions_frame(spark, str(bad_path), andorra, andorra_cells,
                                 read_weights(weights_path), dmax_m=DMAX_M)
    text = str(info.value)
    assert text.startswith(f"invalid subscriptions in {bad_path}: ")
    assert f"alpha missing or outside [0, 1]: ids {ids[5]}" in text
    assert f"duplicate ids: {ids[0]}" in text
    with pytest.raises(InvalidMessageError, match="has alpha and tau columns"):
        read_messages_frame(spark, str(subs_path), andorra, andorra_cells,
                            read_weights(weights_path))
    with pytest.raises(FileNotFoundError, match=r"missing\.parquet"):
        read_messages_frame(spark, f"file://{tmp_path}/missing.parquet", andorra,
                            andorra_cells, read_weights(weights_path))


@pytest.mark.spark
def test_expiring_subscriptions_are_refused(
        spark: SparkSession, andorra: RoadNetwork, andorra_cells: Cells,
        files: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """The Spark jobs match without expiry: a file that sets expires_at gets one error
    naming it and the ids (Parquet read by the executors, JSON on the driver); an empty
    column is read as before."""
    subs_path, _, weights_path = files
    table = pq.read_table(subs_path)
    n = table.num_rows
    ids = table.column("id").to_numpy()
    expires = pa.array([1.8e9 if k in (7, n - 1) else None for k in range(n)], pa.float64())
    expiring = tmp_path / "expiring.parquet"
    pq.write_table(table.append_column("expires_at", expires), expiring, row_group_size=700)
    as_json = tmp_path / "expiring.jsonl"
    rows = table.slice(0, 10).to_pylist()
    rows[7]["expires_at"] = 1.8e9
    as_json.write_text("".join(json.dumps(r) + "\n" for r in rows))
    two = ", ".join(str(i) for i in sorted((ids[7], ids[n - 1])))
    for path, named in ((expiring, f"ids {two}"), (as_json, f"ids {ids[7]}")):
        with pytest.raises(InvalidSubscriptionError) as info:
            read_subscriptions_frame(spark, str(path), andorra, andorra_cells,
                                     read_weights(weights_path), dmax_m=DMAX_M)
        text = str(info.value)
        assert text.startswith(f"invalid subscriptions in {path}: expires_at set ({named})")
        assert "'roadpubsub match' does" in text
    empty = tmp_path / "never.parquet"
    pq.write_table(table.append_column("expires_at", pa.nulls(n, pa.float64())), empty)
    got = read_subscriptions_frame(spark, str(empty), andorra, andorra_cells,
                                   read_weights(weights_path), dmax_m=DMAX_M)
    assert got.count() == n
