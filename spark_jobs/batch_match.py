"""Spark job: deliveries of a large message set against a large subscription set.

Plan
----
1. The driver reads and validates the inputs with :mod:`index.io` (the one reader of the
   project), builds the cells and takes the bound table (a directory written by
   :mod:`spark_jobs.precompute_bounds`, or computed on Spark when none is given).
2. Subscriptions are split by cell into partitions: contiguous runs of cells in Z-order
   with about equal numbers of subscriptions (:func:`pruning.routing.partition_cells`);
   all subscriptions of a cell, hence of an edge, are in one partition.
3. Routing (Spark tasks over the messages): each message goes only to the partitions that
   hold a cell surviving Lemma 2 for it (:class:`pruning.routing.CellRouter`, the numba
   ``cell_lower_bounds`` kernel against DNlimit(ci)).
4. Matching (one Spark task per partition, a cogroup of its subscriptions and its routed
   messages): the task builds an :class:`~index.eia.EnhancedIndex` of its subscriptions on
   the broadcast cells and bounds and runs :class:`~pruning.indexed.IndexMatcher`.
5. One output row per delivery (``message_id``, ``subscription_id``, ``distance`` metres,
   ``score``), written as Parquet.

Why the result equals the single-process ``IndexMatcher(EnhancedIndex(all subscriptions))``:
every bound the EIA pruning uses for a subscription depends only on the subscription, its
edge and its cell, and those are all in one partition; a partition left out by routing is
one whose index would have pruned every cell (the same test, the same slack); distances
are exact and scores come from :mod:`pruning.similarity`. Each delivery (m, s) is produced
by exactly one task: the one holding s.

Output safety: the deliveries are written by Spark's commit protocol (a retried task's
files replace the failed attempt's; a task's output is deterministic: subscriptions and
messages are sorted by id in the task) into a temporary directory that replaces the
output directory only when the whole job succeeded
(:func:`spark_jobs.session.atomic_output_dir`). ``index.io.read_deliveries`` reads it.

Examples
--------
::

    spark-submit spark_jobs/batch_match.py ../shared/data/dimacs/rome.gr.gz \\
        --subscriptions work/subscriptions.parquet --messages work/messages.parquet \\
        --weights work/weights.parquet --bounds rome.bounds --out rome.deliveries.parquet
"""

from __future__ import annotations

import argparse
import contextlib
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
from pruning.deliveries import Deliveries
from pruning.indexed import IndexMatcher
from pruning.routing import CellRouter, cell_distance_limits, partition_cells
from roadnet.cell_bounds import CellBounds
from roadnet.cells import build_cells
from roadnet.errors import InputError
from roadnet.files import check_output_path
from roadnet.lengths import check_dmax
from roadnet.locations import EdgePoints
from roadnet.settings import DEFAULTS
from spark_jobs.precompute_bounds import (
    cells_from_payload,
    cells_payload,
    load_bounds_table,
    network_from_payload,
    network_payload,
    precompute_cell_bounds,
)
from spark_jobs.session import (
    add_spark_arguments,
    atomic_output_dir,
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
    "build_parser",
    "deliveries_frame",
    "main",
    "messages_arrow",
    "messages_from_arrow",
    "plan_match",
    "run",
    "subscriptions_arrow",
    "subscriptions_from_arrow",
    "write_batch_deliveries",
]

#: Spark schema of the output rows.
DELIVERY_SCHEMA = "message_id long, subscription_id long, distance double, score double"
#: Fault injection modes for tests: fail one partition's task always, or only its first
#: attempt (a retried attempt then succeeds).
FAULTS = ("always", "first-attempt")
_SUB_SCHEMA = ("key int, id long, edge int, offset double, alpha double, tau double, "
               "keywords array<int>")
_MSG_SCHEMA = "key int, id long, edge int, offset double, keywords array<int>"


