"""The cell-pair bound table as a distributed DataFrame, sliced per partition.

The dense ``cells x cells`` arrays are never broadcast: the table stays a DataFrame of
rows (``cell_i``, ``cell_j``, ``D``, ``D_far``;
:data:`roadpubsub.spark_jobs.bound_table.ROW_SCHEMA`)
and each partition of a job receives, by a shuffle keyed like its subscriptions, only
the rows it needs:

* ``by="col"``: rows whose ``cell_j`` is one of the partition's cells. Routing a message
  of cell cm reads the column ``D[:, cm]`` (Lemma 2 for every cell).
* ``by="row"``: rows whose ``cell_i`` is one of the partition's cells. Matching reads
  ``D[c, cm]`` only for the cells c holding the partition's subscriptions.

A task assembles its slice into a :class:`~roadpubsub.roadnet.cell_bounds.CellBounds` with the local
path's own :meth:`~roadpubsub.roadnet.cell_bounds.CellBounds.from_rows` (the eta bounds are
elementwise in D, so a slice gives the very values of the whole table on the entries it
holds). Entries outside the slice are left unknown (D = inf) and are never read: a cell
of another partition holds none of this partition's subscriptions (its DNlimit is -inf
in the partition's index), and a routed column is complete. A slice that misses one of
its entries, or has one twice, is refused
(:class:`~roadpubsub.spark_jobs.bound_table.BoundsTableError`).

Each of the two shuffles moves the table once in total (``n_cells**2`` rows over all
partitions), where a broadcast would copy all of it to every executor; a task holds
``n_cells**2`` floats while it assembles (the matcher's kernels take whole columns).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.roadnet.cell_bounds import CellBounds
from roadpubsub.roadnet.cells import Cells
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.spark_jobs import storage, storage_paths
from roadpubsub.spark_jobs.bound_table import (
    BOUNDS_META_FILE,
    ROW_SCHEMA,
    BoundsTableError,
    check_bounds_format,
    check_bounds_meta,
)

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["bounds_frame", "keyed_bounds", "read_bounds_frame", "slice_spatial"]


def bounds_frame(spark: SparkSession, bounds: CellBounds) -> DataFrame:
    """The rows of a table held in memory (shipped from the driver: for notebooks and
    tests; files go through :func:`read_bounds_frame`)."""
    n = bounds.n_cells
    i, j = np.divmod(np.arange(n * n, dtype=np.int64), n)
    table = pa.table({"cell_i": pa.array(i.astype(np.int32)),
                      "cell_j": pa.array(j.astype(np.int32)),
                      "D": pa.array(np.asarray(bounds.D).ravel(), pa.float64()),
                      "D_far": pa.array(np.asarray(bounds.D_far).ravel(), pa.float64())})
    return spark.createDataFrame(table, schema=ROW_SCHEMA)


def read_bounds_frame(spark: SparkSession, path: str, network: RoadNetwork, cells: Cells
                      ) -> DataFrame:
    """The rows of a table directory (local path or URL) as a lazy DataFrame.

    Only the small metadata file is read on the driver, to refuse a table of another
    network or other cells before any work; the rows are read by the executors.

    Raises
    ------
    FileNotFoundError
        No such directory.
    BoundsTableError
        Not a bound table, or one made for another network or cells.
    """
    if not storage_paths.exists(spark, path):
        msg = f"bound table not found: {path}"
        raise FileNotFoundError(msg)
    meta_path = path.rstrip("/") + "/" + BOUNDS_META_FILE
    if not storage_paths.exists(spark, meta_path):
        msg = (f"{path} is not a cell-bound table written by 'roadpubsub spark "
               f"precompute-bounds' (no {BOUNDS_META_FILE})")
        raise BoundsTableError(msg)
    try:
        meta = json.loads(storage.read_text(meta_path, spark=spark))
    except (OSError, json.JSONDecodeError) as exc:
        msg = f"{meta_path}: unreadable metadata ({exc})"
        raise BoundsTableError(msg) from exc
    check_bounds_format(meta, path)
    check_bounds_meta(meta, path, network, cells)
    return spark.read.schema(ROW_SCHEMA).parquet(storage_paths.spark_uri(path))


def keyed_bounds(spark: SparkSession, rows: DataFrame, cell_key: npt.NDArray[np.int32], *,
                 by: str) -> DataFrame:
    """Rows with the partition ``key`` of their ``cell_i`` (``by="row"``) or ``cell_j``
    (``by="col"``); ``cell_key`` (one int per cell, small) is joined as a broadcast."""
    from pyspark.sql import functions as F  # noqa: N812

    column = {"row": "cell_i", "col": "cell_j"}[by]
    keys = spark.createDataFrame(pa.table({
        column: pa.array(np.arange(cell_key.size, dtype=np.int32)),
        "key": pa.array(np.asarray(cell_key, dtype=np.int32))}))
    return rows.join(F.broadcast(keys), column)


def slice_spatial(network: RoadNetwork, cells: Cells, rows: pa.Table,
                  part_cells: npt.NDArray[np.int64], *, by: str, where: str
                  ) -> SpatialIndex:
    """A SpatialIndex on the slice ``rows`` of a partition holding ``part_cells``.

    Raises
    ------
    BoundsTableError
        The slice misses an entry or holds one twice (``where`` names the table).
    """
    n = cells.n_cells
    i = np.asarray(rows.column("cell_i").to_numpy(), dtype=np.int64)
    j = np.asarray(rows.column("cell_j").to_numpy(), dtype=np.int64)
    if i.size and (min(i.min(), j.min()) < 0 or max(i.max(), j.max()) >= n):
        msg = f"{where}: cell ids outside 0..{n - 1} in the bound table"
        raise BoundsTableError(msg)
    key = i * n + j
    count = np.bincount(key, minlength=n * n).reshape(n, n)
    want = count[part_cells, :] if by == "row" else count[:, part_cells]
    if (want.size and (want.min() != 1 or want.max() != 1)) or key.size != want.size:
        msg = (f"{where}: the bound table misses cell pairs or holds some twice "
               f"(cells {part_cells[:5].tolist()}...: {int((want == 0).sum())} missing, "
               f"{int((want > 1).sum())} repeated)")
        raise BoundsTableError(msg)
    D = np.full(n * n, np.inf)
    D_far = np.full(n * n, np.nan)
    D[key] = rows.column("D").to_numpy()
    D_far[key] = rows.column("D_far").to_numpy()
    bounds = CellBounds.from_rows(network, cells, D.reshape(n, n), D_far.reshape(n, n))
    return SpatialIndex.build(network, cells=cells, bounds=bounds)
