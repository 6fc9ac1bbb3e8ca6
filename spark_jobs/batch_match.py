"""Spark job: deliveries of a large message set against a large subscription set.

Plan (the driver reads nothing big)
-----------------------------------
1. The network and the weights table (small files, read whole on the driver through
   :mod:`roadpubsub.spark_jobs.storage`) are loaded and the cells built. Subscriptions and messages
   are read by the executors as distributed DataFrames, each row located on the network
   and given its cell in the tasks (:mod:`roadpubsub.spark_jobs.cell_frames`). Only per-cell figures
   (load, DNlimit) come back to the driver.
2. Cells are split into partitions: contiguous runs of cells in Z-order with about equal
   numbers of subscriptions (:func:`roadpubsub.pruning.routing.partition_cells`); all subscriptions
   of a cell, hence of an edge, are in one partition.
3. Routing (one Spark task per partition, over the messages of its cells): each message
   goes only to the partitions that hold a cell surviving Lemma 2 for it
   (:class:`roadpubsub.pruning.routing.CellRouter`, the numba ``cell_lower_bounds`` kernel against
   DNlimit(ci)). The task reads the bound table's columns of its cells.
4. Matching (one Spark task per partition, a cogroup of its subscriptions, its rows of
   the bound table and its routed messages): the task builds an
   :class:`~roadpubsub.index.eia.EnhancedIndex` of its subscriptions and runs
   :class:`~roadpubsub.pruning.indexed.IndexMatcher`. (Steps 2-4:
   :mod:`roadpubsub.spark_jobs.match_plan`.)
5. One output row per delivery (``message_id``, ``subscription_id``, ``distance`` metres,
   ``score``), written as Parquet.

Subscription kinds (issue 21): the subscriptions file may mix threshold, boolean and
top-k rows (the ``kind`` column that ``roadpubsub match`` reads). Boolean subscriptions
are stateless per message and go through steps 2-5 beside the threshold ones (their
radius is their cell's routing limit; the task matches them with
:class:`roadpubsub.pruning.boolean.BooleanIndexMatcher`). Top-k subscriptions depend on the message
order (window ``--window``): they are partitioned by cell too, and each of their tasks
runs :class:`roadpubsub.pruning.topk.TopkIndexMatcher` over the whole message stream in file order,
exact because top-k state is per subscription; their events go to ``--topk-out``. See
:mod:`roadpubsub.spark_jobs.batch_kinds`.

Routes and areas (issue 32): under ``roadpubsub spark batch-match``, a local
subscriptions file with a GeoJSON ``geometry`` column (as ``roadpubsub match`` reads it)
is read on the driver by the command line's reader, which resolves every route and area
once; the point rows then go through steps 2-5 and the set rows through a stage of
their own (:mod:`roadpubsub.spark_jobs.batch_sets`; the driver builds the cell bounds the
set matchers need, ``--bounds`` is used for the point rows only). The script entry
point (``spark-submit``) does not read geometry columns.

The bound table is a DataFrame throughout (a table directory read by the executors, or
computed on Spark when none is given), shuffled to the partitions that need each row
(:mod:`roadpubsub.spark_jobs.bound_frames`); it is never broadcast.

Why the result equals the single-process ``IndexMatcher(EnhancedIndex(all subscriptions))``:
every bound the EIA pruning uses for a subscription depends only on the subscription, its
edge and its cell, and those are all in one partition, with the bound table's rows of its
cells; a partition left out by routing is one whose index would have pruned every cell
(the same test, the same slack); distances are exact and scores come from
:mod:`roadpubsub.pruning.similarity`, with the term ids of the local reader. Each delivery (m, s)
is produced by exactly one task: the one holding s.

Output safety: the deliveries are written by Spark's commit protocol (a retried task's
files replace the failed attempt's; a task's output is deterministic: subscriptions and
messages are sorted by id in the task) into a temporary directory beside the output
that replaces it only when the whole job succeeded
(:func:`roadpubsub.spark_jobs.storage.atomic_output_dir`; local paths and storage URLs alike).
``index.io.read_deliveries`` reads a local output.

Examples
--------
::

    spark-submit spark_jobs/batch_match.py hdfs://nn/roads/rome.gr.gz \\
        --subscriptions hdfs://nn/work/subscriptions.parquet \\
        --messages hdfs://nn/work/messages.parquet --weights hdfs://nn/work/weights.parquet \\
        --bounds hdfs://nn/work/rome.bounds --out hdfs://nn/work/rome.deliveries.parquet
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roadpubsub.index.model import Messages, Subscriptions
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.terms import TermWeights
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.roadnet.cells import Cells, build_cells
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.lengths import check_dmax
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.settings import DEFAULTS
from roadpubsub.spark_jobs import storage, storage_paths
from roadpubsub.spark_jobs.arrow_batches import (
    deliveries_from_arrow,
)
from roadpubsub.spark_jobs.bound_frames import bounds_frame, read_bounds_frame
from roadpubsub.spark_jobs.cell_frames import (
    SUBSCRIPTION_SCHEMA,
    cell_stats,
    kind_counts,
    messages_frame,
    subscription_set_frame,
    subscriptions_frame,
)
from roadpubsub.spark_jobs.dijkstra_engine import dijkstra_rows
from roadpubsub.spark_jobs.match_plan import (
    deliveries_frame,
    job_settings,
    plan_match,
)
from roadpubsub.spark_jobs.read_frames import read_messages_frame, read_subscription_set_frame
from roadpubsub.spark_jobs.session import (
    add_spark_arguments,
    log,
    run_job,
    session_conf,
    session_from_args,
    stage,
)

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "add_arguments",
    "batch_match",
    "build_parser",
    "main",
    "match_frames",
    "run",
    "write_batch_deliveries",
    "write_deliveries_frame",
]

def match_frames(
    spark: SparkSession,
    network: RoadNetwork,
    cells: Cells,
    weights: TermWeights,
    subs: DataFrame,
    messages: DataFrame,
    bounds: DataFrame,
    *,
    out: str | Path | None = None,
    dmax_m: float = DEFAULTS.dmax_m,
    tolerance: float = DEFAULTS.score_tolerance,
    n_partitions: int | None = None,
    bounds_name: str = "bound table",
    fault: str | None = None,
    timer: Any = None,
    phases: dict[str, float] | None = None,
) -> Deliveries | None:
    """Plan and run the match on frames; write the deliveries to ``out`` (a local path or
    URL, replaced atomically) or, without ``out``, collect them (sorted by message,
    subscription). ``phases`` receives the seconds of the planning phases."""
    phases = {} if phases is None else phases
    t0 = time.perf_counter()
    with stage(spark, "batch-match: per-cell load and DNlimit"):
        stats = cell_stats(subs, cells.n_cells)
    t1 = time.perf_counter()
    plan = plan_match(spark, cells, stats, dmax_m=dmax_m, tolerance=tolerance,
                      n_partitions=n_partitions)
    t2 = time.perf_counter()
    phases["per-cell load and DNlimit"] = t1 - t0
    phases["driver: plan (partitions, keys)"] = t2 - t1
    what = (f"batch-match: {stats.n_subscriptions} subscriptions in {plan.n_partitions} "
            f"partitions")
    with session_conf(spark, job_settings(plan)):
        frame = deliveries_frame(spark, plan, network, weights, subs, messages, bounds,
                                 bounds_name=bounds_name, fault=fault, timer=timer)
        if out is None:
            t0 = time.perf_counter()
            with stage(spark, what):
                table = frame.toArrow()
            phases["route and match (collected)"] = time.perf_counter() - t0
            return deliveries_from_arrow(table)
        t0 = time.perf_counter()
        with storage.atomic_output_dir(out, spark=spark) as tmp, stage(spark, f"{what} -> {out}"):
            frame.sortWithinPartitions("message_id", "subscription_id") \
                .write.mode("errorifexists").parquet(storage_paths.spark_uri(tmp))
        phases["route, match and write"] = time.perf_counter() - t0
    return None


def batch_match(
    spark: SparkSession,
    spatial: SpatialIndex,
    subs: Subscriptions,
    messages: Messages,
    weights: TermWeights,
    *,
    dmax_m: float = DEFAULTS.dmax_m,
    tolerance: float = DEFAULTS.score_tolerance,
    n_partitions: int | None = None,
) -> Deliveries:
    """Deliveries of objects held in memory, computed on Spark and collected.

    Equal to ``IndexMatcher(EnhancedIndex(spatial, subs, weights, dmax_m=dmax_m)).match(
    messages)[0]``. The inputs are shipped from the driver (for notebooks and tests); the
    job (:func:`run`) reads files on the executors instead. See :func:`plan_match` for
    ``n_partitions``.
    """
    result = match_frames(
        spark, spatial.network, spatial.cells, weights,
        subscriptions_frame(spark, subs, spatial.cells, dmax_m=dmax_m, tolerance=tolerance),
        messages_frame(spark, messages, spatial.cells), bounds_frame(spark, spatial.bounds),
        dmax_m=dmax_m, tolerance=tolerance, n_partitions=n_partitions)
    assert result is not None
    return result


def write_batch_deliveries(
    spark: SparkSession,
    spatial: SpatialIndex,
    subs: Subscriptions,
    messages: Messages,
    weights: TermWeights,
    out: str | Path,
    *,
    dmax_m: float = DEFAULTS.dmax_m,
    tolerance: float = DEFAULTS.score_tolerance,
    n_partitions: int | None = None,
    fault: str | None = None,
) -> str | Path:
    """:func:`batch_match`, written to the Parquet directory ``out`` (path or URL).

    The directory is replaced atomically when the job succeeds; on failure the previous
    output stays as it was. ``fault`` is for tests (see :func:`deliveries_frame`).
    """
    match_frames(
        spark, spatial.network, spatial.cells, weights,
        subscriptions_frame(spark, subs, spatial.cells, dmax_m=dmax_m, tolerance=tolerance),
        messages_frame(spark, messages, spatial.cells), bounds_frame(spark, spatial.bounds),
        out=out, dmax_m=dmax_m, tolerance=tolerance, n_partitions=n_partitions, fault=fault)
    return out


def write_deliveries_frame(spark: SparkSession, args: argparse.Namespace, *,
                           timer: Any = None) -> dict[str, float]:
    """The job proper on parsed arguments: every input read where it lies (see the plan).

    Returns the wall-clock seconds of its phases; the ``driver:`` ones run on the driver
    alone. ``timer`` (:func:`roadpubsub.spark_jobs.session.task_timer`) collects per-task timings.
    """
    from roadpubsub.index.io import read_weights
    from roadpubsub.roadnet.io import load_network

    phases: dict[str, float] = {}
    t0 = time.perf_counter()
    # Routes and areas (issue 32): resolved on the driver by the caller, with the
    # network and weights it read (``args.sets``; see :func:`run`).
    resolved = getattr(args, "sets", None)
    if resolved is not None:
        network, weights = resolved[0], resolved[1]
    else:
        with storage.local_copies(storage.network_files(args.network), spark=spark) as files:
            network = load_network(files[0], directed=args.directed)
        with storage.local_copy(args.weights, spark=spark) as local:
            weights = read_weights(local)
    cells = build_cells(network, capacity=args.capacity)
    phases["driver: network, weights, cells"] = time.perf_counter() - t0
    log(f"read {network.name} ({cells.n_cells} cells) and {len(weights)} weights in "
        f"{phases['driver: network, weights, cells']:.1f} s")
    t0 = time.perf_counter()
    if args.bounds:
        bounds = read_bounds_frame(spark, args.bounds, network, cells)
    else:
        bounds = dijkstra_rows(spark, network, cells)
    phases["driver: bound table metadata"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    split = None
    if resolved is not None:
        from roadpubsub.spark_jobs.batch_sets import split_sets

        located = resolved[3]
        split = split_sets(resolved[2], threshold_sets=located.threshold,
                           boolean_sets=located.boolean)
        subs = subscription_set_frame(spark, split.points, cells, dmax_m=args.dmax)
        counts = split.points.counts()
        log(f"routes and areas: {len(split)} subscriptions, resolved on the driver")
    else:
        with stage(spark, f"batch-match: read and locate {args.subscriptions}"):
            subs = read_subscription_set_frame(spark, args.subscriptions, network, cells,
                                               weights, dmax_m=args.dmax, timer=timer)
            counts = kind_counts(subs)
    phases["read and locate subscriptions"] = time.perf_counter() - t0
    log(f"subscriptions per kind: {counts}")
    t0 = time.perf_counter()
    with stage(spark, f"batch-match: read and locate {args.messages}"):
        # Top-k results depend on the stream order: then the frame keeps the file order.
        messages = read_messages_frame(spark, args.messages, network, cells, weights,
                                       timer=timer, ordered=counts["topk"] > 0)
    phases["read and locate messages"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    sets = None
    if split is not None and len(split):
        from roadpubsub.spark_jobs.batch_sets import set_deliveries_frame

        spatial = SpatialIndex.build(network, capacity=args.capacity, cells=cells)
        sets = set_deliveries_frame(spark, spatial, weights, split, messages, dmax_m=args.dmax,
                                    tolerance=DEFAULTS.score_tolerance,
                                    n_partitions=(args.partitions
                                                  or spark.sparkContext.defaultParallelism))
    if sets is None and counts["boolean"] == counts["topk"] == 0:
        threshold = subs.select(*(c.split()[0] for c in SUBSCRIPTION_SCHEMA.split(", ")))
        match_frames(spark, network, cells, weights, threshold, messages, bounds,
                     out=args.out, dmax_m=args.dmax, n_partitions=args.partitions,
                     bounds_name=args.bounds or "bound table", timer=timer, phases=phases)
    else:
        from roadpubsub.spark_jobs.batch_kinds import match_set_frames

        match_set_frames(spark, network, cells, weights, subs, messages, bounds,
                         window=getattr(args, "window", DEFAULTS.topk_window), out=args.out,
                         topk_out=getattr(args, "topk_out", None), dmax_m=args.dmax,
                         n_partitions=args.partitions,
                         bounds_name=args.bounds or "bound table", timer=timer,
                         phases=phases, counts=counts, sets=sets)
    phases["plan, route, match and write"] = time.perf_counter() - t0
    spark.catalog.clearCache()  # the frames kept for the two passes over them
    return phases


# ---------------------------------------------------------------------------- command line
_EXAMPLE = """\
example:
  roadpubsub generate ...   # or any subscriptions/messages/weights files
  spark-submit spark_jobs/batch_match.py file:///data/rome.gr.gz \\
      --subscriptions work/subscriptions.parquet --messages work/messages.parquet \\
      --weights work/weights.parquet --bounds rome.bounds --out rome.deliveries.parquet
  roadpubsub spark batch-match ../shared/data/dimacs/rome.gr.gz --subscriptions ... \\
      --messages ... --weights ... --out rome.deliveries.parquet --master 'local[2]'
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the job (shared by the script and ``roadpubsub spark``)."""
    parser.add_argument("network",
                        help="road network file (any format roadpubsub.roadnet.io reads; "
                             "a path or URL)")
    parser.add_argument("--subscriptions", required=True,
                        help="subscriptions: Parquet file or directory, read by the executors "
                             "(JSON Lines: read on the driver); a path or URL")
    parser.add_argument("--messages", required=True, help="messages file")
    parser.add_argument("--weights", required=True, help="keyword weights file")
    parser.add_argument("--out", required=True,
                        help="output Parquet directory of the deliveries to threshold and "
                             "boolean subscriptions (a path or URL)")
    parser.add_argument("--topk-out", default=None,
                        help="output Parquet directory of the top-k events (insert/evict "
                             "rows, as 'roadpubsub match --topk-out'; default: --out with "
                             "'-topk' before its suffix); written only when the "
                             "subscriptions hold top-k rows")
    parser.add_argument("--window", type=int, default=DEFAULTS.topk_window, metavar="W",
                        help="top-k subscriptions: results come from the last W messages, "
                             "in file order (default: %(default)s, as roadpubsub match)")
    parser.add_argument("--bounds", default=None,
                        help="bound table directory from precompute-bounds "
                             "(default: computed on Spark now)")
    parser.add_argument("--cell-capacity", "--capacity", dest="capacity", type=int,
                        default=DEFAULTS.cell_capacity,
                        help="PMR cell capacity; must match --bounds (default: %(default)s)")
    parser.add_argument("--dmax", type=float, default=DEFAULTS.dmax_m,
                        help="Dmax in metres (default: %(default)s)")
    parser.add_argument("--partitions", type=int, default=None,
                        help="subscription partitions, one Spark task each "
                             "(default: one per core)")
    parser.add_argument("--directed", action="store_true", help="honour one-way roads")
    add_spark_arguments(parser)


def build_parser() -> argparse.ArgumentParser:
    """The job's argument parser."""
    parser = argparse.ArgumentParser(
        prog="batch_match.py",
        description="Match a message set against a subscription set on Spark "
                    "(subscriptions partitioned by cell, messages routed by Lemma 2). The "
                    "subscriptions may mix threshold, boolean (radius) and top-k (k) rows, "
                    "as for 'roadpubsub match': threshold and boolean subscriptions are "
                    "routed and matched alike (a boolean radius is its routing limit) and "
                    "deliver to --out; top-k subscriptions are partitioned by cell and "
                    "each of their tasks runs the top-k matcher over the whole message "
                    "stream in file order (exact: top-k state is per subscription), "
                    "writing insert/evict events to --topk-out.",
        epilog=_EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    """Run the job for parsed arguments; returns the exit code."""
    from roadpubsub.pruning.kinds_reference import check_window
    from roadpubsub.spark_jobs.batch_kinds import topk_out_name

    check_dmax(args.dmax, name="--dmax")
    check_window(args.window)
    inputs = (args.network, args.subscriptions, args.messages, args.weights, args.bounds)
    topk_out = args.topk_out or topk_out_name(args.out)
    lo, lk = storage_paths.local_path(args.out), storage_paths.local_path(topk_out)
    if (topk_out.rstrip("/") == os.fspath(args.out).rstrip("/")
            or (lo is not None and lk is not None and lo.resolve() == lk.resolve())):
        msg = f"--topk-out {topk_out} is the --out directory; give another"
        raise InputError(msg)
    outputs = (("--out", args.out), ("--topk-out", topk_out))
    for what, path in outputs:  # local outputs before Spark starts, which takes seconds
        if storage_paths.local_path(path) is not None:
            storage.check_output(None, path, folder=True, what=what, inputs=inputs)
    for name, path in (("network", args.network), ("--weights", args.weights),
                       ("--subscriptions", args.subscriptions), ("--messages", args.messages),
                       ("--bounds", args.bounds)):
        local = storage_paths.local_path(path) if path else None
        if local is not None and not local.exists():
            msg = f"{name} not found: {path}"
            raise FileNotFoundError(msg)
    read_sets = getattr(args, "read_sets", None)
    if read_sets is not None:  # the command line's reader of routes and areas (issue 32)
        args.sets = read_sets(args)
    spark = session_from_args(args, app_name="roadpubsub batch-match")
    for what, path in outputs:
        if storage_paths.local_path(path) is None:
            storage.check_output(spark, path, folder=True, what=what, inputs=inputs)
    t0 = time.perf_counter()
    write_deliveries_frame(spark, args)
    log(f"wrote the deliveries to {args.out} in {time.perf_counter() - t0:.1f} s")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Script entry point (``spark-submit spark_jobs/batch_match.py ...``)."""
    return run_job(run, build_parser().parse_args(argv), name="batch-match")


if __name__ == "__main__":  # pragma: no cover
    from roadpubsub.spark_jobs.batch_match import main as _main

    sys.exit(_main())
