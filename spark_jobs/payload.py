"""Networks and cells as Spark broadcasts, and the per-cell task frame.

A broadcast carries plain arrays (:meth:`roadpubsub.roadnet.network.RoadNetwork.to_arrays`,
:meth:`roadpubsub.roadnet.cells.Cells.to_arrays`); each Python worker rebuilds the objects once per
broadcast (:func:`roadpubsub.spark_jobs.session.cached_payload`). The per-cell jobs (the bound
table's engines, :mod:`roadpubsub.spark_jobs.batch_match`) start from :func:`cell_ids_frame`.

Examples
--------
>>> from roadpubsub.roadnet.network import RoadNetwork
>>> net = RoadNetwork.from_arrays(node_ids=[1, 2], node_lon=[0.0, 0.001],
...                               node_lat=[0.0, 0.0], edge_u_ids=[1], edge_v_ids=[2],
...                               edge_length=[111.0])
>>> network_from_payload(network_payload(net)).n_edges
1
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from roadpubsub.roadnet.cells import Cells
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.spark_jobs.session import broadcast_payload

if TYPE_CHECKING:  # pragma: no cover
    from pyspark import Broadcast
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "broadcast_network",
    "cell_ids_frame",
    "cells_from_payload",
    "cells_payload",
    "network_and_cells",
    "network_from_payload",
    "network_payload",
]


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


def broadcast_network(spark: SparkSession, network: RoadNetwork, cells: Cells
                      ) -> Broadcast[dict[str, Any]]:
    """One broadcast of the network and its cells (read back by :func:`network_and_cells`)."""
    return broadcast_payload(spark, {"network": network_payload(network),
                                     "cells": cells_payload(cells)})


def network_and_cells(payload: dict[str, Any]) -> tuple[RoadNetwork, Cells]:
    """(network, cells) of a :func:`broadcast_network` payload, inside a task."""
    return network_from_payload(payload["network"]), cells_from_payload(payload["cells"])


def cell_ids_frame(spark: SparkSession, n_cells: int, partitions: int | None) -> DataFrame:
    """Cell ids ``0 .. n_cells - 1`` (column ``id``) in ``partitions`` tasks (default: 4 per
    core, at most one per cell)."""
    parts = partitions or min(n_cells, 4 * spark.sparkContext.defaultParallelism)
    return spark.range(0, n_cells, 1, max(1, min(parts, n_cells)))
