"""The bound table's ``graphframes`` engine: GraphFrames Pregel over the border overlay.

Tasks compute each cell's border-to-border shortcuts (:func:`spark_jobs.overlay.cell_shortcuts`);
GraphFrames Pregel then runs multi-source shortest paths over the small border overlay, a
batch of source cells at a time (vertex state: one distance per source cell of the batch).
Needs the GraphFrames JVM package (:func:`graphframes_package`). Iterating joins over the
raw road graph instead would take hundreds of supersteps.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from roadnet.cells import Cells
from roadnet.errors import RoadPubSubError
from roadnet.network import RoadNetwork
from spark_jobs.overlay import border_rows, cell_shortcuts
from spark_jobs.payload import broadcast_network, cell_ids_frame, network_and_cells
from spark_jobs.session import cached_payload, log, stage

if TYPE_CHECKING:  # pragma: no cover
    from pyspark import Broadcast
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "GraphFramesNotFoundError",
    "PregelColumns",
    "graphframes_package",
    "graphframes_problem",
    "graphframes_tables",
    "overlay_arcs_frame",
    "overlay_vertices_frame",
    "pregel_columns",
    "require_graphframes",
    "rows_from_pregel",
]

FloatArray = npt.NDArray[np.float64]

_GRAPHFRAMES_CLASS = "org.graphframes.GraphFramePythonAPI"
#: GraphFrames release assumed when graphframes-py is not installed (the pinned one).
_GRAPHFRAMES_FALLBACK_VERSION = "0.12.3"


class GraphFramesNotFoundError(RoadPubSubError, RuntimeError):
    """The GraphFrames JVM classes (or Python package) are not available to Spark."""

    hint = "see https://graphframes.io/02-quick-start/01-installation.html"


# ---------------------------------------------------------------------------- the package
def graphframes_package(spark_version: str | None = None) -> str:
    """Maven coordinate of the GraphFrames JVM package matching the installed Python one.

    GraphFrames publishes the Python wrapper and the JVM artifacts from one release tag,
    so the versions agree; Spark 4 builds are for Scala 2.13 (``graphframes-spark4_2.13``).
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        gf_version = version("graphframes-py")
    except PackageNotFoundError:
        gf_version = _GRAPHFRAMES_FALLBACK_VERSION
    if spark_version is None:
        try:
            spark_version = version("pyspark")
        except PackageNotFoundError:
            spark_version = "4"
    major = int(spark_version.split(".")[0])
    scala = "2.13" if major >= 4 else "2.12"
    return f"io.graphframes:graphframes-spark{major}_{scala}:{gf_version}"


def graphframes_problem(spark: SparkSession) -> str | None:
    """Why the graphframes engine cannot run on ``spark`` (one line), or None if it can."""
    try:
        import graphframes  # noqa: F401
        from graphframes.lib import Pregel
    except ImportError:
        return "the graphframes-py package is not installed: pip install graphframes-py"
    if not hasattr(Pregel, "required_edge_columns"):
        from importlib.metadata import version

        return (f"graphframes-py {version('graphframes-py')} lacks the Pregel API this engine "
                f"calls (required_edge_columns): pip install 'graphframes-py>=0.12'")
    jvm = getattr(spark.sparkContext, "_jvm", None)
    if jvm is None:  # Spark Connect: the server side decides
        return None
    from py4j.protocol import Py4JError

    try:
        jvm.Thread.currentThread().getContextClassLoader().loadClass(_GRAPHFRAMES_CLASS)
    except Py4JError as exc:
        text = str(exc)
        if "ClassNotFoundException" in text or "NoClassDefFoundError" in text:
            return (f"the GraphFrames JVM package is not on the Spark classpath "
                    f"({_GRAPHFRAMES_CLASS} not found): add "
                    f"--packages {graphframes_package(spark.version)}")
        raise
    return None


def require_graphframes(spark: SparkSession) -> None:
    """Raise :class:`GraphFramesNotFoundError` (one line) unless GraphFrames can run."""
    problem = graphframes_problem(spark)
    if problem is not None:
        raise GraphFramesNotFoundError(problem)


