"""Subscriptions and messages as distributed DataFrames, each row with its cell: the
frames' Spark schemas, frames of batches already in memory, the weights as a broadcast
payload, and the per-cell figures the driver plans with. Files are read into these frames
by the executors (:mod:`roadpubsub.spark_jobs.read_frames`).

Frames (Spark schemas :data:`SUBSCRIPTION_SCHEMA`, :data:`MESSAGE_SCHEMA`)
-----------------------------------------------------------------------------
subscriptions
    ``cell`` int, ``id`` long, ``edge`` int, ``offset`` double (metres along the edge),
    ``alpha``, ``tau`` double, ``dn_limit`` double (DNlimit of the subscription's cell in
    its task, Eq. 7 via :func:`roadpubsub.pruning.routing.cell_distance_limits`: the maximum over a
    cell's rows is the cell's DNlimit), ``keywords`` array<int> (term ids of the weights,
    ascending, distinct).
messages
    ``cell``, ``id``, ``edge``, ``offset``, ``keywords`` as above.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from roadpubsub.index.kinds import SubscriptionSet
from roadpubsub.index.model import Messages, Subscriptions
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.terms import TermWeights
from roadpubsub.pruning.routing import cell_distance_limits
from roadpubsub.roadnet.cells import Cells
from roadpubsub.roadnet.settings import DEFAULTS

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "KIND_CODES",
    "MESSAGE_SCHEMA",
    "ORDERED_MESSAGE_SCHEMA",
    "SUBSCRIPTION_SCHEMA",
    "SUBSCRIPTION_SET_SCHEMA",
    "CellStats",
    "cell_limits",
    "cell_stats",
    "kind_codes",
    "kind_counts",
    "messages_frame",
    "subscription_set_frame",
    "subscription_set_frame_table",
    "subscriptions_frame",
    "term_id_lists",
    "weights_from_payload",
    "weights_payload",
]

#: Spark schema of a subscriptions frame.
SUBSCRIPTION_SCHEMA = ("cell int, id long, edge int, offset double, alpha double, "
                       "tau double, dn_limit double, keywords array<int>")
#: Spark schema of a messages frame.
MESSAGE_SCHEMA = "cell int, id long, edge int, offset double, keywords array<int>"
#: Spark schema of a messages frame that keeps the input order: sorted by (``o_file``,
#: ``o_block``, ``o_row``) the rows are in file order (files by name, then the rows of
#: each file as written).
ORDERED_MESSAGE_SCHEMA = MESSAGE_SCHEMA + ", o_file int, o_block long, o_row long"
#: Spark schema of a frame of subscriptions of every kind (``kind``: :data:`KIND_CODES`);
#: fields a kind does not use are null. ``dn_limit`` is the routing distance limit of the
#: row's cell: DNlimit for threshold rows, the radius for boolean rows, Dmax for top-k.
SUBSCRIPTION_SET_SCHEMA = ("kind int, cell int, id long, edge int, offset double, "
                           "alpha double, tau double, radius double, k long, "
                           "dn_limit double, keywords array<int>")
#: ``kind`` column values of a subscription set frame.
KIND_CODES = {"threshold": 0, "boolean": 1, "topk": 2}



# ---------------------------------------------------------------------------- weights
def weights_payload(weights: TermWeights) -> dict[str, Any]:
    """A weights table as plain values (for a broadcast)."""
    return {"terms": list(weights.terms), "weights": weights.weights.copy(),
            "default_weight": weights.default_weight}


def weights_from_payload(payload: dict[str, Any]) -> TermWeights:
    """Inverse of :func:`weights_payload` (term ids are kept)."""
    return TermWeights(dict(zip(payload["terms"], payload["weights"].tolist(), strict=True)),
                       default_weight=payload["default_weight"])


# ---------------------------------------------------------------------------- in-memory
def subscriptions_frame(spark: SparkSession, subs: Subscriptions, cells: Cells, *,
                        dmax_m: float,
                        tolerance: float = DEFAULTS.score_tolerance) -> DataFrame:
    """A subscriptions frame of subscriptions already in memory (shipped from the driver:
    for notebooks and tests; files go through :func:`read_subscriptions_frame`)."""
    cell = cells.edge_cell[subs.points.edge].astype(np.int64)
    limits = cell_limits(cells, subs, dmax_m=dmax_m, tolerance=tolerance)
    table = pa.table({
        "cell": pa.array(cell.astype(np.int32)),
        "id": pa.array(subs.ids, pa.int64()),
        "edge": pa.array(subs.points.edge, pa.int32()),
        "offset": pa.array(subs.points.offset, pa.float64()),
        "alpha": pa.array(subs.alpha, pa.float64()),
        "tau": pa.array(subs.tau, pa.float64()),
        "dn_limit": pa.array(limits[cell], pa.float64()),
        "keywords": term_id_lists(subs.kw_ptr, subs.kw_terms),
    })
    return spark.createDataFrame(table, schema=SUBSCRIPTION_SCHEMA)


def messages_frame(spark: SparkSession, messages: Messages, cells: Cells, *,
                   ordered: bool = False) -> DataFrame:
    """A messages frame of messages already in memory (see :func:`subscriptions_frame`);
    ``ordered``: with the order columns of :data:`ORDERED_MESSAGE_SCHEMA` (the given
    order)."""
    n = len(messages)
    cols = {
        "cell": pa.array(cells.edge_cell[messages.points.edge].astype(np.int32)),
        "id": pa.array(messages.ids, pa.int64()),
        "edge": pa.array(messages.points.edge, pa.int32()),
        "offset": pa.array(messages.points.offset, pa.float64()),
        "keywords": term_id_lists(messages.kw_ptr, messages.kw_terms),
    }
    if ordered:
        cols.update({"o_file": pa.array(np.zeros(n, np.int32)),
                     "o_block": pa.array(np.zeros(n, np.int64)),
                     "o_row": pa.array(np.arange(n, dtype=np.int64))})
    return spark.createDataFrame(pa.table(cols),
                                 schema=ORDERED_MESSAGE_SCHEMA if ordered else MESSAGE_SCHEMA)


def subscription_set_frame(spark: SparkSession, subs: SubscriptionSet, cells: Cells, *,
                           dmax_m: float,
                           tolerance: float = DEFAULTS.score_tolerance) -> DataFrame:
    """A frame of subscriptions of every kind already in memory
    (:data:`SUBSCRIPTION_SET_SCHEMA`; files go through :func:`read_subscription_set_frame`)."""
    table = subscription_set_frame_table(subs, cells, dmax_m=dmax_m, tolerance=tolerance)
    return spark.createDataFrame(table, schema=SUBSCRIPTION_SET_SCHEMA)


def subscription_set_frame_table(subs: SubscriptionSet, cells: Cells, *, dmax_m: float,
                                 tolerance: float, raw: pa.ChunkedArray | None = None
                                 ) -> pa.Table:
    """The rows of a :data:`SUBSCRIPTION_SET_SCHEMA` frame: every kind (threshold,
    boolean, top-k, each in its batch's order), with ``keywords`` as term ids, or ``raw``
    (the keyword strings in that order) instead."""
    thr, boo, top = subs.threshold, subs.boolean, subs.topk
    nt, nb, nk = len(thr), len(boo), len(top)

    def nan(n: int) -> npt.NDArray[np.float64]:
        return np.full(n, np.nan)

    edge = np.concatenate([thr.points.edge, boo.points.edge, top.points.edge]).astype(np.int32)
    cell = cells.edge_cell[edge].astype(np.int32)
    limits = cell_limits(cells, thr, dmax_m=dmax_m, tolerance=tolerance)
    cols: dict[str, Any] = {
        "kind": pa.array(np.repeat(np.array([0, 1, 2], np.int32), [nt, nb, nk])),
        "cell": pa.array(cell),
        "id": pa.array(np.concatenate([thr.ids, boo.ids, top.ids]), pa.int64()),
        "edge": pa.array(edge),
        "offset": pa.array(np.concatenate([thr.points.offset, boo.points.offset,
                                           top.points.offset]), pa.float64()),
        "alpha": pa.array(np.concatenate([thr.alpha, nan(nb), top.alpha]), pa.float64(),
                          from_pandas=True),
        "tau": pa.array(np.concatenate([thr.tau, nan(nb + nk)]), pa.float64(),
                        from_pandas=True),
        "radius": pa.array(np.concatenate([nan(nt), boo.radius, nan(nk)]), pa.float64(),
                           from_pandas=True),
        "k": pa.array(np.concatenate([np.zeros(nt + nb, np.int64), top.k]), pa.int64(),
                      mask=np.arange(nt + nb + nk) < nt + nb),
        # Routing limits: a boolean subscription is reached up to its radius (Algorithm 1's
        # test against the radius, as pruning.boolean prunes a cell); top-k up to Dmax.
        "dn_limit": pa.array(np.concatenate([limits[cell[:nt]], boo.radius,
                                             np.full(nk, float(dmax_m))]), pa.float64()),
    }
    if raw is not None:
        cols["raw"] = raw
    else:
        ptr = np.concatenate([thr.kw_ptr[:-1], boo.kw_ptr[:-1] + thr.kw_ptr[-1],
                              top.kw_ptr + thr.kw_ptr[-1] + boo.kw_ptr[-1]])
        cols["keywords"] = term_id_lists(ptr, np.concatenate([thr.kw_terms, boo.kw_terms,
                                                          top.kw_terms]))
    return pa.table(cols)


def kind_codes(table: pa.Table) -> npt.NDArray[np.int32]:
    """:data:`KIND_CODES` of each row of a file already read by the kinds reader."""
    if "kind" not in table.column_names:
        return np.zeros(table.num_rows, np.int32)
    col = table.column("kind").combine_chunks()
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    values = pc.fill_null(pc.cast(col, pa.string()), "threshold")
    codes = np.zeros(table.num_rows, np.int32)
    for name, code in KIND_CODES.items():
        codes[np.asarray(pc.equal(values, name).to_numpy(zero_copy_only=False), bool)] = code
    return codes


@dataclass(frozen=True)
class _CellsOnly:
    """What :func:`roadpubsub.pruning.routing.cell_distance_limits` reads of a
    SpatialIndex."""

    cells: Cells


def cell_limits(cells: Cells, subs: Subscriptions, *, dmax_m: float,
                tolerance: float) -> npt.NDArray[np.float64]:
    """DNlimit(ci) per cell of threshold subscriptions, in metres
    (:func:`roadpubsub.pruning.routing.cell_distance_limits` from the cells alone: the
    driver and the tasks have no spatial index)."""
    return cell_distance_limits(cast(SpatialIndex, _CellsOnly(cells)), subs, dmax_m=dmax_m,
                                tolerance=tolerance)


def term_id_lists(ptr: npt.NDArray[np.int64], terms: npt.NDArray[np.int32]) -> pa.Array:
    """An Arrow list array of term ids from CSR ``ptr`` and ``terms``."""
    return pa.ListArray.from_arrays(pa.array(np.asarray(ptr, dtype=np.int32)),
                                    pa.array(terms, pa.int32()))


# ---------------------------------------------------------------------------- per-cell figures
@dataclass(frozen=True)
class CellStats:
    """Per-cell figures of a subscriptions frame (arrays of ``n_cells``)."""

    #: Subscriptions per cell.
    load: npt.NDArray[np.int64]
    #: DNlimit(ci) in metres (-inf: no subscription; -1: none reachable), as
    #: :func:`roadpubsub.pruning.routing.cell_distance_limits`.
    dn_limit: npt.NDArray[np.float64]

    @property
    def n_subscriptions(self) -> int:
        """Number of subscriptions."""
        return int(self.load.sum())


def cell_stats(subs: DataFrame, n_cells: int) -> CellStats:
    """Load and DNlimit per cell of a subscriptions frame (one small aggregation)."""
    from pyspark.sql import functions as F  # noqa: N812

    table = subs.groupBy("cell").agg(F.count("*").alias("n"),
                                     F.max("dn_limit").alias("lim")).toArrow()
    cell = np.asarray(table.column("cell").to_numpy(), dtype=np.int64)
    load = np.zeros(n_cells, dtype=np.int64)
    lim = np.full(n_cells, -np.inf)
    load[cell] = np.asarray(table.column("n").to_numpy(), dtype=np.int64)
    lim[cell] = np.asarray(table.column("lim").to_numpy(), dtype=np.float64)
    return CellStats(load=load, dn_limit=lim)


def kind_counts(subs: DataFrame) -> dict[str, int]:
    """Rows per kind of a subscription set frame (one small aggregation)."""
    rows = subs.groupBy("kind").count().toArrow()
    got = dict(zip(rows.column("kind").to_pylist(), rows.column("count").to_pylist(),
                   strict=True))
    return {name: int(got.get(code, 0)) for name, code in KIND_CODES.items()}
