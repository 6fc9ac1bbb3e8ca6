"""The batch-match job: deliveries equal the single-process EIA matcher; output is atomic."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from pyspark.sql import SparkSession

from roadpubsub.cli import main as cli_main
from roadpubsub.index.eia import EnhancedIndex
from roadpubsub.index.io import read_deliveries, write_messages, write_subscriptions, write_weights
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.workload import Workload, generate_workload
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.pruning.indexed import IndexMatcher
from roadpubsub.pruning.routing import CellRouter, cell_distance_limits, partition_cells
from roadpubsub.roadnet.cell_bounds import CellBounds
from roadpubsub.roadnet.cells import Cells
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.spark_jobs.batch_match import batch_match, write_batch_deliveries
from roadpubsub.spark_jobs.precompute_bounds import write_bounds_table

DMAX_M = 2000.0


@pytest.fixture(scope="module")
def spatial(andorra: RoadNetwork, andorra_cells: Cells, andorra_bounds: CellBounds
            ) -> SpatialIndex:
    return SpatialIndex.build(andorra, cells=andorra_cells, bounds=andorra_bounds)


@pytest.fixture(scope="module")
def workload(andorra: RoadNetwork, tweets_csv: Path) -> Workload:
    return generate_workload(andorra, n_subscriptions=20_000, n_messages=150, seed=7,
                             tweets=tweets_csv)


@pytest.fixture(scope="module")
def reference(spatial: SpatialIndex, workload: Workload) -> Deliveries:
    index = EnhancedIndex(spatial, workload.subscriptions, workload.weights, dmax_m=DMAX_M)
    deliveries = IndexMatcher(index).match(workload.messages)
    assert len(deliveries) > 100  # a workload that delivers something
    return deliveries


def _assert_same(got: Deliveries | dict[str, np.ndarray], want: Deliveries) -> None:
    cols = got if isinstance(got, dict) else got.to_columns()
    for name, value in want.to_columns().items():
        np.testing.assert_array_equal(cols[name], value, err_msg=name)


def test_routing_keeps_every_partition_with_a_delivery(
        spatial: SpatialIndex, workload: Workload, reference: Deliveries) -> None:
    subs = workload.subscriptions
    cell = spatial.cells.edge_cell[subs.points.edge]
    part = partition_cells(np.bincount(cell, minlength=spatial.cells.n_cells), 4)
    assert np.all(np.diff(part) >= 0) and set(part.tolist()) == {0, 1, 2, 3}
    router = CellRouter(spatial=spatial, cell_part=part,
                        cell_dn_limit=cell_distance_limits(spatial, subs, dmax_m=DMAX_M))
    rows, parts = router.route(workload.messages.points)
    routed = set(zip(workload.messages.ids[rows].tolist(), parts.tolist(), strict=True))
    sub_part = dict(zip(subs.ids.tolist(), part[cell].tolist(), strict=True))
    needed = {(m, sub_part[s]) for m, s in reference.pairs()}
    assert needed <= routed
    assert len(routed) < 4 * len(workload.messages)  # and it does prune


@pytest.mark.spark
def test_batch_match_equals_single_process_eia(
        spark: SparkSession, spatial: SpatialIndex, workload: Workload,
        reference: Deliveries) -> None:
    got = batch_match(spark, spatial, workload.subscriptions, workload.messages,
                      workload.weights, dmax_m=DMAX_M, n_partitions=3)
    _assert_same(got, reference)


@pytest.mark.spark
def test_output_is_replaced_atomically_and_never_duplicated(
        spark: SparkSession, spatial: SpatialIndex, workload: Workload, reference: Deliveries,
        tmp_path: Path) -> None:
    out = tmp_path / "deliveries.parquet"
    args = (spark, spatial, workload.subscriptions, workload.messages, workload.weights, out)
    write_batch_deliveries(*args, dmax_m=DMAX_M, n_partitions=2)
    _assert_same(read_deliveries(out), reference)
    first = sorted(os.listdir(out))
    # A re-run replaces the output as a whole.
    write_batch_deliveries(*args, dmax_m=DMAX_M, n_partitions=3)
    _assert_same(read_deliveries(out), reference)
    second = sorted(os.listdir(out))
    assert first != second
    # A failed job leaves the previous output as it was, and no temporaries.
    with pytest.raises(Exception, match="injected failure"):
        write_batch_deliveries(*args, dmax_m=DMAX_M, n_partitions=2, fault="always")
    assert sorted(os.listdir(out)) == second
    _assert_same(read_deliveries(out), reference)
    assert os.listdir(tmp_path) == ["deliveries.parquet"]
    # A task that fails once and is retried by Spark duplicates nothing.
    write_batch_deliveries(*args, dmax_m=DMAX_M, n_partitions=2, fault="first-attempt")
    _assert_same(read_deliveries(out), reference)


@pytest.mark.spark
def test_cli_batch_match_from_files(
        spark: SparkSession, andorra: RoadNetwork, andorra_cells: Cells, andorra_path: Path,
        andorra_capacity: int, workload: Workload, reference: Deliveries,
        tmp_path: Path) -> None:
    write_subscriptions(workload.subscriptions, tmp_path / "subs.parquet", network=andorra,
                        weights=workload.weights)
    write_messages(workload.messages, tmp_path / "msgs.parquet", network=andorra,
                   weights=workload.weights)
    write_weights(workload.weights, tmp_path / "weights.parquet")
    bounds = write_bounds_table(spark, andorra, andorra_cells, tmp_path / "andorra.bounds")
    out = tmp_path / "out.parquet"
    code = cli_main(["spark", "batch-match", str(andorra_path),
                     "--subscriptions", str(tmp_path / "subs.parquet"),
                     "--messages", str(tmp_path / "msgs.parquet"),
                     "--weights", str(tmp_path / "weights.parquet"),
                     "--bounds", str(bounds), "--capacity", str(andorra_capacity),
                     "--dmax", str(DMAX_M), "--out", str(out)])
    assert code == 0
    _assert_same(read_deliveries(out), reference)
    # A table of other cells is refused with one line.
    code = cli_main(["spark", "batch-match", str(andorra_path),
                     "--subscriptions", str(tmp_path / "subs.parquet"),
                     "--messages", str(tmp_path / "msgs.parquet"),
                     "--weights", str(tmp_path / "weights.parquet"),
                     "--bounds", str(bounds), "--out", str(tmp_path / "x.parquet")])
    assert code == 2 and not (tmp_path / "x.parquet").exists()