# ---------------------------------------------------------------------------- arrow <-> model
def _keyword_list(ptr: npt.NDArray[np.int64], terms: npt.NDArray[np.int32]) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array(ptr.astype(np.int32)), pa.array(terms, pa.int32()))


def _keyword_csr(col: pa.ChunkedArray | pa.Array
                 ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]:
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    lengths = np.asarray(pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False),
                         dtype=np.int64)
    ptr = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=ptr[1:])
    terms = np.asarray(pc.list_flatten(arr).to_numpy(zero_copy_only=False), dtype=np.int32)
    return ptr, terms


def _np(table: pa.Table, name: str, dtype: type) -> npt.NDArray[Any]:
    return np.asarray(table.column(name).to_numpy(), dtype=dtype)


def subscriptions_arrow(subs: Subscriptions, key: npt.ArrayLike) -> pa.Table:
    """Subscriptions as an Arrow table with a partition ``key`` column (term-id keywords)."""
    return pa.table({
        "key": pa.array(np.asarray(key, dtype=np.int32)),
        "id": pa.array(subs.ids, pa.int64()),
        "edge": pa.array(subs.points.edge, pa.int32()),
        "offset": pa.array(subs.points.offset, pa.float64()),
        "alpha": pa.array(subs.alpha, pa.float64()),
        "tau": pa.array(subs.tau, pa.float64()),
        "keywords": _keyword_list(subs.kw_ptr, subs.kw_terms),
    })


def subscriptions_from_arrow(table: pa.Table) -> Subscriptions:
    """Inverse of :func:`subscriptions_arrow` (rows sorted by id)."""
    order = np.argsort(_np(table, "id", np.int64), kind="stable")
    table = table.take(pa.array(order))
    ptr, terms = _keyword_csr(table.column("keywords"))
    return Subscriptions(_np(table, "id", np.int64),
                         EdgePoints(_np(table, "edge", np.int32), _np(table, "offset", np.float64)),
                         _np(table, "alpha", np.float64), _np(table, "tau", np.float64),
                         ptr, terms)


def messages_arrow(messages: Messages) -> pa.Table:
    """Messages as an Arrow table (term-id keywords)."""
    return pa.table({
        "id": pa.array(messages.ids, pa.int64()),
        "edge": pa.array(messages.points.edge, pa.int32()),
        "offset": pa.array(messages.points.offset, pa.float64()),
        "keywords": _keyword_list(messages.kw_ptr, messages.kw_terms),
    })


def messages_from_arrow(table: pa.Table) -> Messages:
    """Inverse of :func:`messages_arrow` (rows sorted by id)."""
    order = np.argsort(_np(table, "id", np.int64), kind="stable")
    table = table.take(pa.array(order))
    ptr, terms = _keyword_csr(table.column("keywords"))
    return Messages(_np(table, "id", np.int64),
                    EdgePoints(_np(table, "edge", np.int32), _np(table, "offset", np.float64)),
                    ptr, terms)


def _deliveries_table(d: Deliveries) -> pa.Table:
    return pa.table({"message_id": pa.array(d.message_id, pa.int64()),
                     "subscription_id": pa.array(d.subscription_id, pa.int64()),
                     "distance": pa.array(d.distance, pa.float64()),
                     "score": pa.array(d.score, pa.float64())})


