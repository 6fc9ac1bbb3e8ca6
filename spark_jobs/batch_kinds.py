"""Spark batch matching of every subscription kind (issue 21): threshold, boolean, top-k.

``roadpubsub spark batch-match`` reads a subscriptions file that may mix the kinds (the
``kind`` column of :mod:`roadpubsub.index.kinds_io`) and writes what ``roadpubsub match`` writes on
the same inputs: the deliveries of threshold and boolean subscriptions (``--out``; a
boolean delivery has score 1.0) and the top-k events (``--topk-out``; columns seq, event,
message_id, subscription_id, rank, score, distance, in the order of
:mod:`roadpubsub.pruning.topk_events`).

Threshold and boolean: stateless per message, routed alike
------------------------------------------------------------
Both kinds share the plan of :mod:`roadpubsub.spark_jobs.match_plan`: cells split into partitions
by their load (threshold plus boolean subscriptions), each message routed by Lemma 2
(:class:`roadpubsub.pruning.routing.CellRouter`) to the partitions holding a cell it may reach. The
distance limit of a cell is the larger of its threshold DNlimit (Eq. 7) and its boolean
subscriptions' largest radius, compared with the cell lower bound by the slackened test
that :mod:`roadpubsub.pruning.boolean` applies to each (keyword, cell) group: a partition skipped
here is one whose boolean index would have skipped every group. The task matches its
threshold subscriptions with the EIA and its boolean ones with
:class:`roadpubsub.pruning.boolean.BooleanIndexMatcher`, through
:class:`roadpubsub.pruning.mixed.MixedMatcher`
(the CLI's entry point), over the same slice of the bound table.

Top-k: partitioned by subscriptions, each task over the whole ordered stream
----------------------------------------------------------------------------
A top-k result depends on the order of the messages (the window holds the last W), but
its state is per subscription: the top-k of s depends only on s and the stream. So the
top-k subscriptions are split by cell into partitions (by their load, as above), and each
task runs :class:`roadpubsub.pruning.mixed.MixedMatcher` (the CLI's matcher) on its
subscriptions over the *whole* message stream in file order (``o_file``, ``o_block``,
``o_row`` of :data:`roadpubsub.spark_jobs.cell_frames.ORDERED_MESSAGE_SCHEMA`). Every task counts
arrivals from the first message, so its sequence numbers, windows, expiries and refills
are the single process's; each subscription's events come from exactly one task. The
events are then sorted by (seq, phase, subscription_id, position in the task), the
canonical order of :class:`roadpubsub.pruning.topk_events.TopkEvents`, and written in that order.
Each top-k task thus holds all messages (their locations and term ids): the stream is
shuffled to every top-k partition, never broadcast; only the keys of the partitions are
broadcast.

Outputs
-------
Both outputs are written by Spark into temporary directories beside their names and
renamed over them only when both jobs succeeded
(:func:`roadpubsub.spark_jobs.storage.atomic_output_dir`); the top-k output is written only when
the file holds top-k subscriptions, as ``roadpubsub match`` does. Neither may be an input.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from roadpubsub.index.kinds import BooleanSubscriptions, SubscriptionSet, empty_subscriptions
from roadpubsub.index.model import Messages
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.terms import TermWeights
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.pruning.kinds_reference import check_window
from roadpubsub.pruning.mixed import MixedMatcher
from roadpubsub.pruning.routing import partition_cells
from roadpubsub.pruning.topk_events import TopkEvents
from roadpubsub.roadnet.cells import Cells
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.settings import DEFAULTS
from roadpubsub.spark_jobs import storage, storage_paths
from roadpubsub.spark_jobs.arrow_batches import (
    EVENT_ORDER,
    deliveries_from_arrow,
    events_from_arrow,
    events_table,
    ordered_messages_from_arrow,
    topk_from_arrow,
)
from roadpubsub.spark_jobs.bound_frames import bounds_frame, keyed_bounds, slice_spatial
from roadpubsub.spark_jobs.cell_frames import (
    KIND_CODES,
    SUBSCRIPTION_SCHEMA,
    cell_stats,
    kind_counts,
    messages_frame,
    subscription_set_frame,
    weights_from_payload,
    weights_payload,
)
from roadpubsub.spark_jobs.match_plan import (
    DELIVERY_SCHEMA,
    MatchPlan,
    deliveries_frame,
    job_settings,
    part_cells,
    plan_match,
)
from roadpubsub.spark_jobs.payload import cells_payload, network_and_cells, network_payload
from roadpubsub.spark_jobs.session import broadcast_payload, cached_payload, session_conf, stage

if TYPE_CHECKING:  # pragma: no cover
    from pyspark import Broadcast
    from pyspark.sql import DataFrame, SparkSession

    from roadpubsub.pruning.set_locations import SetLocations

__all__ = [
    "TOPK_EVENT_SCHEMA",
    "batch_match_kinds",
    "match_set_frames",
    "topk_events_frame",
    "topk_out_name",
]

#: Spark schema of the top-k output rows (the columns of ``roadpubsub match --topk-out``).
TOPK_EVENT_SCHEMA = ("seq long, event string, message_id long, subscription_id long, "
                     "rank long, score double, distance double")
# The tasks' rows also carry the phase and the position of the event in its task: the
# canonical order is (seq, phase, subscription_id), and a subscription's events of one
# (seq, phase) keep their task order (evict before insert).
_TASK_SCHEMA = "seq long, phase int, ord long, " + TOPK_EVENT_SCHEMA[len("seq long, "):]
_ORDER = EVENT_ORDER
_TOPK_COLUMNS = ("id", "edge", "offset", "alpha", "k", "keywords")
_BOUND_COLUMNS = ("cell_i", "cell_j", "D", "D_far")
_MESSAGE_COLUMNS = ("id", "edge", "offset", "keywords", "o_file", "o_block", "o_row")
_PART_TOPK, _PART_BOUND = 0, 1


def topk_out_name(out: str | os.PathLike[str]) -> str:
    """The default top-k output: ``out`` with ``-topk`` before its suffix (as
    ``roadpubsub match``): ``a/d.parquet`` -> ``a/d-topk.parquet``."""
    text = os.fspath(out).rstrip("/")
    head, sep, name = text.rpartition("/")
    stem, dot, suffix = name.rpartition(".")
    new = f"{stem}-topk.{suffix}" if dot and stem else f"{name}-topk"
    return f"{head}{sep}{new}"


# ---------------------------------------------------------------------------- top-k tasks
def _topk_task(bc: Broadcast[dict[str, Any]], timer: Any = None
               ) -> Callable[[Any, pa.Table, pa.Table], pa.Table]:
    """cogroup function: a partition's top-k subscriptions and bound-table rows, and the
    whole message stream -> that partition's events."""

    def run(key: Any, left: pa.Table, msgs_t: pa.Table) -> pa.Table:
        t0 = time.perf_counter()
        payload = bc.value
        k = int(key[0].as_py())
        part = left.column("part")
        subs_t = left.filter(pc.equal(part, _PART_TOPK))
        if subs_t.num_rows == 0 or msgs_t.num_rows == 0:
            return events_table(TopkEvents.empty())
        network, cells = cached_payload(bc, "cells", network_and_cells)
        weights = cached_payload(bc, "weights", lambda p: weights_from_payload(p["weights"]))
        spatial = slice_spatial(network, cells, left.filter(pc.equal(part, _PART_BOUND)),
                                part_cells(payload, k), by="row",
                                where=payload["bounds_name"])
        t1 = time.perf_counter()
        messages = ordered_messages_from_arrow(msgs_t)
        # The library's entry point, as 'roadpubsub match' runs it, on this partition's
        # top-k subscriptions and the whole stream.
        subs = SubscriptionSet(empty_subscriptions(), BooleanSubscriptions.empty(),
                               topk_from_arrow(subs_t))
        matcher = MixedMatcher.build(network, subs, weights, dmax_m=payload["dmax_m"],
                                     window=payload["window"], spatial=spatial, threads=1)
        events = matcher.push(messages)
        if timer is not None:
            timer.add([("topk:bounds slice", k, t1 - t0, subs_t.num_rows, 0),
                       ("topk:MixedMatcher", k, time.perf_counter() - t1,
                        msgs_t.num_rows, len(events))])
        return events_table(events)

    return run


