"""The bound table's ``graphframes`` engine: GraphFrames Pregel over the border overlay.

1. Shortcuts, in the tasks (one per run of 16 consecutive cells): each cell's border
   clique, its border vertices joined by their exact distances inside the cell (the
   project's Dijkstra, :func:`roadpubsub.spark_jobs.overlay.cell_shortcuts`), and the cliques of
   runs of 4 and 16 cells (:data:`REGION_SIZES`, searched on the cells' cliques,
   :func:`roadpubsub.spark_jobs.overlay.region_shortcuts`). A shortest path then needs one
   superstep per region or cell crossed: 43 supersteps on Rome at 267 cells with cell
   cliques only, fewer with the regions.
2. Pregel over the overlay (vertices: border vertices), a batch of source cells at a
   time, one double column per source cell (:func:`pregel_columns`): only vertices
   whose distances fell send, the run stops when none did, the state is locally
   checkpointed every other superstep (:func:`run_pregel`).
3. Rows of (D, D_far) from the final distances, reduced as the local path does
   (:func:`rows_from_pregel`).

The result equals the ``dijkstra`` engine bit for bit (rounding: :class:`PregelColumns`).
Needs the GraphFrames JVM package (:func:`graphframes_package`); for a local session,
:data:`GRAPHFRAMES_JAVA_OPTIONS` sizes the JIT's code cache.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from roadpubsub.roadnet.cells import Cells
from roadpubsub.roadnet.errors import InputError, RoadPubSubError
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.spark_jobs.overlay import border_rows, cell_shortcuts, region_shortcuts
from roadpubsub.spark_jobs.payload import broadcast_network, network_and_cells
from roadpubsub.spark_jobs.session import (
    cached_payload,
    jvm_class_problem,
    log,
    session_conf,
    stage,
)

if TYPE_CHECKING:  # pragma: no cover
    from pyspark import Broadcast
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "GRAPHFRAMES_JAVA_OPTIONS",
    "REGION_SIZES",
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
    "run_pregel",
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
    return jvm_class_problem(spark, _GRAPHFRAMES_CLASS, what="GraphFrames JVM",
                             package=graphframes_package(spark.version))


def require_graphframes(spark: SparkSession) -> None:
    """Raise :class:`GraphFramesNotFoundError` (one line) unless GraphFrames can run."""
    problem = graphframes_problem(spark)
    if problem is not None:
        raise GraphFramesNotFoundError(problem)


# ---------------------------------------------------------------------------- overlay
#: JVM options of a local session for this engine: the C1-only JIT of local sessions
#: (:data:`roadpubsub.spark_jobs.session.FAST_START_JAVA_OPTIONS`) caps the code cache at 48 MB,
#: and the code Spark generates for many supersteps of wide rows filled it ("CodeCache is
#: full. Compiler has been disabled", then every query interpreted); 37 MB were in use
#: on Rome at 267 cells. Reserved address space only: memory is used as code is compiled.
GRAPHFRAMES_JAVA_OPTIONS = ("-XX:ReservedCodeCacheSize=256m",)

#: Region sizes (in cells) of the extra shortcut levels: besides each cell's border
#: clique, one clique per run of 4 and of 16 consecutive cells (Z-order, so mostly
#: compact). A superstep then crosses a whole region, which cuts the supersteps of Rome
#: at 267 cells from 43 to about a third (every superstep costs a few Spark jobs).
REGION_SIZES = (4, 16)


def _region_sizes(region_sizes: Sequence[int], n_cells: int) -> list[int]:
    """1 (the cells) and the region sizes below ``n_cells``, ascending; each must divide
    the next so that regions nest."""
    sizes = [1, *sorted({int(g) for g in region_sizes if 1 < int(g) < n_cells})]
    if any(b % a for a, b in itertools.pairwise(sizes)):
        msg = f"region sizes must each divide the next, got {sorted(region_sizes)}"
        raise InputError(msg)
    return sizes


def _shortcuts_task(bc: Broadcast[dict[str, Any]], sizes: Sequence[int]
                    ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """mapInArrow function: top regions (runs of ``sizes[-1]`` consecutive cells) -> the
    shortcut arcs inside them: each cell's clique
    (:func:`roadpubsub.spark_jobs.overlay.cell_shortcuts`) and, for every smaller size, each
    nested region's clique (:func:`roadpubsub.spark_jobs.overlay.region_shortcuts`, searched on its
    cells' cliques)."""
    top = sizes[-1]

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        network, cells = cached_payload(bc, "cells", network_and_cells)
        n = cells.n_cells
        for batch in batches:
            for r in batch.column(0).to_pylist():
                first, stop = int(r) * top, min(int(r) * top + top, n)
                per_cell = [cell_shortcuts(network, cells, c) for c in range(first, stop)]
                parts = list(per_cell)
                for g in sizes[1:]:
                    for lo in range(first, stop, g):
                        own = per_cell[lo - first:min(lo + g, stop) - first]
                        arcs = (np.concatenate([p[0] for p in own]),
                                np.concatenate([p[1] for p in own]),
                                np.concatenate([p[2] for p in own]))
                        parts.append(region_shortcuts(network, cells,
                                                      np.arange(lo, min(lo + g, stop)), arcs))
                yield pa.RecordBatch.from_arrays(
                    [pa.array(np.concatenate([p[0] for p in parts]), pa.int64()),
                     pa.array(np.concatenate([p[1] for p in parts]), pa.int64()),
                     pa.array(np.concatenate([p[2] for p in parts]), pa.float64())],
                    names=["src", "dst", "weight"])

    return run


