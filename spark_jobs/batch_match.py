"""Spark job: deliveries of a large message set against a large subscription set.

Plan (the driver reads nothing big)
-----------------------------------
1. The network and the weights table (small files, read whole on the driver through
   :mod:`spark_jobs.storage`) are loaded and the cells built. Subscriptions and messages
   are read by the executors as distributed DataFrames, each row located on the network
   and given its cell in the tasks (:mod:`spark_jobs.cell_frames`). Only per-cell figures
   (load, DNlimit) come back to the driver.
2. Cells are split into partitions: contiguous runs of cells in Z-order with about equal
   numbers of subscriptions (:func:`pruning.routing.partition_cells`); all subscriptions
   of a cell, hence of an edge, are in one partition.
3. Routing (one Spark task per partition, over the messages of its cells): each message
   goes only to the partitions that hold a cell surviving Lemma 2 for it
   (:class:`pruning.routing.CellRouter`, the numba ``cell_lower_bounds`` kernel against
   DNlimit(ci)). The task reads the bound table's columns of its cells.
4. Matching (one Spark task per partition, a cogroup of its subscriptions, its rows of
   the bound table and its routed messages): the task builds an
   :class:`~index.eia.EnhancedIndex` of its subscriptions and runs
   :class:`~pruning.indexed.IndexMatcher`.
5. One output row per delivery (``message_id``, ``subscription_id``, ``distance`` metres,
   ``score``), written as Parquet.

Subscription kinds (issue 21): the subscriptions file may mix threshold, boolean and
top-k rows (the ``kind`` column that ``roadpubsub match`` reads). Boolean subscriptions
are stateless per message and go through steps 2-5 beside the threshold ones (their
radius is their cell's routing limit; the task matches them with
:class:`pruning.boolean.BooleanIndexMatcher`). Top-k subscriptions depend on the message
order (window ``--window``): they are partitioned by cell too, and each of their tasks
runs :class:`pruning.topk.TopkIndexMatcher` over the whole message stream in file order,
exact because top-k state is per subscription; their events go to ``--topk-out``. See
:mod:`spark_jobs.batch_kinds`.

The bound table is a DataFrame throughout (a table directory read by the executors, or
computed on Spark when none is given), shuffled to the partitions that need each row
(:mod:`spark_jobs.bound_frames`); it is never broadcast.

Why the result equals the single-process ``IndexMatcher(EnhancedIndex(all subscriptions))``:
every bound the EIA pruning uses for a subscription depends only on the subscription, its
edge and its cell, and those are all in one partition, with the bound table's rows of its
cells; a partition left out by routing is one whose index would have pruned every cell
(the same test, the same slack); distances are exact and scores come from
:mod:`pruning.similarity`, with the term ids of the local reader. Each delivery (m, s)
is produced by exactly one task: the one holding s.

Output safety: the deliveries are written by Spark's commit protocol (a retried task's
files replace the failed attempt's; a task's output is deterministic: subscriptions and
messages are sorted by id in the task) into a temporary directory beside the output
that replaces it only when the whole job succeeded
(:func:`spark_jobs.storage.atomic_output_dir`; local paths and storage URLs alike).
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
import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from index.eia import EnhancedIndex
from index.model import Messages, Subscriptions
from index.spatial import SpatialIndex
from index.terms import TermWeights
from pruning.boolean import BooleanIndexMatcher
from pruning.deliveries import Deliveries
from pruning.indexed import IndexMatcher
from pruning.routing import CellRouter, partition_cells
from roadnet.cells import Cells, build_cells
from roadnet.errors import InputError
from roadnet.lengths import check_dmax
from roadnet.locations import EdgePoints
from roadnet.network import RoadNetwork
from roadnet.settings import DEFAULTS
from spark_jobs import storage
from spark_jobs.arrow_batches import (
    boolean_from_arrow,
    deliveries_from_arrow,
    deliveries_table,
    messages_from_arrow,
    subscriptions_from_arrow,
)
from spark_jobs.bound_frames import bounds_frame, keyed_bounds, read_bounds_frame, slice_spatial
from spark_jobs.cell_frames import (
    KIND_CODES,
    SUBSCRIPTION_SCHEMA,
    CellStats,
    cell_stats,
    messages_frame,
    read_messages_frame,
    read_subscription_set_frame,
    subscriptions_frame,
    weights_from_payload,
    weights_payload,
)
from spark_jobs.dijkstra_engine import dijkstra_rows
from spark_jobs.payload import cells_payload, network_and_cells, network_payload
from spark_jobs.session import (
    add_spark_arguments,
    broadcast_payload,
    cached_payload,
    log,
    run_job,
    session_from_args,
    stage,
)

if TYPE_CHECKING:  # pragma: no cover
    from pyspark import Broadcast
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "DELIVERY_SCHEMA",
    "FAULTS",
    "MatchPlan",
    "add_arguments",
    "batch_match",
    "boolean_from_arrow",
    "build_parser",
    "deliveries_frame",
    "main",
    "match_frames",
    "messages_from_arrow",
    "plan_match",
    "run",
    "subscriptions_from_arrow",
    "write_batch_deliveries",
    "write_deliveries_frame",
]

#: Spark schema of the output rows.
DELIVERY_SCHEMA = "message_id long, subscription_id long, distance double, score double"
#: Fault injection modes for tests: fail one partition's task always, or only its first
#: attempt (a retried attempt then succeeds).
FAULTS = ("always", "first-attempt")
_ROUTED_SCHEMA = "key int, id long, edge int, offset double, keywords array<int>"
_SUB_COLUMNS = ("id", "edge", "offset", "alpha", "tau", "keywords")
_BOOLEAN_COLUMNS = ("id", "edge", "offset", "radius", "keywords")
_BOUND_COLUMNS = ("cell_i", "cell_j", "D", "D_far")
# The ``part`` of a row of a match task's left side.
_PART_THRESHOLD, _PART_BOUND, _PART_BOOLEAN = 0, 1, 2


# ---------------------------------------------------------------------------- plan
class MatchPlan:
    """The partitioning, decided on the driver from per-cell figures only.

    Attributes
    ----------
    cells
        The network's cells.
    cell_part
        Partition of each cell.
    cell_dn_limit
        DNlimit(ci) per cell, metres (over all subscriptions).
    keys
        Group key of each partition, chosen so that Spark's hash partitioning puts each
        partition in its own task.
    dmax_m, tolerance
        Dmax in metres and the score tolerance of the delivery rule.
    """

    def __init__(self, *, cells: Cells, cell_part: npt.NDArray[np.int64],
                 cell_dn_limit: npt.NDArray[np.float64], keys: npt.NDArray[np.int32],
                 dmax_m: float, tolerance: float) -> None:
        self.cells = cells
        self.cell_part = cell_part
        self.cell_dn_limit = cell_dn_limit
        self.keys = keys
        self.dmax_m = float(dmax_m)
        self.tolerance = float(tolerance)

    @property
    def n_partitions(self) -> int:
        """Number of subscription partitions."""
        return int(self.keys.size)

    @property
    def cell_key(self) -> npt.NDArray[np.int32]:
        """Group key of each cell's partition."""
        return self.keys[self.cell_part]