def topk_events_frame(spark: SparkSession, plan: MatchPlan, network: RoadNetwork,
                      weights: TermWeights, topk: DataFrame, messages: DataFrame,
                      bounds: DataFrame, *, window: int, bounds_name: str = "bound table",
                      timer: Any = None) -> DataFrame:
    """The top-k events as a lazy DataFrame of :data:`_TASK_SCHEMA` rows, unordered.

    ``plan`` partitions the cells by top-k load; ``topk`` holds ``cell`` and the top-k
    columns, ``messages`` the ordered message frame. Run it as :func:`match_set_frames`
    does (one shuffle partition per plan partition).
    """
    from pyspark.sql import functions as F  # noqa: N812

    bc = broadcast_payload(spark, {
        "network": network_payload(network), "cells": cells_payload(plan.cells),
        "weights": weights_payload(weights), "cell_part": plan.cell_part, "keys": plan.keys,
        "dmax_m": plan.dmax_m, "window": int(window), "bounds_name": bounds_name})
    cell_key = plan.cell_key
    keys = spark.createDataFrame(pa.table({
        "cell": pa.array(np.arange(cell_key.size, dtype=np.int32)),
        "key": pa.array(cell_key.astype(np.int32))}))
    # Only the partitions that hold top-k subscriptions receive the stream.
    live = np.unique(cell_key[plan.cell_dn_limit >= 0.0]).astype(np.int32)
    live_keys = spark.createDataFrame(pa.table({"key": pa.array(live)}))
    stream = messages.select(*_MESSAGE_COLUMNS).crossJoin(F.broadcast(live_keys))
    subs_keyed = (topk.join(F.broadcast(keys), "cell")
                  .select("key", F.lit(_PART_TOPK).alias("part"), *_TOPK_COLUMNS))
    by_row = (keyed_bounds(spark, bounds, cell_key, by="row")
              .select("key", F.lit(_PART_BOUND).alias("part"), *_BOUND_COLUMNS))
    left = subs_keyed.unionByName(by_row, allowMissingColumns=True)
    return (left.groupBy("key").cogroup(stream.groupBy("key"))
            .applyInArrow(_topk_task(bc, timer), _TASK_SCHEMA))