@dataclass(frozen=True)
class PregelColumns:
    """The Pregel program over the border overlay for one batch of source cells.

    One vertex column per source cell of the batch, ``d0 .. d{k-1}``: the distance in
    metres from that cell's border vertices (0 at them, inf before reached). Plain double
    columns, not an array: every expression below is one of Spark's code-generated ones
    (``+``, ``least``, ``min``), where array lambdas (``transform``, ``zip_with``) are
    interpreted element by element. A vertex is *active* when the last update lowered
    one of its distances (initially: when it borders a source cell); only active vertices
    send, along each shortcut arc, their distances plus the arc's weight (inf beyond the
    limit), folded by a per-column minimum. When no vertex is active the run stops.

    Rounding: every edge length is a multiple of 2**-26 m (:mod:`roadpubsub.roadnet.lengths`), a
    shortcut weight is the exact Dijkstra distance inside its cell (a sum of such
    lengths) and a vertex distance a sum of shortcut weights: all sums of grid values
    below 2**27 m, hence exact in float64 whatever their grouping. So every overlay
    distance is the exact network distance, bit for bit what the dijkstra engine's search
    computes by adding the same edges one at a time; no bound moves by a rounding. (A sum
    beyond 2**27 m, about 134,000 km, could round, but monotonically, and it exceeds
    every admissible Dmax, :func:`roadpubsub.roadnet.lengths.check_dmax`, either way.)

    Attributes
    ----------
    names
        The distance columns, ``d0 .. d{k-1}``.
    init, update
        Initial and update expression of each distance column (update: over the old
        columns and the aggregated message ``Pregel.msg()``).
    init_active, update_active
        Whether a vertex sends in the next superstep.
    message
        Struct ``m0 .. m{k-1}`` sent to each arc's destination.
    aggregate
        Struct of per-field minima of a vertex's messages.
    """

    names: tuple[str, ...]
    init: tuple[Column, ...]
    update: tuple[Column, ...]
    init_active: Column
    update_active: Column
    message: Column
    aggregate: Column


def pregel_columns(base: int, k: int, *, limit: float = math.inf) -> PregelColumns:
    """The Pregel columns for source cells ``base .. base + k - 1`` (GraphFrames names:
    ``Pregel.msg()``, ``Pregel.src(...)``, ``Pregel.edge(...)``)."""
    from graphframes.lib import Pregel
    from pyspark.sql import functions as F  # noqa: N812

    inf = F.lit(math.inf)
    names = tuple(f"d{j}" for j in range(k))
    fields = [f"m{j}" for j in range(k)]
    msg = Pregel.msg()
    weight = Pregel.edge("weight")

    def relax(name: str) -> Column:
        total = Pregel.src(name) + weight
        return total if math.isinf(limit) else F.when(total <= F.lit(limit), total).otherwise(
            inf)

    init = tuple(F.when(F.array_contains(F.col("cells"), F.lit(base + j)), F.lit(0.0))
                 .otherwise(inf) for j in range(k))
    # least() skips nulls: a vertex without messages (null struct) keeps its distances.
    update = tuple(F.least(F.col(n), msg[f]) for n, f in zip(names, fields, strict=True))
    lowered = [F.coalesce(msg[f] < F.col(n), F.lit(False))
               for n, f in zip(names, fields, strict=True)]
    return PregelColumns(
        names=names,
        init=init,
        update=update,
        init_active=F.exists(F.col("cells"), lambda c: (c >= base) & (c < base + k)),
        update_active=F.greatest(*lowered) if k > 1 else lowered[0],
        message=F.struct(*[relax(n).alias(f) for n, f in zip(names, fields, strict=True)]),
        aggregate=F.struct(*[F.min(msg[f]).alias(f) for f in fields]),
    )


