"""The bound table's ``dijkstra`` engine: one border Dijkstra per cell in the Spark tasks.

The network and its cells are broadcast (:func:`roadpubsub.spark_jobs.payload.broadcast_network`);
each task runs :func:`roadpubsub.roadnet.cell_bounds.border_distance_row` (one multi-source
Dijkstra, the very function of the local path) for a batch of cell ids, so the rows equal
the local ones bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from roadpubsub.roadnet.cell_bounds import border_distance_row
from roadpubsub.roadnet.cells import Cells
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.spark_jobs.bound_table import ROW_SCHEMA, rows_batch
from roadpubsub.spark_jobs.payload import broadcast_network, cell_ids_frame, network_and_cells
from roadpubsub.spark_jobs.session import cached_payload

if TYPE_CHECKING:  # pragma: no cover
    from pyspark import Broadcast
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["dijkstra_rows"]


def _dijkstra_rows_task(bc: Broadcast[dict[str, Any]], limit: float
                        ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """mapInArrow function: cell ids -> their table rows via border_distance_row.

    The rows are computed exactly as :func:`roadpubsub.roadnet.cell_bounds.compute_cell_bounds`
    does,
    with :func:`~roadpubsub.roadnet.cell_bounds.border_distance_row`'s own default search (on the
    cell graph), so they are bit-identical to the local table.
    """

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        network, cells = cached_payload(bc, "cells", network_and_cells)
        for batch in batches:
            ids = np.asarray(batch.column(0).to_numpy(zero_copy_only=False), dtype=np.int64)
            rows, fars = [], []
            for c in ids.tolist():
                row, far = border_distance_row(network, cells, c, limit=limit)
                rows.append(row.copy())
                fars.append(far.copy())
            yield rows_batch(ids.tolist(), rows, fars, cells.n_cells)

    return run


def dijkstra_rows(spark: SparkSession, network: RoadNetwork, cells: Cells, *,
                  limit: float = math.inf, partitions: int | None = None) -> DataFrame:
    """The table's rows as a (lazy) DataFrame, one border Dijkstra per cell in the tasks.

    Parameters
    ----------
    limit
        Search radius in metres (``inf``: exact table).
    partitions
        Spark tasks (default: 4 per core, at most one per cell).
    """
    bc = broadcast_network(spark, network, cells)
    return cell_ids_frame(spark, cells.n_cells, partitions).mapInArrow(
        _dijkstra_rows_task(bc, float(limit)), ROW_SCHEMA)