# ---------------------------------------------------------------------------- plan
class MatchPlan:
    """Everything the tasks need, decided on the driver.

    Attributes
    ----------
    spatial
        Cells and bounds of the network.
    weights
        The vocabulary shared by subscriptions and messages (term ids index it).
    router
        Cell -> partition and DNlimit per cell.
    keys
        Group key of each partition, chosen so that Spark's hash partitioning puts each
        partition in its own task.
    dmax_m, tolerance
        Dmax in metres and the score tolerance of the delivery rule.
    """

    def __init__(self, *, spatial: SpatialIndex, weights: TermWeights, router: CellRouter,
                 keys: npt.NDArray[np.int32], dmax_m: float, tolerance: float) -> None:
        self.spatial = spatial
        self.weights = weights
        self.router = router
        self.keys = keys
        self.dmax_m = float(dmax_m)
        self.tolerance = float(tolerance)

    @property
    def n_partitions(self) -> int:
        """Number of subscription partitions."""
        return int(self.keys.size)

    def payload(self) -> dict[str, Any]:
        """What is broadcast to the tasks (numpy arrays and plain values)."""
        sp = self.spatial
        return {
            "network": network_payload(sp.network),
            "cells": cells_payload(sp.cells),
            "bounds": dict(sp.bounds.to_arrays()),
            "terms": list(self.weights.terms),
            "weights": self.weights.weights.copy(),
            "default_weight": self.weights.default_weight,
            "cell_part": self.router.cell_part,
            "cell_dn_limit": self.router.cell_dn_limit,
            "keys": self.keys,
            "dmax_m": self.dmax_m,
            "tolerance": self.tolerance,
        }


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


def plan_match(
    spark: SparkSession,
    spatial: SpatialIndex,
    subs: Subscriptions,
    weights: TermWeights,
    *,
    dmax_m: float = DEFAULTS.dmax_m,
    tolerance: float = DEFAULTS.score_tolerance,
    n_partitions: int | None = None,
) -> MatchPlan:
    """Partition the cells and prepare routing (see the module docstring).

    ``n_partitions`` defaults to the session's default parallelism (one task per core).
    """
    n = n_partitions or spark.sparkContext.defaultParallelism
    if n < 1:
        msg = f"n_partitions must be >= 1, got {n}"
        raise InputError(msg)
    cell = spatial.cells.edge_cell[subs.points.edge].astype(np.int64)
    load = np.bincount(cell, minlength=spatial.cells.n_cells)
    cell_part = partition_cells(load, n)
    router = CellRouter(spatial=spatial, cell_part=cell_part,
                        cell_dn_limit=cell_distance_limits(spatial, subs, dmax_m=dmax_m,
                                                           tolerance=tolerance))
    return MatchPlan(spatial=spatial, weights=weights, router=router,
                     keys=_aligned_keys(spark, n), dmax_m=dmax_m, tolerance=tolerance)


# ---------------------------------------------------------------------------- tasks
def _worker_state(payload: dict[str, Any]) -> tuple[SpatialIndex, TermWeights, CellRouter]:
    network = network_from_payload(payload["network"])
    cells = cells_from_payload(payload["cells"])
    spatial = SpatialIndex.build(network, cells=cells,
                                 bounds=CellBounds.from_arrays(payload["bounds"]))
    weights = TermWeights(dict(zip(payload["terms"], payload["weights"].tolist(), strict=True)),
                          default_weight=payload["default_weight"])
    router = CellRouter(spatial=spatial, cell_part=payload["cell_part"],
                        cell_dn_limit=payload["cell_dn_limit"])
    return spatial, weights, router


