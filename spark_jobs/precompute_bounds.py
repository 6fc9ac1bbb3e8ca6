"""Spark job: the cell-pair distance bound table of a road network, written to Parquet.

The table is what :func:`roadpubsub.roadnet.cell_bounds.compute_cell_bounds` computes in one
process: for every ordered cell pair (i, j) the least (``D``) and largest reached
(``D_far``) network distance in metres from a border vertex of cell i to one of cell j.

The job is split by subject:

:mod:`roadpubsub.spark_jobs.dijkstra_engine`
    ``--engine dijkstra`` (default): one border Dijkstra per cell in the tasks, the very
    function of the local path; bit-identical to the local table.
:mod:`roadpubsub.spark_jobs.graphframes_engine`
    ``--engine graphframes``: GraphFrames Pregel over the border overlay of cell and
    region cliques (needs the GraphFrames JVM package); bit-identical to ``dijkstra``.
:mod:`roadpubsub.spark_jobs.bound_table`
    The output format (Parquet rows and ``_roadpubsub_bounds.json``), the network and
    cells fingerprints, and the reader :func:`load_bounds_table`.
:mod:`roadpubsub.spark_jobs.payload`
    Network and cells broadcasts.

This module is the job itself: :func:`precompute_cell_bounds` (in memory),
:func:`write_bounds_table` (the one place that writes a table; a re-run replaces the
directory atomically, :func:`roadpubsub.spark_jobs.storage.atomic_output_dir`) and the
command line. The loader, the payloads and the GraphFrames checks are imported from the
modules above, where they are defined.

Examples
--------
Precompute on every local core, then build an index on the table::

    spark-submit spark_jobs/precompute_bounds.py ../shared/data/dimacs/rome.gr.gz \\
        --out rome.bounds
    roadpubsub spark precompute-bounds ../shared/data/dimacs/rome.gr.gz --out rome.bounds

    >>> from roadpubsub.spark_jobs.bound_table import load_bounds_table  # doctest: +SKIP
    >>> cells = build_cells(network)                                 # doctest: +SKIP
    >>> spatial = SpatialIndex.build(network, cells=cells,
    ...                              bounds=load_bounds_table("rome.bounds", network, cells))
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from roadpubsub.roadnet.cell_bounds import CellBounds
from roadpubsub.roadnet.cells import Cells, build_cells
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.settings import DEFAULTS
from roadpubsub.spark_jobs import storage, storage_paths
from roadpubsub.spark_jobs.bound_table import (
    BOUNDS_META_FILE,
    bounds_meta,
    rows_batch,
    table_from_rows,
)
from roadpubsub.spark_jobs.dijkstra_engine import dijkstra_rows
from roadpubsub.spark_jobs.graphframes_engine import (
    GRAPHFRAMES_JAVA_OPTIONS,
    graphframes_package,
    graphframes_tables,
    require_graphframes,
)
from roadpubsub.spark_jobs.session import (
    add_spark_arguments,
    log,
    run_job,
    session_from_args,
    stage,
)

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

__all__ = [
    "BATCH_CELLS",
    "ENGINES",
    "add_arguments",
    "build_parser",
    "main",
    "precompute_cell_bounds",
    "run",
    "write_bounds_table",
]

FloatArray = npt.NDArray[np.float64]

#: Engines of the job.
ENGINES = ("dijkstra", "graphframes")
#: Source cells per Pregel run of the graphframes engine (at most; batches are evened
#: out). A superstep's rows carry about 2 fields per source cell; at 267 (Rome in one
#: batch) Spark's Java compiler spent 2 minutes on the first superstep's code and failed
#: (then interpreted), so batches stay narrow enough for quickly compiled code.
BATCH_CELLS = DEFAULTS.bounds_batch_cells


# ---------------------------------------------------------------------------- public API
def precompute_cell_bounds(
    spark: SparkSession,
    network: RoadNetwork,
    cells: Cells,
    *,
    engine: str = "dijkstra",
    limit: float = math.inf,
    partitions: int | None = None,
    batch_cells: int = BATCH_CELLS,
) -> CellBounds:
    """The bound table computed on Spark, returned in memory (nothing is written).

    Parameters
    ----------
    engine
        ``"dijkstra"`` or ``"graphframes"`` (see the module docstring).
    limit
        Search radius in metres (``inf``: exact table).
    partitions
        Spark tasks for the per-cell work (default: 4 per core, at most one per cell).
    batch_cells
        Source cells per Pregel run (graphframes engine; at most, batches are evened
        out).

    Raises
    ------
    GraphFramesNotFoundError
        ``engine="graphframes"`` without the GraphFrames JVM package.
    """
    D, D_far = _compute_rows(spark, network, cells, engine=engine, limit=limit,
                             partitions=partitions, batch_cells=batch_cells)
    return CellBounds.from_rows(network, cells, D, D_far)


def _compute_rows(spark: SparkSession, network: RoadNetwork, cells: Cells, *, engine: str,
                  limit: float, partitions: int | None, batch_cells: int
                  ) -> tuple[FloatArray, FloatArray]:
    _check_engine(engine)
    if engine == "graphframes":
        return graphframes_tables(spark, network, cells, limit=limit, partitions=partitions,
                                   batch_cells=batch_cells)
    with stage(spark, f"precompute-bounds: {cells.n_cells} border Dijkstras (dijkstra engine)"):
        rows = dijkstra_rows(spark, network, cells, limit=limit,
                             partitions=partitions).toArrow()
    return table_from_rows(rows, cells.n_cells)


def _check_engine(engine: str) -> None:
    if engine not in ENGINES:
        msg = f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}"
        raise InputError(msg)


def write_bounds_table(
    spark: SparkSession,
    network: RoadNetwork,
    cells: Cells,
    out: str | Path,
    *,
    engine: str = "dijkstra",
    limit: float = math.inf,
    capacity: int | None = None,
    max_depth: int | None = None,
    partitions: int | None = None,
    batch_cells: int = BATCH_CELLS,
) -> str | Path:
    """Compute the table on Spark and write it to the directory ``out`` (atomically).

    ``out`` may be a local path or a storage URL (:mod:`roadpubsub.spark_jobs.storage`).

    ``capacity`` and ``max_depth`` are only recorded (the cells are given). See
    :func:`precompute_cell_bounds` for the other parameters.

    Returns
    -------
    str or Path
        The output directory (a Path for a local ``out``).
    """
    _check_engine(engine)
    t0 = time.perf_counter()
    with storage.atomic_output_dir(out, spark=spark) as tmp:
        if engine == "dijkstra":
            df = dijkstra_rows(spark, network, cells, limit=limit, partitions=partitions)
        else:
            D, D_far = graphframes_tables(spark, network, cells, limit=limit,
                                           partitions=partitions, batch_cells=batch_cells)
            n = cells.n_cells
            rows = [np.asarray(D[i]) for i in range(n)]
            fars = [np.asarray(D_far[i]) for i in range(n)]
            df = spark.createDataFrame(pa.Table.from_batches(
                [rows_batch(list(range(n)), rows, fars, n)]))
        with stage(spark, f"precompute-bounds: {cells.n_cells} rows ({engine} engine) "
                          f"-> {out}"):
            df.write.mode("errorifexists").parquet(storage_paths.spark_uri(tmp))
        meta = bounds_meta(network, cells, engine=engine, limit=limit, capacity=capacity,
                           max_depth=max_depth, seconds=time.perf_counter() - t0)
        storage.write_text(f"{tmp}/{BOUNDS_META_FILE}", json.dumps(meta, indent=1) + "\n",
                           spark=spark)
    local = storage_paths.local_path(out)
    return local if local is not None else str(out)


# ---------------------------------------------------------------------------- command line
_EXAMPLE = """\
example:
  spark-submit spark_jobs/precompute_bounds.py ../shared/data/dimacs/rome.gr.gz \\
      --out rome.bounds --master 'local[*]'
  roadpubsub spark precompute-bounds ../shared/data/dimacs/rome.gr.gz --out rome.bounds
  # GraphFrames engine (needs the JVM package):
  roadpubsub spark precompute-bounds NETWORK --out DIR --engine graphframes \\
      --packages {package}
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the job (shared by the script and ``roadpubsub spark``)."""
    parser.add_argument("network",
                        help="road network file (any format roadpubsub.roadnet.io reads; "
                             "a path or URL)")
    parser.add_argument("--out", required=True,
                        help="output directory of the table (a path or URL)")
    parser.add_argument("--engine", choices=ENGINES, default="dijkstra",
                        help="dijkstra: one border Dijkstra per cell in the tasks (default); "
                             "graphframes: Pregel over the border overlay")
    parser.add_argument("--cell-capacity", "--capacity", dest="capacity", type=int,
                        default=DEFAULTS.cell_capacity,
                        help="PMR cell capacity in edges (default: %(default)s)")
    parser.add_argument("--max-depth", type=int, default=DEFAULTS.cell_max_depth,
                        help="deepest quadtree level (default: %(default)s)")
    parser.add_argument("--limit", type=float, default=math.inf,
                        help="search radius in metres (default: unbounded, the exact table)")
    parser.add_argument("--directed", action="store_true",
                        help="honour one-way roads (must match the index that loads it)")
    parser.add_argument("--partitions", type=int, default=None,
                        help="Spark tasks for the per-cell work (default: 4 per core)")
    parser.add_argument("--batch-cells", type=int, default=BATCH_CELLS,
                        help="source cells per Pregel run (graphframes engine)")
    add_spark_arguments(parser)


def build_parser() -> argparse.ArgumentParser:
    """The job's argument parser."""
    parser = argparse.ArgumentParser(
        prog="precompute_bounds.py",
        description="Compute the cell-pair distance bound table of a road network on Spark "
                    "and write it as Parquet.",
        epilog=_EXAMPLE.format(package=graphframes_package()),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    """Run the job for parsed arguments; returns the exit code."""
    from roadpubsub.roadnet.io import load_network

    if args.capacity < 1 or (args.partitions is not None and args.partitions < 1) \
            or args.batch_cells < 1 or not args.limit > 0:
        msg = "--cell-capacity, --partitions and --batch-cells must be >= 1 and --limit > 0"
        raise InputError(msg)
    local_out = storage_paths.local_path(args.out) is not None
    if local_out:  # a local output is checked before Spark starts
        storage.check_output(None, args.out, folder=True, what="--out", inputs=(args.network,))
    local_net = storage_paths.local_path(args.network)
    if local_net is not None and not local_net.exists():
        msg = f"network file not found: {args.network}"
        raise FileNotFoundError(msg)
    spark = session_from_args(args, app_name="roadpubsub precompute-bounds",
                              java_options=GRAPHFRAMES_JAVA_OPTIONS
                              if args.engine == "graphframes" else ())
    if not local_out:
        storage.check_output(spark, args.out, folder=True, what="--out",
                             inputs=(args.network,))
    t0 = time.perf_counter()
    with storage.local_copies(storage.network_files(args.network), spark=spark) as files:
        network = load_network(files[0], directed=args.directed)
    cells = build_cells(network, capacity=args.capacity, max_depth=args.max_depth)
    log(f"{network.name}: {network.n_nodes} nodes, {network.n_edges} edges, "
        f"{cells.n_cells} cells (capacity {args.capacity}) in {time.perf_counter() - t0:.1f} s")
    if args.engine == "graphframes":
        require_graphframes(spark)  # fail before any work
    out = write_bounds_table(spark, network, cells, args.out, engine=args.engine,
                             limit=args.limit, capacity=args.capacity,
                             max_depth=args.max_depth, partitions=args.partitions,
                             batch_cells=args.batch_cells)
    log(f"wrote {cells.n_cells}x{cells.n_cells} bound table to {out} "
        f"in {time.perf_counter() - t0:.1f} s")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Script entry point (``spark-submit spark_jobs/precompute_bounds.py ...``)."""
    return run_job(run, build_parser().parse_args(argv), name="precompute-bounds")


if __name__ == "__main__":  # pragma: no cover
    from roadpubsub.spark_jobs.precompute_bounds import main as _main

    sys.exit(_main())