def _aligned_keys(spark: SparkSession, n: int) -> npt.NDArray[np.int32]:
    """Group keys k_0..k_{n-1} with pmod(hash(k_p), n) == p: Spark's hash partitioning of
    the cogroup then gives every partition its own task (with n shuffle partitions)."""
    from pyspark.sql import functions as F  # noqa: N812

    key = F.col("id").cast("int")
    rows = (spark.range(0, 64 * n + 64)
            .select(key.alias("k"), F.pmod(F.hash(key), F.lit(n)).alias("b"))
            .groupBy("b").agg(F.min("k").alias("k")).toArrow())
    found = dict(zip(rows.column("b").to_pylist(), rows.column("k").to_pylist(), strict=True))
    used = set(found.values())
    spare = (k for k in range(64 * n + 64, 2**31 - 1) if k not in used)
    return np.asarray([found.get(p, next(spare)) for p in range(n)], dtype=np.int32)


def plan_match(spark: SparkSession, cells: Cells, stats: CellStats, *,
               dmax_m: float = DEFAULTS.dmax_m, tolerance: float = DEFAULTS.score_tolerance,
               n_partitions: int | None = None) -> MatchPlan:
    """Partition the cells by subscription load (see the module docstring).

    ``n_partitions`` defaults to the session's default parallelism (one task per core).
    """
    n = n_partitions or spark.sparkContext.defaultParallelism
    if n < 1:
        msg = f"n_partitions must be >= 1, got {n}"
        raise InputError(msg)
    return MatchPlan(cells=cells, cell_part=partition_cells(stats.load, n),
                     cell_dn_limit=stats.dn_limit, keys=_aligned_keys(spark, n),
                     dmax_m=dmax_m, tolerance=tolerance)