# ---------------------------------------------------------------------------- the job
def match_set_frames(
    spark: SparkSession,
    network: RoadNetwork,
    cells: Cells,
    weights: TermWeights,
    subs: DataFrame,
    messages: DataFrame,
    bounds: DataFrame,
    *,
    window: int = DEFAULTS.topk_window,
    out: str | os.PathLike[str] | None = None,
    topk_out: str | os.PathLike[str] | None = None,
    dmax_m: float = DEFAULTS.dmax_m,
    tolerance: float = DEFAULTS.score_tolerance,
    n_partitions: int | None = None,
    bounds_name: str = "bound table",
    timer: Any = None,
    phases: dict[str, float] | None = None,
    counts: dict[str, int] | None = None,
    sets: DataFrame | None = None,
) -> tuple[Deliveries, TopkEvents] | None:
    """Match a subscription set frame
    (:data:`roadpubsub.spark_jobs.cell_frames.SUBSCRIPTION_SET_SCHEMA`) against an ordered message
    frame (see the module docstring).

    With ``out``, write the deliveries there and the top-k events (when there are top-k
    subscriptions) to ``topk_out`` (default :func:`topk_out_name`), both replaced
    atomically at the end; else collect both: (deliveries sorted by message and
    subscription, events in canonical order). ``counts``: the rows per kind when known.
    ``sets``: the deliveries to route and area subscriptions
    (:func:`roadpubsub.spark_jobs.batch_sets.set_deliveries_frame`), joined to the others.
    """
    from pyspark.sql import functions as F  # noqa: N812

    window = check_window(window)
    phases = {} if phases is None else phases
    t0 = time.perf_counter()
    counts = counts or kind_counts(subs)
    kind = F.col("kind")
    thr = subs.filter(kind == KIND_CODES["threshold"]).select(
        *(c.split()[0] for c in SUBSCRIPTION_SCHEMA.split(", ")))
    boo = subs.filter(kind == KIND_CODES["boolean"])
    top = subs.filter(kind == KIND_CODES["topk"])
    with stage(spark, "batch-match: per-cell load and distance limits"):
        stats = cell_stats(subs.filter(kind != KIND_CODES["topk"]), cells.n_cells)
        top_stats = cell_stats(top, cells.n_cells) if counts["topk"] else None
    plan = plan_match(spark, cells, stats, dmax_m=dmax_m, tolerance=tolerance,
                      n_partitions=n_partitions)
    phases["per-cell figures and plans"] = time.perf_counter() - t0
    with session_conf(spark, job_settings(plan)):
        if counts["threshold"] + counts["boolean"]:
            frame = deliveries_frame(spark, plan, network, weights, thr, messages, bounds,
                                     bounds_name=bounds_name, timer=timer,
                                     boolean=boo if counts["boolean"] else None)
        else:  # top-k only: no deliveries (the file is still written, as the CLI does)
            frame = spark.createDataFrame([], DELIVERY_SCHEMA)
        if sets is not None:
            frame = frame.unionByName(sets)
        events = None
        if top_stats is not None:
            # The same number of partitions: the same aligned keys (no second key job).
            plan_k = MatchPlan(cells=cells, cell_part=partition_cells(top_stats.load,
                                                                      plan.n_partitions),
                               cell_dn_limit=top_stats.dn_limit, keys=plan.keys,
                               dmax_m=dmax_m, tolerance=tolerance)
            events = topk_events_frame(spark, plan_k, network, weights, top, messages,
                                       bounds, window=window, bounds_name=bounds_name,
                                       timer=timer)
        what = f"batch-match: {counts} subscriptions in {plan.n_partitions} partitions"
        t0 = time.perf_counter()
        if out is None:
            with stage(spark, what):
                d = frame.toArrow()
                e = None if events is None else events.toArrow()
            phases["route and match (collected)"] = time.perf_counter() - t0
            return _collected(d, e)
        with contextlib.ExitStack() as outputs:
            tmp = outputs.enter_context(storage.atomic_output_dir(out, spark=spark))
            tmp_k = None if events is None else outputs.enter_context(
                storage.atomic_output_dir(topk_out or topk_out_name(out), spark=spark))
            with stage(spark, f"{what} -> {out}"):
                frame.sortWithinPartitions("message_id", "subscription_id") \
                    .write.mode("errorifexists").parquet(storage_paths.spark_uri(tmp))
            if events is not None and tmp_k is not None:
                with stage(spark, f"batch-match: top-k events (window {window}) -> "
                                  f"{topk_out or topk_out_name(out)}"):
                    events.orderBy(*_ORDER).drop("phase", "ord") \
                        .write.mode("errorifexists").parquet(storage_paths.spark_uri(tmp_k))
        phases["route, match and write"] = time.perf_counter() - t0
    return None