# ---------------------------------------------------------------------------- overlay
def _shortcuts_task(bc: Broadcast[dict[str, Any]]
                    ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """mapInArrow function: cell ids -> their border-to-border shortcut arcs."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        network, cells = cached_payload(bc, "cells", network_and_cells)
        for batch in batches:
            for c in batch.column(0).to_pylist():
                src, dst, w = cell_shortcuts(network, cells, int(c))
                yield pa.RecordBatch.from_arrays(
                    [pa.array(src, pa.int64()), pa.array(dst, pa.int64()),
                     pa.array(w, pa.float64())], names=["src", "dst", "weight"])

    return run


@dataclass(frozen=True)
class PregelColumns:
    """The Pregel program over the border overlay for one batch of source cells.

    Vertex columns (beside ``id`` and ``cells``, the cells a border vertex borders):
    ``dist``, one distance in metres per source cell of the batch (0 at the source cell's
    border vertices, inf elsewhere), and ``improved``, whether the last update lowered
    any of them. A vertex that improved sends ``dist + weight`` along its shortcut arcs
    (inf beyond the limit); messages are collected and folded in by element-wise minimum.
    Without a change anywhere no message is sent, which ends the run (early stopping).

    Attributes
    ----------
    init_dist, init_improved
        Initial expressions (over the original vertex columns).
    update_dist, update_improved
        Update expressions (over the vertex columns and the aggregated message).
    message
        Message sent to each arc's destination (null: no message).
    aggregate
        Aggregation of the messages of a vertex.
    """

    init_dist: Column
    init_improved: Column
    update_dist: Column
    update_improved: Column
    message: Column
    aggregate: Column


def pregel_columns(base: int, k: int, *, limit: float = math.inf) -> PregelColumns:
    """The Pregel columns for source cells ``base .. base + k - 1`` (GraphFrames names:
    ``Pregel.msg()``, ``Pregel.src(...)``, ``Pregel.edge(...)``)."""
    from graphframes.lib import Pregel
    from pyspark.sql import functions as F  # noqa: N812

    inf = F.lit(math.inf)
    first = F.lit(base)

    def initial(j: Column) -> Column:
        return F.when(F.array_contains(F.col("cells"), j + first), F.lit(0.0)).otherwise(inf)

    def least(a: Column, b: Column) -> Column:
        return F.least(a, b)

    def fold(acc: Column, x: Column) -> Column:
        return F.zip_with(acc, x, least)

    def lower(a: Column, b: Column) -> Column:
        return a < b

    def identity(t: Column) -> Column:
        return t

    def is_zero(x: Column) -> Column:
        return x == 0.0

    def relax(x: Column) -> Column:
        total = x + Pregel.edge("weight")
        return F.when(total <= F.lit(limit), total).otherwise(inf)

    init = F.transform(F.sequence(F.lit(0), F.lit(k - 1)), initial)
    msg = Pregel.msg()
    dist = F.col("dist")
    merged = F.aggregate(msg, dist, fold)
    return PregelColumns(
        init_dist=init,
        init_improved=F.exists(init, is_zero),
        update_dist=F.when(msg.isNull(), dist).otherwise(merged),
        update_improved=F.when(msg.isNull(), F.lit(False)).otherwise(
            F.exists(F.zip_with(merged, dist, lower), identity)),
        message=F.when(Pregel.src("improved"), F.transform(Pregel.src("dist"), relax)),
        aggregate=F.collect_list(msg),
    )


def overlay_arcs_frame(spark: SparkSession, network: RoadNetwork, cells: Cells, *,
                       partitions: int | None = None) -> DataFrame:
    """Shortcut arcs ``src``, ``dst`` (node indices), ``weight`` (metres) of the border
    overlay, computed per cell in the tasks (:func:`spark_jobs.overlay.cell_shortcuts`);
    the lightest arc per (src, dst)."""
    from pyspark.sql import functions as F  # noqa: N812

    bc = broadcast_network(spark, network, cells)
    return (cell_ids_frame(spark, cells.n_cells, partitions)
            .mapInArrow(_shortcuts_task(bc), "src long, dst long, weight double")
            .groupBy("src", "dst").agg(F.min("weight").alias("weight")))


def overlay_vertices_frame(spark: SparkSession, cells: Cells) -> DataFrame:
    """Overlay vertices: ``id`` (border vertex, node index) and ``cells`` (those it borders)."""
    vertices = np.flatnonzero(cells.node_is_border).astype(np.int64)
    owner = np.repeat(np.arange(cells.n_cells, dtype=np.int32), np.diff(cells.border_ptr))
    order = np.lexsort((owner, cells.border_nodes))
    node_sorted = cells.border_nodes[order]
    ptr = np.append(np.searchsorted(node_sorted, vertices), node_sorted.size).astype(np.int32)
    table = pa.table({"id": pa.array(vertices, pa.int64()),
                      "cells": pa.ListArray.from_arrays(pa.array(ptr),
                                                        pa.array(owner[order], pa.int32()))})
    return spark.createDataFrame(table)


def rows_from_pregel(cells: Cells, result: pa.Table, base: int, k: int, *,
                     limit: float = math.inf) -> tuple[FloatArray, FloatArray]:
    """Rows ``base .. base + k - 1`` of (D, D_far) from final vertex states (``id``,
    ``dist``), reduced as :func:`spark_jobs.overlay.border_rows` does."""
    vertices = np.flatnonzero(cells.node_is_border).astype(np.int64)
    ids = np.asarray(result.column("id").to_numpy(), dtype=np.int64)
    values = np.asarray(pc.list_flatten(result.column("dist")).to_numpy(),
                        dtype=np.float64).reshape(ids.size, k)
    dist_at = np.full((vertices.size, k), np.inf)
    dist_at[np.searchsorted(vertices, ids)] = values
    at_border = np.searchsorted(vertices, cells.border_nodes)
    D = np.empty((k, cells.n_cells))
    D_far = np.empty((k, cells.n_cells))
    for j in range(k):
        D[j], D_far[j] = border_rows(cells, dist_at[at_border, j], base + j, limit=limit)
    return D, D_far


def graphframes_tables(spark: SparkSession, network: RoadNetwork, cells: Cells, *,
                       limit: float, partitions: int | None, batch_cells: int
                       ) -> tuple[FloatArray, FloatArray]:
    """(D, D_far) through the border overlay and GraphFrames Pregel."""
    require_graphframes(spark)
    from graphframes import GraphFrame
    from pyspark.storagelevel import StorageLevel

    n = cells.n_cells
    with stage(spark, f"precompute-bounds: shortcuts of {n} cells"):
        arcs = overlay_arcs_frame(spark, network, cells, partitions=partitions).persist(
            StorageLevel.MEMORY_AND_DISK)
        n_arcs = arcs.count()
    vdf = overlay_vertices_frame(spark, cells).persist(StorageLevel.MEMORY_AND_DISK)
    n_vertices = int(cells.node_is_border.sum())
    log(f"border overlay: {n_vertices} vertices, {n_arcs} shortcut arcs")
    graph = GraphFrame(vdf, arcs)
    D = np.empty((n, n))
    D_far = np.empty((n, n))
    for base in range(0, n, batch_cells):
        k = min(batch_cells, n - base)
        cols = pregel_columns(base, k, limit=limit)
        with stage(spark, f"precompute-bounds: Pregel over the overlay, source cells "
                          f"{base}..{base + k - 1} of {n}"):
            result = (graph.pregel
                      .setMaxIter(n_vertices + 1)
                      .setEarlyStopping(True)
                      .setUseLocalCheckpoints(True)
                      .withVertexColumn("dist", cols.init_dist, cols.update_dist)
                      .withVertexColumn("improved", cols.init_improved, cols.update_improved)
                      .sendMsgToDst(cols.message)
                      .aggMsgs(cols.aggregate)
                      .required_edge_columns("weight")
                      .run()
                      .select("id", "dist")
                      .toArrow())
        D[base:base + k], D_far[base:base + k] = rows_from_pregel(cells, result, base, k,
                                                                  limit=limit)
    arcs.unpersist()
    vdf.unpersist()
    return D, D_far