# ---------------------------------------------------------------------------- tasks
def _part_cells(payload: dict[str, Any], key: int) -> npt.NDArray[np.int64]:
    part = int(np.flatnonzero(payload["keys"] == key)[0])
    return np.flatnonzero(payload["cell_part"] == part)


def _route_task(bc: Broadcast[dict[str, Any]], timer: Any = None
                ) -> Callable[[Any, pa.Table, pa.Table], pa.Table]:
    """cogroup function: a partition's messages and bound-table columns -> routed rows."""

    def run(key: Any, msgs_t: pa.Table, bounds_t: pa.Table) -> pa.Table:
        t0 = time.perf_counter()
        payload = bc.value
        if msgs_t.num_rows == 0:  # typed: Spark refuses null-typed columns
            return pa.table({"key": pa.array([], pa.int32()), "id": pa.array([], pa.int64()),
                             "edge": pa.array([], pa.int32()),
                             "offset": pa.array([], pa.float64()),
                             "keywords": pa.array([], pa.list_(pa.int32()))})
        network, cells = cached_payload(bc, "cells", network_and_cells)
        k = int(key[0].as_py())
        spatial = slice_spatial(network, cells, bounds_t, _part_cells(payload, k), by="col",
                                where=payload["bounds_name"])
        t1 = time.perf_counter()
        router = CellRouter(spatial=spatial, cell_part=payload["cell_part"],
                            cell_dn_limit=payload["cell_dn_limit"])
        points = EdgePoints(np.asarray(msgs_t.column("edge").to_numpy(), dtype=np.int32),
                            np.asarray(msgs_t.column("offset").to_numpy(), dtype=np.float64))
        rows, parts = router.route(points)
        routed = msgs_t.select(["id", "edge", "offset", "keywords"]).take(pa.array(rows))
        if timer is not None:
            t2 = time.perf_counter()
            timer.add([("route:bounds slice", k, t1 - t0, bounds_t.num_rows, 0),
                       ("route:Lemma 2", k, t2 - t1, msgs_t.num_rows, int(rows.size))])
        return routed.add_column(0, "key", pa.array(payload["keys"][parts], pa.int32()))

    return run


def _match_task(bc: Broadcast[dict[str, Any]], fault: str | None, timer: Any = None
                ) -> Callable[[Any, pa.Table, pa.Table], pa.Table]:
    """cogroup function: a partition's subscriptions and bound-table rows, and its routed
    messages -> deliveries."""

    def run(key: Any, left: pa.Table, msgs_t: pa.Table) -> pa.Table:
        t0 = time.perf_counter()
        payload = bc.value
        k = int(key[0].as_py())
        if fault is not None and k == int(payload["keys"][0]):
            from pyspark import TaskContext

            ctx = TaskContext.get()
            if fault == "always" or (ctx is not None and ctx.attemptNumber() == 0):
                msg = f"injected failure ({fault}) in partition {k}"
                raise RuntimeError(msg)
        part = left.column("part")
        subs_t = left.filter(pc.equal(part, _PART_THRESHOLD))
        bool_t = left.filter(pc.equal(part, _PART_BOOLEAN))
        if subs_t.num_rows + bool_t.num_rows == 0 or msgs_t.num_rows == 0:
            return deliveries_table(Deliveries.empty())
        network, cells = cached_payload(bc, "cells", network_and_cells)
        weights = cached_payload(bc, "weights", lambda p: weights_from_payload(p["weights"]))
        bounds_t = left.filter(pc.equal(part, _PART_BOUND))
        spatial = slice_spatial(network, cells, bounds_t, _part_cells(payload, k), by="row",
                                where=payload["bounds_name"])
        t1 = time.perf_counter()
        messages = messages_from_arrow(msgs_t)
        parts = []
        if subs_t.num_rows:
            index = EnhancedIndex(spatial, subscriptions_from_arrow(subs_t), weights,
                                  dmax_m=payload["dmax_m"], tolerance=payload["tolerance"])
            t2 = time.perf_counter()
            # One thread per task: Spark already runs one task per executor core.
            parts.append(IndexMatcher(index, threads=1).match(messages)[0])
        t3 = time.perf_counter()
        if bool_t.num_rows:  # the same boolean matcher as 'roadpubsub match', on this slice
            parts.append(BooleanIndexMatcher(network, boolean_from_arrow(bool_t), weights,
                                             dmax_m=payload["dmax_m"], spatial=spatial,
                                             threads=1).match(messages))
        deliveries = Deliveries.concat(parts)
        if timer is not None:
            t4 = time.perf_counter()
            rows = [("match:bounds slice", k, t1 - t0, bounds_t.num_rows, 0)]
            if subs_t.num_rows:
                rows += [("match:EIA build", k, t2 - t1, subs_t.num_rows, 0),
                         ("match:IndexMatcher", k, t3 - t2, msgs_t.num_rows, 0)]
            if bool_t.num_rows:
                rows.append(("match:boolean", k, t4 - t3, bool_t.num_rows, 0))
            timer.add(rows)
        return deliveries_table(deliveries)

    return run