def _collected(d: pa.Table, e: pa.Table | None) -> tuple[Deliveries, TopkEvents]:
    return deliveries_from_arrow(d), events_from_arrow(e)


def batch_match_kinds(
    spark: SparkSession,
    spatial: SpatialIndex,
    subs: SubscriptionSet,
    messages: Messages,
    weights: TermWeights,
    *,
    window: int = DEFAULTS.topk_window,
    dmax_m: float = DEFAULTS.dmax_m,
    tolerance: float = DEFAULTS.score_tolerance,
    n_partitions: int | None = None,
    threshold_sets: SetLocations | None = None,
    boolean_sets: SetLocations | None = None,
) -> tuple[Deliveries, TopkEvents]:
    """Deliveries and top-k events of objects held in memory, computed on Spark.

    Equal to the threshold matcher's deliveries with
    :class:`~roadpubsub.pruning.boolean.BooleanIndexMatcher`'s, and to
    ``TopkIndexMatcher(..., window=window).push(messages)`` (``messages`` in stream
    order). The inputs are shipped from the driver (for notebooks and tests); the job
    reads files on the executors instead. ``threshold_sets``, ``boolean_sets``: rows on
    routes and areas, as ``MixedMatcher.build`` takes them (issue 32; the deliveries
    equal ``roadpubsub match``'s, see :mod:`roadpubsub.spark_jobs.batch_sets`).
    """
    from roadpubsub.spark_jobs.batch_sets import set_deliveries_frame, split_sets

    split = split_sets(subs, threshold_sets=threshold_sets, boolean_sets=boolean_sets)
    points = split.points
    msgs = messages_frame(spark, messages, spatial.cells, ordered=True)
    sets = None
    if len(split):
        sets = set_deliveries_frame(
            spark, spatial, weights, split, msgs, dmax_m=dmax_m, tolerance=tolerance,
            n_partitions=n_partitions or spark.sparkContext.defaultParallelism)
    result = match_set_frames(
        spark, spatial.network, spatial.cells, weights,
        subscription_set_frame(spark, points, spatial.cells, dmax_m=dmax_m,
                               tolerance=tolerance),
        msgs, bounds_frame(spark, spatial.bounds), window=window, dmax_m=dmax_m,
        tolerance=tolerance, n_partitions=n_partitions, counts={
            "threshold": len(points.threshold), "boolean": len(points.boolean),
            "topk": len(points.topk)}, sets=sets)
    assert result is not None
    return result
