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

from roadpubsub.cli import main as cli_main
from roadpubsub.index.io import write_subscriptions, write_weights
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.store import load_index
from roadpubsub.index.workload import generate_workload
from roadpubsub.pruning.brute import match_brute
from roadpubsub.pruning.indexed import IndexMatcher
from roadpubsub.roadnet.cell_bounds import CellBounds, compute_cell_bounds
from roadpubsub.roadnet.cells import Cells, build_cells
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.spark_jobs.bound_table import BOUNDS_META_FILE, BoundsTableError, load_bounds_table
from roadpubsub.spark_jobs.graphframes_engine import (
    GraphFramesNotFoundError,
    PregelColumns,
    graphframes_package,
    graphframes_problem,
    overlay_arcs_frame,
    overlay_vertices_frame,
    pregel_columns,
    rows_from_pregel,
)
from roadpubsub.spark_jobs.overlay import (
    cell_shortcuts,
    lightest_arcs,
    overlay_cell_bounds,
    region_shortcuts,
)
from roadpubsub.spark_jobs.precompute_bounds import precompute_cell_bounds, write_bounds_table

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
    # Lengths on the 2**-26 m grid make every overlay sum exact: bit-identical on Rome
    # (DIMACS) and Andorra (OSM), with and without a search limit, and in any batching.
    _assert_identical(precompute_cell_bounds(spark, rome, rome_cells, engine="graphframes",
                                             batch_cells=16), rome_bounds)
    _assert_identical(precompute_cell_bounds(spark, andorra, andorra_cells,
                                             engine="graphframes", batch_cells=64),
                      andorra_bounds)
    limited = precompute_cell_bounds(spark, andorra, andorra_cells, engine="graphframes",
                                     limit=1500.0, batch_cells=40)
    _assert_identical(limited, precompute_cell_bounds(spark, andorra, andorra_cells,
                                                      limit=1500.0))
    # The limit cut some pairs (their D is the limit, a safe lower bound past it).
    assert (limited.D == 1500.0).any() and not np.array_equal(limited.D, andorra_bounds.D)


def _emulated_pregel(vertices: DataFrame, arcs: DataFrame, cols: PregelColumns,
                     max_iter: int) -> DataFrame:
    """GraphFrames' Pregel loop as the engine configures it, with plain DataFrame joins:
    active vertices (``src`` struct) joined with the arcs (``edge`` struct), messages to
    each arc's destination aggregated as ``_pregel_msg_``, vertex update (old columns and
    the message in scope), stop when no vertex is active."""
    from pyspark.sql import functions as F  # noqa: N812

    active = "_pregel_is_active"
    v = vertices.select("*", cols.init_active.alias(active),
                        *[c.alias(n) for n, c in zip(cols.names, cols.init, strict=True)])
    v = v.localCheckpoint()
    for _ in range(max_iter):
        if v.filter(F.col(active)).isEmpty():
            return v
        triplets = (arcs.alias("e")
                    .join(v.filter(F.col(active)).alias("s"), F.col("e.src") == F.col("s.id"))
                    .select(F.struct("s.*").alias("src"), F.struct("e.*").alias("edge")))
        msgs = (triplets.select(F.col("edge.dst").alias("id"),
                                cols.message.alias("_pregel_msg_"))
                .groupBy("id").agg(cols.aggregate.alias("_pregel_msg_")))
        v = (v.join(msgs, "id", "left")
             .select("id", "cells", cols.update_active.alias(active),
                     *[c.alias(n) for n, c in zip(cols.names, cols.update, strict=True)])
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
    cols = pregel_columns(0, n)
    result = _emulated_pregel(vertices, arcs, cols, max_iter=60)
    D, D_far = rows_from_pregel(cells, result.select("id", *cols.names).toArrow(), 0, n)
    want = overlay_cell_bounds(andorra, cells)
    np.testing.assert_array_equal(D, want.D)
    np.testing.assert_array_equal(D_far, want.D_far)
    np.testing.assert_array_equal(D, compute_cell_bounds(andorra, cells).D)


def test_region_shortcuts_keep_the_overlay_exact(andorra: RoadNetwork) -> None:
    # The graphframes engine adds cliques of runs of 4 and 16 cells, searched on their
    # cells' cliques: the overlay's distances stay the network's, bit for bit, and the
    # region arcs join only border vertices of their regions.
    cells = build_cells(andorra, capacity=32)
    n = cells.n_cells
    per_cell = [cell_shortcuts(andorra, cells, c) for c in range(n)]
    parts = list(per_cell)
    owner = np.repeat(np.arange(n), np.diff(cells.border_ptr))
    for g in (4, 16):
        for lo in range(0, n, g):
            own = per_cell[lo:lo + g]
            arcs = (np.concatenate([p[0] for p in own]), np.concatenate([p[1] for p in own]),
                    np.concatenate([p[2] for p in own]))
            src, dst, w = region_shortcuts(andorra, cells, np.arange(lo, min(lo + g, n)), arcs)
            outside = np.unique(cells.border_nodes[(owner < lo) | (owner >= lo + g)])
            assert np.isin(src, outside).all() and np.isin(dst, outside).all()
            parts.append((src, dst, w))
    shortcuts = lightest_arcs(*(np.concatenate([p[i] for p in parts]) for i in range(3)))
    assert sum(p[0].size for p in parts[n:]) > 0  # the regions added arcs
    got = overlay_cell_bounds(andorra, cells, shortcuts=shortcuts)
    want = compute_cell_bounds(andorra, cells)
    np.testing.assert_array_equal(got.D, want.D)
    np.testing.assert_array_equal(got.D_far, want.D_far)


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
    got = IndexMatcher(index).match(wl.messages)
    want = match_brute(andorra, wl.subscriptions, wl.messages, wl.weights, dmax_m=2000.0)
    assert got.pairs() == want.pairs() and len(want) > 0
    np.testing.assert_array_equal(got.distance, want.distance)

    other = tmp_path / "other.npz"
    assert cli_main([*argv, "--cell-capacity", str(2 * andorra_capacity),
                     "--out", str(other)]) == 2
    assert "computed for other cells" in capsys.readouterr().err
    assert not other.exists()