@contextlib.contextmanager
def _session_conf(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """Set SQL settings for the block, restoring the previous values after it."""
    old = {k: spark.conf.get(k, None) for k in settings}
    for k, v in settings.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, previous in old.items():
            if previous is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, previous)


def deliveries_frame(spark: SparkSession, plan: MatchPlan, network: RoadNetwork,
                     weights: TermWeights, subs: DataFrame, messages: DataFrame,
                     bounds: DataFrame, *, bounds_name: str = "bound table",
                     fault: str | None = None, timer: Any = None,
                     boolean: DataFrame | None = None) -> DataFrame:
    """The deliveries as a lazy DataFrame, from frames of subscriptions, messages
    (:mod:`spark_jobs.cell_frames`) and bound-table rows (:mod:`spark_jobs.bound_frames`).
    ``boolean``: boolean subscriptions too (``cell`` and :data:`_BOOLEAN_COLUMNS`), matched
    in the tasks that hold their cells (``plan`` made from the load and routing limits of
    both frames).

    Run it with one shuffle partition per subscription partition and AQE coalescing off,
    as :func:`match_frames` does, so that each partition's index is built in its own
    task. ``fault`` (tests only, one of :data:`FAULTS`) makes the first partition's task
    fail. ``timer`` (:func:`spark_jobs.session.task_timer`) collects per-task timings.
    """
    from pyspark.sql import functions as F  # noqa: N812

    if fault is not None and fault not in FAULTS:
        msg = f"fault must be one of {FAULTS}, got {fault!r}"
        raise InputError(msg)
    bc = broadcast_payload(spark, {
        "network": network_payload(network), "cells": cells_payload(plan.cells),
        "weights": weights_payload(weights), "cell_part": plan.cell_part,
        "cell_dn_limit": plan.cell_dn_limit, "keys": plan.keys, "dmax_m": plan.dmax_m,
        "tolerance": plan.tolerance, "bounds_name": bounds_name})
    cell_key = plan.cell_key
    keys = spark.createDataFrame(pa.table({
        "cell": pa.array(np.arange(cell_key.size, dtype=np.int32)),
        "key": pa.array(cell_key.astype(np.int32))}))
    msgs_keyed = messages.join(F.broadcast(keys), "cell")
    by_col = keyed_bounds(spark, bounds, cell_key, by="col")
    routed = (msgs_keyed.groupBy("key").cogroup(by_col.groupBy("key"))
              .applyInArrow(_route_task(bc, timer), _ROUTED_SCHEMA))
    subs_keyed = (subs.join(F.broadcast(keys), "cell")
                  .select("key", F.lit(_PART_THRESHOLD).alias("part"), *_SUB_COLUMNS))
    by_row = (keyed_bounds(spark, bounds, cell_key, by="row")
              .select("key", F.lit(_PART_BOUND).alias("part"), *_BOUND_COLUMNS))
    left = subs_keyed.unionByName(by_row, allowMissingColumns=True)
    if boolean is not None:
        left = left.unionByName(boolean.join(F.broadcast(keys), "cell").select(
            "key", F.lit(_PART_BOOLEAN).alias("part"), *_BOOLEAN_COLUMNS),
            allowMissingColumns=True)
    return (left.groupBy("key").cogroup(routed.groupBy("key"))
            .applyInArrow(_match_task(bc, fault, timer), DELIVERY_SCHEMA))


def _kind_counts(subs: DataFrame) -> dict[str, int]:
    """Rows per kind of a subscription set frame (one small aggregation)."""
    rows = subs.groupBy("kind").count().toArrow()
    got = dict(zip(rows.column("kind").to_pylist(), rows.column("count").to_pylist(),
                   strict=True))
    return {name: int(got.get(code, 0)) for name, code in KIND_CODES.items()}