def _route_task(bc: Broadcast[dict[str, Any]]
                ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """mapInArrow function: messages -> (partition key, message) rows, Lemma 2 routing."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        _, _, router = cached_payload(bc, "state", _worker_state)
        keys = bc.value["keys"]
        for batch in batches:
            table = pa.Table.from_batches([batch])
            points = EdgePoints(_np(table, "edge", np.int32), _np(table, "offset", np.float64))
            rows, parts = router.route(points)
            routed = table.take(pa.array(rows))
            routed = routed.add_column(0, "key", pa.array(keys[parts], pa.int32()))
            yield from routed.to_batches()

    return run


def _match_task(bc: Broadcast[dict[str, Any]], fault: str | None
                ) -> Callable[[Any, pa.Table, pa.Table], pa.Table]:
    """cogroup function: one partition's subscriptions and routed messages -> deliveries."""

    def run(key: Any, subs_t: pa.Table, msgs_t: pa.Table) -> pa.Table:
        spatial, weights, _ = cached_payload(bc, "state", _worker_state)
        payload = bc.value
        if fault is not None and int(key[0].as_py()) == int(payload["keys"][0]):
            from pyspark import TaskContext

            ctx = TaskContext.get()
            if fault == "always" or (ctx is not None and ctx.attemptNumber() == 0):
                msg = f"injected failure ({fault}) in partition {key[0].as_py()}"
                raise RuntimeError(msg)
        if subs_t.num_rows == 0 or msgs_t.num_rows == 0:
            return _deliveries_table(Deliveries.empty())
        subs = subscriptions_from_arrow(subs_t)
        messages = messages_from_arrow(msgs_t)
        index = EnhancedIndex(spatial, subs, weights, dmax_m=payload["dmax_m"],
                              tolerance=payload["tolerance"])
        # One thread per task: Spark already runs one task per executor core.
        deliveries, _ = IndexMatcher(index, threads=1).match(messages)
        return _deliveries_table(deliveries)

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


def deliveries_frame(spark: SparkSession, plan: MatchPlan, subs: Subscriptions,
                     messages: Messages, *, fault: str | None = None) -> DataFrame:
    """The deliveries as a lazy DataFrame.

    Run it with one shuffle partition per subscription partition and AQE coalescing off,
    as :func:`batch_match` and :func:`write_batch_deliveries` do, so that each partition's
    index is built in its own task. ``fault`` (tests only, one of :data:`FAULTS`) makes
    the first partition's task fail.
    """
    if fault is not None and fault not in FAULTS:
        msg = f"fault must be one of {FAULTS}, got {fault!r}"
        raise InputError(msg)
    bc = broadcast_payload(spark, plan.payload())
    sub_cell = plan.spatial.cells.edge_cell[subs.points.edge].astype(np.int64)
    sub_key = plan.keys[plan.router.cell_part[sub_cell]]
    subs_df = spark.createDataFrame(subscriptions_arrow(subs, sub_key), schema=_SUB_SCHEMA)
    msgs_df = spark.createDataFrame(messages_arrow(messages),
                                    schema="id long, edge int, offset double, "
                                           "keywords array<int>")
    routed = msgs_df.mapInArrow(_route_task(bc), _MSG_SCHEMA)
    return (subs_df.groupBy("key").cogroup(routed.groupBy("key"))
            .applyInArrow(_match_task(bc, fault), DELIVERY_SCHEMA))


def _job_settings(plan: MatchPlan) -> dict[str, str]:
    # One shuffle partition per subscription partition, and no coalescing by AQE: each
    # partition's index is built and queried in its own task.
    return {"spark.sql.shuffle.partitions": str(plan.n_partitions),
            "spark.sql.adaptive.coalescePartitions.enabled": "false"}


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
    """Deliveries computed on Spark, collected to the driver (sorted by message, subscription).

    Equal to ``IndexMatcher(EnhancedIndex(spatial, subs, weights, dmax_m=dmax_m)).match(
    messages)[0]``. See :func:`plan_match` for ``n_partitions``.
    """
    plan = plan_match(spark, spatial, subs, weights, dmax_m=dmax_m, tolerance=tolerance,
                      n_partitions=n_partitions)
    with _session_conf(spark, _job_settings(plan)), stage(
            spark, f"batch-match: {len(messages)} messages x {len(subs)} subscriptions in "
                   f"{plan.n_partitions} partitions"):
        table = deliveries_frame(spark, plan, subs, messages).toArrow()
    return Deliveries.concat([Deliveries(
        _np(table, "message_id", np.int64), _np(table, "subscription_id", np.int64),
        _np(table, "distance", np.float64), _np(table, "score", np.float64))])


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
) -> Path:
    """Compute the deliveries on Spark and write them to the Parquet directory ``out``.

    The directory is replaced atomically when the job succeeds; on failure the previous
    output stays as it was. ``fault`` is for tests (see :func:`deliveries_frame`).
    """
    plan = plan_match(spark, spatial, subs, weights, dmax_m=dmax_m, tolerance=tolerance,
                      n_partitions=n_partitions)
    target = Path(out)
    with atomic_output_dir(target) as tmp, _session_conf(spark, _job_settings(plan)), stage(
            spark, f"batch-match: {len(messages)} messages x {len(subs)} subscriptions in "
                   f"{plan.n_partitions} partitions -> {target}"):
        frame = deliveries_frame(spark, plan, subs, messages, fault=fault)
        frame.sortWithinPartitions("message_id", "subscription_id") \
            .write.mode("errorifexists").parquet(str(tmp))
    return target


