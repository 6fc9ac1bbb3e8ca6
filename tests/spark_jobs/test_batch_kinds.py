"""batch-match on subscription files mixing threshold, boolean and top-k rows: the same
deliveries and top-k events as ``roadpubsub match`` on the same files (Andorra, real
tweets), and bad rows refused by name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from roadpubsub.cli import main as cli_main
from roadpubsub.index.eia import EnhancedIndex
from roadpubsub.index.io import (
    read_deliveries,
    read_messages,
    read_weights,
    write_messages,
    write_subscriptions,
    write_weights,
)
from roadpubsub.index.kinds_io import read_subscription_set
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.tables import read_table
from roadpubsub.index.workload import Workload, generate_workload
from roadpubsub.pruning.boolean import BooleanIndexMatcher
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.pruning.indexed import IndexMatcher
from roadpubsub.pruning.topk import TopkIndexMatcher
from roadpubsub.roadnet.cell_bounds import CellBounds
from roadpubsub.roadnet.cells import Cells
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.spark_jobs.batch_kinds import batch_match_kinds, topk_out_name

DMAX = 2000.0
WINDOW = 40


@pytest.fixture(scope="module")
def workload(andorra: RoadNetwork, tweets_csv: Path) -> Workload:
    return generate_workload(andorra, n_subscriptions=3000, n_messages=160, seed=11,
                             tweets=tweets_csv, tau=0.5)


def _mixed(path: Path, rows: pa.Table) -> Path:
    """The rows as a third each threshold, boolean (first 1-2 keywords) and top-k."""
    n = rows.num_rows
    rng = np.random.default_rng(5)
    kind = np.array(["threshold", "boolean", "topk"])[np.arange(n) % 3]
    kws = [k[:1 + i % 2] if kd == "boolean" else k
           for i, (k, kd) in enumerate(zip(rows.column("keywords").to_pylist(), kind,
                                           strict=True))]
    alpha = rows.column("alpha").to_numpy()
    tau = rows.column("tau").to_numpy()
    radius = np.where(kind == "boolean", rng.uniform(0, DMAX, n), np.nan)
    radius[1] = 0.0  # radius 0: only messages at the very point
    k = np.where(kind == "topk", rng.integers(1, 6, n), 0)
    k[2] = 500  # k larger than the window
    out = rows.drop_columns(["keywords", "alpha", "tau"]).append_column(
        "keywords", pa.array(kws, pa.list_(pa.string())))
    out = out.append_column("kind", pa.array(kind.tolist()))
    out = out.append_column("alpha", pa.array(np.where(kind == "boolean", np.nan, alpha),
                                              from_pandas=True))
    out = out.append_column("tau", pa.array(np.where(kind == "threshold", tau, np.nan),
                                            from_pandas=True))
    out = out.append_column("radius", pa.array(radius, from_pandas=True))
    out = out.append_column("k", pa.array(np.where(k > 0, k, None).tolist(), pa.int64()))
    pq.write_table(out, path)
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, andorra: RoadNetwork,
          workload: Workload) -> Path:
    folder = tmp_path_factory.mktemp("kinds")
    write_subscriptions(workload.subscriptions, folder / "plain.parquet", network=andorra,
                        weights=workload.weights)
    _mixed(folder / "mixed.parquet", pq.read_table(folder / "plain.parquet"))
    write_messages(workload.messages, folder / "msgs.parquet", network=andorra,
                   weights=workload.weights)
    t = pq.read_table(folder / "msgs.parquet")
    # Messages in an order other than by id: the stream is the file order.
    pq.write_table(t.take(pa.array(np.random.default_rng(1).permutation(t.num_rows))),
                   folder / "msgs.parquet", row_group_size=50)
    write_weights(workload.weights, folder / "weights.parquet")
    return folder


def _inputs(folder: Path, subs: str) -> list[str]:
    return ["--subscriptions", str(folder / subs), "--messages", str(folder / "msgs.parquet"),
            "--weights", str(folder / "weights.parquet"), "--dmax", str(DMAX),
            "--window", str(WINDOW)]


@pytest.mark.spark
def test_mixed_file_equals_roadpubsub_match(
        spark: SparkSession, andorra_path: Path, files: Path, tmp_path: Path) -> None:
    local = tmp_path / "local.parquet"
    assert cli_main(["match", "--network", str(andorra_path), *_inputs(files, "mixed.parquet"),
                     "--out", str(local), "--quiet"]) == 0
    out = tmp_path / "spark.parquet"
    # Spark reads the message file (row groups of 50 rows) in several splits: the stream
    # order must survive them. (The subscriptions, one row group, stay one split.)
    spark.conf.set("spark.sql.files.maxPartitionBytes", "4096")
    try:
        assert cli_main(["spark", "batch-match", str(andorra_path),
                         *_inputs(files, "mixed.parquet"), "--partitions", "3",
                         "--capacity", "64", "--out", str(out)]) == 0
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
    want, got = read_deliveries(local), read_deliveries(out)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)
    sids = set(got["subscription_id"].tolist())
    assert any(s % 3 == 0 for s in sids) and any(s % 3 == 1 for s in sids)  # both kinds
    want_k = read_table(tmp_path / "local-topk.parquet")
    got_k = pq.read_table(tmp_path / "spark-topk.parquet")
    assert got_k.column_names == want_k.column_names
    assert got_k.to_pylist() == want_k.to_pylist()
    assert {"insert", "evict"} <= set(want_k.column("event").to_pylist())
    assert want_k.num_rows > 200


@pytest.mark.spark
def test_bad_rows_are_named_in_one_error(
        spark: SparkSession, andorra_path: Path, files: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    t = pq.read_table(files / "mixed.parquet")
    changes = [("radius", 0, 50.0, "radius on a threshold subscription: ids 0"),
               ("k", 2, 0, "k < 1: ids 2"),
               ("radius", 4, 1e9, "radius > Dmax (2000 m): ids 4"),
               ("kind", 6, "nearest", "kind not one of threshold, boolean, topk: ids 6"),
               ("tau", 8, 0.5, "tau or radius on a top-k subscription (leave them null): "
                               "ids 8")]
    for column, row, value, _ in changes:
        values = t.column(column).to_pylist()
        values[row] = value
        t = t.set_column(t.schema.get_field_index(column), column,
                         pa.array(values, t.schema.field(column).type))
    bad = tmp_path / "bad.parquet"
    pq.write_table(t, bad)
    out = tmp_path / "out.parquet"
    args = _inputs(files, "mixed.parquet")
    args[1] = str(bad)
    assert cli_main(["spark", "batch-match", str(andorra_path), *args, "--capacity", "64",
                     "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err
    for *_, said in changes:
        assert said in err
    assert not out.exists() and not Path(topk_out_name(out)).exists()


def test_topk_out_name() -> None:
    assert topk_out_name("a/d.parquet") == "a/d-topk.parquet"
    assert topk_out_name("s3a://b/x/d.parquet/") == "s3a://b/x/d-topk.parquet"
    assert topk_out_name("out") == "out-topk"


@pytest.mark.spark
def test_in_memory_equals_the_single_process_matchers(
        spark: SparkSession, andorra: RoadNetwork, andorra_cells: Cells,
        andorra_bounds: CellBounds, files: Path) -> None:
    """batch_match_kinds (objects shipped from the driver) against the CLI's matchers,
    run on one SpatialIndex: EIA and the boolean index for the deliveries, the top-k
    index over the messages in file order for the events."""
    spatial = SpatialIndex.build(andorra, cells=andorra_cells, bounds=andorra_bounds)
    weights = read_weights(files / "weights.parquet")
    subs = read_subscription_set(files / "mixed.parquet", andorra, weights, dmax_m=DMAX)
    every = read_messages(files / "msgs.parquet", andorra, weights)
    # The messages of the two busiest cells: the other partitions' routing tasks get none
    # (the full stream goes through the CLI in the test above).
    cell = andorra_cells.edge_cell[every.points.edge]
    busy = np.argsort(np.bincount(cell))[-2:]
    msgs = every.take(np.flatnonzero(np.isin(cell, busy)))
    got_d, got_e = batch_match_kinds(spark, spatial, subs, msgs, weights, window=WINDOW // 4,
                                     dmax_m=DMAX, n_partitions=3)
    eia = EnhancedIndex(spatial, subs.threshold, weights, dmax_m=DMAX)
    want_d = Deliveries.concat([
        IndexMatcher(eia).match(msgs),
        BooleanIndexMatcher(andorra, subs.boolean, weights, dmax_m=DMAX,
                            spatial=spatial).match(msgs)])
    assert len(want_d) > 10
    for name, value in want_d.to_columns().items():
        np.testing.assert_array_equal(got_d.to_columns()[name], value, err_msg=name)
    want_e = TopkIndexMatcher(andorra, subs.topk, weights, dmax_m=DMAX, window=WINDOW // 4,
                              spatial=spatial).push(msgs)
    assert got_e.rows() == want_e.rows() and len(want_e) > 50
