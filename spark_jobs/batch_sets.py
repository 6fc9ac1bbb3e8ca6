"""Route and area subscriptions in Spark batch matching (issue 32).

A subscription located on a segment set (a route or an area, resolved ONCE on the
driver by the functions ``roadpubsub match`` uses:
:func:`~roadpubsub.roadnet.segment_sets.route_from_lonlat`,
:func:`~roadpubsub.roadnet.segment_sets.area_from_geojson`) may touch many cells, so it is
not filed in one cell partition as a point is. Instead the set rows are split off the
subscription batches (:func:`~roadpubsub.pruning.set_matchers.split_set_rows`), shipped to
the tasks columnar (the CSR arrays of :class:`~roadpubsub.roadnet.segment_sets.SegmentSets`
in one broadcast), and matched in a stage of their own: the messages are split into
partitions and each task runs :class:`~roadpubsub.pruning.mixed.MixedMatcher` (the CLI's
entry point) with every set subscription over its messages. Why the union with the point
partitions' deliveries equals the single process: a threshold or boolean delivery
depends only on the subscription and the message (no state across messages), every
message reaches exactly one set task, and every set subscription is in every set task.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from roadpubsub.index.kinds import SubscriptionSet, TopkSubscriptions
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.terms import TermWeights
from roadpubsub.pruning.mixed import MixedMatcher
from roadpubsub.pruning.set_locations import SetLocations
from roadpubsub.pruning.set_matchers import split_set_rows
from roadpubsub.roadnet.segment_sets import SegmentSets
from roadpubsub.spark_jobs.arrow_batches import deliveries_table, messages_from_arrow
from roadpubsub.spark_jobs.cell_frames import weights_from_payload, weights_payload
from roadpubsub.spark_jobs.match_plan import DELIVERY_SCHEMA
from roadpubsub.spark_jobs.payload import network_from_payload, network_payload
from roadpubsub.spark_jobs.session import broadcast_payload, cached_payload

if TYPE_CHECKING:  # pragma: no cover
    from pyspark import Broadcast
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["SplitSets", "set_deliveries_frame", "sets_from_payload", "sets_payload",
           "split_sets"]


class SplitSets:
    """A subscription set split into its point rows and its rows on segment sets.

    Attributes
    ----------
    points
        The point rows of every kind (top-k rows are always points).
    on_sets
        The threshold and boolean rows on sets (no top-k rows).
    threshold_sets, boolean_sets
        Their sets: row i of ``on_sets.threshold`` (``boolean``) lies on set i.
    """

    def __init__(self, points: SubscriptionSet, on_sets: SubscriptionSet,
                 threshold_sets: SegmentSets | None, boolean_sets: SegmentSets | None) -> None:
        self.points = points
        self.on_sets = on_sets
        self.threshold_sets = threshold_sets
        self.boolean_sets = boolean_sets

    def __len__(self) -> int:
        """Number of set subscriptions."""
        return len(self.on_sets.threshold) + len(self.on_sets.boolean)


def split_sets(subs: SubscriptionSet, *, threshold_sets: SetLocations | None = None,
               boolean_sets: SetLocations | None = None) -> SplitSets:
    """Split ``subs`` by the set locations ``MixedMatcher.build`` takes (rows of
    ``subs.threshold`` and ``subs.boolean``)."""
    thr, bpts = subs.threshold, subs.boolean
    t_on, b_on = subs.threshold.take(np.zeros(0, np.int64)), \
        subs.boolean.take(np.zeros(0, np.int64))
    t_sets = b_sets = None
    if threshold_sets is not None and len(threshold_sets):
        thr, t_on, t_sets = split_set_rows(subs.threshold, threshold_sets)
    if boolean_sets is not None and len(boolean_sets):
        bpts, b_on, b_sets = split_set_rows(subs.boolean, boolean_sets)
    return SplitSets(SubscriptionSet(thr, bpts, subs.topk),
                     SubscriptionSet(t_on, b_on, TopkSubscriptions.empty()), t_sets, b_sets)


def sets_payload(sets: SegmentSets | None) -> dict[str, np.ndarray] | None:
    """The columns (CSR) of segment sets, for a broadcast."""
    if sets is None:
        return None
    return {"ptr": sets.ptr, "edge": sets.edge, "start": sets.start, "end": sets.end}


def sets_from_payload(cols: dict[str, np.ndarray] | None) -> SetLocations | None:
    """:func:`sets_payload` back, as the locations of rows 0..n-1 of a batch."""
    if cols is None:
        return None
    sets = SegmentSets(ptr=cols["ptr"], edge=cols["edge"], start=cols["start"],
                       end=cols["end"])
    return SetLocations(np.arange(len(sets), dtype=np.int64), sets)


def _matcher(payload: dict[str, Any]) -> MixedMatcher:
    network = network_from_payload(payload["network"])
    weights = weights_from_payload(payload["weights"])
    # One thread per task: Spark already runs one task per executor core.
    return MixedMatcher.build(network, payload["on_sets"], weights, dmax_m=payload["dmax_m"],
                              index=payload["index"], threads=1, spatial=payload["spatial"],
                              tolerance=payload["tolerance"],
                              threshold_sets=sets_from_payload(payload["threshold_sets"]),
                              boolean_sets=sets_from_payload(payload["boolean_sets"]))


def _set_task(bc: Broadcast[dict[str, Any]]
              ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """mapInArrow function: a partition's messages -> their deliveries to the sets."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        table = pa.Table.from_batches(list(batches))
        if table.num_rows == 0:
            return
        matcher = cached_payload(bc, "set matcher", _matcher)
        out = deliveries_table(matcher.deliver(messages_from_arrow(table)))
        yield from out.to_batches()

    return run


def set_deliveries_frame(spark: SparkSession, spatial: SpatialIndex, weights: TermWeights,
                         split: SplitSets, messages: DataFrame, *, dmax_m: float,
                         tolerance: float, n_partitions: int, index: str = "eia"
                         ) -> DataFrame:
    """The deliveries to the set subscriptions of ``split`` as a lazy DataFrame
    (:data:`~roadpubsub.spark_jobs.match_plan.DELIVERY_SCHEMA`), from a messages frame
    (``id``, ``edge``, ``offset``, ``keywords``) split into ``n_partitions`` tasks.
    ``spatial``: the network's cells and bounds, shipped to the tasks (the set matchers'
    cell bounds come from it)."""
    bc = broadcast_payload(spark, {
        "network": network_payload(spatial.network), "spatial": spatial,
        "weights": weights_payload(weights), "on_sets": split.on_sets,
        "threshold_sets": sets_payload(split.threshold_sets),
        "boolean_sets": sets_payload(split.boolean_sets), "dmax_m": float(dmax_m),
        "tolerance": float(tolerance), "index": index})
    return (messages.select("id", "edge", "offset", "keywords")
            .repartition(max(1, n_partitions))
            .mapInArrow(_set_task(bc), DELIVERY_SCHEMA))