# ---------------------------------------------------------------------------- command line
_EXAMPLE = """\
example:
  roadpubsub generate ...   # or any subscriptions/messages/weights files
  spark-submit spark_jobs/batch_match.py ../shared/data/dimacs/rome.gr.gz \\
      --subscriptions work/subscriptions.parquet --messages work/messages.parquet \\
      --weights work/weights.parquet --bounds rome.bounds --out rome.deliveries.parquet
  roadpubsub spark batch-match ../shared/data/dimacs/rome.gr.gz --subscriptions ... \\
      --messages ... --weights ... --out rome.deliveries.parquet --master 'local[2]'
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the job (shared by the script and ``roadpubsub spark``)."""
    parser.add_argument("network", help="road network file (any format roadnet.io reads)")
    parser.add_argument("--subscriptions", required=True,
                        help="subscriptions file (Parquet or JSON Lines, see index.io)")
    parser.add_argument("--messages", required=True, help="messages file")
    parser.add_argument("--weights", required=True, help="keyword weights file")
    parser.add_argument("--out", required=True, help="output Parquet directory of deliveries")
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
                    "(subscriptions partitioned by cell, messages routed by Lemma 2).",
        epilog=_EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    """Run the job for parsed arguments; returns the exit code."""
    from index.io import read_messages, read_subscriptions, read_weights
    from roadnet.io import load_network

    check_dmax(args.dmax, name="--dmax")
    if "://" not in args.out:  # a local path: check it before any work
        check_output_path(args.out, folder=True, what="--out", inputs=(
            args.network, args.subscriptions, args.messages, args.weights))
    t0 = time.perf_counter()
    network = load_network(args.network, directed=args.directed)
    weights = read_weights(args.weights)
    subs = read_subscriptions(args.subscriptions, network, weights)
    messages = read_messages(args.messages, network, weights)
    cells = build_cells(network, capacity=args.capacity)
    log(f"read {len(subs)} subscriptions, {len(messages)} messages on {network.name} "
        f"({cells.n_cells} cells) in {time.perf_counter() - t0:.1f} s")
    spark = session_from_args(args, app_name="roadpubsub batch-match")
    if args.bounds:
        bounds = load_bounds_table(args.bounds, network, cells)
    else:
        bounds = precompute_cell_bounds(spark, network, cells)
    spatial = SpatialIndex.build(network, cells=cells, bounds=bounds)
    t1 = time.perf_counter()
    out = write_batch_deliveries(spark, spatial, subs, messages, weights, args.out,
                                 dmax_m=args.dmax, n_partitions=args.partitions)
    dt = time.perf_counter() - t1
    log(f"wrote deliveries of {len(messages)} messages to {out} in {dt:.1f} s "
        f"({len(messages) / max(dt, 1e-9):.1f} messages/s)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Script entry point (``spark-submit spark_jobs/batch_match.py ...``)."""
    return run_job(run, build_parser().parse_args(argv), name="batch-match")


if __name__ == "__main__":  # pragma: no cover
    from spark_jobs.batch_match import main as _main

    sys.exit(_main())
