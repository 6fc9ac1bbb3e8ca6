"""The distributed plan of a batch match and the tasks that run it.

The driver splits the cells into partitions from per-cell figures only
(:func:`plan_match`, :class:`MatchPlan`); :func:`deliveries_frame` routes each message to
the partitions holding a cell that survives Lemma 2 for it (one routing task per
partition, over the bound table's columns of its cells) and matches each partition in
its own task (its subscriptions, its rows of the bound table and its routed messages).
Why the result equals the single process is argued in :mod:`roadpubsub.spark_jobs.batch_match`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from roadpubsub.index.kinds import (
    BooleanSubscriptions,
    SubscriptionSet,
    TopkSubscriptions,
    empty_subscriptions,
)
from roadpubsub.index.terms import TermWeights
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.pruning.mixed import MixedMatcher
from roadpubsub.pruning.routing import CellRouter, partition_cells
from roadpubsub.roadnet.cells import Cells
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.settings import DEFAULTS
from roadpubsub.spark_jobs.arrow_batches import (
    boolean_from_arrow,
    deliveries_table,
    messages_from_arrow,
    subscriptions_from_arrow,
)
from roadpubsub.spark_jobs.bound_frames import keyed_bounds, slice_spatial
from roadpubsub.spark_jobs.cell_frames import (
    CellStats,
    weights_from_payload,
    weights_payload,
)
from roadpubsub.spark_jobs.payload import cells_payload, network_and_cells, network_payload
from roadpubsub.spark_jobs.session import (
    broadcast_payload,
    cached_payload,
)

if TYPE_CHECKING:  # pragma: no cover
    from pyspark import Broadcast
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "DELIVERY_SCHEMA",
    "FAULTS",
    "MatchPlan",
    "deliveries_frame",
    "job_settings",
    "part_cells",
    "plan_match",
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
def part_cells(payload: dict[str, Any], key: int) -> npt.NDArray[np.int64]:
    """The cells of the partition keyed ``key`` in a plan's broadcast ``payload``."""
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
        spatial = slice_spatial(network, cells, bounds_t, part_cells(payload, k), by="col",
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
        spatial = slice_spatial(network, cells, bounds_t, part_cells(payload, k), by="row",
                                where=payload["bounds_name"])
        t1 = time.perf_counter()
        messages = messages_from_arrow(msgs_t)
        subs = SubscriptionSet(
            subscriptions_from_arrow(subs_t) if subs_t.num_rows else empty_subscriptions(),
            boolean_from_arrow(bool_t) if bool_t.num_rows else BooleanSubscriptions.empty(),
            TopkSubscriptions.empty())
        # The library's entry point, as 'roadpubsub match' runs it, on this slice; one
        # thread per task: Spark already runs one task per executor core.
        matcher = MixedMatcher.build(network, subs, weights, dmax_m=payload["dmax_m"],
                                     spatial=spatial, threads=1,
                                     tolerance=payload["tolerance"])
        t2 = time.perf_counter()
        deliveries = matcher.deliver(messages)
        if timer is not None:
            timer.add([("match:bounds slice", k, t1 - t0, bounds_t.num_rows, 0),
                       ("match:index build", k, t2 - t1, len(subs), 0),
                       ("match:MixedMatcher", k, time.perf_counter() - t2,
                        msgs_t.num_rows, 0)])
        return deliveries_table(deliveries)

    return run


def deliveries_frame(spark: SparkSession, plan: MatchPlan, network: RoadNetwork,
                     weights: TermWeights, subs: DataFrame, messages: DataFrame,
                     bounds: DataFrame, *, bounds_name: str = "bound table",
                     fault: str | None = None, timer: Any = None,
                     boolean: DataFrame | None = None) -> DataFrame:
    """The deliveries as a lazy DataFrame, from frames of subscriptions, messages
    (:mod:`roadpubsub.spark_jobs.cell_frames`) and bound-table rows
    (:mod:`roadpubsub.spark_jobs.bound_frames`).
    ``boolean``: boolean subscriptions too (``cell`` and :data:`_BOOLEAN_COLUMNS`), matched
    in the tasks that hold their cells (``plan`` made from the load and routing limits of
    both frames).

    Run it with one shuffle partition per subscription partition and AQE coalescing off,
    as :func:`match_frames` does, so that each partition's index is built in its own
    task. ``fault`` (tests only, one of :data:`FAULTS`) makes the first partition's task
    fail. ``timer`` (:func:`roadpubsub.spark_jobs.session.task_timer`) collects per-task timings.
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


def job_settings(plan: MatchPlan) -> dict[str, str]:
    """The SQL settings a plan's match runs with (under
    :func:`roadpubsub.spark_jobs.session.session_conf`)."""
    # One shuffle partition per subscription partition, and no coalescing by AQE: each
    # partition's index is built and queried in its own task.
    return {"spark.sql.shuffle.partitions": str(plan.n_partitions),
            "spark.sql.adaptive.coalescePartitions.enabled": "false"}
