"""Spark job: the cell-pair distance bound table of a road network, written to Parquet.

The table is what :func:`roadnet.cell_bounds.compute_cell_bounds` computes in one
process: for every ordered cell pair (i, j) the least (``D``) and largest reached
(``D_far``) network distance in metres from a border vertex of cell i to one of cell j.

Engines
-------
``dijkstra`` (default)
    The network and its cells are broadcast; each Spark task runs
    :func:`roadnet.cell_bounds.border_distance_row` (one multi-source Dijkstra, the very
    function of the local path) for a batch of cell ids. The rows equal the local ones
    bit for bit.
``graphframes``
    Tasks compute each cell's border-to-border shortcuts
    (:func:`spark_jobs.overlay.cell_shortcuts`); GraphFrames Pregel then runs multi-source
    shortest paths over the small border overlay, a batch of source cells at a time
    (vertex state: one distance per source cell of the batch). Needs the GraphFrames JVM
    package (:func:`graphframes_package`); equal to ``dijkstra`` bit for bit when edge
    lengths are integers, else to the last bits (see :mod:`spark_jobs.overlay`).
    Iterating joins over the raw road graph instead would take hundreds of supersteps.

Output layout (a directory)
---------------------------
``part-*.parquet``
    Rows ``cell_i`` int32, ``cell_j`` int32, ``D`` float64 (inf: unreachable),
    ``D_far`` float64 (NaN: no border vertex of j reached), one per ordered pair.
``_roadpubsub_bounds.json``
    Format version, engine, search limit, the network's fingerprint (node and edge
    counts, direction, SHA-256 of the edge arrays) and the cells' (count, capacity,
    SHA-256 of the cell assignment and border vertices). Parquet readers skip it.

The per-node border distances (``din_out``/``din_in``) are not stored: they cost two
Dijkstras and :func:`load_bounds_table` recomputes them through
:meth:`roadnet.cell_bounds.CellBounds.from_rows`, the local path's own assembly, which
also derives the Euclidean tables and eta bounds from the cells. A re-run replaces the
directory atomically (:func:`spark_jobs.session.atomic_output_dir`).

Examples
--------
Precompute on every local core, then build an index on the table::

    spark-submit spark_jobs/precompute_bounds.py ../shared/data/dimacs/rome.gr.gz \\
        --out rome.bounds
    roadpubsub spark precompute-bounds ../shared/data/dimacs/rome.gr.gz --out rome.bounds

    >>> cells = build_cells(network)                                 # doctest: +SKIP
    >>> spatial = SpatialIndex.build(network, cells=cells,
    ...                              bounds=load_bounds_table("rome.bounds", network, cells))
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from roadnet.cell_bounds import CellBounds, border_distance_row
from roadnet.cells import Cells, build_cells
from roadnet.errors import InputError, RoadPubSubError
from roadnet.files import check_output_path
from roadnet.network import RoadNetwork
from roadnet.settings import DEFAULTS
from spark_jobs.overlay import border_rows, cell_shortcuts
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
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "BOUNDS_META_FILE",
    "ENGINES",
    "BoundsTableError",
    "GraphFramesNotFoundError",
    "PregelColumns",
    "add_arguments",
    "build_parser",
    "cells_fingerprint",
    "cells_from_payload",
    "cells_payload",
    "dijkstra_rows",
    "graphframes_package",
    "graphframes_problem",
    "load_bounds_table",
    "main",
    "network_fingerprint",
    "network_from_payload",
    "network_payload",
    "overlay_arcs_frame",
    "overlay_vertices_frame",
    "precompute_cell_bounds",
    "pregel_columns",
    "read_bounds_rows",
    "require_graphframes",
    "rows_from_pregel",
    "run",
    "write_bounds_table",
]

FloatArray = npt.NDArray[np.float64]

#: Engines of the job.
ENGINES = ("dijkstra", "graphframes")
#: Name of the metadata file inside a table directory.
BOUNDS_META_FILE = "_roadpubsub_bounds.json"
_FORMAT = "roadpubsub-cell-bounds"
_VERSION = 1
_ROW_SCHEMA = "cell_i int, cell_j int, D double, D_far double"
_GRAPHFRAMES_CLASS = "org.graphframes.GraphFramePythonAPI"
#: GraphFrames release assumed when graphframes-py is not installed (the pinned one).
_GRAPHFRAMES_FALLBACK_VERSION = "0.12.3"


class BoundsTableError(InputError):
    """A bound table that is missing, corrupt, or made for another network or cells."""


class GraphFramesNotFoundError(RoadPubSubError, RuntimeError):
    """The GraphFrames JVM classes (or Python package) are not available to Spark."""

    hint = "see https://graphframes.io/02-quick-start/01-installation.html"


# ---------------------------------------------------------------------------- payloads
def network_payload(network: RoadNetwork) -> dict[str, Any]:
    """The network's arrays and attributes (for a broadcast)."""
    return dict(network.to_arrays())