def overlay_arcs_frame(spark: SparkSession, network: RoadNetwork, cells: Cells, *,
                       partitions: int | None = None,
                       region_sizes: Sequence[int] = REGION_SIZES) -> DataFrame:
    """Shortcut arcs ``src``, ``dst`` (node indices), ``weight`` (metres) of the border
    overlay, computed in the tasks: each cell's border clique
    (:func:`roadpubsub.spark_jobs.overlay.cell_shortcuts`) and, for each size in ``region_sizes``,
    the clique of each run of that many consecutive cells (its border vertices, a subset
    of the cells', joined by exact distances inside the run); the lightest arc per
    (src, dst).

    Every arc weighs the length of a real path and every cell's clique is there, so the
    overlay distances are the network distances whatever the regions (they only shorten
    the supersteps' count).
    """
    from pyspark.sql import functions as F  # noqa: N812

    n = cells.n_cells
    sizes = _region_sizes(region_sizes, n)
    n_top = -(-n // sizes[-1])
    parts = partitions or min(n_top, 4 * spark.sparkContext.defaultParallelism)
    bc = broadcast_network(spark, network, cells)
    return (spark.range(0, n_top, 1, max(1, min(parts, n_top)))
            .mapInArrow(_shortcuts_task(bc, sizes), "src long, dst long, weight double")
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
    ``d0 .. d{k-1}``), reduced as :func:`roadpubsub.spark_jobs.overlay.border_rows` does."""
    vertices = np.flatnonzero(cells.node_is_border).astype(np.int64)
    ids = np.asarray(result.column("id").to_numpy(), dtype=np.int64)
    dist_at = np.full((vertices.size, k), np.inf)
    at = np.searchsorted(vertices, ids)
    for j in range(k):
        dist_at[at, j] = result.column(f"d{j}").to_numpy()
    at_border = np.searchsorted(vertices, cells.border_nodes)
    D = np.empty((k, cells.n_cells))
    D_far = np.empty((k, cells.n_cells))
    for j in range(k):
        D[j], D_far[j] = border_rows(cells, dist_at[at_border, j], base + j, limit=limit)
    return D, D_far


def run_pregel(graph: Any, cols: PregelColumns, *, max_iter: int) -> DataFrame:
    """GraphFrames Pregel of ``cols`` on ``graph``: only active vertices join the arcs,
    the run stops when none is active, and the vertex state is locally checkpointed every
    other superstep (cuts the lineage)."""
    pregel = (graph.pregel
              .setMaxIter(max_iter)
              .setEarlyStopping(False)
              .setStopIfAllNonActiveVertices(True)
              .setInitialActiveVertexExpression(cols.init_active)
              .setUpdateActiveVertexExpression(cols.update_active)
              .setSkipMessagesFromNonActiveVertices(True)
              .setUseLocalCheckpoints(True)
              .setCheckpointInterval(2))
    for name, init, update in zip(cols.names, cols.init, cols.update, strict=True):
        pregel = pregel.withVertexColumn(name, init, update)
    return (pregel.sendMsgToDst(cols.message)
            .aggMsgs(cols.aggregate)
            .required_src_columns(*cols.names)
            .required_edge_columns("weight")
            .run())


def graphframes_tables(spark: SparkSession, network: RoadNetwork, cells: Cells, *,
                       limit: float, partitions: int | None, batch_cells: int
                       ) -> tuple[FloatArray, FloatArray]:
    """(D, D_far) through the border overlay and GraphFrames Pregel.

    The overlay is small (Rome at 267 cells: 5,135 vertices), so the supersteps shuffle
    into a few partitions (2 per core) instead of the session's
    ``spark.sql.shuffle.partitions`` (200 by default: 200 tasks of nothing per
    superstep), and code generation is allowed for the batch's wide rows; both settings
    are restored afterwards.
    """
    require_graphframes(spark)
    from graphframes import GraphFrame
    from pyspark.storagelevel import StorageLevel

    n = cells.n_cells
    # Whole-stage code generation covers plans of at most spark.sql.codegen.maxFields
    # fields (100 by default); past it Spark interprets every expression row by row,
    # and a superstep's triplets carry about 2 * batch_cells fields.
    settings = {"spark.sql.shuffle.partitions":
                str(max(2, 2 * spark.sparkContext.defaultParallelism)),
                "spark.sql.codegen.maxFields": str(max(100, 4 * min(batch_cells, n) + 50))}
    with session_conf(spark, settings):
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
        # Batches of equal size (267 cells at most 256 a batch: 2 of 133-134, not 256 + 11).
        n_batches = -(-n // batch_cells)
        starts = [b * n // n_batches for b in range(n_batches + 1)]
        for base, stop in itertools.pairwise(starts):
            k = stop - base
            cols = pregel_columns(base, k, limit=limit)
            with stage(spark, f"precompute-bounds: Pregel over the overlay, source cells "
                              f"{base}..{base + k - 1} of {n}"):
                result = run_pregel(graph, cols, max_iter=n_vertices + 1)
                table = result.select("id", *cols.names).toArrow()
                result.unpersist()
            D[base:base + k], D_far[base:base + k] = rows_from_pregel(cells, table, base, k,
                                                                      limit=limit)
        arcs.unpersist()
        vdf.unpersist()
    return D, D_far
