"""The precompute-bounds job: Spark output equals the local table; the loader checks it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from pyspark.sql import DataFrame, SparkSession

from index.io import write_subscriptions, write_weights
from index.spatial import SpatialIndex
from index.store import load_index
from index.workload import generate_workload
from pruning.brute import match_brute
from pruning.indexed import IndexMatcher
from roadnet.cell_bounds import CellBounds, compute_cell_bounds
from roadnet.cells import Cells, build_cells
from roadnet.network import RoadNetwork
from roadpubsub.cli import main as cli_main
from spark_jobs.overlay import overlay_cell_bounds
from spark_jobs.precompute_bounds import (
    BOUNDS_META_FILE,
    BoundsTableError,
    GraphFramesNotFoundError,
    PregelColumns,
    graphframes_package,
    graphframes_problem,
    load_bounds_table,
    overlay_arcs_frame,
    overlay_vertices_frame,
    precompute_cell_bounds,
    pregel_columns,
    rows_from_pregel,
    write_bounds_table,
)

FIELDS = ("kappa", "D", "D_far", "dE_min", "dE_max", "eta_minus", "eta_plus", "din_out",
          "din_in")


def _assert_identical(got: CellBounds, want: CellBounds) -> None:
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)


@pytest.mark.spark
def test_dijkstra_engine_table_equals_local_on_andorra(
        spark: SparkSession, andorra: RoadNetwork, andorra_cells: Cells,
        andorra_bounds: CellBounds, andorra_capacity: int, tmp_path: Path) -> None:
    out = write_bounds_table(spark, andorra, andorra_cells, tmp_path / "andorra.bounds",
                             capacity=andorra_capacity)
    meta = json.loads((out / BOUNDS_META_FILE).read_text(encoding="utf-8"))
    assert meta["engine"] == "dijkstra" and meta["cells"]["capacity"] == andorra_capacity
    assert meta["network"]["n_edges"] == andorra.n_edges
    table = load_bounds_table(out, andorra, andorra_cells)
    _assert_identical(table, andorra_bounds)
    # The index takes it instead of computing its own.
    spatial = SpatialIndex.build(andorra, cells=andorra_cells, bounds=table)
    assert spatial.bounds is table


@pytest.mark.spark
@pytest.mark.slow
def test_dijkstra_engine_table_equals_local_on_rome(
        spark: SparkSession, rome: RoadNetwork, rome_cells: Cells, rome_bounds: CellBounds) -> None:
    _assert_identical(precompute_cell_bounds(spark, rome, rome_cells, partitions=5),
                      rome_bounds)


@pytest.mark.spark
def test_loader_rejects_other_network_cells_and_non_tables(
        spark: SparkSession, andorra: RoadNetwork, andorra_cells: Cells, andorra_capacity: int,
        tmp_path: Path) -> None:
    out = write_bounds_table(spark, andorra, andorra_cells, tmp_path / "t.bounds",
                             capacity=andorra_capacity, limit=3000.0)
    other_cells = build_cells(andorra, capacity=4 * andorra_capacity)
    with pytest.raises(BoundsTableError, match=f"capacity {andorra_capacity}"):
        load_bounds_table(out, andorra, other_cells)
    longer = RoadNetwork(**{**andorra.to_arrays(), "edge_length": andorra.edge_length * 1.5})
    with pytest.raises(BoundsTableError, match=r"another network.*edge arrays differ"):
        load_bounds_table(out, longer, andorra_cells)
    directed = andorra.with_direction(directed=True)
    if directed.edge_oneway.any():
        with pytest.raises(BoundsTableError, match="directed"):
            load_bounds_table(out, directed, andorra_cells)
    with pytest.raises(BoundsTableError, match="not a cell-bound table"):
        load_bounds_table(tmp_path, andorra, andorra_cells)
    with pytest.raises(FileNotFoundError):
        load_bounds_table(tmp_path / "missing", andorra, andorra_cells)
    # A table missing rows is refused too.
    broken = tmp_path / "broken.bounds"
    shutil.copytree(out, broken)
    next(p for p in broken.glob("part-*.parquet") if p.stat().st_size > 0).unlink()
    with pytest.raises(BoundsTableError, match="expected"):
        load_bounds_table(broken, andorra, andorra_cells)


@pytest.mark.spark
def test_graphframes_engine_matches_dijkstra_engine(
        spark: SparkSession, rome: RoadNetwork, rome_cells: Cells, rome_bounds: CellBounds,
        andorra: RoadNetwork, andorra_cells: Cells, andorra_bounds: CellBounds) -> None:
    problem = graphframes_problem(spark)
    if problem is not None:
        pytest.skip(problem)
    # Integer lengths (Rome): bit-identical; fractional (Andorra): to the last bits.
    _assert_identical(precompute_cell_bounds(spark, rome, rome_cells, engine="graphframes",
                                             batch_cells=16), rome_bounds)
    got = precompute_cell_bounds(spark, andorra, andorra_cells, engine="graphframes")
    assert np.array_equal(np.isnan(got.D_far), np.isnan(andorra_bounds.D_far))
    np.testing.assert_array_equal(got.D, andorra_bounds.D)


def _emulated_pregel(vertices: DataFrame, arcs: DataFrame, cols: PregelColumns,
                     max_iter: int) -> DataFrame:
    """GraphFrames' Pregel loop with plain DataFrame joins: triplets (``src``, ``edge``
    structs), messages to each arc's destination aggregated as ``_pregel_msg_``, vertex
    update (old columns and the message in scope), stop when no message is sent."""
    from pyspark.sql import functions as F  # noqa: N812

    v = vertices.select("*", cols.init_dist.alias("dist"),
                        cols.init_improved.alias("improved")).localCheckpoint()
    for _ in range(max_iter):
        triplets = (arcs.alias("e")
                    .join(v.alias("s"), F.col("e.src") == F.col("s.id"))
                    .select(F.struct("s.*").alias("src"), F.struct("e.*").alias("edge")))
        msgs = (triplets.select(F.col("edge.dst").alias("id"),
                                cols.message.alias("_pregel_msg_"))
                .filter(F.col("_pregel_msg_").isNotNull())
                .groupBy("id").agg(cols.aggregate.alias("_pregel_msg_")))
        if msgs.isEmpty():
            return v
        v = (v.join(msgs, "id", "left")
             .select("id", "cells", cols.update_dist.alias("dist"),
                     cols.update_improved.alias("improved"))
             .localCheckpoint())
    msg = f"no convergence in {max_iter} supersteps"
    raise AssertionError(msg)


@pytest.mark.spark
def test_graphframes_program_on_the_overlay_equals_local_overlay(
        spark: SparkSession, andorra: RoadNetwork) -> None:
    # The graphframes engine's Pregel columns, run by an emulation of GraphFrames' Pregel
    # loop (no JVM package needed): the overlay logic and the Spark SQL expressions are
    # verified here, on the real Andorra overlay, against the local overlay search.
    cells = build_cells(andorra, capacity=256)
    arcs = overlay_arcs_frame(spark, andorra, cells, partitions=4).localCheckpoint()
    vertices = overlay_vertices_frame(spark, cells)
    n = cells.n_cells
    result = _emulated_pregel(vertices, arcs, pregel_columns(0, n), max_iter=60)
    D, D_far = rows_from_pregel(cells, result.select("id", "dist").toArrow(), 0, n)
    want = overlay_cell_bounds(andorra, cells)
    np.testing.assert_array_equal(D, want.D)
    np.testing.assert_array_equal(D_far, want.D_far)
    np.testing.assert_array_equal(D, compute_cell_bounds(andorra, cells).D)


@pytest.mark.spark
def test_graphframes_engine_without_jvm_package_stops_with_one_line(
        spark: SparkSession, andorra: RoadNetwork, andorra_cells: Cells, andorra_path: Path,
        andorra_capacity: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if graphframes_problem(spark) is None:
        pytest.skip("the GraphFrames JVM package is on the classpath")
    coordinate = graphframes_package(spark.version)
    assert coordinate.startswith("io.graphframes:graphframes-spark4_2.13:0.12.")
    with pytest.raises(GraphFramesNotFoundError, match=f"--packages {coordinate}"):
        precompute_cell_bounds(spark, andorra, andorra_cells, engine="graphframes")
    out = tmp_path / "gf.bounds"
    code = cli_main(["spark", "precompute-bounds", str(andorra_path), "--out", str(out),
                     "--engine", "graphframes", "--capacity", str(andorra_capacity)])
    assert code == 2 and not out.exists()
    err = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(err) == 1 and f"--packages {coordinate}" in err[0]


@pytest.mark.spark
def test_cli_precompute_bounds_rerun_replaces_output(
        spark: SparkSession, andorra: RoadNetwork, andorra_cells: Cells,
        andorra_bounds: CellBounds, andorra_path: Path, andorra_capacity: int,
        tmp_path: Path) -> None:
    out = tmp_path / "cli.bounds"
    args = ["spark", "precompute-bounds", str(andorra_path), "--out", str(out),
            "--capacity", str(andorra_capacity), "--master", "local[2]"]
    assert cli_main([*args, "--partitions", "3"]) == 0
    first = sorted(p.name for p in out.iterdir())
    assert cli_main([*args, "--partitions", "2"]) == 0  # re-run: replaced as a whole
    second = sorted(p.name for p in out.iterdir())
    assert first != second and sorted(p.name for p in tmp_path.iterdir()) == ["cli.bounds"]
    _assert_identical(load_bounds_table(out, andorra, andorra_cells), andorra_bounds)


@pytest.mark.parametrize("job", ["precompute_bounds", "idf", "batch_match"])
def test_job_scripts_print_help_with_an_example(job: str) -> None:
    script = Path(__file__).resolve().parents[2] / "spark_jobs" / f"{job}.py"
    out = subprocess.run([sys.executable, str(script), "--help"], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert "example:" in out and "--master" in out


@pytest.mark.spark
def test_index_build_takes_the_spark_table(
        spark: SparkSession, andorra: RoadNetwork, andorra_cells: Cells, andorra_path: Path,
        andorra_bounds: CellBounds, andorra_capacity: int, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``roadpubsub index build --bounds`` uses the job's table instead of computing one,
    and refuses a table of other cells with one line."""
    wl = generate_workload(andorra, n_subscriptions=2000, n_messages=30, seed=4)
    write_subscriptions(wl.subscriptions, tmp_path / "subs.parquet", network=andorra,
                        weights=wl.weights)
    write_weights(wl.weights, tmp_path / "weights.parquet")
    table = write_bounds_table(spark, andorra, andorra_cells, tmp_path / "andorra.bounds")
    argv = ["index", "build", "--network", str(andorra_path),
            "--subscriptions", str(tmp_path / "subs.parquet"),
            "--weights", str(tmp_path / "weights.parquet"), "--dmax", "2000",
            "--bounds", str(table), "--quiet"]
    out = tmp_path / "eia.npz"
    assert cli_main([*argv, "--cell-capacity", str(andorra_capacity), "--out", str(out),
                     "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["bounds"] == str(table)
    index = load_index(out)
    _assert_identical(index.spatial.bounds, andorra_bounds)
    got, _ = IndexMatcher(index).match(wl.messages)
    want = match_brute(andorra, wl.subscriptions, wl.messages, wl.weights, dmax_m=2000.0)
    assert got.pairs() == want.pairs() and len(want) > 0
    np.testing.assert_array_equal(got.distance, want.distance)

    other = tmp_path / "other.npz"
    assert cli_main([*argv, "--cell-capacity", str(2 * andorra_capacity),
                     "--out", str(other)]) == 2
    assert "computed for other cells" in capsys.readouterr().err
    assert not other.exists()