def network_from_payload(payload: dict[str, Any]) -> RoadNetwork:
    """Inverse of :func:`network_payload`."""
    return RoadNetwork(**payload)


def cells_payload(cells: Cells) -> dict[str, Any]:
    """The cells' arrays (for a broadcast)."""
    return dict(cells.to_arrays())


def cells_from_payload(payload: dict[str, Any]) -> Cells:
    """Inverse of :func:`cells_payload`."""
    return Cells.from_arrays(payload)


def _network_and_cells(payload: dict[str, Any]) -> tuple[RoadNetwork, Cells]:
    return network_from_payload(payload["network"]), cells_from_payload(payload["cells"])


# ---------------------------------------------------------------------------- fingerprints
def _sha256(*arrays: npt.NDArray[Any]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        arr = np.ascontiguousarray(a)
        h.update(str(arr.dtype).encode())
        h.update(str(arr.shape).encode())
        h.update(arr.tobytes())
    return h.hexdigest()


def network_fingerprint(network: RoadNetwork) -> dict[str, Any]:
    """Node and edge counts, direction and a SHA-256 of the edge arrays."""
    return {"name": network.name, "n_nodes": network.n_nodes, "n_edges": network.n_edges,
            "directed": bool(network.directed),
            "sha256": _sha256(network.edge_u, network.edge_v, network.edge_length,
                              network.edge_oneway)}


def cells_fingerprint(cells: Cells, *, capacity: int | None = None,
                      max_depth: int | None = None) -> dict[str, Any]:
    """Cell count, the quadtree settings when known and a SHA-256 of the partition."""
    return {"n_cells": cells.n_cells, "capacity": capacity, "max_depth": max_depth,
            "sha256": _sha256(cells.edge_cell, cells.border_ptr, cells.border_nodes)}


# ---------------------------------------------------------------------------- GraphFrames
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


# ---------------------------------------------------------------------------- tasks
def _rows_batch(cell_i: Sequence[int], rows: Sequence[FloatArray], fars: Sequence[FloatArray],
                n_cells: int) -> pa.RecordBatch:
    """Long-format rows (cell_i, cell_j, D, D_far) of whole table rows."""
    k = len(cell_i)
    return pa.RecordBatch.from_arrays(
        [pa.array(np.repeat(np.asarray(cell_i, dtype=np.int32), n_cells)),
         pa.array(np.tile(np.arange(n_cells, dtype=np.int32), k)),
         pa.array(np.concatenate(rows) if k else np.empty(0), type=pa.float64()),
         pa.array(np.concatenate(fars) if k else np.empty(0), type=pa.float64())],
        names=["cell_i", "cell_j", "D", "D_far"])


def _dijkstra_rows_task(bc: Broadcast[dict[str, Any]], limit: float
                        ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """mapInArrow function: cell ids -> their table rows via border_distance_row.

    The rows are computed exactly as :func:`roadnet.cell_bounds.compute_cell_bounds` does,
    with :func:`~roadnet.cell_bounds.border_distance_row`'s own default search (on the
    cell graph), so they are bit-identical to the local table.
    """

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        network, cells = cached_payload(bc, "cells", _network_and_cells)
        for batch in batches:
            ids = np.asarray(batch.column(0).to_numpy(zero_copy_only=False), dtype=np.int64)
            rows, fars = [], []
            for c in ids.tolist():
                row, far = border_distance_row(network, cells, c, limit=limit)
                rows.append(row.copy())
                fars.append(far.copy())
            yield _rows_batch(ids.tolist(), rows, fars, cells.n_cells)

    return run


def _shortcuts_task(bc: Broadcast[dict[str, Any]]
                    ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """mapInArrow function: cell ids -> their border-to-border shortcut arcs."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        network, cells = cached_payload(bc, "cells", _network_and_cells)
        for batch in batches:
            for c in batch.column(0).to_pylist():
                src, dst, w = cell_shortcuts(network, cells, int(c))
                yield pa.RecordBatch.from_arrays(
                    [pa.array(src, pa.int64()), pa.array(dst, pa.int64()),
                     pa.array(w, pa.float64())], names=["src", "dst", "weight"])

    return run


def _cell_ids(spark: SparkSession, n_cells: int, partitions: int | None) -> DataFrame:
    parts = partitions or min(n_cells, 4 * spark.sparkContext.defaultParallelism)
    return spark.range(0, n_cells, 1, max(1, min(parts, n_cells)))


def _broadcast_network(spark: SparkSession, network: RoadNetwork, cells: Cells
                       ) -> Broadcast[dict[str, Any]]:
    return broadcast_payload(spark, {"network": network_payload(network),
                                     "cells": cells_payload(cells)})


def dijkstra_rows(spark: SparkSession, network: RoadNetwork, cells: Cells, *,
                  limit: float = math.inf, partitions: int | None = None) -> DataFrame:
    """The table's rows as a (lazy) DataFrame, one border Dijkstra per cell in the tasks."""
    bc = _broadcast_network(spark, network, cells)
    return _cell_ids(spark, cells.n_cells, partitions).mapInArrow(
        _dijkstra_rows_task(bc, float(limit)), _ROW_SCHEMA)


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

    bc = _broadcast_network(spark, network, cells)
    return (_cell_ids(spark, cells.n_cells, partitions)
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


def _graphframes_tables(spark: SparkSession, network: RoadNetwork, cells: Cells, *,
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


def _table_from_rows(rows: pa.Table, n: int) -> tuple[FloatArray, FloatArray]:
    """Dense (D, D_far) from long rows, checking that every pair is there once."""
    i = np.asarray(rows.column("cell_i").to_numpy(), dtype=np.int64)
    j = np.asarray(rows.column("cell_j").to_numpy(), dtype=np.int64)
    if i.size != n * n or (i.size and (i.min() < 0 or j.min() < 0 or i.max() >= n
                                       or j.max() >= n)):
        msg = f"expected {n * n} rows (cell pairs of {n} cells), found {i.size}"
        raise BoundsTableError(msg)
    key = i * n + j
    if np.bincount(key, minlength=n * n).max(initial=0) > 1:
        msg = "duplicate cell pairs in the bound table"
        raise BoundsTableError(msg)
    D = np.empty(n * n)
    D_far = np.empty(n * n)
    D[key] = rows.column("D").to_numpy()
    D_far[key] = rows.column("D_far").to_numpy()
    return D.reshape(n, n), D_far.reshape(n, n)


# ---------------------------------------------------------------------------- public API
def precompute_cell_bounds(
    spark: SparkSession,
    network: RoadNetwork,
    cells: Cells,
    *,
    engine: str = "dijkstra",
    limit: float = math.inf,
    partitions: int | None = None,
    batch_cells: int = 64,
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
        Source cells per Pregel run (graphframes engine).

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
        return _graphframes_tables(spark, network, cells, limit=limit, partitions=partitions,
                                   batch_cells=batch_cells)
    with stage(spark, f"precompute-bounds: {cells.n_cells} border Dijkstras (dijkstra engine)"):
        rows = dijkstra_rows(spark, network, cells, limit=limit,
                             partitions=partitions).toArrow()
    return _table_from_rows(rows, cells.n_cells)


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
    batch_cells: int = 64,
) -> Path:
    """Compute the table on Spark and write it to the directory ``out`` (atomically).

    ``capacity`` and ``max_depth`` are only recorded (the cells are given). See
    :func:`precompute_cell_bounds` for the other parameters.

    Returns
    -------
    Path
        The output directory.
    """
    _check_engine(engine)
    t0 = time.perf_counter()
    target = Path(out)
    with atomic_output_dir(target) as tmp:
        if engine == "dijkstra":
            df = dijkstra_rows(spark, network, cells, limit=limit, partitions=partitions)
        else:
            D, D_far = _graphframes_tables(spark, network, cells, limit=limit,
                                           partitions=partitions, batch_cells=batch_cells)
            n = cells.n_cells
            rows = [np.asarray(D[i]) for i in range(n)]
            fars = [np.asarray(D_far[i]) for i in range(n)]
            df = spark.createDataFrame(pa.Table.from_batches(
                [_rows_batch(list(range(n)), rows, fars, n)]))
        with stage(spark, f"precompute-bounds: {cells.n_cells} rows ({engine} engine) "
                          f"-> {target}"):
            df.write.mode("errorifexists").parquet(str(tmp))
        meta = {
            "format": _FORMAT, "version": _VERSION, "engine": engine,
            "limit_m": None if math.isinf(limit) else float(limit),
            "network": network_fingerprint(network),
            "cells": cells_fingerprint(cells, capacity=capacity, max_depth=max_depth),
            "seconds": round(time.perf_counter() - t0, 3),
        }
        (tmp / BOUNDS_META_FILE).write_text(json.dumps(meta, indent=1) + "\n",
                                            encoding="utf-8")
    return target


def read_bounds_rows(path: str | Path) -> tuple[dict[str, Any], FloatArray, FloatArray]:
    """(metadata, D, D_far) of a table directory, without checking it against a network.

    Raises
    ------
    FileNotFoundError
        No such directory.
    BoundsTableError
        Not a table written by this job, an unsupported version, or missing/duplicate rows.
    """
    import pyarrow.parquet as pq

    p = Path(path)
    if not p.exists():
        msg = f"bound table not found: {p}"
        raise FileNotFoundError(msg)
    meta_path = p / BOUNDS_META_FILE
    if not meta_path.is_file():
        msg = (f"{p} is not a cell-bound table written by 'roadpubsub spark "
               f"precompute-bounds' (no {BOUNDS_META_FILE})")
        raise BoundsTableError(msg)
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        msg = f"{meta_path}: unreadable metadata ({exc})"
        raise BoundsTableError(msg) from exc
    if meta.get("format") != _FORMAT or meta.get("version") != _VERSION:
        msg = (f"{p}: unsupported bound table format {meta.get('format')!r} version "
               f"{meta.get('version')!r} (expected {_FORMAT!r} version {_VERSION})")
        raise BoundsTableError(msg)
    try:
        rows = pq.read_table(p, columns=["cell_i", "cell_j", "D", "D_far"])
    except (pa.ArrowException, OSError) as exc:
        msg = f"{p}: cannot read the bound table rows ({exc})"
        raise BoundsTableError(msg) from exc
    n = int(meta["cells"]["n_cells"])
    try:
        D, D_far = _table_from_rows(rows, n)
    except BoundsTableError as exc:
        msg = f"{p}: {exc}"
        raise BoundsTableError(msg) from exc
    return meta, D, D_far


def load_bounds_table(path: str | Path, network: RoadNetwork, cells: Cells) -> CellBounds:
    """Read a table written by :func:`write_bounds_table` as :class:`CellBounds`.

    The table must have been computed for this network and these cells: a table of another
    network (different counts or edge arrays, or direction) or of other cells (e.g. another
    ``capacity``) is rejected. The per-node border distances are recomputed here (two
    Dijkstras; see the module docstring).

    Raises
    ------
    FileNotFoundError
        No such directory.
    BoundsTableError
        Not a bound table, or one made for another network or cells.
    """
    meta, D, D_far = read_bounds_rows(path)
    want_net = network_fingerprint(network)
    have_net = meta.get("network", {})
    diffs = [f"{k} {have_net.get(k)!r} != {want_net[k]!r}"
             for k in ("n_nodes", "n_edges", "directed") if have_net.get(k) != want_net[k]]
    if not diffs and have_net.get("sha256") != want_net["sha256"]:
        diffs.append("edge arrays differ (SHA-256)")
    if diffs:
        msg = (f"{path}: bound table was computed for another network "
               f"({have_net.get('name')!r}; {'; '.join(diffs)}), not {network.name!r}")
        raise BoundsTableError(msg)
    want_cells = cells_fingerprint(cells)
    have_cells = meta.get("cells", {})
    if (have_cells.get("n_cells") != want_cells["n_cells"]
            or have_cells.get("sha256") != want_cells["sha256"]):
        msg = (f"{path}: bound table was computed for other cells ({have_cells.get('n_cells')} "
               f"cells, capacity {have_cells.get('capacity')}) than the given "
               f"{want_cells['n_cells']} cells; rebuild the cells with the table's capacity "
               f"or recompute the table")
        raise BoundsTableError(msg)
    return CellBounds.from_rows(network, cells, D, D_far)


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
    parser.add_argument("network", help="road network file (any format roadnet.io reads)")
    parser.add_argument("--out", required=True, help="output directory of the table")
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
    parser.add_argument("--batch-cells", type=int, default=64,
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
    from roadnet.io import load_network

    if args.capacity < 1 or (args.partitions is not None and args.partitions < 1) \
            or args.batch_cells < 1 or not args.limit > 0:
        msg = "--cell-capacity, --partitions and --batch-cells must be >= 1 and --limit > 0"
        raise InputError(msg)
    if "://" not in args.out:  # a local path: check it before any work
        check_output_path(args.out, folder=True, what="--out", inputs=(args.network,))
    t0 = time.perf_counter()
    network = load_network(args.network, directed=args.directed)
    cells = build_cells(network, capacity=args.capacity, max_depth=args.max_depth)
    log(f"{network.name}: {network.n_nodes} nodes, {network.n_edges} edges, "
        f"{cells.n_cells} cells (capacity {args.capacity}) in {time.perf_counter() - t0:.1f} s")
    spark = session_from_args(args, app_name="roadpubsub precompute-bounds")
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
    from spark_jobs.precompute_bounds import main as _main

    sys.exit(_main())