def _job_settings(plan: MatchPlan) -> dict[str, str]:
    # One shuffle partition per subscription partition, and no coalescing by AQE: each
    # partition's index is built and queried in its own task.
    return {"spark.sql.shuffle.partitions": str(plan.n_partitions),
            "spark.sql.adaptive.coalescePartitions.enabled": "false"}


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
    with _session_conf(spark, _job_settings(plan)):
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
                .write.mode("errorifexists").parquet(storage.spark_uri(tmp))
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
    alone. ``timer`` (:func:`spark_jobs.session.task_timer`) collects per-task timings.
    """
    from index.io import read_weights
    from roadnet.io import load_network

    phases: dict[str, float] = {}
    t0 = time.perf_counter()
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
    with stage(spark, f"batch-match: read and locate {args.subscriptions}"):
        subs = read_subscription_set_frame(spark, args.subscriptions, network, cells,
                                           weights, dmax_m=args.dmax, timer=timer)
        counts = _kind_counts(subs)
    phases["read and locate subscriptions"] = time.perf_counter() - t0
    log(f"subscriptions per kind: {counts}")
    t0 = time.perf_counter()
    with stage(spark, f"batch-match: read and locate {args.messages}"):
        # Top-k results depend on the stream order: then the frame keeps the file order.
        messages = read_messages_frame(spark, args.messages, network, cells, weights,
                                       timer=timer, ordered=counts["topk"] > 0)
    phases["read and locate messages"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    if counts["boolean"] == counts["topk"] == 0:
        threshold = subs.select(*(c.split()[0] for c in SUBSCRIPTION_SCHEMA.split(", ")))
        match_frames(spark, network, cells, weights, threshold, messages, bounds,
                     out=args.out, dmax_m=args.dmax, n_partitions=args.partitions,
                     bounds_name=args.bounds or "bound table", timer=timer, phases=phases)
    else:
        from spark_jobs.batch_kinds import match_set_frames

        match_set_frames(spark, network, cells, weights, subs, messages, bounds,
                         window=getattr(args, "window", DEFAULTS.topk_window), out=args.out,
                         topk_out=getattr(args, "topk_out", None), dmax_m=args.dmax,
                         n_partitions=args.partitions,
                         bounds_name=args.bounds or "bound table", timer=timer,
                         phases=phases, counts=counts)
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
                        help="road network file (any format roadnet.io reads; a path or URL)")
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
    from pruning.kinds_reference import check_window
    from spark_jobs.batch_kinds import topk_out_name

    check_dmax(args.dmax, name="--dmax")
    check_window(args.window)
    inputs = (args.network, args.subscriptions, args.messages, args.weights, args.bounds)
    topk_out = args.topk_out or topk_out_name(args.out)
    lo, lk = storage.local_path(args.out), storage.local_path(topk_out)
    if (topk_out.rstrip("/") == os.fspath(args.out).rstrip("/")
            or (lo is not None and lk is not None and lo.resolve() == lk.resolve())):
        msg = f"--topk-out {topk_out} is the --out directory; give another"
        raise InputError(msg)
    outputs = (("--out", args.out), ("--topk-out", topk_out))
    for what, path in outputs:  # local outputs before Spark starts, which takes seconds
        if storage.local_path(path) is not None:
            storage.check_output(None, path, folder=True, what=what, inputs=inputs)
    for name, path in (("network", args.network), ("--weights", args.weights),
                       ("--subscriptions", args.subscriptions), ("--messages", args.messages),
                       ("--bounds", args.bounds)):
        local = storage.local_path(path) if path else None
        if local is not None and not local.exists():
            msg = f"{name} not found: {path}"
            raise FileNotFoundError(msg)
    spark = session_from_args(args, app_name="roadpubsub batch-match")
    for what, path in outputs:
        if storage.local_path(path) is None:
            storage.check_output(spark, path, folder=True, what=what, inputs=inputs)
    t0 = time.perf_counter()
    write_deliveries_frame(spark, args)
    log(f"wrote the deliveries to {args.out} in {time.perf_counter() - t0:.1f} s")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Script entry point (``spark-submit spark_jobs/batch_match.py ...``)."""
    return run_job(run, build_parser().parse_args(argv), name="batch-match")


if __name__ == "__main__":  # pragma: no cover
    from spark_jobs.batch_match import main as _main

    sys.exit(_main())
